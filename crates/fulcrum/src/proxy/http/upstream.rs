//! Sending one request to a server: the dispatcher picks and reserves, the request goes over an
//! idle keep-alive connection of that server (`idle.rs`) or a new one (connected and measured by
//! the dispatcher), and a failed send is repeated where that is safe (`replay.rs`). A send that
//! failed because the client's request body did is the client's failure, never the server's.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::body::ProxyBody;
use super::idle::Lent;
use super::replay::{Next, Replay};
use crate::error::{Error, Kind, Side};
use crate::proxy::dispatch::{Dispatch, Place, Steer};
use crate::live::Pool;

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
    /// The client's request body failed as it went out (bad bytes, or the client went away):
    /// 400, and nothing counted against the server.
    Client(String),
}

/// What a forwarded request got.
pub struct Answer {
    pub response: Response<Incoming>,
    /// The connection, to give back when the body is read (not for upgrades).
    pub lent: Option<Lent<SendRequest<ProxyBody>>>,
    /// The request's place on the server, held until the response has gone out.
    pub place: Place,
    pub connect: Duration,
    pub response_time: Duration,
}

/// Sends `req` to a server of `pool` for `client`; `idempotent` says a failed send may be
/// repeated (when its body is wholly in hand too).
pub async fn send(pool: &Pool, client: SocketAddr, mut req: Request<ProxyBody>, steer: Steer<'_>, idempotent: bool, upgrade: bool) -> Result<Answer, Failure> {
    let cfg = &pool.config;
    let mut dispatch = Dispatch::new(pool, client, steer);
    let replay = Replay::of(&req, idempotent);
    let fault = req.body().fault();
    loop {
        let place = dispatch.reserve().await.map_err(|e| match e.kind {
            Kind::QueueTimeout => Failure::Queue(cfg.queue_timeout()),
            _ => Failure::Connect(e),
        })?;
        let entry = place.entry().clone();
        let idle = &entry.state.idle;
        let started = Instant::now();
        let mut reused = if upgrade { None } else { idle.take(entry.addr, cfg.http.keepalive_idle) };
        if let Some(s) = reused.as_mut()
            && s.ready().await.is_err()
        {
            reused = None;
        }
        let was_reused = reused.is_some();
        let mut sender = match reused {
            Some(s) => s,
            None => match open(&dispatch, &place).await {
                Ok(s) => s,
                Err(err) => {
                    dispatch.failed(place, err).map_err(Failure::Connect)?;
                    continue;
                }
            },
        };
        let connect = started.elapsed();
        place.opened();
        let sent = Instant::now();
        match tokio::time::timeout(cfg.http.response_timeout, sender.try_send_request(req)).await {
            Ok(Ok(response)) => {
                let lent = (!upgrade).then(|| Lent::new(sender, entry.addr, idle.clone()));
                return Ok(Answer { response, lent, place, connect, response_time: sent.elapsed() });
            }
            Ok(Err(failed)) => {
                if let Some(why) = fault.as_ref().and_then(|f| f.get()) {
                    debug!(service = %cfg.name, server = %entry.addr, "send failed on the client's side: {}", failed.error());
                    return Err(Failure::Client(why.to_string()));
                }
                entry.state.counters.transfer_errors.fetch_add(1, Relaxed);
                match replay.after(failed, was_reused) {
                    Next::Unsent(r) => {
                        debug!(service = %cfg.name, server = %entry.addr, "reused connection closed before use, sending again");
                        req = r;
                    }
                    Next::Retry(r, error) => {
                        if !dispatch.retry_same() {
                            return Err(Failure::Broken(entry.addr, error));
                        }
                        debug!(service = %cfg.name, server = %entry.addr, "reused connection closed by the server, retrying: {error}");
                        req = r;
                    }
                    Next::Fail(error) => return Err(Failure::Broken(entry.addr, error)),
                }
            }
            Err(_) => return Err(Failure::Timeout(entry.addr)),
        }
    }
}

/// The most of a server's bytes read ahead per connection (response head included). hyper's
/// default grows its read buffer to about 400 KiB while a server sends faster than the client
/// reads; this bound is what a slow reader costs on the server side, since hyper reads the next
/// chunk only once the client's side has taken the last one.
pub const SERVER_READ_BUFFER: usize = 16 * 1024;

/// A new connection to the server of `place`, handshaken; its driver task runs until the
/// connection ends.
async fn open(dispatch: &Dispatch<'_>, place: &Place) -> Result<SendRequest<ProxyBody>, Error> {
    let addr = place.entry().addr;
    let stream = dispatch.connect(place).await?;
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(SERVER_READ_BUFFER)
        .handshake(TokioIo::new(stream))
        .await
        // Part of connecting: nothing was sent yet, so another server may be tried.
        .map_err(|e| Error::new(Kind::Connect, Side::Server).server(addr).io(std::io::Error::other(e)))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(server = %addr, "server connection ended: {e}");
        }
    });
    Ok(sender)
}
