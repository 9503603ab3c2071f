//! The data path: listeners accept, `dispatch` finds a server and connects (`connect`), `tcp`
//! forwards the bytes; `http` and `ftp` are the modes that read what they forward.

pub mod adaptive;
pub mod connect;
pub mod copy;
pub mod dispatch;
pub mod explain;
pub mod ftp;
pub mod http;
pub mod limits;
pub mod listener;
pub mod passthrough;
pub mod queue;
#[allow(unsafe_code)]
pub mod sockmap;
#[allow(unsafe_code)]
pub mod splice;
pub mod tcp;
#[allow(unsafe_code)]
pub mod tcp_info;
pub mod workers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::config::FastPath;
use crate::error::{Side, Throttle};
use crate::live::{Pool, Service, ServiceGuard, Slot};
use crate::proxy_header;
use crate::shutdown::Shutdown;

/// Serves one client connection of `service` to its end on a task of its own; `counted` holds
/// its place in the process's budget and the service's counters until then. Each mode has a task
/// of its own type, so a task's memory is what its mode needs.
pub fn spawn(client: TcpStream, peer: SocketAddr, service: Arc<Service>, counted: (Slot, ServiceGuard), shutdown: Shutdown) {
    if service.config().accept_proxy {
        let tasks = shutdown.tasks().clone();
        tasks.spawn(async move {
            if let Some((client, peer)) = Box::pin(proxied(client, peer, &service)).await {
                start(client, peer, service, counted, shutdown);
            }
        });
    } else {
        start(client, peer, service, counted, shutdown);
    }
}

/// Longest wait for a trusted proxy's PROXY header (docs/configuration.md: accept_proxy).
const PROXY_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// With `accept_proxy`: the connection and the client address its PROXY header gives, or `None`
/// (refused and logged) when it comes from outside `trusted_proxies` or its header is bad.
async fn proxied(mut client: TcpStream, peer: SocketAddr, service: &Service) -> Option<(TcpStream, SocketAddr)> {
    let cfg = service.config();
    // Once a second at most: a scan or a misconfigured proxy is one cause.
    static REFUSED: Throttle = Throttle::new();
    if !cfg.trusted_proxies.iter().any(|n| n.contains(peer.ip())) {
        service.state().refused.fetch_add(1, Relaxed);
        if let Some(held) = REFUSED.ready() {
            warn!(service = %cfg.name, client = %peer, held, "closing client: not in trusted_proxies, so its PROXY header is not taken");
        }
        return None;
    }
    match proxy_header::receive(&mut client, PROXY_HEADER_TIMEOUT).await {
        Ok(proxy_header::Received::Proxied { client: from, .. }) => Some((client, from)),
        Ok(proxy_header::Received::Local) => Some((client, peer)),
        Err(proxy_header::ReceiveError::Empty) => {
            debug!(service = %cfg.name, client = %peer, "connection closed before its PROXY header");
            None
        }
        Err(e) => {
            service.state().refused.fetch_add(1, Relaxed);
            if let Some(held) = REFUSED.ready() {
                warn!(service = %cfg.name, client = %peer, held, "closing client: {e}");
            }
            None
        }
    }
}

/// Serves a client connection whose address is known, on a task of its own, once its
/// per-client connection limits let it in.
fn start(client: TcpStream, peer: SocketAddr, service: Arc<Service>, mut counted: (Slot, ServiceGuard), shutdown: Shutdown) {
    if !service.limits_connections() {
        return admitted(client, peer, service, counted, shutdown);
    }
    let tasks = shutdown.tasks().clone();
    tasks.spawn(async move {
        match limits::admit_connection(&service, peer.ip()).await {
            Ok(held) => {
                if !held.is_empty() {
                    counted.1.keep(Box::new(held));
                }
                admitted(client, peer, service, counted, shutdown);
            }
            // Counted in the limit's own figures, not as a client no server could take.
            Err(refused) => {
                debug!(service = %service.config().name, client = %peer, table = %refused.limiter.config.name, "connection refused: over its limit");
            }
        }
    });
}

