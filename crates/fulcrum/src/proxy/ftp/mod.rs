//! `mode = "ftp"`: the control connection is balanced like any TCP session, and Fulcrum reads it
//! line by line, because FTP names data-connection addresses inside it and those are the real
//! server's. Passive mode: the server's `227`/`229` reply is rewritten to a port of Fulcrum's own
//! (the `data_ports` range, on the address the client connected to), whose connection Fulcrum
//! forwards to the port the server announced, on the same server. Active mode: the client's
//! `PORT`/`EPRT` is checked to name the client itself (no FTP bounce) and rewritten to a port of
//! Fulcrum's on the server side, whose connection from the server Fulcrum forwards to the client.
//! A passive port is claimed by the session when it relays the client's transfer command (`data`
//! says why), so a transfer command can be answered here instead of reaching the server.
//! `AUTH` (FTPS) is refused: encrypted replies cannot be rewritten.

pub(crate) mod command;
mod data;

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

use crate::config::PortRange;
use crate::live::{ServerEntry, Service};
use crate::shutdown::Shutdown;
use command::Eprt;
use data::{Claim, ClaimRequest, Direction, Transfer};

/// Longest control line accepted either way (RFC 959 sets no limit; real lines are short).
const MAX_LINE: usize = 8 * 1024;

/// What a control session needs beyond its two connections.
pub struct Session {
    pub service: Arc<Service>,
    pub server: Arc<ServerEntry>,
    pub peer: SocketAddr,
    pub terminate: CancellationToken,
    pub shutdown: Shutdown,
}

/// Relays one control session until either side closes; data transfers run on their own tasks.
pub async fn serve(client: TcpStream, server: TcpStream, s: Session) -> io::Result<()> {
    let client_local = client.local_addr()?.ip();
    let server_local = server.local_addr()?.ip();
    let (cr, mut cw) = client.into_split();
    let (sr, mut sw) = server.into_split();
    let mut from_client = LineReader::new(cr);
    let mut from_server = LineReader::new(sr);
    let mut relay = Relay {
        range: s.service.config().data_ports.unwrap_or(PortRange::FTP_DEFAULT),
        client_local,
        server_local,
        pending: None,
        active: Arc::new(AtomicUsize::new(0)),
        session: CancellationToken::new(),
        s,
    };
    // Ports still waiting when the session ends are released.
    let _release = relay.session.clone().drop_guard();
    let idle = relay.s.service.config().client_timeout.min(relay.s.service.config().server_timeout);
    let mut client_open = true;
    loop {
        let quiet = tokio::time::sleep(idle);
        tokio::select! {
            line = from_client.next_line(), if client_open => match line? {
                Some(line) => relay.client_line(&line, &mut cw, &mut sw).await?,
                None => {
                    // The client closed: let the server's last replies through, then end.
                    client_open = false;
                    let _ = sw.shutdown().await;
                }
            },
            line = from_server.next_line() => match line? {
                Some(line) => relay.server_line(&line, &mut cw).await?,
                None => {
                    let _ = cw.shutdown().await;
                    return Ok(());
                }
            },
            _ = quiet => {
                if relay.active.load(Relaxed) == 0 {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "control connection idle"));
                }
            }
        }
    }
}

/// The session's hold on its newest data port: dropping it releases the port; a passive port is
/// claimed through `claim` when the client's transfer command goes by.
struct Pending {
    _release: DropGuard,
    claim: Option<oneshot::Sender<ClaimRequest>>,
}

/// The commands that use the data connection (RFC 959, RFC 3659): a passive port is claimed when
/// one of them is relayed, since a client has connected by then.
const TRANSFER_COMMANDS: [&str; 7] = ["RETR", "STOR", "STOU", "APPE", "LIST", "NLST", "MLSD"];

struct Relay {
    s: Session,
    range: PortRange,
    /// The address the client connected to (where passive ports open).
    client_local: IpAddr,
    /// Fulcrum's address towards the server (where active-mode ports open).
    server_local: IpAddr,
    /// The newest opened port still waiting; a newer one releases it.
    pending: Option<Pending>,
    active: Arc<AtomicUsize>,
    session: CancellationToken,
}

impl Relay {
    async fn client_line(&mut self, line: &[u8], client: &mut OwnedWriteHalf, server: &mut OwnedWriteHalf) -> io::Result<()> {
        let (verb, arg) = command::split_command(line);
        let client_ip = self.s.peer.ip();
        match verb.as_str() {
            "AUTH" => reply(client, "534 FTPS is not available through this load balancer: it must read the replies to route data connections. Use plain FTP.").await,
            "PORT" | "EPRT" => {
                let wanted = if verb == "PORT" {
                    match command::parse_host_port(arg) {
                        Some(a) => SocketAddr::V4(a),
                        None => return reply(client, "501 Syntax error in PORT parameters.").await,
                    }
                } else {
                    match command::parse_eprt(arg) {
                        Some(Eprt::Addr(a)) => a,
                        Some(Eprt::UnknownFamily) => return reply(client, "522 Network protocol not supported, use (1,2)").await,
                        None => return reply(client, "501 Syntax error in EPRT parameters.").await,
                    }
                };
                if wanted.ip() != client_ip {
                    warn!(service = %self.s.service.config().name, client = %self.s.peer, %wanted, "{verb} refused: it names another address (FTP bounce)");
                    return reply(client, &format!("500 Illegal {verb} command: data connections go only to your own address.")).await;
                }
                let server_ip = self.s.server.addr.ip();
                let Some(port) = self.open(self.server_local, Direction::Active, server_ip, wanted) else {
                    return reply(client, "425 Can't open data connection: no free data port.").await;
                };
                let ours = SocketAddr::new(self.server_local, port);
                let rewritten = match ours {
                    SocketAddr::V4(a) => format!("PORT {}", command::format_host_port(a)),
                    SocketAddr::V6(_) => format!("EPRT {}", command::format_eprt(ours)),
                };
                send(server, rewritten.as_bytes()).await
            }
            v if TRANSFER_COMMANDS.contains(&v) => {
                if self.claim().await == Some(Claim::Contested) {
                    return reply(
                        client,
                        "425 Can't open data connection: another connection from your address came to the data port, so it is closed and nothing was sent. Send PASV again.",
                    )
                    .await;
                }
                send(server, line).await
            }
            _ => send(server, line).await,
        }
    }

