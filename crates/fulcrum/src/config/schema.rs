//! The TOML schema: what a user writes, with defaults. Validation beyond types lives in `validate.rs`;
//! the range of every number, which each field's doc states, lives in `range.rs`.
//!
//! Every struct denies unknown fields, so a typo is an error with a line and column instead of a
//! setting silently ignored.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Algorithm;
use super::error::PortRangeError;

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<Admin>,
    /// Where DNS questions of Fulcrum's own go (SRV records); the system's resolver otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Run as one instance of a fleet: the services come from etcd, not from this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<Fleet>,
    #[serde(default, rename = "service")]
    pub services: Vec<Service>,
}

/// `[dns]`: the nameservers SRV lookups ask (host names of servers are the system resolver's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dns {
    /// `ip:port` of each nameserver, asked over UDP then TCP; at most 8.
    pub nameservers: Vec<String>,
}

/// The fleet: where the shared services live in etcd, and what is this instance's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// etcd's client URLs, `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// The key prefix of this fleet's keys; several fleets can share one etcd.
    #[serde(default = "defaults::fleet_prefix")]
    pub prefix: String,
    /// This instance's name in the fleet (letters, digits, '-', '_', '.'); the host name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// etcd authentication: the user name, with `password_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// A PEM file of the CA that signed etcd's certificates, for `https` endpoints; the system's
    /// roots when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// How long this instance stays listed after it stops renewing its registration, 2s to 1min.
    #[serde(default = "defaults::fleet_lease", with = "duration")]
    pub lease: Duration,
    /// Per service, settings that are this instance's own (`listen` most often): merged over the
    /// service from etcd here, never written back to it.
    #[serde(default, rename = "override", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub overrides: std::collections::BTreeMap<String, toml::Table>,
}

/// The admin listener: JSON API and (later) the dashboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    #[serde(default = "defaults::admin_listen")]
    pub listen: String,
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
    /// Whether requests must authenticate.
    pub fn has_auth(&self) -> bool {
        self.token_file.is_some() || self.password_hash.is_some()
    }
}

/// How a service understands its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Tcp,
    /// HTTP/1.1: requests are read, checked and forwarded over the servers' idle keep-alive connections.
    Http,
    /// FTP: the control connection is balanced and read, data connections are opened by Fulcrum
    /// on `data_ports` and go to the same server (passive and active mode).
    Ftp,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Tcp => "tcp",
            Mode::Http => "http",
            Mode::Ftp => "ftp",
        }
    }
}

/// How TCP mode moves the bytes of an established connection (`fast_path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FastPath {
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
    /// TCP mode: how an established connection's bytes move. Unset: splice, as `"splice"` says.
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
}

impl Service {
    /// Whether `other` terminates TLS exactly as this service does: the same `[service.tls]` and
    /// the same mode and ALPN offer, so the certificates this one loaded serve it too.
    pub fn terminates_tls_as(&self, other: &Service) -> bool {
        self.tls == other.tls && self.mode == other.mode && self.http.http2 == other.http.http2
    }

    /// How long a connection or request waits in the queue for a server place.
    pub fn queue_timeout(&self) -> Duration {
        self.http.queue_timeout.unwrap_or(self.queue_timeout)
    }

    /// The settings a routed pool is dispatched and checked with: the service's, with the pool's
    /// name (`service/pool`), servers, algorithm and health check, so a routed pool is balanced,
    /// checked and counted by the same code as the service's own servers.
    pub fn pool_settings(&self, pool: &Pool) -> Service {
        Service {
            name: format!("{}/{}", self.name, pool.name),
            algorithm: pool.algorithm,
            protocol: pool.protocol,
            proxy_protocol: pool.proxy_protocol.or(self.proxy_protocol),
            server_tls: pool.server_tls.clone(),
            health: pool.health.clone(),
            passive: pool.passive.clone(),
            p2c: pool.p2c.clone(),
            slow_start: pool.slow_start.unwrap_or(self.slow_start),
            damping: pool.damping.clone().unwrap_or_else(|| self.damping.clone()),
            all_down: pool.all_down.unwrap_or(self.all_down),
            servers: pool.servers.clone(),
            srv: None,
            pools: Vec::new(),
            routes: Vec::new(),
            default_pool: None,
            // A connection's forwarding follows the service's settings; the service's own check
            // reports a misplaced fast_path or [service.tls] once.
            fast_path: None,
            tls: None,
            ..self.clone()
        }
    }
}

