//! FTP data connections: a port of the service's `data_ports` range opened for one transfer, which
//! accepts exactly one connection from the one address allowed (the client that owns the session
//! in passive mode, the real server in active mode), connects the other side, and forwards.
//!
//! An address is not a session: another program at the client's address (a second session behind
//! the same NAT, another user of the same host) can connect to a passive port too, and a port
//! number is easy to guess. So a passive port is bound to its session by order: real clients
//! connect before they send the command that uses the connection (`RETR`, `STOR`, `LIST`...), and
//! the session claims the port when it relays that command. The port keeps listening until then;
//! if by then more than one connection came from the client's address, nobody can tell which is
//! the client's, so none is used: the command is answered `425` and never reaches the server, and
//! no byte of the transfer moves. Once claimed, the port is closed to everyone.
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
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::config::PortRange;
use crate::live::{ServerEntry, Service};
use crate::proxy::tcp;
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

/// What a passive port answers when its session claims it (relaying a transfer command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// One connection from the client's address came: it is the session's, and the transfer goes on.
    Taken,
    /// None came yet: the first that comes is taken (a client that connects after its command).
    Waiting,
    /// More than one came from the client's address: none is used and the port is closed.
    Contested,
}

/// The session's side of a passive port's claim: send a sender, receive the answer on it.
pub type ClaimRequest = oneshot::Sender<Claim>;

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
    /// Passive mode: the session's claim, sent when it relays a transfer command. Without one
    /// (active mode: only the real server connects), the first allowed connection is taken.
    pub claim: Option<oneshot::Receiver<ClaimRequest>>,
}

impl Transfer {
    /// Waits for the allowed peer, then forwards; logs and returns on every failure.
    pub async fn run(mut self) {
        let name = &self.service.config().name;
        let listener = match TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => return warn!(service = %name, "cannot register a data port: {e}"),
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let gate = Gate { name, port, allowed: self.allowed };
        let Some(accepted) = gate.wait(&listener, self.claim.take(), &self.stop_waiting).await else { return };
        drop(listener);
        let cfg = self.service.config();
        let other = match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(self.connect_to)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return warn!(service = %name, to = %self.connect_to, "data connection failed: {e}"),
            Err(_) => return warn!(service = %name, to = %self.connect_to, "data connection timed out"),
        };
        let _ = other.set_nodelay(true);
        let (mut client, mut server) = match self.direction {
            Direction::Passive => (accepted, other),
            Direction::Active => (other, accepted),
        };
        let counters = &self.server.state.counters;
        counters.data_transfers.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        let opts = tcp::Options { half_close: true, client_timeout: cfg.client_timeout, server_timeout: cfg.server_timeout, splice: true, promote_after: 0 };
        let meters = tcp::Meters { bytes_in: &counters.bytes_in, bytes_out: &counters.bytes_out };
        tokio::select! {
            r = tcp::forward(&mut client, &mut server, opts, meters) => match r {
                Ok(tcp::Outcome::Closed(up, down) | tcp::Outcome::Promote(up, down)) => debug!(service = %name, server = %self.server.addr, up, down, "data transfer done"),
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

/// Who may take a data port, and its name in the logs.
struct Gate<'a> {
    name: &'a str,
    port: u16,
    allowed: IpAddr,
}

impl Gate<'_> {
    /// Waits for the session's connection: the only one from the allowed address when the session
    /// claims the port, or the first one from it when there is no claim to wait for. `None` when
    /// the port is released unused or contested.
    async fn wait(&self, listener: &TcpListener, mut claim: Option<oneshot::Receiver<ClaimRequest>>, stop_waiting: &CancellationToken) -> Option<TcpStream> {
        let (name, port) = (self.name, self.port);
        let deadline = tokio::time::sleep(ACCEPT_WAIT);
        tokio::pin!(deadline);
        let mut first: Option<TcpStream> = None;
        let mut contested = false;
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, from)) => {
                        if self.admit(stream, from, &mut first, &mut contested) && claim.is_none() {
                            return first;
                        }
                    }
                    Err(e) => debug!(service = %name, port, "data port accept failed: {e}"),
                },
                request = async {
                    match claim.as_mut() {
                        Some(c) => c.await,
                        None => std::future::pending().await,
                    }
                } => {
                    claim = None;
                    // The session let the port go (a newer port, its end).
                    let Ok(reply) = request else { return None };
                    // Connections whose handshake is done but not yet accepted count too: the
                    // client connected before it sent its command, so its connection is here now.
                    while let Ok((stream, from)) = accept_now(listener) {
                        self.admit(stream, from, &mut first, &mut contested);
                    }
                    let answer = match (&first, contested) {
                        (_, true) => Claim::Contested,
                        (Some(_), false) => Claim::Taken,
                        (None, false) => Claim::Waiting,
                    };
                    let _ = reply.send(answer);
                    match answer {
                        Claim::Taken => return first,
                        Claim::Contested => {
                            warn!(service = %name, port, client = %self.allowed, "data port refused to everyone: more than one connection came from the client's address before its transfer command (another program there tried to take it)");
                            return None;
                        }
                        Claim::Waiting => {}
                    }
                },
                _ = &mut deadline => {
                    debug!(service = %name, port, "data port released: no transfer came");
                    return None;
                }
                _ = stop_waiting.cancelled() => {
                    debug!(service = %name, port, "data port released unused");
                    return None;
                }
            }
        }
    }

    /// Takes a connection that came to the port if it is from the allowed address and the first
    /// one from it; marks the port contested at the second. Returns whether it was taken.
    fn admit(&self, stream: TcpStream, from: SocketAddr, first: &mut Option<TcpStream>, contested: &mut bool) -> bool {
        let (name, port) = (self.name, self.port);
        if from.ip() != self.allowed {
            // Data theft: someone else connecting to a port announced to this client.
            warn!(service = %name, port, %from, allowed = %self.allowed, "data connection refused: the port belongs to another address's session");
            return false;
        }
        if first.is_some() {
            *contested = true;
            warn!(service = %name, port, %from, "a second data connection from the client's address: the port is contested");
            return false;
        }
        *first = Some(stream);
        true
    }
}

