//! The fast tier: logic-level tests of the whole data path with Fulcrum and its real servers in
//! this process (`support::fast`). `cargo test --release -p fulcrum --test fast` runs it alone.

#[path = "../support/mod.rs"]
mod support;

mod balancing;
mod queueing;
