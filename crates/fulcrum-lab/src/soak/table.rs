//! The soak's figures over time: Fulcrum's resident memory and open descriptors sampled every
//! second, a row every 10 s, and the growth verdict after warm-up.
//!
//! Descriptors are sockets and pipes. Sockets follow the connections in flight, so one sample
//! can sit several above or below the trend at any moment; a leak is a floor that rises, so each
//! 10 s window after warm-up is judged by its lowest sample, against the highest sample of the
//! warm-up's last 10 s: a burst of connections does not fail the run, a level that has grown by
//! more than 10% does. Memory is judged the same way. Pipes are Fulcrum's splice buffers: it keeps
//! up to `SPARE_PIPES` empty ones per runtime thread for reuse, a cache that grows in steps
//! whenever more transfers than ever before hold a pipe at once, for minutes into a run. They are
//! judged against that bound instead: spare pipes plus two per proxied connection (one per
//! direction, and a connection has two sockets), so a pipe leak fails the run once it outgrows
//! the cache.

use std::time::Duration;

/// Allowed growth after warm-up, as a fraction.
pub const GROWTH: f64 = 0.10;
/// Empty splice pipes Fulcrum keeps per runtime thread (`PIPES_KEPT` in its `proxy::splice`).
pub const SPARE_PIPES: u64 = 64;

/// One sample of the Fulcrum process.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Duration,
    pub rss_kib: u64,
    pub fds: u64,
    pub sockets: u64,
    /// Pipe descriptors (two per pipe).
    pub pipes: u64,
}

impl Sample {
    pub fn of(pid: u32, at: Duration) -> Sample {
        let (mut fds, mut sockets, mut pipes) = (0, 0, 0);
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
            fds += 1;
            // A descriptor that closed since the listing has no link: counted, of no kind.
            let target = std::fs::read_link(entry.path()).map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
            sockets += u64::from(target.starts_with("socket:"));
            pipes += u64::from(target.starts_with("pipe:"));
        }
        Sample { at, rss_kib: crate::procs::Usage::of(pid).rss_kib, fds, sockets, pipes }
    }

    /// The most pipe descriptors Fulcrum may hold with `workers` runtime threads: the spare ones,
    /// and two pipes (four descriptors) per proxied connection, which holds two sockets.
    pub fn pipe_bound(&self, workers: u64) -> u64 {
        2 * SPARE_PIPES * workers + 2 * self.sockets
    }
}

/// One printed row.
#[derive(Debug, Clone)]
pub struct Row {
    pub at: Duration,
    pub requests: [u64; 3],
    pub healthy_errors: usize,
    pub chaos_errors: usize,
    pub reloads: u64,
    pub rss_kib: u64,
    pub fds: u64,
    pub sockets: u64,
    pub pipes: u64,
}

pub const HEADER: &str = "| elapsed | tcp requests | http requests | ftp sessions | errors to healthy servers | errors in chaos windows | reloads | RSS (MiB) | open fds | sockets | pipe fds |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

impl Row {
    pub fn markdown(&self) -> String {
        format!(
            "| {} s | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} |",
            self.at.as_secs(),
            self.requests[0],
            self.requests[1],
            self.requests[2],
            self.healthy_errors,
            self.chaos_errors,
            self.reloads,
            self.rss_kib as f64 / 1024.0,
            self.fds,
            self.sockets,
            self.pipes
        )
    }
}

/// How one figure moved after warm-up.
#[derive(Debug, Clone, Copy)]
pub struct Growth {
    /// The highest sample of the warm-up's last 10 s.
    pub reference: u64,
    /// The highest of the 10 s floors after warm-up.
    pub floor: u64,
}

impl Growth {
    pub fn of(samples: &[Sample], warmup: Duration, value: impl Fn(&Sample) -> u64) -> Option<Growth> {
        let window = Duration::from_secs(10);
        let reference = samples.iter().filter(|s| s.at <= warmup && s.at + window >= warmup).map(&value).max()?;
        let after: Vec<&Sample> = samples.iter().filter(|s| s.at > warmup).collect();
        let floor = after.chunks(window.as_secs() as usize).filter_map(|c| c.iter().map(|s| value(s)).min()).max()?;
        Some(Growth { reference, floor })
    }

    pub fn grew(&self) -> bool {
        self.floor as f64 > self.reference as f64 * (1.0 + GROWTH)
    }

    pub fn percent(&self) -> f64 {
        (self.floor as f64 / self.reference.max(1) as f64 - 1.0) * 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(values: &[u64]) -> Vec<Sample> {
        values.iter().enumerate().map(|(i, v)| Sample { at: Duration::from_secs(i as u64 + 1), rss_kib: *v, fds: *v, sockets: *v, pipes: 0 }).collect()
    }

    #[test]
    fn a_burst_after_warmup_is_not_growth_but_a_rising_floor_is() {
        // 10 s of warm-up at 100, then a window with one spike, then a window all at 112.
        let mut v = vec![100; 10];
        v.extend([100, 100, 300, 100, 100, 100, 100, 100, 100, 100]);
        let burst = Growth::of(&samples(&v), Duration::from_secs(10), |s| s.sockets).expect("samples");
        assert!(!burst.grew(), "{burst:?}");
        v.extend([112; 10]);
        let risen = Growth::of(&samples(&v), Duration::from_secs(10), |s| s.sockets).expect("samples");
        assert!(risen.grew() && risen.floor == 112, "{risen:?}");
    }

    #[test]
    fn no_sample_after_warmup_gives_no_verdict() {
        assert!(Growth::of(&samples(&[100; 5]), Duration::from_secs(10), |s| s.rss_kib).is_none());
    }
}
