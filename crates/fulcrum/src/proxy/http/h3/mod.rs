//! HTTP/3 from clients (RFC 9114, `[service.http] http3`): a QUIC listener on UDP at the port of
//! a TLS service, whose requests go the way every other request goes.
//!
//! - `endpoint`: the UDP socket and quinn's endpoint, which owns it and routes every datagram
//!   to its connection by connection ID; who may connect (address validation with Retry, the
//!   process's budget and the service's `maxconn`, per-client connection limits).
//! - `conn`: one QUIC connection: the handshake within `handshake_timeout`, HTTP/3 over it,
//!   GOAWAY when the process drains or the connection is idle.
//! - `bridge`: the seam to the request handler. Each QUIC connection gets an HTTP/2 connection
//!   in memory, served by the very handler an HTTP/2 client over TLS gets (`h2::serve`), so
//!   routing, rules, limits, affinity, compression, error pages and the access log are the same
//!   code; each HTTP/3 request becomes a stream of it, its body and trailers streamed both ways.
//!   The cost is one HPACK and framing pass per request in memory, against a second copy of the
//!   handler that could drift from the first.
//!
//! Workers: one endpoint per listen address, on the main runtime, whatever `workers` and
//! `reuse_port` say. A QUIC connection is not a socket of its own: quinn reads every datagram of
//! the port and hands it to its connection by connection ID, so each connection's packets reach
//! the one task that owns it, and a client whose address changes (NAT rebinding, migration)
//! keeps its connection. Several sockets with SO_REUSEPORT would need a connection ID that
//! names the worker, and the kernel's hash routes by address, not ID.

mod bridge;
mod conn;
mod endpoint;

pub use endpoint::serve;

/// The `Alt-Svc` value that announces HTTP/3 on `port` (RFC 7838, RFC 9114 section 3.1.1), which
/// `http::requests` adds to HTTP/1.1 and HTTP/2 responses of a service with `http3`.
pub fn alt_svc(port: u16, max_age: std::time::Duration) -> Option<hyper::header::HeaderValue> {
    hyper::header::HeaderValue::from_str(&format!("h3=\":{port}\"; ma={}", max_age.as_secs())).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn alt_svc_names_the_port_and_the_max_age_in_seconds() {
        let v = super::alt_svc(8443, std::time::Duration::from_secs(86_400)).unwrap();
        assert_eq!(v, "h3=\":8443\"; ma=86400");
    }
}
