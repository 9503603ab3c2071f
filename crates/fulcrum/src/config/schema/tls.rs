//! TLS settings: termination (`[service.tls]`, its certificates) and origination to the servers (`server_tls`, `protocol`, `proxy_protocol`).

use super::*;

/// `server_tls`: Fulcrum speaks TLS to the servers and verifies them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The oldest protocol version Fulcrum offers the servers; unset: 1.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<TlsVersion>,
    /// The newest protocol version Fulcrum offers the servers; unset: 1.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version: Option<TlsVersion>,
    /// The cipher suites offered, in Fulcrum's order of preference (rustls's or IANA's names);
    /// unset: every suite of the ring provider. Each allowed version needs one of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cipher_suites: Option<Vec<String>>,
}

impl ServerTls {
    /// Its versions and cipher suites.
    pub fn protocols(&self) -> Protocols<'_> {
        Protocols { min_version: self.min_version, max_version: self.max_version, cipher_suites: self.cipher_suites.as_deref() }
    }
}

/// A TLS protocol version Fulcrum speaks: `"1.2"` or `"1.3"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TlsVersion {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl std::fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsVersion::V1_2 => "1.2",
            TlsVersion::V1_3 => "1.3",
        })
    }
}

/// The versions and cipher suites one side of TLS allows, as `[service.tls]` and `server_tls`
/// both set them (`tls::policy` turns them into what rustls takes). Each table declares the
/// three keys itself rather than flattening a shared struct: with serde's `flatten` a table
/// cannot deny unknown keys, and a bad value or a typo would lose its line and its hint.
#[derive(Debug, Clone, Copy, Default)]
pub struct Protocols<'a> {
    pub min_version: Option<TlsVersion>,
    pub max_version: Option<TlsVersion>,
    pub cipher_suites: Option<&'a [String]>,
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
    /// May be empty with `acme`.
    #[serde(default, rename = "certificate", skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<TlsCertificate>,
    /// `[service.tls.acme]`: a certificate obtained and renewed from an ACME CA, served before
    /// the files' certificates (the default for clients that send no name or an unknown one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acme: Option<Acme>,
    /// A PEM file of CA certificates: when set, a client must present a certificate one of them
    /// issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<String>,
    /// The oldest protocol version clients may use; unset: 1.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version: Option<TlsVersion>,
    /// The newest protocol version clients may use; unset: 1.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version: Option<TlsVersion>,
    /// The cipher suites clients may use, in the order Fulcrum picks them (rustls's or IANA's
    /// names); unset: every suite of the ring provider, AES-128-GCM first. Each allowed version
    /// needs one of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cipher_suites: Option<Vec<String>>,
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
    /// `strict_sni_host`, with its default: on when some name requires client certificates.
    pub fn strict_sni_host(&self) -> bool {
        self.strict_sni_host.unwrap_or(self.certificates.iter().any(|c| self.client_ca_of(c).is_some()))
    }

    /// The CA file whose certificates a client of `cert`'s names must present, if any: its own
    /// `client_ca`, else the service's unless it says `client_auth = "none"`.
    pub fn client_ca_of<'a>(&'a self, cert: &'a TlsCertificate) -> Option<&'a String> {
        match cert.client_auth {
            Some(ClientAuth::None) => None,
            _ => cert.client_ca.as_ref().or(self.client_ca.as_ref()),
        }
    }

    /// Its versions and cipher suites.
    pub fn protocols(&self) -> Protocols<'_> {
        Protocols { min_version: self.min_version, max_version: self.max_version, cipher_suites: self.cipher_suites.as_deref() }
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
    /// A PEM file of CA certificates: a client whose handshake gets this certificate (by SNI)
    /// must present a certificate one of them issued, in place of the service's `client_ca`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<String>,
    /// `"none"`: this certificate's names ask for no client certificate even where the service
    /// sets `client_ca`; `"required"` (the default where a `client_ca` applies) states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<ClientAuth>,
}

/// Whether a certificate's names require a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    Required,
    None,
}
