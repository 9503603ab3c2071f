//! Reading a certificate chain and its key from PEM files: the chain must parse, the key must be
//! one the ring provider signs with and must match the leaf, and the leaf must not have expired.
//! Also what the stats and the SNI choice need from the leaf: its DNS names and its expiry, and
//! the CA files that client certificates (`client_ca`) and servers (`server_tls.ca`) are
//! verified against.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

/// A loaded certificate: the chain and key rustls serves, and what is shown about it.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub info: CertInfo,
}

/// What the stats show of a certificate, and what SNI is matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The certificate file, as the config names it.
    pub file: String,
    /// DNS names of the leaf (subject alternative names; the common name when it has none),
    /// lower case; `*.example.com` for a wildcard.
    pub names: Vec<String>,
    /// When the leaf expires, seconds since the Unix epoch.
    pub not_after: i64,
    /// The leaf's issuer, as its distinguished name (`CN=..., O=...`).
    pub issuer: String,
    /// Where it comes from: a file of the config, or ACME.
    pub source: Source,
    /// With ACME: when it will be renewed, seconds since the Unix epoch.
    pub next_renewal: Option<i64>,
    /// What an operator should know of it now, in words: with ACME, that a self-signed
    /// certificate is served while none is issued yet, and why.
    pub note: Option<String>,
}

/// Where a served certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    File,
    Acme,
}

impl CertInfo {
    /// Time left before expiry; zero once expired.
    pub fn remaining(&self, now: SystemTime) -> Duration {
        let now = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
        Duration::from_secs(self.not_after.saturating_sub(now).max(0) as u64)
    }
}

/// The CA certificates of the PEM file `ca`: every one must parse and be usable as a root, and
/// there must be at least one. With the DER of each (what a resumption context, or a
/// `server_tls` identity, is made of).
pub fn ca_file(ca: &str) -> Result<(rustls::RootCertStore, Vec<CertificateDer<'static>>), TlsError> {
    let fail = |reason: String| TlsError { file: ca.to_string(), reason };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(Path::new(ca))
        .map_err(|e| fail(format!("cannot read the CA file: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("not a PEM certificate: {e}")))?;
    for cert in &certs {
        roots.add(cert.clone()).map_err(|e| fail(format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail("holds no certificate".into()));
    }
    Ok((roots, certs))
}

/// Loads `cert` (the PEM chain, leaf first) and `key` (PKCS#8, PKCS#1 or SEC1 PEM).
pub fn load(cert: &str, key: &str, provider: &CryptoProvider, now: SystemTime) -> Result<Loaded, TlsError> {
    let fail = |file: &str, reason: String| TlsError { file: file.to_string(), reason };
    let chain = std::fs::read(cert).map_err(|e| fail(cert, format!("cannot read the certificate: {e}")))?;
    let private = std::fs::read(key).map_err(|e| fail(key, format!("no private key read: {e}")))?;
    from_pem(&chain, cert, &private, key, provider, now)
}

/// Like `load`, from the PEM text of the chain (named `cert` in errors and the info) and of the
/// key (named `key`): what ACME's store holds.
pub fn from_pem(chain: &[u8], cert: &str, private: &[u8], key: &str, provider: &CryptoProvider, now: SystemTime) -> Result<Loaded, TlsError> {
    let fail = |file: &str, reason: String| TlsError { file: file.to_string(), reason };
    let chain = CertificateDer::pem_slice_iter(chain).collect::<Result<Vec<_>, _>>().map_err(|e| fail(cert, format!("not a PEM certificate chain: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(fail(cert, "holds no certificate (expected -----BEGIN CERTIFICATE-----)".into()));
    };
    let info = describe(leaf, cert)?;
    if info.remaining(now).is_zero() {
        return Err(fail(cert, format!("the certificate expired at {}", unix_to_text(info.not_after))));
    }
    let private = PrivateKeyDer::from_pem_slice(private).map_err(|e| fail(key, format!("no private key read: {e}")))?;
    let key_pair = CertifiedKey::from_der(chain, private, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => fail(key, format!("the key does not match the certificate in {cert}")),
        e => fail(key, format!("the key cannot be used: {e}")),
    })?;
    Ok(Loaded { key: Arc::new(key_pair), info })
}

/// Reads a leaf's names, expiry and issuer.
fn describe(leaf: &CertificateDer<'_>, file: &str) -> Result<CertInfo, TlsError> {
    use x509_parser::extensions::GeneralName;
    let (_, x509) =
        x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| TlsError { file: file.to_string(), reason: format!("the first certificate does not parse: {e}") })?;
    let mut names: Vec<String> = match x509.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.iter().filter_map(|n| if let GeneralName::DNSName(d) = n { Some(d.to_ascii_lowercase()) } else { None }).collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names = x509.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(str::to_ascii_lowercase).collect();
    }
    let issuer = x509.issuer().to_string();
    Ok(CertInfo { file: file.to_string(), names, not_after: x509.validity().not_after.timestamp(), issuer, source: Source::File, next_renewal: None, note: None })
}

/// A Unix time as `2026-11-24T21:00:00Z`.
pub fn unix_to_text(secs: i64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64)).to_string()
}

/// What a PEM chain's leaf says (names, expiry, issuer), named `what` in errors: for a
/// certificate that is no file of the config, as ACME's store in etcd holds it.
pub fn describe_pem(chain: &str, what: &str) -> Result<CertInfo, TlsError> {
    let leaf = CertificateDer::pem_slice_iter(chain.as_bytes())
        .next()
        .ok_or_else(|| TlsError { file: what.to_string(), reason: "holds no certificate".into() })?
        .map_err(|e| TlsError { file: what.to_string(), reason: format!("not a PEM certificate chain: {e}") })?;
    describe(&leaf, what)
}
