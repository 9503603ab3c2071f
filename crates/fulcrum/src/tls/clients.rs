//! Client certificates, per name: each `[[service.tls.certificate]]` may require certificates
//! from its own `client_ca`, or none (`client_auth = "none"`), in place of the service's
//! `client_ca`. rustls verifies client certificates per `ServerConfig`, so the certificates
//! that share a policy (the same CA file, or none) form a *group* with a config of its own, and
//! the terminator picks the group by the server name of the ClientHello before the handshake
//! goes on (`Terminator::handshake`), with the same rule that picks the certificate.
//!
//! Each group is a resumption context of its own (`resumption`: the service, its certificates
//! and the group's CAs), so a session issued under a name without a CA cannot resume under one
//! with it: its ticket does not decrypt and its session ID is in another cache, and rustls also
//! refuses a session whose server name differs. A resumed session is served only when the
//! client certificate it carries still verifies against its group's CA now.

use std::sync::Arc;

use rustls::HandshakeKind;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::UnixTime;
use tokio_rustls::TlsAcceptor;

use super::policy::Policy;
use super::resumption::{self, Context, Resumption};
use super::{TlsError, certs, sni};
use crate::config;

/// The certificates that share a client-certificate policy: their config and its resumption.
pub struct Group {
    pub acceptor: TlsAcceptor,
    /// With a CA: what a resumed session's client certificate is verified against again.
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    /// Held for as long as this group serves: the context's ticket keys and cache live while
    /// some generation uses them.
    _resumption: Arc<Resumption>,
}

/// What every group of a service shares.
pub struct Base<'a> {
    pub policy: &'a Policy,
    pub resolver: &'a Arc<sni::Resolver>,
    /// The service's context; each group adds its CAs.
    pub context: &'a Context,
    pub alpn: &'a [Vec<u8>],
}

/// The groups of `tls`'s certificates, and the group of each certificate in the resolver's
/// order (the ACME certificate first, then the files' in config order).
/// Reads the CA files.
pub fn groups(tls: &config::Tls, base: &Base<'_>) -> Result<(Vec<Group>, Vec<usize>), TlsError> {
    let mut cas: Vec<Option<&String>> = Vec::new();
    // An ACME certificate (the resolver's first) asks for the service's client_ca.
    let acme = tls.acme.as_ref().map(|_| tls.client_ca.as_ref());
    let group_of = acme
        .into_iter()
        .chain(tls.certificates.iter().map(|cert| tls.client_ca_of(cert)))
        .map(|ca| {
            cas.iter().position(|known| *known == ca).unwrap_or_else(|| {
                cas.push(ca);
                cas.len() - 1
            })
        })
        .collect();
    let groups = cas.into_iter().map(|ca| group(ca.map(String::as_str), base)).collect::<Result<_, _>>()?;
    Ok((groups, group_of))
}

/// The config of the certificates whose clients must present a certificate `ca` issued (any
/// client without `ca`).
fn group(ca: Option<&str>, base: &Base<'_>) -> Result<Group, TlsError> {
    let fail = |file: &str, reason: String| TlsError { file: file.into(), reason };
    let mut context = base.context.clone();
    let builder =
        ServerConfig::builder_with_provider(base.policy.provider.clone()).with_protocol_versions(&base.policy.versions).map_err(|e| fail("[service.tls]", e.to_string()))?;
    let (builder, verifier) = match ca {
        Some(ca) => {
            let (roots, ders) = certs::ca_file(ca)?;
            for der in &ders {
                context.part(b"client_ca", der.as_ref());
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), base.policy.provider.clone()).build().map_err(|e| fail(ca, e.to_string()))?;
            (builder.with_client_cert_verifier(verifier.clone()), Some(verifier))
        }
        None => (builder.with_no_client_auth(), None),
    };
    let mut server = builder.with_cert_resolver(base.resolver.clone());
    // The server's order of the suites, not the client's.
    server.ignore_client_order = true;
    let resumption = resumption::for_context(context).map_err(|e| fail("[service.tls]", e.to_string()))?;
    server.ticketer = resumption.ticketer.clone();
    server.session_storage = resumption.cache.clone();
    server.alpn_protocols = base.alpn.to_vec();
    Ok(Group { acceptor: TlsAcceptor::from(Arc::new(server)), verifier, _resumption: resumption })
}

impl Group {
    /// A resumed session in a group with a CA must carry a client certificate that the CA
    /// verifies now: the session was made under this group's context (its ticket keys are the
    /// context's own), and this also holds when the certificate expired since. A full
    /// handshake verifies its certificate itself.
    pub fn resumed_certificate_verifies(&self, session: &rustls::ServerConnection) -> bool {
        let Some(verifier) = &self.verifier else { return true };
        if session.handshake_kind() != Some(HandshakeKind::Resumed) {
            return true;
        }
        let Some((leaf, intermediates)) = session.peer_certificates().and_then(|c| c.split_first()) else {
            tracing::warn!("TLS: a resumed session without a client certificate on a name that requires one, closed");
            return false;
        };
        match verifier.verify_client_cert(leaf, intermediates, UnixTime::since_unix_epoch(crate::clock::since_epoch())) {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!("TLS: a resumed session's client certificate no longer verifies: {e}");
                false
            }
        }
    }
}
