//! A real server (`[[service.server]]`).

use super::*;

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
