//! A service of one generation (the paper's rule): its listen address, its default pool (its own
//! servers) and, in HTTP mode, the routed pools its routes pick from. What outlives generations
//! is `service_state`'s.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config;

use super::pool::Pool;
use super::service_state::ServiceState;

pub struct Service {
    pub config: config::Service,
    pub listen: SocketAddr,
    /// The service's own servers, with the service's settings and counters.
    pub pool: Arc<Pool>,
    /// The routed pools, in config order.
    pub pools: Vec<Arc<Pool>>,
    /// The shared pools (`[[pool]]`) it uses, as it dispatches to them (`Pool::view`), in the
    /// order of `config::Service::shared_names`.
    pub shared: Vec<Arc<Pool>>,
    /// `[service.tls]`: this generation's certificates and handshake settings.
    pub tls: Option<Arc<crate::tls::Terminator>>,
    /// `error_pages`, read from their files.
    pub pages: Option<Arc<super::pages::ErrorPages>>,
    /// The access log; `None` when it is off.
    pub access: Option<Arc<super::access_log::AccessLogger>>,
    /// `[service.http.tracing]`'s sampling and exporter; `None` when tracing is off.
    pub tracer: Option<Arc<super::tracer::Tracer>>,
    /// Each route's requests, answers and times, by its index, since this generation of the
    /// service was built.
    pub routes: Box<[Arc<super::http_stats::RouteStats>]>,
    /// `[[service.limit]]`, in config order.
    pub limits: Box<[Arc<super::limit::Limiter>]>,
    /// Each route's `[[service.route.limit]]`, by the route's index.
    pub route_limits: Box<[Box<[Arc<super::limit::Limiter>]>]>,
}

impl Service {
    pub fn config(&self) -> &config::Service {
        &self.config
    }

    pub fn state(&self) -> &Arc<ServiceState> {
        &self.pool.state
    }

    /// The servers its `srv` records gave (the running servers that are not configured ones).
    pub fn from_srv(&self) -> Vec<crate::dns::SrvServer> {
        let p = &self.pool;
        let running = p.primary.servers.iter().map(|e| (e, false)).chain(p.backup.servers.iter().map(|e| (e, true)));
        running
            .filter(|(e, _)| !self.config.servers.iter().any(|c| c.address == e.state.key.address))
            .map(|(e, backup)| crate::dns::SrvServer { address: e.state.key.address.clone(), addr: e.addr, weight: e.state.weight(), backup })
            .collect()
    }

    /// Whether a limit counts the service's connections as they are accepted.
    pub fn limits_connections(&self) -> bool {
        self.limits.iter().any(|l| l.config.on_connections(self.config.mode))
    }

    /// A routed pool of this service by its name in the config: its own, else a shared one it
    /// uses (the config names no pool both ways).
    pub fn routed(&self, name: &str) -> Option<&Arc<Pool>> {
        let own = self.config().pools.iter().position(|p| p.name == name).and_then(|i| self.pools.get(i));
        own.or_else(|| self.shared.iter().find(|p| p.config.name == name))
    }

    /// The pool of a connection no route picks for: `default_pool`, else its own servers.
    pub fn default_pool(&self) -> &Arc<Pool> {
        self.pool_for(None).0
    }

    /// The pool a matching route names, else `default_pool`, else the service's own servers;
    /// with its name for the log.
    pub fn pool_for<'a>(&'a self, route: Option<&'a str>) -> (&'a Arc<Pool>, &'a str) {
        let name = route.or(self.config().default_pool.as_deref());
        match name.and_then(|n| self.routed(n).map(|p| (p, n))) {
            Some(found) => found,
            None => (&self.pool, "default"),
        }
    }
}
