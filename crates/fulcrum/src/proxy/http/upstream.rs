//! Sending one request to a server: the dispatcher picks and reserves, the request goes over an
//! idle keep-alive connection of that server (`idle.rs`) or a new one (connected and measured by
//! the dispatcher), and a failed send is repeated where that is safe (`replay.rs`). A plain-text
//! HTTP/1.1 server is spoken to on Fulcrum's own path (`origin.rs`); HTTPS and HTTP/2 servers,
//! and upgrades, through hyper's client. A send that
//! failed because the client's request body did is the client's failure, never the server's.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::SendRequest;
use hyper::client::conn::http2;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tracing::debug;

use super::Kept;
use super::body::{ProxyBody, ServerBody};
use super::idle::{Lent, Target};
use super::origin;
use super::replay::{Broke, Next, Replay};
use crate::config::{RetryOn, ServerProtocol};
use crate::error::{Error, Kind, Side};
use crate::live::Pool;
use crate::proxy::dispatch::{Dispatch, Place, Steer};

/// Why no response came from any server.
pub enum Failure {
    /// No usable server, or every connect failed: 503 / 502.
    Connect(Error),
    /// The server did not answer within `response_timeout`: 504.
    Timeout(SocketAddr),
    /// Every server stayed at its `maxconn` for `queue_timeout`: 503.
    Queue(Duration),
    /// The server closed or broke the connection before a response: 502.
    Broken(SocketAddr, Broke),
    /// The client's request body failed as it went out (bad bytes, or the client went away:
    /// 400; past `max_request_body`: 413), and nothing counted against the server.
    Client(hyper::StatusCode, String),
}

/// What a forwarded request got.
pub struct Answer {
    pub response: Response<ServerBody>,
    /// The connection, to give back when the body is read (not for upgrades).
    pub lent: Option<Lent<SendRequest<ProxyBody>>>,
    /// The request's place on the server, held until the response has gone out.
    pub place: Place,
    pub connect: Duration,
    pub response_time: Duration,
}

