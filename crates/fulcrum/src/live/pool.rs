//! A pool of one generation: a group of servers with its algorithm and health, the primaries and
//! the backups used only while no primary is usable, each tier with the balancer that picks in
//! it. A service's own servers are its default pool; HTTP routes pick among its routed pools.
//! Every mode dispatches to a pool (`proxy::dispatch`). A shared pool (`[[pool]]`) is one pool
//! of the generation; each service that uses it dispatches through a view of it ([`Pool::view`]):
//! the same tiers, balancers, servers and counters, with the service's way of connecting.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::balance::events::{Listener, Subscribers};
use crate::balance::{self, Balancer, Pick, ServerView};
use crate::config;

use super::server::ServerEntry;
use super::service_state::ServiceState;

/// The servers of one role (primary or backup) with the balancer that picks among them.
pub struct Tier {
    pub servers: Vec<Arc<ServerEntry>>,
    /// Shared with the service's event hub by a weak reference, so the balancer hears of every
    /// server change for as long as this generation lives and no longer.
    picker: Arc<Picker>,
    /// The servers with a `maxconn`: the only ones a pick may find full, so a pick in a large
    /// pool without limits reads none.
    limited: Vec<u32>,
    /// The servers in order of their ids (equal ids in config order): the `cookie` algorithm's
    /// lookup by id is a binary search.
    by_id: Vec<u32>,
}

/// A balancer with the view it picks over: what the event hub tells of a change.
struct Picker {
    view: Servers,
    balancer: Box<dyn Balancer>,
}

/// The live state of a pool's servers, as its balancer sees it.
struct Servers(Vec<Arc<ServerEntry>>);

impl Tier {
    pub fn new(servers: Vec<Arc<ServerEntry>>, pool: &config::PoolSettings, events: &Subscribers) -> Self {
        let p = &pool.passive;
        let tuning = balance::passive_ratio::Tuning { delta: p.delta, slot: p.slot, window_slots: p.window_slots, min_samples: p.min_samples };
        // The cookie algorithm places clients without affinity by its `cookie_new`.
        let algorithm = match (pool.algorithm, pool.http.cookie_new) {
            (config::Algorithm::Cookie, config::CookieNew::Random) => config::Algorithm::Random,
            (algorithm, _) => algorithm,
        };
        let picker = Arc::new(Picker { view: Servers(servers.clone()), balancer: algorithm.build(&tuning) });
        // Subscribed before the first update, so a change that lands between the two is heard.
        events.subscribe(&picker);
        picker.server_changed();
        let limited = (0..servers.len()).filter(|&i| servers[i].maxconn > 0).map(|i| i as u32).collect();
        let mut by_id: Vec<u32> = (0..servers.len() as u32).collect();
        // Stable, so servers that share an id stay in config order.
        by_id.sort_by(|&a, &b| servers[a as usize].id.cmp(&servers[b as usize].id));
        Tier { servers, picker, limited, by_id }
    }

    /// The first usable server named `id`, unless a connection already failed on it.
    fn named(&self, id: &str, avoid: &[usize]) -> Option<usize> {
        let from = self.by_id.partition_point(|&i| self.servers[i as usize].id.as_str() < id);
        let usable = self.by_id[from..].iter().map(|&i| i as usize).take_while(|&i| self.servers[i].id == id).find(|&i| self.servers[i].state.effective_weight() > 0)?;
        (!avoid.contains(&usable)).then_some(usable)
    }

