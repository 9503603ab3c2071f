//! `[[service.limit]]` (and `[[service.route.limit]]`): per-client limits, HAProxy's stick tables.
//! A limit is one table: what it counts (`count`), per what key (`key`), how much (`limit` per
//! `period`), and what happens past it (`action`). Its tables live in `live::limit`; the data
//! path asks them in `proxy::limits`.

use std::fmt;
use std::str::FromStr;

use super::*;

/// `[[service.limit]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// The table's name, unique in the config: `GET /api/limits/<name>`, the metrics' `table`
    /// label, and the `RateLimit-Policy` the client is told.
    pub name: String,
    /// What each key is: `"client"` (the client's address, within `ipv4_prefix`/`ipv6_prefix`),
    /// `"header:<name>"`, `"cookie:<name>"` (HTTP) or `"sni"` (TLS). A request without the
    /// header, cookie or server name is counted by its client address.
    #[serde(default)]
    pub key: LimitKey,
    /// Bits of an IPv4 client address a `client` key keeps, 8 to 32: 24 counts a /24 as one.
    #[serde(default = "defaults::ipv4_prefix")]
    pub ipv4_prefix: u8,
    /// Bits of an IPv6 client address a `client` key keeps, 16 to 128 (64: one site's /64).
    #[serde(default = "defaults::ipv6_prefix")]
    pub ipv6_prefix: u8,
    pub count: Counted,
    /// How many per `period` (for `connections`: at once), 1 to 1,000,000,000.
    pub limit: u64,
    /// 1ms to 1 hour.
    #[serde(default = "defaults::limit_period", with = "duration")]
    pub period: Duration,
    /// How many beyond the steady rate may come at once, 0 to 1,000,000,000 (not for
    /// `connections`). Unset: 0 for requests and new connections (NGINX's strict rate); for bytes
    /// and errors `limit - 1`, so a whole period's `limit` may come at once (a window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default)]
    pub action: LimitAction,
    /// `delay`: the longest a request or connection is held until it is under its limit, 1ms to
    /// 1 minute; one that would wait longer is refused. `tarpit`: how long a refused one is held
    /// before it is answered or closed.
    #[serde(default = "defaults::limit_hold", with = "duration")]
    pub hold: Duration,
    /// The most keys the table holds, 1 to 10,000,000: a new key past it evicts the least
    /// recently seen of a sample (about 135 bytes per key, `docs/protection.md`).
    #[serde(default = "defaults::max_keys")]
    pub max_keys: usize,
    /// Where the counts live: this process, or Redis for a fleet (`requests`, `new-connections`,
    /// `bytes` and `errors`).
    #[serde(default)]
    pub store: LimitStore,
    /// With `store = "redis"`: `host:port` or a `redis://` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// With `store = "redis"`: how often the counts are synced, 10ms to 10s.
    #[serde(default = "defaults::sync_interval", with = "duration")]
    pub sync_interval: Duration,
    /// With `store = "redis"`: while Redis cannot be reached, `open` goes on with this
    /// instance's counts, `closed` refuses.
    #[serde(default)]
    pub fail: FailMode,
}

impl Limit {
    /// The burst the rate takes: as set, else the count's default (`limit` is at least 1).
    pub fn burst(&self) -> u64 {
        self.burst.unwrap_or(match self.count {
            Counted::Bytes | Counted::Errors => self.limit - 1,
            _ => 0,
        })
    }

    /// Whether the limit counts connections (at accept) rather than requests.
    pub fn per_connection(&self) -> bool {
        matches!(self.count, Counted::Connections | Counted::NewConnections)
    }

    /// Whether a service in `mode` checks it as a connection is accepted: connection counts, and
    /// bytes outside HTTP (which has requests to hold back instead).
    pub fn on_connections(&self, mode: Mode) -> bool {
        self.per_connection() || (mode != Mode::Http && self.count == Counted::Bytes)
    }
}

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Counted {
    /// HTTP requests per period.
    Requests,
    /// Connections open at once.
    Connections,
    /// Connections accepted per period.
    NewConnections,
    /// Bytes both ways per period, counted as each request (TCP: each connection) ends; a key
    /// past it has its next one refused or delayed.
    Bytes,
    /// HTTP answers of 400 and above per period (a scanner collects 404s): a key past it has its
    /// next request refused or delayed.
    Errors,
}

impl Counted {
    pub fn as_str(self) -> &'static str {
        match self {
            Counted::Requests => "requests",
            Counted::Connections => "connections",
            Counted::NewConnections => "new-connections",
            Counted::Bytes => "bytes",
            Counted::Errors => "errors",
        }
    }
}

/// What a limit's key is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LimitKey {
    #[default]
    Client,
    Header(String),
    Cookie(String),
    Sni,
}

impl LimitKey {
    /// Whether the key is only known from an HTTP request.
    pub fn needs_request(&self) -> bool {
        matches!(self, LimitKey::Header(_) | LimitKey::Cookie(_))
    }
}

impl fmt::Display for LimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitKey::Client => f.write_str("client"),
            LimitKey::Header(h) => write!(f, "header:{h}"),
            LimitKey::Cookie(c) => write!(f, "cookie:{c}"),
            LimitKey::Sni => f.write_str("sni"),
        }
    }
}

impl FromStr for LimitKey {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let named = |name: &str, what| if name.is_empty() { Err(format!("`{text}` names no {what}")) } else { Ok(name.to_string()) };
        match text.split_once(':') {
            None if text == "client" => Ok(LimitKey::Client),
            None if text == "sni" => Ok(LimitKey::Sni),
            Some(("header", name)) => {
                let name = named(name, "header")?;
                hyper::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is not a header name"))?;
                Ok(LimitKey::Header(name.to_ascii_lowercase()))
            }
            Some(("cookie", name)) => Ok(LimitKey::Cookie(named(name, "cookie")?)),
            _ => Err(format!("unknown key `{text}`: write \"client\", \"header:<name>\", \"cookie:<name>\" or \"sni\"")),
        }
    }
}

impl Serialize for LimitKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LimitKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// What happens to a request or connection past its limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitAction {
    /// HTTP: 429 with `Retry-After`, `RateLimit-Policy` and `RateLimit`; TCP: the connection is
    /// closed at once.
    #[default]
    Reject,
    /// Held until it is under its limit (at most `hold`), then let through.
    Delay,
    /// Held for `hold`, then refused as `reject` does: a client that hammers waits.
    Tarpit,
    /// Let through, only counted and logged: a dry run to size a limit before enforcing it.
    Log,
}

impl LimitAction {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitAction::Reject => "reject",
            LimitAction::Delay => "delay",
            LimitAction::Tarpit => "tarpit",
            LimitAction::Log => "log",
        }
    }
}

/// Where a limit's counts live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitStore {
    #[default]
    Local,
    Redis,
}

/// A shared limit while its store cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailMode {
    #[default]
    Open,
    Closed,
}
