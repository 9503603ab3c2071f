//! The one path from a client to a server, for every mode: pick a server (never one this client
//! already failed on while another is usable; backups only while no primary is), take its place
//! (its `maxconn`; when every usable server is full, wait in the service's queue up to
//! `queue_timeout`), connect within `connect_timeout`, classify a failure, redispatch up to
//! `retries` times, and record the outcome for health (`failure_limit`), the load-aware
//! algorithms (SYNs, connect time) and the stats (LbTot, redispatches).
//!
//! TCP and FTP call [`connect`]. HTTP drives a [`Dispatch`] step by step, because a request may
//! go over an idle keep-alive connection instead of a new one, and may be sent again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::net::TcpStream;
use tracing::{debug, warn};

use super::connect;
use super::queue::Waiting;
use crate::config::Algorithm;
use crate::error::{Error, Kind, Side};
use crate::live::inflight::{Request, Ticket};
use crate::live::why::{How, Why};
use crate::live::{Avoid, ConnGuard, Picked, Pool, Role, ServerEntry, ServiceState};

/// What a request says about where it should go: the hash key of `uri-hash`/`header-hash`, and
/// the server id an affinity cookie names.
#[derive(Debug, Default, Clone, Copy)]
pub struct Steer<'a> {
    pub hash: Option<u64>,
    pub prefer: Option<&'a str>,
}

/// A place on a server, taken for one connection (TCP, FTP) or one request (HTTP): counted in
/// the server's `current` from the moment it is taken, so no two clients can both take the last
/// one. Dropping it frees the place and lets a queued client try again.
pub struct Place {
    entry: Arc<ServerEntry>,
    role: Role,
    index: usize,
    guard: ConnGuard,
    service: Arc<ServiceState>,
    queued: Duration,
    why: Why,
    /// Its entry in the server's in-flight view (`live::inflight`).
    ticket: Ticket,
}

impl Place {
    pub fn entry(&self) -> &Arc<ServerEntry> {
        &self.entry
    }

    /// Time spent in the queue before the place was taken.
    pub fn queued(&self) -> Duration {
        self.queued
    }

    /// Why the pick chose this server.
    pub fn why(&self) -> Why {
        self.why
    }

    /// Counts the connection (or request) as made: total, last use, session rate.
    pub fn opened(&self) {
        self.guard.opened();
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.entry.state.inflight.end(self.ticket);
        self.service.released.notify_one();
    }
}

/// One client's way to a server of a pool, attempt by attempt.
pub struct Dispatch<'a> {
    pool: &'a Pool,
    client: SocketAddr,
    steer: Steer<'a>,
    avoid: Avoid,
    /// Attempts spent beyond the first; at most `retries`.
    retried: u32,
    /// The last failure, answered when no server is left to try.
    last: Option<Error>,
    /// HTTP: the request each place is taken for, as the server's in-flight view shows it.
    request: Option<Request>,
}

impl<'a> Dispatch<'a> {
    pub fn new(pool: &'a Pool, client: SocketAddr, steer: Steer<'a>) -> Self {
        Dispatch { pool, client, steer, avoid: Avoid::default(), retried: 0, last: None, request: None }
    }

    /// Places are taken for `request`: the in-flight view of each server tried shows it.
    pub fn for_request(mut self, request: Request) -> Self {
        self.request = Some(request);
        self
    }

    /// Picks a server and takes a place on it, waiting in the queue while every usable server
    /// is at its `maxconn`.
    pub async fn reserve(&mut self) -> Result<Place, Error> {
        let pool = self.pool;
        let mut waiting: Option<Waiting<'_>> = None;
        loop {
            let busy = pool.avoid_full(&self.avoid);
            let named = self.steer.prefer.and_then(|id| pool.by_id(id, &busy));
            let affinity = named.is_some();
            let Some(Picked { role, entry, index, panic }) = named.or_else(|| pool.pick(self.client.ip(), self.steer.hash, &busy)) else {
                if !pool.any_usable(&self.avoid) {
                    return Err(self.last.take().unwrap_or_else(|| Error::new(Kind::NoServer, Side::Server)));
                }
                let queue = waiting.get_or_insert_with(|| Waiting::enter(&pool.state));
                if !queue.wait(pool.config.queue_timeout).await {
                    return Err(Error::new(Kind::QueueTimeout, Side::Server));
                }
                continue;
            };
            let Some(guard) = entry.state.try_reserve(entry.maxconn) else {
                // Filled by another client between the pick and now: pick again.
                tokio::task::yield_now().await;
                continue;
            };
            entry.state.counters.lb_total.fetch_add(1, Relaxed);
            let why = self.why(affinity, role, index, panic, waiting.is_some());
            pool.state.recent.record(self.client.ip(), entry.state.serial, why);
            let queued = waiting.map_or(Duration::ZERO, |w| w.waited());
            let ticket = entry.state.inflight.begin(self.client, self.request.clone());
            return Ok(Place { entry, role, index, guard, service: pool.state.clone(), queued, why, ticket });
        }
    }

