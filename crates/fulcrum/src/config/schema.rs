//! The TOML schema: what a user writes, with defaults. The top of the file and its services are
//! here, each concern of a service in a file of its own (`schema/`: tls, pool, health, http,
//! access_log, route, server, fleet, tracing). Validation beyond types lives in `validate.rs`; the range of every number,
//! which each field's doc states, lives in `range.rs`.
//!
//! Every struct denies unknown fields, so a typo is an error with a line and column instead of a
//! setting silently ignored.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Algorithm;
use super::error::PortRangeError;

mod access_log;
mod acme;
mod fleet;
mod health;
mod http;
mod limit;
mod outlier;
mod pool;
mod route;
mod server;
mod tls;
mod tracing;

pub use access_log::*;
pub use acme::*;
pub use fleet::*;
pub use health::*;
pub use http::*;
pub use limit::*;
pub use outlier::*;
pub use pool::*;
pub use route::*;
pub use server::*;
pub use tls::*;
pub use tracing::*;

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Runtime threads, 0 to 1024. 0 means one per core.
    #[serde(default)]
    pub workers: usize,
    /// Each worker runs its own event loop with its own listening socket on every address
    /// (SO_REUSEPORT), and a connection stays on the worker that accepted it (`proxy::workers`);
    /// otherwise one accept loop per address feeds the shared pool of workers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse_port: bool,
    /// How long SIGTERM waits for connections in flight before it closes them, 0s to 1 day.
    #[serde(default = "defaults::shutdown_grace", with = "duration")]
    pub shutdown_grace: Duration,
    /// How often server host names are resolved again, 1s to 1 day; `0s` resolves them only when
    /// a config is applied. An address that changed is taken like a reload.
    #[serde(default = "defaults::resolve_interval", with = "duration")]
    pub resolve_interval: Duration,
    /// Client connections the whole process serves at once (1 to 1,000,000); more wait in the
    /// listen backlog. Unset: what the descriptor limit carries (`proxy::budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxconn: Option<u32>,
    /// The user Fulcrum runs as once its listeners are bound (a name from the system's user
    /// database, resolved at start); unset: it stays who started it (`app::privilege`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The group it runs as with `user`; unset: the user's own group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Capabilities kept after the switch to `user`: `["net_bind_service"]` lets a reload bind a
    /// port below 1024. Empty: none, so only ports of 1024 and above can be added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_capabilities: Vec<Capability>,
    /// Run as root deliberately: without it and without `user`, `fulcrum run` refuses to start as
    /// root, since every flaw would then be root's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_root: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<Admin>,
    /// Where DNS questions of Fulcrum's own go (SRV records); the system's resolver otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// The audit log: every config change, reload and save as a JSON line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<Audit>,
    /// Run as one instance of a fleet: the services come from etcd, not from this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Fleet>,
    /// `[[pool]]`: pools defined once and shared by the services that name them (`default_pool`,
    /// a route's `pool`), as HAProxy's backends are shared by its frontends: one set of servers,
    /// health checks, counters and balancer, whichever service the traffic came in on.
    #[serde(default, rename = "pool", skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<Pool>,
    #[serde(default, rename = "service")]
    pub services: Vec<Service>,
}

/// `[audit]`: where the audit trail is written (`config::audit::Record`, one JSON line each),
/// rotated by size: `FILE` moves to `FILE.1`, `FILE.1` to `FILE.2` and so on, the oldest past
/// `keep` is removed. The dashboard's History and `GET /api/audit` show the latest records
/// with or without a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Audit {
    pub file: String,
    /// Bytes a file grows to before it is rotated, 4,096 to 1 GiB; 10 MiB by default.
    #[serde(default = "defaults::audit_max_size")]
    pub max_size: u64,
    /// Rotated files kept beside the current one, 1 to 100; 5 by default.
    #[serde(default = "defaults::audit_keep")]
    pub keep: u32,
}

impl Config {
    /// Runtime threads: `workers`, or one per core when it is 0.
    pub fn threads(&self) -> usize {
        if self.workers == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { self.workers }
    }

    /// Listening sockets on each listen address: one per worker with `reuse_port` (and more than
    /// one thread), else one.
    pub fn sockets_per_address(&self) -> usize {
        if self.reuse_port && self.threads() > 1 { self.threads() } else { 1 }
    }

