//! Server host names and SRV names, resolved again every `resolve_interval`.
//!
//! A generation resolves each server's host name once, when it is built. A name whose address
//! moves (a cloud instance replaced, a DNS failover) would keep its old address until the next
//! reload, so this task asks the system's resolver again on a blocking thread, never on the
//! traffic's. When any server's first address differs from the one running, the running config
//! is applied again, resolving anew the names that moved (and only those: `live::Refresh`);
//! server state is kept by configured address, so counters and health carry over. Names whose lookup fails keep their address (a resolver
//! outage must not take servers away) and are logged once per change of outcome.
//!
//! A service's `srv` name is asked again the same way ([`crate::dns`]); a change of the servers
//! its records name (added, gone, another weight or address) applies the config again too.
//!
//! TTLs are the system resolver's to honour (nscd, systemd-resolved or the upstream's cache):
//! Fulcrum keeps no cache of its own and asks no more often than every `resolve_interval`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Weak;
use std::time::Duration;

use tracing::{info, warn};

use super::App;
use crate::config;
use crate::dns::SrvServer;

/// Re-resolves until the app is gone or stops; the interval is read from the running config
/// each round, so a reload that changes it takes effect at the next round.
pub async fn run(app: Weak<App>) {
    let mut failing: HashMap<String, String> = HashMap::new();
    loop {
        let interval = match app.upgrade() {
            Some(a) if !a.shutdown.stopping().is_cancelled() => a.live.current().config.resolve_interval,
            _ => return,
        };
        tokio::time::sleep(if interval.is_zero() { Duration::from_secs(1) } else { interval }).await;
        let Some(app) = app.upgrade() else { return };
        if interval.is_zero() || app.shutdown.stopping().is_cancelled() {
            continue;
        }
        let generation = app.live.current();
        // (configured address, the address running now) of every server named by host name.
        let named: Vec<(String, SocketAddr)> = generation
            .pools()
            .flat_map(|(_, p)| {
                p.servers()
                    .filter(|e| !is_ip(&e.state.key.address) && p.config.servers.iter().any(|s| s.address == e.state.key.address))
                    .map(|e| (e.state.key.address.clone(), e.addr))
                    .collect::<Vec<_>>()
            })
            .collect();
        // Per service with `srv`: its name, and the servers its records gave (those not configured).
        let srv: Vec<(String, String, Vec<SrvServer>)> =
            generation.services.iter().filter_map(|s| Some((s.config().name.clone(), s.config().srv.clone()?, s.from_srv()))).collect();
        if named.is_empty() && srv.is_empty() {
            continue;
        }
        let dns = generation.config.dns.clone();
        let asked = tokio::task::spawn_blocking(move || {
            let hosts = named.into_iter().map(|(address, running)| (config::resolve_address(&address).map_err(|e| e.to_string()), address, running)).collect::<Vec<_>>();
            let records = srv.into_iter().map(|(service, name, running)| (crate::dns::srv(&name, dns.as_ref()), service, name, running)).collect::<Vec<_>>();
            (hosts, records)
        })
        .await;
        let Ok((lookups, records)) = asked else { continue };
        let mut moved = Vec::new();
        let mut refresh = crate::live::Refresh::default();
        for (found, service, name, mut running) in records {
            match found {
                Ok(mut now) => {
                    if failing.remove(&name).is_some() {
                        info!(service = %service, srv = %name, "SRV answers again");
                    }
                    now.sort_by(|a, b| a.address.cmp(&b.address));
                    running.sort_by(|a, b| a.address.cmp(&b.address));
                    if now != running {
                        moved.push(format!("{service}: SRV {name} now names {}", now.iter().map(|s| s.address.as_str()).collect::<Vec<_>>().join(", ")));
                        refresh.srv.insert(service.clone());
                    }
                }
                Err(e) => {
                    let said = e.to_string();
                    if failing.insert(name.clone(), said.clone()).as_ref() != Some(&said) {
                        warn!(service = %service, "{said}; keeping the servers it named");
                    }
                }
            }
        }
        for (found, address, running) in lookups {
            match found {
                Ok(now) => {
                    if failing.remove(&address).is_some() {
                        info!(server = %address, "resolves again");
                    }
                    if now != running {
                        moved.push(format!("{address}: {running} -> {now}"));
                        refresh.addresses.insert(address.clone());
                    }
                }
                Err(e) => {
                    if failing.insert(address.clone(), e.clone()).as_ref() != Some(&e) {
                        warn!(server = %address, "cannot resolve, keeping {running}: {e}");
                    }
                }
            }
        }
        if moved.is_empty() {
            continue;
        }
        moved.dedup();
        info!("server addresses changed in DNS ({}); applying the config again", moved.join("; "));
        if let Err(e) = app.apply_refreshing(generation.config.clone(), refresh).await {
            warn!("the config with the new addresses was not applied: {e}");
        }
    }
}

fn is_ip(address: &str) -> bool {
    address.parse::<SocketAddr>().is_ok()
}
