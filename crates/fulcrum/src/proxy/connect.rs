//! A measured connect to one server: the SYNs the kernel sent for it (TCP_INFO), whether the
//! server answered, within the time allowed. The passive algorithms live on these figures; the
//! dispatcher (`dispatch.rs`) decides what a failure means.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::tcp_info;

/// Connects within `limit`; returns the stream (or the error, `None` for a timeout) and the
/// SYNs the kernel sent for it, read before the socket is dropped.
pub async fn measured(addr: SocketAddr, limit: Duration) -> (Result<TcpStream, Option<io::Error>>, u32) {
    let socket = match start_connect(addr) {
        Ok(s) => s,
        Err(e) => return (Err(Some(e)), 0),
    };
    let stream = match TcpStream::from_std(socket.into()) {
        Ok(s) => s,
        Err(e) => return (Err(Some(e)), 0),
    };
    let started = crate::clock::now();
    let outcome = tokio::time::timeout(limit, stream.ready(Interest::WRITABLE | Interest::ERROR)).await;
    // The first SYN retransmission comes after the initial RTO (1 s on Linux, 200 ms at the very
    // least): a faster connect sent one SYN, and the kernel need not be asked.
    let syns = if crate::clock::since(started) < MIN_SYN_RTO { 1 } else { tcp_info::syns_sent(&stream).unwrap_or(1) };
    let result = match outcome {
        Err(_) => Err(None),
        Ok(Err(e)) => Err(Some(e)),
        // Writable without an error or a hang-up: the handshake completed, and the kernel need
        // not be asked for SO_ERROR (one syscall a connection saved).
        Ok(Ok(ready)) if !ready.is_error() && !ready.is_write_closed() => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Ok(_)) => match stream.take_error() {
            Ok(Some(e)) | Err(e) => Err(Some(e)),
            Ok(None) => Err(Some(io::Error::new(io::ErrorKind::ConnectionReset, "the connection closed during the handshake"))),
        },
    };
    (result, syns)
}

/// No kernel retransmits a SYN sooner than this (TCP_RTO_MIN).
const MIN_SYN_RTO: Duration = Duration::from_millis(200);

fn start_connect(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), Some(Protocol::TCP))?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(socket),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(socket),
        Err(e) => Err(e),
    }
}
