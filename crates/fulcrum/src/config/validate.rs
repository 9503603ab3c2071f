//! Checks that serde's types cannot express, each reported at the place in the file it concerns.

mod shared;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::Algorithm;
use super::Resolve;
use super::diagnostic::{Diagnostic, Diagnostics, line_col};
use super::error::AddressError;
use super::range::{self, Range, Shown};
use super::schema::{
    Conditions, Config, Counted, Damping, FastPath, Fleet, Health, HealthKind, Limit, LimitAction, LimitKey, LimitStore, Mode, Outlier, Pool, PoolSettings, Route, Server, Service,
    Tls,
};

mod acme;
mod kernel;
mod process;

/// One step of a path into the document: a key, or an index into an array of tables.
#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Finds the line and column of a path in the parsed document, falling back to the deepest part of
/// the path that exists (a missing key is reported at its table).
struct Locator<'t> {
    text: &'t str,
    root: Option<Spanned<DeValue<'t>>>,
}

impl<'t> Locator<'t> {
    fn new(text: &'t str) -> Self {
        let root = DeTable::parse(text).ok().map(|t| {
            let span = t.span();
            Spanned::new(span, DeValue::Table(t.into_inner()))
        });
        Locator { text, root }
    }

    fn locate(&self, path: &[Seg<'_>]) -> (usize, usize) {
        let Some(root) = &self.root else { return (1, 1) };
        let mut node = root;
        let mut best = 0;
        for seg in path {
            let next = match seg {
                Seg::Key(k) => node.get_ref().get(*k),
                Seg::Index(i) => node.get_ref().get(*i),
            };
            match next {
                Some(n) => {
                    node = n;
                    best = n.span().start;
                }
                None => break,
            }
        }
        line_col(self.text, best)
    }
}

struct Report<'t> {
    file: &'t str,
    locator: Locator<'t>,
    out: Vec<Diagnostic>,
    resolve: Resolve,
    /// The services of the running config, by name, when this one is to replace it: what it has
    /// already (a server address resolved, a service's certificates loaded) is not looked up
    /// again here; the generation's build checks what changed (`live::build`).
    running: HashMap<&'t str, &'t Service>,
    /// Every server address of the running config.
    known: std::collections::HashSet<&'t str>,
    /// Whether the services run on this instance alone or in a fleet.
    scope: super::Scope,
}

impl Report<'_> {
    /// Whether the running config has a server at `address` already.
    fn resolved_already(&self, address: &str) -> bool {
        self.known.contains(address)
    }

    /// Whether the running config's service of that name terminates TLS exactly so.
    fn tls_loaded_already(&self, service: &Service) -> bool {
        self.running.get(service.name.as_str()).is_some_and(|s| s.terminates_tls_as(service))
    }
}

