//! Where ACME's state lives: the account, the certificates with their keys, the answers to
//! pending challenges, and the lock that lets one instance order a name at a time. On disk for a
//! standalone instance (`DiskStore`, a directory the operator names, files 0600), in etcd for a
//! fleet (`fleet::acme`), behind one trait so the orderer is the same code for both.
//!
//! The orderer holds `lock(name)` for the whole of an order: in a fleet the lock is an etcd
//! lease, so an instance killed mid-order loses it within the lease's TTL and another instance
//! takes the name over. Challenges are stored before the CA is told they are ready, so whichever
//! instance the CA's validator reaches can answer them (`challenge`). `changes` wakes every
//! instance when a certificate lands, so all serve it within a second.

use std::future::Future;
use std::pin::Pin;

/// What a store's calls return: a boxed future, so the trait can be used as `dyn Store`.
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A store that could not be read or written, and why (a path or an etcd error, in words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// A certificate as issued: the chain and its key, PEM, as the CA and the orderer wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub chain_pem: String,
    pub key_pem: String,
}

/// A challenge's answer, by what the CA's validator asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Challenge {
    /// `http-01`: `GET /.well-known/acme-challenge/{token}` answers the key authorization.
    Http01 { token: String },
    /// `tls-alpn-01`: a handshake with ALPN `acme-tls/1` for `domain` gets the challenge
    /// certificate (stored as `Stored`'s PEM, chain then key, in the value).
    TlsAlpn01 { domain: String },
}

/// Held while an order runs; dropping it releases the lock (in etcd: revokes the lease).
pub trait Held: Send + Sync {
    /// Cancelled if the lock is lost while held (in a fleet: its lease could not be renewed, so
    /// another instance may take the name over): the order stops there rather than run beside
    /// another's. A lock that cannot be lost (on disk) is never cancelled.
    fn lost(&self) -> tokio_util::sync::CancellationToken {
        tokio_util::sync::CancellationToken::new()
    }
}

/// The state of ACME, standalone or for a fleet. `key` names a certificate: `certificate_key`
/// of its names.
pub trait Store: Send + Sync {
    /// The account's credentials (instant-acme's `AccountCredentials` as JSON) for `directory`.
    fn account<'a>(&'a self, directory: &'a str) -> Fut<'a, Option<Vec<u8>>>;
    fn save_account<'a>(&'a self, directory: &'a str, credentials: &'a [u8]) -> Fut<'a, ()>;

    fn certificate<'a>(&'a self, key: &'a str) -> Fut<'a, Option<Stored>>;
    fn save_certificate<'a>(&'a self, key: &'a str, cert: &'a Stored) -> Fut<'a, ()>;

    /// Waits until this instance holds the order lock of `key`, and returns it held.
    fn lock<'a>(&'a self, key: &'a str) -> Fut<'a, Box<dyn Held>>;

    fn put_challenge<'a>(&'a self, challenge: &'a Challenge, answer: &'a [u8]) -> Fut<'a, ()>;
    /// How long an answer just put takes to reach every instance the CA's validator may reach,
    /// which the orderer waits before it asks the CA to validate: zero where this instance
    /// answers alone; in a fleet, the others learn it by their watch.
    fn settle(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// The stored answer, looked up when a validator asks (an HTTP request or a handshake):
    /// from memory where the store can (etcd's are followed by a watch), never a slow read on
    /// the traffic's threads.
    fn challenge(&self, challenge: &Challenge) -> Option<Vec<u8>>;
    fn remove_challenge<'a>(&'a self, challenge: &'a Challenge) -> Fut<'a, ()>;

    /// Ticks whenever a certificate is saved, by this instance or (in a fleet) another: the
    /// receiver then reads the certificates it serves again.
    fn changes(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Whether validators' requests are to be answered from this store now. A store the
    /// config's certificates use always is; a fleet's, which an instance follows from its
    /// start so that it answers the challenges another instance ordered even before it runs
    /// that config itself, only once the fleet uses ACME at all: until then the plain-HTTP
    /// services leave `/.well-known/acme-challenge/` to their routes.
    fn answering(&self) -> bool {
        true
    }
}

/// The store's name of the certificate for `names`: sorted, lower case, joined by `,`, with a
/// wildcard's `*` as `_` (a file name and an etcd key alike).
pub fn certificate_key(names: &[String]) -> String {
    let mut names: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase().replace('*', "_")).collect();
    names.sort();
    names.dedup();
    names.join(",")
}
