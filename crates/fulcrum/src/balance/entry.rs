//! What an algorithm's file says of it ([`Registered`]): its name, the modes it serves, whether
//! it hashes, a line on how it picks, and how to make one for a pool. `algorithm.rs` lists the
//! entries; this file is apart from it so the algorithms and the list each import it, not each
//! other.

use std::time::Duration;

use serde::Serialize;

use super::Balancer;
use crate::mode::Mode;

/// What an algorithm is, as `GET /api/algorithms` says it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct About {
    /// Its name in the config.
    pub name: &'static str,
    /// Its name for people (the dashboard's lists).
    pub title: &'static str,
    /// The service modes it serves.
    pub modes: &'static [Mode],
    /// It maps a key (client address, path, header) to a server through a table.
    pub hashes: bool,
    pub description: &'static str,
}

/// An algorithm's entry: what it is, and its balancer for a pool (given the pool's tuning of the
/// passive controller, which only `passive-ratio` reads).
pub struct Registered {
    pub about: About,
    pub build: fn(&Tuning) -> Box<dyn Balancer>,
}

/// Every mode, the kernel's too: an algorithm whose picks are a weighted draw or rotation that
/// nftables' `numgen` can make itself (`kernel::split`).
pub const EVERY_MODE: &[Mode] = &[Mode::Tcp, Mode::Http, Mode::Ftp, Mode::Kernel];
/// The modes whose connections pass through Fulcrum: an algorithm that reads something of each
/// connection (its client, the servers' connections in flight, connect times) needs one.
pub const PROXIED: &[Mode] = &[Mode::Tcp, Mode::Http, Mode::Ftp];
pub const HTTP: &[Mode] = &[Mode::Http];

/// Tuning of the passive controller (`[service.passive]`), the one algorithm setting a pool's
/// config gives its balancer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Delta: the share of its ratio the worst server gives up per step (the paper: 0.1).
    pub delta: f64,
    /// T: the length of one counter slot, and the control period.
    pub slot: Duration,
    /// m: slots in the sliding window.
    pub window_slots: usize,
    /// SYNs a window needs before its R is trusted.
    pub min_samples: u64,
}
