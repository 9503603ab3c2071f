//! Live state: the immutable [`Generation`] behind one `ArcSwap`, and the registry of server state
//! that outlives generations.
//!
//! A config (at start, on SIGHUP or from the API) becomes a new generation, built as a diff of
//! the running one (`config::diff`): a service whose config is the same, whose certificate files
//! did not change and whose servers' names did not move in DNS is the running one, untouched; in
//! a changed service, a routed pool whose settings are the same is kept whole, so a balancer keeps
//! its cursor and tables; a shared pool (`[[pool]]`) is one pool of the generation, kept whole
//! or rebuilt on its own settings, and a service that uses it gets a view of it (`Pool::view`),
//! so editing a service leaves the pool's balancer and servers as they run; the certificates of a changed service are read again only when their
//! files changed; and a server keeps its resolved address unless its address is new. Server state
//! is looked up by stable key (service name, configured address), so counters and health carry
//! over, and the new generation is swapped in whole. Connections in flight keep the `Arc` of the
//! generation they started in. A config that fails is refused and the old generation stays.

pub mod access_log;
pub mod agent;
pub mod budget;
pub mod http_stats;
pub mod inflight;
pub mod limit;
mod losses;
pub mod outlier;
pub mod pages;
mod pool;
mod rate;
#[cfg(test)]
mod recovery_tests;
pub mod retry_budget;
mod server;
mod service;
mod service_state;
pub mod tracer;
pub mod why;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::config::{self, Config, HealthKind};

pub use budget::{Budget, Slot};
pub use pool::{Avoid, Picked, Pool, Role, Tier};
pub use rate::Rate;
pub use server::{Carried, ConnGuard, DampingNow, ServerEntry, ServerKey, ServerState, State};
pub use service::Service;
pub use service_state::{ServiceGuard, ServiceState};

/// One immutable view of the whole configuration.
pub struct Generation {
    pub config: Config,
    pub services: Vec<Arc<Service>>,
    /// The shared pools (`[[pool]]`), in config order; services reach them through views.
    pub shared: Vec<Arc<Pool>>,
    /// The process's connection budget, the same across generations (its limit follows the
    /// newest config).
    pub budget: Arc<Budget>,
    /// Each listen address's service, by its index in `services`: an accept finds its service
    /// in one lookup, not a scan of thousands of services.
    by_listen: HashMap<SocketAddr, usize>,
}

impl Generation {
    pub fn new(config: Config, services: Vec<Arc<Service>>, shared: Vec<Arc<Pool>>, budget: Arc<Budget>) -> Generation {
        // In reverse, so that of two services on one address (check refuses it) the first is found, as a scan would.
        let by_listen = services.iter().enumerate().rev().map(|(i, s)| (s.listen, i)).collect();
        Generation { config, services, shared, budget, by_listen }
    }

    /// The process-wide connection limit this config gives: its `maxconn`, within what the
    /// descriptor limit carries beside what the config holds itself (`held`); refused when the
    /// limit leaves too few descriptors for clients.
    pub fn maxconn(&self) -> Result<u64, budget::TooFew> {
        let (limit, held) = (budget::descriptor_limit(), self.held());
        held.fits(limit)?;
        Ok(budget::effective(self.config.maxconn, limit, held))
    }

    /// The descriptors this generation holds before it serves a client: the listening sockets of
    /// the services it binds (`Service::binds`), and a check per server with an active check.
    pub fn held(&self) -> budget::Held {
        let enabled = self.services.iter().filter(|s| s.config().binds());
        let (addresses, http3) = enabled.fold((0u64, 0u64), |(a, h), s| (a + 1, h + u64::from(s.config().http.http3)));
        let checks = self.pools().filter(|(_, p)| p.config.health.kind != HealthKind::None).map(|(_, p)| p.servers().count() as u64).sum();
        budget::Held { listen_sockets: addresses * self.config.sockets_per_address() as u64 + http3, checks }
    }

    pub fn service_at(&self, listen: SocketAddr) -> Option<&Arc<Service>> {
        self.by_listen.get(&listen).map(|&i| &self.services[i])
    }

    /// Every pool once, with its service: each service's default pool, then the routed ones, in
    /// config order, then the shared pools (no one service's).
    pub fn pools(&self) -> impl Iterator<Item = (Option<&Arc<Service>>, &Arc<Pool>)> {
        let defaults = self.services.iter().map(|s| (Some(s), &s.pool));
        let routed = self.services.iter().flat_map(|s| s.pools.iter().map(move |p| (Some(s), p)));
        defaults.chain(routed).chain(self.shared.iter().map(|p| (None, p)))
    }

