//! The run's own check that the machine did not hide what it measured: the clients (this
//! process) and every balancer the run starts (Fulcrum, and HAProxy where it runs beside it) must
//! stay under [`LIMIT`] of one core, so that the
//! real servers, not the load generator or the balancer, are what saturates. Sampled four times a
//! second from `/proc`; the figure is the busiest 5-second stretch of each (the whole life of a
//! process that lived less), and the mean over its life beside it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::procs::Usage;
use super::report::Report;

/// The share of one core the clients and each balancer may use at most.
pub const LIMIT: f64 = 0.70;
/// Seconds the busiest stretch spans: long enough that a process's start-up is not the figure.
const STRETCH: usize = 5;
/// Samples a second.
const PER_SEC: usize = 4;

/// The balancer processes the run started ([`watch`]); a process that ended leaves the list.
static FULCRUMS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Counts a balancer process in the check.
pub fn watch(pid: u32) {
    if let Ok(mut v) = FULCRUMS.lock() {
        v.push(pid);
    }
}

/// One process kind's use: the busiest stretch and the mean while it ran, in cores.
#[derive(Debug, Default, Clone, Copy)]
struct Use {
    peak: f64,
    busy_secs: f64,
    alive_secs: f64,
}

impl Use {
    fn mean(&self) -> f64 {
        if self.alive_secs > 0.0 { self.busy_secs / self.alive_secs } else { 0.0 }
    }
}

/// What the sampler found.
#[derive(Debug, Default)]
pub struct Headroom {
    client: Use,
    balancer: Use,
}

/// A process's recent use: CPU seconds at the last sample and the last [`STRETCH`] seconds' use, a
/// figure per sample.
struct Track {
    cpu: f64,
    recent: VecDeque<f64>,
    /// Whether a whole stretch was seen.
    full: bool,
}

impl Track {
    fn new(cpu: f64) -> Track {
        Track { cpu, recent: VecDeque::new(), full: false }
    }

    /// Adds one interval's reading; the mean over the stretch once it is full.
    fn step(&mut self, cpu: f64, secs: f64, into: &mut Use) {
        let used = (cpu - self.cpu).max(0.0);
        self.cpu = cpu;
        into.busy_secs += used;
        into.alive_secs += secs;
        self.recent.push_back(used / secs.max(1e-3));
        if self.recent.len() > STRETCH * PER_SEC {
            self.recent.pop_front();
        }
        if self.recent.len() == STRETCH * PER_SEC {
            self.full = true;
            into.peak = into.peak.max(self.mean());
        }
    }

    /// At the end of its life or of the run: a process that never filled a stretch counts with
    /// the mean over its life.
    fn close(&self, into: &mut Use) {
        if !self.full && !self.recent.is_empty() {
            into.peak = into.peak.max(self.mean());
        }
    }

    fn mean(&self) -> f64 {
        self.recent.iter().sum::<f64>() / self.recent.len().max(1) as f64
    }
}

/// Samples the clients and the balancers until `stop`.
pub fn sample(stop: CancellationToken) -> tokio::task::JoinHandle<Headroom> {
    tokio::spawn(async move {
        let me = std::process::id();
        let mut h = Headroom::default();
        let mut client = Track::new(Usage::of(me).cpu_secs);
        let mut balancers: BTreeMap<u32, Track> = BTreeMap::new();
        let mut last = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(1000 / PER_SEC as u64)) => {}
                _ = stop.cancelled() => {
                    client.close(&mut h.client);
                    balancers.values().for_each(|t| t.close(&mut h.balancer));
                    return h;
                }
            }
            let secs = last.elapsed().as_secs_f64();
            last = Instant::now();
            client.step(Usage::of(me).cpu_secs, secs, &mut h.client);
            let pids = FULCRUMS.lock().map(|v| v.clone()).unwrap_or_default();
            for pid in pids {
                let alive = std::fs::metadata(format!("/proc/{pid}")).is_ok();
                match (alive, balancers.get_mut(&pid)) {
                    (true, Some(t)) => t.step(Usage::of(pid).cpu_secs, secs, &mut h.balancer),
                    (true, None) => {
                        balancers.insert(pid, Track::new(Usage::of(pid).cpu_secs));
                    }
                    (false, _) => {
                        if let Some(t) = balancers.remove(&pid) {
                            t.close(&mut h.balancer);
                        }
                        if let Ok(mut v) = FULCRUMS.lock() {
                            v.retain(|p| *p != pid);
                        }
                    }
                }
            }
        }
    })
}

impl Headroom {
    /// The report's condition and check.
    pub fn report(&self, r: &mut Report) {
        let show = |u: &Use| format!("busiest {STRETCH} s {:.0}% of a core, mean {:.0}%", u.peak * 100.0, u.mean() * 100.0);
        r.condition("CPU of the clients (the lab process)", show(&self.client));
        r.condition("CPU of each balancer process", show(&self.balancer));
        let limit = LIMIT * 100.0;
        r.check(
            &format!("the clients and the balancer stayed under {limit:.0}% of a core, so the real servers are what saturated"),
            self.client.peak < LIMIT && self.balancer.peak < LIMIT,
            format!("clients: {}; balancer: {}", show(&self.client), show(&self.balancer)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_busiest_full_stretch_and_the_mean_is_over_the_life() {
        let mut u = Use::default();
        let mut t = Track::new(0.0);
        // Four seconds at a full core: no stretch is full yet, so no peak.
        let samples = 4 * PER_SEC;
        let dt = 1.0 / PER_SEC as f64;
        for s in 1..=samples {
            t.step(s as f64 * dt, dt, &mut u);
        }
        assert_eq!(u.peak, 0.0);
        // A process that ended here counts with its life: a full core.
        let mut short = Use::default();
        t.close(&mut short);
        assert!((short.peak - 1.0).abs() < 1e-9, "{}", short.peak);
        // Then six idle seconds: the first full stretch holds four busy seconds of five.
        for _ in 0..6 * PER_SEC {
            t.step(4.0, dt, &mut u);
        }
        assert!((u.peak - 0.8).abs() < 1e-9, "{}", u.peak);
        assert!((u.mean() - 0.4).abs() < 1e-9, "{}", u.mean());
    }
}
