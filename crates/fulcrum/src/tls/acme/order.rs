//! One ACME order (RFC 8555 section 7.4), written against `dyn Store` only, so a standalone
//! instance and a fleet run the same steps: the account (made once per CA and kept in the
//! store), a new order for the names, each authorization's challenge answered through the
//! store (stored before the CA is told it is ready, so whichever instance the validator reaches
//! answers), the CSR with a fresh key, and the chain. The challenges are removed however the
//! order ends.

use std::time::Duration;

use instant_acme::{Account, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy};

use super::client::{Client, RetryAfter};
use super::store::{Challenge, Store, Stored};
use crate::config::{Acme, AcmeChallenge, AcmeKeyType};

/// How long the CA may take to validate every challenge, then to issue.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Why an order failed, in words an operator can act on (the CA's own problem text when it
/// gave one), and whether the CA said it was rate-limiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct OrderError {
    pub reason: String,
    pub rate_limited: bool,
    /// The CA does not know the stored account (a CA that lost its state, a test CA
    /// restarted): the next try makes a new one.
    pub account_unknown: bool,
}

impl OrderError {
    pub fn new(reason: impl Into<String>) -> OrderError {
        OrderError { reason: reason.into(), rate_limited: false, account_unknown: false }
    }
}

impl From<instant_acme::Error> for OrderError {
    fn from(e: instant_acme::Error) -> OrderError {
        let kind = match &e {
            instant_acme::Error::Api(p) => p.r#type.as_deref().unwrap_or(""),
            _ => "",
        };
        let rate_limited = kind == "urn:ietf:params:acme:error:rateLimited";
        let account_unknown = kind == "urn:ietf:params:acme:error:accountDoesNotExist" || kind == "urn:ietf:params:acme:error:unauthorized" && e.to_string().contains("account");
        OrderError { reason: format!("the CA: {e}"), rate_limited, account_unknown }
    }
}

impl From<super::store::StoreError> for OrderError {
    fn from(e: super::store::StoreError) -> OrderError {
        OrderError::new(format!("the store: {e}"))
    }
}

/// The account for `acme`'s CA: restored from the store, or made (and stored) the first time.
/// With `fresh`, a new account is made even if one is stored (the CA forgot it).
pub async fn account(acme: &Acme, store: &dyn Store, retry_after: &RetryAfter, fresh: bool) -> Result<Account, OrderError> {
    let http = || Client::new(acme.directory_ca.as_deref(), retry_after).map(|c| Box::new(c) as Box<dyn instant_acme::HttpClient>).map_err(|e| OrderError::new(e.to_string()));
    if !fresh && let Some(saved) = store.account(&acme.directory).await? {
        let credentials = serde_json::from_slice(&saved).map_err(|e| OrderError::new(format!("the stored account does not read: {e}")))?;
        return Ok(Account::builder_with_http(http()?).from_credentials(credentials).await?);
    }
    let contact: Vec<String> = acme.contact.iter().map(|c| if c.starts_with("mailto:") { c.clone() } else { format!("mailto:{c}") }).collect();
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let eab = match &acme.eab {
        Some(eab) => {
            use base64::Engine;
            let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(eab.hmac_key.trim_end_matches('='))
                .map_err(|e| OrderError::new(format!("eab.hmac_key is not base64url: {e}")))?;
            Some(instant_acme::ExternalAccountKey::new(eab.kid.clone(), &key))
        }
        None => None,
    };
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, credentials) = Account::builder_with_http(http()?).create(&new, acme.directory.clone(), eab.as_ref()).await?;
    let json = serde_json::to_vec(&credentials).map_err(|e| OrderError::new(e.to_string()))?;
    store.save_account(&acme.directory, &json).await?;
    Ok(account)
}

/// Orders a certificate for `names` and returns it with its key.
pub async fn order(account: &Account, acme: &Acme, names: &[String], store: &dyn Store) -> Result<Stored, OrderError> {
    let mut pending = Vec::new();
    let result = run(account, acme, names, store, &mut pending).await;
    for challenge in &pending {
        if let Err(e) = store.remove_challenge(challenge).await {
            tracing::warn!(challenge = ?challenge, "ACME: cannot remove a challenge: {e}");
        }
    }
    result
}