    /// The services that send traffic to the shared pool `name`.
    pub fn users_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Arc<Service>> + 'a {
        self.services.iter().filter(move |s| s.shared.iter().any(|p| p.config.name == name))
    }

    /// The server at `address` of `service` (its own servers or a routed pool's; `service` may
    /// also name a routed pool or a shared one), with its pool, as the stats list them.
    pub fn server(&self, service: &str, address: &str) -> Option<(&Arc<Pool>, &Arc<ServerEntry>)> {
        self.pools()
            .filter(|(s, p)| s.is_some_and(|s| s.config().name == service) || p.config.name == service)
            .find_map(|(_, p)| p.servers().find(|e| e.state.key.address == address).map(|e| (p, e)))
    }

    /// A per-client limit by its name.
    pub fn limit(&self, name: &str) -> Option<&Arc<limit::Limiter>> {
        self.limits().find(|l| l.config.name == name)
    }

    /// Every per-client limit: each service's, then its routes'.
    pub fn limits(&self) -> impl Iterator<Item = &Arc<limit::Limiter>> {
        self.services.iter().flat_map(|s| s.limits.iter().chain(s.route_limits.iter().flat_map(|r| r.iter())))
    }

    /// A pool by its name: a service's, a routed pool's `service/pool`, or a shared pool's.
    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools().map(|(_, p)| p).find(|p| p.config.name == name)
    }
}

/// State that outlives generations: per-server and per-service state.
#[derive(Default)]
struct Registry {
    servers: HashMap<ServerKey, Arc<ServerState>>,
    services: HashMap<String, Arc<ServiceState>>,
    /// Per-client limits by name: a reload that leaves one as it is keeps its counts.
    limits: HashMap<String, Arc<limit::Limiter>>,
}

/// What changed between two generations that the data path must act on.
#[derive(Debug, Default)]
pub struct Applied {
    /// Servers that left or were disabled and whose connections were closed.
    pub terminated: Vec<ServerKey>,
    /// What the config changed.
    pub diff: config::Diff,
}

/// What an apply must look up again although the config names it the same way: server host
/// names whose address moved in DNS, and services whose SRV records changed (`app::resolve`).
#[derive(Debug, Default, Clone)]
pub struct Refresh {
    /// Configured server addresses (host names) to resolve again.
    pub addresses: std::collections::HashSet<String>,
    /// Services whose `srv` name to ask again.
    pub srv: std::collections::HashSet<String>,
}

/// Why a config could not become a generation; the running generation stays.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("service {service}: bad listen address {listen}")]
    ListenAddress { service: String, listen: String },
    /// The message includes the cause's, so it is not also a `source()`.
    #[error("service {service}: {cause}")]
    Server { service: String, cause: config::AddressError },
    #[error("service {service}: TLS: {cause}")]
    Tls { service: String, cause: crate::tls::TlsError },
    #[error("service {service}: {cause}")]
    Srv { service: String, cause: crate::dns::SrvError },
    #[error("service {service}: {cause}")]
    Page { service: String, cause: pages::PageError },
    #[error("service {service}: the access log's syslog socket: {cause}")]
    AccessLog { service: String, cause: std::io::Error },
    #[error("service {service}: tracing: {cause}")]
    Tracer { service: String, cause: std::io::Error },
    #[error(transparent)]
    Descriptors(#[from] budget::TooFew),
    #[error("runtime registry poisoned")]
    Poisoned,
}

pub struct Live {
    current: ArcSwap<Generation>,
    registry: Mutex<Registry>,
    /// Client connections of the whole process against `maxconn`.
    budget: Arc<Budget>,
}

impl Live {
    /// Builds the first generation.
    pub fn new(config: Config) -> Result<Self, BuildError> {
        let mut registry = Registry::default();
        let budget = Budget::new(0);
        let generation = build(config, &mut registry, &budget, None, &config::Diff::default(), &Refresh::default())?;
        budget.set_max(generation.maxconn()?);
        Ok(Live { current: ArcSwap::from_pointee(generation), registry: Mutex::new(registry), budget })
    }