    /// Claims the pending passive port, if any; `None` when there is none to claim (active mode,
    /// claimed already, released).
    async fn claim(&mut self) -> Option<Claim> {
        let claim = self.pending.as_mut()?.claim.take()?;
        let (tx, rx) = oneshot::channel();
        claim.send(tx).ok()?;
        let answer = rx.await.ok()?;
        if answer == Claim::Contested {
            self.pending = None;
        }
        Some(answer)
    }

    async fn server_line(&mut self, line: &[u8], client: &mut OwnedWriteHalf) -> io::Result<()> {
        let server_ip = self.s.server.addr.ip();
        let announced = if line.starts_with(b"227 ") {
            command::parse_227(line).map(|a| (227, a.port()))
        } else if line.starts_with(b"229 ") {
            command::parse_229(line).map(|p| (229, p))
        } else {
            None
        };
        let Some((code, server_port)) = announced else { return send(client, line).await };
        // The data port is always on the server this session is on, whatever address it names.
        let target = SocketAddr::new(server_ip, server_port);
        let client_ip = self.s.peer.ip();
        if code == 227 && !self.client_local.is_ipv4() {
            return reply(client, "425 Can't open data connection: PASV cannot name an IPv6 address, use EPSV.").await;
        }
        let Some(port) = self.open(self.client_local, Direction::Passive, client_ip, target) else {
            return reply(client, "425 Can't open data connection: no free data port.").await;
        };
        let text = match self.client_local {
            IpAddr::V4(vip) if code == 227 => command::format_227(SocketAddrV4::new(vip, port)),
            _ => command::format_229(port),
        };
        send(client, text.as_bytes()).await
    }

    /// Opens a data port on `ip` for one connection from `allowed`, forwarded to `connect_to`.
    fn open(&mut self, ip: IpAddr, direction: Direction, allowed: IpAddr, connect_to: SocketAddr) -> Option<u16> {
        let svc = &self.s.service;
        let Some(listener) = data::bind_in_range(ip, self.range, &svc.state().data_port_cursor) else {
            warn!(service = %svc.config().name, range = %self.range, "no free data port: every port of data_ports is in use");
            return None;
        };
        let port = listener.local_addr().ok()?.port();
        let stop_waiting = self.session.child_token();
        let (claim, claimed) = match direction {
            Direction::Passive => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            Direction::Active => (None, None),
        };
        self.pending = Some(Pending { _release: stop_waiting.clone().drop_guard(), claim });
        debug!(service = %svc.config().name, client = %self.s.peer, port, ?direction, %connect_to, "data port opened");
        let transfer = Transfer {
            listener,
            direction,
            allowed,
            connect_to,
            service: svc.clone(),
            server: self.s.server.clone(),
            stop_waiting,
            terminate: self.s.terminate.clone(),
            shutdown: self.s.shutdown.clone(),
            active: self.active.clone(),
            claim: claimed,
        };
        self.s.shutdown.tasks().spawn(transfer.run());
        Some(port)
    }
}

async fn send(to: &mut OwnedWriteHalf, line: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(line.len() + 2);
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
    to.write_all(&out).await
}

async fn reply(client: &mut OwnedWriteHalf, text: &str) -> io::Result<()> {
    send(client, text.as_bytes()).await
}

/// Reads CRLF (or LF) terminated lines; cancel-safe, so it can sit in a `select!`.
struct LineReader<R> {
    inner: R,
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(inner: R) -> Self {
        LineReader { inner, buf: BytesMut::with_capacity(1024) }
    }

    /// The next line without its line end; `None` at end of stream. A partial last line is
    /// returned as a line.
    async fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line = self.buf.split_to(i + 1).to_vec();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
            if self.buf.len() > MAX_LINE {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("control line longer than {MAX_LINE} bytes")));
            }
            // read_buf is cancel-safe: if another branch wins, no byte was taken.
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return Ok((!self.buf.is_empty()).then(|| self.buf.split().to_vec()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_split_on_crlf_and_lf_and_a_partial_last_line_counts() {
        let data: &[u8] = b"USER anonymous\r\nPASS x\nQUIT";
        let mut r = LineReader::new(data);
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"USER anonymous");
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"PASS x");
        assert_eq!(r.next_line().await.unwrap().unwrap(), b"QUIT");
        assert_eq!(r.next_line().await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_endless_line_is_an_error_not_a_memory_leak() {
        let data = vec![b'A'; MAX_LINE * 3];
        let mut r = LineReader::new(&data[..]);
        assert_eq!(r.next_line().await.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
