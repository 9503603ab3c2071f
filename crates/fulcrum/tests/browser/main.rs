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

/// Runs `tests/browser/{script}` with node and `env`, and asserts it exited well saying "all
/// checks passed" (its output and errors otherwise).
fn run_script(script: &str, env: &[(&str, String)]) {
    let out = std::process::Command::new("node")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser").join(script))
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("all checks passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}
