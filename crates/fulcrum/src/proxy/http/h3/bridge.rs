//! The seam between HTTP/3 and the request handler: an HTTP/2 connection in memory per QUIC
//! connection, whose server side is `h2::serve` (the handler of every HTTP/2 client) over a
//! `QuicSide`, and whose client side carries each HTTP/3 request as one stream: its fields, its
//! body and trailers (`H3Body`, read from the QUIC stream as the handler asks for them), and the
//! response back the same way. The handler sees an HTTPS client at the QUIC peer's address
//! with the server name of its QUIC handshake, and logs the request as HTTP/3.0.
//!
//! Bounds: the pipe holds at most `PIPE` bytes each way; the HTTP/2 windows between the two
//! sides are hyper's defaults, and the QUIC stream windows (`tls::quic`) bound what a client
//! sends ahead of them.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper::client::conn::http2::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::sync::watch;
use tracing::debug;

use crate::live::Service;
use crate::proxy::http::guard::ClientIo;
use crate::shutdown::Shutdown;

/// Bytes the in-memory pipe buffers each way.
const PIPE: usize = 64 * 1024;

type RecvSide = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;
type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// A QUIC connection's way into the handler.
pub(super) struct Bridge {
    /// Opens a stream of the in-memory HTTP/2 connection per request.
    pub sender: SendRequest<H3Body>,
    /// The handler's side: ends when it closed the connection (idle, or the process drains).
    pub served: tokio::task::JoinHandle<()>,
}

impl Bridge {
    pub async fn start(peer: SocketAddr, sni: Option<String>, service: Arc<Service>, shutdown: Shutdown) -> Option<Bridge> {
        let (ours, theirs) = tokio::io::duplex(PIPE);
        let local = Some(service.listen);
        let names = service.tls.as_ref().and_then(|t| t.strict_names(sni.as_deref()));
        let side = QuicSide { pipe: theirs, sni, local };
        let served = shutdown.tasks().spawn(super::super::h2::serve(side, false, peer, service.clone(), names, shutdown.clone()));
        let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
        builder.timer(TokioTimer::new());
        match builder.handshake(TokioIo::new(ours)).await {
            Ok((sender, conn)) => {
                shutdown.tasks().spawn(async move {
                    let _ = conn.await;
                });
                Some(Bridge { sender, served })
            }
            Err(e) => {
                debug!(service = %service.config().name, client = %peer, "HTTP/3: the handler's connection failed: {e}");
                None
            }
        }
    }
}

/// One HTTP/3 request: its fields within `head_timeout`, then through the handler and back.
/// Before the connection's handshake is `confirmed` (0-RTT, `quic_early_data`) a request may be
/// a replay (RFC 8470): a safe method goes on at once with `Early-Data: 1`, any other waits for
/// the handshake (up to `handshake_timeout`, else 425 Too Early), which a replayed first flight
/// never finishes.
pub(super) async fn request(resolver: Resolver, mut sender: SendRequest<H3Body>, head_timeout: Duration, mut confirmed: watch::Receiver<bool>, handshake_timeout: Duration) {
    let (req, stream) = match tokio::time::timeout(head_timeout, resolver.resolve_request()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return debug!("HTTP/3 request refused: {e}"),
        Err(_) => return debug!("HTTP/3 request: no complete fields within head_timeout"),
    };
    let (mut send, recv) = stream.split();
    let (mut parts, ()) = req.into_parts();
    if !*confirmed.borrow() {
        if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE) {
            parts.headers.insert(HeaderName::from_static("early-data"), HeaderValue::from_static("1"));
        } else if !matches!(tokio::time::timeout(handshake_timeout, confirmed.wait_for(|done| *done)).await, Ok(Ok(_))) {
            let too_early = StatusCode::from_u16(425).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return own_answer(&mut send, too_early, "a request that is not safe to replay, in early data, and the handshake did not finish").await;
        }
    }
    // HTTP/2 between the two sides; the handler is told it is HTTP/3 (`QuicSide`).
    parts.version = hyper::Version::HTTP_2;
    if parts.uri.authority().is_none() {
        // RFC 9114 section 4.3.1: a request without :authority must have a Host, which HTTP/2
        // carries as :authority; without either it cannot be routed.
        let Some(uri) = with_host_authority(&parts) else {
            return own_answer(&mut send, StatusCode::BAD_REQUEST, "an HTTP/3 request without :authority or Host").await;
        };
        parts.uri = uri;
    }
    let req = Request::from_parts(parts, H3Body { recv, state: State::Data });
    let response = match sender.ready().await {
        Ok(()) => sender.send_request(req).await,
        Err(e) => Err(e),
    };
    let response = match response {
        Ok(r) => r,
        // The handler's connection closed under the request (the process drains): the client
        // may send it again on a new connection.
        Err(e) => {
            debug!("HTTP/3 request not handled: {e}");
            return own_answer(&mut send, StatusCode::SERVICE_UNAVAILABLE, "the connection is closing").await;
        }
    };
    let (head, mut body) = response.into_parts();
    if let Err(e) = send.send_response(Response::from_parts(head, ())).await {
        return debug!("HTTP/3 response not sent: {e}");
    }
    while let Some(frame) = body.frame().await {
        let sent = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => send.send_data(data).await,
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) => send.send_trailers(trailers).await,
                    Err(_) => Ok(()),
                },
            },
            Err(e) => {
                // The server broke its response: the client sees the stream reset, not an end.
                debug!("HTTP/3 response body failed: {e}");
                return send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
            }
        };
        if let Err(e) = sent {
            return debug!("HTTP/3 response not sent whole: {e}");
        }
    }
    if let Err(e) = send.finish().await {
        debug!("HTTP/3 response not finished: {e}");
    }
}

