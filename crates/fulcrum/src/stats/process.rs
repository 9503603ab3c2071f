//! The process itself, as Prometheus clients name it (`process_*`): CPU time, resident memory,
//! descriptors open and their limit, and when it started. Read from `getrusage` and `/proc` on a
//! blocking thread (the admin handlers use `read_blocking`), never on a thread that moves traffic.

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// When the process started, fixed by the first call (`cli::main` makes it at start).
static STARTED: LazyLock<SystemTime> = LazyLock::new(crate::clock::wall);

/// Notes the start time; call once, early.
pub fn mark_start() {
    LazyLock::force(&STARTED);
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ProcessFigures {
    /// Which process answers: after an upgrade, the new one.
    pub pid: u32,
    pub start_time_seconds: f64,
    pub uptime_seconds: f64,
    /// User and system CPU time.
    pub cpu_seconds_total: f64,
    pub resident_memory_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
}

/// Reads the figures now (a few small reads of `/proc`: call off the traffic's threads).
pub fn read() -> ProcessFigures {
    let started = STARTED.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let now = crate::clock::since_epoch().as_secs_f64();
    ProcessFigures {
        pid: std::process::id(),
        start_time_seconds: started,
        uptime_seconds: (now - started).max(0.0),
        cpu_seconds_total: cpu_seconds(),
        resident_memory_bytes: resident_bytes(),
        open_fds: std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0),
        max_fds: crate::live::budget::descriptor_limit(),
    }
}

/// [`read`] on a blocking thread.
pub async fn read_blocking() -> ProcessFigures {
    tokio::task::spawn_blocking(read).await.unwrap_or_default()
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes only the struct it is given, which lives on this stack.
    #[allow(unsafe_code)]
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut u) != 0 {
            return 0.0;
        }
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The resident set from `/proc/self/statm` (its second field, in pages).
fn resident_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    #[allow(unsafe_code)]
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    std::fs::read_to_string("/proc/self/statm").ok().and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok()).map_or(0, |pages| pages * page)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_figures_of_this_process_are_plausible() {
        super::mark_start();
        let busy: u64 = (0..3_000_000u64).map(std::hint::black_box).sum();
        let p = super::read();
        assert!(busy > 0 && p.cpu_seconds_total > 0.0, "{p:?}");
        assert!(p.resident_memory_bytes > 1 << 20 && p.open_fds >= 3 && p.max_fds >= p.open_fds, "{p:?}");
        assert!(p.start_time_seconds > 1.6e9 && p.uptime_seconds >= 0.0, "{p:?}");
    }
}
