//! The one body type of HTTP mode, both ways: a client's request body on its way to a server
//! (its front read ahead), a server's response on its way to a client (which gives its lent
//! connection back when it ends, holds the request's place on the server until then, and writes
//! the access-log line when dropped), or a short text Fulcrum answers itself. An enum rather than
//! a boxed trait object: no allocation per request for the body.
//!
//! Read-ahead: before any server is contacted, a request body is read up to [`READ_AHEAD`]
//! bytes (within `head_timeout`), so a short body that is malformed, or whose client goes away,
//! is refused with one 400 and never reaches a server; and a body read whole can be sent again
//! when a reused connection fails under it (`replay.rs`).
//!
//! Blame: a request body that fails later, as it streams (the guard stopped bad bytes, or the
//! client went away), is the client's fault. The body records it in its [`ClientFault`], so a
//! failed send or a broken response caused by it is never counted against the server.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::StatusCode;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;

use super::access::Record;
use super::idle::Lent;
use crate::proxy::dispatch::Place;

/// How much of a request body is read before a server is contacted: enough for the forms and
/// API calls most requests carry, small enough that holding it per request costs little.
pub const READ_AHEAD: usize = 64 * 1024;

pub enum ProxyBody {
    Empty,
    Text(Option<Bytes>),
    /// A client's body, counted into `bytes` as it goes: the frames read ahead, then the rest
    /// (none when the body ended within the read-ahead). `limit` (`max_request_body`, 0: none)
    /// bounds what this copy of it sends, `sent` counts that: a replayed copy counts afresh.
    Request {
        ahead: VecDeque<Frame<Bytes>>,
        rest: Option<ClientBody>,
        bytes: Arc<AtomicU64>,
        fault: ClientFault,
        limit: u64,
        sent: u64,
    },
    /// An answer of Fulcrum's own to an HTTP/2 request whose body it left unread: the body is
    /// held until the answer has gone out, then drained ([`Unread`]).
    Unread {
        text: Option<Bytes>,
        _body: Unread,
    },
    /// A server's response body; `place` holds the request's place on the server until the
    /// body has gone out.
    Response {
        body: ServerBody,
        /// hyper's connection, given back when the body ends (the own path's body gives its own).
        lent: Option<Lent<SendRequest<ProxyBody>>>,
        record: Option<Box<Record>>,
        /// The request's place on the server: held for its Drop, and names the server a
        /// broken response is counted against.
        place: Option<Place>,
        /// The request body's fault, if it fails: then a broken response is not the server's.
        fault: ClientFault,
        /// Adds the request's whole time to its service's histogram when the body is done.
        timing: Timing,
    },
    /// Any of the above, compressed on its way to the client (`compress.rs`).
    Compressed(Box<super::compress::Compressing>),
}

/// A request's start and its service's (and route's) counters: dropped with the response body
/// (when it has gone out, or the client left), it observes the request's total time.
pub struct Timing {
    pub began: std::time::Instant,
    pub state: Arc<crate::live::ServiceState>,
    pub route: Option<Arc<crate::live::http_stats::RouteStats>>,
    /// The server that answered.
    pub server: Option<Arc<crate::live::ServerState>>,
    /// With `bytes` limits: the request's limits, charged the bytes both ways when it ends.
    pub bytes: Option<Box<ByteCharge>>,
}

/// What a response charges its request's `bytes` limits as it ends: its body's bytes and the
/// request body's.
pub struct ByteCharge {
    pub limits: Arc<crate::proxy::limits::Request>,
    pub received: Arc<AtomicU64>,
    pub sent: u64,
}

impl Drop for Timing {
    fn drop(&mut self) {
        let took = crate::clock::since(self.began);
        self.state.http.total.observe(took);
        if let Some(route) = &self.route {
            route.total.observe(took);
        }
        if let Some(server) = &self.server {
            server.counters.duration.observe(took);
        }
        if let Some(b) = &self.bytes {
            b.limits.charge(crate::config::Counted::Bytes, b.sent + b.received.load(Relaxed));
        }
    }
}

/// The unread body of an HTTP/2 request that Fulcrum answered itself (413, a route's deny or
/// redirect). Dropping it at once would reset the stream with CANCEL while the answer is still
/// on its way; held until the answer has gone out and dropped then, it would be reset with
/// NO_ERROR (RFC 9113 section 8.1), which clients that are still sending (curl among them) take
/// for an error all the same. So once the answer is out, up to [`Unread::DRAIN_BYTES`] more of it
/// are read and thrown away within [`Unread::DRAIN_TIME`], off the connection's task: a client
/// finishes its upload and the stream closes cleanly. A client that sends more, or slower, is
/// reset with NO_ERROR then. Nothing read is kept.
pub struct Unread(Option<ClientBody>);