/// `https://{Host}{path}` for a request that named its host only in a Host field.
fn with_host_authority(parts: &hyper::http::request::Parts) -> Option<hyper::Uri> {
    let host = parts.headers.get(hyper::header::HOST)?.to_str().ok().filter(|h| !h.is_empty())?;
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    format!("https://{host}{pq}").parse().ok()
}

/// An answer of the bridge's own, for a request the handler never saw.
async fn own_answer<S: h3::quic::SendStream<Bytes>>(send: &mut h3::server::RequestStream<S, Bytes>, status: StatusCode, why: &str) {
    let mut head = Response::new(());
    *head.status_mut() = status;
    head.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"));
    let text = format!("{} {}: {why}\n", status.as_u16(), status.canonical_reason().unwrap_or(""));
    if send.send_response(head).await.is_ok() && send.send_data(Bytes::from(text)).await.is_ok() {
        let _ = send.finish().await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Data,
    Trailers,
    Done,
}

/// A request body read from its QUIC stream as the handler polls it: data, then trailers. It
/// holds no more than the frame it hands on; QUIC's flow control holds the client back.
pub(super) struct H3Body {
    recv: RecvSide,
    state: State,
}

impl Body for H3Body {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            match self.state {
                State::Data => match ready!(self.recv.poll_recv_data(cx)) {
                    Ok(Some(mut data)) => return Poll::Ready(Some(Ok(Frame::data(data.copy_to_bytes(data.remaining()))))),
                    Ok(None) => self.state = State::Trailers,
                    Err(e) => {
                        self.state = State::Done;
                        return Poll::Ready(Some(Err(e)));
                    }
                },
                State::Trailers => {
                    let r = ready!(self.recv.poll_recv_trailers(cx));
                    self.state = State::Done;
                    return Poll::Ready(match r {
                        Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
                        Ok(None) => None,
                        Err(e) => Some(Err(e)),
                    });
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The handler's side of the pipe: an HTTPS client that chose HTTP/2, seen at the QUIC peer's
/// address, named by its QUIC handshake's server name, whose requests are HTTP/3.
pub(crate) struct QuicSide {
    pipe: DuplexStream,
    sni: Option<String>,
    local: Option<SocketAddr>,
}

impl ClientIo for QuicSide {
    const SCHEME: &'static str = "https";
    const PARKS: bool = false;
    const H3: bool = true;
    fn poll_read_ready(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn write_now(&self, _: &[u8]) {}
    fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }
    fn chose_h2(&self) -> bool {
        true
    }
    fn server_name(&self) -> Option<&str> {
        self.sni.as_deref()
    }
}

impl AsyncRead for QuicSide {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_read(cx, buf)
    }
}

impl AsyncWrite for QuicSide {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.pipe).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.pipe).poll_shutdown(cx)
    }
}
