//! ACME (RFC 8555): certificates a service obtains and renews by itself.
//!
//! `store` is where the state lives (on disk: `disk`, or in etcd for a fleet), behind one
//! trait; `manager::store_for` chooses it. `slot` is what handshakes are served from, shared by
//! every generation, so a certificate issued or renewed serves at once; it also answers the
//! CA's validators (tls-alpn-01 in the handshake, http-01 on the plain-HTTP services).
//! `manager` runs one orderer per certificate, `order` is one order against the CA through
//! `client`, and `renew` says when to renew and when to try again.

mod client;
pub mod disk;
pub mod manager;
mod order;
mod renew;
pub mod slot;
pub mod store;

pub use manager::{Manager, store_for};
pub use slot::{ACME_TLS_ALPN, Slot, answering, http01, slots, tls_alpn01};