/// `server_tls`: Fulcrum speaks TLS to the servers and verifies them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// A PEM file of the CA certificates a server's certificate must chain to; unset: the
    /// system's roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` when set, else the platform's store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// The name sent in SNI and verified against the server's certificate; unset: the host of
    /// each server's `address` (an IP address is verified as one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

/// What HTTP mode speaks to a pool's servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerProtocol {
    /// HTTP/1.1 over kept-alive connections, one request at a time on each.
    #[default]
    Http1,
    /// HTTP/2 without TLS (h2c, prior knowledge): one connection per server carries every
    /// request as a stream, trailers included; what gRPC servers speak.
    H2,
}

impl ServerProtocol {
    pub fn is_http1(&self) -> bool {
        *self == ServerProtocol::Http1
    }
}

/// The PROXY protocol version Fulcrum sends a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    V1,
    V2,
}

/// `[service.tls]`: Fulcrum terminates TLS for the service's clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// `[[service.tls.certificate]]`, chosen by the name a client sends (SNI) against each
    /// certificate's names; the first serves clients that send no name or one no certificate has.
    #[serde(rename = "certificate")]
    pub certificates: Vec<TlsCertificate>,
    /// A PEM file of CA certificates: when set, a client must present a certificate one of them
    /// issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<String>,
    /// HTTP mode: a request whose Host is not a name of the certificate its handshake chose (by
    /// SNI) is answered 421 Misdirected Request, so a client cannot present one name and reach
    /// another's routes (domain fronting). Unset: on with `client_ca` (where fronting would
    /// pass a certificate check made for another name), off without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict_sni_host: Option<bool>,
    /// Time for a client to complete its handshake, 1ms to 5 minutes.
    #[serde(default = "defaults::handshake_timeout", with = "duration")]
    pub handshake_timeout: Duration,
}

impl Tls {
    /// `strict_sni_host`, with its default: on when client certificates are required.
    pub fn strict_sni_host(&self) -> bool {
        self.strict_sni_host.unwrap_or(self.client_ca.is_some())
    }
}

/// One certificate chain and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsCertificate {
    /// The chain, leaf first.
    pub cert: String,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
}

/// `[[service.pool]]`: a named group of servers with its own algorithm and health check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub name: String,
    #[serde(default = "defaults::algorithm")]
    pub algorithm: Algorithm,
    /// The protocol spoken to the pool's servers.
    #[serde(default, skip_serializing_if = "ServerProtocol::is_http1")]
    pub protocol: ServerProtocol,
    /// TLS to the pool's servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tls: Option<ServerTls>,
    /// TCP mode (pass-through routes): the PROXY header sent to the pool's servers; unset: the
    /// service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    #[serde(default)]
    pub health: Health,
    #[serde(default)]
    pub passive: Passive,
    #[serde(default)]
    pub p2c: P2c,
    /// Unset: the service's.
    #[serde(default, with = "optional_duration", skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<Duration>,
    /// Unset: the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damping: Option<Damping>,
    /// Unset: the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_down: Option<AllDown>,
    #[serde(default, rename = "server")]
    pub servers: Vec<Server>,
}

/// `[service.damping]`: route flap damping as BGP does it (RFC 2439). Each time a server goes
/// from up to down it earns [`Damping::PENALTY`]; the penalty halves every `half_life`. Above
/// `suppress` the server stays out even while its checks pass, until the penalty has decayed
/// below `reuse`. The defaults leave a server that fails once or twice alone: three flaps within
/// about a minute suppress it, for about two minutes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Damping {
    /// 1s to 1 day.
    #[serde(default = "defaults::half_life", with = "duration")]
    pub half_life: Duration,
    /// 0 to 100,000; 0 turns damping off.
    #[serde(default = "defaults::suppress")]
    pub suppress: u32,
    /// 1 to 100,000, below `suppress`.
    #[serde(default = "defaults::reuse")]
    pub reuse: u32,
}

