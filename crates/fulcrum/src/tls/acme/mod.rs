//! ACME (RFC 8555): certificates a service obtains and renews by itself.
//!
//! `store` is where the state lives (on disk, or in etcd for a fleet).

pub mod store;