    /// The reason for a pick of server `index` of the `role` tier. A hashing algorithm's key is
    /// looked up in the table once more, to say whether its slot's owner took it.
    fn why(&self, affinity: bool, role: Role, index: usize, panic: bool, queued: bool) -> Why {
        let backup = role == Role::Backup;
        if affinity {
            return Why::new(How::Affinity, None, backup, panic, queued, self.retried);
        }
        let hashing = matches!(self.pool.config.algorithm, Algorithm::SourceHash | Algorithm::UriHash | Algorithm::HeaderHash);
        let slot = hashing.then(|| self.steer.hash.unwrap_or_else(|| crate::balance::key::client_ip(self.client.ip()))).and_then(|h| self.pool.tier(role).slot(h));
        match slot {
            Some((slot, owner)) => Why::new(if owner == index { How::SlotOwner } else { How::SlotWalked }, Some(slot), backup, panic, queued, self.retried),
            None => Why::new(How::Algorithm, None, backup, panic, queued, self.retried),
        }
    }

    /// One measured connect to the server of `place`: the SYNs and the connect time for the
    /// passive algorithms, and `failure_limit` for a server that keeps failing.
    pub async fn connect(&self, place: &Place) -> Result<TcpStream, Error> {
        let cfg = &self.pool.config;
        let entry = &place.entry;
        let state = &entry.state;
        let started = crate::clock::now();
        let (result, syns) = connect::measured(entry.addr, cfg.connect_timeout).await;
        let err = match result {
            Ok(stream) => {
                state.measure.record_connect(syns, true, crate::clock::since(started));
                state.record_connect_success();
                crate::live::outlier::observe(self.pool, entry, crate::live::outlier::Outcome::Connected);
                return Ok(stream);
            }
            Err(Some(e)) => Error::connect(entry.addr, e),
            Err(None) => Error::new(Kind::ConnectTimeout, Side::Server).server(entry.addr),
        };
        if err.side == Side::Local {
            // The server was never asked: nothing to measure, nothing to hold against it.
            return Err(err);
        }
        // A refusal is an answer (RST), but not a SYN-ACK: the server did not accept.
        state.measure.record_connect(syns, false, crate::clock::since(started));
        crate::live::outlier::observe(self.pool, entry, crate::live::outlier::Outcome::Gateway("connect failure"));
        if state.record_connect_failure(cfg.failure_limit) {
            warn!(service = %cfg.name, server = %state.key.address, reason = %err,
                "server down: {} consecutive connect failures (failure_limit)", cfg.failure_limit);
        }
        Err(err)
    }

    /// Records that the attempt on `place` failed with `err`. `Ok` when another server may be
    /// tried (the failed one is avoided from now on); the error to answer otherwise.
    pub fn failed(&mut self, place: Place, err: Error) -> Result<(), Error> {
        if !err.retryable() || self.retried >= self.pool.config.retries {
            return Err(err);
        }
        self.retried += 1;
        place.entry.state.counters.redispatches.fetch_add(1, Relaxed);
        self.pool.state.redispatches.fetch_add(1, Relaxed);
        debug!(service = %self.pool.config.name, client = %self.client, attempt = self.retried, reason = %err, "connect failed, redispatching");
        self.avoid.add(place.role, place.index);
        self.last = Some(err);
        Ok(())
    }

    /// Leaves the server of `place` for another (a retry of its answer), avoided from now on;
    /// `false`, and nothing changed, when no other server would be left to try.
    pub fn leave(&mut self, place: &Place) -> bool {
        let mut avoid = self.avoid.clone();
        avoid.add(place.role, place.index);
        if !self.pool.any_usable(&avoid) {
            return false;
        }
        self.avoid = avoid;
        true
    }

    /// Spends one attempt without blaming the server (HTTP sends a request again when a reused
    /// connection was closed under it); `false` when none is left.
    pub fn retry_same(&mut self) -> bool {
        let left = self.retried < self.pool.config.retries;
        if left {
            self.retried += 1;
        }
        left
    }
}

/// A connected server of `pool` for `client`, and the place the connection holds on it.
pub async fn connect(pool: &Pool, client: SocketAddr) -> Result<(Place, TcpStream), Error> {
    let mut dispatch = Dispatch::new(pool, client, Steer::default());
    loop {
        let place = dispatch.reserve().await?;
        match dispatch.connect(&place).await {
            Ok(stream) => {
                place.opened();
                return Ok((place, stream));
            }
            Err(err) => dispatch.failed(place, err)?,
        }
    }
}
