//! HTTP counters of a service: responses by status class, Fulcrum's own answers by status, and
//! the time to a response's head and to its end as histograms (Prometheus buckets, and p50, p95
//! and p99 read from them). Lock-free: a response adds to a few atomics. Kept in the service's
//! state, so they outlive reloads as the other counters do.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

/// The histograms' upper bounds, in seconds.
pub const BOUNDS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The statuses of Fulcrum's own answers, each counted on its own.
pub const OWN_CODES: [u16; 19] = [301, 302, 303, 307, 308, 400, 403, 404, 408, 413, 414, 421, 429, 431, 500, 501, 502, 503, 504];

/// One route's figures since its service was last rebuilt (a route is known by its place in the
/// config, which an edit can change): the requests it took, their answers by status class, and
/// their whole time.
#[derive(Debug, Default)]
pub struct RouteStats {
    pub hits: AtomicU64,
    pub classes: Classes,
    pub total: Histogram,
}

/// Responses by status class, `1xx` to `5xx`.
#[derive(Debug, Default)]
pub struct Classes([AtomicU64; 5]);

impl Classes {
    pub fn add(&self, status: u16) {
        if let Some(c) = (status / 100).checked_sub(1).and_then(|i| self.0.get(usize::from(i))) {
            c.fetch_add(1, Relaxed);
        }
    }

    pub fn read(&self) -> [u64; 5] {
        std::array::from_fn(|i| self.0[i].load(Relaxed))
    }

    /// Takes on counts carried from the previous process (`live::server::Carried`).
    pub fn restore(&self, counts: [u64; 5]) {
        for (c, n) in self.0.iter().zip(counts) {
            c.store(n, Relaxed);
        }
    }
}

/// Durations in `BOUNDS` buckets (each counted once, in the first bucket whose bound holds it; the
/// last is +Inf) and their sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BOUNDS.iter().position(|b| s <= *b).unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    pub fn read(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                running += b.load(Relaxed);
                running
            })
            .collect::<Vec<_>>();
        HistogramSnapshot { count: running, sum_seconds: self.sum_us.load(Relaxed) as f64 / 1e6, cumulative }
    }
}

/// A histogram as read: cumulative counts per bound of `BOUNDS`, then the +Inf one (`count`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct HistogramSnapshot {
    pub count: u64,
    pub sum_seconds: f64,
    pub cumulative: Vec<u64>,
}

impl HistogramSnapshot {
    /// The `q` quantile (0 to 1) in seconds, interpolated within its bucket as Prometheus'
    /// `histogram_quantile` does; the largest finite bound when it falls in +Inf; `None` when
    /// nothing was observed.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let i = self.cumulative.iter().position(|c| *c as f64 >= rank)?;
        let Some(&upper) = BOUNDS.get(i) else { return BOUNDS.last().copied() };
        let (lower, below) = if i == 0 { (0.0, 0) } else { (BOUNDS[i - 1], self.cumulative[i - 1]) };
        let within = (self.cumulative[i] - below).max(1) as f64;
        Some(lower + (upper - lower) * ((rank - below as f64) / within).clamp(0.0, 1.0))
    }
}

/// A service's HTTP counters.
#[derive(Debug, Default)]
pub struct HttpCounters {
    pub classes: Classes,
    own: [AtomicU64; OWN_CODES.len()],
    /// From the request's arrival to the server's response head.
    pub first_byte: Histogram,
    /// From the request's arrival to the end of its response's body.
    pub total: Histogram,
}

impl HttpCounters {
    /// A response went out: `own` when Fulcrum made it.
    pub fn response(&self, status: u16, own: bool) {
        self.classes.add(status);
        if own && let Some(i) = OWN_CODES.iter().position(|c| *c == status) {
            self.own[i].fetch_add(1, Relaxed);
        }
    }

    /// Fulcrum's own answers by status, those that happened.
    pub fn own(&self) -> Vec<(u16, u64)> {
        OWN_CODES.iter().zip(&self.own).map(|(c, n)| (*c, n.load(Relaxed))).filter(|(_, n)| *n > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_own_codes_and_quantiles() {
        let h = HttpCounters::default();
        for s in [200, 204, 301, 404, 503, 503, 99, 600] {
            h.response(s, s == 503);
        }
        assert_eq!(h.classes.read(), [0, 2, 1, 1, 2], "99 and 600 are no class");
        assert_eq!(h.own(), [(503, 2)]);
        for ms in [1, 2, 3, 4, 40, 40, 40, 40, 40, 900] {
            h.total.observe(Duration::from_millis(ms));
        }
        let t = h.total.read();
        assert_eq!((t.count, t.cumulative[0], t.cumulative[5]), (10, 1, 9));
        assert!((t.sum_seconds - 1.11).abs() < 1e-9);
        let p50 = t.quantile(0.5).unwrap();
        assert!((0.025..=0.05).contains(&p50), "{p50}");
        assert!((0.5..=1.0).contains(&t.quantile(0.99).unwrap()));
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
        let slow = Histogram::default();
        slow.observe(Duration::from_secs(60));
        assert_eq!(slow.read().quantile(0.5), Some(10.0), "past the last bound: that bound");
    }
}
