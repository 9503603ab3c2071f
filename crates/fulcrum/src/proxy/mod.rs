//! The data path: listeners accept, `dispatch` finds a server and connects (`connect`), `tcp`
//! forwards the bytes; `http` and `ftp` are the modes that read what they forward.

pub mod connect;
pub mod dispatch;
pub mod ftp;
pub mod http;
pub mod listener;
pub mod queue;
#[allow(unsafe_code)]
pub mod splice;
pub mod tcp;
#[allow(unsafe_code)]
pub mod tcp_info;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::error::{Side, Throttle};
use crate::live::{Service, ServiceGuard, Slot};
use crate::shutdown::Shutdown;

/// Serves one client connection of `service` to its end; `_counted` holds its place in the
/// process's budget and the service's counters until then.
pub async fn handle(client: TcpStream, peer: SocketAddr, service: Arc<Service>, _counted: (Slot, ServiceGuard), shutdown: Shutdown) {
    let cfg = service.config();
    if cfg.mode == crate::config::Mode::Http {
        // Each request picks its own server; the connection is the client's only.
        return http::serve(client, peer, service, shutdown).await;
    }
    let (place, server) = tokio::select! {
        r = dispatch::connect(&service.pool, peer) => match r {
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
                    warn!(service = %cfg.name, client = %peer, "closing client: {e}");
                }
                return;
            }
        },
        _ = shutdown.terminating().cancelled() => return,
    };
    let entry = place.entry();
    let state = &entry.state;
    let terminate = state.terminate_token();
    let opts = tcp::Options {
        half_close: cfg.half_close,
        client_timeout: cfg.client_timeout,
        server_timeout: cfg.server_timeout,
        splice: true,
    };
    if cfg.mode == crate::config::Mode::Ftp {
        let session = ftp::Session { service: service.clone(), server: entry.clone(), peer, terminate: terminate.clone(), shutdown: shutdown.clone() };
        tokio::select! {
            r = ftp::serve(client, server, session) => match r {
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
    let meters = tcp::Meters { bytes_in: &state.counters.bytes_in, bytes_out: &state.counters.bytes_out };
    tokio::select! {
        r = tcp::forward(&client, &server, opts, meters) => match r {
            Ok((up, down)) => debug!(service = %cfg.name, client = %peer, server = %entry.addr, up, down, "connection closed"),
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
