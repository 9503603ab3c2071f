//! Shared pools (`[[pool]]`): each is checked once as a pool of its own, and once more against
//! every service that names it, since one pool may serve services of several modes. A name means
//! one pool: a top-level pool's name is no service's and no service's own pool's. A pool no
//! service names is allowed: it is checked and shown, ready for a service to name it.

use std::collections::HashMap;

use super::{Report, Seg, path, plain_name, validate_outlier, validate_pool, validate_recovery};
use crate::config::schema::{Config, Mode, Pool, PoolSettings, Service};

/// Every `[[pool]]` of `config`: its name, its settings as a pool, and what its users need of it.
pub(super) fn validate_shared(config: &Config, report: &mut Report<'_>) {
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (k, pool) in config.pools.iter().enumerate() {
        let at = [Seg::Key("pool"), Seg::Index(k)];
        let name_at = path(&at, &[Seg::Key("name")]);
        if !plain_name(&pool.name) {
            report.error(&name_at, format!("pool name {:?} is not a plain name", pool.name), "use letters, digits, '-', '_' and '.'");
        }
        if let Some(first) = names.insert(&pool.name, k) {
            report.error(&name_at, format!("pool name {:?} is used twice (also by pool #{})", pool.name, first + 1), "give every [[pool]] its own name");
        }
        if config.services.iter().any(|s| s.name == pool.name) {
            report.error(&name_at, format!("pool name {:?} is also a service's: the stats and the API name both by it", pool.name), "give the pool a name no service has");
        }
        validate_recovery(pool.slow_start, pool.damping.as_ref(), &at, report);
        validate_outlier(pool.panic_threshold, pool.outlier.as_ref(), &at, report);
        let settings = config.shared_pool(pool);
        validate_pool(&settings, true, &at, report);
        if pool.servers.is_empty() {
            report.error(&name_at, format!("pool {:?} has no servers", pool.name), "add at least one [[pool.server]] with an address");
        }
        if config.fleet.is_some() {
            report.error(&name_at, "[[pool]] is in a file with [fleet]: a fleet's services and their pools come from etcd".into(), "give each service its own [[service.pool]]");
        }
        for (i, service) in config.services.iter().enumerate() {
            if service.shared_names().any(|n| n == pool.name) {
                validate_user(pool, &settings, service, i, report);
            }
        }
    }
}

/// What `service` needs of the shared `pool` it names, beyond what the pool's own mode
/// (`settings`, HTTP when any user is) was checked for: reported where the service names it.
fn validate_user(pool: &Pool, settings: &PoolSettings, service: &Service, i: usize, report: &mut Report<'_>) {
    let routed = service.routes.iter().position(|r| r.pool.as_deref() == Some(pool.name.as_str()));
    let at = match (service.default_pool.as_deref() == Some(pool.name.as_str()), routed) {
        (true, _) | (false, None) => vec![Seg::Key("service"), Seg::Index(i), Seg::Key("default_pool")],
        (false, Some(r)) => vec![Seg::Key("service"), Seg::Index(i), Seg::Key("route"), Seg::Index(r), Seg::Key("pool")],
    };
    let who = format!("service {:?} (mode = \"{}\") uses pool {:?}", service.name, service.mode.as_str(), pool.name);
    if !pool.algorithm.serves(service.mode) {
        report.error(
            &at,
            format!("{who}, whose algorithm {} reads HTTP requests", pool.algorithm.as_str()),
            "pick another algorithm for the pool, or use it from HTTP services only",
        );
    }
    if service.mode == Mode::Http && pool.algorithm == crate::config::Algorithm::HeaderHash && service.http.hash_header.is_none() {
        report.error(&at, format!("{who}, whose algorithm header-hash needs the service's [service.http] hash_header"), "e.g. hash_header = \"x-user\"");
    }
    if service.mode != Mode::Http && !pool.protocol.is_http1() {
        report.error(&at, format!("{who}, whose servers speak protocol = \"h2\": only an HTTP service sends them requests"), "use the pool from HTTP services only");
    }
    if service.mode != settings.mode && pool.server_tls.is_some() {
        report.error(&at, format!("{who}, whose server_tls offers the ALPN of one mode, but its services are both TCP and HTTP"), "give the TCP and the HTTP services a pool each");
    }
    if service.mode == Mode::Tcp && routed.is_some() && pool.server_tls.is_some() {
        report.error(&at, format!("{who} from a route, which passes the client's TLS through; server_tls would wrap it in a second session"), "remove server_tls from the pool");
    }
    if service.mode == Mode::Http && (pool.proxy_protocol.is_some() || pool.servers.iter().any(|s| s.proxy_protocol.is_some())) {
        report.error(
            &at,
            format!("{who}, which sends a PROXY header: in HTTP mode a server connection carries the requests of many clients"),
            "use the pool from TCP services only, or remove proxy_protocol",
        );
    }
}
