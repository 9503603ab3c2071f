//! Connecting to a server: pick, connect within `connect_timeout`, and on failure redispatch to
//! another server (never the one that just failed while another is usable), up to `retries` times.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::error::{Error, Kind, Side};
use crate::runtime::{Avoid, ServerEntry, Service};

/// A connected server of `service` for `client`.
pub async fn connect(service: &Service, client: SocketAddr) -> Result<(Arc<ServerEntry>, TcpStream), Error> {
    let cfg = &service.config;
    let mut avoid = Avoid::default();
    let mut last = Error::new(Kind::NoServer, Side::Server);
    for attempt in 0..=cfg.retries {
        let Some((role, entry, index)) = service.pick(client.ip(), &avoid) else { break };
        let err = match tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(entry.addr)).await {
            Ok(Ok(stream)) => {
                entry.state.record_connect_success();
                let _ = stream.set_nodelay(true);
                return Ok((entry, stream));
            }
            Ok(Err(e)) => Error::new(Kind::Connect, Side::Server).server(entry.addr).io(e),
            Err(_) => Error::new(Kind::ConnectTimeout, Side::Server).server(entry.addr),
        };
        if entry.state.record_connect_failure(cfg.failure_limit) {
            warn!(service = %cfg.name, server = %entry.state.key.address, reason = %err,
                "server down: {} consecutive connect failures (failure_limit)", cfg.failure_limit);
        }
        debug!(service = %cfg.name, %client, attempt, reason = %err, "connect failed, redispatching");
        avoid.add(role, index);
        last = err;
    }
    Err(last)
}