impl Report<'_> {
    fn error(&mut self, path: &[Seg<'_>], message: String, hint: &str) {
        // A config built in memory (an API edit) has no text to point into: the key's path says
        // where instead, e.g. `service[2].server[0].weight: ...`.
        let (line, column, message) = if self.locator.text.is_empty() {
            (0, 0, format!("{}: {message}", key_path(path)))
        } else {
            let (line, column) = self.locator.locate(path);
            (line, column, message)
        };
        self.out.push(Diagnostic { file: self.file.into(), line, column, message, hint: (!hint.is_empty()).then(|| hint.to_string()) });
    }

    /// Reports `key = value` when it is outside `range`, naming the range and why it ends there.
    fn range<T: Shown + PartialOrd + Copy>(&mut self, path: &[Seg<'_>], key: &str, value: T, range: &Range<T>) {
        if !range.contains(value) {
            self.error(path, format!("{key} = {} is out of range: use {range}", value.shown()), range.why);
        }
    }
}

/// `a.b[0].c` for a path.
fn key_path(path: &[Seg<'_>]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// `[fleet]`: where etcd is, and what this instance keeps for itself. The services come from etcd,
/// so a file with both is refused rather than one of them ignored.
fn validate_fleet(report: &mut Report<'_>, config: &Config, fleet: &Fleet) {
    let at = |key| [Seg::Key("fleet"), Seg::Key(key)];
    if let Some(first) = config.services.first() {
        report.error(
            &[Seg::Key("service"), Seg::Index(0), Seg::Key("name")],
            format!("service {:?} is in a file with [fleet]: a fleet's services come from etcd", first.name),
            "move them there with `fulcrum fleet import FILE`, and keep only per-instance settings here ([fleet.override.NAME])",
        );
    }
    if fleet.endpoints.is_empty() {
        report.error(&at("endpoints"), "fleet endpoints is empty".into(), "list etcd's client URLs, e.g. [\"http://127.0.0.1:2379\"]");
    }
    for e in &fleet.endpoints {
        let Some(rest) = e.strip_prefix("http://").or_else(|| e.strip_prefix("https://")) else {
            report.error(&at("endpoints"), format!("fleet endpoint {e:?} is not an http:// or https:// URL"), "write etcd's client URL, e.g. \"http://10.0.0.5:2379\"");
            continue;
        };
        let authority = rest.trim_end_matches('/');
        let port = authority.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
        if authority.is_empty() || authority.contains('/') || port.is_none_or(|p| p == 0) {
            report.error(&at("endpoints"), format!("fleet endpoint {e:?} does not name a host and port"), "write scheme://host:port, e.g. \"http://10.0.0.5:2379\"");
        }
    }
    if !fleet.prefix.starts_with('/') || fleet.prefix.ends_with('/') || fleet.prefix.contains("//") {
        report.error(&at("prefix"), format!("fleet prefix {:?} must start with '/' and not end with one", fleet.prefix), "e.g. \"/fulcrum/prod\"");
    }
    if let Some(name) = &fleet.name
        && !plain_name(name)
    {
        report.error(&at("name"), format!("fleet name {name:?} is not a plain name"), "use letters, digits, '-', '_' and '.'");
    }
    if fleet.user.is_some() != fleet.password_file.is_some() {
        report.error(&at("user"), "fleet user and password_file go together".into(), "set both for etcd's authentication, or neither");
    }
    for (key, file) in [("password_file", &fleet.password_file), ("ca", &fleet.ca)] {
        if let Some(file) = file
            && let Err(e) = std::fs::metadata(file)
        {
            report.error(&at(key), format!("cannot read fleet {key} {file}: {e}"), "check the path and its permissions");
        }
    }
    if fleet.ca.is_some() && !fleet.endpoints.iter().any(|e| e.starts_with("https://")) {
        report.error(&at("ca"), "fleet ca is set but no endpoint is https://".into(), "use https:// endpoints, or leave ca out");
    }
    report.range(&at("lease"), "lease", fleet.lease, &range::FLEET_LEASE);
    for (service, table) in &fleet.overrides {
        for key in table.keys() {
            if matches!(key.as_str(), "name" | "server" | "pool" | "route") {
                report.error(
                    &[Seg::Key("fleet"), Seg::Key("override"), Seg::Key(service), Seg::Key(key)],
                    format!("{key} of service {service:?} cannot be overridden per instance"),
                    "an override holds settings such as listen; servers, pools and routes are the fleet's",
                );
            }
        }
    }
}

fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Every problem in `config` beyond its types; `text` is the file it was parsed from.
pub fn validate(config: &Config, text: &str, file: &str, resolve: Resolve) -> Diagnostics {
    validate_against(config, text, file, resolve, None)
}

/// `validate`, for a config that replaces `running`: see `Report::running`.
pub fn validate_against(config: &Config, text: &str, file: &str, resolve: Resolve, running: Option<&Config>) -> Diagnostics {
    validate_in(config, text, file, resolve, running, super::Scope::Instance)
}

/// `validate_against`, for a config whose services run in `scope`.
pub fn validate_in(config: &Config, text: &str, file: &str, resolve: Resolve, running: Option<&Config>, scope: super::Scope) -> Diagnostics {
    let services = running.iter().flat_map(|r| &r.services);
    let shared = running.iter().flat_map(|r| &r.pools).flat_map(|p| &p.servers);
    let known = services.clone().flat_map(|s| s.servers.iter().chain(s.pools.iter().flat_map(|p| &p.servers))).chain(shared).map(|s| s.address.as_str()).collect();
    let running = services.map(|s| (s.name.as_str(), s)).collect();
    let mut report = Report { file, locator: Locator::new(text), out: Vec::new(), resolve, running, known, scope };
    if let Some(admin) = &config.admin {
        match admin.tcp_listen().map(|l| (l.parse::<SocketAddr>(), l)) {
            Some((Err(_), listen)) => report.error(
                &[Seg::Key("admin"), Seg::Key("listen")],
                format!("admin listen address {listen:?} is not ip:port"),
                "write an IP address and port, e.g. \"127.0.0.1:9090\"",
            ),
            Some((Ok(addr), _)) if !addr.ip().is_loopback() && !admin.has_auth() => report.error(
                &[Seg::Key("admin"), Seg::Key("listen")],
                format!("admin listen address {addr} is not a loopback address and no authentication is configured"),
                "set token_file, or user and password_hash (fulcrum hash-password), or listen on 127.0.0.1",
            ),
            _ => {}
        }
        process::validate_socket(admin, &mut report);
    }
    process::validate_user(config, &mut report);
    if let Some(admin) = &config.admin {
        if admin.password_hash.is_some() != admin.user.is_some() {
            report.error(&[Seg::Key("admin"), Seg::Key("user")], "user and password_hash go together".into(), "set both for HTTP basic authentication");
        }
        if admin.password_hash.as_ref().is_some_and(|h| !h.starts_with("$argon2")) {
            report.error(&[Seg::Key("admin"), Seg::Key("password_hash")], "password_hash is not an Argon2 PHC string".into(), "make one with: fulcrum hash-password");
        }
        if let Some(file) = &admin.token_file {
            match std::fs::read_to_string(file) {
                Ok(t) if t.trim().len() >= 16 => {}
                Ok(_) => report.error(
                    &[Seg::Key("admin"), Seg::Key("token_file")],
                    format!("the token in {file} is shorter than 16 characters"),
                    "use a long random token, e.g. openssl rand -hex 32",
                ),
                Err(e) => report.error(&[Seg::Key("admin"), Seg::Key("token_file")], format!("cannot read token_file {file}: {e}"), "check the path and its permissions"),
            }
        }
    }
    if let Some(fleet) = &config.fleet {
        validate_fleet(&mut report, config, fleet);
    }
    if let Some(dns) = &config.dns {
        let at = [Seg::Key("dns"), Seg::Key("nameservers")];
        if dns.nameservers.is_empty() || dns.nameservers.len() > 8 {
            report.error(&at, format!("dns nameservers has {} entries", dns.nameservers.len()), "list 1 to 8 nameservers as \"ip:port\", or leave [dns] out for the system's");
        }
        for ns in dns.nameservers.iter().filter(|ns| ns.parse::<SocketAddr>().is_err()) {
            report.error(&at, format!("nameserver {ns:?} is not ip:port"), "e.g. \"10.0.0.2:53\"");
        }
    }
    if let Some(audit) = &config.audit {
        report.range(&[Seg::Key("audit"), Seg::Key("max_size")], "max_size", audit.max_size, &range::AUDIT_MAX_SIZE);
        report.range(&[Seg::Key("audit"), Seg::Key("keep")], "keep", audit.keep, &range::AUDIT_KEEP);
        if audit.file.trim().is_empty() {
            report.error(
                &[Seg::Key("audit"), Seg::Key("file")],
                "audit file is empty".to_string(),
                "name the file the audit log is written to, e.g. \"/var/log/fulcrum/audit.log\"",
            );
        }
    }
    report.range(&[Seg::Key("workers")], "workers", config.workers, &range::WORKERS);
    if let Some(maxconn) = config.maxconn {
        report.range(&[Seg::Key("maxconn")], "maxconn", maxconn, &range::PROCESS_MAXCONN);
    }
    report.range(&[Seg::Key("shutdown_grace")], "shutdown_grace", config.shutdown_grace, &range::SHUTDOWN_GRACE);
    if !config.resolve_interval.is_zero() {
        report.range(&[Seg::Key("resolve_interval")], "resolve_interval", config.resolve_interval, &range::RESOLVE_INTERVAL);
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut listens: HashMap<SocketAddr, usize> = HashMap::new();
    let mut tables: HashMap<&str, (usize, Vec<Seg<'_>>)> = HashMap::new();
    for (i, service) in config.services.iter().enumerate() {
        let at = |key| [Seg::Key("service"), Seg::Index(i), Seg::Key(key)];
        if !plain_name(&service.name) {
            report.error(&at("name"), format!("service name {:?} is not a plain name", service.name), "use letters, digits, '-', '_' and '.'");
        }
        if let Some(first) = names.insert(&service.name, i) {
            report.error(&at("name"), format!("service name {:?} is used twice (also by service #{})", service.name, first + 1), "give every service its own name");
        }
        match service.listen.parse::<SocketAddr>() {
            Err(_) => {
                report.error(&at("listen"), format!("listen address {:?} is not ip:port", service.listen), "write an IP address and port, e.g. \"0.0.0.0:8080\" or \"[::1]:8080\"")
            }
            Ok(addr) => {
                if addr.port() == 0 {
                    report.error(&at("listen"), format!("listen address {addr} has port 0"), "choose a fixed port");
                }
                if let Some(first) = listens.insert(addr, i) {
                    report.error(
                        &at("listen"),
                        format!("listen address {addr} is used by service {:?} too", config.services[first].name),
                        "every service needs its own address and port",
                    );
                }
            }
        }
        validate_service_numbers(service, &[Seg::Key("service"), Seg::Index(i)], &mut report);
        validate_edge(service, &[Seg::Key("service"), Seg::Index(i)], &mut report);
        validate_service(service, &[Seg::Key("service"), Seg::Index(i)], &mut report);
        validate_routing(service, i, &config.pools, &mut report);
        acme::validate_acme(config, i, service, &mut report);
        if service.mode == Mode::Kernel {
            kernel::validate_kernel(config, i, service, &mut report);
        }
        let limits = service.limits.iter().enumerate().map(|(k, l)| (l, vec![Seg::Key("service"), Seg::Index(i), Seg::Key("limit"), Seg::Index(k)], false));
        let routed = service.routes.iter().enumerate().flat_map(|(r, route)| {
            route
                .limits
                .iter()
                .enumerate()
                .map(move |(k, l)| (l, vec![Seg::Key("service"), Seg::Index(i), Seg::Key("route"), Seg::Index(r), Seg::Key("limit"), Seg::Index(k)], true))
        });
        for (limit, at, on_route) in limits.chain(routed) {
            validate_limit(service, limit, on_route, &at, &mut report);
            if let Some(first) = tables.insert(&limit.name, (i, at.clone())) {
                report.error(
                    &path(&at, &[Seg::Key("name")]),
                    format!("limit name {:?} is used twice (also in service {:?})", limit.name, config.services[first.0].name),
                    "every limit is a table of its own, named in the API and the metrics: give each its own name",
                );
            }
        }
    }
    shared::validate_shared(config, &mut report);
    Diagnostics(report.out)
}

/// What each pool has: its servers, algorithm and health check (a service's own servers are its
/// first pool; routed pools are checked as the services they run as).
/// A service's own servers as a pool, and where else its servers may come from (`srv`).
fn validate_service(service: &Service, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |key| path(prefix, &[Seg::Key(key)]);
    if let Some(name) = &service.srv
        && (name.is_empty()
            || name.len() > 253
            || !name.split('.').all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')))
    {
        report.error(&at("srv"), format!("srv {name:?} is not a DNS name"), "e.g. \"_http._tcp.web.example\"");
    }
    validate_pool(&service.own_pool(), service.default_pool.is_some() || service.srv.is_some(), prefix, report);
}

/// What a pool needs of its own: the service's own servers or a routed pool's. `may_be_empty`: the
/// service's own servers when a default pool or SRV records stand in for them.
fn validate_pool(pool: &PoolSettings, may_be_empty: bool, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |key| path(prefix, &[Seg::Key(key)]);
    validate_pool_numbers(pool, prefix, report);
    let health = &pool.health;
    let hat = |key| path(prefix, &[Seg::Key("health"), Seg::Key(key)]);
    if health.kind == HealthKind::Http && (!health.path.starts_with('/') || health.path.chars().any(|c| c.is_whitespace() || c.is_control())) {
        report.error(&hat("path"), format!("health path {:?} is not an absolute path", health.path), "e.g. \"/index.html\"");
    }
    // Kernel mode names the algorithms it can run itself (`kernel.rs`).
    if !pool.algorithm.serves(pool.mode) && pool.mode != Mode::Kernel {
        report.error(
            &at("algorithm"),
            format!("algorithm {} needs mode = \"http\"", pool.algorithm.as_str()),
            "it reads the request; set mode = \"http\" or pick another algorithm",
        );
    }
    if pool.algorithm == Algorithm::HeaderHash && pool.http.hash_header.is_none() {
        report.error(&at("algorithm"), "algorithm header-hash needs [service.http] hash_header".into(), "e.g. hash_header = \"x-user\"");
    }
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (j, server) in pool.servers.iter().enumerate() {
        let id = server.cookie_id();
        if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') || id.is_empty() {
            report.error(
                &path(prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key("id")]),
                format!("server id {id:?} is not plain"),
                "use letters, digits, '-' and '_' (it goes into a cookie)",
            );
        }
        if let Some(first) = ids.insert(id.clone(), j) {
            report.error(
                &path(prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key("id")]),
                format!("server id {id:?} is also server #{}'s", first + 1),
                "give every server its own id",
            );
        }
    }
    if let Some(tls) = &pool.server_tls {
        let sat = |key| path(prefix, &[Seg::Key("server_tls"), Seg::Key(key)]);
        if pool.mode == Mode::Ftp {
            report.error(&path(prefix, &[Seg::Key("server_tls")]), "server_tls is for mode = \"tcp\" and \"http\"".into(), "FTP over TLS is not supported: remove server_tls");
        } else if let Err(e) = crate::tls::policy::policy(tls.protocols(), crate::tls::provider()) {
            report.error(&sat(e.key()), format!("server_tls: {e}"), POLICY_HINT);
        } else if let Err(e) = crate::tls::origin::Originator::load(tls, pool.mode == Mode::Http, pool.protocol == crate::config::ServerProtocol::H2) {
            let key = if e.file == "sni" { "sni" } else { "ca" };
            report.error(&sat(key), format!("server_tls: {e}"), "ca is a PEM file of CA certificates (unset: the system's roots); sni a DNS name or IP address");
        }
    }
    if !pool.protocol.is_http1() && pool.mode != Mode::Http {
        report.error(&at("protocol"), "protocol = \"h2\" is for mode = \"http\": it is how requests go to the servers".into(), "remove protocol, or set mode = \"http\"");
    }
    if health.kind == HealthKind::Grpc && (pool.mode != Mode::Http || pool.protocol.is_http1()) {
        report.error(
            &hat("kind"),
            "kind = \"grpc\" speaks HTTP/2 to the servers, but the pool is not mode = \"http\" with protocol = \"h2\"".into(),
            "set protocol = \"h2\" for gRPC servers, or use kind = \"tcp\"",
        );
    }
    if health.grpc_service.chars().count() > 200 || health.grpc_service.chars().any(char::is_control) {
        report.error(
            &hat("grpc_service"),
            "grpc_service is at most 200 characters, none of them control characters".into(),
            "e.g. \"fulcrum.Echo\", or empty for the whole server",
        );
    }
    validate_check_options(health, prefix, report);
    if health.kind == HealthKind::Ftp && pool.mode != Mode::Ftp {
        report.error(&hat("kind"), "kind = \"ftp\" checks an FTP server, but the service is not mode = \"ftp\"".into(), "use kind = \"tcp\" or \"http\"");
    }
    if pool.servers.is_empty() && !may_be_empty {
        report.error(&at("name"), format!("service {:?} has no servers", pool.name), "add at least one [[service.server]] with an address, or srv");
    }
    for (j, server) in pool.servers.iter().enumerate() {
        let sat = |key| path(prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key(key)]);
        let lookup = report.resolve == Resolve::Yes && !report.resolved_already(&server.address);
        let checked = if lookup { resolve_server(server).map(|_| ()) } else { split_host_port(&server.address).map(|_| ()) };
        if let Err(e) = checked {
            report.error(&sat("address"), e.to_string(), "write host:port or ip:port of a reachable real server");
        }
    }
    for (j, server) in pool.servers.iter().enumerate() {
        let sat = |key| path(prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key(key)]);
        if server.proxy_protocol.is_some() && pool.mode == Mode::Http {
            proxy_protocol_in_http(&sat("proxy_protocol"), report);
        }
        match server.sni.as_deref().map(crate::tls::origin::name) {
            Some(_) if pool.server_tls.is_none() => {
                report.error(
                    &sat("sni"),
                    "a server's sni is the name sent to it in TLS, but its pool has no server_tls".into(),
                    "add [service.server_tls] (or the pool's), or remove sni",
                );
            }
            Some(Err(e)) => report.error(&sat("sni"), e.to_string(), "a DNS name or an IP address"),
            _ => {}
        }
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (j, server) in pool.servers.iter().enumerate() {
        if seen.insert(&server.address, j).is_some() {
            let sat = path(prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key("address")]);
            report.error(&sat, format!("server {} is listed twice", server.address), "list each real server once; use weight for a larger share");
        }
    }
}

/// What a service has once, whatever its pools: the client side (TLS, PROXY protocol, the HTTP
/// settings) and the mode's own settings. Run once per service, so a problem is reported once.
fn validate_edge(service: &Service, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |key| path(prefix, &[Seg::Key(key)]);
    let token = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.!#$%&'*+^`|~".contains(&b));
    if !token(&service.http.cookie) {
        report.error(
            &path(prefix, &[Seg::Key("http"), Seg::Key("cookie")]),
            format!("cookie name {:?} is not a cookie name", service.http.cookie),
            "use letters, digits, '-' and '_'",
        );
    }
    if service.http != crate::config::Http::default() && service.mode != Mode::Http {
        report.error(&path(prefix, &[Seg::Key("http")]), "[service.http] is only for mode = \"http\"".into(), "remove it, or set mode = \"http\"");
    }
    if let Some(fast) = service.fast_path.filter(|_| service.mode != Mode::Tcp) {
        report.error(
            &at("fast_path"),
            format!("fast_path = \"{}\" is only for mode = \"tcp\" (this service is mode = \"{}\")", fast.as_str(), service.mode.as_str()),
            "remove fast_path: HTTP and FTP read what they forward, so their bytes cannot bypass the process",
        );
    }
    if let Some(tls) = &service.tls {
        validate_tls(service, tls, prefix, report);
    }
    let hat_http = |key| path(prefix, &[Seg::Key("http"), Seg::Key(key)]);
    if let Some(hsts) = service.http.hsts {
        report.range(&hat_http("hsts"), "hsts", hsts, &range::HSTS);
        if service.tls.is_none() {
            report.error(
                &hat_http("hsts"),
                "hsts needs [service.tls]: browsers take Strict-Transport-Security only over HTTPS (RFC 6797)".into(),
                "set it on the service that terminates TLS",
            );
        }
    }
    if service.http.h2c && service.tls.is_some() {
        report.error(
            &hat_http("h2c"),
            "h2c is HTTP/2 without TLS: this service speaks TLS, where clients ask for HTTP/2 by ALPN".into(),
            "remove h2c (http2 = true offers HTTP/2 over TLS)",
        );
    }
    if service.http.http3 {
        validate_http3(service, &hat_http("http3"), report);
    }
    if service.http.redirect_https && service.tls.is_some() {
        report.error(
            &hat_http("redirect_https"),
            "redirect_https is for a plain-HTTP service: this one already speaks TLS".into(),
            "set it on the plain service that should send its clients to this one",
        );
    }
    if service.accept_proxy && service.trusted_proxies.is_empty() {
        report.error(
            &at("accept_proxy"),
            "accept_proxy needs trusted_proxies: a PROXY header from anyone could claim any client address".into(),
            "list the proxies' networks, e.g. trusted_proxies = [\"10.0.0.0/8\"]",
        );
    }
    if !service.accept_proxy && !service.trusted_proxies.is_empty() {
        report.error(&at("trusted_proxies"), "trusted_proxies without accept_proxy = true does nothing".into(), "set accept_proxy = true, or remove trusted_proxies");
    }
    if service.accept_proxy && service.mode == Mode::Ftp {
        report.error(
            &at("accept_proxy"),
            "accept_proxy is for mode = \"tcp\" and \"http\": FTP data connections would come from the proxy, not the client the header names".into(),
            "remove accept_proxy from the FTP service",
        );
    }
    if service.proxy_protocol.is_some() && service.mode == Mode::Http {
        proxy_protocol_in_http(&at("proxy_protocol"), report);
    }
    if service.data_ports.is_some() && service.mode != Mode::Ftp {
        report.error(&at("data_ports"), "data_ports is only for mode = \"ftp\"".into(), "remove it, or set mode = \"ftp\"");
    }
    if let Some(fast) = service.fast_path.filter(|f| service.server_tls.is_some() && *f != FastPath::Splice) {
        report.error(
            &at("fast_path"),
            format!("fast_path = \"{}\" cannot carry a TLS session to the servers: the bytes must pass through Fulcrum to be encrypted", fast.as_str()),
            "remove fast_path or server_tls",
        );
    }
}

/// `proxy_protocol` set (on a service, pool or server) in HTTP mode.
fn proxy_protocol_in_http(at: &[Seg<'_>], report: &mut Report<'_>) {
    report.error(
        at,
        "proxy_protocol is for mode = \"tcp\" and \"ftp\": in HTTP mode a server connection carries the requests of many clients".into(),
        "the servers learn the client from X-Forwarded-For or Forwarded ([service.http] forwarded_headers)",
    );
}

/// `[service.tls]`: where it applies, and whether its files load (the same loading a reload
/// does, so `check` refuses what a reload would).
fn validate_tls(service: &Service, tls: &Tls, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |keys: &[Seg<'static>]| path(prefix, &[&[Seg::Key("tls")][..], keys].concat());
    report.range(&at(&[Seg::Key("handshake_timeout")]), "handshake_timeout", tls.handshake_timeout, &range::HANDSHAKE_TIMEOUT);
    if service.mode == Mode::Ftp {
        report.error(&at(&[]), "[service.tls] is for mode = \"tcp\" and \"http\"".into(), "FTP over TLS (FTPS) is not supported: remove [service.tls] or use mode = \"tcp\"");
        return;
    }
    if let Some(fast) = service.fast_path.filter(|f| *f != FastPath::Splice) {
        report.error(
            &at(&[]),
            format!("fast_path = \"{}\" cannot carry a TLS session: the bytes must pass through Fulcrum to be decrypted", fast.as_str()),
            "remove fast_path, or terminate TLS on the servers",
        );
    }
    if tls.certificates.is_empty() && tls.acme.is_none() {
        report.error(&at(&[]), "[service.tls] has no certificate".into(), "add [[service.tls.certificate]] with cert and key (PEM files), or [service.tls.acme]");
        return;
    }
    if tls.strict_sni_host == Some(true) && service.mode != Mode::Http {
        report.error(
            &at(&[Seg::Key("strict_sni_host")]),
            "strict_sni_host compares a request's Host with the certificate: it is for mode = \"http\"".into(),
            "remove strict_sni_host: in TCP mode Fulcrum reads no Host",
        );
    }
    validate_client_auth(service, tls, &at(&[]), report);
    if let Err(e) = crate::tls::policy::policy(tls.protocols(), crate::tls::provider()) {
        report.error(&at(&[Seg::Key(e.key())]), format!("TLS: {e}"), POLICY_HINT);
        return;
    }
    if report.tls_loaded_already(service) {
        return;
    }
    if let Err(e) = crate::tls::Terminator::load(&service.name, tls, service.mode, service.http.http2, &service.acme_names()) {
        let culprit = tls.certificates.iter().position(|c| c.cert == e.file || c.key == e.file);
        let own_ca = tls.certificates.iter().position(|c| c.client_ca.as_ref() == Some(&e.file));
        let (seg, hint) = match (culprit, own_ca) {
            (Some(j), _) => (at(&[Seg::Key("certificate"), Seg::Index(j)]), "check the file: a PEM chain (leaf first) and its matching, unexpired key"),
            (None, Some(j)) => (at(&[Seg::Key("certificate"), Seg::Index(j), Seg::Key("client_ca")]), "client_ca is a PEM file of CA certificates"),
            (None, None) => (at(&[Seg::Key("client_ca")]), "client_ca is a PEM file of CA certificates"),
        };
        report.error(&seg, format!("TLS: {e}"), hint);
    }
}

/// `http3`: QUIC carries TLS 1.3 and HTTP only, and its handshake cannot pick a client-certificate
/// policy by the name the client asks for before it begins, as a TCP handshake does.
fn validate_http3(service: &Service, at: &[Seg<'_>], report: &mut Report<'_>) {
    let Some(tls) = &service.tls else {
        return report.error(at, "http3 runs over QUIC, which is always encrypted: it needs [service.tls]".into(), "add [service.tls], or remove http3");
    };
    if service.mode != Mode::Http {
        report.error(at, "http3 serves HTTP requests: it is for mode = \"http\"".into(), "set mode = \"http\", or remove http3");
    }
    if tls.max_version == Some(crate::config::TlsVersion::V1_2) {
        report.error(at, "http3 needs TLS 1.3 (QUIC has no TLS 1.2), and max_version is 1.2".into(), "remove max_version, or remove http3");
    }
    if tls.client_ca.is_some() || tls.certificates.iter().any(|c| c.client_ca.is_some()) {
        report.error(at, "http3 does not take client certificates (client_ca) yet".into(), "serve the names that require client certificates on a service without http3");
    }
}

const POLICY_HINT: &str = "min_version and max_version are \"1.2\" or \"1.3\"; cipher_suites names suites as rustls or IANA spell them, one at least for each version allowed";

/// Per-certificate `client_ca` and `client_auth` (at `tls`, the service's `[service.tls]`):
/// each says something, and names that ask for different client certificates are only offered
/// where a client cannot pick the name that asks least and reach the same place.
fn validate_client_auth(service: &Service, tls: &Tls, at: &[Seg<'_>], report: &mut Report<'_>) {
    use super::schema::ClientAuth;
    for (j, cert) in tls.certificates.iter().enumerate() {
        let key = |k| path(at, &[Seg::Key("certificate"), Seg::Index(j), Seg::Key(k)]);
        match cert.client_auth {
            Some(ClientAuth::Required) if tls.client_ca_of(cert).is_none() => {
                report.error(&key("client_auth"), "client_auth = \"required\" with no client_ca to verify against".into(), "set client_ca on this certificate or on [service.tls]")
            }
            Some(ClientAuth::None) if cert.client_ca.is_some() => {
                report.error(&key("client_auth"), "client_auth = \"none\" beside this certificate's own client_ca".into(), "remove one of them")
            }
            _ => {}
        }
    }
    let first = tls.certificates.first().map(|c| tls.client_ca_of(c));
    if tls.certificates.iter().all(|c| Some(tls.client_ca_of(c)) == first) {
        return;
    }
    if service.mode != Mode::Http {
        report.error(
            at,
            "the certificates ask for different client certificates, but in mode = \"tcp\" every name reaches the same servers: a client would send the name that asks least"
                .into(),
            "set one client_ca on [service.tls], or put the names in services of their own",
        );
    } else if tls.strict_sni_host == Some(false) {
        report.error(
            &path(at, &[Seg::Key("strict_sni_host")]),
            "strict_sni_host = false while the certificates ask for different client certificates: a request could send one name by SNI and another as Host, skipping that name's check".into(),
            "remove strict_sni_host (on by default here)",
        );
    }
}

/// The numbers a service has once (its pools share them) against their ranges in `range.rs`.
/// Every number is checked whatever the mode or check kind, so a value is never accepted only to
/// break the day the setting starts to matter.
fn validate_service_numbers(service: &Service, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |keys: &[&'static str]| path(prefix, &keys.iter().map(|k| Seg::Key(k)).collect::<Vec<_>>());
    validate_recovery(Some(service.slow_start), Some(&service.damping), prefix, report);
    validate_outlier(Some(service.panic_threshold), service.outlier.as_ref(), prefix, report);
    report.range(&at(&["connect_timeout"]), "connect_timeout", service.connect_timeout, &range::CONNECT_TIMEOUT);
    report.range(&at(&["client_timeout"]), "client_timeout", service.client_timeout, &range::IDLE_TIMEOUT);
    report.range(&at(&["server_timeout"]), "server_timeout", service.server_timeout, &range::IDLE_TIMEOUT);
    report.range(&at(&["queue_timeout"]), "queue_timeout", service.queue_timeout, &range::QUEUE_TIMEOUT);
    report.range(&at(&["failure_limit"]), "failure_limit", service.failure_limit, &range::FAILURE_LIMIT);
    report.range(&at(&["retries"]), "retries", service.retries, &range::RETRIES);
    report.range(&at(&["maxconn"]), "maxconn", service.maxconn, &range::MAXCONN);
    if let Some(ports) = service.data_ports {
        // The parser already refused a range that is empty or starts at 0.
        report.range(&at(&["data_ports"]), "data_ports' first port", ports.first, &range::DATA_PORT);
    }
    let http = &service.http;
    report.range(&at(&["http", "head_timeout"]), "head_timeout", http.head_timeout, &range::HEAD_TIMEOUT);
    report.range(&at(&["http", "response_timeout"]), "response_timeout", http.response_timeout, &range::RESPONSE_TIMEOUT);
    if let Some(d) = http.queue_timeout {
        report.range(&at(&["http", "queue_timeout"]), "queue_timeout", d, &range::QUEUE_TIMEOUT);
    }
    report.range(&at(&["http", "keepalive_idle"]), "keepalive_idle", http.keepalive_idle, &range::KEEPALIVE_IDLE);
    report.range(&at(&["http", "max_headers"]), "max_headers", http.max_headers, &range::MAX_HEADERS);
    report.range(&at(&["http", "max_head_size"]), "max_head_size", http.max_head_size, &range::MAX_HEAD_SIZE);
    report.range(&at(&["http", "max_uri_length"]), "max_uri_length", http.max_uri_length, &range::MAX_URI_LENGTH);
    report.range(&at(&["http", "max_request_body"]), "max_request_body", http.max_request_body, &range::MAX_REQUEST_BODY);
    report.range(&at(&["http", "max_streams"]), "max_streams", http.max_streams, &range::MAX_STREAMS);
    report.range(&at(&["http", "alt_svc_max_age"]), "alt_svc_max_age", http.alt_svc_max_age, &range::ALT_SVC_MAX_AGE);
    report.range(&at(&["http", "quic_retry_above"]), "quic_retry_above", http.quic_retry_above, &range::QUIC_RETRY_ABOVE);
    if let Some(r) = &http.retry {
        let rat = |key| at(&["http", "retry", key]);
        report.range(&rat("count"), "count", r.count, &range::RETRY_COUNT);
        if let Some(t) = r.per_try_timeout {
            report.range(&rat("per_try_timeout"), "per_try_timeout", t, &range::RESPONSE_TIMEOUT);
        }
        report.range(&rat("budget_percent"), "budget_percent", r.budget_percent, &range::PERCENT);
        report.range(&rat("min_retries_per_second"), "min_retries_per_second", r.min_retries_per_second, &range::MIN_RETRIES);
        report.range(&rat("budget_window"), "budget_window", r.budget_window, &range::BUDGET_WINDOW);
        if r.retry_on.is_empty() {
            report.error(&rat("retry_on"), "retry_on names nothing to retry".into(), "e.g. retry_on = [\"502\", \"503\", \"504\", \"reset\", \"connect-failure\"]");
        }
        if service.mode != Mode::Http {
            report.error(&rat("retry_on"), "[service.http.retry] retries HTTP requests".into(), "set mode = \"http\", or use retries (connect failures) in TCP mode");
        }
    }
    validate_error_pages(&http.error_pages, &at(&["http", "error_pages"]), report);
    // The id header is set on every request the server gets: a name that is not one would leave
    // requests without it unnoticed, and one that frames the message could split a request.
    if let Some(name) = http.request_id.as_deref().filter(|n| hyper::header::HeaderName::from_bytes(n.as_bytes()).is_err() || is_framing(n)) {
        report.error(
            &at(&["http", "request_id"]),
            format!("request_id {name:?} cannot carry a request's id"),
            "a header name that does not frame the message, e.g. \"X-Request-Id\"",
        );
    }
    if let Some(syslog) = &http.syslog {
        let key = |k: &'static str| at(&["http", "syslog", k]);
        if syslog.address.is_some() == syslog.socket.is_some() {
            report.error(&at(&["http", "syslog"]), "syslog needs one receiver: an address or a socket".into(), "address = \"127.0.0.1:514\" (UDP) or socket = \"/dev/log\"");
        }
        // A Unix socket's path fits in sun_path's 108 bytes with its NUL.
        if let Some(path) = syslog.socket.as_ref().filter(|p| p.as_os_str().len() > 107) {
            report.error(&key("socket"), format!("socket {} is longer than a Unix socket's path can be", path.display()), "at most 107 bytes");
        }
        if syslog.tag.is_empty() || syslog.tag.len() > 48 || !syslog.tag.bytes().all(|b| b.is_ascii_graphic()) {
            report.error(&key("tag"), format!("tag {:?} cannot be a syslog APP-NAME", syslog.tag), "1 to 48 visible ASCII characters, e.g. \"fulcrum\"");
        }
    }
    if let Some(tracing) = &http.tracing {
        validate_tracing(tracing, &at(&["http", "tracing"]), report);
    }
    if let Some(compression) = &http.compression {
        validate_compression(compression, &at(&["http", "compression"]), report);
    }
    if http.trusted_forwarders.len() > MAX_LIST {
        report.error(&at(&["http", "trusted_forwarders"]), format!("trusted_forwarders has {} networks", http.trusted_forwarders.len()), &format!("at most {MAX_LIST}"));
    }
}

/// The most bytes a check or an agent is told to send (`send`).
const MAX_SEND: usize = 1024;

/// What a check's options say beyond their numbers: each belongs to the kinds that use it, and
/// every text is one a request or a read can carry.
fn validate_check_options(health: &Health, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let hat = |key| path(prefix, &[Seg::Key("health"), Seg::Key(key)]);
    let method_ok = (1..=16).contains(&health.method.len()) && health.method.bytes().all(|b| b.is_ascii_uppercase());
    if !method_ok {
        report.error(&hat("method"), format!("method {:?} is not an HTTP method", health.method), "1 to 16 capital letters, e.g. \"HEAD\" or \"OPTIONS\"");
    } else if health.method != "GET" && health.kind != HealthKind::Http {
        report.error(&hat("method"), "method is for kind = \"http\"".into(), "remove method, or set kind = \"http\"");
    }
    if health.method == "HEAD" && health.expect_text.is_some() {
        report.error(&hat("expect_text"), "an answer to HEAD has no body to find expect_text in".into(), "use method = \"GET\", or remove expect_text");
    }
    if let Some(host) = &health.host {
        if host.is_empty() || host.len() > 255 || !host.bytes().all(|b| b.is_ascii_graphic()) {
            report.error(&hat("host"), format!("host {host:?} cannot be a Host header"), "1 to 255 visible characters, e.g. \"www.example.com\"");
        } else if health.kind != HealthKind::Http {
            report.error(&hat("host"), "host is for kind = \"http\"".into(), "remove host, or set kind = \"http\"");
        }
    }
    if let Some(send) = &health.send {
        if health.kind != HealthKind::Tcp {
            report.error(&hat("send"), "send is for kind = \"tcp\"".into(), "remove send, or set kind = \"tcp\"");
        } else if send.len() > MAX_SEND {
            report.error(&hat("send"), format!("send is {} bytes", send.len()), &format!("at most {MAX_SEND}"));
        }
    }
    if let Some(text) = &health.expect_text
        && health.kind == HealthKind::Tcp
        && (text.is_empty() || text.len() > crate::config::TCP_EXPECT_MAX)
    {
        report.error(
            &hat("expect_text"),
            format!("expect_text is {} bytes: a TCP check reads at most {}", text.len(), crate::config::TCP_EXPECT_MAX),
            "a text the server's first bytes contain, e.g. \"+PONG\"",
        );
    }
    if let Some(send) = health.agent.as_ref().and_then(|a| a.send.as_ref()).filter(|s| s.len() > MAX_SEND) {
        report.error(&path(prefix, &[Seg::Key("health"), Seg::Key("agent"), Seg::Key("send")]), format!("send is {} bytes", send.len()), &format!("at most {MAX_SEND}"));
    }
}

/// The numbers of a service's own servers, or of one pool (run as a service): health check,
/// `passive`, `p2c` and servers, against their ranges in `range.rs`.
fn validate_pool_numbers(pool: &PoolSettings, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |keys: &[&'static str]| path(prefix, &keys.iter().map(|k| Seg::Key(k)).collect::<Vec<_>>());
    let health = &pool.health;
    report.range(&at(&["health", "interval"]), "interval", health.interval, &range::HEALTH_INTERVAL);
    report.range(&at(&["health", "timeout"]), "timeout", health.timeout, &range::HEALTH_TIMEOUT);
    report.range(&at(&["health", "rise"]), "rise", health.rise, &range::RISE_FALL);
    report.range(&at(&["health", "fall"]), "fall", health.fall, &range::RISE_FALL);
    report.range(&at(&["health", "expect_status"]), "expect_status", health.expect_status, &range::EXPECT_STATUS);
    if let Some(port) = health.port {
        report.range(&at(&["health", "port"]), "port", port, &range::CHECK_PORT);
    }
    if let Some(agent) = &health.agent {
        report.range(&at(&["health", "agent", "port"]), "port", agent.port, &range::CHECK_PORT);
        report.range(&at(&["health", "agent", "interval"]), "interval", agent.interval, &range::HEALTH_INTERVAL);
        report.range(&at(&["health", "agent", "timeout"]), "timeout", agent.timeout, &range::HEALTH_TIMEOUT);
    }

    let passive = &pool.passive;
    report.range(&at(&["passive", "delta"]), "delta", passive.delta, &range::DELTA);
    report.range(&at(&["passive", "slot"]), "slot", passive.slot, &range::SLOT);
    report.range(&at(&["passive", "window_slots"]), "window_slots", passive.window_slots, &range::WINDOW_SLOTS);
    report.range(&at(&["passive", "min_samples"]), "min_samples", passive.min_samples, &range::MIN_SAMPLES);
    report.range(&at(&["p2c", "decay"]), "decay", pool.p2c.decay, &range::DECAY);
    for (j, server) in pool.servers.iter().enumerate() {
        let sat = |key| path(prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key(key)]);
        report.range(&sat("weight"), "weight", server.weight, &range::WEIGHT);
        report.range(&sat("maxconn"), "maxconn", server.maxconn, &range::MAXCONN);
    }
}

/// How a server comes back: `slow_start` and `[damping]` of a service, or the ones a pool sets.
fn validate_recovery(slow_start: Option<Duration>, damping: Option<&Damping>, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |keys: &[&'static str]| path(prefix, &keys.iter().map(|k| Seg::Key(k)).collect::<Vec<_>>());
    if let Some(slow_start) = slow_start {
        report.range(&at(&["slow_start"]), "slow_start", slow_start, &range::SLOW_START);
    }
    let Some(damping) = damping else { return };
    report.range(&at(&["damping", "half_life"]), "half_life", damping.half_life, &range::HALF_LIFE);
    report.range(&at(&["damping", "suppress"]), "suppress", damping.suppress, &range::SUPPRESS);
    report.range(&at(&["damping", "reuse"]), "reuse", damping.reuse, &range::REUSE);
    if damping.suppress > 0 && damping.reuse >= damping.suppress {
        report.error(
            &at(&["damping", "reuse"]),
            format!("reuse = {} is not below suppress = {}", damping.reuse, damping.suppress),
            "a suppressed server returns once its penalty falls below reuse, so reuse must be the lower",
        );
    }
}

/// Pools are validated as the services they run as; routes must name a pool (the service's own,
/// or a shared one of `shared`) and say what they match: the request in HTTP mode, the TLS server
/// name (pass-through) in TCP mode.
fn validate_routing(service: &Service, i: usize, shared: &[Pool], report: &mut Report<'_>) {
    if service.pools.is_empty() && service.routes.is_empty() && service.default_pool.is_none() {
        return;
    }
    let at = |rest: &[Seg<'static>]| path(&[Seg::Key("service"), Seg::Index(i)], rest);
    if matches!(service.mode, Mode::Ftp | Mode::Kernel) {
        report.error(
            &at(&[Seg::Key("mode")]),
            "pools and routes need mode = \"http\" (requests) or \"tcp\" (TLS server names)".into(),
            &format!("remove [[service.pool]], [[service.route]] and default_pool from the {} service", service.mode.as_str()),
        );
        return;
    }
    let tcp = service.mode == Mode::Tcp;
    if tcp && !service.routes.is_empty() && (service.server_tls.is_some() || service.pools.iter().any(|p| p.server_tls.is_some())) {
        report.error(
            &at(&[Seg::Key("route")]),
            "routes in mode = \"tcp\" pass the client's TLS through; server_tls would wrap it in a second session".into(),
            "remove server_tls: the servers answer the client's own handshake",
        );
    }
    // Without routes, a TCP service that terminates TLS sends what it decrypts to its
    // `default_pool` (a shared one, say) as to its own servers.
    if tcp && service.tls.is_some() && !service.routes.is_empty() {
        report.error(
            &at(&[Seg::Key("route")]),
            "routes in mode = \"tcp\" pass TLS through by its server name, but this service terminates TLS ([service.tls])".into(),
            "remove [service.tls] to pass TLS through to the pools, or use mode = \"http\" and route by host",
        );
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (k, pool) in service.pools.iter().enumerate() {
        if pool.name.is_empty() || !pool.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            report.error(
                &at(&[Seg::Key("pool"), Seg::Index(k), Seg::Key("name")]),
                format!("pool name {:?} is not a plain name", pool.name),
                "use letters, digits, '-', '_' and '.'",
            );
        }
        if names.insert(&pool.name, k).is_some() {
            report.error(&at(&[Seg::Key("pool"), Seg::Index(k), Seg::Key("name")]), format!("pool name {:?} is used twice", pool.name), "give every pool its own name");
        }
        if shared.iter().any(|p| p.name == pool.name) {
            report.error(
                &at(&[Seg::Key("pool"), Seg::Index(k), Seg::Key("name")]),
                format!("pool name {:?} is also a shared [[pool]]'s: a name means one pool", pool.name),
                "rename this pool, or remove it and route to the shared one",
            );
        }
        if pool.proxy_protocol.is_some() && service.mode == Mode::Http {
            proxy_protocol_in_http(&at(&[Seg::Key("pool"), Seg::Index(k), Seg::Key("proxy_protocol")]), report);
        }
        let pool_at = [Seg::Key("service"), Seg::Index(i), Seg::Key("pool"), Seg::Index(k)];
        // What a pool leaves unset is the service's, checked once there.
        validate_recovery(pool.slow_start, pool.damping.as_ref(), &pool_at, report);
        validate_outlier(pool.panic_threshold, pool.outlier.as_ref(), &pool_at, report);
        validate_pool(&service.routed_pool(pool), false, &pool_at, report);
    }
    let known = |name: &str| names.contains_key(name) || shared.iter().any(|p| p.name == name);
    let pool_names = || service.pools.iter().chain(shared).map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ");
    if let Some(d) = service.default_pool.as_deref().filter(|d| !known(d)) {
        report.error(&at(&[Seg::Key("default_pool")]), format!("default_pool {d:?} is not a pool of this service nor a shared [[pool]]"), &format!("pools: {}", pool_names()));
    }
    for (k, route) in service.routes.iter().enumerate() {
        let rat = |key| at(&[Seg::Key("route"), Seg::Index(k), Seg::Key(key)]);
        if let Some(pool) = route.pool.as_deref().filter(|p| !known(p)) {
            report.error(&rat("pool"), format!("route to {pool:?}, which is not a pool of this service nor a shared [[pool]]"), &format!("pools: {}", pool_names()));
        }
        let when = &route.when;
        if tcp {
            if when.reads_request() || !when.client.is_empty() || when.client_file.is_some() || route.not.is_some() {
                report.error(
                    &rat("pool"),
                    "a route in mode = \"tcp\" matches only the TLS server name".into(),
                    "give sni, or set mode = \"http\" to route by path, host, header or client",
                );
            } else if when.sni.is_empty() {
                report.error(&rat("pool"), "a route with nothing to match".into(), "give sni: the server names whose connections go to the pool");
            }
            if route.pool.is_none() {
                report.error(&rat("pool"), "a route in mode = \"tcp\" names the pool its connections go to".into(), "give pool");
            }
            if route.deny.is_some() || route.allow || route.redirect.is_some() || route.rewrites() || route.response_headers.is_some() {
                report.error(&rat("pool"), "a route in mode = \"tcp\" only picks a pool: deny, redirect and rewrites act on HTTP requests".into(), "set mode = \"http\"");
            }
        } else {
            if when.is_empty() && route.not.as_ref().is_none_or(Conditions::is_empty) {
                report.error(&rat("pool"), "a route with nothing to match".into(), "give a condition: path_prefix, path, host, method, header, query, cookie, client, sni, ...");
            }
            if service.tls.is_none() && (!when.sni.is_empty() || route.not.as_ref().is_some_and(|n| !n.sni.is_empty())) {
                report.error(
                    &rat("sni"),
                    "sni in mode = \"http\" reads the server name of TLS this service terminates, and it has no [service.tls]".into(),
                    "in mode = \"tcp\" sni routes TLS that passes through; here route by host",
                );
            }
            validate_rule(route, &rat, report);
        }
        for (conditions, prefix) in std::iter::once((when, "")).chain(route.not.as_ref().map(|n| (n, "not."))) {
            validate_conditions(conditions, prefix, &rat, report);
        }
    }
}

/// A pool's own `panic_threshold` and `[outlier]` (a routed pool's unset ones are its service's,
/// checked there).
fn validate_outlier(panic: Option<u32>, outlier: Option<&Outlier>, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |keys: &[&'static str]| path(prefix, &keys.iter().map(|k| Seg::Key(k)).collect::<Vec<_>>());
    if let Some(panic) = panic {
        report.range(&at(&["panic_threshold"]), "panic_threshold", panic, &range::PERCENT);
    }
    if let Some(o) = outlier {
        let oat = |key| at(&["outlier", key]);
        report.range(&oat("consecutive_5xx"), "consecutive_5xx", o.consecutive_5xx, &range::CONSECUTIVE);
        report.range(&oat("consecutive_gateway_errors"), "consecutive_gateway_errors", o.consecutive_gateway_errors, &range::CONSECUTIVE);
        report.range(&oat("interval"), "interval", o.interval, &range::OUTLIER_INTERVAL);
        report.range(&oat("base_ejection_time"), "base_ejection_time", o.base_ejection_time, &range::BASE_EJECTION_TIME);
        report.range(&oat("max_ejection_time"), "max_ejection_time", o.max_ejection_time, &range::MAX_EJECTION_TIME);
        report.range(&oat("max_ejection_percent"), "max_ejection_percent", o.max_ejection_percent, &range::PERCENT);
        report.range(&oat("success_rate_stdev"), "success_rate_stdev", o.success_rate_stdev, &range::SUCCESS_RATE_STDEV);
        report.range(&oat("success_rate_min_requests"), "success_rate_min_requests", o.success_rate_min_requests, &range::SUCCESS_RATE_MIN_REQUESTS);
        report.range(&oat("success_rate_min_hosts"), "success_rate_min_hosts", o.success_rate_min_hosts, &range::SUCCESS_RATE_MIN_HOSTS);
        report.range(&oat("shift_delta"), "shift_delta", o.shift_delta, &range::DELTA);
        report.range(&oat("shift_threshold"), "shift_threshold", o.shift_threshold, &range::SHIFT_THRESHOLD);
    }
}

/// A `[[service.limit]]` (`on_route`: a route's): its numbers in range, and a count, key, action
/// and store that its service can carry out.
fn validate_limit(service: &Service, limit: &Limit, on_route: bool, prefix: &[Seg<'_>], report: &mut Report<'_>) {
    let at = |key| path(prefix, &[Seg::Key(key)]);
    if !plain_name(&limit.name) {
        report.error(&at("name"), format!("limit name {:?} is not a plain name", limit.name), "use letters, digits, '-', '_' and '.'");
    }
    report.range(&at("ipv4_prefix"), "ipv4_prefix", limit.ipv4_prefix, &range::IPV4_PREFIX);
    report.range(&at("ipv6_prefix"), "ipv6_prefix", limit.ipv6_prefix, &range::IPV6_PREFIX);
    report.range(&at("limit"), "limit", limit.limit, &range::LIMIT);
    report.range(&at("period"), "period", limit.period, &range::LIMIT_PERIOD);
    if let Some(burst) = limit.burst {
        report.range(&at("burst"), "burst", burst, &range::BURST);
    }
    report.range(&at("hold"), "hold", limit.hold, &range::LIMIT_HOLD);
    report.range(&at("max_keys"), "max_keys", limit.max_keys, &range::MAX_KEYS);
    report.range(&at("sync_interval"), "sync_interval", limit.sync_interval, &range::SYNC_INTERVAL);
    let http = service.mode == Mode::Http;
    let count = limit.count.as_str();
    if matches!(limit.count, Counted::Requests | Counted::Errors) && !http {
        report.error(
            &at("count"),
            format!("count = {count:?} counts HTTP requests, and this service is mode = {:?}", service.mode.as_str()),
            "count connections, new-connections or bytes",
        );
    }
    if limit.per_connection() && limit.key != LimitKey::Client {
        report.error(&at("key"), format!("key = \"{}\" is not known when a connection is accepted", limit.key), "count connections by key = \"client\"");
    } else if limit.key.needs_request() && !http {
        report.error(&at("key"), format!("key = \"{}\" is read from each HTTP request", limit.key), "key this service's limits by \"client\" or \"sni\"");
    }
    if on_route && limit.per_connection() {
        report.error(&at("count"), format!("a route takes requests, not connections: count = {count:?}"), "put it in the service's [[service.limit]]");
    }
    if limit.count == Counted::Connections {
        if limit.burst.is_some() {
            report.error(&at("burst"), "connections open at once have no burst".into(), "remove burst, or count new-connections");
        }
        if limit.action == LimitAction::Delay {
            report.error(&at("action"), "a connection past its key's open connections cannot wait for one to close".into(), "reject, tarpit or log");
        }
        if limit.store == LimitStore::Redis {
            report.error(&at("store"), "open connections are counted where they are open".into(), "keep store = \"local\" for connections");
        }
    }
    match (limit.store, &limit.redis) {
        (LimitStore::Redis, None) => report.error(&at("redis"), "store = \"redis\" without a redis address".into(), "e.g. redis = \"127.0.0.1:6379\""),
        (LimitStore::Local, Some(_)) => report.error(&at("redis"), "a redis address for a local table".into(), "set store = \"redis\" to share the table, or remove redis"),
        (LimitStore::Redis, Some(address)) if !address.starts_with("redis://") && split_host_port(address).is_err() => {
            report.error(&at("redis"), format!("redis address {address:?} is not host:port or a redis:// URL"), "e.g. \"127.0.0.1:6379\"")
        }
        _ => {}
    }
}

/// What a route's conditions hold: well-formed names, paths, methods and versions, within
/// their bounds.
fn validate_conditions(c: &Conditions, prefix: &str, rat: &dyn Fn(&'static str) -> Vec<Seg<'static>>, report: &mut Report<'_>) {
    if let Some(name) = c.sni.iter().find(|n| !is_server_name(n)) {
        report.error(&rat("sni"), format!("{prefix}sni {name:?} is not a DNS name"), "e.g. \"api.example.com\" or \"*.example.com\" (one label)");
    }
    for (key, list) in [("path_beg", &c.path_beg), ("path_prefix", &c.path_prefix), ("path", &c.path)] {
        if let Some(p) = list.iter().find(|p| !p.starts_with('/')) {
            report.error(&rat(key), format!("{prefix}{key} {p:?} does not start with /"), "e.g. \"/static\"");
        }
    }
    if c.header_value.is_some() && c.header_regex.is_some() {
        report.error(&rat("header_regex"), format!("{prefix}header_value and header_regex both given"), "give one: a value to equal or a pattern to match");
    }
    if (c.header_value.is_some() || c.header_regex.is_some()) && c.header.is_none() {
        report.error(&rat("header_value"), format!("{prefix}header_value or header_regex without header"), "name the header too");
    }
    if let Some(h) = c.header.as_deref().filter(|h| hyper::header::HeaderName::from_bytes(h.as_bytes()).is_err()) {
        report.error(&rat("header"), format!("{prefix}header {h:?} is not a header name"), "e.g. \"x-beta\"");
    }
    if let Some(m) = c.method.iter().find(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-')) {
        report.error(&rat("method"), format!("{prefix}method {m:?} is not a method"), "e.g. \"GET\", \"POST\"");
    }
    if let Some(v) = c.version.iter().find(|v| !["1.0", "1.1", "2"].contains(&v.as_str())) {
        report.error(&rat("version"), format!("{prefix}version {v:?} is not an HTTP version"), "\"1.0\", \"1.1\" or \"2\"");
    }
    for (key, list) in [("query", &c.query), ("cookie", &c.cookie)] {
        if let Some(q) = list.iter().find(|q| q.is_empty() || q.starts_with('=')) {
            report.error(&rat(key), format!("{prefix}{key} {q:?} names nothing"), "\"name\" (present) or \"name=value\"");
        }
    }
    // Every list a request is compared with is bounded, so a config cannot make matching a
    // request cost without limit.
    let lists = [
        ("path", c.path.len()),
        ("path_prefix", c.path_prefix.len()),
        ("path_beg", c.path_beg.len()),
        ("path_suffix", c.path_suffix.len()),
        ("path_regex", c.path_regex.len()),
        ("host", c.host.len()),
        ("method", c.method.len()),
        ("query", c.query.len()),
        ("cookie", c.cookie.len()),
        ("client", c.client.len()),
        ("sni", c.sni.len()),
    ];
    for (key, n) in lists {
        if n > MAX_LIST {
            report.error(&rat(key), format!("{prefix}{key} has {n} entries; a route's list holds at most {MAX_LIST}"), "split the route, or use path_regex");
        }
    }
    let texts = c.path.iter().chain(&c.path_prefix).chain(&c.path_beg).chain(&c.path_suffix).chain(&c.host).chain(&c.query).chain(&c.cookie).chain(c.header_value.iter());
    if let Some(t) = texts.into_iter().find(|t| t.len() > MAX_TEXT) {
        report.error(&rat("pool"), format!("{prefix}a condition's text is {} bytes; at most {MAX_TEXT}", t.len()), &format!("{:?}...", t.chars().take(40).collect::<String>()));
    }
}

/// A route's list of values (paths, hosts, networks) holds at most this many entries.
const MAX_LIST: usize = 1000;
/// A route's text values are at most this many bytes.
const MAX_TEXT: usize = 4096;

/// What a route of an HTTP service does: a status to deny with, a redirect, rewrites and header
/// actions that can be carried out.
fn validate_rule(route: &Route, rat: &dyn Fn(&'static str) -> Vec<Seg<'static>>, report: &mut Report<'_>) {
    validate_error_pages(&route.error_pages, &rat("error_pages"), report);
    if let Some(limit) = route.max_request_body {
        report.range(&rat("max_request_body"), "max_request_body", limit, &range::MAX_REQUEST_BODY);
    }
    if let Some(status) = route.deny.filter(|s| !(400..=599).contains(s)) {
        report.error(&rat("deny"), format!("deny = {status} is not an error status"), "400 to 599; 403 is usual");
    }
    let answers = usize::from(route.deny.is_some()) + usize::from(route.redirect.is_some()) + usize::from(route.allow);
    if answers > 1 {
        report.error(&rat("deny"), "a route does one of deny, allow and redirect".into(), "split it into two routes: the first that takes a request wins");
    }
    if (route.deny.is_some() || route.redirect.is_some()) && (route.pool.is_some() || route.rewrites()) {
        report.error(&rat("pool"), "a route that denies or redirects sends nothing to a server".into(), "remove pool and the request rewrites, or the deny or redirect");
    }
    if let Some(r) = &route.redirect {
        if ![301, 302, 303, 307, 308].contains(&r.status) {
            report.error(&rat("redirect"), format!("redirect status {} is not a redirect", r.status), "301, 302, 303, 307 or 308");
        }
        if r.location.is_some() && (r.scheme.is_some() || r.host.is_some() || r.path.is_some() || r.prefix.is_some() || r.drop_query) {
            report.error(&rat("redirect"), "a redirect's location is the whole target".into(), "give location alone, or scheme, host, path, prefix and drop_query");
        }
        if let Some(s) = r.scheme.as_deref().filter(|s| !["http", "https"].contains(s)) {
            report.error(&rat("redirect"), format!("redirect scheme {s:?}"), "\"http\" or \"https\"");
        }
        if let Some(h) = r.host.as_deref().filter(|h| h.parse::<hyper::http::uri::Authority>().is_err()) {
            report.error(&rat("redirect"), format!("redirect host {h:?} is not a host"), "e.g. \"www.example.com\" or \"example.com:8443\"");
        }
        for p in [&r.path, &r.prefix].into_iter().flatten() {
            if !p.starts_with('/') || p.parse::<hyper::http::uri::PathAndQuery>().is_err() {
                report.error(&rat("redirect"), format!("redirect path {p:?} is not a path"), "e.g. \"/new\"");
            }
        }
    }
    for (key, text) in [
        ("strip_prefix", route.strip_prefix.as_ref()),
        ("replace_prefix", route.replace_prefix.as_ref().map(|r| &r.from)),
        ("replace_prefix", route.replace_prefix.as_ref().map(|r| &r.to)),
    ] {
        if let Some(t) = text.filter(|t| !t.starts_with('/') || t.parse::<hyper::http::uri::PathAndQuery>().is_err() || t.contains('?')) {
            report.error(&rat(key), format!("{key} {t:?} is not a path"), "e.g. \"/api\"");
        }
    }
    if let Some(q) = route.set_query.as_deref().filter(|q| format!("/?{q}").parse::<hyper::http::uri::PathAndQuery>().is_err() || q.contains('#')) {
        report.error(&rat("set_query"), format!("set_query {q:?} is not a query"), "e.g. \"a=1&b=2\" (percent-encoded)");
    }
    for (key, actions) in [("request_headers", &route.request_headers), ("response_headers", &route.response_headers)] {
        let Some(a) = actions else { continue };
        let names = a.delete.iter().chain(a.set.keys()).chain(a.add.keys());
        if let Some(n) = names.clone().find(|n| hyper::header::HeaderName::from_bytes(n.as_bytes()).is_err()) {
            report.error(&rat(key), format!("{n:?} is not a header name"), "e.g. \"x-request-start\"");
        }
        if let Some(n) = names.into_iter().find(|n| is_framing(n)) {
            report.error(&rat(key), format!("{n:?} frames the message; Fulcrum sets it"), "rewrite other headers");
        }
        if a.delete.len() + a.set.len() + a.add.len() > MAX_LIST {
            report.error(&rat(key), format!("more than {MAX_LIST} header actions"), "fewer");
        }
    }
}

/// Error pages: each key a status from 400 to 599, each file there and no larger than a page may be.
/// `[service.http.tracing]`: its numbers, an endpoint Fulcrum can send to, and a service name
/// a trace viewer can show.
fn validate_tracing(tracing: &crate::config::Tracing, at: &[Seg<'_>], report: &mut Report<'_>) {
    let key = |k: &'static str| path(at, &[Seg::Key(k)]);
    report.range(&key("sample"), "sample", tracing.sample, &range::TRACE_SAMPLE);
    report.range(&key("batch_size"), "batch_size", tracing.batch_size, &range::TRACE_BATCH);
    report.range(&key("interval"), "interval", tracing.interval, &range::TRACE_INTERVAL);
    report.range(&key("queue"), "queue", tracing.queue, &range::TRACE_QUEUE);
    report.range(&key("timeout"), "timeout", tracing.timeout, &range::TRACE_TIMEOUT);
    if let Err(why) = tracing.endpoint() {
        report.error(&key("endpoint"), format!("endpoint {why}"), "an OTLP/HTTP traces URL, e.g. \"http://127.0.0.1:4318/v1/traces\"");
    }
    let name = &tracing.service_name;
    if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        report.error(&key("service_name"), format!("service_name {name:?} cannot name a service in a trace"), "1 to 128 visible ASCII characters or spaces, e.g. \"fulcrum\"");
    }
}

/// Media types compressed at most (`[http.compression] types`).
const MAX_TYPES: usize = 100;

fn validate_compression(compression: &crate::config::Compression, at: &[Seg<'_>], report: &mut Report<'_>) {
    let key = |k: &'static str| path(at, &[Seg::Key(k)]);
    report.range(&key("min_size"), "min_size", compression.min_size, &range::COMPRESS_MIN_SIZE);
    let algorithms = &compression.algorithms;
    if algorithms.is_empty() || (1..algorithms.len()).any(|i| algorithms[..i].contains(&algorithms[i])) {
        report.error(
            &key("algorithms"),
            format!("algorithms {:?} must name each coding once", algorithms.iter().map(|c| c.token()).collect::<Vec<_>>()),
            "some of [\"zstd\", \"br\", \"gzip\"], best first",
        );
    }
    if compression.types.len() > MAX_TYPES {
        report.error(&key("types"), format!("types has {} entries", compression.types.len()), &format!("at most {MAX_TYPES}"));
    }
    let token = |t: &str| !t.is_empty() && t.len() <= 127 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b));
    for (i, media) in compression.types.iter().enumerate() {
        let ok = media.split_once('/').is_some_and(|(main, sub)| token(main) && (sub == "*" || token(sub)));
        if !ok {
            report.error(
                &path(at, &[Seg::Key("types"), Seg::Index(i)]),
                format!("{media:?} is not a media type"),
                "type/subtype, or type/* for a whole type, e.g. \"text/*\" or \"application/json\"",
            );
        }
    }
}

fn validate_error_pages(pages: &std::collections::BTreeMap<String, String>, at: &[Seg<'_>], report: &mut Report<'_>) {
    for (status, path) in pages {
        if !status.parse::<u16>().is_ok_and(|s| (400..=599).contains(&s)) {
            report.error(at, format!("error_pages key {status:?} is not an error status"), "\"400\" to \"599\", e.g. \"503\"");
        }
        match std::fs::metadata(path) {
            Ok(m) if m.len() > range::ERROR_PAGE_BYTES => {
                report.error(at, format!("error page {path} is {} bytes", m.len()), &format!("a page is at most {} bytes", range::ERROR_PAGE_BYTES))
            }
            Ok(m) if m.is_file() => {}
            Ok(_) => report.error(at, format!("error page {path} is not a file"), "name a file"),
            Err(e) => report.error(at, format!("error page {path}: {e}"), "an absolute path to a readable file"),
        }
    }
}

/// Headers that say where a message ends or how the connection goes on: a rule that set them
/// could split one request into two (smuggling).
fn is_framing(name: &str) -> bool {
    ["content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "proxy-connection"].iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// A name a client can send in SNI (letters, digits and '-' in dot-separated labels), or a
/// wildcard `*.` before one.
fn is_server_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    !name.is_empty() && name.len() <= 253 && name.split('.').all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// `prefix` followed by `rest`: the path of a key inside a service or a pool.
fn path<'a>(prefix: &[Seg<'a>], rest: &[Seg<'a>]) -> Vec<Seg<'a>> {
    prefix.iter().chain(rest).cloned().collect()
}

/// Resolves a server's `host:port` to the first address the system resolver gives.
pub fn resolve_server(server: &Server) -> Result<SocketAddr, AddressError> {
    resolve_address(&server.address)
}

/// Resolves `host:port` to the first address the system resolver gives.
pub fn resolve_address(address: &str) -> Result<SocketAddr, AddressError> {
    split_host_port(address)?;
    match address.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| AddressError::NoAddress { address: address.into() }),
        Err(cause) => Err(AddressError::Resolve { address: address.into(), cause }),
    }
}

/// Checks the form `host:port` without resolving.
fn split_host_port(address: &str) -> Result<(&str, u16), AddressError> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(AddressError::NoPort { address: address.into() });
    };
    if host.is_empty() {
        return Err(AddressError::NoHost { address: address.into() });
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(AddressError::BadPort { address: address.into() }),
        Ok(p) => Ok((host, p)),
    }
}