impl Damping {
    /// What one flap adds to the penalty.
    pub const PENALTY: f64 = 1000.0;

    pub fn is_default(&self) -> bool {
        *self == Damping::default()
    }
}

impl Default for Damping {
    fn default() -> Self {
        Damping { half_life: defaults::half_life(), suppress: defaults::suppress(), reuse: defaults::reuse() }
    }
}

/// `all_down`: a pool with no usable server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllDown {
    /// Refuse: HTTP answers 503, TCP and FTP close the connection.
    #[default]
    Fail,
    /// Envoy's panic mode: ignore health (and damping) and spread over every enabled server
    /// that is not draining, since some may answer.
    UseAll,
}

impl AllDown {
    pub fn is_fail(&self) -> bool {
        *self == AllDown::Fail
    }
}

/// `[[service.route]]`: which requests go to `pool`. Every condition given must hold; a list
/// holds when any of its entries does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub pool: String,
    /// Whole path segments: `/static` takes `/static` and `/static/x`, not `/staticfoo`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_prefix: Vec<String>,
    /// HAProxy's `path_beg`: any path that starts with the text, `/staticfoo` for `/static` too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_beg: Vec<String>,
    /// Compare `path_prefix`, `path_beg`, `path_suffix` and `header_value` without regard to
    /// ASCII case (HAProxy's `-i`); host names always are.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_case: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_suffix: Vec<String>,
    /// Host names, compared without the port and case-insensitively.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<String>,
    /// A header that must be present, and equal `header_value` when that is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
    /// TCP mode, TLS pass-through: server names the client's ClientHello may carry (SNI),
    /// compared case-insensitively; `*.example.com` covers one label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<String>,
}

/// What kind of active health check runs against each server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthKind {
    None,
    Tcp,
    Http,
    /// Connect and expect the FTP greeting (`220`), then `QUIT`.
    Ftp,
    /// The gRPC health protocol (`grpc.health.v1.Health/Check` over HTTP/2): the server passes
    /// while it answers SERVING. For pools with `protocol = "h2"`.
    Grpc,
}

/// The paper's "KeepAlive": how each real server is checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[serde(default = "defaults::health_kind")]
    pub kind: HealthKind,
    /// Time between checks, 10ms to 1 day (with `kind = "none"`: before a server held down by
    /// `failure_limit` is tried again).
    #[serde(default = "defaults::health_interval", with = "duration")]
    pub interval: Duration,
    /// Time allowed for one check, 1ms to 1 minute: start waits up to the longest one for the
    /// first round of checks.
    #[serde(default = "defaults::health_timeout", with = "duration")]
    pub timeout: Duration,
    /// Passing checks in a row that bring a down server up, 1 to 1000.
    #[serde(default = "defaults::rise")]
    pub rise: u32,
    /// Failing checks in a row that take an up server down, 1 to 1000.
    #[serde(default = "defaults::fall")]
    pub fall: u32,
    /// HTTP checks: the document requested.
    #[serde(default = "defaults::health_path")]
    pub path: String,
    /// HTTP checks: the status the server must answer, 100 to 599.
    #[serde(default = "defaults::expect_status")]
    pub expect_status: u16,
    /// HTTP checks: text the body must contain; a page without it marks the server down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_text: Option<String>,
    /// gRPC checks: the service asked about (`HealthCheckRequest.service`), at most 200
    /// characters; empty asks about the server as a whole.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grpc_service: String,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            kind: defaults::health_kind(),
            interval: defaults::health_interval(),
            timeout: defaults::health_timeout(),
            rise: defaults::rise(),
            fall: defaults::fall(),
            path: defaults::health_path(),
            expect_status: defaults::expect_status(),
            expect_text: None,
            grpc_service: String::new(),
        }
    }
}