/// Serves a client connection that its limits let in, on a task of its own.
fn admitted(client: TcpStream, peer: SocketAddr, service: Arc<Service>, counted: (Slot, ServiceGuard), shutdown: Shutdown) {
    let tasks = shutdown.tasks().clone();
    if let Some(tls) = service.tls.clone() {
        tasks.spawn(async move {
            let _counted = counted;
            // Boxed: the handshake's state is large and lives only until the session is up.
            let client = tokio::select! {
                r = Box::pin(tls.accept(client, &service.state().tls)) => match r {
                    Ok(session) => session,
                    Err(e) => {
                        debug!(service = %service.config().name, client = %peer, "TLS: {e}");
                        return;
                    }
                },
                _ = shutdown.terminating().cancelled() => return,
            };
            if service.config().mode == crate::config::Mode::Http { http::serve(client, peer, service, shutdown).await } else { handle_tls(client, peer, service, shutdown).await }
        });
    } else if service.config().mode == crate::config::Mode::Http {
        // Each request picks its own server; the connection is the client's only.
        tasks.spawn(async move {
            let _counted = counted;
            http::serve(client, peer, service, shutdown).await
        });
    } else {
        tasks.spawn(handle(client, peer, service, counted, shutdown));
    }
}

/// Finds and connects a server of `pool` for `client` of `service`, and sends it the PROXY
/// protocol header when the server, its pool or the service asks for one, then `first` (what
/// was read of the client before the server was chosen); a refusal is counted and logged.
async fn connect_server(service: &Service, pool: &Pool, client: &TcpStream, peer: SocketAddr, first: &[u8], shutdown: &Shutdown) -> Option<(dispatch::Place, TcpStream)> {
    let cfg = service.config();
    let (place, mut server) = tokio::select! {
        r = Box::pin(dispatch::connect(pool, peer)) => match r {
            Ok(x) => x,
            Err(e) => {
                service.state().refused.fetch_add(1, Relaxed);
                if e.side == Side::Local {
                    // A flood of these is one cause: say it once a second.
                    static LOCAL: Throttle = Throttle::new();
                    if let Some(held) = LOCAL.ready() {
                        warn!(service = %cfg.name, client = %peer, held, "closing client: {e}");
                    }
                } else {
                    // Every client meets the same pool: one line a second with the count, and
                    // when no server is up, when that may change.
                    static NO_SERVER: Throttle = Throttle::new();
                    static SERVER_FAILED: Throttle = Throttle::new();
                    let health = &pool.config.health;
                    if e.kind != crate::error::Kind::NoServer {
                        if let Some(held) = SERVER_FAILED.ready() {
                            warn!(service = %cfg.name, client = %peer, held, "closing client: {e}");
                        }
                    } else if let Some(held) = NO_SERVER.ready() {
                        if health.kind == crate::config::HealthKind::None {
                            warn!(service = %cfg.name, client = %peer, held, "closing client: {e}");
                        } else {
                            let every = humantime::format_duration(health.interval);
                            warn!(service = %cfg.name, client = %peer, held, "closing client: {e}; the next health check is due within {every}, and {} passing in a row bring a server up", health.rise);
                        }
                    }
                }
                return None;
            }
        },
        _ = shutdown.terminating().cancelled() => return None,
    };
    let mut head = Vec::new();
    if let Some(version) = place.entry().proxy_protocol {
        // The address the client connected to, which a wildcard listen address does not say.
        match client.local_addr() {
            Ok(local) => head = proxy_header::header(version, peer, local),
            Err(e) => {
                debug!(service = %cfg.name, client = %peer, "PROXY header not sent: {e}");
                return None;
            }
        }
    }
    if !head.is_empty() || !first.is_empty() {
        use tokio::io::AsyncWriteExt;
        // One write: a header and a ClientHello in one segment, as a server reads them.
        head.extend_from_slice(first);
        if let Err(e) = server.write_all(&head).await {
            place.entry().state.counters.transfer_errors.fetch_add(1, Relaxed);
            debug!(service = %cfg.name, client = %peer, server = %place.entry().addr, "first bytes not sent: {e}");
            return None;
        }
    }
    Some((place, server))
}