    /// The top-level (shared) pool of this name.
    pub fn shared(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The services that send traffic to the shared pool `name`, in config order.
    pub fn users_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Service> + 'a {
        self.services.iter().filter(move |s| s.shared_names().any(|n| n == name))
    }

    /// A shared pool as its servers' state, balancer, health checks and stats follow it
    /// ([`PoolSettings::shared`]), in the mode of the services that use it.
    pub fn shared_pool(&self, pool: &Pool) -> PoolSettings {
        let users: Vec<&Service> = self.users_of(&pool.name).collect();
        PoolSettings::shared(pool, &users)
    }
}

/// `[dns]`: the nameservers SRV lookups ask (host names of servers are the system resolver's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dns {
    /// `ip:port` of each nameserver, asked over UDP then TCP; at most 8.
    pub nameservers: Vec<String>,
}

/// A capability kept after the switch to an unprivileged `user`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// CAP_NET_BIND_SERVICE: bind ports below 1024.
    NetBindService,
}

/// The admin API: the dashboard, the JSON API and `/metrics` on a TCP listener, and the same API
/// on a local control socket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    /// `ip:port` of the TCP listener. Unset: `127.0.0.1:9090`, or none at all when `socket` is
    /// set (a control socket only); see [`Admin::tcp_listen`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The path of a Unix stream socket serving the same API without TCP (`admin::socket`):
    /// its file permissions say who may use it, so it asks for no credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// The socket file's permissions, in octal, `"0000"` to `"0777"`. Unset: `"0600"`, its owner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_mode: Option<String>,
    /// The group the socket file belongs to (a name), whose members `socket_mode` `"0660"` lets in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// A file holding a bearer token that API requests must present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// HTTP basic authentication: the user name, with `password_hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// An Argon2 hash in PHC form (`fulcrum hash-password` makes one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
}

impl Admin {
    /// The TCP listener's address as written, or the default when neither it nor a socket is set.
    pub fn tcp_listen(&self) -> Option<String> {
        match (&self.listen, &self.socket) {
            (Some(listen), _) => Some(listen.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(defaults::admin_listen()),
        }
    }

    /// The socket file's permission bits: `socket_mode` read as octal, `0o600` when unset.
    pub fn socket_permissions(&self) -> Result<u32, String> {
        let Some(mode) = &self.socket_mode else { return Ok(0o600) };
        match u32::from_str_radix(mode.trim_start_matches("0o"), 8) {
            Ok(bits) if bits <= 0o777 => Ok(bits),
            _ => Err(format!("socket_mode {mode:?} is not permission bits in octal (0000 to 0777)")),
        }
    }

    /// Whether requests must authenticate.
    pub fn has_auth(&self) -> bool {
        self.token_file.is_some() || self.password_hash.is_some()
    }
}

pub use crate::mode::Mode;

/// How TCP mode moves the bytes of an established connection (`fast_path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FastPath {
    /// Splice to start with; a connection that has shown itself long-lived and made of small
    /// exchanges moves into the sockmap, and back out when it turns to bulk
    /// (`proxy::adaptive`). The default in TCP mode, where the program loads.
    Adaptive,
    /// Read into a small buffer, and splice(2) through a pipe once a direction carries bulk.
    Splice,
    /// Both sockets go into a BPF sockhash whose stream verdict program sends every byte on to the
    /// peer socket inside the kernel; the process wakes only at the end of each direction. Falls
    /// back to `Splice`, with one warning, where the program cannot be loaded
    /// (`proxy::sockmap`).
    Sockmap,
}

impl FastPath {
    pub fn as_str(self) -> &'static str {
        match self {
            FastPath::Adaptive => "adaptive",
            FastPath::Splice => "splice",
            FastPath::Sockmap => "sockmap",
        }
    }
}

