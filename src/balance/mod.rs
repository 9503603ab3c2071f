//! Balancing algorithms: one file per algorithm behind the one small [`Balancer`] trait.
//!
//! A balancer sees its pool only through [`Pool`]: effective weights (0 for a server that is down,
//! disabled or draining), connections in flight, and a stable key per server. It never sees health
//! checks, config or sockets, so each algorithm is testable on its own and a reload that keeps a pool
//! keeps its balancer state. What to hash (`key.rs`) is apart from how to map it (`maglev.rs`).

use std::net::IpAddr;

use crate::config::Algorithm;

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
    pub fn usable(&self, view: &dyn Pool, i: usize) -> bool {
        view.weight(i) > 0 && !self.avoids(i)
    }
}

/// The live view of a pool's servers, indexed `0..len()` in config order.
pub trait Pool {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Effective weight now: 0 while the server is down, disabled or draining.
    fn weight(&self, i: usize) -> u32;
    /// Connections to this server in flight.
    fn active(&self, i: usize) -> u64;
    /// A stable identity (the configured address) for hashing algorithms: two processes with the
    /// same pool agree on it.
    fn key(&self, i: usize) -> &str;
    /// Changes whenever any effective weight changes, so precomputed tables know to rebuild.
    fn epoch(&self) -> u64;
    /// What the data path measured of this server (connect counters, peak EWMA).
    fn sample(&self, _i: usize) -> load::Sample {
        load::Sample::default()
    }
}

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

/// A balancing algorithm. Implementations keep their own state behind `&self` (atomics or a
/// short per-pool lock), since one balancer serves every worker thread.
pub trait Balancer: Send + Sync {
    /// One usable server (weight > 0, not avoided), or `None` when there is none.
    fn pick(&self, pick: &Pick<'_>, pool: &dyn Pool) -> Option<usize>;

    /// What this algorithm measures of server `i`, if anything.
    fn metrics(&self, _i: usize) -> Option<AlgorithmMetrics> {
        None
    }
}

/// The balancer for an algorithm named in the config.
pub fn build(algorithm: Algorithm, passive: passive_ratio::Tuning) -> Box<dyn Balancer> {
    match algorithm {
        Algorithm::PassiveRatio => Box::new(passive_ratio::PassiveRatio::new(passive)),
        Algorithm::P2cEwma => Box::new(p2c_ewma::P2cEwma::default()),
        Algorithm::RoundRobin => Box::new(round_robin::RoundRobin::default()),
        Algorithm::StaticRr => Box::new(static_rr::StaticRr::default()),
        Algorithm::Random => Box::new(random::Random::default()),
        Algorithm::LeastConn => Box::new(least_conn::LeastConn::default()),
        Algorithm::SourceHash | Algorithm::UriHash | Algorithm::HeaderHash => Box::new(source_hash::SourceHash::default()),
        // The cookie names the server when the client has one; new clients are spread evenly.
        Algorithm::Cookie => Box::new(round_robin::RoundRobin::default()),
    }
}

pub mod key;
pub mod least;
pub mod least_conn;
pub mod load;
pub mod maglev;
pub mod p2c;
pub mod p2c_ewma;
pub mod passive_ratio;
pub mod random;
pub mod rng;
pub mod round_robin;
pub mod source_hash;
pub mod static_rr;
#[cfg(test)]
pub(crate) mod testing;
