//! Accept loops: one per listen address, alive across reloads for as long as a service uses it.
//!
//! The loop looks its service up in the current generation at every accept, so a reload that
//! changes a service's servers or algorithm needs no new socket; it pauses at the service's
//! `maxconn` and at the process's (`live::budget`) — the kernel backlog holds the rest — and backs
//! off when the process is out of file descriptors anyway instead of spinning, saying so once a
//! second rather than once a connection.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::error::Throttle;
use crate::live::{Live, Service};
use crate::shutdown::Shutdown;

pub const BACKLOG: i32 = 4096;

/// Binds the listening sockets of `addr` (SO_REUSEADDR, nonblocking) so errors surface before a
/// config is applied: one, or with `reuse_port` one per worker (`copies`), all with SO_REUSEPORT
/// on the port the first one got (a config may ask for port 0).
pub fn bind(addr: SocketAddr, copies: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let first = bind_one(addr, copies > 1)?;
    let port = first.local_addr()?.port();
    let mut all = vec![first];
    for _ in 1..copies {
        all.push(bind_one(SocketAddr::new(addr.ip(), port), true)?);
    }
    Ok(all)
}

fn bind_one(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY on Linux: one setsockopt per listener, not per client.
    socket.set_tcp_nodelay(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Accepts on `listener` until `stop` (the address left the config) or shutdown.
pub async fn serve(listener: std::net::TcpListener, addr: SocketAddr, live: Arc<Live>, stop: CancellationToken, shutdown: Shutdown) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            error!(%addr, "cannot register listener: {e}");
            return;
        }
    };
    // With `reuse_port` each worker has its socket of the address: the log says whose.
    let worker = super::workers::current();
    match worker {
        Some(w) => info!(%addr, worker = w, "listening"),
        None => info!(%addr, "listening"),
    }
    loop {
        let generation = live.current();
        let Some(service) = generation.service_at(addr).cloned() else {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = shutdown.stopping().cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
            }
        };
        drop(generation);
        if !until_room(&service, &listener, 0, &stop).await {
            return;
        }
        if !until_budget(&live, &listener, addr, &stop, &shutdown).await {
            break;
        }
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            _ = shutdown.stopping().cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                // The accept may have waited across a reload: serve with the generation of now.
                let generation = live.current();
                let Some(service) = generation.service_at(addr).cloned() else { continue };
                drop(generation);
                // With `reuse_port` another worker's loop may have filled the service while this
                // one waited in accept: its client waits here, counted with the backlog.
                if !until_room(&service, &listener, 1, &stop).await {
                    return;
                }
                let slot = live.budget().take();
                let guard = service.state().open();
                super::spawn(stream, peer, service, (slot, guard), shutdown.clone());
            }
            Err(e) if crate::error::is_local(&e) => {
                static OUT_OF: Throttle = Throttle::new();
                if let Some(held) = OUT_OF.ready() {
                    warn!(%addr, held, "accept: {e}; pausing accepts for 100ms (the budget, maxconn, leaves too few descriptors: lower it or raise ulimit -n)");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Errors that concern one connection (reset before accept, ...) do not stop the loop.
            Err(e) => warn!(%addr, "accept: {e}"),
        }
    }
    match worker {
        Some(w) => info!(%addr, worker = w, "stopped listening"),
        None => info!(%addr, "stopped listening"),
    }
}

/// Waits for room in the process's budget (`maxconn`, or what the descriptors carry); false if
/// `stop` or shutdown came first. While the process is full it says so once a second for the
/// whole process, with what waits and what to raise: clients held in the backlog are otherwise
/// silent, as a server that refuses is not.
async fn until_budget(live: &Live, listener: &TcpListener, addr: SocketAddr, stop: &CancellationToken, shutdown: &Shutdown) -> bool {
    let budget = live.budget();
    if budget.current() < budget.max() {
        return true;
    }
    static FULL: Throttle = Throttle::new();
    let room = budget.room();
    tokio::pin!(room);
    loop {
        if let Some(since) = FULL.ready() {
            let waiting = super::tcp_info::accept_queue(listener).map_or(0, |(waiting, _)| waiting);
            warn!(
                %addr,
                open = budget.current(),
                maxconn = budget.max(),
                waiting,
                held_since_last = since,
                waits = budget.waits(),
                "the process is at its connection limit: new clients wait in the listen backlog; raise `maxconn`, or the descriptor limit (`ulimit -n`, LimitNOFILE) it derives from: 2 a connection and {} kept aside for listeners, checks and the admin",
                live.current().held().descriptors()
            );
        }
        tokio::select! {
            _ = &mut room => return true,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return false,
            _ = shutdown.stopping().cancelled() => return false,
        }
    }
}

/// Waits while `service` is at its `maxconn`, counting as waiting the clients in this socket's
/// accept queue and the `held` ones this loop accepted but has not served; false if `stop` came
/// first. The service's backlog is the sum over its sockets: with `reuse_port` every worker's
/// socket has an accept queue of its own.
async fn until_room(service: &Service, listener: &TcpListener, held: u64, stop: &CancellationToken) -> bool {
    let maxconn = service.config().maxconn as u64;
    let state = service.state();
    let mut counted = 0;
    let mut room = true;
    while maxconn > 0 && state.current.load(Relaxed) >= maxconn {
        let waiting = super::tcp_info::accept_queue(listener).map_or(0, |(waiting, _)| waiting as u64) + held;
        state.backlog.fetch_add(waiting, Relaxed);
        state.backlog.fetch_sub(counted, Relaxed);
        counted = waiting;
        state.note_waiting_peak();
        tokio::select! {
            _ = state.freed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.cancelled() => {
                room = false;
                break;
            }
        }
    }
    state.backlog.fetch_sub(counted, Relaxed);
    room
}
