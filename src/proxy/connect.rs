//! Connecting to a server: pick, connect within `connect_timeout`, and on failure redispatch to
//! another server (never the one that just failed while another is usable), up to `retries` times.
//!
//! Every attempt is measured for the passive algorithms: the SYNs the kernel sent (TCP_INFO),
//! whether the server answered with a SYN-ACK, and how long the connect took.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use super::tcp_info;
use crate::error::{Error, Kind, Side};
use crate::runtime::{Avoid, ServerEntry, Service};

/// A connected server of `service` for `client`.
pub async fn connect(service: &Service, client: SocketAddr) -> Result<(Arc<ServerEntry>, TcpStream), Error> {
    let cfg = &service.config;
    let mut avoid = Avoid::default();
    let mut last = Error::new(Kind::NoServer, Side::Server);
    for attempt in 0..=cfg.retries {
        let Some((role, entry, index)) = service.pick(client.ip(), None, &avoid) else { break };
        match connect_to(service, &entry).await {
            Ok(stream) => return Ok((entry, stream)),
            Err(err) => {
                redispatching(service, &entry, client, attempt, &err);
                avoid.add(role, index);
                last = err;
            }
        }
    }
    Err(last)
}

/// Counts a failed connect that the caller is about to retry elsewhere.
pub fn redispatching(service: &Service, entry: &ServerEntry, client: SocketAddr, attempt: u32, err: &Error) {
    let cfg = &service.config;
    if attempt < cfg.retries {
        entry.state.counters.redispatches.fetch_add(1, Relaxed);
        service.state.redispatches.fetch_add(1, Relaxed);
        debug!(service = %cfg.name, %client, attempt, reason = %err, "connect failed, redispatching");
    }
}

/// One measured connect to a picked server: counts the pick (LbTot), records the SYNs and the
/// connect time for the passive algorithms, and applies `failure_limit`.
pub async fn connect_to(service: &Service, entry: &ServerEntry) -> Result<TcpStream, Error> {
    let cfg = &service.config;
    entry.state.counters.lb_total.fetch_add(1, Relaxed);
    let started = Instant::now();
    let (result, syns) = connect_measured(entry.addr, cfg.connect_timeout).await;
    let measure = &entry.state.measure;
    let err = match result {
        Ok(stream) => {
            measure.record_connect(syns, true, started.elapsed());
            entry.state.record_connect_success();
            let _ = stream.set_nodelay(true);
            return Ok(stream);
        }
        Err(Some(e)) => {
            // A refusal is an answer (RST), but not a SYN-ACK: the server did not accept.
            measure.record_connect(syns, false, started.elapsed());
            Error::new(Kind::Connect, Side::Server).server(entry.addr).io(e)
        }
        Err(None) => {
            measure.record_connect(syns, false, started.elapsed());
            Error::new(Kind::ConnectTimeout, Side::Server).server(entry.addr)
        }
    };
    if entry.state.record_connect_failure(cfg.failure_limit) {
        warn!(service = %cfg.name, server = %entry.state.key.address, reason = %err,
            "server down: {} consecutive connect failures (failure_limit)", cfg.failure_limit);
    }
    Err(err)
}

/// Connects within `limit`; returns the stream (or the error, `None` for a timeout) and the
/// SYNs the kernel sent for it, read before the socket is dropped.
async fn connect_measured(addr: SocketAddr, limit: Duration) -> (Result<TcpStream, Option<io::Error>>, u32) {
    let socket = match start_connect(addr) {
        Ok(s) => s,
        Err(e) => return (Err(Some(e)), 0),
    };
    let stream = match TcpStream::from_std(socket.into()) {
        Ok(s) => s,
        Err(e) => return (Err(Some(e)), 0),
    };
    let started = Instant::now();
    let outcome = tokio::time::timeout(limit, stream.writable()).await;
    // The first SYN retransmission comes after the initial RTO (1 s on Linux, 200 ms at the very
    // least): a faster connect sent one SYN, and the kernel need not be asked.
    let syns = if started.elapsed() < MIN_SYN_RTO { 1 } else { tcp_info::syns_sent(&stream).unwrap_or(1) };
    let result = match outcome {
        Err(_) => Err(None),
        Ok(Err(e)) => Err(Some(e)),
        Ok(Ok(())) => match stream.take_error() {
            Ok(None) => Ok(stream),
            Ok(Some(e)) | Err(e) => Err(Some(e)),
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
