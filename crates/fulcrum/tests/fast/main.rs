//! The fast tier: logic-level tests of the whole data path with Fulcrum and its real servers in
//! this process (`support::fast`). `cargo test -p fulcrum --test fast` runs it alone; it also replays the fuzz corpora.
// Tests wait on real processes and sockets in real time; the balancer's own clock reads stay in
// `fulcrum::clock` (clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod balancing;
mod fuzz_corpora;
mod queueing;
