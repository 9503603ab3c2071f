//! The TLS of QUIC (`[service.http] http3`): the service's own rustls config with ALPN `h3`,
//! handed to quinn. It shares the service's certificate resolver, so SNI picks the same
//! certificate as over TCP and a reload that changes a certificate changes it for QUIC too (the
//! listener takes the config of the generation current at each new connection).
//!
//! QUIC is TLS 1.3 only (rustls refuses anything else in QUIC), and 0-RTT is off unless
//! `quic_early_data`: data sent in the first flight can be replayed by anyone who captured it.
//! With it, QUIC sessions resume from the service's session cache only, one connection per
//! ticket (`NoTickets`), and `proxy::http::h3::bridge` holds back the requests that are not safe.
//! A service with client
//! certificates is refused by validation: a QUIC handshake cannot switch configs by the
//! client's server name before it starts, as `Terminator::handshake` does over TCP.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicServerConfig;

use super::{Terminator, TlsError};

/// Bytes a client may have in flight towards Fulcrum on one stream before it waits for credit:
/// what a request body costs in memory at most per stream, beside the read-ahead.
pub const STREAM_WINDOW: u32 = 256 * 1024;

/// Bytes a client may have in flight on all its streams together.
pub const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;

/// quinn's config for a service, or why it could not be made.
pub(super) type Built = Result<Arc<quinn::ServerConfig>, TlsError>;

/// What a service's QUIC connections are bounded by (`[service.http]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicLimits {
    /// Request streams open at once (`max_streams`).
    pub streams: u32,
    /// A connection with no packet for this long is gone (`head_timeout`).
    pub idle: Duration,
    /// 0-RTT offered to resuming clients (`quic_early_data`).
    pub early_data: bool,
}

impl Terminator {
    /// quinn's server config for this service's QUIC listener: its certificates, ALPN `h3`, and
    /// `limits`. Built on first use and kept while the limits stay (no file is read).
    pub fn quic(&self, limits: QuicLimits) -> Result<Arc<quinn::ServerConfig>, TlsError> {
        // A reload that changes the limits but not the TLS settings keeps this terminator: the
        // config is built again for the new limits.
        let mut cached = self.quic.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*cached {
            Some((built_for, config)) if *built_for == limits => config.clone(),
            _ => cached.insert((limits, build(self, limits))).1.clone(),
        }
    }

    /// How long a client has to finish its handshake (`handshake_timeout`).
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }
}

fn build(terminator: &Terminator, limits: QuicLimits) -> Result<Arc<quinn::ServerConfig>, TlsError> {
    let fail = |reason: String| TlsError { file: "[service.tls]".into(), reason };
    // Validation refuses client certificates with http3: there is one group, without a CA.
    let group = terminator.groups.first().ok_or_else(|| fail("no certificate".into()))?;
    let mut tls = (**group.acceptor.config()).clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    // 0-RTT only when asked for (its requests can be replayed: `proxy::http::h3::bridge` holds
    // back the unsafe ones); QUIC takes all or nothing here.
    tls.max_early_data_size = if limits.early_data { u32::MAX } else { 0 };
    if limits.early_data {
        // rustls takes early data only with sessions kept in its cache, each taken out as it
        // resumes: a ticket is good for one connection, so a captured first flight cannot be
        // played again with its 0-RTT requests.
        tls.ticketer = Arc::new(NoTickets);
    }
    let crypto = QuicServerConfig::try_from(Arc::new(tls)).map_err(|e| fail(format!("QUIC needs TLS 1.3's TLS_AES_128_GCM_SHA256 among the cipher suites: {e}")))?;
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(limits.streams.into())
        // The client's control stream and QPACK's two; Fulcrum uses no dynamic table.
        .max_concurrent_uni_streams(3u32.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        .max_idle_timeout(quinn::IdleTimeout::try_from(limits.idle).ok());
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport));
    Ok(Arc::new(server))
}

/// Stateful resumption for QUIC with 0-RTT: no self-contained tickets, so each ticket names a
/// session in the context's cache (`resumption`), which rustls takes out when it resumes.
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}