/// Sends `req` to a server of `pool` for `client`; `idempotent` says a failed send may be
/// repeated (when its body is wholly in hand too).
///
/// Its future is part of every request's (see `handle`): a function returning an async block,
/// so the arguments are held once, and the connects of a new server connection boxed, so a
/// request on a kept-alive connection does not carry their state.
#[allow(clippy::manual_async_fn)]
pub fn send(
    pool: &Pool,
    client: SocketAddr,
    mut req: Request<ProxyBody>,
    steer: Steer<'_>,
    idempotent: bool,
    upgrade: bool,
) -> impl Future<Output = Result<Answer, Failure>> + Send {
    async move {
        let cfg = &pool.config;
        let shown = crate::live::inflight::Request { method: req.method().clone(), uri: req.uri().clone(), version: req.version(), body_bytes: req.body().counted() };
        let mut dispatch = Dispatch::new(pool, client, steer).for_request(shown);
        let replay = Replay::of(&req, idempotent);
        let fault = req.body().fault();
        let mut retries = Retries::new(pool);
        loop {
            let place = dispatch.reserve().await.map_err(|e| match e.kind {
                Kind::QueueTimeout => Failure::Queue(cfg.queue_timeout),
                _ => Failure::Connect(e),
            })?;
            let entry = place.entry().clone();
            let kept = entry.state.kept::<Kept>();
            let target = Target { addr: entry.addr, tls: pool.server_tls.as_ref().map(|o| o.identity()) };
            let started = crate::clock::now();
            let h2 = cfg.protocol == ServerProtocol::H2;
            let own = !h2 && !upgrade && pool.server_tls.is_none();
            let mut reused = match (h2, upgrade, kept) {
                (_, _, None) | (false, true, _) => None,
                (true, _, Some(k)) => shared_h2(&k.h2, target.tls).map(Sender::H2),
                // A connection the server closed while idle is passed over, as hyper's is.
                (false, false, Some(k)) if own => std::iter::from_fn(|| k.own.take(target, cfg.http.keepalive_idle)).find(|c| !c.gone()).map(|c| Sender::Own(Some(c))),
                (false, false, Some(k)) => k.idle.take(target, cfg.http.keepalive_idle).map(Sender::H1),
            };
            if let Some(s) = reused.as_mut()
                && s.ready().await.is_err()
            {
                reused = None;
            }
            let was_reused = reused.is_some();
            let opened = match reused {
                Some(s) => Ok(s),
                None if h2 => Box::pin(open_h2(&dispatch, &place, pool)).await.map(Sender::H2),
                None if own => Box::pin(dispatch.connect(&place)).await.map(|s| Sender::Own(Some(origin::Conn::new(s)))),
                None => Box::pin(open(&dispatch, &place, pool)).await.map(Sender::H1),
            };
            let mut sender = match opened {
                Ok(s) => s,
                Err(err) => {
                    if !retries.connect_failure() {
                        return Err(Failure::Connect(err));
                    }
                    dispatch.failed(place, err).map_err(Failure::Connect)?;
                    continue;
                }
            };
            let connect = crate::clock::since(started);
            place.opened();
            let sent = crate::clock::now();
            let home = kept.filter(|_| own).map(|k| (target, k.own.clone()));
            match tokio::time::timeout(retries.per_try, sender.try_send(req, home)).await {
                Ok(Ok(response)) => {
                    let status = response.status().as_u16();
                    if let Some(again) = retries.take(RetryOn::Status(status), &replay, &mut dispatch, &place) {
                        debug!(service = %cfg.name, server = %entry.addr, status, "retrying on another server");
                        // This answer is counted as the last one will be; its connection, its
                        // body unread, is closed with it.
                        entry.state.counters.responses.add(status);
                        crate::live::outlier::observe(pool, &entry, crate::live::outlier::Outcome::Answered(status));
                        req = again;
                        continue;
                    }
                    let lent = match (sender, kept) {
                        (Sender::H1(s), Some(k)) if !upgrade => Some(Lent::new(s, target, k.idle.clone())),
                        _ => None,
                    };
                    return Ok(Answer { response, lent, place, connect, response_time: crate::clock::since(sent) });
                }
                Ok(Err((error, unsent))) => {
                    if let Some(f) = fault.as_ref()
                        && let Some(why) = f.get()
                    {
                        debug!(service = %cfg.name, server = %entry.addr, "send failed on the client's side: {error}");
                        return Err(Failure::Client(f.status(), why.to_string()));
                    }
                    entry.state.counters.transfer_errors.fetch_add(1, Relaxed);
                    match replay.after(unsent, error, was_reused) {
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
                        Next::Fail(error) => match retries.take(RetryOn::Reset, &replay, &mut dispatch, &place) {
                            Some(again) => {
                                debug!(service = %cfg.name, server = %entry.addr, "the server broke the connection, retrying on another: {error}");
                                crate::live::outlier::observe(pool, &entry, crate::live::outlier::Outcome::Gateway("reset"));
                                req = again;
                            }
                            None => return Err(Failure::Broken(entry.addr, error)),
                        },
                    }
                }
                Err(_) => match retries.take(RetryOn::Timeout, &replay, &mut dispatch, &place) {
                    Some(again) => {
                        debug!(service = %cfg.name, server = %entry.addr, "no answer within the try's timeout, retrying on another server");
                        crate::live::outlier::observe(pool, &entry, crate::live::outlier::Outcome::Gateway("timeout"));
                        req = again;
                    }
                    None => return Err(Failure::Timeout(entry.addr)),
                },
            }
        }
    }
}

/// `[service.http.retry]` for one request: what it retries, how many are left, and the pool's
/// budget that every retry takes from.
struct Retries<'a> {
    pool: &'a Pool,
    retry: Option<&'a crate::config::Retry>,
    /// Each try's wait for an answer: `per_try_timeout`, else `response_timeout`.
    per_try: Duration,
    left: u32,
}

