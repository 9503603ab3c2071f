//! The server an HTTP or gRPC check talks to, and how: what both kinds of request are built from.

use crate::live::ServerEntry;
use crate::tls::origin::Originator;

/// The server a check talks to, and how.
pub struct Target<'a> {
    /// Its address, the PROXY header it is sent and its own SNI name.
    pub server: &'a ServerEntry,
    pub tls: Option<&'a Originator>,
    /// HTTP/2 (the pool's `protocol = "h2"`), else HTTP/1.1.
    pub h2: bool,
}

impl Target<'_> {
    /// The server's configured `host:port`: the Host header, and the TLS name to verify.
    pub fn address(&self) -> &str {
        &self.server.state.key.address
    }
}

impl Target<'_> {
    /// The URI scheme the pool's servers are spoken to in.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}