/// The passive-measurement controller (`algorithm = "passive-ratio"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Passive {
    /// Share of its ratio the worst server gives up per step (the paper's Delta), 0.001 to 1.
    #[serde(default = "defaults::delta")]
    pub delta: f64,
    /// Length of one counter slot and the control period (the paper's T; it uses 20 s), 10ms to
    /// 1 hour.
    #[serde(default = "defaults::slot", with = "duration")]
    pub slot: Duration,
    /// Slots in the sliding window (the paper's m; it uses 10), 1 to 1000.
    #[serde(default = "defaults::window_slots")]
    pub window_slots: usize,
    /// SYNs a window must hold before its R is trusted, 1 to 1,000,000.
    #[serde(default = "defaults::min_samples")]
    pub min_samples: u64,
}

impl Default for Passive {
    fn default() -> Self {
        Passive { delta: defaults::delta(), slot: defaults::slot(), window_slots: defaults::window_slots(), min_samples: defaults::min_samples() }
    }
}

/// Power of two choices over peak-EWMA latency (`algorithm = "p2c-ewma"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2c {
    /// Time constant with which a latency peak is forgotten, 10ms to 1 hour.
    #[serde(default = "defaults::decay", with = "duration")]
    pub decay: Duration,
}

impl Default for P2c {
    fn default() -> Self {
        P2c { decay: defaults::decay() }
    }
}

/// A header HTTP mode adds so the server knows the client (HAProxy's `option forwardfor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    XForwardedFor,
    XForwardedProto,
    Forwarded,
}

/// The access log's format: one line per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessLog {
    Off,
    Text,
    Json,
}

/// `[service.http]`: what HTTP mode adds, waits for and accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Http {
    #[serde(default = "defaults::forwarded_headers")]
    pub forwarded_headers: Vec<ForwardedHeader>,
    /// Clients in these networks are not named in `X-Forwarded-For` or `Forwarded` (HAProxy's
    /// `forwardfor except`): a local proxy in front that names its own clients.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forwarded_except: Vec<super::Network>,
    /// Time to receive a whole request head, counted from when Fulcrum starts waiting for it, so
    /// it also ends idle keep-alive connections and stops slowloris. 1ms to 1 hour.
    #[serde(default = "defaults::head_timeout", with = "duration")]
    pub head_timeout: Duration,
    /// Time for a server to start its response once the request is sent, 1ms to 1 day.
    #[serde(default = "defaults::response_timeout", with = "duration")]
    pub response_timeout: Duration,
    /// The older place of the service's `queue_timeout`, still read; when set, it wins.
    #[serde(default, with = "optional_duration", skip_serializing_if = "Option::is_none")]
    pub queue_timeout: Option<Duration>,
    /// How long an idle keep-alive connection to a server is kept for reuse, 1ms to 1 hour.
    #[serde(default = "defaults::keepalive_idle", with = "duration")]
    pub keepalive_idle: Duration,
    /// Most header fields in a request (431 above), 1 to 1000: hyper sets aside room for this
    /// many headers every time it parses a head, so the bound is memory a client can make it take.
    #[serde(default = "defaults::max_headers")]
    pub max_headers: usize,
    /// Most bytes in a request head (431 above), 8192 (hyper's smallest read buffer) to 1 MiB.
    #[serde(default = "defaults::max_head_size")]
    pub max_head_size: usize,
    /// Longest request target (414 above), 16 to 65534 (the `http` crate's own limit).
    #[serde(default = "defaults::max_uri_length")]
    pub max_uri_length: usize,
    #[serde(default = "defaults::access_log")]
    pub access_log: AccessLog,
    /// Adds `why` to each access log line: how its server was picked, in the compact form of
    /// `GET /api/explain/recent` (e.g. `source-hash slot=4211`, `cookie affinity`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub access_log_why: bool,
    /// `uri-hash`: hash the query string too.
    #[serde(default, skip_serializing_if = "is_false")]
    pub hash_query: bool,
    /// `header-hash`: the header whose value is hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_header: Option<String>,
    /// `cookie`: the cookie that names the server (`insert`), or the application's session
    /// cookie that gets `.server-id` appended (`jserv`).
    #[serde(default = "defaults::cookie_name")]
    pub cookie: String,
    #[serde(default = "defaults::cookie_mode")]
    pub cookie_mode: CookieMode,
    /// `cookie`: how a client without the cookie gets its server.
    #[serde(default, skip_serializing_if = "CookieNew::is_round_robin")]
    pub cookie_new: CookieNew,
    /// A plain-HTTP service answers every request with a 308 to the same URL over https.
    #[serde(default, skip_serializing_if = "is_false")]
    pub redirect_https: bool,
    /// With `[service.tls]`: `Strict-Transport-Security: max-age=...` on every response,
    /// 0s to 10 years (0s tells browsers to forget it).
    #[serde(default, with = "optional_duration", skip_serializing_if = "Option::is_none")]
    pub hsts: Option<Duration>,
    /// With `[service.tls]`: offer HTTP/2 by ALPN (`h2`, then `http/1.1`).
    #[serde(default = "defaults::yes")]
    pub http2: bool,
    /// A plain service also takes HTTP/2 with prior knowledge (h2c): a connection that opens
    /// with the HTTP/2 preface.
    #[serde(default, skip_serializing_if = "is_false")]
    pub h2c: bool,
    /// HTTP/2: streams a client may have open at once, 1 to 1000.
    #[serde(default = "defaults::max_streams")]
    pub max_streams: u32,
}

