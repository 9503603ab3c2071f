//! The state of a service (or of a routed pool) that outlives generations, kept by name: the
//! counters, the queue and the balancers' event hub, which every generation's pools share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::sync::Notify;

use super::rate::Rate;
use crate::balance::events::Subscribers;

/// State of a service (or of a routed pool, counted as `service/pool`) that outlives generations,
/// kept by name: the balancers' event hub, the counters and the queue.
#[derive(Debug, Default)]
pub struct ServiceState {
    /// The balancers of the service's live generations, told of every server state or weight
    /// change (`ServerState::bump`).
    pub events: Arc<Subscribers>,
    pub current: AtomicU64,
    pub max: AtomicU64,
    pub total: AtomicU64,
    /// Clients closed because no server could take them.
    pub refused: AtomicU64,
    /// Connects that failed on one server and were tried on another.
    pub redispatches: AtomicU64,
    /// TCP connections whose bytes the kernel moved through the sockmap fast path.
    pub sockmap: AtomicU64,
    /// Of those, the ones in the sockmap now.
    pub sockmap_active: AtomicU64,
    /// Adaptive connections moved into the sockmap, and out of it again when they turned to bulk.
    pub sockmap_promoted: AtomicU64,
    pub sockmap_demoted: AtomicU64,
    /// TLS handshakes by protocol version and failures by reason.
    pub tls: crate::tls::Counters,
    /// Connections (HTTP: requests) waiting for a place on a server at its `maxconn`.
    pub queue: AtomicU64,
    /// The most clients seen waiting, in the queue and in the accept backlog together.
    pub queue_max: AtomicU64,
    /// Clients waiting in the kernel's accept queue while the service is at `maxconn`; read from
    /// the listening socket's TCP_INFO while the accept loop is paused.
    pub backlog: AtomicU64,
    pub rate: Rate,
    /// Signalled when a place on a server of the service frees, so a queued client can go.
    pub released: Notify,
    /// FTP: where the search for a free data port starts next.
    pub data_port_cursor: std::sync::atomic::AtomicU32,
    /// Signalled when a connection ends, so an accept loop paused at `maxconn` resumes.
    pub freed: Notify,
    /// The last picks and their reasons (`GET /api/explain/recent`).
    pub recent: crate::live::why::Recent,
    /// HTTP mode: responses by class and Fulcrum's own by status, and how long requests took.
    pub http: super::http_stats::HttpCounters,
    /// When outlier detection last compared the pool's servers (`clock_ms`; 0: not yet).
    pub outlier_swept: AtomicU64,
    /// `[service.http.retry]`: retries sent, and those the budget refused.
    pub retries: AtomicU64,
    pub retries_over_budget: AtomicU64,
    pub retry_budget: super::retry_budget::RetryBudget,
}

impl ServiceState {
    /// Clients waiting now: for a server place and in the accept backlog.
    pub fn waiting(&self) -> u64 {
        self.queue.load(Relaxed) + self.backlog.load(Relaxed)
    }

    /// Records the current number of waiting clients in `queue_max` if it is a new peak.
    pub fn note_waiting_peak(&self) {
        self.queue_max.fetch_max(self.waiting(), Relaxed);
    }

    pub fn open(self: &Arc<Self>) -> ServiceGuard {
        let now = self.current.fetch_add(1, Relaxed) + 1;
        self.max.fetch_max(now, Relaxed);
        self.total.fetch_add(1, Relaxed);
        self.rate.tick(crate::clock::unix_ms() / 1000);
        ServiceGuard(self.clone(), None)
    }
}

/// Held for the life of one client connection of a service, with what else the connection holds
/// until it closes (its places in per-client connection limits).
pub struct ServiceGuard(Arc<ServiceState>, Option<Box<dyn Send + Sync>>);

impl ServiceGuard {
    /// Keeps `held` until the connection closes.
    pub fn keep(&mut self, held: Box<dyn Send + Sync>) {
        self.1 = Some(held);
    }
}

impl Drop for ServiceGuard {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Relaxed);
        self.0.freed.notify_one();
    }
}