    /// The servers at their `maxconn` now.
    fn full(&self) -> impl Iterator<Item = usize> + '_ {
        self.limited.iter().map(|&i| i as usize).filter(|&i| {
            let e = &self.servers[i];
            e.state.counters.current.load(Relaxed) >= u64::from(e.maxconn)
        })
    }

    /// What the algorithm measures of server `i`, for stats.
    pub fn metrics(&self, i: usize) -> Option<balance::AlgorithmMetrics> {
        self.picker.balancer.metrics(i)
    }

    /// Takes the balancer's steps due by `now` without a pick (`Balancer::advance`): the kernel
    /// controller's, whose connections nftables places.
    pub fn advance(&self, now: std::time::Instant) {
        self.picker.balancer.advance(&self.picker.view, now);
    }

    /// The table slot `hash` lands on and its owner, when the algorithm hashes.
    pub fn slot(&self, hash: u64) -> Option<(usize, usize)> {
        self.picker.balancer.slot(hash)
    }

    /// The digest of the balancer's lookup table, when its algorithm has one.
    pub fn table_digest(&self) -> Option<u64> {
        self.picker.balancer.table_digest()
    }

    pub fn pick(&self, client: IpAddr, hash: Option<u64>, avoid: &[usize]) -> Option<usize> {
        self.choose(client, hash, avoid, Look::Take)
    }

    fn choose(&self, client: IpAddr, hash: Option<u64>, avoid: &[usize], look: Look) -> Option<usize> {
        look.pick(&*self.picker.balancer, &Pick { client, avoid, hash }, &self.picker.view)
    }

    /// `all_down = "use-all"`: a pick over every server in rotation, health ignored. The
    /// algorithm picks where it can (a hashing one keeps its table, so keys stay put); one whose
    /// precomputed order holds only usable servers (static-rr) hands over to a weighted random.
    fn choose_any(&self, client: IpAddr, hash: Option<u64>, avoid: &[usize], look: Look) -> Option<usize> {
        let all = InRotation(&self.picker.view);
        let pick = Pick { client, avoid, hash };
        look.pick(&*self.picker.balancer, &pick, &all).or_else(|| balance::random::Random::default().peek(&pick, &all))
    }
}

/// A pool's servers as `all_down = "use-all"` sees them: every enabled one that is not
/// draining, at its whole weight.
struct InRotation<'a>(&'a Servers);

