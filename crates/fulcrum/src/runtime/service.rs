//! A service of one generation: its config, its pools of servers and their balancers.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::sync::Notify;

use crate::balance::events::{Listener, Subscribers};
use crate::balance::{self, Balancer, Pick, ServerView};
use crate::config;

use super::rate::Rate;
use super::server::ServerEntry;

/// Servers of one role (primary or backup) with the balancer that picks among them.
pub struct ServerPool {
    pub servers: Vec<Arc<ServerEntry>>,
    /// Shared with the service's event hub by a weak reference, so the balancer hears of every
    /// server change for as long as this generation lives and no longer.
    picker: Arc<Picker>,
}

/// A balancer with the view it picks over: what the event hub tells of a change.
struct Picker {
    view: Servers,
    balancer: Box<dyn Balancer>,
}

/// The live state of a pool's servers, as its balancer sees it.
struct Servers(Vec<Arc<ServerEntry>>);

impl ServerPool {
    pub fn new(servers: Vec<Arc<ServerEntry>>, service: &config::Service, events: &Subscribers) -> Self {
        let p = &service.passive;
        let tuning = balance::passive_ratio::Tuning { delta: p.delta, slot: p.slot, window_slots: p.window_slots, min_samples: p.min_samples };
        let picker = Arc::new(Picker { view: Servers(servers.clone()), balancer: balance::build(service.algorithm, tuning) });
        // Subscribed before the first update, so a change that lands between the two is heard.
        events.subscribe(&picker);
        picker.server_changed();
        ServerPool { servers, picker }
    }

    /// What the algorithm measures of server `i`, for stats.
    pub fn metrics(&self, i: usize) -> Option<balance::AlgorithmMetrics> {
        self.picker.balancer.metrics(i)
    }

    pub fn pick(&self, client: IpAddr, hash: Option<u64>, avoid: &[usize]) -> Option<usize> {
        self.picker.balancer.pick(&Pick { client, avoid, hash }, &self.picker.view)
    }
}

impl Listener for Picker {
    fn server_changed(&self) {
        self.balancer.update(&self.view);
    }
}

impl ServerView for Servers {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn weight(&self, i: usize) -> u32 {
        self.0[i].state.weight()
    }
    fn effective_weight(&self, i: usize) -> u32 {
        self.0[i].state.effective_weight()
    }
    fn active(&self, i: usize) -> u64 {
        self.0[i].state.counters.current.load(Relaxed)
    }
    fn key(&self, i: usize) -> &str {
        &self.0[i].state.key.address
    }
    fn sample(&self, i: usize) -> balance::load::Sample {
        self.0[i].state.measure.sample()
    }
}

/// Which pool a pick came from, so a retry avoids the right index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Backup,
}

/// Servers a connection already failed on, per role.
#[derive(Debug, Default, Clone)]
pub struct Avoid {
    primary: Vec<usize>,
    backup: Vec<usize>,
}

impl Avoid {
    pub fn add(&mut self, role: Role, i: usize) {
        match role {
            Role::Primary => self.primary.push(i),
            Role::Backup => self.backup.push(i),
        }
    }
}

/// Per-service state that outlives generations: the balancers' event hub and the service's counters.
#[derive(Debug, Default)]
pub struct ServiceState {
    /// The balancers of the service's live generations, told of every server state or weight
    /// change (`ServerState::bump`).
    pub events: Arc<Subscribers>,
    pub current: AtomicU64,
    pub max: AtomicU64,
    pub total: AtomicU64,
    /// Clients closed because no server could take them.
    pub refused: AtomicU64,
    /// Connects that failed on one server and were tried on another.
    pub redispatches: AtomicU64,
    /// Connections (HTTP: requests) waiting for a place on a server at its `maxconn`.
    pub queue: AtomicU64,
    /// The most clients seen waiting, in the queue and in the accept backlog together.
    pub queue_max: AtomicU64,
    /// Clients waiting in the kernel's accept queue while the service is at `maxconn`; read from
    /// the listening socket's TCP_INFO while the accept loop is paused.
    pub backlog: AtomicU64,
    pub rate: Rate,
    /// Signalled when a place on a server of the service frees, so a queued client can go.
    pub released: Notify,
    /// FTP: where the search for a free data port starts next.
    pub data_port_cursor: std::sync::atomic::AtomicU32,
    /// Signalled when a connection ends, so an accept loop paused at `maxconn` resumes.
    pub freed: Notify,
}

