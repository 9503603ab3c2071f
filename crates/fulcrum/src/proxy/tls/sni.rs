//! Which certificate a client gets: the one whose names hold the server name it sent (SNI), an
//! exact name before a wildcard (`*.example.com` covers one label: `a.example.com`, not
//! `example.com` nor `a.b.example.com`), and the first certificate of the config for a client
//! that sends no name or one no certificate has.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

#[derive(Debug)]
pub struct Resolver {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl Resolver {
    /// `certs` in config order, each with its names; the first is the default. A name two
    /// certificates share goes to the first.
    pub fn new(certs: Vec<(Arc<CertifiedKey>, Vec<String>)>) -> Option<Resolver> {
        let default = certs.first()?.0.clone();
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        for (key, names) in certs {
            for name in names {
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_string()).or_insert_with(|| key.clone()),
                    None => exact.entry(name).or_insert_with(|| key.clone()),
                };
            }
        }
        Some(Resolver { exact, wildcard, default })
    }

    /// The certificate for `name` (already lower case, as rustls gives it).
    pub fn pick(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = name else { return &self.default };
        if let Some(key) = self.exact.get(name) {
            return key;
        }
        name.split_once('.').and_then(|(_, parent)| self.wildcard.get(parent)).unwrap_or(&self.default)
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.pick(hello.server_name()).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A distinct certified key: a one-byte stand-in chain (only identity matters here).
    fn key(n: u8) -> Arc<CertifiedKey> {
        let provider = rustls::crypto::ring::default_provider();
        Arc::new(CertifiedKey::new(vec![rustls_pki_types::CertificateDer::from(vec![n])], provider.key_provider.load_private_key(ed25519_key()).unwrap()))
    }

    /// An Ed25519 PKCS#8 key from a fixed seed (RFC 8410's example).
    fn ed25519_key() -> rustls_pki_types::PrivateKeyDer<'static> {
        let der: Vec<u8> = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20, 0xd4, 0xee, 0x72, 0xdb, 0xf9, 0x13, 0x58, 0x4a, 0xd5, 0xb6, 0xd8, 0xf1, 0xf7, 0x69, 0xf8, 0xad, 0x3a, 0xfe, 0x7c, 0x28,
            0xcb, 0xf1, 0xd4, 0xfb, 0xe0, 0x97, 0xa8, 0x8f, 0x44, 0x75, 0x58, 0x42,
        ]
        .to_vec();
        rustls_pki_types::PrivateKeyDer::Pkcs8(der.into())
    }

    #[test]
    fn exact_names_win_over_wildcards_and_the_first_certificate_is_the_default() {
        let (a, b, c) = (key(1), key(2), key(3));
        let r = Resolver::new(vec![
            (a.clone(), vec!["a.test".into()]),
            (b.clone(), vec!["*.b.test".into(), "x.b.test".into()]),
            (c.clone(), vec!["x.b.test".into(), "*.c.test".into()]),
        ])
        .unwrap();
        let is = |name: Option<&str>, want: &Arc<CertifiedKey>| assert!(Arc::ptr_eq(r.pick(name), want), "{name:?}");
        is(Some("a.test"), &a);
        is(Some("y.b.test"), &b);
        // Shared by two: the first in the config.
        is(Some("x.b.test"), &b);
        is(Some("q.c.test"), &c);
        // A wildcard covers one label only.
        is(Some("b.test"), &a);
        is(Some("p.q.c.test"), &a);
        is(Some("unknown.test"), &a);
        is(None, &a);
        assert!(Resolver::new(Vec::new()).is_none());
    }
}