/// How the `cookie` algorithm carries the server's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CookieMode {
    /// Fulcrum sets a cookie of its own, `NAME=server-id`.
    Insert,
    /// Apache JServ style: the application's session cookie `NAME=session.server-id`.
    Jserv,
}

/// Where the `cookie` algorithm places a client that has no affinity yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CookieNew {
    /// In turn, by weight (smooth weighted round robin).
    #[default]
    RoundRobin,
    /// At random, by weight, as Apache's mod_jserv placed new sessions.
    Random,
}

impl CookieNew {
    pub fn is_round_robin(&self) -> bool {
        *self == CookieNew::RoundRobin
    }
}

impl Default for Http {
    fn default() -> Self {
        Http {
            forwarded_headers: defaults::forwarded_headers(),
            forwarded_except: Vec::new(),
            head_timeout: defaults::head_timeout(),
            response_timeout: defaults::response_timeout(),
            keepalive_idle: defaults::keepalive_idle(),
            queue_timeout: None,
            max_headers: defaults::max_headers(),
            max_head_size: defaults::max_head_size(),
            max_uri_length: defaults::max_uri_length(),
            access_log: defaults::access_log(),
            access_log_why: false,
            hash_query: false,
            hash_header: None,
            cookie: defaults::cookie_name(),
            cookie_mode: defaults::cookie_mode(),
            cookie_new: CookieNew::RoundRobin,
            redirect_https: false,
            hsts: None,
            http2: true,
            h2c: false,
            max_streams: defaults::max_streams(),
        }
    }
}

impl Http {
    fn is_default(&self) -> bool {
        *self == Http::default()
    }
}

/// One real server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// `host:port` or `ip:port`; host names are resolved at load and on every reload.
    pub address: String,
    /// Share of the traffic, 1 to 256 (`MAX_WEIGHT`).
    #[serde(default = "defaults::weight")]
    pub weight: u32,
    /// Used only while no primary server is usable.
    #[serde(default)]
    pub backup: bool,
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// Takes no new connections but keeps its open ones and its health checks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub drain: bool,
    /// Connections (HTTP: requests) in flight at most, 0 to 1,000,000 (0: no limit); more wait
    /// in the service's queue.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub maxconn: u32,
    /// The opaque id the `cookie` algorithm puts in cookies; derived from the address if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// TCP and FTP modes: the PROXY header this server is sent; unset: its pool's (or the
    /// service's). Its health checks send a LOCAL header first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
    /// With `server_tls`: the name this server is sent in SNI and verified as, in place of the
    /// pool's `server_tls.sni` or the host of `address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

impl Server {
    /// The cookie id: the configured one, or a stable hash of the address (so it does not show
    /// the internal address to clients, and two Fulcrum processes agree on it).
    pub fn cookie_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| format!("{:08x}", crate::balance::key::hash_bytes(self.address.as_bytes()) as u32))
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