/// An inclusive range of TCP ports, written `"50000-50999"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub const FTP_DEFAULT: PortRange = PortRange { first: 50000, last: 50999 };

    pub fn ports(self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for PortRange {
    type Err = PortRangeError;

    fn from_str(text: &str) -> Result<Self, PortRangeError> {
        let bad = || PortRangeError::Malformed { text: text.into() };
        let (a, b) = text.split_once('-').ok_or_else(bad)?;
        let first: u16 = a.trim().parse().map_err(|_| bad())?;
        let last: u16 = b.trim().parse().map_err(|_| bad())?;
        if first == 0 || last < first {
            return Err(PortRangeError::Empty { text: text.into() });
        }
        Ok(PortRange { first, last })
    }
}

impl Serialize for PortRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// One balancing rule: a virtual address in front of a pool of real servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    pub name: String,
    /// `false` stops the service's listener (the paper's service stop); its config stays.
    #[serde(default = "defaults::yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// The virtual IP and port, `ip:port` (`[::1]:port` for IPv6).
    pub listen: String,
    #[serde(default = "defaults::mode")]
    pub mode: Mode,
    #[serde(default = "defaults::algorithm")]
    pub algorithm: Algorithm,
    /// Pass a FIN from one side on and keep the other direction open until it ends too.
    #[serde(default = "defaults::yes")]
    pub half_close: bool,
    /// Close a server's connections at once when it is disabled, instead of letting them finish.
    #[serde(default)]
    pub terminate_on_disable: bool,
    /// TCP mode: how an established connection's bytes move. Unset: `"adaptive"` for a
    /// plain TCP service, else splice (`Service::fast_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<FastPath>,
    /// Clients are proxies that send a PROXY protocol header (v1 or v2) first; its client address
    /// is the one Fulcrum balances, logs and forwards. Only from `trusted_proxies`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub accept_proxy: bool,
    /// The networks whose connections may carry a PROXY header; any other client is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<super::Network>,
    /// TCP and FTP modes: a PROXY protocol header sent to the server first on each connection
    /// (a pool's or a server's own setting takes precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    /// HTTP mode: the protocol spoken to the service's own servers.
    #[serde(default, skip_serializing_if = "ServerProtocol::is_http1")]
    pub protocol: ServerProtocol,
    /// TLS to the service's own servers (TCP and HTTP modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tls: Option<ServerTls>,
    /// TLS termination for the service's clients (TCP and HTTP modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// Time allowed for a connect to a real server, 1ms to 5 minutes (the kernel gives up on its
    /// own after about two minutes of SYN retries).
    #[serde(default = "defaults::connect_timeout", with = "duration")]
    pub connect_timeout: Duration,
    /// Consecutive connect failures that mark a server down until its health check passes,
    /// 0 to 1000. 0 turns passive checking off.
    #[serde(default = "defaults::failure_limit")]
    pub failure_limit: u32,
    /// Further servers tried after a connect failure (redispatch), 0 to 100.
    #[serde(default = "defaults::retries")]
    pub retries: u32,
    /// Close a connection after this long with no byte from the client, 1ms to 24 days
    /// (HAProxy's longest timeout).
    #[serde(default = "defaults::idle_timeout", with = "duration")]
    pub client_timeout: Duration,
    /// Close a connection after this long with no byte from the server, 1ms to 24 days.
    #[serde(default = "defaults::idle_timeout", with = "duration")]
    pub server_timeout: Duration,
    /// Concurrent client connections the service accepts, 0 to 1,000,000; 0 means no limit.
    #[serde(default)]
    pub maxconn: u32,
    /// How long a connection (HTTP: a request) waits for a server below its `maxconn` before
    /// it is refused (HTTP: 503), 0s to 1 hour; 0 refuses at once. HAProxy's `timeout queue`.
    #[serde(default = "defaults::queue_timeout", with = "duration")]
    pub queue_timeout: Duration,
    /// FTP: the ports Fulcrum opens for data connections (passive mode towards clients, active
    /// mode towards servers), within 1024 to 65535; `PortRange::FTP_DEFAULT` when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_ports: Option<PortRange>,
    #[serde(default)]
    pub health: Health,
    /// HTTP mode: headers added, timeouts and limits.
    #[serde(default, skip_serializing_if = "Http::is_default")]
    pub http: Http,
    /// Tuning of `passive-ratio`.
    #[serde(default)]
    pub passive: Passive,
    /// Tuning of `p2c-ewma`.
    #[serde(default)]
    pub p2c: P2c,
    /// A server that comes up (from down, disabled or drain, or added while running) starts at
    /// a small share of its weight and ramps to all of it over this period, 0s to 1 hour; 0s: at
    /// once. HAProxy's `slowstart`.
    #[serde(default, with = "duration", skip_serializing_if = "Duration::is_zero")]
    pub slow_start: Duration,
    /// Flap damping: a server that keeps going down and up is kept out for a while.
    #[serde(default, skip_serializing_if = "Damping::is_default")]
    pub damping: Damping,
    /// What happens while no server of the pool is usable (all down, suppressed or full).
    #[serde(default, skip_serializing_if = "AllDown::is_fail")]
    pub all_down: AllDown,
    /// Envoy's panic threshold: while fewer than this percent of the primary servers are usable,
    /// traffic goes to every server in rotation, health ignored, 0 (off) to 100. `all_down =
    /// "use-all"` is the case of none usable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub panic_threshold: u32,
    /// Outlier detection: servers that fail real traffic are ejected or given less of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<Outlier>,
    #[serde(default, rename = "server")]
    pub servers: Vec<Server>,
    /// Servers from the DNS SRV records of this name (e.g. `_http._tcp.web.example`), beside
    /// `server`: each record's target and port, its weight (1 to 256), and the lowest priority as
    /// primaries, the others as backups. Asked again every `resolve_interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srv: Option<String>,
    /// Further pools of servers that routes send requests (HTTP mode) or TLS connections by
    /// their server name (TCP mode, pass-through) to.
    #[serde(default, rename = "pool", skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<Pool>,
    /// Rules tried in order; the first that matches picks the pool.
    #[serde(default, rename = "route", skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// The pool of what no route matches; the service's own servers when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_pool: Option<String>,
    /// Per-client limits on every connection and request of the service.
    #[serde(default, rename = "limit", skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<Limit>,
}