impl Unread {
    pub const DRAIN_BYTES: u64 = 1 << 20;
    pub const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn new(body: ClientBody) -> Unread {
        Unread(Some(body))
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        let (Some(mut body), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current()) else { return };
        runtime.spawn(async move {
            let drain = async {
                let mut read = 0u64;
                while read <= Unread::DRAIN_BYTES
                    && let Some(Ok(frame)) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
                {
                    read += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
            };
            let _ = tokio::time::timeout(Unread::DRAIN_TIME, drain).await;
        });
    }
}

/// Set when a client's request body failed on its way to a server (bad bytes the guard stopped,
/// the client went away, or it passed `max_request_body`), with the status the client is
/// answered and the reason; shared by the request body, the send and the response, so that
/// each can tell the client's failure from the server's.
#[derive(Debug, Default, Clone)]
pub struct ClientFault(Arc<Fault>);

#[derive(Debug, Default)]
pub struct Fault {
    what: OnceLock<(StatusCode, String)>,
    /// The rest of a body cut at `max_request_body`, kept for the 413 to hold (`Unread`).
    unread: std::sync::Mutex<Option<ClientBody>>,
}

impl ClientFault {
    pub fn get(&self) -> Option<&str> {
        self.0.what.get().map(|(_, why)| why.as_str())
    }
    /// What the client is answered: 413 for a body over the limit, else 400.
    pub fn status(&self) -> StatusCode {
        self.0.what.get().map_or(StatusCode::BAD_REQUEST, |(status, _)| *status)
    }
    fn set(&self, status: StatusCode, why: String) {
        let _ = self.0.what.set((status, why));
    }
    /// The unread rest of a body cut at its limit, once.
    pub fn take_unread(&self) -> Option<ClientBody> {
        self.0.unread.lock().ok()?.take()
    }
}

/// Why a request body stopped on its way to a server: hyper's reading of the client failed, or
/// the body passed `max_request_body` (the send is then abandoned, and its connection with it).
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Client(#[from] hyper::Error),
    #[error("the request body is larger than max_request_body ({0} bytes)")]
    TooLarge(u64),
    #[error("compressing the response failed: {0}")]
    Encoding(std::io::Error),
    /// The server's response broke on the own HTTP/1.1 path (`origin.rs`).
    #[error("{0}")]
    Server(String),
}

/// A client's request body: hyper's (a request hyper's server read), or none (a request the own
/// HTTP/1.1 path read, `front.rs`, which takes only requests without a body).
#[derive(Debug)]
pub enum ClientBody {
    Hyper(Incoming),
    Empty,
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ClientBody::Hyper(b) => Pin::new(b).poll_frame(cx),
            ClientBody::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Hyper(b) => b.is_end_stream(),
            ClientBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Hyper(b) => b.size_hint(),
            ClientBody::Empty => SizeHint::with_exact(0),
        }
    }
}

/// A server's response body: hyper's (HTTPS and HTTP/2 servers, upgrades) or the own HTTP/1.1
/// path's.
pub enum ServerBody {
    Hyper(Incoming),
    /// Boxed: it holds the connection and its reader, and a response is moved whole on its way.
    Own(Box<super::origin::ResponseBody>),
}

impl Body for ServerBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ServerBody::Hyper(b) => Pin::new(b).poll_frame(cx).map(|f| f.map(|f| f.map_err(BodyError::Client))),
            ServerBody::Own(b) => Pin::new(&mut **b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ServerBody::Hyper(b) => b.is_end_stream(),
            ServerBody::Own(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ServerBody::Hyper(b) => b.size_hint(),
            ServerBody::Own(b) => b.size_hint(),
        }
    }
}

/// The `max_request_body` answer.
pub fn too_large(limit: u64) -> String {
    BodyError::TooLarge(limit).to_string()
}

/// Reads `incoming` until it ends or at least `bound` bytes are in hand. An error is the
/// client's (its bytes were bad or it went away): the caller answers it, no server is involved.
pub async fn read_ahead(mut incoming: ClientBody, bound: usize) -> Result<(VecDeque<Frame<Bytes>>, Option<ClientBody>), hyper::Error> {
    let mut ahead = VecDeque::new();
    let mut held = 0;
    while held < bound {
        match std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx)).await {
            Some(Ok(frame)) => {
                held += frame.data_ref().map_or(0, Bytes::len);
                ahead.push_back(frame);
            }
            Some(Err(e)) => return Err(e),
            None => return Ok((ahead, None)),
        }
    }
    let rest = (!incoming.is_end_stream()).then_some(incoming);
    Ok((ahead, rest))
}

impl ProxyBody {
    pub fn text(text: impl Into<Bytes>) -> Self {
        ProxyBody::Text(Some(text.into()))
    }

    /// The counter of a client's body's bytes, for the server's in-flight view.
    pub fn counted(&self) -> Option<Arc<AtomicU64>> {
        match self {
            ProxyBody::Request { bytes, .. } => Some(bytes.clone()),
            _ => None,
        }
    }

    /// The fault of a client's body, to look at after a failed send.
    pub fn fault(&self) -> Option<ClientFault> {
        match self {
            ProxyBody::Request { fault, .. } => Some(fault.clone()),
            _ => None,
        }
    }

