//! The browser tier: the dashboard driven in the system's Chromium by playwright-core
//! (`tests/browser/*.mjs`, installed by scripts/test), against a real Fulcrum.
// Tests wait on real processes and sockets in real time; the balancer's own clock reads stay in
// `fulcrum::clock` (clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod checks;
mod dashboard;
mod front_door;
mod http3;
mod protection;
mod shared_pools;
mod websocket;
