//! Routed pools (`[[service.pool]]`), shared pools (`[[pool]]`, the same fields) and what a pool does when its servers fail or flap (`damping`, `all_down`).

use super::*;

/// `[[service.pool]]`: a named group of servers with its own algorithm and health check; at the
/// top level, `[[pool]]`, one that several services share (what it leaves unset is then the
/// default, not a service's: `config::PoolSettings::shared`).
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
    /// Unset: the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panic_threshold: Option<u32>,
    /// Unset: the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<Outlier>,
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
    /// that is not draining, since some may answer. The case of `panic_threshold` where none is
    /// usable.
    UseAll,
}

impl AllDown {
    pub fn is_fail(&self) -> bool {
        *self == AllDown::Fail
    }
}
