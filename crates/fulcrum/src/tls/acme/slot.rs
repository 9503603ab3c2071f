//! Where an ACME certificate is served from: a `Slot` per set of names, holding the certificate
//! of the moment behind an `ArcSwap`. The SNI resolver of every generation that serves those
//! names reads the slot at each handshake, and the orderer swaps a new certificate in, so a
//! certificate issued or renewed serves the next handshake, with no reload and no generation
//! rebuilt. Until one is issued the slot holds a self-signed placeholder, and says so (`note`).
//!
//! Slots live in a process-wide table, keyed by `certificate_key`, because the terminators are
//! built with each generation (`live`, and `check`) while certificates outlive generations: a
//! reload that keeps the names keeps the slot and what it serves. The table also holds the
//! stores, whose pending challenges the handshakes (tls-alpn-01) and plain-HTTP services
//! (http-01) answer from.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;

use super::store::{Challenge, Store, Stored, certificate_key};
use crate::tls::{CertInfo, Source, certs};

/// The ALPN protocol of tls-alpn-01 (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Longest http-01 token answered: Let's Encrypt's are 43 characters; longer ones are refused
/// before any lookup.
pub const MAX_TOKEN: usize = 128;

/// What a slot serves now.
pub struct Served {
    pub key: Arc<CertifiedKey>,
    pub info: CertInfo,
    /// Issued by the CA (not the placeholder).
    pub issued: bool,
}

pub struct Slot {
    /// `certificate_key` of the names.
    pub key: String,
    pub names: Vec<String>,
    served: ArcSwap<Served>,
}

static SLOTS: LazyLock<Mutex<HashMap<String, Arc<Slot>>>> = LazyLock::new(Mutex::default);
static STORES: LazyLock<RwLock<Vec<Arc<dyn Store>>>> = LazyLock::new(RwLock::default);

/// The slot of `names`, made with a self-signed placeholder the first time.
pub fn slot(names: &[String]) -> Result<Arc<Slot>, String> {
    let key = certificate_key(names);
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slot) = slots.get(&key) {
        return Ok(slot.clone());
    }
    let served = placeholder(&key, names, None)?;
    let slot = Arc::new(Slot { key: key.clone(), names: names.to_vec(), served: ArcSwap::from_pointee(served) });
    slots.insert(key, slot.clone());
    Ok(slot)
}

/// Every slot made in this process.
pub fn slots() -> Vec<Arc<Slot>> {
    SLOTS.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
}

/// Makes `store`'s pending challenges answered (once per store).
pub fn answer_from(store: &Arc<dyn Store>) {
    let mut stores = STORES.write().unwrap_or_else(|e| e.into_inner());
    if !stores.iter().any(|s| Arc::ptr_eq(s, store)) {
        stores.push(store.clone());
    }
}

/// Whether any ACME store answers challenges in this process (plain-HTTP services then answer
/// `/.well-known/acme-challenge/`).
pub fn answering() -> bool {
    STORES.read().unwrap_or_else(|e| e.into_inner()).iter().any(|s| s.answering())
}

fn answer(challenge: &Challenge) -> Option<Vec<u8>> {
    STORES.read().unwrap_or_else(|e| e.into_inner()).iter().find_map(|s| s.challenge(challenge))
}

/// The key authorization for http-01's `token`, if a challenge for it is pending.
pub fn http01(token: &str) -> Option<Vec<u8>> {
    if token.is_empty() || token.len() > MAX_TOKEN || !token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return None;
    }
    answer(&Challenge::Http01 { token: token.to_string() })
}

/// The tls-alpn-01 certificate for `domain`, if a challenge for it is pending.
pub fn tls_alpn01(domain: &str) -> Option<Arc<CertifiedKey>> {
    if domain.len() > 253 {
        return None;
    }
    let pem = answer(&Challenge::TlsAlpn01 { domain: domain.to_ascii_lowercase() })?;
    match alpn_key(&pem) {
        Ok(key) => Some(key),
        Err(e) => {
            tracing::warn!(domain, "ACME: the tls-alpn-01 certificate cannot serve: {e}");
            None
        }
    }
}

/// The challenge certificate and its key, as rustls serves them. Not through `certs::from_pem`:
/// its check that the key matches parses the certificate with webpki, which refuses the
/// critical acmeIdentifier extension that RFC 8737 requires.
fn alpn_key(pem: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let (chain, key) = split_pem(pem).ok_or("not a certificate then a key")?;
    let cert = CertificateDer::from_pem_slice(chain).map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| e.to_string())?;
    let signer = crate::tls::provider().key_provider.load_private_key(key).map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(vec![cert], signer)))
}

