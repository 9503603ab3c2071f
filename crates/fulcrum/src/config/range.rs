//! The accepted range of every numeric setting, and how a value is said in an error about it.
//!
//! Types alone let a config through that takes the process down later: `max_headers =
//! 4294967295` makes hyper reserve room for four billion headers on the first request, and a
//! duration of a few hundred years overflows `Instant` arithmetic in the first timer that adds it.
//! So every number a user writes has a range here, chosen to hold any value a production setup
//! needs (HAProxy's limits are the guide) and nothing that breaks a dependency. `validate.rs`
//! checks each field against its range, so `fulcrum check`, a reload and every admin API change
//! refuse the same values with the same message. The schema's field docs and docs/configuration.md's
//! tables state the same ranges.

use std::fmt;
use std::time::Duration;

/// The inclusive range a setting accepts, and why it stops where it does (the hint of an error).
#[derive(Debug, Clone, Copy)]
pub struct Range<T> {
    pub min: T,
    pub max: T,
    pub why: &'static str,
}

impl<T: Shown + PartialOrd + Copy> Range<T> {
    const fn new(min: T, max: T, why: &'static str) -> Self {
        Range { min, max, why }
    }

    /// Whether `value` is within the range; NaN never is, since it compares false to both ends.
    pub fn contains(&self, value: T) -> bool {
        self.min <= value && value <= self.max
    }
}

impl<T: Shown> fmt::Display for Range<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to {}", self.min.shown(), self.max.shown())
    }
}

/// A value as a user writes it in the config: durations the way the parser reads them back.
pub trait Shown {
    fn shown(&self) -> String;
}

