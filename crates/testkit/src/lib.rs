//! The one harness that starts processes for Fulcrum's integration tests, the lab and the soak:
//! a child that is killed and reaped when its handle drops ([`Proc`]), the real server
//! (`fulcrum backend`, [`Backend`]), Fulcrum itself ([`start_fulcrum`]), loopback ports that are
//! free ([`free_port`]) and what `/proc` and the kernel say a process used ([`Usage`]).
//!
//! Errors are `anyhow` with the child's log attached where there is one; the tests turn them
//! into panics, the lab into a failed run.
// Waiting on real processes is in real time: the clocks are read here, not through a paused one.
#![allow(clippy::disallowed_methods)]

mod backend;
mod net;
mod process;
mod usage;

pub use backend::Backend;
pub use net::{accepts, free_addr, free_port, listens, listens_for};
pub use process::{Proc, start_fulcrum, wait_for};
pub use usage::{Usage, cpu_secs_now, has_children, tree_usages};