    /// The process-wide connection budget every listener takes from.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Swaps in a generation built from `config`, carrying server state over by key.
    ///
    /// Servers that are disabled or removed by this config close their connections when their
    /// service has `terminate_on_disable`; otherwise those connections finish on their own.
    pub fn apply(&self, config: Config) -> Result<Applied, BuildError> {
        self.apply_refreshing(config, &Refresh::default())
    }

    /// `apply`, looking up again what `refresh` names.
    pub fn apply_refreshing(&self, config: Config, refresh: &Refresh) -> Result<Applied, BuildError> {
        let mut registry = self.registry.lock().map_err(|_| BuildError::Poisoned)?;
        let old = self.current();
        let diff = config::diff(&old.config, &config);
        let built = build(config, &mut registry, &self.budget, Some(&old), &diff, refresh).and_then(|new| Ok((new.maxconn()?, new)));
        let (maxconn, new) = match built {
            Ok(built) => built,
            Err(refused) => {
                // Refused whole: the servers it registered before it failed leave no state
                // behind, so a later config that adds them has them join afresh.
                let running: std::collections::HashSet<&ServerKey> = old.pools().flat_map(|(_, p)| p.servers()).map(|e| &e.state.key).collect();
                registry.servers.retain(|key, _| running.contains(key));
                return Err(refused);
            }
        };
        let mut applied = Applied { diff, ..Applied::default() };
        let next_pools: HashMap<&str, &Arc<Pool>> = new.pools().map(|(_, p)| (p.config.name.as_str(), p)).collect();
        for (_, pool) in old.pools() {
            let next = next_pools.get(pool.config.name.as_str()).copied();
            if next.is_some_and(|n| Arc::ptr_eq(n, pool)) {
                // Kept whole: its servers and their state are the same.
                continue;
            }
            let terminate = next.map(|s| s.config.terminate_on_disable).unwrap_or(pool.config.terminate_on_disable);
            for entry in pool.servers() {
                let kept = next.and_then(|s| s.servers().find(|e| Arc::ptr_eq(&e.state, &entry.state)));
                let gone = kept.is_none() || !entry.state.is_enabled();
                if gone && kept.is_none() {
                    registry.servers.remove(&entry.state.key);
                }
                if gone && terminate {
                    entry.state.terminate_connections();
                    applied.terminated.push(entry.state.key.clone());
                }
            }
        }
        registry.services.retain(|name, _| next_pools.contains_key(name.as_str()));
        self.budget.set_max(maxconn);
        self.current.store(Arc::new(new));
        Ok(applied)
    }

    /// Looks a server up by pool name (a service's, or `service/pool`) and configured address in
    /// the current generation.
    pub fn server(&self, service: &str, address: &str) -> Option<Arc<ServerState>> {
        let generation = self.current();
        let s = generation.pool(service)?;
        s.servers().find(|e| e.state.key.address == address).map(|e| e.state.clone())
    }
}

