//! One QUIC connection: its handshake, HTTP/3 over it, and its end.
//!
//! The handshake has `handshake_timeout`, as over TCP; with `quic_early_data` the connection
//! serves during it (0-RTT), and `bridge` holds back the requests that must not be replayed. HTTP/3 reads a request's fields up to
//! `max_head_size` (a larger field section is answered 431 by the h3 crate) and within
//! `head_timeout`; request streams open at once are bounded by the transport's stream credit
//! (`max_streams`), so a client cannot open more, and each stream's and the connection's
//! receive windows (`tls::quic`) bound the body bytes a client can make Fulcrum hold.
//!
//! It ends with GOAWAY (the client's next requests go to a new connection, its requests in
//! flight finish) when the process stops accepting (a drain or an upgrade) and when the
//! connection had no request for `head_timeout`; quinn's idle timeout (the same) ends a client
//! that went silent. Once the grace period of a drain is over, it is closed at once.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tracing::debug;

use super::bridge;
use super::endpoint::InProgress;
use crate::live::Service;
use crate::shutdown::Shutdown;
use crate::tls::Failure;

/// H3_NO_ERROR (RFC 9114 section 8.1): the code a connection closes with when all went well.
const NO_ERROR: u32 = 0x100;

/// How long a connection whose requests are all answered after GOAWAY waits for the client to
/// close it, so the last responses' bytes are acknowledged before Fulcrum closes it itself.
const LINGER: Duration = Duration::from_secs(1);

/// Serves one client's QUIC connection to its end.
pub(super) async fn serve(connecting: quinn::Connecting, service: Arc<Service>, handshaking: InProgress, shutdown: Shutdown) {
    let Some(tls) = service.tls.clone() else { return };
    let name = service.config().name.clone();
    let peer = connecting.remote_address();
    // With `quic_early_data` the connection serves from the client's first flight (0-RTT), and
    // `confirmed` turns true when the handshake ends (`bridge` holds unsafe requests until then);
    // else it serves once the handshake is done.
    let (conn, confirmed) = match (service.config().http.quic_early_data, connecting) {
        (true, connecting) => match connecting.into_0rtt() {
            Ok((conn, done)) => {
                let (confirm, confirmed) = tokio::sync::watch::channel(false);
                shutdown.tasks().spawn(confirm_handshake(conn.clone(), done, confirm, service.clone(), handshaking, tls.handshake_timeout()));
                (conn, confirmed)
            }
            Err(connecting) => match handshake(connecting, &service, tls.handshake_timeout(), handshaking, &shutdown).await {
                Some(conn) => (conn, tokio::sync::watch::channel(true).1),
                None => return,
            },
        },
        (false, connecting) => match handshake(connecting, &service, tls.handshake_timeout(), handshaking, &shutdown).await {
            Some(conn) => (conn, tokio::sync::watch::channel(true).1),
            None => return,
        },
    };
    let sni = conn.handshake_data().and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok()).and_then(|d| d.server_name);
    let http = &service.config().http;
    let mut h3 = match h3::server::builder().max_field_section_size(http.max_head_size as u64).build(h3_quinn::Connection::new(conn.clone())).await {
        Ok(h3) => h3,
        Err(e) => return debug!(service = %name, client = %peer, "HTTP/3 connection failed: {e}"),
    };
    let Some(bridge::Bridge { sender, mut served }) = bridge::Bridge::start(peer, sni, service.clone(), shutdown.clone()).await else {
        return conn.close(NO_ERROR.into(), b"");
    };
    let head_timeout = http.head_timeout;
    let mut closing: Option<&str> = None;
    let mut goaway_sent = false;
    loop {
        tokio::select! {
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    shutdown.tasks().spawn(bridge::request(resolver, sender.clone(), head_timeout, confirmed.clone(), tls.handshake_timeout()));
                }
                // The client's GOAWAY, or ours, and no request left in flight.
                Ok(None) => break,
                Err(e) => {
                    debug!(service = %name, client = %peer, "HTTP/3 connection ended: {e}");
                    return;
                }
            },
            // The handler's side ended it: no request for `head_timeout`, or the process drains.
            _ = &mut served, if closing.is_none() => closing = Some("idle"),
            _ = shutdown.stopping().cancelled(), if closing.is_none() => closing = Some("draining"),
            _ = shutdown.terminating().cancelled() => {
                conn.close(NO_ERROR.into(), b"shutting down");
                return;
            }
        }
        if let Some(why) = closing.filter(|_| !goaway_sent) {
            debug!(service = %name, client = %peer, "closing HTTP/3 connection: {why}");
            goaway_sent = true;
            // GOAWAY: the requests accepted so far are answered; accept() ends after them.
            if let Err(e) = h3.shutdown(0).await {
                debug!(service = %name, client = %peer, "HTTP/3 GOAWAY not sent: {e}");
                break;
            }
        }
    }
    // Every request answered: give the client a moment to close first, so the last bytes sent
    // are not cut.
    let _ = tokio::time::timeout(LINGER, conn.closed()).await;
    conn.close(NO_ERROR.into(), b"");
}

/// The handshake within `limit`, counted: the connection once it is done.
async fn handshake(connecting: quinn::Connecting, service: &Service, limit: Duration, handshaking: InProgress, shutdown: &Shutdown) -> Option<quinn::Connection> {
    let counters = &service.state().tls;
    let peer = connecting.remote_address();
    let outcome = tokio::select! {
        r = tokio::time::timeout(limit, connecting) => match r {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(quinn::ConnectionError::TimedOut)) | Err(_) => Err(Failure::Timeout),
            Ok(Err(quinn::ConnectionError::ApplicationClosed(_) | quinn::ConnectionError::ConnectionClosed(_) | quinn::ConnectionError::Reset)) => Err(Failure::Closed),
            Ok(Err(e)) => {
                debug!(service = %service.config().name, client = %peer, "HTTP/3 handshake failed: {e}");
                Err(Failure::Protocol)
            }
        },
        _ = shutdown.terminating().cancelled() => return None,
    };
    drop(handshaking);
    match outcome {
        Ok(conn) => {
            counters.quic_handshakes.fetch_add(1, Relaxed);
            Some(conn)
        }
        Err(f) => {
            counters.failed[f as usize].fetch_add(1, Relaxed);
            debug!(service = %service.config().name, client = %peer, "HTTP/3: {f}");
            None
        }
    }
}

/// A connection that serves 0-RTT: says when its handshake is done (`confirm`), or closes it
/// when the handshake does not end within `limit`, which is what a replayed first flight does.
async fn confirm_handshake(
    conn: quinn::Connection,
    done: quinn::ZeroRttAccepted,
    confirm: tokio::sync::watch::Sender<bool>,
    service: Arc<Service>,
    handshaking: InProgress,
    limit: Duration,
) {
    let counters = &service.state().tls;
    let in_time = tokio::time::timeout(limit, done).await.is_ok();
    drop(handshaking);
    match (in_time, conn.close_reason()) {
        (true, None) => {
            counters.quic_handshakes.fetch_add(1, Relaxed);
            let _ = confirm.send(true);
        }
        (false, _) => {
            counters.failed[Failure::Timeout as usize].fetch_add(1, Relaxed);
            conn.close(NO_ERROR.into(), b"handshake timeout");
        }
        (true, Some(_)) => {
            counters.failed[Failure::Closed as usize].fetch_add(1, Relaxed);
        }
    }
}
