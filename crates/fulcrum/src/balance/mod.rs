//! Balancing algorithms: one file per algorithm behind the one small [`Balancer`] trait.
//!
//! A balancer sees its servers only through [`ServerView`]: configured and effective weights (the
//! effective one is 0 for a server that is down, suppressed, disabled or draining), the slow-start
//! ramp of a server that came back, connections in flight, and a stable key per server. It never sees health checks, config or sockets, so each algorithm
//! is testable on its own. It hears of state changes through [`Balancer::update`] (wired by
//! `events.rs`), where it rebuilds what it precomputes, so [`Balancer::pick`] only reads. What to
//! hash (`key.rs`) is apart from how to map it (`maglev.rs`), and what load is (`load.rs`) is apart
//! from the rule that compares it (`least.rs`, `p2c.rs`). `algorithm.rs` is the registry: each
//! algorithm's name, description and constructor, one line each.

use std::net::IpAddr;

pub use algorithm::{About, Algorithm, Registered};

/// What a balancer may look at when it picks one server for one connection.
#[derive(Debug, Clone, Copy)]
pub struct Pick<'a> {
    /// The client's address: the source-hash key.
    pub client: IpAddr,
    /// Servers that already failed for this connection (redispatch): never picked again while
    /// another usable server exists.
    pub avoid: &'a [usize],
    /// HTTP: the request's hash key (path, header) for `uri-hash` and `header-hash`; the
    /// hashing algorithms fall back to the client's address without one.
    pub hash: Option<u64>,
}

impl Pick<'_> {
    pub fn avoids(&self, i: usize) -> bool {
        self.avoid.contains(&i)
    }

    /// Whether server `i` may take this connection: usable now and not already failed on.
    pub fn usable(&self, view: &dyn ServerView, i: usize) -> bool {
        i < view.len() && view.effective_weight(i) > 0 && !self.avoids(i)
    }
}

/// The live view of one group of servers (a pool), indexed `0..len()` in config order.
pub trait ServerView {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The configured weight, whatever the server's state: what a table that must not move on a
    /// health flip (Maglev) is built over.
    fn weight(&self, i: usize) -> u32;
    /// Weight now: the configured weight while the server is up, 0 while it is down, disabled or
    /// draining. What a pick may use.
    fn effective_weight(&self, i: usize) -> u32;
    /// The share of its effective weight a server takes while slow start ramps it up, in
    /// thousandths: [`RAMP_FULL`] once the ramp is over (or without slow start), never 0 while
    /// the server is usable.
    fn ramp(&self, _i: usize) -> u32 {
        RAMP_FULL
    }
    /// The weight a pick spreads traffic by: the effective weight scaled by the ramp, in
    /// thousandths of a unit of weight (a weight-1 server still ramps in fine steps).
    fn share(&self, i: usize) -> u64 {
        u64::from(self.effective_weight(i)) * u64::from(self.ramp(i))
    }
    /// Connections to this server in flight.
    fn active(&self, i: usize) -> u64;
    /// A stable identity (the configured address) for hashing algorithms: two processes with the
    /// same servers agree on it.
    fn key(&self, i: usize) -> &str;
    /// What the data path measured of this server (connect counters, peak EWMA).
    fn sample(&self, _i: usize) -> load::Sample {
        load::Sample::default()
    }
    /// Whether the balancer's `update` hears of this view's changes, so what it precomputed
    /// from the view (`usable.rs`) may serve a pick in it. A view made for one pick
    /// (`all_down = "use-all"`, health ignored) says no and is picked in by a pass over it.
    fn told(&self) -> bool {
        true
    }
}

/// [`ServerView::ramp`] of a server that takes all of its weight.
pub const RAMP_FULL: u32 = 1000;

/// What an algorithm measures of a server beyond the shared counters, for stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct AlgorithmMetrics {
    /// Traffic ratio (passive-ratio).
    pub ratio: Option<f64>,
    /// R = (N_S - N_A) / N_A over the window, once trusted (passive-ratio).
    pub r: Option<f64>,
    /// SYNs sent and SYN-ACKs received over the window (passive-ratio).
    pub n_s: Option<u64>,
    pub n_a: Option<u64>,
}

/// A balancing algorithm. Implementations keep their own state behind `&self` (atomics, a table
/// behind an `ArcSwap`, or a short lock), since one balancer serves every worker thread.
pub trait Balancer: Send + Sync {
    /// One usable server (effective weight > 0, not avoided), or `None` when there is none.
    /// Runs on a connection task: it reads what `update` built and never rebuilds a table.
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize>;

    /// The server `pick` would choose now, leaving the balancer as it is: no cursor, rotation,
    /// control step or generator of its own moves (`GET /api/explain` asks this). An algorithm
    /// that draws at random draws from a generator of the moment instead of its own.
    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize>;

    /// Told once when the balancer is built, before its first pick, and after changes of a
    /// server's state or weight in `view` (a burst of them may be one call, which sees them all).
    /// Precomputed tables are rebuilt here and published for `pick` to load. Runs on the update
    /// thread (`events`), never on a connection's task; an algorithm whose tables do not depend
    /// on what changed returns at once.
    fn update(&self, _view: &dyn ServerView) {}

    /// Takes the steps that time makes due by `now`, without a pick: for a pool whose connections
    /// this process does not pick a server for (`mode = "kernel"`, where nftables draws it and
    /// `kernel::controller` reads the outcome back through [`Balancer::metrics`]). An algorithm
    /// that time does not move returns at once.
    fn advance(&self, _view: &dyn ServerView, _now: std::time::Instant) {}

    /// What this algorithm measures of server `i`, if anything.
    /// A digest of the lookup table this balancer built, for algorithms whose picks follow one
    /// (the hashing ones): two instances with the same digest send every key to the same
    /// server. `fulcrum fleet check` compares it across a fleet.
    fn table_digest(&self) -> Option<u64> {
        None
    }
    fn metrics(&self, _i: usize) -> Option<AlgorithmMetrics> {
        None
    }
    /// For the hashing algorithms: the table slot `hash` lands on and the server owning it.
    fn slot(&self, _hash: u64) -> Option<(usize, usize)> {
        None
    }
}

pub mod algorithm;
pub mod entry;
pub mod events;
pub mod key;
pub mod least;
pub mod least_conn;
pub mod load;
pub mod maglev;
pub mod p2c;
pub mod p2c_ewma;
pub mod passive_ratio;
#[cfg(test)]
mod peek_tests;
pub mod random;
pub mod rng;
pub mod round_robin;
pub mod source_hash;
pub mod static_rr;
pub mod stride;
#[cfg(test)]
pub(crate) mod testing;
pub mod usable;
