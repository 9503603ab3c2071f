//! Knowing a server's health: active checks (`[service.health]`), passive measurement (`[service.passive]`) and the load measure of p2c (`[service.p2c]`).

use super::*;

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
    /// HTTP checks: text the body must contain; a page without it marks the server down. TCP
    /// checks: text the server's first bytes (at most [`TCP_EXPECT_MAX`] bytes) must
    /// contain, read after `send`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_text: Option<String>,
    /// The port checked instead of the server's own, 1 to 65535 (HAProxy's `port`): a server
    /// that reports its health on a port of its own. (Wider than a port, so that a number past
    /// 65535 is refused with the range rather than a type error.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// The IP address checked instead of the server's own (HAProxy's `addr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<std::net::IpAddr>,
    /// HTTP checks: the request's method, an HTTP token of 1 to 16 capital letters (`GET`,
    /// `HEAD`, `OPTIONS`...).
    #[serde(default = "defaults::health_method", skip_serializing_if = "defaults::is_get")]
    pub method: String,
    /// HTTP checks: the Host header sent (the `:authority` over HTTP/2); the server's configured
    /// address when unset. At most 255 visible characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// TCP checks: text sent once connected (TOML escapes such as `\r\n` write line ends), at
    /// most 1024 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<String>,
    /// An agent each server runs beside its service, asked for the server's state and weight
    /// (HAProxy's `agent-check`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Agent>,
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
            port: None,
            address: None,
            method: defaults::health_method(),
            host: None,
            send: None,
            agent: None,
            grpc_service: String::new(),
        }
    }
}

/// The most a TCP check reads looking for `expect_text`, so the text can be no longer.
pub const TCP_EXPECT_MAX: usize = 1024;

/// `[service.health.agent]`: a TCP port on each server where an agent answers one line with the
/// server's weight as a percentage of its configured weight (`75%`) and or its state (`up`,
/// `drain`, `maint`, `down`), as HAProxy's `agent-check` reads it (`health::agent`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The agent's port on each server, 1 to 65535.
    pub port: u32,
    /// The agent's IP address, when it is not the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<std::net::IpAddr>,
    /// Time between two questions, 10ms to 1 day: an answer takes effect within one interval.
    #[serde(default = "defaults::health_interval", with = "duration")]
    pub interval: Duration,
    /// Time allowed to connect and read the answer, 1ms to 1 minute.
    #[serde(default = "defaults::health_timeout", with = "duration")]
    pub timeout: Duration,
    /// Text sent once connected, before the answer is read, at most 1024 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send: Option<String>,
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