/// TLS pass-through: reads the client's ClientHello and picks the pool its server name routes
/// to; `None` (counted and logged, once a second) when the client sends no valid hello in time.
async fn route_by_sni<'a>(service: &'a Service, client: &mut TcpStream, peer: SocketAddr) -> Option<(&'a Pool, Vec<u8>)> {
    use passthrough::HelloError;
    let cfg = service.config();
    match passthrough::read_hello(client, passthrough::HELLO_TIMEOUT).await {
        Ok(hello) => {
            let (pool, name) = service.pool_for(passthrough::route(&cfg.routes, hello.server_name.as_deref()));
            debug!(service = %cfg.name, client = %peer, sni = hello.server_name.as_deref().unwrap_or("-"), pool = name, "TLS passed through");
            Some((pool, hello.bytes))
        }
        Err(HelloError::Empty) => None,
        Err(e) => {
            service.state().refused.fetch_add(1, Relaxed);
            static REFUSED: Throttle = Throttle::new();
            if let Some(held) = REFUSED.ready() {
                warn!(service = %cfg.name, client = %peer, held, "closing client: {e}");
            }
            None
        }
    }
}

/// A TCP-mode connection whose TLS Fulcrum terminated: the decrypted bytes go to one server.
async fn handle_tls(mut client: tokio_rustls::server::TlsStream<TcpStream>, peer: SocketAddr, service: Arc<Service>, shutdown: Shutdown) {
    let pool = service.default_pool();
    let Some((place, server)) = connect_server(&service, pool, client.get_ref().0, peer, &[], &shutdown).await else { return };
    match &pool.server_tls {
        Some(origin) => {
            let Some(mut server) = secure(origin, server, &place, &service, peer).await else { return };
            copy_through(&mut client, &mut server, &place, &service, peer, &shutdown).await
        }
        None => copy_through(&mut client, &mut { server }, &place, &service, peer, &shutdown).await,
    }
}

/// `server_tls`: the TLS session to the server of `place`; `None` (counted as the server's
/// connect failure, and logged) when the handshake or the server's certificate fails.
async fn secure(
    origin: &crate::tls::origin::Originator,
    server: TcpStream,
    place: &dispatch::Place,
    service: &Service,
    peer: SocketAddr,
) -> Option<tokio_rustls::client::TlsStream<TcpStream>> {
    let entry = place.entry();
    match origin.connect(server, entry.sni.as_ref(), &entry.state.key.address, service.config().connect_timeout).await {
        Ok(tls) => Some(tls),
        Err(e) => {
            entry.state.record_tls_failure(&service.config().name, service.config().failure_limit, &e);
            warn!(service = %service.config().name, client = %peer, server = %entry.addr, "closing client: TLS to the server failed: {e}");
            None
        }
    }
}

/// Copies bytes between a client and a server, either of them in TLS, until the connection ends
/// (no splice: TLS bytes pass through the process).
async fn copy_through<C, S>(client: &mut C, server: &mut S, place: &dispatch::Place, service: &Service, peer: SocketAddr, shutdown: &Shutdown)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let cfg = service.config();
    let entry = place.entry();
    let state = &entry.state;
    let opts = tcp::Options { half_close: cfg.half_close, client_timeout: cfg.client_timeout, server_timeout: cfg.server_timeout, splice: false, promote_after: 0 };
    let meters = tcp::Meters { bytes_in: &state.counters.bytes_in, bytes_out: &state.counters.bytes_out };
    let terminate = state.terminate_token();
    tokio::select! {
        r = copy::forward(client, server, opts, meters) => match r {
            Ok((up, down)) => debug!(service = %cfg.name, client = %peer, server = %entry.addr, up, down, "TLS connection closed"),
            Err(e) => {
                state.counters.transfer_errors.fetch_add(1, Relaxed);
                debug!(service = %cfg.name, client = %peer, server = %entry.addr, "TLS connection ended: {e}");
            }
        },
        _ = terminate.cancelled() => debug!(service = %cfg.name, client = %peer, server = %entry.addr, "connection terminated: server disabled"),
        _ = shutdown.terminating().cancelled() => {}
    }
}