impl Service {
    /// Whether `other` terminates TLS exactly as this service does: the same `[service.tls]` and
    /// the same mode and ALPN offer, so the certificates this one loaded serve it too.
    pub fn terminates_tls_as(&self, other: &Service) -> bool {
        self.tls == other.tls && self.mode == other.mode && self.http.http2 == other.http.http2 && self.acme_names() == other.acme_names()
    }

    /// How this service's TCP connections move their bytes: `fast_path` as set, else adaptive
    /// for a TCP service that neither terminates nor originates TLS (those bytes must pass
    /// through Fulcrum), else splice. Adaptive and sockmap splice where the program does not
    /// load (`proxy::sockmap::active`).
    pub fn fast_path(&self) -> FastPath {
        match self.fast_path {
            Some(f) => f,
            None if self.mode == Mode::Tcp && self.tls.is_none() && self.server_tls.is_none() => FastPath::Adaptive,
            None => FastPath::Splice,
        }
    }

    /// Whether Fulcrum binds the listen address: an enabled service of every mode but
    /// `kernel`, whose clients nftables sends on to the servers without the process.
    pub fn binds(&self) -> bool {
        self.enabled && self.mode != Mode::Kernel
    }

    /// Whether nftables serves it: an enabled `kernel` service, whose table Fulcrum keeps.
    pub fn in_kernel(&self) -> bool {
        self.enabled && self.mode == Mode::Kernel
    }

    /// How long a connection or request waits in the queue for a server place.
    pub fn queue_timeout(&self) -> Duration {
        self.http.queue_timeout.unwrap_or(self.queue_timeout)
    }

    /// The service's own servers as a pool: what the data path and the health checks follow.
    pub fn own_pool(&self) -> PoolSettings {
        PoolSettings {
            name: self.name.clone(),
            mode: self.mode,
            algorithm: self.algorithm,
            protocol: self.protocol,
            server_tls: self.server_tls.clone(),
            proxy_protocol: self.proxy_protocol,
            health: self.health.clone(),
            passive: self.passive.clone(),
            p2c: self.p2c.clone(),
            slow_start: self.slow_start,
            damping: self.damping.clone(),
            all_down: self.all_down,
            panic_threshold: self.panic_threshold,
            outlier: self.outlier.clone(),
            servers: self.servers.clone(),
            connect_timeout: self.connect_timeout,
            failure_limit: self.failure_limit,
            retries: self.retries,
            queue_timeout: self.queue_timeout(),
            terminate_on_disable: self.terminate_on_disable,
            http: self.http.clone(),
        }
    }

