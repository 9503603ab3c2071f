//! HTTP/2 from clients: over TLS when the client chose `h2` by ALPN (`http2`, on by default),
//! and with prior knowledge on a plain service with `h2c`. Each stream is a request handled as
//! an HTTP/1.1 one is (routing, affinity, queueing, retries, forwarded headers, access log) and
//! sent to the servers in HTTP/1.1. The connection announces extended CONNECT
//! (`SETTINGS_ENABLE_CONNECT_PROTOCOL`) for WebSockets (`websocket`).
//!
//! Abuse limits, each with a default: `max_streams` open streams per connection (100);
//! `max_head_size` for a request's decoded header list; at most `MAX_PENDING_RESETS` streams
//! the client opened and reset before they were handled (the rapid reset attack,
//! CVE-2023-44487: past it the connection ends with GOAWAY ENHANCE_YOUR_CALM), and at most
//! `MAX_LOCAL_RESETS` streams Fulcrum had to reset for the client's errors. A connection with no
//! request for `head_timeout` is closed with GOAWAY, as an idle HTTP/1.1 client is.
//!
//! An HTTP/2 connection does not park: hyper's state (HPACK tables, stream windows) lives as
//! long as the connection.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tracing::debug;

use super::guard::{ClientIo, Verdict};
use super::park::Activity;
use crate::live::Service;
use crate::shutdown::Shutdown;

/// The client connection preface (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams opened and reset by the client before Fulcrum handled them, pending at once.
pub const MAX_PENDING_RESETS: usize = 20;

/// Streams Fulcrum reset because of the client's errors, over the connection's life.
pub const MAX_LOCAL_RESETS: usize = 1024;

/// What a plain client of an `h2c` service opened with.
pub enum Opening {
    /// The whole HTTP/2 preface, read.
    Preface,
    /// Something else: these bytes, read already, begin an HTTP/1.1 request.
    Other(BytesMut),
    /// The client closed, failed, or sent part of the preface and stopped for `head_timeout`.
    Gone(&'static str),
}

/// Reads a plain client's first bytes, as many as it takes to tell the HTTP/2 preface from
/// anything else (at most its 24), waiting for each on the socket's readiness: a client that
/// sends part of the preface and stops costs a parked task and its one deadline (`limit`),
/// never a poll on a timer.
pub async fn read_preface<S: ClientIo>(client: &mut S, limit: Duration) -> Opening {
    let deadline = crate::clock::timer_now() + limit;
    let mut buf = [0u8; PREFACE.len()];
    let mut n = 0;
    loop {
        let read = match tokio::time::timeout_at(deadline, client.read(&mut buf[n..])).await {
            Err(_) if n == 0 => return Opening::Gone("no request within head_timeout"),
            Err(_) => return Opening::Gone("part of the HTTP/2 preface, then nothing within head_timeout"),
            Ok(Err(_)) => return Opening::Gone("the connection failed"),
            Ok(Ok(0)) => return Opening::Gone("closed before a request"),
            Ok(Ok(read)) => read,
        };
        n += read;
        if buf[..n] != PREFACE[..n] {
            return Opening::Other(BytesMut::from(&buf[..n]));
        }
        if n == PREFACE.len() {
            return Opening::Preface;
        }
    }
}

/// A client connection whose preface was read already: it is given to hyper again first.
struct Rewound<S> {
    inner: S,
    /// How much of `PREFACE` is still to give.
    preface_left: usize,
}

impl<S: ClientIo> AsyncRead for Rewound<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.preface_left > 0 {
            let from = PREFACE.len() - self.preface_left;
            let n = self.preface_left.min(buf.remaining());
            buf.put_slice(&PREFACE[from..from + n]);
            self.preface_left -= n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: ClientIo> AsyncWrite for Rewound<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Serves an HTTP/2 client connection to its end; `preface_read` when `read_preface` took it.
pub async fn serve<S: ClientIo>(client: S, preface_read: bool, peer: SocketAddr, service: Arc<Service>, names: Option<Arc<[String]>>, shutdown: Shutdown) {
    let http = &service.config().http;
    let activity = Arc::new(Activity::default());
    // The framing guard reads HTTP/1.1; HTTP/2's framing is hyper's (h2's) to check. An HTTP/2
    // request always names its authority, so no Host is made from the local address.
    let sni: Option<Arc<str>> = client.server_name().map(Arc::from);
    let svc = super::requests(super::Handler::new::<S>(&service, peer, None, names, sni, Verdict::default(), shutdown.stopping().clone()), activity.clone());
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(http.max_streams)
        .max_header_list_size(u32::try_from(http.max_head_size).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_LOCAL_RESETS)
        // WebSockets over HTTP/2 (RFC 8441): `websocket`.
        .enable_connect_protocol();
    let client = Rewound { inner: client, preface_left: if preface_read { PREFACE.len() } else { 0 } };
    let conn = builder.serve_connection(TokioIo::new(client), svc);
    tokio::pin!(conn);
    let idle_limit = http.head_timeout;
    let tick = (idle_limit / 4).max(Duration::from_millis(10));
    let mut seen = (crate::clock::timer_now(), activity.requests().1);
    let closing = loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    debug!(service = %service.config().name, client = %peer, "HTTP/2 connection ended: {e}");
                }
                return;
            }
            _ = tokio::time::sleep(tick) => {
                let (in_flight, started) = activity.requests();
                if in_flight > 0 || started != seen.1 {
                    seen = (crate::clock::timer_now(), started);
                } else if crate::clock::since(seen.0) >= idle_limit {
                    break "idle";
                }
            }
            // Stopped accepting (a drain, an upgrade): GOAWAY, so the client opens its next
            // streams on a connection to whoever accepts now.
            _ = shutdown.stopping().cancelled() => break "draining",
            _ = shutdown.terminating().cancelled() => break "shutting down",
        }
    };
    debug!(service = %service.config().name, client = %peer, "closing HTTP/2 connection: {closing}");
    // GOAWAY: streams in flight finish, within the response timeout.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(
        http.response_timeout,
        poll_fn(|cx| match conn.as_mut().poll(cx) {
            Poll::Ready(_) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }),
    )
    .await;
}