impl ServiceState {
    pub fn open(self: &Arc<Self>) -> ServiceGuard {
        let now = self.current.fetch_add(1, Relaxed) + 1;
        self.max.fetch_max(now, Relaxed);
        self.total.fetch_add(1, Relaxed);
        self.rate.tick(super::unix_ms() / 1000);
        ServiceGuard(self.clone())
    }
}

/// Held for the life of one client connection of a service.
pub struct ServiceGuard(Arc<ServiceState>);

impl Drop for ServiceGuard {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Relaxed);
        self.0.freed.notify_one();
    }
}

pub struct Service {
    pub config: config::Service,
    pub state: Arc<ServiceState>,
    pub listen: SocketAddr,
    pub primary: ServerPool,
    pub backup: ServerPool,
    /// HTTP mode: the service's pools, in config order, each running as a service of its own.
    pub pools: Vec<Arc<Service>>,
}

impl Service {
    /// A pool of this service by its name in the config.
    pub fn pool(&self, name: &str) -> Option<&Arc<Service>> {
        self.config.pools.iter().position(|p| p.name == name).and_then(|i| self.pools.get(i))
    }
}

impl Service {
    /// Picks a primary server, or a backup while no primary is usable.
    pub fn pick(&self, client: IpAddr, hash: Option<u64>, avoid: &Avoid) -> Option<(Role, Arc<ServerEntry>, usize)> {
        if let Some(i) = self.primary.pick(client, hash, &avoid.primary) {
            return Some((Role::Primary, self.primary.servers[i].clone(), i));
        }
        let i = self.backup.pick(client, hash, &avoid.backup)?;
        Some((Role::Backup, self.backup.servers[i].clone(), i))
    }

    /// The usable server named `id` (the `cookie` algorithm's affinity), with its place.
    pub fn by_id(&self, id: &str, avoid: &Avoid) -> Option<(Role, Arc<ServerEntry>, usize)> {
        let usable = |e: &Arc<ServerEntry>| e.id == id && e.state.effective_weight() > 0;
        if let Some(i) = self.primary.servers.iter().position(usable).filter(|i| !avoid.primary.contains(i)) {
            return Some((Role::Primary, self.primary.servers[i].clone(), i));
        }
        let i = self.backup.servers.iter().position(usable).filter(|i| !avoid.backup.contains(i))?;
        Some((Role::Backup, self.backup.servers[i].clone(), i))
    }

    /// Whether any server not in `avoid` takes traffic now (full or not).
    pub fn any_usable(&self, avoid: &Avoid) -> bool {
        let ok = |(i, e): (usize, &Arc<ServerEntry>), skip: &[usize]| e.state.effective_weight() > 0 && !skip.contains(&i);
        self.primary.servers.iter().enumerate().any(|x| ok(x, &avoid.primary)) || self.backup.servers.iter().enumerate().any(|x| ok(x, &avoid.backup))
    }

    /// `avoid` plus every server at its `maxconn`: what a pick must skip now.
    pub fn avoid_full(&self, avoid: &Avoid) -> Avoid {
        let mut busy = avoid.clone();
        let full = |e: &Arc<ServerEntry>| e.maxconn > 0 && e.state.counters.current.load(Relaxed) >= u64::from(e.maxconn);
        busy.primary.extend(self.primary.servers.iter().enumerate().filter(|(_, e)| full(e)).map(|(i, _)| i));
        busy.backup.extend(self.backup.servers.iter().enumerate().filter(|(_, e)| full(e)).map(|(i, _)| i));
        busy
    }

    /// Every server of the service, primaries first.
    pub fn servers(&self) -> impl Iterator<Item = &Arc<ServerEntry>> {
        self.primary.servers.iter().chain(self.backup.servers.iter())
    }
}
