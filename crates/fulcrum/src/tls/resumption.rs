//! Session resumption, confined to the context a session was made in.
//!
//! rustls checks only the cipher suite, extended master secret and SNI when a client offers a
//! ticket or a session ID; it never asks whether the original handshake verified a client
//! certificate. So a ticket key or session cache shared by two services would let a session
//! taken from a service without `client_ca` resume on one with it, with no certificate (the class
//! of nginx CVE-2025-23419), and a key kept across a reload that changed `client_ca` would let a
//! client of the old CA in.
//!
//! A *context* is the service's name, the DER of every certificate chain it serves, and the DER
//! of every CA of the `client_ca` that applies to the names of one client-certificate policy
//! (none for names that ask for no certificate; `clients` makes one context per policy). Each context has its own ticket keys (rotated
//! by rustls, as before) and its own session cache: a session resumes only where it was issued,
//! and a reload that changes any part of the context gives new keys and an empty cache, so every
//! earlier session gets a full handshake. A reload that changes nothing of it (another server's
//! weight, a timeout) keeps them, so resumption survives the edit.
//!
//! The registry holds each context weakly: the terminators of the live generations own it, and it
//! is gone with the last of them (a removed service, a `check` run).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};

/// Sessions a context keeps for clients that resume by session ID (TLS 1.2 without tickets):
/// rustls's own default size, the oldest dropped first. Each is under 200 bytes, plus with a
/// `client_ca` the client's certificate chain, at most one 64 KiB handshake message: at most
/// 16 MiB per context, filled only by clients whose certificates verified.
pub const SESSION_CACHE_SIZE: usize = 256;

/// What a context resumes with.
#[derive(Debug)]
pub struct Resumption {
    pub ticketer: Arc<dyn ProducesTickets>,
    pub cache: Arc<dyn StoresServerSessions>,
}

/// The identity of a resumption context, built from exactly what it is made of (no hash, so no
/// two contexts can share one).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Context(Vec<u8>);

impl Context {
    /// A context of service `name`.
    pub fn of(name: &str) -> Context {
        let mut c = Context(Vec::new());
        c.part(b"service", name.as_bytes());
        c
    }

    /// Adds a labelled part, length-prefixed, so that parts never run into each other.
    pub fn part(&mut self, label: &[u8], bytes: &[u8]) {
        for piece in [label, bytes] {
            self.0.extend_from_slice(&(piece.len() as u64).to_be_bytes());
            self.0.extend_from_slice(piece);
        }
    }
}

type Registry = Mutex<HashMap<Context, Weak<Resumption>>>;

fn registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Why a context's ticket keys could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ResumptionError {
    #[error("session tickets: the registry is poisoned")]
    Poisoned,
    #[error("session tickets: {0}")]
    Ticketer(rustls::Error),
}

/// The ticket keys and session cache of `context`: the ones in use by a live terminator of the
/// same context, or new ones.
pub fn for_context(context: Context) -> Result<Arc<Resumption>, ResumptionError> {
    let mut contexts = registry().lock().map_err(|_| ResumptionError::Poisoned)?;
    if let Some(live) = contexts.get(&context).and_then(Weak::upgrade) {
        return Ok(live);
    }
    // Contexts no terminator holds any more go now: a reload that changed a context leaves one.
    contexts.retain(|_, r| r.strong_count() > 0);
    let ticketer = rustls::crypto::ring::Ticketer::new().map_err(ResumptionError::Ticketer)?;
    let made = Arc::new(Resumption { ticketer, cache: ServerSessionMemoryCache::new(SESSION_CACHE_SIZE) });
    contexts.insert(context, Arc::downgrade(&made));
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(name: &str, cert: &[u8], ca: Option<&[u8]>) -> Context {
        let mut c = Context::of(name);
        c.part(b"cert", cert);
        if let Some(ca) = ca {
            c.part(b"client_ca", ca);
        }
        c
    }

    #[test]
    fn one_context_shares_its_keys_and_any_difference_gets_new_ones() {
        let a = for_context(context("public", b"cert-1", None)).unwrap();
        let again = for_context(context("public", b"cert-1", None)).unwrap();
        assert!(Arc::ptr_eq(&a, &again), "a reload that changes nothing keeps the keys");
        for other in [context("internal", b"cert-1", None), context("public", b"cert-2", None), context("public", b"cert-1", Some(b"ca-1"))] {
            let b = for_context(other.clone()).unwrap();
            assert!(!Arc::ptr_eq(&a, &b), "{other:?}");
            assert!(!Arc::ptr_eq(&a.ticketer, &b.ticketer));
        }
        let ca1 = for_context(context("internal", b"cert", Some(b"ca-1"))).unwrap();
        let ca2 = for_context(context("internal", b"cert", Some(b"ca-2"))).unwrap();
        assert!(!Arc::ptr_eq(&ca1, &ca2), "a new client_ca rotates the keys");
    }

    #[test]
    fn parts_cannot_run_into_each_other() {
        let mut ab = Context::of("s");
        ab.part(b"cert", b"ab");
        ab.part(b"cert", b"c");
        let mut a_bc = Context::of("s");
        a_bc.part(b"cert", b"a");
        a_bc.part(b"cert", b"bc");
        assert_ne!(ab, a_bc);
    }

    #[test]
    fn a_context_no_one_holds_is_forgotten() {
        let c = context("gone", b"cert", None);
        let first = for_context(c.clone()).unwrap();
        let ticketer = Arc::downgrade(&first.ticketer);
        drop(first);
        // Any later lookup prunes it; the keys themselves are freed with the last holder.
        let _other = for_context(context("prune", b"x", None)).unwrap();
        assert!(ticketer.upgrade().is_none());
        assert!(!registry().lock().unwrap().contains_key(&c));
    }
}
