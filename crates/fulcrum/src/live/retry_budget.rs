//! A pool's retry budget (`[service.http.retry]`'s `budget_percent`, Envoy's): retries may be
//! at most a share of the requests over a window, plus a floor a second, so when every server
//! fails, retries add a bounded share of load instead of multiplying it by `count`.
//!
//! Counted without a lock: requests and retries of the current window and the one before, and
//! the estimate over the last whole window weighs the previous one by how much of it is still
//! inside (a sliding window). Two threads that roll the window at once may lose a few counts,
//! which only makes the budget a little more generous for that moment.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct RetryBudget {
    /// The current window's number (time over the window's length).
    window: AtomicU64,
    /// Requests and retries of the windows with even and odd numbers.
    requests: [AtomicU64; 2],
    retries: [AtomicU64; 2],
}

/// What a budget allows: `percent` of requests, at least `min_per_second`, over `window`.
#[derive(Debug, Clone, Copy)]
pub struct Allowance {
    pub percent: u32,
    pub min_per_second: u32,
    pub window: Duration,
}

impl RetryBudget {
    /// Counts a request at `now_ms`.
    pub fn request(&self, now_ms: u64, window: Duration) {
        let w = self.roll(now_ms, window);
        self.requests[(w % 2) as usize].fetch_add(1, Relaxed);
    }

    /// Takes a retry from the budget at `now_ms`; `false` when it is spent.
    pub fn try_retry(&self, now_ms: u64, a: Allowance) -> bool {
        let length = (a.window.as_millis() as u64).max(1);
        let w = self.roll(now_ms, a.window);
        let (cur, prev) = ((w % 2) as usize, ((w + 1) % 2) as usize);
        // How much of the previous window is still within the last `window`.
        let left = 1.0 - (now_ms % length) as f64 / length as f64;
        let over = |c: &[AtomicU64; 2]| c[cur].load(Relaxed) as f64 + c[prev].load(Relaxed) as f64 * left;
        let allowed = (over(&self.requests) * f64::from(a.percent) / 100.0).max(f64::from(a.min_per_second) * a.window.as_secs_f64());
        if over(&self.retries) + 1.0 > allowed {
            return false;
        }
        self.retries[cur].fetch_add(1, Relaxed);
        true
    }

    /// The window `now_ms` falls in, starting it afresh when it is new.
    fn roll(&self, now_ms: u64, window: Duration) -> u64 {
        let w = now_ms / (window.as_millis() as u64).max(1);
        let seen = self.window.load(Relaxed);
        if seen != w && self.window.compare_exchange(seen, w, Relaxed, Relaxed).is_ok() {
            let slot = (w % 2) as usize;
            self.requests[slot].store(0, Relaxed);
            self.retries[slot].store(0, Relaxed);
            if w > seen + 1 {
                // A whole window went by without a request: the previous one is empty too.
                self.requests[1 - slot].store(0, Relaxed);
                self.retries[1 - slot].store(0, Relaxed);
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Allowance = Allowance { percent: 20, min_per_second: 0, window: Duration::from_secs(10) };

    #[test]
    fn retries_stay_within_their_share_of_requests() {
        let b = RetryBudget::default();
        let mut granted = 0;
        // 1,000 requests over 10 s, each wanting two retries.
        for i in 0..1000u64 {
            let now = 100_000 + i * 10;
            b.request(now, A.window);
            granted += (0..2).filter(|_| b.try_retry(now, A)).count();
        }
        assert!((190..=200).contains(&granted), "{granted} retries for 1,000 requests at 20%");
    }

    #[test]
    fn the_floor_lets_a_quiet_service_retry() {
        let b = RetryBudget::default();
        let a = Allowance { min_per_second: 3, ..A };
        b.request(5_000, a.window);
        let granted = (0..100).filter(|_| b.try_retry(5_000, a)).count();
        assert_eq!(granted, 30, "3 a second over a 10 s window");
        assert!(!RetryBudget::default().try_retry(0, A), "no requests, no floor: no retries");
    }
}
