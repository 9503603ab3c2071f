//! HTTP/2 from clients: over TLS when the client chose `h2` by ALPN (`http2`, on by default),
//! and with prior knowledge on a plain service with `h2c`. Each stream is a request handled as
//! an HTTP/1.1 one is (routing, affinity, queueing, retries, forwarded headers, access log) and
//! sent to the servers in HTTP/1.1.
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
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::time::Instant;
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

/// Whether a plain client opens with the HTTP/2 preface, read without taking it, within `limit`.
/// A client that sends fewer bytes and stops is HTTP/1.1's to judge.
pub async fn preface<S: ClientIo>(client: &S, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 24];
    loop {
        let peeked = tokio::time::timeout_at(deadline, poll_fn(|cx| client.poll_peek(cx, &mut buf))).await;
        let n = match peeked {
            Ok(Ok(n)) => n,
            _ => return false,
        };
        if n == 0 || buf[..n] != PREFACE[..n] {
            return false;
        }
        if n == PREFACE.len() {
            return true;
        }
        // A part of the preface: peeking again would find the same bytes at once, so wait a
        // little for the rest (clients send it whole in one segment).
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Serves an HTTP/2 client connection to its end.
pub async fn serve<S: ClientIo>(client: S, peer: SocketAddr, service: Arc<Service>, shutdown: Shutdown) {
    let http = &service.config().http;
    let activity = Arc::new(Activity::default());
    // The framing guard reads HTTP/1.1; HTTP/2's framing is hyper's (h2's) to check. An HTTP/2
    // request always names its authority, so no Host is made from the local address.
    let svc = super::requests::<S>(&service, peer, None, Verdict::default(), activity.clone());
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(http.max_streams)
        .max_header_list_size(u32::try_from(http.max_head_size).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_LOCAL_RESETS);
    let conn = builder.serve_connection(TokioIo::new(client), svc);
    tokio::pin!(conn);
    let idle_limit = http.head_timeout;
    let tick = (idle_limit / 4).max(Duration::from_millis(10));
    let mut seen = (Instant::now(), activity.requests().1);
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
                    seen = (Instant::now(), started);
                } else if seen.0.elapsed() >= idle_limit {
                    break "idle";
                }
            }
            _ = shutdown.terminating().cancelled() => break "shutting down",
        }
    };
    debug!(service = %service.config().name, client = %peer, "closing HTTP/2 connection: {closing}");
    // GOAWAY: streams in flight finish, within the response timeout.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(http.response_timeout, poll_fn(|cx| match conn.as_mut().poll(cx) {
        Poll::Ready(_) => Poll::Ready(()),
        Poll::Pending => Poll::Pending,
    }))
    .await;
}