async fn run(account: &Account, acme: &Acme, names: &[String], store: &dyn Store, pending: &mut Vec<Challenge>) -> Result<Stored, OrderError> {
    let identifiers: Vec<Identifier> = names.iter().map(|n| Identifier::Dns(n.clone())).collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let kind = match acme.challenge {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    // Every answer is stored first, then, once they have settled where the validator may land
    // (in a fleet, on every instance: `Store::settle`), the CA is asked to validate them all.
    let mut authorizations = order.authorizations();
    let mut to_validate = 0;
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(OrderError::new(format!("the authorization for {} is {other:?}", authz.identifier()))),
        }
        let domain = authz.identifier().to_string();
        let challenge = authz.challenge(kind.clone()).ok_or_else(|| OrderError::new(format!("the CA offers no {} challenge for {domain}", acme.challenge.as_str())))?;
        let key_authorization = challenge.key_authorization();
        let (stored, answer) = match acme.challenge {
            AcmeChallenge::Http01 => (Challenge::Http01 { token: challenge.token.clone() }, key_authorization.as_str().as_bytes().to_vec()),
            AcmeChallenge::TlsAlpn01 => (Challenge::TlsAlpn01 { domain: domain.to_ascii_lowercase() }, alpn_certificate(&domain, key_authorization.digest().as_ref())?),
        };
        store.put_challenge(&stored, &answer).await?;
        pending.push(stored);
        to_validate += 1;
    }
    if to_validate > 0 {
        tokio::time::sleep(store.settle()).await;
    }
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        if authz.status != AuthorizationStatus::Pending {
            continue;
        }
        if let Some(mut challenge) = authz.challenge(kind.clone()) {
            challenge.set_ready().await?;
        }
    }
    let retries = RetryPolicy::new().timeout(VALIDATION_TIMEOUT);
    let status = order.poll_ready(&retries).await?;
    if status != OrderStatus::Ready {
        let why = order.state().error.as_ref().map_or_else(|| format!("the order is {status:?}"), |p| p.to_string());
        return Err(OrderError::new(format!("validation failed: {why}{}", challenge_errors(&mut order).await)));
    }
    // An RSA key takes a while to make: off the runtime's threads.
    let (owned, key_type) = (names.to_vec(), acme.key_type);
    let (key_pem, csr) = tokio::task::spawn_blocking(move || csr(&owned, key_type)).await.map_err(|e| OrderError::new(format!("the CSR's thread: {e}")))??;
    order.finalize_csr(&csr).await?;
    let chain_pem = order.poll_certificate(&retries).await?;
    Ok(Stored { chain_pem, key_pem })
}

/// What the CA said of each failed challenge, for the log.
async fn challenge_errors(order: &mut instant_acme::Order) -> String {
    let mut out = String::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(authz)) = authorizations.next().await {
        for c in &authz.challenges {
            if let Some(e) = &c.error {
                out.push_str(&format!("; {}: {e}", authz.identifier()));
            }
        }
    }
    out
}

/// A fresh key of `key_type` and a CSR for `names` signed with it.
fn csr(names: &[String], key_type: AcmeKeyType) -> Result<(String, Vec<u8>), OrderError> {
    let fail = |e: rcgen::Error| OrderError::new(format!("the CSR: {e}"));
    let pair = match key_type {
        AcmeKeyType::EcdsaP256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(fail)?,
        AcmeKeyType::Rsa2048 => {
            use rsa::pkcs8::EncodePrivateKey;
            let key = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).map_err(|e| OrderError::new(format!("the RSA key: {e}")))?;
            let der = key.to_pkcs8_der().map_err(|e| OrderError::new(format!("the RSA key: {e}")))?;
            let pkcs8 = rustls_pki_types::PrivatePkcs8KeyDer::from(der.as_bytes());
            rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_RSA_SHA256).map_err(fail)?
        }
    };
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(fail)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&pair).map_err(fail)?;
    Ok((pair.serialize_pem(), csr.der().to_vec()))
}

/// The tls-alpn-01 certificate for `domain` (RFC 8737): self-signed, the domain as its only
/// name, the key authorization's digest in the critical acmeIdentifier extension; PEM, chain
/// then key, as the store keeps it.
fn alpn_certificate(domain: &str, digest: &[u8]) -> Result<Vec<u8>, OrderError> {
    let fail = |e: rcgen::Error| OrderError::new(format!("the tls-alpn-01 certificate: {e}"));
    let pair = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params = rcgen::CertificateParams::new(vec![domain.to_string()]).map_err(fail)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&pair).map_err(fail)?;
    Ok(format!("{}{}", cert.pem(), pair.serialize_pem()).into_bytes())
}

impl AcmeChallenge {
    pub fn as_str(self) -> &'static str {
        match self {
            AcmeChallenge::Http01 => "http-01",
            AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alpn_certificate_names_the_domain_and_carries_the_digest() {
        let pem = alpn_certificate("a.test", &[7u8; 32]).unwrap();
        let text = String::from_utf8(pem).unwrap();
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----") && text.contains("PRIVATE KEY-----"));
        let der = rustls_pki_types::CertificateDer::from_pem_slice(text.as_bytes()).unwrap();
        use rustls_pki_types::pem::PemObject;
        let (_, x509) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        // id-pe-acmeIdentifier, critical, an OCTET STRING of the digest.
        let ext = x509.extensions().iter().find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31").unwrap();
        assert!(ext.critical);
        assert_eq!(&ext.value[2..], &[7u8; 32]);
    }

    #[tokio::test]
    async fn a_pending_alpn_challenge_is_served_to_the_validator() {
        let pem = alpn_certificate("alpn-pending.test", &[7u8; 32]).unwrap();
        let dir = std::env::temp_dir().join(format!("fulcrum-acme-alpn-{}", std::process::id()));
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(crate::tls::acme::disk::DiskStore::create(&dir).unwrap());
        crate::tls::acme::slot::answer_from(&store);
        assert!(crate::tls::acme::tls_alpn01("alpn-pending.test").is_none());
        store.put_challenge(&Challenge::TlsAlpn01 { domain: "alpn-pending.test".into() }, &pem).await.unwrap();
        assert!(crate::tls::acme::tls_alpn01("alpn-pending.test").is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_csr_is_made_with_an_ecdsa_or_an_rsa_key() {
        for kind in [AcmeKeyType::EcdsaP256, AcmeKeyType::Rsa2048] {
            let (key, der) = csr(&["a.test".into()], kind).unwrap();
            assert!(key.contains("PRIVATE KEY") && !der.is_empty(), "{kind:?}");
            let parsed = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            use rustls_pki_types::pem::PemObject;
            assert!(crate::tls::provider().key_provider.load_private_key(parsed).is_ok(), "{kind:?}: ring signs with it");
        }
    }
}