impl<'a> Retries<'a> {
    /// Counts the request in the pool's budget.
    fn new(pool: &'a Pool) -> Self {
        let http = &pool.config.http;
        let retry = http.retry.as_ref();
        if let Some(r) = retry {
            pool.state.retry_budget.request(crate::clock::clock_ms(), r.budget_window);
        }
        Retries { pool, retry, per_try: retry.and_then(|r| r.per_try_timeout).unwrap_or(http.response_timeout), left: retry.map_or(0, |r| r.count) }
    }

    /// The request again for another server, when `what` is retried, a retry is left, the
    /// request can be sent again, another server is there to take it and the budget allows.
    fn take(&mut self, what: RetryOn, replay: &Replay, dispatch: &mut Dispatch<'_>, place: &Place) -> Option<Request<ProxyBody>> {
        let r = self.retry.filter(|r| r.on(what) && self.left > 0)?;
        let again = replay.again()?;
        if !self.budget(r) || !dispatch.leave(place) {
            return None;
        }
        self.left -= 1;
        Some(again)
    }

    /// Whether a failed connect may go on to another server: always, unless `retry_on` names
    /// `connect-failure`, which puts those retries in the budget too.
    fn connect_failure(&mut self) -> bool {
        match self.retry.filter(|r| r.on(RetryOn::ConnectFailure)) {
            Some(r) => self.budget(r),
            None => true,
        }
    }

    fn budget(&self, r: &crate::config::Retry) -> bool {
        let state = &self.pool.state;
        let allowance = crate::live::retry_budget::Allowance { percent: r.budget_percent, min_per_second: r.min_retries_per_second, window: r.budget_window };
        if state.retry_budget.try_retry(crate::clock::clock_ms(), allowance) {
            state.retries.fetch_add(1, Relaxed);
            true
        } else {
            state.retries_over_budget.fetch_add(1, Relaxed);
            false
        }
    }
}

/// The most of a server's bytes read ahead per connection (response head included), on the own
/// path (`origin`) and through hyper's client, whose default would grow its read buffer to about
/// 400 KiB while a server sends faster than the client reads; this bound is what a slow reader
/// costs on the server side, since the next chunk is read only once the client's side has taken
/// the last one.
pub const SERVER_READ_BUFFER: usize = 16 * 1024;

/// A connection to send one request on: an HTTP/1.1 one of the server's own (on Fulcrum's path,
/// or hyper's), or a stream of its shared HTTP/2 connection.
enum Sender {
    /// Taken by the send: the response body holds it until it gives it back.
    Own(Option<origin::Conn>),
    H1(SendRequest<ProxyBody>),
    H2(http2::SendRequest<ProxyBody>),
}

/// A failed send: why, and the request when not a byte of it was written.
type SendFailed = (Broke, Option<Request<ProxyBody>>);

impl Sender {
    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::Own(_) => Ok(()),
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    /// Sends `req`; `home` is where the own path's connection goes back to when its response ends.
    async fn try_send(
        &mut self,
        req: Request<ProxyBody>,
        home: Option<(Target, std::sync::Arc<super::idle::IdleConns<origin::Conn>>)>,
    ) -> Result<Response<ServerBody>, SendFailed> {
        fn hyper_failed(mut failed: TrySendError<Request<ProxyBody>>) -> SendFailed {
            let unsent = failed.take_message();
            (Broke::Hyper(failed.into_error()), unsent)
        }
        match self {
            Sender::Own(conn) => {
                let conn = conn.take().expect("a connection is sent on once");
                // Boxed: the exchange's state (the request's parts, its body, the connection) is
                // a few hundred bytes more than the rest of a request's future, and moved once
                // into a box rather than along with every future it is nested in.
                let response = Box::pin(origin::send(conn, req, home)).await.map_err(|(e, unsent)| (Broke::Own(e), unsent))?;
                Ok(response.map(|b| ServerBody::Own(Box::new(b))))
            }
            Sender::H1(s) => s.try_send_request(req).await.map(|r| r.map(ServerBody::Hyper)).map_err(hyper_failed),
            Sender::H2(s) => s.try_send_request(req).await.map(|r| r.map(ServerBody::Hyper)).map_err(hyper_failed),
        }
    }
}

