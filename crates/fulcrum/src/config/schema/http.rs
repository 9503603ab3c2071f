//! HTTP mode (`[service.http]`): limits, timeouts, forwarded headers, the access log and cookie affinity.

use super::*;

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
    /// Requests sent again when a server answers a status `retry_on` names, within a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    #[serde(default = "defaults::forwarded_headers")]
    pub forwarded_headers: Vec<ForwardedHeader>,
    /// Clients in these networks are not named in `X-Forwarded-For` or `Forwarded` (HAProxy's
    /// `forwardfor except`): a local proxy in front that names its own clients.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forwarded_except: Vec<crate::config::Network>,
    /// Proxies in front whose `X-Forwarded-For` Fulcrum believes: for a connection from one of
    /// these networks, the client that routes' `client` and `client_file` and the `{client_ip}`
    /// variable see is the rightmost address of `X-Forwarded-For` that is not itself one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_forwarders: Vec<crate::config::Network>,
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
    /// Most bytes in a request body (413 above), 0 to 1 TiB; 0: no limit. Refused before any
    /// server is contacted when `Content-Length` says so or the body ends within the read-ahead;
    /// a longer body that passes it on its way is cut, and the server connection closed.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_request_body: u64,
    #[serde(default = "defaults::access_log")]
    pub access_log: AccessLog,
    /// The access log line's own shape: text with `{field}`s; in JSON, the fields it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Access log lines go to a syslog receiver instead of the standard error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syslog: Option<Syslog>,
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
    #[serde(default, skip_serializing_if = "is_false", alias = "redirect_to_https")]
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
    /// HTTP/2 and HTTP/3: streams a client may have open at once, 1 to 1000.
    #[serde(default = "defaults::max_streams")]
    pub max_streams: u32,
    /// With `[service.tls]`: also serve HTTP/3 over QUIC, on UDP at the service's port, and
    /// announce it with `Alt-Svc` on HTTP/1.1 and HTTP/2 responses.
    #[serde(default, skip_serializing_if = "is_false")]
    pub http3: bool,
    /// With `http3`: how long clients may remember the `Alt-Svc` announcement (its `ma`), 1s to
    /// 30 days.
    #[serde(default = "defaults::alt_svc_max_age", with = "duration", skip_serializing_if = "is_default_alt_svc_max_age")]
    pub alt_svc_max_age: Duration,
    /// With `http3`: QUIC handshakes in progress at this service above which a new client must
    /// first prove its address with a Retry token (one more round trip), 0 to 100000; 0 asks
    /// every client.
    #[serde(default = "defaults::quic_retry_above", skip_serializing_if = "is_default_quic_retry_above")]
    pub quic_retry_above: u32,
    /// With `http3`: take 0-RTT requests from resuming clients. Safe methods (GET, HEAD, OPTIONS,
    /// TRACE) go on at once with `Early-Data: 1`; others wait for the handshake to finish (425
    /// Too Early if it does not), since early data can be replayed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quic_early_data: bool,
    /// Pages for answers of these statuses (`"503" = "/etc/fulcrum/503.html"`, 400 to 599): the
    /// answers Fulcrum makes itself, and with `intercept_errors` a server's. Each file at most
    /// 64 KiB, its type from its name; read at start and again on a reload when it changed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub error_pages: std::collections::BTreeMap<String, String>,
    /// A server's answer whose status has an error page gets the page instead.
    #[serde(default, skip_serializing_if = "is_false")]
    pub intercept_errors: bool,
    /// The header that carries each request's id (e.g. `X-Request-Id`): the client's own when it
    /// sent a usable one (1 to 128 visible ASCII characters), else a new UUIDv7; passed to the
    /// server, logged, and returned in the response. Unset: no id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Responses compressed for the clients that accept it (`[service.http.compression]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// W3C `traceparent` propagation and OpenTelemetry export (`[service.http.tracing]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<Tracing>,
}

/// `[service.http.compression]`: which responses are compressed, and how. A response is
/// compressed when the client's `Accept-Encoding` takes one of `algorithms`, its type is one of
/// `types`, it is at least `min_size` bytes (when its length is known), and it is not encoded
/// already, a range, or marked `Cache-Control: no-transform`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compression {
    /// The codings offered, best first: the client's q-values decide, this order breaks ties.
    #[serde(default = "defaults::codings")]
    pub algorithms: Vec<Coding>,
    /// Media types compressed (`text/html`, or `text/*` for a whole type), at most 100.
    #[serde(default = "defaults::compressed_types")]
    pub types: Vec<String>,
    /// Smallest response compressed, 0 to 1 GiB: below it the coding's own framing outweighs
    /// the gain. A response of unknown length is compressed.
    #[serde(default = "defaults::compress_min_size")]
    pub min_size: u64,
}

impl Default for Compression {
    fn default() -> Self {
        Compression { algorithms: defaults::codings(), types: defaults::compressed_types(), min_size: defaults::compress_min_size() }
    }
}

/// A content coding Fulcrum compresses with (RFC 9110 section 8.4.1), each at a level made for
/// on-the-fly compression, its window bounded (proxy/http/compress.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Coding {
    Zstd,
    Br,
    Gzip,
}

impl Coding {
    /// The token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }
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
            retry: None,
            forwarded_headers: defaults::forwarded_headers(),
            forwarded_except: Vec::new(),
            trusted_forwarders: Vec::new(),
            head_timeout: defaults::head_timeout(),
            response_timeout: defaults::response_timeout(),
            keepalive_idle: defaults::keepalive_idle(),
            queue_timeout: None,
            max_headers: defaults::max_headers(),
            max_head_size: defaults::max_head_size(),
            max_uri_length: defaults::max_uri_length(),
            max_request_body: 0,
            access_log: defaults::access_log(),
            access_log_why: false,
            log_format: None,
            syslog: None,
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
            http3: false,
            alt_svc_max_age: defaults::alt_svc_max_age(),
            quic_retry_above: defaults::quic_retry_above(),
            quic_early_data: false,
            request_id: None,
            error_pages: Default::default(),
            intercept_errors: false,
            compression: None,
            tracing: None,
        }
    }
}

impl Http {
    pub(super) fn is_default(&self) -> bool {
        *self == Http::default()
    }
}

fn is_default_alt_svc_max_age(d: &Duration) -> bool {
    *d == defaults::alt_svc_max_age()
}

fn is_default_quic_retry_above(n: &u32) -> bool {
    *n == defaults::quic_retry_above()
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}
