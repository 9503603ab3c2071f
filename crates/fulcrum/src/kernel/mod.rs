//! `mode = "kernel"`: Fulcrum as the controller of a kernel balancer instead of a proxy, the
//! setup of the passive-measurement paper (SYNs and SYN-ACKs counted passively at a kernel
//! balancer, the traffic split set with iptables' `statistic`), on nftables.
//!
//! The service's virtual address (its `listen`) is served by nftables: a new connection to it is
//! DNATed to a server drawn by `numgen` from a map (`split`), in the prerouting hook (clients the
//! host forwards) and the output hook (clients on the host), and the kernel forwards its packets
//! both ways; Fulcrum binds nothing and sees no byte of it. What Fulcrum keeps doing is what a
//! controller does: its health checks run as for any service (`health`), a server that is down,
//! disabled or draining leaves the map, the kernel's per-server counts of SYNs and SYN-ACKs come
//! back into the servers' state every slot, `passive-ratio` moves the ratios from them, and each
//! change is one atomic rewrite of the service's table (`nft`). Established connections keep
//! their server through conntrack whatever the map says, across rewrites, reloads and
//! Fulcrum's own restart or stop.
//!
//! Each service has one table, `ip fulcrum_<service>`, and nothing else on the host is touched.
//! It is made when the service starts (replacing one an earlier process left), and removed when a
//! reload drops or disables the service and when Fulcrum stops; after a binary upgrade the new
//! process owns it, so the old one leaves it. IPv4 and TCP only.
//!
//! # Layout
//! - `split`: shares to a `numgen` map's ranges (random draw, or smooth weighted turns).
//! - `nft`: the table's text, the counters' JSON, and `nft` run as a child process.
//! - `plan`: what a service's table should hold now, from its pool's live state.
//! - `controller`: the task per service that counts, steps and writes.

mod controller;
pub mod nft;
pub mod plan;
pub mod split;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tracing::{info, warn};

use crate::config::Config;
use crate::live::{Live, Service};
use crate::mode::Mode;
use controller::Controller;
pub use nft::NftError;

/// A kernel-mode service whose table could not be written.
#[derive(Debug, thiserror::Error)]
#[error("service {service} (mode = \"kernel\"): {cause}")]
pub struct KernelError {
    pub service: String,
    pub cause: NftError,
}

/// The controllers of the kernel-mode services, by service name.
#[derive(Default)]
pub struct Kernel {
    running: tokio::sync::Mutex<HashMap<String, Controller>>,
    /// How many run, for a look that must not wait (`/ready`).
    count: AtomicUsize,
}

impl Kernel {
    /// At start, once the first health round is in: writes every kernel-mode service's table.
    /// The first that cannot be written is the start's error, and the tables written before it
    /// are removed again.
    pub async fn start(&self, live: &Arc<Live>) -> Result<(), KernelError> {
        if let Some(failed) = self.follow(live).await.into_iter().next() {
            self.stop(true).await;
            return Err(failed);
        }
        Ok(())
    }

    /// After a generation is swapped in: stops the controllers of services it no longer has as
    /// enabled kernel-mode ones and removes their tables, wakes the others to write what it
    /// changed, and starts one for each new service with its table written. Returns the new
    /// services whose table could not be written (their controllers try again every slot).
    pub async fn follow(&self, live: &Arc<Live>) -> Vec<KernelError> {
        let generation = live.current();
        let wanted: HashMap<&str, &Arc<Service>> = generation.services.iter().filter(|s| s.config().in_kernel()).map(|s| (s.config().name.as_str(), s)).collect();
        let mut running = self.running.lock().await;
        // Gone first: a renamed service's old table leaves before its new one comes.
        let gone: Vec<String> = running.keys().filter(|name| !wanted.contains_key(name.as_str())).cloned().collect();
        for name in gone {
            if let Some(c) = running.remove(&name) {
                retire(&name, c, true).await;
            }
        }
        let mut failed = Vec::new();
        for (name, service) in wanted {
            if let Some(c) = running.get(name) {
                c.wake();
                continue;
            }
            let first = plan::of_service(service);
            let written = match &first {
                Some(r) => match nft::apply(&r.fresh(), false).await {
                    Ok(()) => {
                        info!(service = name, table = %r.table, vip = %r.vip, "serving the virtual address from nftables");
                        first
                    }
                    Err(cause) => {
                        warn!(service = name, "cannot write its nftables table: {cause}");
                        failed.push(KernelError { service: name.to_string(), cause });
                        None
                    }
                },
                None => None,
            };
            running.insert(name.to_string(), Controller::spawn(name, Arc::downgrade(live), written, service.pool.config.passive.slot));
        }
        self.count.store(running.len(), Relaxed);
        failed
    }

    /// At shutdown: stops every controller, and with `remove` removes its table (not after an
    /// upgrade, when the new process serves from it).
    pub async fn stop(&self, remove: bool) {
        let mut running = self.running.lock().await;
        for (name, c) in running.drain() {
            retire(&name, c, remove).await;
        }
        self.count.store(0, Relaxed);
    }

    /// Whether any kernel-mode service is served.
    pub fn serving(&self) -> bool {
        self.count.load(Relaxed) > 0
    }
}

/// Stops a controller and, with `remove`, its table.
async fn retire(name: &str, controller: Controller, remove: bool) {
    controller.stop().await;
    if !remove {
        return;
    }
    let table = nft::table_name(name);
    match nft::apply(&nft::remove(&table), false).await {
        Ok(()) => info!(service = name, %table, "removed its nftables table"),
        Err(e) => warn!(service = name, %table, "cannot remove its nftables table: {e}"),
    }
}

/// What `fulcrum check` can know of this host for `config`'s kernel-mode services: each one's
/// first table is put to `nft --check` (nothing is changed, but nft must run and may ask the
/// kernel: CAP_NET_ADMIN). Errors, then notes.
pub async fn check(config: &Config) -> (Vec<String>, Vec<String>) {
    let (mut errors, mut notes) = (Vec::new(), Vec::new());
    for service in config.services.iter().filter(|s| s.in_kernel()) {
        let checked = match plan::of_config(service) {
            Ok(r) => nft::apply(&r.fresh(), true).await.map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            errors.push(format!("service {} (mode = \"kernel\"): {e}", service.name));
        }
    }
    notes.extend(forwarding(config));
    (errors, notes)
}

/// A word when `config` has a kernel-mode service and this host does not forward IPv4: clients
/// on the host itself are served, clients elsewhere are not (their packets are never routed on
/// to the servers).
pub fn forwarding(config: &Config) -> Option<String> {
    if !config.services.iter().any(|s| s.mode == Mode::Kernel) {
        return None;
    }
    let on = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok()?;
    (on.trim() == "0").then(|| {
        "net.ipv4.ip_forward is 0: mode = \"kernel\" serves clients on this host only; set it to 1 (sysctl -w net.ipv4.ip_forward=1) to serve forwarded clients".to_string()
    })
}
