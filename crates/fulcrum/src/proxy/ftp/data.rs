//! FTP data connections: a port of the service's `data_ports` range opened for one transfer, which
//! accepts exactly one connection from the one address allowed (the client that owns the session
//! in passive mode, the real server in active mode), connects the other side, and forwards.
//!
//! A port is held only while it waits: it is released when its connection arrives, when it has
//! waited `ACCEPT_WAIT`, when the session opens a newer port, or when the session ends. Which
//! ports are free is decided by the kernel: a bind that fails means the port is taken (by a
//! transfer of another session, or by another program).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::config::PortRange;
use crate::proxy::tcp;
use crate::live::{ServerEntry, Service};
use crate::shutdown::Shutdown;

/// How long an opened data port waits for its connection.
pub const ACCEPT_WAIT: Duration = Duration::from_secs(30);

/// Binds a listening socket on `ip` at the next free port of `range`, round robin over the range
/// so a port just released is not the next one handed out; `None` when every port is taken.
pub fn bind_in_range(ip: IpAddr, range: PortRange, cursor: &std::sync::atomic::AtomicU32) -> Option<std::net::TcpListener> {
    let len = range.ports();
    for _ in 0..len {
        let port = range.first as u32 + cursor.fetch_add(1, Relaxed) % len;
        if let Ok(l) = bind(SocketAddr::new(ip, port as u16)) {
            return Some(l);
        }
    }
    None
}

fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // A port whose last transfer is in TIME_WAIT can serve again; two listeners still cannot share.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(8)?;
    Ok(socket.into())
}

/// Which side connects to the opened port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Passive mode: the client connects to Fulcrum; Fulcrum connects to the server.
    Passive,
    /// Active mode: the server connects to Fulcrum; Fulcrum connects to the client.
    Active,
}

/// One opened data port and what to do with its connection.
pub struct Transfer {
    pub listener: std::net::TcpListener,
    pub direction: Direction,
    /// The only address whose connection is accepted.
    pub allowed: IpAddr,
    /// Where the other side of the transfer is.
    pub connect_to: SocketAddr,
    pub service: Arc<Service>,
    pub server: Arc<ServerEntry>,
    /// Fires when the port should stop waiting (newer port, session end).
    pub stop_waiting: CancellationToken,
    /// Fires when the transfer must end (server terminated, process terminating).
    pub terminate: CancellationToken,
    pub shutdown: Shutdown,
    /// Transfers of the session in flight, so its control channel is not idle meanwhile.
    pub active: Arc<std::sync::atomic::AtomicUsize>,
}

impl Transfer {
    /// Waits for the allowed peer, then forwards; logs and returns on every failure.
    pub async fn run(self) {
        let name = &self.service.config().name;
        let listener = match TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => return warn!(service = %name, "cannot register a data port: {e}"),
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let deadline = tokio::time::sleep(ACCEPT_WAIT);
        tokio::pin!(deadline);
        let accepted = loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, from)) if from.ip() == self.allowed => break stream,
                    Ok((_, from)) => {
                        // Data theft: someone else connecting to a port announced to this client.
                        warn!(service = %name, port, %from, allowed = %self.allowed, "data connection refused: the port belongs to another address's session");
                    }
                    Err(e) => debug!(service = %name, port, "data port accept failed: {e}"),
                },
                _ = &mut deadline => return debug!(service = %name, port, "data port released: no connection came"),
                _ = self.stop_waiting.cancelled() => return debug!(service = %name, port, "data port released unused"),
            }
        };
        drop(listener);
        let cfg = self.service.config();
        let other = match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(self.connect_to)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return warn!(service = %name, to = %self.connect_to, "data connection failed: {e}"),
            Err(_) => return warn!(service = %name, to = %self.connect_to, "data connection timed out"),
        };
        let _ = other.set_nodelay(true);
        let (client, server) = match self.direction {
            Direction::Passive => (accepted, other),
            Direction::Active => (other, accepted),
        };
        let counters = &self.server.state.counters;
        counters.data_transfers.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        let opts = tcp::Options { half_close: true, client_timeout: cfg.client_timeout, server_timeout: cfg.server_timeout, splice: true };
        let meters = tcp::Meters { bytes_in: &counters.bytes_in, bytes_out: &counters.bytes_out };
        tokio::select! {
            r = tcp::forward(&client, &server, opts, meters) => match r {
                Ok((up, down)) => debug!(service = %name, server = %self.server.addr, up, down, "data transfer done"),
                Err(e) => {
                    counters.transfer_errors.fetch_add(1, Relaxed);
                    debug!(service = %name, server = %self.server.addr, "data transfer ended: {e}");
                }
            },
            _ = self.terminate.cancelled() => {}
            _ = self.shutdown.terminating().cancelled() => {}
        }
        self.active.fetch_sub(1, Relaxed);
    }
}