/// A TCP or FTP connection: one server for its whole life.
///
/// A function returning an async block rather than an async fn: an async fn keeps a copy of its
/// arguments beside the locals it moves them into, 112 bytes in every connection's task.
#[allow(clippy::manual_async_fn)]
fn handle(client: TcpStream, peer: SocketAddr, service: Arc<Service>, counted: (Slot, ServiceGuard), shutdown: Shutdown) -> impl Future<Output = ()> + Send {
    async move {
        let _counted = counted;
        let cfg = service.config();
        if !cfg.routes.is_empty() || service.default_pool().server_tls.is_some() {
            // Boxed: what pass-through and TLS to the servers hold is not the plain path's.
            return Box::pin(handle_routed(client, peer, &service, &shutdown)).await;
        }
        // The task's state is its largest await's: the connect and an FTP session are boxed, so an
        // established TCP connection's task holds only what forwarding needs.
        let Some((place, server)) = connect_server(&service, service.default_pool(), &client, peer, &[], &shutdown).await else { return };
        if cfg.mode == crate::config::Mode::Ftp {
            let entry = place.entry();
            let state = &entry.state;
            let terminate = state.terminate_token();
            let session = ftp::Session { service: service.clone(), server: entry.clone(), peer, terminate: terminate.clone(), shutdown: shutdown.clone() };
            tokio::select! {
                r = Box::pin(ftp::serve(client, server, session)) => match r {
                    Ok(()) => debug!(service = %cfg.name, client = %peer, server = %entry.addr, "FTP session closed"),
                    Err(e) => {
                        state.counters.transfer_errors.fetch_add(1, Relaxed);
                        debug!(service = %cfg.name, client = %peer, server = %entry.addr, "FTP session ended: {e}");
                    }
                },
                _ = terminate.cancelled() => debug!(service = %cfg.name, client = %peer, server = %entry.addr, "FTP session terminated: server disabled"),
                _ = shutdown.terminating().cancelled() => {}
            }
            return;
        }
        let cfg = service.config();
        let entry = place.entry();
        let state = &entry.state;
        let terminate = state.terminate_token();
        let opts = tcp::Options { half_close: cfg.half_close, client_timeout: cfg.client_timeout, server_timeout: cfg.server_timeout, splice: true, promote_after: 0 };
        let meters = tcp::Meters { bytes_in: &state.counters.bytes_in, bytes_out: &state.counters.bytes_out };
        let fast = cfg.fast_path();
        tokio::select! {
            r = forward(client, server, fast, &service, opts, meters) => match r {
                Ok((up, down)) => {
                    limits::connection_moved(&service, peer.ip(), up + down);
                    debug!(service = %cfg.name, client = %peer, server = %entry.addr, up, down, "connection closed")
                }
                Err(e) => {
                    state.counters.transfer_errors.fetch_add(1, Relaxed);
                    debug!(service = %cfg.name, client = %peer, server = %entry.addr, "connection ended: {e}");
                }
            },
            _ = terminate.cancelled() => {
                debug!(service = %cfg.name, client = %peer, server = %entry.addr, "connection terminated: server disabled");
            }
            _ = shutdown.terminating().cancelled() => {}
        }
    }
}

/// A TCP connection of a service with pass-through routes (the ClientHello picks the pool) or
/// `server_tls` (the server is spoken to in TLS).
async fn handle_routed(mut client: TcpStream, peer: SocketAddr, service: &Service, shutdown: &Shutdown) {
    let (pool, hello) = if service.config().routes.is_empty() {
        (&**service.default_pool(), Vec::new())
    } else {
        let routed = tokio::select! {
            r = route_by_sni(service, &mut client, peer) => r,
            _ = shutdown.terminating().cancelled() => None,
        };
        let Some(routed) = routed else { return };
        routed
    };
    let connected = connect_server(service, pool, &client, peer, &hello, shutdown).await;
    drop(hello);
    let Some((place, server)) = connected else { return };
    match &pool.server_tls {
        Some(origin) => {
            let Some(mut server) = secure(origin, server, &place, service, peer).await else { return };
            copy_through(&mut client, &mut server, &place, service, peer, shutdown).await
        }
        None => relay(client, server, &place, service, peer, shutdown).await,
    }
}

