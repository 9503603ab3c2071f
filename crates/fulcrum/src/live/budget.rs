//! The process-wide connection budget: how many client connections the whole process serves at
//! once, so that running out of file descriptors is met by leaving clients in the kernel's
//! backlog, never by failing connects and blaming healthy servers for it.
//!
//! Each proxied connection needs two descriptors (client and server); the admin listener, health
//! checks, listeners and log files need some of their own, so a reserve is kept out of the budget.
//! Like HAProxy, the default `maxconn` is derived from `RLIMIT_NOFILE`, whose soft limit is raised
//! to the hard limit at start. A configured `maxconn` that the descriptors cannot carry is lowered
//! to what they can, with a warning.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{info, warn};

/// Connections the admin listener serves at once at most (`admin::listener`): its own cap, kept
/// here so the descriptors it may take are known below the admin.
pub const ADMIN_CONNECTIONS: usize = 64;

/// Descriptors kept out of the client budget: the admin listener's connections, and 64 for
/// listeners, the runtime's own, log and config files.
pub const RESERVED: u64 = ADMIN_CONNECTIONS as u64 + 64;

/// Descriptors a proxied connection needs: the client's and the server's.
const PER_CONNECTION: u64 = 2;

/// Raises the soft descriptor limit to the hard limit, so the budget is as large as this host
/// allows. Returns the limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    let Ok((soft, hard)) = rlimit::getrlimit(rlimit::Resource::NOFILE) else { return descriptor_limit() };
    if soft >= hard {
        return soft;
    }
    match rlimit::increase_nofile_limit(hard) {
        Ok(now) => {
            info!(from = soft, to = now, "raised the descriptor limit (RLIMIT_NOFILE) to its hard limit");
            now
        }
        Err(e) => {
            warn!(soft, hard, "cannot raise the descriptor limit: {e}");
            soft
        }
    }
}

/// The soft descriptor limit in force (1024 when it cannot be read).
pub fn descriptor_limit() -> u64 {
    rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
}

/// The most client connections `descriptors` can carry, with `servers` health checks beside them.
pub fn carried_by(descriptors: u64, servers: usize) -> u64 {
    (descriptors.saturating_sub(RESERVED + servers as u64) / PER_CONNECTION).max(1)
}

/// The limit to enforce: the configured one, or what the descriptors carry when none is set or
/// the configured one is more than they carry.
pub fn effective(configured: Option<u32>, descriptors: u64, servers: usize) -> u64 {
    let carried = carried_by(descriptors, servers);
    match configured {
        None => carried,
        Some(n) if u64::from(n) <= carried => u64::from(n),
        Some(n) => {
            warn!(
                maxconn = n,
                descriptors,
                "maxconn is more than the descriptor limit carries (2 a connection, {RESERVED} kept for the admin and the rest); using {carried}: raise `ulimit -n` to at least {}",
                u64::from(n) * PER_CONNECTION + RESERVED + servers as u64
            );
            carried
        }
    }
}

/// Client connections open in the whole process, against the limit.
#[derive(Debug, Default)]
pub struct Budget {
    current: AtomicU64,
    max: AtomicU64,
    /// Most connections open at once.
    peak: AtomicU64,
    /// Times an accept waited because the process was at its limit.
    waits: AtomicU64,
    freed: Notify,
}

impl Budget {
    pub fn new(max: u64) -> Arc<Budget> {
        Arc::new(Budget { max: AtomicU64::new(max), ..Budget::default() })
    }

    pub fn set_max(&self, max: u64) {
        self.max.store(max, Relaxed);
        self.freed.notify_waiters();
    }

    pub fn max(&self) -> u64 {
        self.max.load(Relaxed)
    }

    pub fn current(&self) -> u64 {
        self.current.load(Relaxed)
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Relaxed)
    }

    pub fn waits(&self) -> u64 {
        self.waits.load(Relaxed)
    }

    /// Waits until the process may take one more client connection. Clients meanwhile wait in
    /// the listen backlog, where the kernel holds them at no cost to this process.
    pub async fn room(&self) {
        if self.current() < self.max() {
            return;
        }
        self.waits.fetch_add(1, Relaxed);
        while self.current() >= self.max() {
            // The timer covers a wake-up lost between the check and the wait.
            tokio::select! {
                _ = self.freed.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// Counts one client connection until the returned slot is dropped.
    pub fn take(self: &Arc<Self>) -> Slot {
        let now = self.current.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(now, Relaxed);
        Slot(self.clone())
    }
}

/// One client connection's share of the budget.
pub struct Slot(Arc<Budget>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Relaxed);
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_the_reserve_and_two_descriptors_a_connection() {
        assert_eq!(carried_by(256, 2), (256 - RESERVED - 2) / 2);
        assert_eq!(carried_by(1_048_576, 10), (1_048_576 - RESERVED - 10) / 2);
        assert_eq!(carried_by(10, 0), 1, "never zero: the process still serves one at a time");
    }

    #[test]
    fn a_configured_maxconn_is_kept_unless_the_descriptors_cannot_carry_it() {
        assert_eq!(effective(Some(100), 100_000, 4), 100);
        assert_eq!(effective(Some(100_000), 1024, 4), carried_by(1024, 4));
        assert_eq!(effective(None, 1024, 4), carried_by(1024, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn an_accept_waits_for_a_freed_slot() {
        let budget = Budget::new(1);
        let slot = budget.take();
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move {
                budget.room().await;
                budget.take()
            }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiter.is_finished(), "the budget is full");
        drop(slot);
        let next = waiter.await.unwrap();
        assert_eq!((budget.current(), budget.peak(), budget.waits()), (1, 1, 1));
        drop(next);
        assert_eq!(budget.current(), 0);
    }
}