    /// A copy to send again, for a body wholly in hand (none, or read whole ahead).
    pub fn replica(&self) -> Option<ProxyBody> {
        match self {
            ProxyBody::Empty => Some(ProxyBody::Empty),
            ProxyBody::Request { ahead, rest: None, bytes, fault, limit, .. } => {
                let copy = |f: &Frame<Bytes>| match (f.data_ref(), f.trailers_ref()) {
                    (Some(d), _) => Some(Frame::data(d.clone())),
                    (_, Some(t)) => Some(Frame::trailers(t.clone())),
                    _ => None,
                };
                let ahead = ahead.iter().map(copy).collect::<Option<VecDeque<_>>>()?;
                Some(ProxyBody::Request { ahead, rest: None, bytes: bytes.clone(), fault: fault.clone(), limit: *limit, sent: 0 })
            }
            _ => None,
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Text(t) | ProxyBody::Unread { text: t, .. } => Poll::Ready(t.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Request { ahead, rest, bytes, fault, limit, sent } => {
                let frame = match (ahead.pop_front(), &mut *rest) {
                    (Some(f), _) => Some(Ok(f)),
                    (None, Some(rest)) => match Pin::new(rest).poll_frame(cx) {
                        Poll::Ready(f) => f,
                        Poll::Pending => return Poll::Pending,
                    },
                    (None, None) => None,
                };
                match &frame {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            bytes.fetch_add(d.len() as u64, Relaxed);
                            *sent += d.len() as u64;
                            if *limit > 0 && *sent > *limit {
                                // Cut here: the send fails, so the server never sees the body end
                                // and its connection is not reused.
                                fault.set(StatusCode::PAYLOAD_TOO_LARGE, too_large(*limit));
                                if let Ok(mut unread) = fault.0.unread.lock() {
                                    *unread = rest.take();
                                }
                                return Poll::Ready(Some(Err(BodyError::TooLarge(*limit))));
                            }
                        }
                    }
                    Some(Err(e)) => fault.set(StatusCode::BAD_REQUEST, format!("the client's request body failed: {e}")),
                    None => {}
                }
                Poll::Ready(frame.map(|f| f.map_err(BodyError::Client)))
            }
            ProxyBody::Response { body, lent, record, place, fault, timing } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(f))) => {
                        if let (Some(d), Some(r)) = (f.data_ref(), record.as_mut()) {
                            r.bytes_out += d.len() as u64;
                        }
                        if let (Some(d), Some(b)) = (f.data_ref(), timing.bytes.as_mut()) {
                            b.sent += d.len() as u64;
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        // A broken response: its connection is not reused.
                        lent.take();
                        broken_response(place.as_ref(), fault, e);
                    }
                    Poll::Ready(None) => {
                        if let Some(p) = lent.take() {
                            p.release();
                        }
                    }
                    Poll::Pending => {}
                }
                if body.is_end_stream()
                    && let Some(p) = lent.take()
                {
                    p.release();
                }
                polled
            }
            ProxyBody::Compressed(c) => Pin::new(&mut **c).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Text(t) | ProxyBody::Unread { text: t, .. } => t.is_none(),
            ProxyBody::Request { ahead, rest, .. } => ahead.is_empty() && rest.as_ref().is_none_or(Body::is_end_stream),
            ProxyBody::Response { body, .. } => body.is_end_stream(),
            ProxyBody::Compressed(c) => c.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Text(t) | ProxyBody::Unread { text: t, .. } => SizeHint::with_exact(t.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Request { ahead, rest, .. } => {
                let held: u64 = ahead.iter().filter_map(|f| f.data_ref()).map(|d| d.len() as u64).sum();
                let trailers = ahead.iter().any(Frame::is_trailers);
                match rest.as_ref().map(Body::size_hint) {
                    // Whole in hand: the server gets a Content-Length (unless trailers need chunks).
                    None if !trailers => SizeHint::with_exact(held),
                    Some(h) if h.exact().is_some() => SizeHint::with_exact(held + h.lower()),
                    _ => {
                        let mut h = SizeHint::new();
                        h.set_lower(held);
                        h
                    }
                }
            }
            ProxyBody::Response { body, .. } => body.size_hint(),
            ProxyBody::Compressed(c) => c.size_hint(),
        }
    }
}

/// A server's response that broke mid-body is a transfer error of that server, unless the
/// client's request body failed first and took the connection down with it.
fn broken_response(place: Option<&Place>, fault: &ClientFault, e: &BodyError) {
    let Some(place) = place else { return };
    let server = place.entry().addr;
    match fault.get() {
        Some(why) => tracing::debug!(%server, "response cut short by the client: {why}"),
        None => {
            place.entry().state.counters.transfer_errors.fetch_add(1, Relaxed);
            tracing::warn!(%server, "the server broke its response: {e}");
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // A response with no body (204, HEAD, length 0) is never polled: its connection is
        // still good for the next request.
        if let ProxyBody::Response { body, lent, .. } = self
            && body.is_end_stream()
            && let Some(p) = lent.take()
        {
            p.release();
        }
    }
}
