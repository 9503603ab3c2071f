//! One kernel-mode service's controller: a task that keeps the service's table what its servers'
//! state says, and reads the kernel's counters back into that state.
//!
//! Every slot (`[service.passive] slot`) it reads the counters (`nft -j list counters`), adds
//! what each server's counters moved since the last read to the server's `Measure` (so the stats,
//! `/metrics` and the dashboard show N_S and N_A as they do for a proxied service), and advances
//! the pool's balancers on the slot's clock (`Balancer::advance`: `passive-ratio`'s control step
//! over the same windows and arithmetic as when it picks). Then, and whenever a server of the
//! service changes (the events its balancers hear) or a config is applied, it works out what the
//! table should hold (`plan`) and writes it when that differs from what it last wrote.
//!
//! `nft` runs as a child process on this task, never on a thread that moves traffic (none of the
//! service's does: the kernel moves it). A write or a read that fails is said once, and tried
//! again at the next slot; a table someone removed is made again.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::nft::{self, NftError, Ruleset, counter_names, table_name};
use super::plan;
use crate::balance::events::{Listener, Subscribers};
use crate::live::{Live, Service};

/// A running controller, as `Kernel` holds it.
pub(super) struct Controller {
    stop: CancellationToken,
    wake: Arc<Wake>,
    task: JoinHandle<()>,
}

impl Controller {
    /// Starts the controller of `name`, whose table holds `written` (its first write, made by
    /// `Kernel::follow`), or whatever an earlier process left when that write failed.
    pub(super) fn spawn(name: &str, live: Weak<Live>, written: Option<Ruleset>, slot: Duration) -> Controller {
        let stop = CancellationToken::new();
        let wake = Arc::new(Wake(Notify::new()));
        let made = written.iter().flat_map(counters_of).collect();
        let state = Loop { name: name.to_string(), table: table_name(name), live, wake: wake.clone(), hub: None, written, made, last: HashMap::new(), failing: None };
        let task = tokio::spawn(state.run(stop.clone(), slot));
        Controller { stop, wake, task }
    }

    /// Looks at the service again now (a config was applied).
    pub(super) fn wake(&self) {
        self.wake.0.notify_one();
    }

    /// Stops the loop, waiting for a write it is making to end; the table stays.
    pub(super) async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Hears every change of the service's servers and wakes the loop.
struct Wake(Notify);

impl Listener for Wake {
    fn server_changed(&self) {
        self.0.notify_one();
    }
}

struct Loop {
    name: String,
    table: String,
    live: Weak<Live>,
    wake: Arc<Wake>,
    /// The event hub it is subscribed to.
    hub: Option<Arc<Subscribers>>,
    /// What the table holds as last written; `None` until a write succeeds (the next one then
    /// replaces the table whole).
    written: Option<Ruleset>,
    /// The counters the table holds.
    made: BTreeSet<String>,
    /// Each counter's packets at the last read.
    last: HashMap<String, u64>,
    /// The last failure said, so a failure that lasts is said once.
    failing: Option<String>,
}

impl Loop {
    async fn run(mut self, stop: CancellationToken, mut slot: Duration) {
        let mut tick = every(slot);
        loop {
            let at = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                at = tick.tick() => Some(at.into_std()),
                _ = self.wake.0.notified() => None,
            };
            // The generation as it is now, whichever woke the loop.
            let Some(service) = self.service() else { continue };
            self.subscribe(&service);
            if let Some(at) = at {
                self.count(&service, at).await;
            }
            self.write(&service).await;
            if service.pool.config.passive.slot != slot {
                slot = service.pool.config.passive.slot;
                tick = every(slot);
            }
        }
    }

    /// The service in the current generation, while it is an enabled kernel-mode one.
    fn service(&self) -> Option<Arc<Service>> {
        let generation = self.live.upgrade()?.current();
        generation.services.iter().find(|s| s.config().name == self.name && s.config().in_kernel()).cloned()
    }