/// The server's shared HTTP/2 connection, while it is open and was made with the TLS `tls`.
fn shared_h2(slot: &std::sync::Mutex<Option<(Option<u64>, http2::SendRequest<ProxyBody>)>>, tls: Option<u64>) -> Option<http2::SendRequest<ProxyBody>> {
    let shared = slot.lock().unwrap_or_else(|e| e.into_inner());
    shared.as_ref().filter(|(made, s)| *made == tls && !s.is_closed()).map(|(_, s)| s.clone())
}

/// A new HTTP/2 connection (h2c, prior knowledge) to the server of `place`, kept as the one
/// its next requests share.
async fn open_h2(dispatch: &Dispatch<'_>, place: &Place, pool: &Pool) -> Result<http2::SendRequest<ProxyBody>, Error> {
    let entry = place.entry();
    let addr = entry.addr;
    let failed = |e: hyper::Error| Error::new(Kind::Connect, Side::Server).server(addr).io(std::io::Error::other(e));
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder.timer(TokioTimer::new());
    let sender = match secure(dispatch, place, pool).await? {
        Stream::Plain(stream) => {
            let (sender, conn) = builder.handshake(TokioIo::new(stream)).await.map_err(failed)?;
            drive(addr, conn);
            sender
        }
        Stream::Tls(stream) => {
            let (sender, conn) = builder.handshake(TokioIo::new(stream)).await.map_err(failed)?;
            drive(addr, conn);
            sender
        }
    };
    if let Some(kept) = entry.state.kept::<Kept>() {
        let tls = pool.server_tls.as_ref().map(|o| o.identity());
        *kept.h2.lock().unwrap_or_else(|e| e.into_inner()) = Some((tls, sender.clone()));
    }
    Ok(sender)
}

/// A new connection to the server of `place`, handshaken; its driver task runs until the
/// connection ends.
async fn open(dispatch: &Dispatch<'_>, place: &Place, pool: &Pool) -> Result<SendRequest<ProxyBody>, Error> {
    let addr = place.entry().addr;
    // Part of connecting: nothing was sent yet, so another server may be tried.
    let failed = |e: hyper::Error| Error::new(Kind::Connect, Side::Server).server(addr).io(std::io::Error::other(e));
    let mut builder = hyper::client::conn::http1::Builder::new();
    builder.max_buf_size(SERVER_READ_BUFFER);
    match secure(dispatch, place, pool).await? {
        Stream::Plain(stream) => {
            let (sender, conn) = builder.handshake(TokioIo::new(stream)).await.map_err(failed)?;
            drive(addr, conn.with_upgrades());
            Ok(sender)
        }
        Stream::Tls(stream) => {
            let (sender, conn) = builder.handshake(TokioIo::new(stream)).await.map_err(failed)?;
            drive(addr, conn.with_upgrades());
            Ok(sender)
        }
    }
}

/// A server connection, in TLS when the pool has `server_tls`.
enum Stream {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

/// Connects the server of `place`, and runs the TLS handshake when the pool asks for one: a
/// handshake that fails (an unverified certificate) is a connect failure of that server.
async fn secure(dispatch: &Dispatch<'_>, place: &Place, pool: &Pool) -> Result<Stream, Error> {
    let stream = dispatch.connect(place).await?;
    let Some(origin) = &pool.server_tls else { return Ok(Stream::Plain(stream)) };
    let entry = place.entry();
    match origin.connect(stream, entry.sni.as_ref(), &entry.state.key.address, pool.config.connect_timeout).await {
        Ok(tls) => Ok(Stream::Tls(Box::new(tls))),
        Err(e) => {
            let e = std::io::Error::other(format!("TLS: {e}"));
            entry.state.record_tls_failure(&pool.config.name, pool.config.failure_limit, &e);
            Err(Error::new(Kind::Connect, Side::Server).server(entry.addr).io(e))
        }
    }
}

/// Runs a server connection's driver on a task of its own until the connection ends.
fn drive<F: Future<Output = hyper::Result<()>> + Send + 'static>(addr: SocketAddr, conn: F) {
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            debug!(server = %addr, "server connection ended: {e}");
        }
    });
}
