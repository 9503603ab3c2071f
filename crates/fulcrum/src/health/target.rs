//! The server an HTTP or gRPC check talks to, and how: what both kinds of request are built from.

use std::net::SocketAddr;

use crate::config::Health;
use crate::live::ServerEntry;
use crate::tls::origin::Originator;

/// The server a check talks to, and how.
pub struct Target<'a> {
    /// Its address, the PROXY header it is sent and its own SNI name.
    pub server: &'a ServerEntry,
    /// Where the check connects: the server's address, or the check's own `address` and `port`.
    pub addr: SocketAddr,
    pub tls: Option<&'a Originator>,
    /// HTTP/2 (the pool's `protocol = "h2"`), else HTTP/1.1.
    pub h2: bool,
}

impl Target<'_> {
    /// The server's configured `host:port`: the Host header, and the TLS name to verify.
    pub fn address(&self) -> &str {
        &self.server.state.key.address
    }

    /// The Host header (HTTP/2: `:authority`): the check's `host`, else the server's address.
    pub fn host<'c>(&'c self, cfg: &'c Health) -> &'c str {
        cfg.host.as_deref().unwrap_or(self.address())
    }
}

/// Where a server's check connects: its own address, with the check's `address` and `port` in
/// place of the server's when set.
pub fn check_addr(server: SocketAddr, cfg: &Health) -> SocketAddr {
    let port = cfg.port.and_then(|p| u16::try_from(p).ok()).unwrap_or(server.port());
    SocketAddr::new(cfg.address.unwrap_or(server.ip()), port)
}

impl Target<'_> {
    /// The URI scheme the pool's servers are spoken to in.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}
