//! Sending a request to a server: pick, reuse an idle pooled keep-alive connection or connect a
//! new one (measured like every connect, for the passive algorithms), send, and retry when that
//! is safe: after a connect failure on another server (the request is still ours), and for an
//! idempotent request without a body when a reused connection turns out closed by the server.
//!
//! The pool is process-wide and keyed by server address, so it survives reloads. A connection
//! returns to it when its response body has been read to the end; one that idled longer than
//! `keepalive_idle` is dropped when next looked at.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::body::ProxyBody;
use crate::error::{Error, Kind, Side};
use crate::proxy::connect;
use crate::runtime::{Avoid, ConnGuard, ServerEntry, Service, ServiceState};

/// Idle connections kept per server at most.
const MAX_IDLE: usize = 256;

struct Idle {
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

static POOL: LazyLock<Mutex<HashMap<SocketAddr, Vec<Idle>>>> = LazyLock::new(Mutex::default);

/// A connection lent out for one request; `release` gives it back for reuse.
pub struct Pooled {
    addr: SocketAddr,
    sender: SendRequest<ProxyBody>,
}

impl Pooled {
    pub fn release(self) {
        if self.sender.is_closed() {
            debug!(server = %self.addr, "pooled connection closed, not reused");
            return;
        }
        debug!(server = %self.addr, "connection back to the pool");
        if let Ok(mut pool) = POOL.lock() {
            let idle = pool.entry(self.addr).or_default();
            if idle.len() < MAX_IDLE {
                idle.push(Idle { sender: self.sender, since: Instant::now() });
            }
        }
    }
}

fn take_idle(addr: SocketAddr, max_idle: Duration) -> Option<SendRequest<ProxyBody>> {
    let mut pool = POOL.lock().ok()?;
    let idle = pool.get_mut(&addr)?;
    while let Some(c) = idle.pop() {
        // Just released, a connection may not be ready yet (hyper finishes the exchange on its
        // own task); `send` waits for that.
        if !c.sender.is_closed() && c.since.elapsed() < max_idle {
            return Some(c.sender);
        }
    }
    None
}

/// Why no response came from any server.
pub enum Failure {
    /// No usable server, or every connect failed: 503 / 502.
    Connect(Error),
    /// The server did not answer within `response_timeout`: 504.
    Timeout(SocketAddr),
    /// Every server stayed at its `maxconn` for `queue_timeout`: 503.
    Queue(Duration),
    /// The server closed or broke the connection before a response: 502.
    Broken(SocketAddr, hyper::Error),
}

/// What a forwarded request got.
pub struct Answer {
    pub entry: Arc<ServerEntry>,
    pub response: Response<Incoming>,
    /// The connection, to return to the pool when the body is read (not for upgrades).
    pub pooled: Option<Pooled>,
    /// Counts the request in the server's current/total for as long as the exchange lasts.
    pub slot: Slot,
    /// Time spent in the queue waiting for a server below its `maxconn`.
    pub queued: Duration,
    pub connect: Duration,
    pub response_time: Duration,
}

/// How a request steers the pick: the hash key of `uri-hash`/`header-hash`, the server id a
/// `cookie` names.
#[derive(Debug, Default)]
pub struct Steer {
    pub hash: Option<u64>,
    pub prefer: Option<String>,
    /// The affinity cookie's value as the client sent it.
    pub cookie: Option<String>,
}

/// Sends `req` to a server of `service` for `client`; `replayable` says a failed send may be
/// repeated (idempotent method, no body).
pub async fn send(service: &Service, client: SocketAddr, mut req: Request<ProxyBody>, steer: &Steer, replayable: bool, upgrade: bool) -> Result<Answer, Failure> {
    let cfg = &service.config;
    let mut avoid = Avoid::default();
    let mut last = Failure::Connect(Error::new(Kind::NoServer, Side::Server));
    let mut attempt = 0;
    let mut queue_started: Option<Instant> = None;
    // What a bodiless idempotent request needs to be sent again.
    let template = replayable.then(|| (req.method().clone(), req.uri().clone(), req.version(), req.headers().clone()));
    while attempt <= cfg.retries {
        let busy = service.avoid_full(&avoid);
        let named = steer.prefer.as_deref().and_then(|id| service.by_id(id, &busy));
        let Some((role, entry, index)) = named.or_else(|| service.pick(client.ip(), steer.hash, &busy)) else {
            if !service.any_usable(&avoid) {
                break;
            }
            // Every usable server is at its maxconn: wait in the queue for one to finish.
            let waited = queue_started.get_or_insert_with(|| {
                let q = service.state.queue.fetch_add(1, Relaxed) + 1;
                service.state.queue_max.fetch_max(q, Relaxed);
                Instant::now()
            });
            let left = cfg.http.queue_timeout.saturating_sub(waited.elapsed());
            if left.is_zero() {
                leave_queue(service, &mut queue_started);
                return Err(Failure::Queue(cfg.http.queue_timeout));
            }
            // A bounded wait: a release that came just before we listened is seen within 50 ms.
            let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), service.state.released.notified()).await;
            continue;
        };
        // The place is taken before the connection is made, so a server never goes past its maxconn.
        let Some(place) = entry.state.try_reserve(entry.maxconn) else {
            // Filled between the pick and now by another request: pick again.
            tokio::task::yield_now().await;
            continue;
        };
        let slot = Slot { place, service: service.state.clone() };
        let queued = leave_queue(service, &mut queue_started);
        let started = Instant::now();
        let mut reused = if upgrade { None } else { take_idle(entry.addr, cfg.http.keepalive_idle) };
        if let Some(s) = reused.as_mut()
            && s.ready().await.is_err()
        {
            reused = None;
        }
        let was_reused = reused.is_some();
        let mut sender = match reused {
            Some(s) => {
                entry.state.counters.lb_total.fetch_add(1, Relaxed);
                s
            }
            None => match open(service, &entry).await {
                Ok(s) => s,
                Err(err) => {
                    connect::redispatching(service, &entry, client, attempt, &err);
                    avoid.add(role, index);
                    last = Failure::Connect(err);
                    attempt += 1;
                    continue;
                }
            },
        };
        let connect = started.elapsed();
        slot.place.opened();
        let sent = Instant::now();
        match tokio::time::timeout(cfg.http.response_timeout, sender.try_send_request(req)).await {
            Ok(Ok(response)) => {
                let pooled = (!upgrade).then(|| Pooled { addr: entry.addr, sender });
                return Ok(Answer { entry, response, pooled, slot, queued, connect, response_time: sent.elapsed() });
            }
            Ok(Err(mut e)) => {
                let unsent = e.take_message();
                let error = e.into_error();
                entry.state.counters.transfer_errors.fetch_add(1, Relaxed);
                if let (Some(r), true) = (unsent, was_reused) {
                    // Never written: safe to send again, on this server or another.
                    debug!(service = %cfg.name, server = %entry.addr, "pooled connection closed before use, sending again: {error}");
                    req = r;
                    continue;
                }
                match (&template, was_reused && error.is_incomplete_message()) {
                    (Some((method, uri, version, headers)), true) => {
                        // Closed by the server as the request went out (a keep-alive race): an
                        // idempotent request without a body can be sent again.
                        debug!(service = %cfg.name, server = %entry.addr, "reused connection closed by the server, retrying: {error}");
                        let mut again = Request::new(ProxyBody::Empty);
                        *again.method_mut() = method.clone();
                        *again.uri_mut() = uri.clone();
                        *again.version_mut() = *version;
                        *again.headers_mut() = headers.clone();
                        req = again;
                        attempt += 1;
                        continue;
                    }
                    _ => return Err(Failure::Broken(entry.addr, error)),
                }
            }
            Err(_) => return Err(Failure::Timeout(entry.addr)),
        }
    }
    Err(last)
}

/// A new connection to `entry`, handshaken; its driver task runs until the connection ends.
async fn open(service: &Service, entry: &ServerEntry) -> Result<SendRequest<ProxyBody>, Error> {
    let stream = connect::connect_to(service, entry).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::new(Kind::Io, Side::Server).server(entry.addr).io(std::io::Error::other(e)))?;
    let addr = entry.addr;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(server = %addr, "server connection ended: {e}");
        }
    });
    Ok(sender)
}

/// Leaves the queue if the request was in it; returns the time it waited.
fn leave_queue(service: &Service, started: &mut Option<Instant>) -> Duration {
    match started.take() {
        Some(t) => {
            service.state.queue.fetch_sub(1, Relaxed);
            t.elapsed()
        }
        None => Duration::ZERO,
    }
}

/// One request's place on a server: counted in its `current` until the response has gone out,
/// then a queued request is told a place is free.
pub struct Slot {
    place: ConnGuard,
    service: Arc<ServiceState>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.service.released.notify_one();
    }
}