    /// The shared pools (`[[pool]]`) this service sends traffic to: its `default_pool` and its
    /// routes' pools that are not pools of its own, each name once.
    pub fn shared_names(&self) -> impl Iterator<Item = &str> {
        let named = self.default_pool.iter().chain(self.routes.iter().filter_map(|r| r.pool.as_ref())).map(String::as_str);
        let mut seen = Vec::new();
        named.filter(move |n| {
            let new = !self.pools.iter().any(|p| p.name == *n) && !seen.contains(n);
            if new {
                seen.push(*n);
            }
            new
        })
    }

    /// The shared pool `shared` (its [`PoolSettings::shared`]) as this service dispatches to it:
    /// the pool's servers, algorithm, health check and recovery, with how connections are made,
    /// retried and queued (and the HTTP settings requests follow) the service's own.
    pub fn shared_view(&self, shared: &PoolSettings) -> PoolSettings {
        let own = self.own_pool();
        PoolSettings {
            mode: own.mode,
            connect_timeout: own.connect_timeout,
            failure_limit: own.failure_limit,
            retries: own.retries,
            queue_timeout: own.queue_timeout,
            terminate_on_disable: own.terminate_on_disable,
            http: own.http,
            ..shared.clone()
        }
    }

    /// A routed pool: its own servers, algorithm, health check and TLS to its servers, named
    /// `service/pool`; what it leaves unset (slow start, damping, `all_down`, the PROXY header)
    /// and how its connections are made and retried are the service's.
    pub fn routed_pool(&self, pool: &Pool) -> PoolSettings {
        let service = self.own_pool();
        PoolSettings {
            name: format!("{}/{}", self.name, pool.name),
            algorithm: pool.algorithm,
            protocol: pool.protocol,
            server_tls: pool.server_tls.clone(),
            proxy_protocol: pool.proxy_protocol.or(self.proxy_protocol),
            health: pool.health.clone(),
            passive: pool.passive.clone(),
            p2c: pool.p2c.clone(),
            slow_start: pool.slow_start.unwrap_or(self.slow_start),
            damping: pool.damping.clone().unwrap_or(service.damping),
            all_down: pool.all_down.unwrap_or(self.all_down),
            panic_threshold: pool.panic_threshold.unwrap_or(self.panic_threshold),
            outlier: pool.outlier.clone().or_else(|| self.outlier.clone()),
            servers: pool.servers.clone(),
            ..service
        }
    }
}

/// A pool as the data path, the health checks and the stats see it: the service's own servers
/// ([`Service::own_pool`]), a routed pool ([`Service::routed_pool`]) or a shared one
/// ([`PoolSettings::shared`], and each service's view of it, [`Service::shared_view`]), with
/// what it takes from its service resolved. Not read from a file: made from the config.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    /// The service's name for its own servers, `service/pool` for a routed pool: its key in the
    /// stats and in each server's identity.
    pub name: String,
    pub mode: Mode,
    pub algorithm: Algorithm,
    pub protocol: ServerProtocol,
    pub server_tls: Option<ServerTls>,
    pub proxy_protocol: Option<ProxyProtocol>,
    pub health: Health,
    pub passive: Passive,
    pub p2c: P2c,
    pub slow_start: Duration,
    pub damping: Damping,
    pub all_down: AllDown,
    pub panic_threshold: u32,
    pub outlier: Option<Outlier>,
    pub servers: Vec<Server>,
    /// How connections to its servers are made and retried: the service's.
    pub connect_timeout: Duration,
    pub failure_limit: u32,
    pub retries: u32,
    pub queue_timeout: Duration,
    pub terminate_on_disable: bool,
    /// HTTP: the service's settings, which its requests follow whichever pool serves them (the
    /// affinity cookie, what the hashing algorithms read, the timeouts towards the servers).
    pub http: Http,
}

