//! What the data path measures per server for the load-aware algorithms: connect attempts with
//! the SYNs the kernel sent and whether a SYN-ACK came back (the passive-measurement paper's N_S
//! and N_A), connect time, and a peak EWMA of it (Finagle's and tower's `PeakEwma`). Counters are
//! monotonic atomics bumped on the data path; windows are the controller's business, and what a
//! rule compares is a [`super::Load`] over them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Monotonic per-server connect counters, bumped on the data path.
#[derive(Debug)]
pub struct Measure {
    /// SYNs sent, first ones and retransmissions (N_S).
    pub syn_sent: AtomicU64,
    /// Connects the server answered with a SYN-ACK (N_A).
    pub syn_acked: AtomicU64,
    pub attempts: AtomicU64,
    /// Sum of the connect times of established connects, in microseconds.
    pub connect_us: AtomicU64,
    ewma: Mutex<PeakEwma>,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub syn_sent: u64,
    pub syn_acked: u64,
    pub attempts: u64,
    pub connect_us: u64,
    /// Peak-EWMA connect time in microseconds, decayed to now.
    pub ewma_us: f64,
}

impl Measure {
    pub fn new(decay: Duration) -> Self {
        Measure {
            syn_sent: AtomicU64::new(0),
            syn_acked: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            connect_us: AtomicU64::new(0),
            ewma: Mutex::new(PeakEwma::new(decay, crate::clock::now())),
        }
    }

    /// Records one connect attempt: `syns` sent, whether it was established, how long it took.
    pub fn record_connect(&self, syns: u32, established: bool, took: Duration) {
        self.attempts.fetch_add(1, Relaxed);
        self.syn_sent.fetch_add(syns as u64, Relaxed);
        let us = took.as_micros() as u64;
        if established {
            self.syn_acked.fetch_add(1, Relaxed);
            self.connect_us.fetch_add(us, Relaxed);
        }
        // A failed connect costs its whole wait: it is latency the client saw.
        if let Ok(mut e) = self.ewma.lock() {
            e.observe(us as f64, crate::clock::now());
        }
    }

    /// Adds SYNs sent and SYN-ACKs answered that the kernel counted where no connect of Fulcrum's
    /// own saw them (`mode = "kernel"`: nftables' counters, read by `kernel::controller`). Neither
    /// an attempt nor a connect time: the kernel's connections are not timed.
    pub fn record_counted(&self, syn_sent: u64, syn_acked: u64) {
        self.syn_sent.fetch_add(syn_sent, Relaxed);
        self.syn_acked.fetch_add(syn_acked, Relaxed);
    }

    pub fn sample(&self) -> Sample {
        Sample {
            syn_sent: self.syn_sent.load(Relaxed),
            syn_acked: self.syn_acked.load(Relaxed),
            attempts: self.attempts.load(Relaxed),
            connect_us: self.connect_us.load(Relaxed),
            ewma_us: self.ewma.lock().map(|e| e.get(crate::clock::now())).unwrap_or(0.0),
        }
    }

    pub fn set_decay(&self, decay: Duration) {
        if let Ok(mut e) = self.ewma.lock() {
            e.decay = decay;
        }
    }
}

/// Peak EWMA: a sample above the average replaces it at once (react to trouble fast); below it,
/// the average decays toward the sample with time constant `decay` (recover slowly).
/// Time comes in as an argument, so tests drive it without sleeping.
#[derive(Debug, Clone)]
pub struct PeakEwma {
    decay: Duration,
    value: f64,
    at: Instant,
}

impl PeakEwma {
    pub fn new(decay: Duration, now: Instant) -> Self {
        PeakEwma { decay, value: 0.0, at: now }
    }

    pub fn observe(&mut self, sample: f64, now: Instant) {
        if sample > self.value {
            self.value = sample;
        } else {
            let w = self.weight(now);
            self.value = self.value * w + sample * (1.0 - w);
        }
        self.at = now;
    }

    /// The value decayed toward 0 for the time since the last sample, so a server that was slow
    /// once and then got no traffic is tried again.
    pub fn get(&self, now: Instant) -> f64 {
        self.value * self.weight(now)
    }

    fn weight(&self, now: Instant) -> f64 {
        let tau = self.decay.as_secs_f64().max(1e-9);
        (-(now.saturating_duration_since(self.at).as_secs_f64()) / tau).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_is_taken_at_once_and_decays_with_the_time_constant() {
        let t0 = crate::clock::now();
        let mut e = PeakEwma::new(Duration::from_secs(10), t0);
        e.observe(1000.0, t0);
        assert_eq!(e.get(t0), 1000.0);
        let later = t0 + Duration::from_secs(10);
        assert!((e.get(later) - 1000.0 / std::f64::consts::E).abs() < 1e-6);
        e.observe(100.0, later);
        let expect = 1000.0 / std::f64::consts::E + 100.0 * (1.0 - 1.0 / std::f64::consts::E);
        assert!((e.get(later) - expect).abs() < 1e-6, "{}", e.get(later));
    }

    #[test]
    fn counters_split_syns_from_syn_acks() {
        let m = Measure::new(Duration::from_secs(1));
        m.record_connect(1, true, Duration::from_millis(2));
        m.record_connect(3, true, Duration::from_millis(3000));
        m.record_connect(2, false, Duration::from_millis(2000));
        let s = m.sample();
        assert_eq!((s.syn_sent, s.syn_acked, s.attempts), (6, 2, 3));
        assert_eq!(s.connect_us, 3_002_000);
    }
}