/// Builds a generation as a diff of `previous`, the running one, by what `diff` names (see the
/// module doc); `previous` also lends a service the servers its SRV records gave when they
/// cannot be asked now (a nameserver outage must not fail a reload or empty a pool).
fn build(config: Config, registry: &mut Registry, budget: &Arc<Budget>, previous: Option<&Generation>, diff: &config::Diff, refresh: &Refresh) -> Result<Generation, BuildError> {
    let by_name: HashMap<&str, &Arc<Service>> = previous.iter().flat_map(|g| &g.services).map(|s| (s.config().name.as_str(), s)).collect();
    let changed: std::collections::HashSet<&str> = diff.changed.iter().map(|c| c.name.as_str()).collect();
    let shared = build_shared(&config, registry, previous, refresh)?;
    let services = config
        .services
        .iter()
        .map(|sc| {
            let running = by_name.get(sc.name.as_str()).copied();
            if let Some(running) = running
                && !changed.contains(sc.name.as_str())
                && unchanged(running, sc, refresh)
                && running.shared.iter().all(|v| shared.iter().any(|p| p.same_tiers(v)))
            {
                return Ok(running.clone());
            }
            let listen: SocketAddr = sc.listen.parse().map_err(|_| BuildError::ListenAddress { service: sc.name.clone(), listen: sc.listen.clone() })?;
            let pools = sc
                .pools
                .iter()
                .map(|p| {
                    let settings = sc.routed_pool(p);
                    let old = running.and_then(|r| r.routed(&p.name));
                    match kept(old, &settings, refresh) {
                        Some(old) => Ok(old),
                        None => build_pool(&settings, &[], registry, previous.is_some(), old.map(|o| &**o), refresh).map(Arc::new),
                    }
                })
                .collect::<Result<_, _>>()?;
            // Reads the certificate files (when they changed): `build` runs on a blocking thread.
            let same_tls = running.and_then(|r| r.tls.as_ref().filter(|t| r.config().terminates_tls_as(sc) && t.unchanged_on_disk()));
            let tls = match (same_tls, &sc.tls) {
                (Some(t), _) => Some(t.clone()),
                (None, Some(t)) => Some(crate::tls::Terminator::load(&sc.name, t, sc.mode, sc.http.http2, &sc.acme_names()).map(Arc::new).map_err(|cause| BuildError::Tls { service: sc.name.clone(), cause })?),
                (None, None) => None,
            };
            if let Some(t) = tls.as_ref().filter(|_| same_tls.is_none()) {
                for (cert, left) in t.expiring(crate::clock::wall()) {
                    tracing::warn!(service = %sc.name, file = %cert.file, "TLS certificate expires in {} (at {})", humantime::format_duration(std::time::Duration::from_secs(left.as_secs() / 3600 * 3600)), crate::tls::unix_to_text(cert.not_after));
                }
            }
            // Error pages, read again when the config names others or a file changed.
            let pages = match running.and_then(|r| r.pages.as_ref()) {
                Some(p) if running.is_some_and(|r| same_pages(r.config(), sc)) && p.unchanged_on_disk() => Some(p.clone()),
                _ => pages::ErrorPages::load(sc).map_err(|cause| BuildError::Page { service: sc.name.clone(), cause })?.map(Arc::new),
            };
            // The access log, kept with its syslog thread when the reload changed nothing of it.
            let access = match running.and_then(|r| r.access.as_ref()) {
                Some(a) if running.is_some_and(|r| access_log::AccessLogger::same(&r.config().http, &sc.http)) => Some(a.clone()),
                _ => access_log::AccessLogger::new(&sc.name, &sc.http).map_err(|cause| BuildError::AccessLog { service: sc.name.clone(), cause })?.map(Arc::new),
            };
            // The tracer, kept with its exporter thread when the reload changed nothing of it.
            let tracer = match running.and_then(|r| r.tracer.as_ref()) {
                Some(t) if running.is_some_and(|r| tracer::Tracer::same(&r.config().http, &sc.http)) => Some(t.clone()),
                _ => tracer::Tracer::new(&sc.name, &sc.http).map_err(|cause| BuildError::Tracer { service: sc.name.clone(), cause })?.map(Arc::new),
            };
            // Servers from DNS SRV records join the service's own (`dns` asks them on a thread of
            // its own), asked again only when the name is new or `refresh` says its records moved.
            let kept_srv = running.filter(|r| r.config().srv == sc.srv && !refresh.srv.contains(&sc.name));
            let found = match &sc.srv {
                Some(_) if kept_srv.is_some() => kept_srv.map(|r| r.from_srv()).unwrap_or_default(),
                Some(name) => match crate::dns::srv(name, config.dns.as_ref()) {
                    Ok(found) => found,
                    Err(cause) => match previous.and_then(|g| g.services.iter().find(|s| s.config().name == sc.name && s.config().srv.as_ref() == Some(name))) {
                        Some(running) => {
                            tracing::warn!(service = %sc.name, "{cause}; keeping the servers it named");
                            running.from_srv()
                        }
                        None => return Err(BuildError::Srv { service: sc.name.clone(), cause }),
                    },
                },
                None => Vec::new(),
            };
            // The service's own servers, kept as they run (balancer, idle connections) when only
            // something else of the service changed: its routes, a routed pool, its listener.
            // SRV records may name other servers than it runs with: asked above, built anew.
            let own = sc.own_pool();
            let pool = match kept(running.map(|r| &r.pool).filter(|_| sc.srv.is_none()), &own, refresh) {
                Some(old) => old,
                None => Arc::new(build_pool(&own, &found, registry, previous.is_some(), running.map(|r| &*r.pool), refresh)?),
            };
            let routes = sc.routes.iter().map(|_| Arc::default()).collect();
            let limits = sc.limits.iter().map(|l| limiter(registry, l, &sc.name, None)).collect();
            let route_limits = sc.routes.iter().enumerate().map(|(k, r)| r.limits.iter().map(|l| limiter(registry, l, &sc.name, Some(k))).collect()).collect();
            // Views of the shared pools it uses: made afresh, they hold no state of their own.
            let views = sc.shared_names().filter_map(|n| shared.iter().find(|p| p.config.name == n)).map(|p| Arc::new(p.view(sc.shared_view(&p.config)))).collect();
            Ok(Arc::new(Service { config: sc.clone(), listen, pool, pools, shared: views, tls, pages, access, tracer, routes, limits, route_limits }))
        })
        .collect::<Result<_, BuildError>>()?;
    let named: std::collections::HashSet<&str> =
        config.services.iter().flat_map(|s| s.limits.iter().chain(s.routes.iter().flat_map(|r| &r.limits))).map(|l| l.name.as_str()).collect();
    registry.limits.retain(|name, _| named.contains(name.as_str()));
    Ok(Generation::new(config, services, shared, budget.clone()))
}