macro_rules! shown_as_display {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
shown_as_display!(u8, u16, u32, u64, usize, f64);

impl Shown for Duration {
    fn shown(&self) -> String {
        if self.is_zero() { "0s".into() } else { humantime::format_duration(*self).to_string() }
    }
}

/// The shortest timeout: tokio's timers count whole milliseconds, so anything shorter is zero.
const MS: Duration = Duration::from_millis(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

// Top level.
pub const WORKERS: Range<usize> = Range::new(0, 1024, "0 is one thread per core; more threads than 1024 only add switching");
pub const PROCESS_MAXCONN: Range<u32> = Range::new(1, 1_000_000, "leave it out to derive it from the descriptor limit (ulimit -n)");
pub const AUDIT_MAX_SIZE: Range<u64> = Range::new(4096, 1 << 30, "bytes before the audit file is rotated; 10485760 (10 MiB) is the default");
pub const AUDIT_KEEP: Range<u32> = Range::new(1, 100, "rotated audit files kept; 5 is the default");
pub const SHUTDOWN_GRACE: Range<Duration> = Range::new(Duration::ZERO, DAY, "0 closes connections at once; a drain longer than a day is a hang");
pub const RESOLVE_INTERVAL: Range<Duration> =
    Range::new(Duration::from_secs(1), DAY, "\"0s\" resolves only when a config is applied; more often than every second is a load on the resolver");
pub const FLEET_LEASE: Range<Duration> =
    Range::new(Duration::from_secs(2), MINUTE, "the registration is renewed every third of it; a minute keeps a stopped instance listed long enough to notice");

// A service.
pub const CONNECT_TIMEOUT: Range<Duration> =
    Range::new(MS, Duration::from_secs(300), "the kernel gives up a connect after about 2 minutes of SYN retries (tcp_syn_retries); the paper's rule uses \"2s\"");
pub const HSTS: Range<Duration> = Range::new(Duration::ZERO, Duration::from_secs(10 * 365 * 86_400), "browsers cap it near two years; \"0s\" makes them forget it");
pub const HANDSHAKE_TIMEOUT: Range<Duration> = Range::new(MS, Duration::from_secs(300), "a TLS handshake takes a few round trips; \"10s\" is the default");
pub const IDLE_TIMEOUT: Range<Duration> = Range::new(MS, Duration::from_secs(24 * 86_400), "up to 24 days, HAProxy's longest timeout; \"5m\" is the default");
pub const QUEUE_TIMEOUT: Range<Duration> = Range::new(Duration::ZERO, HOUR, "0 refuses at once when every server is full; \"5s\" is the default");
pub const FAILURE_LIMIT: Range<u32> = Range::new(0, 1000, "0 turns passive checking off; 5 is the default");
pub const RETRIES: Range<u32> = Range::new(0, 100, "each retry may wait a whole connect_timeout; 3 is the default");
pub const MAXCONN: Range<u32> = Range::new(0, 1_000_000, "0 is no limit");
/// Data ports below 1024 are the well-known ports of other services (and need privileges).
pub const DATA_PORT: Range<u16> = Range::new(1024, 65535, "use ports of 1024 and above, e.g. \"50000-50999\"");

// `[service.health]`.
pub const HEALTH_INTERVAL: Range<Duration> =
    Range::new(Duration::from_millis(10), DAY, "checks more often than every 10ms load the servers for nothing; the paper checks every \"60s\"");
pub const HEALTH_TIMEOUT: Range<Duration> = Range::new(MS, MINUTE, "start waits up to the longest check timeout for the first round; the paper uses \"5s\"");
pub const RISE_FALL: Range<u32> = Range::new(1, 1000, "checks in a row; 2 and 3 are the defaults");
pub const EXPECT_STATUS: Range<u16> = Range::new(100, 599, "HTTP status codes go from 100 to 599");
/// `port` of a check and of `[service.health.agent]`: port 0 cannot be connected to.
pub const CHECK_PORT: Range<u32> = Range::new(1, 65535, "a TCP port; leave port out to check the server's own");

// `[service.passive]` and `[service.p2c]`.
pub const DELTA: Range<f64> = Range::new(0.001, 1.0, "a share of the worst server's ratio; the paper uses 0.1");
pub const SLOT: Range<Duration> = Range::new(Duration::from_millis(10), HOUR, "the paper uses \"20s\"; the default is \"2s\"");
/// `mode = "kernel"`: each slot runs `nft` to read the counters, a child process, so a slot is
/// no shorter than a tenth of a second.
pub const KERNEL_SLOT: Range<Duration> = Range::new(Duration::from_millis(100), HOUR, "in mode = \"kernel\" each slot runs nft to read the counters; the default is \"2s\"");
pub const WINDOW_SLOTS: Range<usize> = Range::new(1, 1000, "the paper uses 10");
pub const MIN_SAMPLES: Range<u64> = Range::new(1, 1_000_000, "SYNs per window; 20 is the default");
pub const SLOW_START: Range<Duration> = Range::new(Duration::ZERO, HOUR, "\"0s\" is off; HAProxy users often set \"30s\"");

// `[service.damping]`.
pub const HALF_LIFE: Range<Duration> = Range::new(Duration::from_secs(1), DAY, "how fast a flapping server's penalty is forgiven; \"1m\" is the default");
pub const SUPPRESS: Range<u32> = Range::new(0, 100_000, "each flap adds 1000; 0 turns damping off, 2000 is the default");
pub const REUSE: Range<u32> = Range::new(1, 100_000, "below suppress; 750 is the default");
pub const DECAY: Range<Duration> = Range::new(Duration::from_millis(10), HOUR, "the time constant of the latency average; \"10s\" is the default");

// `[service.http]`.
pub const HEAD_TIMEOUT: Range<Duration> = Range::new(MS, HOUR, "it also ends idle keep-alive clients; \"10s\" is the default");
pub const RESPONSE_TIMEOUT: Range<Duration> = Range::new(MS, DAY, "\"30s\" is the default");
pub const KEEPALIVE_IDLE: Range<Duration> = Range::new(MS, HOUR, "servers close idle connections long before an hour; \"60s\" is the default");
/// hyper sets aside room for this many headers (64 bytes each) every time it parses a head, so
/// the bound is the memory one slow client can make it allocate per read.
pub const MAX_HEADERS: Range<usize> = Range::new(1, 1000, "hyper sets aside room for this many headers on every request it reads; 100 is the default (HAProxy: 101)");
/// hyper's read buffer cannot be smaller than 8192 bytes (it asserts so); a head larger than
/// 1 MiB is an attack, not a request.
pub const MAX_HEAD_SIZE: Range<usize> = Range::new(8192, 1 << 20, "hyper's read buffer needs at least 8192 bytes; 16384 is the default");
/// The `http` crate refuses a request target of 65535 bytes or more whatever is configured.
pub const MAX_URI_LENGTH: Range<usize> = Range::new(16, 65534, "hyper refuses longer targets itself; 8192 is the default");
/// The largest error page file (`error_pages`), held in memory per service.
pub const ERROR_PAGE_BYTES: u64 = 64 * 1024;
/// A body is streamed, never held whole: the bound is what a server is sent, not memory.
pub const MAX_REQUEST_BODY: Range<u64> = Range::new(0, 1 << 40, "0 is no limit; NGINX's client_max_body_size defaults to 1 MiB (1048576)");
pub const MAX_STREAMS: Range<u32> =
    Range::new(1, 1000, "each open stream may hold a request's read-ahead and a server connection; 100 is the default (RFC 9113 asks for at least 100)");
pub const ALT_SVC_MAX_AGE: Range<Duration> = Range::new(Duration::from_secs(1), Duration::from_secs(30 * 86_400), "\"24h\" is the default (RFC 7838's)");
pub const QUIC_RETRY_ABOVE: Range<u32> = Range::new(0, 100_000, "0 sends every new client a Retry; 64 is the default");
/// Below it a response is sent as it is; a response of unknown length is always compressed.
pub const COMPRESS_MIN_SIZE: Range<u64> = Range::new(0, 1 << 30, "1024 is the default; NGINX's gzip_min_length defaults to 20");

// `[service.http.tracing]`.
pub const TRACE_SAMPLE: Range<f64> = Range::new(0.0, 1.0, "a share of the requests that arrive without a sampled traceparent; 1.0 is the default");
/// Each batch is one export request's body, held while it is sent: 8192 spans are 2 to 12 MiB.
pub const TRACE_BATCH: Range<usize> = Range::new(1, 8192, "spans per export request; 512 is the default (the OpenTelemetry SDKs')");
pub const TRACE_INTERVAL: Range<Duration> = Range::new(Duration::from_millis(10), MINUTE, "how long a span may wait to be sent; \"5s\" is the default");
/// About 300 bytes a waiting span, 1.5 KiB at most (a long path and `tracestate`): 65536 are
/// 20 to 100 MiB per service.
pub const TRACE_QUEUE: Range<usize> = Range::new(1, 65536, "spans waiting to be sent, about 300 bytes each (1.5 KiB at most); 2048 is the default");
pub const TRACE_TIMEOUT: Range<Duration> = Range::new(MS, MINUTE, "\"10s\" is the default (the OpenTelemetry SDKs')");

// `[service.outlier]`, `panic_threshold` and `[service.http.retry]`.
pub const CONSECUTIVE: Range<u32> = Range::new(0, 1000, "0 turns it off; Envoy ejects after 5");
pub const OUTLIER_INTERVAL: Range<Duration> = Range::new(Duration::from_secs(1), HOUR, "\"10s\" is the default (Envoy's)");
pub const BASE_EJECTION_TIME: Range<Duration> = Range::new(Duration::from_secs(1), HOUR, "\"30s\" is the default (Envoy's)");
pub const MAX_EJECTION_TIME: Range<Duration> = Range::new(Duration::from_secs(1), DAY, "\"5m\" is the default (Envoy's)");
pub const PERCENT: Range<u32> = Range::new(0, 100, "a share of the whole, in percent");
pub const SUCCESS_RATE_STDEV: Range<f64> = Range::new(0.0, 10.0, "0 turns the success-rate test off; Envoy uses 1.9");
pub const SUCCESS_RATE_MIN_REQUESTS: Range<u64> = Range::new(1, 1_000_000, "requests per interval; 100 is the default");
pub const SUCCESS_RATE_MIN_HOSTS: Range<u32> = Range::new(2, 1000, "a mean of one server says nothing; 3 is the default");
pub const SHIFT_THRESHOLD: Range<f64> = Range::new(0.0, 1.0, "an error ratio; 0.05 is the default");
pub const RETRY_COUNT: Range<u32> = Range::new(1, 10, "each retry is another server's time; 2 is the default");
pub const MIN_RETRIES: Range<u32> = Range::new(0, 10_000, "3 a second is the default");
pub const BUDGET_WINDOW: Range<Duration> = Range::new(Duration::from_secs(1), HOUR, "\"10s\" is the default");

// `[[service.limit]]`.
pub const IPV4_PREFIX: Range<u8> = Range::new(8, 32, "32 counts each address, 24 each /24 network");
pub const IPV6_PREFIX: Range<u8> = Range::new(16, 128, "64 counts each site's /64, as one host usually has a whole /64");
pub const LIMIT: Range<u64> = Range::new(1, 1_000_000_000, "per period (connections: at once); to let everything through, leave the limit out");
pub const LIMIT_PERIOD: Range<Duration> = Range::new(MS, HOUR, "\"1s\" is the default; a rate over more than an hour is a quota, not a limit");
pub const BURST: Range<u64> = Range::new(0, 1_000_000_000, "how many beyond the rate may come at once; 0 is NGINX's strict rate");
pub const LIMIT_HOLD: Range<Duration> = Range::new(MS, MINUTE, "each held request or connection keeps its socket open; \"1s\" is the default");
/// About 135 bytes a key (`live::limit::gcra::BYTES_PER_KEY`): 10 million keys are 1 to 1.6 GB.
pub const MAX_KEYS: Range<usize> = Range::new(1, 10_000_000, "about 135 bytes a key; 100000 is the default");
pub const SYNC_INTERVAL: Range<Duration> =
    Range::new(Duration::from_millis(10), Duration::from_secs(10), "the fleet may go past a limit by what it admits in one interval; \"100ms\" is the default");

// `[[service.server]]`.
pub const WEIGHT: Range<u32> = Range::new(1, super::MAX_WEIGHT, "weights go from 1 to 256; disable a server with enabled = false");

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
