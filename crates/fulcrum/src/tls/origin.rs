//! TLS to the servers (`server_tls`): Fulcrum is the client, verifies each server's certificate
//! against the configured CA file or the system's roots, and sends SNI (the configured name,
//! else the host of the server's `address`), with the versions and suites of `policy`. Built with the pool's generation on a blocking
//! thread, as the certificates are read from files then; `check` runs the same loading.

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::TlsError;
use crate::config;

/// A pool's TLS client side.
pub struct Originator {
    connector: TlsConnector,
    sni: Option<ServerName<'static>>,
    /// What it was built from: the settings and the CA certificates read.
    identity: u64,
}

impl Originator {
    /// Reads the CA file of `tls` (or the system's roots) and builds the client config; `h2`
    /// offers HTTP/2 by ALPN (and only it), else HTTP/1.1 for an HTTP pool (`http`), nothing
    /// for TCP.
    pub fn load(tls: &config::ServerTls, http: bool, h2: bool) -> Result<Originator, TlsError> {
        use std::hash::{Hash, Hasher};
        let mut identity = std::hash::DefaultHasher::new();
        (tls, http, h2).hash(&mut identity);
        let roots = match &tls.ca {
            Some(ca) => {
                let (roots, ders) = super::certs::ca_file(ca)?;
                ders.hash(&mut identity);
                roots
            }
            None => system_roots()?,
        };
        let sni = tls.sni.as_deref().map(name).transpose()?;
        let fail = |reason: String| TlsError { file: "server_tls".into(), reason };
        let policy = super::policy::policy(tls.protocols(), super::provider()).map_err(|e| fail(e.to_string()))?;
        let mut config = ClientConfig::builder_with_provider(policy.provider)
            .with_protocol_versions(&policy.versions)
            .map_err(|e| fail(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = match (http, h2) {
            (true, true) => vec![b"h2".to_vec()],
            (true, false) => vec![b"http/1.1".to_vec()],
            (false, _) => Vec::new(),
        };
        Ok(Originator { connector: TlsConnector::from(Arc::new(config)), sni, identity: identity.finish() })
    }

    /// Tells the connections made with one `server_tls` (its settings and CA certificates) from
    /// those of another, so that a reload that changes them reuses none kept from before. The
    /// same settings loaded again have the same identity: their connections stay in use.
    pub fn identity(&self) -> u64 {
        self.identity
    }

    /// A TLS session over `stream` to the server at `address` (`host:port` as configured),
    /// handshaken within `limit`. The name sent and verified is the server's own `sni`, else the
    /// pool's, else the host of its address.
    pub async fn connect(&self, stream: TcpStream, sni: Option<&ServerName<'static>>, address: &str, limit: Duration) -> std::io::Result<TlsStream<TcpStream>> {
        let name = match sni.or(self.sni.as_ref()) {
            Some(name) => name.clone(),
            None => server_name(address)?,
        };
        match tokio::time::timeout(limit, self.connector.connect(name, stream)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no TLS handshake within {limit:?}"))),
        }
    }
}

/// An `sni` setting as the name to send and verify: a DNS name or an IP address.
pub fn name(sni: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(sni.to_string()).map_err(|e| TlsError { file: "sni".into(), reason: format!("{sni:?}: {e}") })
}

/// The system's roots. A store with some unreadable entries still serves with the rest (as
/// other TLS clients do); one where nothing loads is an error naming what was tried.
pub(crate) fn system_roots() -> Result<rustls::RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found.errors.first().map_or("no certificate found".to_string(), |e| e.to_string());
        return Err(TlsError { file: "the system's CA certificates".into(), reason: format!("{why} (set ca, or SSL_CERT_FILE)") });
    }
    Ok(roots)
}

/// The name to verify a server as: the host of its `host:port` address (`[v6]` without brackets).
fn server_name(address: &str) -> std::io::Result<ServerName<'static>> {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    ServerName::try_from(host.to_string()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host:?} cannot be verified as a TLS name: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_verified_as_the_host_of_its_address() {
        assert_eq!(server_name("api.internal:8443").unwrap(), ServerName::try_from("api.internal").unwrap());
        assert!(matches!(server_name("10.0.0.7:443").unwrap(), ServerName::IpAddress(_)));
        assert!(matches!(server_name("[::1]:443").unwrap(), ServerName::IpAddress(_)));
    }
}