/// Accepts a connection already waiting in the listener's queue, without waiting for one. It asks
/// the kernel directly: tokio's readiness may not have seen a connection that has just arrived.
fn accept_now(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let (socket, from) = socket2::SockRef::from(listener).accept()?;
    let from = from.as_socket().ok_or_else(|| io::Error::other("a data connection without an IP address"))?;
    socket.set_nonblocking(true)?;
    Ok((TcpStream::from_std(socket.into())?, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connects from each source address to a port, claims it, and returns the answer and whether
    /// the port handed a connection over.
    async fn claim_after(sources: &[&str]) -> (Claim, bool) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate { name: "t", port: addr.port(), allowed: addr.ip() };
        let mut conns = Vec::new();
        for s in sources {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(s.parse().unwrap(), 0)).unwrap();
            conns.push(socket.connect(addr).await.unwrap());
        }
        let (claim, claimed) = oneshot::channel();
        let (reply, answer) = oneshot::channel();
        claim.send(reply).unwrap();
        let got = gate.wait(&listener, Some(claimed), &CancellationToken::new()).await;
        (answer.await.unwrap(), got.is_some())
    }

    #[tokio::test]
    async fn the_one_connection_from_the_clients_address_is_taken_at_the_claim() {
        assert_eq!(claim_after(&["127.0.0.1"]).await, (Claim::Taken, true));
        assert_eq!(claim_after(&["127.0.0.2", "127.0.0.1"]).await, (Claim::Taken, true), "another address does not count");
    }

    #[tokio::test]
    async fn two_connections_from_the_clients_address_contest_the_port_and_neither_is_used() {
        assert_eq!(claim_after(&["127.0.0.1", "127.0.0.1"]).await, (Claim::Contested, false));
    }

    #[tokio::test]
    async fn a_claim_before_any_connection_takes_the_first_that_comes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (claim, claimed) = oneshot::channel();
        let (reply, answer) = oneshot::channel();
        claim.send(reply).unwrap();
        let waiting = tokio::spawn(async move {
            let gate = Gate { name: "t", port: addr.port(), allowed: addr.ip() };
            gate.wait(&listener, Some(claimed), &CancellationToken::new()).await.is_some()
        });
        assert_eq!(answer.await.unwrap(), Claim::Waiting);
        let _client = TcpStream::connect(addr).await.unwrap();
        assert!(waiting.await.unwrap());
    }
}
