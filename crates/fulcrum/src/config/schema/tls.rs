//! TLS settings: termination (`[service.tls]`, its certificates) and origination to the servers (`server_tls`, `protocol`, `proxy_protocol`).

use super::*;

/// `server_tls`: Fulcrum speaks TLS to the servers and verifies them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// A PEM file of the CA certificates a server's certificate must chain to; unset: the
    /// system's roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` when set, else the platform's store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// The name sent in SNI and verified against the server's certificate; unset: the host of
    /// each server's `address` (an IP address is verified as one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

/// What HTTP mode speaks to a pool's servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerProtocol {
    /// HTTP/1.1 over kept-alive connections, one request at a time on each.
    #[default]
    Http1,
    /// HTTP/2 without TLS (h2c, prior knowledge): one connection per server carries every
    /// request as a stream, trailers included; what gRPC servers speak.
    H2,
}

impl ServerProtocol {
    pub fn is_http1(&self) -> bool {
        *self == ServerProtocol::Http1
    }
}

/// The PROXY protocol version Fulcrum sends a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    V1,
    V2,
}

/// `[service.tls]`: Fulcrum terminates TLS for the service's clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// `[[service.tls.certificate]]`, chosen by the name a client sends (SNI) against each
    /// certificate's names; the first serves clients that send no name or one no certificate has.
    #[serde(rename = "certificate")]
    pub certificates: Vec<TlsCertificate>,
    /// A PEM file of CA certificates: when set, a client must present a certificate one of them
    /// issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<String>,
    /// HTTP mode: a request whose Host is not a name of the certificate its handshake chose (by
    /// SNI) is answered 421 Misdirected Request, so a client cannot present one name and reach
    /// another's routes (domain fronting). Unset: on with `client_ca` (where fronting would
    /// pass a certificate check made for another name), off without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_sni_host: Option<bool>,
    /// Time for a client to complete its handshake, 1ms to 5 minutes.
    #[serde(default = "defaults::handshake_timeout", with = "duration")]
    pub handshake_timeout: Duration,
}

impl Tls {
    /// `strict_sni_host`, with its default: on when client certificates are required.
    pub fn strict_sni_host(&self) -> bool {
        self.strict_sni_host.unwrap_or(self.client_ca.is_some())
    }
}

/// One certificate chain and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertificate {
    /// The chain, leaf first.
    pub cert: String,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
}