impl ServerView for InRotation<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn weight(&self, i: usize) -> u32 {
        self.0.weight(i)
    }
    fn effective_weight(&self, i: usize) -> u32 {
        if self.0.0[i].state.in_rotation() { self.0.weight(i) } else { 0 }
    }
    fn active(&self, i: usize) -> u64 {
        self.0.active(i)
    }
    fn key(&self, i: usize) -> &str {
        self.0.key(i)
    }
    fn sample(&self, i: usize) -> balance::load::Sample {
        self.0.sample(i)
    }
    fn told(&self) -> bool {
        false
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
    fn ramp(&self, i: usize) -> u32 {
        self.0[i].state.ramp()
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

/// Which tier a pick came from, so a retry avoids the right index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Backup,
}

/// A server a pick chose: its tier and index there (what a retry avoids), and whether `all_down
/// = "use-all"` chose it with health ignored.
#[derive(Clone)]
pub struct Picked {
    pub role: Role,
    pub entry: Arc<ServerEntry>,
    pub index: usize,
    pub panic: bool,
}

impl Picked {
    fn of(tier: &Tier, role: Role, index: usize, panic: bool) -> Picked {
        Picked { role, entry: tier.servers[index].clone(), index, panic }
    }
}

/// Whether a choice is a connection's, which moves the balancer on, or a look at what it would
/// be, which moves nothing.
#[derive(Debug, Clone, Copy)]
enum Look {
    Take,
    Peek,
}

impl Look {
    fn pick(self, balancer: &dyn Balancer, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        match self {
            Look::Take => balancer.pick(pick, view),
            Look::Peek => balancer.peek(pick, view),
        }
    }
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

pub struct Pool {
    /// The settings the pool is dispatched and checked with (`config::PoolSettings`).
    pub config: config::PoolSettings,
    /// Counters and the queue: the service's for its default pool, its own for a routed one
    /// (shown as the service `service/pool` in the stats).
    pub state: Arc<ServiceState>,
    /// Shared with the views of a shared pool, so that every service's traffic moves one
    /// balancer.
    pub primary: Arc<Tier>,
    pub backup: Arc<Tier>,
    /// `server_tls`: the TLS client side for the pool's servers.
    pub server_tls: Option<Arc<crate::tls::origin::Originator>>,
}

impl Pool {
    /// This pool as a service that shares it dispatches to it: its tiers (servers, balancers),
    /// counters, queue and TLS client, under `config`, the service's view of its settings
    /// (`config::Service::shared_view`).
    pub fn view(&self, config: config::PoolSettings) -> Pool {
        Pool { config, state: self.state.clone(), primary: self.primary.clone(), backup: self.backup.clone(), server_tls: self.server_tls.clone() }
    }

    /// Whether `other` picks among the same tiers: the same pool, or a view of it.
    pub fn same_tiers(&self, other: &Pool) -> bool {
        Arc::ptr_eq(&self.primary, &other.primary)
    }

    /// Picks a primary server, or a backup while no primary is usable; with `all_down =
    /// "use-all"`, any server in rotation while none at all is usable.
    pub fn pick(&self, client: IpAddr, hash: Option<u64>, avoid: &Avoid) -> Option<Picked> {
        self.choose(client, hash, avoid, Look::Take)
    }

    /// The server `pick` would choose now, moving no balancer's state (`GET /api/explain`).
    pub fn peek(&self, client: IpAddr, hash: Option<u64>, avoid: &Avoid) -> Option<Picked> {
        self.choose(client, hash, avoid, Look::Peek)
    }

    fn choose(&self, client: IpAddr, hash: Option<u64>, avoid: &Avoid, look: Look) -> Option<Picked> {
        // Asked first: a pick over no usable server would start a rotation afresh each time.
        if self.panicking() {
            if let Some(i) = self.primary.choose_any(client, hash, &avoid.primary, look) {
                return Some(Picked::of(&self.primary, Role::Primary, i, true));
            }
            let i = self.backup.choose_any(client, hash, &avoid.backup, look)?;
            return Some(Picked::of(&self.backup, Role::Backup, i, true));
        }
        if let Some(i) = self.primary.choose(client, hash, &avoid.primary, look) {
            return Some(Picked::of(&self.primary, Role::Primary, i, false));
        }
        let i = self.backup.choose(client, hash, &avoid.backup, look)?;
        Some(Picked::of(&self.backup, Role::Backup, i, false))
    }

    /// Whether the pool balances over every server in rotation, health ignored: `all_down =
    /// "use-all"` while no server is usable, or fewer than `panic_threshold` percent of the
    /// primaries are (Envoy's panic mode).
    pub fn panicking(&self) -> bool {
        let usable = |e: &&Arc<ServerEntry>| e.state.effective_weight() > 0;
        if self.config.all_down == config::AllDown::UseAll && !self.servers().any(|e| usable(&e)) {
            return true;
        }
        let threshold = u64::from(self.config.panic_threshold);
        let primaries = self.primary.servers.len() as u64;
        threshold > 0 && primaries > 0 && (self.primary.servers.iter().filter(usable).count() as u64) * 100 < threshold * primaries
    }

    /// The usable server named `id` (the `cookie` algorithm's affinity), with its place.
    pub fn by_id(&self, id: &str, avoid: &Avoid) -> Option<Picked> {
        if let Some(i) = self.primary.named(id, &avoid.primary) {
            return Some(Picked::of(&self.primary, Role::Primary, i, false));
        }
        let i = self.backup.named(id, &avoid.backup)?;
        Some(Picked::of(&self.backup, Role::Backup, i, false))
    }

    pub fn tier(&self, role: Role) -> &Tier {
        match role {
            Role::Primary => &self.primary,
            Role::Backup => &self.backup,
        }
    }

    /// Whether any server not in `avoid` takes traffic now (full or not).
    pub fn any_usable(&self, avoid: &Avoid) -> bool {
        let ok = |(i, e): (usize, &Arc<ServerEntry>), skip: &[usize]| e.state.effective_weight() > 0 && !skip.contains(&i);
        self.primary.servers.iter().enumerate().any(|x| ok(x, &avoid.primary)) || self.backup.servers.iter().enumerate().any(|x| ok(x, &avoid.backup))
    }

    /// `avoid` plus every server at its `maxconn`: what a pick must skip now.
    pub fn avoid_full(&self, avoid: &Avoid) -> Avoid {
        let mut busy = avoid.clone();
        busy.primary.extend(self.primary.full());
        busy.backup.extend(self.backup.full());
        busy
    }

    /// Every server of the pool, primaries first.
    pub fn servers(&self) -> impl Iterator<Item = &Arc<ServerEntry>> {
        self.primary.servers.iter().chain(self.backup.servers.iter())
    }
}