impl PoolSettings {
    /// A shared pool (`[[pool]]`) of `users`, the services that name it: what it leaves unset is
    /// the default, not a service's, since its servers' state is one for all of them. Its mode is
    /// HTTP when a user is (its servers' responses are counted), else TCP; a server is closed on
    /// disable when a user has `terminate_on_disable`; its balancer places cookie clients by the
    /// first HTTP user's `cookie_new`. How each service connects, retries and queues is its own
    /// ([`Service::shared_view`]); the defaults here are those of the pool's health checks and
    /// stats. Only what the pool's own state reads is taken from its users, so editing a service
    /// leaves the pool as it runs.
    pub fn shared(pool: &Pool, users: &[&Service]) -> PoolSettings {
        let http = users.iter().find(|s| s.mode == Mode::Http);
        PoolSettings {
            name: pool.name.clone(),
            mode: http.map_or(Mode::Tcp, |s| s.mode),
            algorithm: pool.algorithm,
            protocol: pool.protocol,
            server_tls: pool.server_tls.clone(),
            proxy_protocol: pool.proxy_protocol,
            health: pool.health.clone(),
            passive: pool.passive.clone(),
            p2c: pool.p2c.clone(),
            slow_start: pool.slow_start.unwrap_or_default(),
            damping: pool.damping.clone().unwrap_or_default(),
            all_down: pool.all_down.unwrap_or_default(),
            panic_threshold: pool.panic_threshold.unwrap_or_default(),
            outlier: pool.outlier.clone(),
            servers: pool.servers.clone(),
            connect_timeout: defaults::connect_timeout(),
            failure_limit: defaults::failure_limit(),
            retries: defaults::retries(),
            queue_timeout: defaults::queue_timeout(),
            terminate_on_disable: users.iter().any(|s| s.terminate_on_disable),
            http: Http { cookie_new: http.map(|s| s.http.cookie_new).unwrap_or_default(), ..Http::default() },
        }
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Weights are 1..=256 (as in HAProxy): wide enough for any ratio a pool needs, small enough that
/// the smooth weighted round robin state cannot overflow.
pub const MAX_WEIGHT: u32 = 256;

pub(crate) mod defaults {
    use super::*;
    pub fn redirect_status() -> u16 {
        302
    }
    pub fn resolve_interval() -> Duration {
        Duration::from_secs(30)
    }
    pub fn fleet_prefix() -> String {
        "/fulcrum".into()
    }
    pub fn fleet_lease() -> Duration {
        Duration::from_secs(10)
    }
    pub fn yes() -> bool {
        true
    }
    pub fn forwarded_headers() -> Vec<ForwardedHeader> {
        vec![ForwardedHeader::XForwardedFor, ForwardedHeader::XForwardedProto, ForwardedHeader::Forwarded]
    }
    pub fn head_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn response_timeout() -> Duration {
        Duration::from_secs(30)
    }
    pub fn queue_timeout() -> Duration {
        Duration::from_secs(5)
    }
    pub fn keepalive_idle() -> Duration {
        Duration::from_secs(60)
    }
    pub fn max_headers() -> usize {
        100
    }
    pub fn max_head_size() -> usize {
        16 * 1024
    }
    pub fn max_uri_length() -> usize {
        8 * 1024
    }
    pub fn max_streams() -> u32 {
        100
    }
    /// A day: Alt-Svc's own default (RFC 7838 section 3).
    pub fn alt_svc_max_age() -> Duration {
        Duration::from_secs(86_400)
    }
    /// Enough for a burst of honest clients to connect in one round trip; a flood of handshakes
    /// from spoofed addresses passes it at once and meets Retry.
    pub fn quic_retry_above() -> u32 {
        64
    }
    pub fn codings() -> Vec<Coding> {
        vec![Coding::Zstd, Coding::Br, Coding::Gzip]
    }
    /// Text and the structured formats sites send; images, video and archives are compressed
    /// already.
    pub fn compressed_types() -> Vec<String> {
        [
            "text/*",
            "application/json",
            "application/javascript",
            "application/xml",
            "application/rss+xml",
            "application/atom+xml",
            "application/manifest+json",
            "application/wasm",
            "image/svg+xml",
            "font/ttf",
            "font/otf",
        ]
        .map(String::from)
        .to_vec()
    }
    pub fn compress_min_size() -> u64 {
        1024
    }
    pub fn facility() -> Facility {
        Facility::Local0
    }
    pub fn ipv4_prefix() -> u8 {
        32
    }
    pub fn ipv6_prefix() -> u8 {
        64
    }
    pub fn limit_period() -> Duration {
        Duration::from_secs(1)
    }
    pub fn limit_hold() -> Duration {
        Duration::from_secs(1)
    }
    pub fn max_keys() -> usize {
        100_000
    }
    pub fn sync_interval() -> Duration {
        Duration::from_millis(100)
    }
    pub fn consecutive() -> u32 {
        5
    }
    pub fn outlier_interval() -> Duration {
        Duration::from_secs(10)
    }
    pub fn base_ejection_time() -> Duration {
        Duration::from_secs(30)
    }
    pub fn max_ejection_time() -> Duration {
        Duration::from_secs(300)
    }
    pub fn max_ejection_percent() -> u32 {
        10
    }
    pub fn success_rate_stdev() -> f64 {
        1.9
    }
    pub fn success_rate_min_requests() -> u64 {
        100
    }
    pub fn success_rate_min_hosts() -> u32 {
        3
    }
    pub fn shift_threshold() -> f64 {
        0.05
    }
    pub fn retry_count() -> u32 {
        2
    }
    pub fn budget_percent() -> u32 {
        20
    }
    pub fn min_retries_per_second() -> u32 {
        3
    }
    pub fn budget_window() -> Duration {
        Duration::from_secs(10)
    }
    pub fn tracing_endpoint() -> String {
        "http://127.0.0.1:4318/v1/traces".into()
    }
    /// Every request, as the OpenTelemetry SDKs' default sampler (parent-based, always on).
    pub fn tracing_sample() -> f64 {
        1.0
    }
    pub fn tracing_service_name() -> String {
        "fulcrum".into()
    }
    /// The OpenTelemetry SDKs' batch span processor's defaults: 512 spans, every 5 seconds,
    /// 2048 waiting, 10 seconds to answer.
    pub fn tracing_batch_size() -> usize {
        512
    }
    pub fn tracing_interval() -> Duration {
        Duration::from_secs(5)
    }
    pub fn tracing_queue() -> usize {
        2048
    }
    pub fn tracing_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn syslog_tag() -> String {
        "fulcrum".into()
    }
    pub fn cookie_name() -> String {
        "SERVERID".into()
    }
    pub fn cookie_mode() -> CookieMode {
        CookieMode::Insert
    }
    pub fn access_log() -> AccessLog {
        AccessLog::Text
    }
    pub fn mode() -> Mode {
        Mode::Tcp
    }
    pub fn algorithm() -> Algorithm {
        Algorithm::RoundRobin
    }
    pub fn connect_timeout() -> Duration {
        Duration::from_secs(2)
    }
    pub fn handshake_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn failure_limit() -> u32 {
        5
    }
    pub fn retries() -> u32 {
        3
    }
    pub fn idle_timeout() -> Duration {
        Duration::from_secs(300)
    }
    pub fn shutdown_grace() -> Duration {
        Duration::from_secs(10)
    }
    pub fn admin_listen() -> String {
        "127.0.0.1:9090".into()
    }
    pub fn audit_max_size() -> u64 {
        10 << 20
    }
    pub fn audit_keep() -> u32 {
        5
    }
    pub fn health_kind() -> HealthKind {
        HealthKind::Tcp
    }
    pub fn health_interval() -> Duration {
        Duration::from_secs(2)
    }
    pub fn health_timeout() -> Duration {
        Duration::from_secs(1)
    }
    pub fn rise() -> u32 {
        2
    }
    pub fn fall() -> u32 {
        3
    }
    pub fn health_method() -> String {
        "GET".into()
    }
    pub fn is_get(method: &str) -> bool {
        method == "GET"
    }
    pub fn health_path() -> String {
        "/".into()
    }
    pub fn expect_status() -> u16 {
        200
    }
    pub fn weight() -> u32 {
        1
    }
    pub fn delta() -> f64 {
        0.1
    }
    /// 2 s x 10 slots: a 20 s window, so a degraded server loses most of its share within a
    /// minute even at a few connections a second.
    pub fn slot() -> Duration {
        Duration::from_secs(2)
    }
    pub fn window_slots() -> usize {
        10
    }
    pub fn min_samples() -> u64 {
        20
    }
    pub fn decay() -> Duration {
        Duration::from_secs(10)
    }
    pub fn half_life() -> Duration {
        Duration::from_secs(60)
    }
    pub fn suppress() -> u32 {
        2000
    }
    pub fn reuse() -> u32 {
        750
    }
}

/// Durations as humans write them: "2s", "500ms", "1m 30s".
pub(crate) mod optional_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::duration::deserialize(d).map(Some)
    }
}

pub(crate) mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| D::Error::custom(format!("invalid duration {text:?}: {e} (write a number and a unit, e.g. \"2s\", \"500ms\", \"1m\")")))
    }
}