/// A challenge certificate's PEM (chain then key) as the two parts.
fn split_pem(pem: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = pem.windows(11).position(|w| w == b"-----BEGIN ")?;
    let key = pem.windows(17).position(|w| w == b"PRIVATE KEY-----\n").and_then(|end| pem[..end].windows(11).rposition(|w| w == b"-----BEGIN "))?;
    (key > at).then(|| (&pem[..key], &pem[key..]))
}

impl Slot {
    pub fn current(&self) -> Arc<Served> {
        self.served.load_full()
    }

    /// The certificate to give a handshake now.
    pub fn certified(&self) -> Arc<CertifiedKey> {
        self.served.load().key.clone()
    }

    pub fn issued(&self) -> bool {
        self.served.load().issued
    }

    /// Serves `stored` from the next handshake on; an error says why it cannot (and the old
    /// certificate keeps serving).
    pub fn serve(&self, stored: &Stored, next_renewal: Option<i64>) -> Result<(), String> {
        let provider = crate::tls::provider();
        let label = format!("acme:{}", self.key);
        let loaded = certs::from_pem(stored.chain_pem.as_bytes(), &label, stored.key_pem.as_bytes(), &label, &provider, crate::clock::wall()).map_err(|e| e.reason)?;
        let mut info = loaded.info;
        info.source = Source::Acme;
        info.next_renewal = next_renewal;
        self.served.store(Arc::new(Served { key: loaded.key, info, issued: true }));
        Ok(())
    }

    /// Sets what the stats say of it: the next renewal, and a note (with the placeholder,
    /// always one saying so, with `error` when an order failed).
    pub fn describe(&self, next_renewal: Option<i64>, error: Option<&str>) {
        let now = self.served.load_full();
        let mut info = now.info.clone();
        info.next_renewal = next_renewal;
        info.note = match (now.issued, error) {
            (false, _) => Some(placeholder_note(error)),
            (true, Some(e)) => Some(format!("the last renewal failed: {e}")),
            (true, None) => None,
        };
        self.served.store(Arc::new(Served { key: now.key.clone(), info, issued: now.issued }));
    }
}

fn placeholder_note(error: Option<&str>) -> String {
    match error {
        Some(e) => format!("self-signed: no certificate issued yet by ACME (last error: {e})"),
        None => "self-signed: no certificate issued yet by ACME".to_string(),
    }
}

/// A self-signed certificate for `names` (ECDSA P-256, a day), served until the CA issues one.
fn placeholder(key: &str, names: &[String], error: Option<&str>) -> Result<Served, String> {
    let pair = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = rcgen::CertificateParams::new(names.to_vec()).and_then(|mut p| {
        // rcgen's time (the `time` crate's), from the wall clock in whole seconds.
        let since = crate::clock::wall().duration_since(std::time::SystemTime::UNIX_EPOCH).unwrap_or_default();
        let now = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(since.as_secs());
        p.not_before = now - std::time::Duration::from_secs(60);
        p.not_after = now + std::time::Duration::from_secs(86_400);
        p.self_signed(&pair)
    });
    let cert = cert.map_err(|e| format!("the placeholder certificate: {e}"))?;
    let provider = crate::tls::provider();
    let label = format!("acme:{key}");
    let loaded = certs::from_pem(cert.pem().as_bytes(), &label, pair.serialize_pem().as_bytes(), &label, &provider, crate::clock::wall()).map_err(|e| e.reason)?;
    let mut info = loaded.info;
    info.source = Source::Acme;
    info.note = Some(placeholder_note(error));
    Ok(Served { key: loaded.key, info, issued: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_starts_with_a_placeholder_that_says_so_and_is_shared_by_name() {
        let names = vec!["slot-test.example".to_string()];
        let a = slot(&names).unwrap();
        assert!(!a.issued());
        let note = a.current().info.note.clone().unwrap();
        assert!(note.starts_with("self-signed"), "{note}");
        assert_eq!(a.current().info.names, names);
        assert!(Arc::ptr_eq(&a, &slot(&names).unwrap()));
        a.describe(Some(5), Some("connection refused"));
        assert!(a.current().info.note.as_deref().unwrap().contains("(last error: connection refused)"));
        assert_eq!(a.current().info.next_renewal, Some(5));
    }

    #[test]
    fn bad_tokens_are_refused_before_any_lookup() {
        assert_eq!(http01(""), None);
        assert_eq!(http01(&"a".repeat(MAX_TOKEN + 1)), None);
        assert_eq!(http01("../x"), None);
    }

    #[test]
    fn a_challenge_pem_splits_into_chain_and_key() {
        let pem = b"-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nBB\n-----END PRIVATE KEY-----\n";
        let (chain, key) = split_pem(pem).unwrap();
        assert!(chain.starts_with(b"-----BEGIN CERTIFICATE") && key.starts_with(b"-----BEGIN PRIVATE KEY"));
        assert_eq!(split_pem(b"garbage"), None);
    }
}