/// The shared pools of `config`: the running one of each name kept whole when its settings are
/// the same (its balancer goes on), else built with its servers' state found by stable key.
fn build_shared(config: &Config, registry: &mut Registry, previous: Option<&Generation>, refresh: &Refresh) -> Result<Vec<Arc<Pool>>, BuildError> {
    let running = |name: &str| previous.and_then(|g| g.shared.iter().find(|p| p.config.name == name));
    config
        .pools
        .iter()
        .map(|pc| {
            let settings = config.shared_pool(pc);
            let old = running(&pc.name);
            match kept(old, &settings, refresh) {
                Some(p) => Ok(p),
                None => Ok(Arc::new(build_pool(&settings, &[], registry, previous.is_some(), old.map(|p| &**p), refresh)?)),
            }
        })
        .collect()
}

/// The running limit of this name when its settings, service and route are the same (its counts
/// go on), else a new one.
fn limiter(registry: &mut Registry, config: &config::Limit, service: &str, route: Option<usize>) -> Arc<limit::Limiter> {
    let same = |l: &&Arc<limit::Limiter>| l.config == *config && l.service == service && l.route == route;
    if let Some(running) = registry.limits.get(&config.name).filter(same) {
        return running.clone();
    }
    let made = Arc::new(limit::Limiter::new(config, service, route));
    registry.limits.insert(config.name.clone(), made.clone());
    made
}

/// Whether the running service of a config the diff does not name serves `sc` as it is:
/// certificate files that did not change, and no server name or SRV record to look up again.
fn unchanged(running: &Service, sc: &config::Service, refresh: &Refresh) -> bool {
    !refresh.srv.contains(&sc.name)
        && running.tls.as_ref().is_none_or(|t| t.unchanged_on_disk())
        && running.pages.as_ref().is_none_or(|p| p.unchanged_on_disk())
        && std::iter::once(&running.pool).chain(&running.pools).all(|p| !names_moved(p, refresh))
}

/// Whether two configs of a service name the same error pages.
fn same_pages(a: &config::Service, b: &config::Service) -> bool {
    a.http.error_pages == b.http.error_pages && a.routes.len() == b.routes.len() && a.routes.iter().zip(&b.routes).all(|(x, y)| x.error_pages == y.error_pages)
}

/// The running pool `old` itself, for settings that are its own when `refresh` names none of its
/// servers: it keeps its balancer, its servers' state and its idle connections.
fn kept(old: Option<&Arc<Pool>>, settings: &config::PoolSettings, refresh: &Refresh) -> Option<Arc<Pool>> {
    old.filter(|o| o.config == *settings && !names_moved(o, refresh)).cloned()
}

/// Whether `refresh` names a server of `pool` to resolve again.
fn names_moved(pool: &Pool, refresh: &Refresh) -> bool {
    !refresh.addresses.is_empty() && pool.servers().any(|e| refresh.addresses.contains(&e.state.key.address))
}