/// Forwards a plain TCP pair until it ends, the server is disabled (`terminate`) or Fulcrum
/// shuts down. `handle` has the same lines inline: as a call, this future's copies of what
/// `handle` already holds add about 150 bytes to every plain TCP connection's task, which would
/// take it past the bound of the test below into the allocator's next size class.
async fn relay(client: TcpStream, server: TcpStream, place: &dispatch::Place, service: &Service, peer: SocketAddr, shutdown: &Shutdown) {
    let cfg = service.config();
    let entry = place.entry();
    let state = &entry.state;
    let terminate = state.terminate_token();
    let opts = tcp::Options { half_close: cfg.half_close, client_timeout: cfg.client_timeout, server_timeout: cfg.server_timeout, splice: true, promote_after: 0 };
    let meters = tcp::Meters { bytes_in: &state.counters.bytes_in, bytes_out: &state.counters.bytes_out };
    let fast = cfg.fast_path();
    tokio::select! {
        r = forward(client, server, fast, service, opts, meters) => match r {
            Ok((up, down)) => {
                limits::connection_moved(service, peer.ip(), up + down);
                debug!(service = %cfg.name, client = %peer, server = %entry.addr, up, down, "connection closed")
            }
            Err(e) => {
                state.counters.transfer_errors.fetch_add(1, Relaxed);
                debug!(service = %cfg.name, client = %peer, server = %entry.addr, "connection ended: {e}");
            }
        },
        _ = terminate.cancelled() => {
            debug!(service = %cfg.name, client = %peer, server = %entry.addr, "connection terminated: server disabled");
        }
        _ = shutdown.terminating().cancelled() => {}
    }
}

/// Forwards an established TCP connection as its service's fast path says: `sockmap` links the
/// pair at once; `adaptive` splices until the connection has made `adaptive::PROMOTE_TURNS`
/// turns of small exchanges, then links it, and copies it again once it carries bulk; `splice`
/// (and the others where the program did not load, or for a pair that cannot be linked) copies
/// and splices. A connection that never shows itself long-lived touches no map.
/// (An async block for the reason `handle` is one.)
#[allow(clippy::manual_async_fn)]
fn forward<'a>(
    mut client: TcpStream,
    mut server: TcpStream,
    fast: FastPath,
    service: &'a Service,
    mut opts: tcp::Options,
    meters: tcp::Meters<'a>,
) -> impl Future<Output = std::io::Result<(u64, u64)>> + Send + 'a {
    async move {
        let loaded = fast != FastPath::Splice && sockmap::active();
        if loaded && fast == FastPath::Sockmap {
            // Boxed: what the sockmap path holds is not in every copied connection's task (the
            // test below).
            match Box::pin(through_sockmap(client, server, service, opts, meters, false)).await {
                Ok(done) => return done,
                Err(pair) => (client, server) = pair,
            }
        }
        if loaded && fast == FastPath::Adaptive {
            opts.promote_after = adaptive::PROMOTE_TURNS;
        }
        match tcp::forward(&mut client, &mut server, opts, meters).await? {
            tcp::Outcome::Closed(up, down) => Ok((up, down)),
            tcp::Outcome::Promote(up, down) => {
                let (more_up, more_down) = Box::pin(promoted(client, server, service, opts, meters)).await?;
                Ok((up + more_up, down + more_down))
            }
        }
    }
}

/// An adaptive connection from its promotion on: into the sockmap, or on by splice where the
/// pair cannot be linked (a FIN arrived meanwhile). It is promoted once at most.
async fn promoted(client: TcpStream, server: TcpStream, service: &Service, opts: tcp::Options, meters: tcp::Meters<'_>) -> std::io::Result<(u64, u64)> {
    let opts = tcp::Options { promote_after: 0, ..opts };
    match through_sockmap(client, server, service, opts, meters, true).await {
        Ok(done) => done,
        Err((mut client, mut server)) => tcp::forward(&mut client, &mut server, opts, meters).await.map(tcp::Outcome::totals),
    }
}