    /// Hears the service's server events (its hub is the same across generations, unless the
    /// service was made anew).
    fn subscribe(&mut self, service: &Service) {
        let hub = &service.pool.state.events;
        if self.hub.as_ref().is_none_or(|h| !Arc::ptr_eq(h, hub)) {
            hub.subscribe(&self.wake);
            self.hub = Some(hub.clone());
        }
    }

    /// Reads the counters into the servers' measures, then steps the balancers to `at`.
    async fn count(&mut self, service: &Service, at: Instant) {
        match nft::counters(&self.table).await {
            Ok(counts) => {
                let mut seen = HashSet::new();
                for e in service.pool.servers() {
                    let SocketAddr::V4(addr) = e.addr else { continue };
                    if seen.insert(addr) {
                        let (syn, synack) = counter_names(addr);
                        e.state.measure.record_counted(self.moved(&syn, &counts), self.moved(&synack, &counts));
                    }
                }
                self.last.retain(|name, _| counts.contains_key(name));
            }
            Err(e) => {
                if e.no_table() {
                    // Removed by someone else: the next write makes it whole again.
                    self.written = None;
                }
                self.failed("cannot read its counters", &e);
            }
        }
        service.pool.primary.advance(at);
        service.pool.backup.advance(at);
    }

    /// How far counter `name` moved since the last read: all of it when it went back (the table
    /// was made again).
    fn moved(&mut self, name: &str, counts: &BTreeMap<String, u64>) -> u64 {
        let Some(&now) = counts.get(name) else { return 0 };
        let was = self.last.insert(name.to_string(), now).unwrap_or(0);
        now.checked_sub(was).unwrap_or(now)
    }

    /// Writes what the table should hold, when it differs from what it holds.
    async fn write(&mut self, service: &Service) {
        let Some(wanted) = plan::of_service(service) else { return };
        if self.written.as_ref() == Some(&wanted) {
            return;
        }
        let keep: BTreeSet<String> = counters_of(&wanted).collect();
        let text = match &self.written {
            Some(_) => wanted.write(&self.made.difference(&keep).cloned().collect::<Vec<_>>()),
            None => wanted.fresh(),
        };
        match nft::apply(&text, false).await {
            Ok(()) => {
                let moved = self.written.as_ref().is_none_or(|w| w.targets != wanted.targets);
                let shares = describe(&wanted);
                if moved {
                    info!(service = %self.name, table = %self.table, "kernel map: {shares}");
                } else {
                    debug!(service = %self.name, table = %self.table, "kernel map: {shares}");
                }
                if self.failing.take().is_some() {
                    info!(service = %self.name, table = %self.table, "nft works again");
                }
                self.made = keep;
                self.written = Some(wanted);
            }
            Err(e) => {
                self.written = None;
                self.failed("cannot write its table", &e);
            }
        }
    }

    /// Says a failure, unless it is the one said last.
    fn failed(&mut self, doing: &str, e: &NftError) {
        let said = format!("{doing}: {e}");
        if self.failing.as_deref() != Some(said.as_str()) {
            warn!(service = %self.name, table = %self.table, "{said}; trying again every slot");
            self.failing = Some(said);
        }
    }
}

/// A slot clock whose ticks stay on their grid after a late one, so the balancer's steps are a
/// whole number of slots apart.
fn every(slot: Duration) -> Interval {
    let mut tick = tokio::time::interval(slot);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    tick
}

fn counters_of(r: &Ruleset) -> impl Iterator<Item = String> + '_ {
    r.counted.iter().flat_map(|&s| {
        let (syn, synack) = counter_names(s);
        [syn, synack]
    })
}

/// "10.0.1.2:8080 50.0%, 10.0.1.3:8080 50.0%", or that new connections are dropped.
fn describe(r: &Ruleset) -> String {
    if r.split.is_empty() {
        return "no usable server, new connections are dropped".to_string();
    }
    let counts = r.split.counts(r.targets.len());
    let shares: Vec<String> = r.targets.iter().zip(counts).map(|(t, n)| format!("{t} {:.1}%", f64::from(n) * 100.0 / f64::from(r.split.modulus.max(1)))).collect();
    format!("{} ({})", shares.join(", "), r.split.draw.as_str())
}
