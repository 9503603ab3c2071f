//! The QUIC listener of one address: quinn's endpoint over one UDP socket, and who may connect.
//!
//! Address validation (RFC 9000 section 8.1): a client's first packet may come from a forged
//! address, and answering it with a handshake sends a server's certificate chain (several
//! times the client's packet) to whoever owns that address. While fewer than
//! `quic_retry_above` handshakes are in progress at the listener, clients are served at once
//! (quinn still sends no more than three times what a client sent before its address is
//! validated); above it, a client that has not proven its address gets a Retry with a token it
//! must send back, which a spoofer never receives. 0 asks it of every client.
//!
//! Bounds: each connection counts in the process's budget (`maxconn`, as a TCP connection does,
//! though it holds no descriptor) and in its service's `maxconn`; at either limit a new client
//! is refused with CONNECTION_REFUSED, since UDP has no backlog to wait in. quinn keeps at most
//! `MAX_INCOMING` connection attempts not yet decided on, each holding at most
//! `INCOMING_BUFFER` of early packets, and all of them together `INCOMING_BUFFER_TOTAL`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::live::{Live, Service};
use crate::shutdown::Shutdown;

/// Connection attempts quinn holds before they are accepted or refused.
const MAX_INCOMING: usize = 4096;
/// Early packets (0-RTT, or a handshake in several datagrams) held per attempt.
const INCOMING_BUFFER: u64 = 64 * 1024;
/// Early packets held by all attempts together (quinn's default is 100 MiB): a flood of
/// attempts that send early data costs at most this.
const INCOMING_BUFFER_TOTAL: u64 = 8 * 1024 * 1024;

/// How often a UDP port that could not be bound is tried again.
const BIND_RETRY: Duration = Duration::from_secs(1);

/// Binds the UDP socket of `addr` (nonblocking; IPv6 only on an IPv6 address, as TCP's).
fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// The handshakes in progress at one listener, counted while a guard lives.
#[derive(Default)]
pub(super) struct Handshaking(AtomicU64);

pub(super) struct InProgress(Arc<Handshaking>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Relaxed);
    }
}

/// Serves QUIC on UDP at `udp` for the service listening at `addr`, until `stop` (the address
/// left the config, or its service turned `http3` off) or shutdown. Connections open then go on
/// to their end (each its GOAWAY when the process drains). A port that is taken is tried again
/// every `BIND_RETRY`: after a binary upgrade the old process keeps its QUIC socket until its
/// connections are done (a UDP socket is not handed over: the two processes would read each
/// other's packets, and answer connections they do not know with stateless resets).
pub async fn serve(udp: SocketAddr, addr: SocketAddr, live: Arc<Live>, stop: CancellationToken, shutdown: Shutdown) {
    let mut said = false;
    let socket = loop {
        match bind(udp) {
            Ok(socket) => break socket,
            Err(e) if !said => {
                said = true;
                warn!(%addr, %udp, "HTTP/3: cannot bind the UDP port yet, trying every second: {e}");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shutdown.stopping().cancelled() => return,
            _ = tokio::time::sleep(BIND_RETRY) => {}
        }
    };
    let local = socket.local_addr().ok();
    let Some(first) = live.current().service_at(addr).and_then(|s| config_of(s).ok()) else {
        return error!(%addr, "HTTP/3: no service with http3 and TLS at this address");
    };
    let mut server = (*first).clone();
    server.max_incoming(MAX_INCOMING).incoming_buffer_size(INCOMING_BUFFER).incoming_buffer_size_total(INCOMING_BUFFER_TOTAL);
    let endpoint = match quinn::Endpoint::new(quinn::EndpointConfig::default(), Some(server), socket, Arc::new(quinn::TokioRuntime)) {
        Ok(e) => e,
        Err(e) => return error!(%addr, "HTTP/3: cannot start the QUIC endpoint: {e}"),
    };
    info!(%addr, udp = ?local, "HTTP/3 listening");
    let handshaking = Arc::new(Handshaking::default());
    loop {
        let incoming = tokio::select! {
            _ = stop.cancelled() => break,
            _ = shutdown.stopping().cancelled() => break,
            i = endpoint.accept() => i,
        };
        let Some(incoming) = incoming else { break };
        let generation = live.current();
        let Some(service) = generation.service_at(addr).cloned() else {
            incoming.refuse();
            continue;
        };
        drop(generation);
        let Ok(config) = config_of(&service) else {
            incoming.refuse();
            continue;
        };
        let counters = &service.state().tls;
        let retry_above = u64::from(service.config().http.quic_retry_above);
        if !incoming.remote_address_validated() && incoming.may_retry() && handshaking.0.load(Relaxed) >= retry_above {
            counters.quic_retries.fetch_add(1, Relaxed);
            if let Err(e) = incoming.retry() {
                debug!(%addr, "HTTP/3: Retry not sent: {e}");
            }
            continue;
        }
        let budget = live.budget();
        let maxconn = service.config().maxconn as u64;
        if budget.current() >= budget.max() || (maxconn > 0 && service.state().current.load(Relaxed) >= maxconn) {
            counters.quic_refused.fetch_add(1, Relaxed);
            static FULL: crate::error::Throttle = crate::error::Throttle::new();
            if let Some(held) = FULL.ready() {
                warn!(%addr, held, "HTTP/3: a new client refused: the service or the process is at its maxconn");
            }
            incoming.refuse();
            continue;
        }
        handshaking.0.fetch_add(1, Relaxed);
        let in_progress = InProgress(handshaking.clone());
        let counted = (budget.take(), service.state().open());
        let shutdown_ = shutdown.clone();
        shutdown.tasks().spawn(async move {
            let mut counted = counted;
            let peer = incoming.remote_address();
            if service.limits_connections() {
                match crate::proxy::limits::admit_connection(&service, peer.ip()).await {
                    Ok(held) if !held.is_empty() => counted.1.keep(Box::new(held)),
                    Ok(_) => {}
                    Err(refused) => {
                        debug!(service = %service.config().name, client = %peer, table = %refused.limiter.config.name, "HTTP/3 connection refused: over its limit");
                        return incoming.refuse();
                    }
                }
            }
            match incoming.accept_with(config) {
                Ok(connecting) => super::conn::serve(connecting, service, in_progress, shutdown_).await,
                Err(e) => debug!(service = %service.config().name, client = %peer, "HTTP/3: connection not accepted: {e}"),
            }
            drop(counted);
        });
    }
    // New clients are turned away from here; the connections open keep the endpoint (and its
    // socket) until they end.
    endpoint.set_server_config(None);
    info!(%addr, "HTTP/3 stopped listening");
}

/// The quinn config of `service`'s current generation, when it serves HTTP/3.
fn config_of(service: &Service) -> Result<Arc<quinn::ServerConfig>, ()> {
    let http = &service.config().http;
    let tls = service.tls.as_ref().filter(|_| http.http3).ok_or(())?;
    tls.quic(crate::tls::QuicLimits { streams: http.max_streams, idle: http.head_timeout, early_data: http.quic_early_data }).map_err(|e| {
        static FAILED: crate::error::Throttle = crate::error::Throttle::new();
        if let Some(held) = FAILED.ready() {
            error!(service = %service.config().name, held, "HTTP/3: {e}");
        }
    })
}
