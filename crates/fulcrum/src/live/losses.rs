//! What a service's side thread (the access log's syslog sender, the tracer's exporter) could
//! not deliver: counted for the stats and `/metrics`, and said in the log at most once a
//! minute, since a receiver that is down loses every item until it is back and one line says so.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct Losses {
    service: String,
    /// What is lost and where it was going, e.g. "access log lines lost on their way to syslog".
    what: &'static str,
    lost: AtomicU64,
    /// When the last warning was logged (seconds since the epoch).
    warned: AtomicU64,
}

impl Losses {
    pub fn new(service: &str, what: &'static str) -> Losses {
        Losses { service: service.to_string(), what, lost: AtomicU64::new(0), warned: AtomicU64::new(0) }
    }

    /// Counts `n` items lost, and says so if it has not in the last minute.
    pub fn lose(&self, n: u64, why: &str) {
        let total = self.lost.fetch_add(n, Relaxed) + n;
        let now = crate::clock::since_epoch().as_secs();
        let last = self.warned.load(Relaxed);
        if now >= last + 60 && self.warned.compare_exchange(last, now, Relaxed, Relaxed).is_ok() {
            tracing::warn!(service = %self.service, dropped = total, "{}: {why}", self.what);
        }
    }

    /// Items lost since the thread started.
    pub fn count(&self) -> u64 {
        self.lost.load(Relaxed)
    }
}