/// The sockmap path of `forward`; gives the pair back when nothing went into the map. With
/// `adaptive`, a connection that turns to bulk leaves the kernel's forwarding and is copied.
async fn through_sockmap(
    mut client: TcpStream,
    mut server: TcpStream,
    service: &Service,
    opts: tcp::Options,
    meters: tcp::Meters<'_>,
    adaptive: bool,
) -> Result<std::io::Result<(u64, u64)>, (TcpStream, TcpStream)> {
    let name = &service.config().name;
    // Copied without splice: the program passed the bytes up to the socket's psock queue,
    // where only a read sees them in order.
    let copy = tcp::Options { splice: false, promote_after: 0, ..opts };
    match sockmap::Pair::link(&client, &server) {
        sockmap::Linked::Yes(mut pair) => {
            let state = service.state();
            state.sockmap.fetch_add(1, Relaxed);
            if adaptive {
                state.sockmap_promoted.fetch_add(1, Relaxed);
            }
            let inside = Inside::count(&state.sockmap_active);
            let ended = sockmap::forward(&mut pair, client, server, opts, meters, adaptive).await;
            drop(inside);
            Ok(match ended {
                Ok(sockmap::Ended::Closed(up, down)) => Ok((up, down)),
                Ok(sockmap::Ended::Demoted { mut client, mut server, up, down }) => {
                    state.sockmap_demoted.fetch_add(1, Relaxed);
                    debug!(service = %name, up, down, "a connection turned to bulk and left the sockmap fast path");
                    let copied = tcp::forward(&mut client, &mut server, copy, meters).await;
                    drop(pair);
                    copied.map(|o| {
                        let (more_up, more_down) = o.totals();
                        (up + more_up, down + more_down)
                    })
                }
                Err(e) => Err(e),
            })
        }
        sockmap::Linked::Held(held, e) => {
            debug!(service = %name, "sockmap fast path not used for a connection, copying it: {e}");
            let copied = tcp::forward(&mut client, &mut server, copy, meters).await;
            drop(held);
            Ok(copied.map(tcp::Outcome::totals))
        }
        // A client that half-closed already: this connection splices.
        sockmap::Linked::No(e) => {
            debug!(service = %name, "sockmap fast path not used for a connection, splicing it: {e}");
            Err((client, server))
        }
    }
}

/// A connection counted among those the kernel forwards now (`sockmap_active`) while it lives,
/// whether its forward ends, leaves or is dropped (a disabled server, shutdown).
struct Inside<'a>(&'a AtomicU64);

impl<'a> Inside<'a> {
    fn count(gauge: &'a AtomicU64) -> Inside<'a> {
        gauge.fetch_add(1, Relaxed);
        Inside(gauge)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// What a connection's task holds while it is idle is at least the size of its future: keep
    /// it small (docs/hardening.md: memory per idle connection). tokio puts the future
    /// in a cell with about 110 bytes of its own, rounded up to 128, and jemalloc's size classes
    /// there are 1024, 1280, 1536: a TCP task under 1160 bytes takes 1280 a connection, one just
    /// over it 1536.
    #[tokio::test]
    async fn a_connections_task_state_stays_small() {
        let service = |mode: &str| {
            let text = format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"{mode}\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n");
            crate::live::Live::new(crate::config::parse(&text, "t.toml").unwrap()).unwrap()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pair = async || {
            let near = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (far, peer) = listener.accept().await.unwrap();
            (near, far, peer)
        };
        let size = |what: &str, bytes: usize, limit: usize| assert!(bytes < limit, "{what}: {bytes} bytes");

        // TCP mode: the task, what it connects with, and what it forwards with once connected.
        let tcp = service("tcp");
        let tcp_service = tcp.current().services[0].clone();
        let (_client, accepted, peer) = pair().await;
        size("connect", std::mem::size_of_val(&dispatch::connect(&tcp_service.pool, peer)), 1024);
        let (mut a, mut b, _) = pair().await;
        let opts = tcp::Options { half_close: true, client_timeout: Duration::from_secs(1), server_timeout: Duration::from_secs(1), splice: true, promote_after: 0 };
        let meter = std::sync::atomic::AtomicU64::new(0);
        size("forward", std::mem::size_of_val(&tcp::forward(&mut a, &mut b, opts, tcp::Meters { bytes_in: &meter, bytes_out: &meter })), 1024);
        let counted = (tcp.budget().take(), tcp_service.state().open());
        size("tcp task", std::mem::size_of_val(&handle(accepted, peer, tcp_service, counted, Shutdown::new())), 1160);

        // HTTP mode: the connection's driver, which is what a parked connection's task holds
        // (the active part is boxed and freed when it parks). Under 872 bytes the task's cell,
        // with the accept's wrapper, is 1,024 bytes (tokio aligns cells to 128); just over it,
        // 1,152 (`benches/idle_size.rs` counts the step).
        let http = service("http");
        let (_client, accepted, peer) = pair().await;
        size("http serve", std::mem::size_of_val(&http::serve(accepted, peer, http.current().services[0].clone(), Shutdown::new())), 872);
    }
}
