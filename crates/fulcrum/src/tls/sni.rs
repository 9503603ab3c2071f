//! Which certificate a client gets: the one whose names hold the server name it sent (SNI), an
//! exact name before a wildcard (`*.example.com` covers one label: `a.example.com`, not
//! `example.com` nor `a.b.example.com`), and the first certificate of the config for a client
//! that sends no name or one no certificate has.
//!
//! An ACME certificate is read from its slot at each handshake (`acme::slot`), so a renewal
//! serves at once. A handshake that offers only ALPN `acme-tls/1` is a CA's validator
//! (tls-alpn-01, RFC 8737): it gets the challenge certificate of the name it asks for while an
//! order is pending, and no certificate at all otherwise.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// A certificate a resolver serves: loaded with the generation, or an ACME slot's.
pub enum Cert {
    Fixed(Arc<CertifiedKey>),
    Acme(Arc<super::acme::Slot>),
}

impl Cert {
    fn certified(&self) -> Arc<CertifiedKey> {
        match self {
            Cert::Fixed(key) => key.clone(),
            Cert::Acme(slot) => slot.certified(),
        }
    }
}

impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cert::Fixed(_) => f.write_str("Fixed"),
            Cert::Acme(slot) => write!(f, "Acme({})", slot.key),
        }
    }
}

#[derive(Debug)]
pub struct Resolver {
    /// In config order: the first is the default.
    certs: Vec<(Cert, Arc<[String]>)>,
    /// Index into `certs` by name.
    exact: HashMap<String, usize>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, usize>,
}

impl Resolver {
    /// `certs` in config order, each with its names; the first is the default. A name two
    /// certificates share goes to the first.
    pub fn new(certs: Vec<(Cert, Vec<String>)>) -> Option<Resolver> {
        if certs.is_empty() {
            return None;
        }
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        for (i, (_, names)) in certs.iter().enumerate() {
            for name in names {
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_string()).or_insert(i),
                    None => exact.entry(name.clone()).or_insert(i),
                };
            }
        }
        let certs = certs.into_iter().map(|(key, names)| (key, names.into())).collect();
        Some(Resolver { certs, exact, wildcard })
    }

    /// The index, in config order, of the certificate for `name`.
    pub fn index(&self, name: Option<&str>) -> usize {
        let Some(name) = name else { return 0 };
        if let Some(&i) = self.exact.get(name) {
            return i;
        }
        name.split_once('.').and_then(|(_, parent)| self.wildcard.get(parent)).copied().unwrap_or(0)
    }

    /// The certificate for `name` (already lower case, as rustls gives it).
    pub fn pick(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        self.certs[self.index(name)].0.certified()
    }

    /// The names of the certificate a client that sent `name` gets.
    pub fn names_for(&self, name: Option<&str>) -> Arc<[String]> {
        self.certs[self.index(name)].1.clone()
    }
}

/// Whether a certificate of `names` covers `host` (any case, a trailing dot allowed), with the
/// wildcard rule above.
pub fn covers(names: &[String], host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    names.iter().any(|n| match n.strip_prefix("*.") {
        Some(parent) => host.split_once('.').is_some_and(|(label, rest)| !label.is_empty() && rest == parent),
        None => *n == host,
    })
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if hello.alpn().is_some_and(|offered| {
            let mut offered = offered.peekable();
            offered.peek().is_some() && offered.all(|p| p == super::acme::ACME_TLS_ALPN)
        }) {
            return super::acme::tls_alpn01(hello.server_name()?);
        }
        Some(self.pick(hello.server_name()))
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
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20, 0xd4, 0xee, 0x72, 0xdb, 0xf9, 0x13, 0x58, 0x4a, 0xd5, 0xb6, 0xd8, 0xf1,
            0xf7, 0x69, 0xf8, 0xad, 0x3a, 0xfe, 0x7c, 0x28, 0xcb, 0xf1, 0xd4, 0xfb, 0xe0, 0x97, 0xa8, 0x8f, 0x44, 0x75, 0x58, 0x42,
        ]
        .to_vec();
        rustls_pki_types::PrivateKeyDer::Pkcs8(der.into())
    }

    #[test]
    fn exact_names_win_over_wildcards_and_the_first_certificate_is_the_default() {
        let (a, b, c) = (key(1), key(2), key(3));
        let r = Resolver::new(vec![
            (Cert::Fixed(a.clone()), vec!["a.test".into()]),
            (Cert::Fixed(b.clone()), vec!["*.b.test".into(), "x.b.test".into()]),
            (Cert::Fixed(c.clone()), vec!["x.b.test".into(), "*.c.test".into()]),
        ])
        .unwrap();
        let is = |name: Option<&str>, want: &Arc<CertifiedKey>| assert!(Arc::ptr_eq(&r.pick(name), want), "{name:?}");
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
        assert_eq!(&*r.names_for(Some("q.c.test")), ["x.b.test".to_string(), "*.c.test".to_string()]);
        assert_eq!(&*r.names_for(None), ["a.test".to_string()]);
    }

    #[test]
    fn a_host_is_covered_by_an_exact_name_or_a_one_label_wildcard() {
        let names = vec!["a.test".to_string(), "*.b.test".to_string()];
        for host in ["a.test", "A.Test", "a.test.", "x.b.test"] {
            assert!(covers(&names, host), "{host}");
        }
        for host in ["b.test", "x.y.b.test", ".b.test", "c.test", "a.test.evil", ""] {
            assert!(!covers(&names, host), "{host}");
        }
    }
}