/// A pool of `sc`'s settings (a service's own servers, or a routed pool), its servers' state found or
/// made by stable key. `running`: the process serves already, so a server new to it slow-starts.
/// `old`, the running pool of that name: a server it has keeps its resolved address, unless
/// `refresh` names it.
fn build_pool(
    sc: &config::PoolSettings,
    found: &[crate::dns::SrvServer],
    registry: &mut Registry,
    running: bool,
    old: Option<&Pool>,
    refresh: &Refresh,
) -> Result<Pool, BuildError> {
    let shared = registry.services.entry(sc.name.clone()).or_default().clone();
    let events = shared.events.clone();
    let checked = sc.health.kind != HealthKind::None;
    let mut primary = Vec::new();
    let mut backup = Vec::new();
    let from_srv = found.iter().map(|f| {
        let server =
            config::Server { address: f.address.clone(), weight: f.weight, backup: f.backup, enabled: true, drain: false, maxconn: 0, id: None, proxy_protocol: None, sni: None };
        (server, Ok(f.addr))
    });
    let resolved = |s: &config::Server| {
        let known = old.filter(|_| !refresh.addresses.contains(&s.address)).and_then(|o| o.servers().find(|e| e.state.key.address == s.address));
        match known {
            Some(e) => Ok(e.addr),
            None => config::resolve_server(s),
        }
    };
    let configured = sc.servers.iter().map(|s| (s.clone(), resolved(s)));
    for (server, addr) in configured.chain(from_srv) {
        let server = &server;
        let addr = addr.map_err(|cause| BuildError::Server { service: sc.name.clone(), cause })?;
        let key = ServerKey { service: sc.name.clone(), address: server.address.clone() };
        let joined = running && !registry.servers.contains_key(&key);
        let state = registry.servers.entry(key.clone()).or_insert_with(|| ServerState::new(key, events.clone(), server.weight, server.enabled, checked)).clone();
        state.measure.set_decay(sc.p2c.decay);
        state.set_weight(server.weight);
        state.set_enabled(server.enabled);
        state.set_draining(server.drain);
        state.configure(sc.slow_start, &sc.damping, joined);
        let proxy_protocol = server.proxy_protocol.or(sc.proxy_protocol);
        let sni = server.sni.as_deref().map(crate::tls::origin::name).transpose().map_err(|cause| BuildError::Tls { service: sc.name.clone(), cause })?;
        let entry = Arc::new(ServerEntry { addr, state, id: server.cookie_id(), maxconn: server.maxconn, proxy_protocol, sni });
        if server.backup { backup.push(entry) } else { primary.push(entry) }
    }
    // Reads the CA file: `build` runs on a blocking thread.
    let server_tls = sc
        .server_tls
        .as_ref()
        .map(|t| crate::tls::origin::Originator::load(t, sc.mode == config::Mode::Http, sc.protocol == config::ServerProtocol::H2).map(Arc::new))
        .transpose()
        .map_err(|cause| BuildError::Tls { service: sc.name.clone(), cause })?;
    Ok(Pool { primary: Arc::new(Tier::new(primary, sc, &events)), backup: Arc::new(Tier::new(backup, sc, &events)), config: sc.clone(), state: shared, server_tls })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn config(algorithm: &str) -> Config {
        let mut text = format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nalgorithm = \"{algorithm}\"\n");
        for port in 1001..=1004 {
            text += &format!("[[service.server]]\naddress = \"127.0.0.1:{port}\"\n");
        }
        config::parse(&text, "t.toml").unwrap()
    }

    fn set_up(rt: &Live, port: u16, up: bool) {
        rt.server("web", &format!("127.0.0.1:{port}")).unwrap().set_health(up);
    }

    #[test]
    fn an_edit_rebuilds_only_what_it_names() {
        let text = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n\
                    [[service.pool]]\nname = \"api\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n\
                    [[service.pool]]\nname = \"img\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1003\"\n\
                    [[service.route]]\npool = \"api\"\npath_prefix = [\"/api\"]\n\
                    [[service]]\nname = \"b\"\nlisten = \"127.0.0.1:2000\"\n[[service.server]]\naddress = \"127.0.0.1:2001\"\n";
        let rt = Live::new(config::parse(text, "t.toml").unwrap()).unwrap();
        let before = rt.current();
        // The api pool's server gets another weight: service a is rebuilt around img, which is
        // kept whole, and b is the running service itself.
        let edited = text.replace("address = \"127.0.0.1:1002\"\n", "address = \"127.0.0.1:1002\"\nweight = 5\n");
        let applied = rt.apply(config::parse(&edited, "t.toml").unwrap()).unwrap();
        assert_eq!(applied.diff.describe(), "1 service changed (a)");
        let after = rt.current();
        assert!(Arc::ptr_eq(&before.services[1], &after.services[1]), "b untouched");
        let (a0, a1) = (&before.services[0], &after.services[0]);
        assert!(!Arc::ptr_eq(a0, a1));
        assert!(Arc::ptr_eq(a0.routed("img").unwrap(), a1.routed("img").unwrap()), "img kept whole");
        assert!(!Arc::ptr_eq(a0.routed("api").unwrap(), a1.routed("api").unwrap()), "api rebuilt");
        assert_eq!(a1.routed("api").unwrap().servers().next().unwrap().state.weight(), 5);
        // The same server's state carries over into the rebuilt pool.
        let state = |g: &Generation| g.pool("a/api").unwrap().servers().next().unwrap().state.clone();
        assert!(Arc::ptr_eq(&state(&before), &state(&after)));
        // Applying the same config again changes nothing at all.
        let again = rt.apply(config::parse(&edited, "t.toml").unwrap()).unwrap();
        assert!(again.diff.is_empty());
        assert!(Arc::ptr_eq(&after.services[0], &rt.current().services[0]));
    }

    #[test]
    fn services_sharing_a_pool_pick_over_one_balancer_and_an_edit_of_one_keeps_the_pool() {
        let text = "[[pool]]\nname = \"back\"\nalgorithm = \"least-conn\"\n[pool.health]\nkind = \"none\"\n\
                    [[pool.server]]\naddress = \"127.0.0.1:3001\"\n[[pool.server]]\naddress = \"127.0.0.1:3002\"\n\
                    [[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\ndefault_pool = \"back\"\n\
                    [[service]]\nname = \"raw\"\nlisten = \"127.0.0.1:2000\"\ndefault_pool = \"back\"\n";
        let rt = Live::new(config::parse(text, "t.toml").unwrap()).unwrap();
        let before = rt.current();
        assert_eq!(before.pools().filter(|(_, p)| p.config.name == "back").count(), 1, "one pool, listed once");
        let (web, raw) = (&before.services[0], &before.services[1]);
        let (a, b) = (web.default_pool(), raw.default_pool());
        assert!(a.same_tiers(b) && a.same_tiers(&before.shared[0]));
        assert_eq!((a.config.mode, b.config.mode), (config::Mode::Http, config::Mode::Tcp), "each service's own way of connecting");
        // A connection held through one service counts for the other's least-conn pick.
        let client = IpAddr::from([127, 0, 0, 1]);
        let first = a.pick(client, None, &Avoid::default()).unwrap();
        let _held = first.entry.state.try_reserve(0).unwrap();
        let second = b.pick(client, None, &Avoid::default()).unwrap();
        assert_ne!(first.entry.addr, second.entry.addr);
        // Editing one service rebuilds it around the same pool: its servers, balancer and counts.
        let edited = text.replace("mode = \"http\"\n", "mode = \"http\"\nconnect_timeout = \"3s\"\n");
        let applied = rt.apply(config::parse(&edited, "t.toml").unwrap()).unwrap();
        assert_eq!(applied.diff.describe(), "1 service changed (web)");
        let after = rt.current();
        assert!(Arc::ptr_eq(&before.shared[0], &after.shared[0]), "the shared pool is kept whole");
        assert!(Arc::ptr_eq(&before.services[1], &after.services[1]), "raw untouched");
        assert!(after.services[0].default_pool().same_tiers(&after.shared[0]));
        // Editing the pool keeps its unchanged servers' state, and both services follow it.
        let state = |g: &Generation, port: u16| g.pool("back").unwrap().servers().find(|e| e.addr.port() == port).unwrap().state.clone();
        let weighted = edited.replace("address = \"127.0.0.1:3002\"\n", "address = \"127.0.0.1:3002\"\nweight = 3\n");
        let applied = rt.apply(config::parse(&weighted, "t.toml").unwrap()).unwrap();
        assert_eq!(applied.diff.describe(), "1 shared pool changed (back)");
        let last = rt.current();
        assert!(!Arc::ptr_eq(&after.shared[0], &last.shared[0]));
        assert!(Arc::ptr_eq(&state(&after, 3001), &state(&last, 3001)) && Arc::ptr_eq(&state(&after, 3002), &state(&last, 3002)));
        assert_eq!(state(&last, 3002).weight(), 3);
        assert!(last.services.iter().all(|s| s.default_pool().same_tiers(&last.shared[0])), "every user dispatches to the new pool");
        assert_eq!(
            state(&last, 3001).counters.current.load(std::sync::atomic::Ordering::Relaxed) + state(&last, 3002).counters.current.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    #[test]
    fn a_health_flip_reaches_the_live_generations_balancer_and_moves_no_other_keys() {
        let rt = Live::new(config("source-hash")).unwrap();
        (1001..=1004).for_each(|port| set_up(&rt, port, true));
        let generation = rt.current();
        let primary = &generation.services[0].pool.primary;
        let clients: Vec<IpAddr> = (0..=255u8).map(|h| IpAddr::from([198, 51, 100, h])).collect();
        let picks = || clients.iter().map(|&ip| primary.pick(ip, None, &[])).collect::<Vec<_>>();
        let before = picks();
        assert!(before.contains(&Some(1)));
        set_up(&rt, 1002, false);
        for (was, now) in before.iter().zip(picks()) {
            assert_ne!(now, Some(1));
            if *was != Some(1) {
                assert_eq!(now, *was);
            }
        }
        set_up(&rt, 1002, true);
        assert_eq!(picks(), before);
    }

    #[test]
    fn a_dropped_generations_balancers_leave_the_services_event_hub() {
        let rt = Live::new(config("static-rr")).unwrap();
        let hub = rt.registry.lock().unwrap().services["web"].events.clone();
        assert_eq!(hub.len(), 2, "primary and backup");
        let held = rt.current();
        // A change to the service (not to its servers) rebuilds its pool.
        let mut changed = config("static-rr");
        changed.services[0].connect_timeout = std::time::Duration::from_secs(3);
        rt.apply(changed).unwrap();
        assert_eq!(hub.len(), 4, "a generation still in use keeps hearing changes");
        drop(held);
        set_up(&rt, 1001, false);
        assert_eq!(hub.len(), 2);
        let generation = rt.current();
        let primary = &generation.services[0].pool.primary;
        (1002..=1004).for_each(|port| set_up(&rt, port, true));
        let mut seen: Vec<usize> = (0..6).filter_map(|_| primary.pick(IpAddr::from([127, 0, 0, 1]), None, &[])).collect();
        seen.sort();
        assert_eq!(seen, vec![1, 1, 2, 2, 3, 3], "the static-rr cycle was rebuilt on the events");
    }

    #[test]
    fn the_cookie_algorithm_places_new_clients_in_turn_or_at_random() {
        let placed = |extra: &str| {
            let text = format!(
                "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\nalgorithm = \"cookie\"\n[service.health]\nkind = \"none\"\n[service.http]\n{extra}\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n[[service.server]]\naddress = \"127.0.0.1:1002\"\n"
            );
            let rt = Live::new(config::parse(&text, "t.toml").unwrap()).unwrap();
            let primary = &rt.current().services[0].pool.primary;
            (0..200).map(|_| primary.pick(IpAddr::from([127, 0, 0, 1]), None, &[]).unwrap()).collect::<Vec<_>>()
        };
        let in_turn = placed("");
        assert!(in_turn.windows(2).all(|w| w[0] != w[1]), "round robin alternates");
        let random = placed("cookie_new = \"random\"");
        let repeats = random.windows(2).filter(|w| w[0] == w[1]).count();
        assert!((50..=150).contains(&repeats), "random repeats about half the time: {repeats}");
    }

    #[test]
    fn a_servers_proxy_protocol_is_its_own_else_its_pools_else_its_services() {
        let text = "[[service]]\nname = \"edge\"\nlisten = \"127.0.0.1:1000\"\nproxy_protocol = \"v1\"\n\
                    [[service.server]]\naddress = \"127.0.0.1:1001\"\n[[service.server]]\naddress = \"127.0.0.1:1002\"\nproxy_protocol = \"v2\"\n\
                    [[service.pool]]\nname = \"p\"\nproxy_protocol = \"v2\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1003\"\n\
                    [[service.pool]]\nname = \"q\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1004\"\n\
                    [[service.route]]\npool = \"p\"\nsni = [\"p.test\"]\n[[service.route]]\npool = \"q\"\nsni = [\"q.test\"]\n";
        let rt = Live::new(config::parse(text, "t.toml").unwrap()).unwrap();
        let generation = rt.current();
        let sent: Vec<_> = generation.pools().flat_map(|(_, p)| p.servers().map(|e| (e.addr.port(), e.proxy_protocol)).collect::<Vec<_>>()).collect();
        use config::ProxyProtocol::{V1, V2};
        assert_eq!(sent, vec![(1001, Some(V1)), (1002, Some(V2)), (1003, Some(V2)), (1004, Some(V1))]);
    }
}
