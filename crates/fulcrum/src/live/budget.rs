//! The process-wide connection budget: how many client connections the whole process serves at
//! once, so that running out of file descriptors is met by leaving clients in the kernel's
//! backlog, never by failing connects and blaming healthy servers for it.
//!
//! Each proxied connection needs two descriptors (client and server). What a configuration holds
//! before its first client (`Held`: its listening sockets, each with the copy kept to hand it over
//! in an upgrade, and a health check's connection per checked server) and a reserve for the admin
//! API and files are kept out of the budget. Like HAProxy, the default `maxconn` is derived from
//! `RLIMIT_NOFILE`, whose soft limit is raised to the hard limit at start. A configured `maxconn`
//! that the descriptors cannot carry is lowered to what they can, with a warning; a configuration
//! whose own sockets leave no room for `MIN_CLIENTS` is refused (`Held::fits`), at start and on
//! reload, rather than run with its checks and its admin API starved of descriptors.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{info, warn};

/// Connections the admin listener serves at once at most (`admin::listener`): its own cap, kept
/// here so the descriptors it may take are known below the admin.
pub const ADMIN_CONNECTIONS: usize = 64;

/// Descriptors kept out of the client budget: the admin listener's connections, and 64 for the
/// admin listener, the runtime's own, log and config files.
pub const RESERVED: u64 = ADMIN_CONNECTIONS as u64 + 64;

/// Descriptors a proxied connection needs: the client's and the server's.
const PER_CONNECTION: u64 = 2;

/// Descriptors a listening socket holds: itself, and the copy kept to hand it to the process an
/// upgrade starts (`app::upgrade`).
const PER_LISTEN_SOCKET: u64 = 2;

/// Client connections a configuration must leave room for, or it is refused.
pub const MIN_CLIENTS: u64 = 16;

/// What a configuration holds before it serves a client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Listening sockets: one per listen address, or one per worker with `reuse_port`, and a UDP
    /// socket per HTTP/3 address.
    pub listen_sockets: u64,
    /// Servers with an active health check: a check holds a connection while it runs (an HTTP
    /// check keeps its connection between checks).
    pub checks: u64,
}

impl Held {
    /// Descriptors held, the reserve included.
    pub fn descriptors(&self) -> u64 {
        self.listen_sockets * PER_LISTEN_SOCKET + self.checks + RESERVED
    }

    /// The least descriptor limit this configuration runs under: what it holds and `MIN_CLIENTS`.
    pub fn floor(&self) -> u64 {
        self.descriptors() + MIN_CLIENTS * PER_CONNECTION
    }

    /// Whether `limit` descriptors carry this configuration; why not, when they do not.
    pub fn fits(&self, limit: u64) -> Result<(), TooFew> {
        if limit >= self.floor() { Ok(()) } else { Err(TooFew { held: *self, limit }) }
    }
}

/// A configuration whose own sockets leave too few descriptors for clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this configuration needs at least {} file descriptors and the limit (RLIMIT_NOFILE) is {limit}: {} listening sockets hold two each (the socket and the copy an upgrade hands over), {} health checks one each, {RESERVED} are kept for the admin API and files, and {MIN_CLIENTS} client connections need two each; raise `ulimit -n` (systemd: LimitNOFILE=) to at least {} and two more for each client connection to be served at once",
    held.floor(), held.listen_sockets, held.checks, held.floor()
)]
pub struct TooFew {
    pub held: Held,
    pub limit: u64,
}

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

/// The most client connections `descriptors` can carry beside what the configuration holds.
pub fn carried_by(descriptors: u64, held: Held) -> u64 {
    (descriptors.saturating_sub(held.descriptors()) / PER_CONNECTION).max(1)
}

/// The limit to enforce: the configured one, or what the descriptors carry when none is set or
/// the configured one is more than they carry.
pub fn effective(configured: Option<u32>, descriptors: u64, held: Held) -> u64 {
    let carried = carried_by(descriptors, held);
    match configured {
        None => carried,
        Some(n) if u64::from(n) <= carried => u64::from(n),
        Some(n) => {
            warn!(
                maxconn = n,
                descriptors,
                "maxconn is more than the descriptor limit carries (2 a connection, {} held by listeners, checks and the admin); using {carried}: raise `ulimit -n` to at least {}",
                held.descriptors(),
                u64::from(n) * PER_CONNECTION + held.descriptors()
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

    fn held(listen_sockets: u64, checks: u64) -> Held {
        Held { listen_sockets, checks }
    }

    #[test]
    fn the_default_leaves_what_the_config_holds_and_two_descriptors_a_connection() {
        assert_eq!(carried_by(256, held(1, 2)), (256 - RESERVED - 2 - 2) / 2);
        assert_eq!(carried_by(1_048_576, held(4, 10)), (1_048_576 - RESERVED - 8 - 10) / 2);
        assert_eq!(carried_by(10, held(0, 0)), 1, "never zero: the process still serves one at a time");
    }

    #[test]
    fn a_configured_maxconn_is_kept_unless_the_descriptors_cannot_carry_it() {
        assert_eq!(effective(Some(100), 100_000, held(1, 4)), 100);
        assert_eq!(effective(Some(100_000), 1024, held(1, 4)), carried_by(1024, held(1, 4)));
        assert_eq!(effective(None, 1024, held(1, 4)), carried_by(1024, held(1, 4)));
    }

    #[test]
    fn a_config_whose_sockets_leave_no_room_for_clients_does_not_fit() {
        // 600 listen addresses and 6,000 checked servers under 1,200 descriptors: the listeners
        // and their copies alone take them all.
        let big = held(600, 6000);
        let refused = big.fits(1200).unwrap_err();
        assert_eq!(big.floor(), 1200 + 6000 + RESERVED + MIN_CLIENTS * 2);
        let text = refused.to_string();
        assert!(text.contains(&format!("at least {}", big.floor())) && text.contains("limit (RLIMIT_NOFILE) is 1200"), "{text}");
        assert!(text.contains("600 listening sockets") && text.contains("6000 health checks"), "{text}");
        assert_eq!(big.fits(big.floor()), Ok(()));
        assert!(held(1, 1).fits(256).is_ok(), "a small config under a small limit");
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
