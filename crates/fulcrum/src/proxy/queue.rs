//! The service's queue: a connection or request that finds every usable server at its `maxconn`
//! waits here for a place, up to `queue_timeout` (HAProxy's backend queue and `timeout queue`).
//! A [`Waiting`] counts itself in the service's `queue` for as long as it lives, so no way out
//! of the wait (a place, the timeout, a client gone mid-wait) leaves the count wrong.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::time::Instant;

use crate::live::ServiceState;

/// Longest sleep between two looks at the servers: a place freed just before the waiter started
/// listening for the release is still seen this soon.
const RECHECK: Duration = Duration::from_millis(50);

/// One connection or request in the queue.
pub struct Waiting<'a> {
    state: &'a ServiceState,
    since: Instant,
}

impl<'a> Waiting<'a> {
    pub fn enter(state: &'a ServiceState) -> Self {
        state.queue.fetch_add(1, Relaxed);
        state.note_waiting_peak();
        Waiting { state, since: crate::clock::timer_now() }
    }

    /// Waits until a place may have freed; `false` once `timeout` has passed since entering.
    pub async fn wait(&self, timeout: Duration) -> bool {
        let left = timeout.saturating_sub(crate::clock::since(self.since));
        if left.is_zero() {
            return false;
        }
        let _ = tokio::time::timeout(left.min(RECHECK), self.state.released.notified()).await;
        true
    }

    /// Time spent in the queue so far.
    pub fn waited(&self) -> Duration {
        crate::clock::since(self.since)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.state.queue.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_waiter_counts_in_the_queue_until_it_leaves_and_times_out_on_the_paused_clock() {
        let state = ServiceState::default();
        let w = Waiting::enter(&state);
        assert_eq!(state.queue.load(Relaxed), 1);
        let timeout = Duration::from_secs(1);
        let mut rounds = 0;
        while w.wait(timeout).await {
            rounds += 1;
        }
        assert_eq!(rounds, 20, "one look every 50 ms for a second");
        assert!(w.waited() >= timeout);
        drop(w);
        assert_eq!((state.queue.load(Relaxed), state.queue_max.load(Relaxed)), (0, 1));
    }
}
