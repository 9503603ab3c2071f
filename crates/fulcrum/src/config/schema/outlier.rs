//! L7 health from real traffic: `[service.outlier]` (and a pool's), Envoy's outlier detection,
//! with the passive-measurement paper's gentler alternative (`mode = "shift"`); and
//! `[service.http.retry]`, retries on what a server answered, within a retry budget.

use std::fmt;
use std::str::FromStr;

use super::*;

/// `[service.outlier]`: servers that fail real requests are taken out (or given less traffic)
/// for a while, without waiting for a health check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outlier {
    #[serde(default)]
    pub mode: OutlierMode,
    /// 5xx answers in a row (HTTP) that eject a server, 0 (off) to 1000.
    #[serde(default = "defaults::consecutive")]
    pub consecutive_5xx: u32,
    /// Gateway errors in a row (a failed connect, a reset or a timeout; HTTP: also a 502, 503 or
    /// 504 answer) that eject a server, 0 (off) to 1000.
    #[serde(default = "defaults::consecutive")]
    pub consecutive_gateway_errors: u32,
    /// How often the success rates are compared and `shift` moves traffic, 1s to 1 hour.
    #[serde(default = "defaults::outlier_interval", with = "duration")]
    pub interval: Duration,
    /// An ejection lasts this times the server's ejections in a row, 1s to 1 hour.
    #[serde(default = "defaults::base_ejection_time", with = "duration")]
    pub base_ejection_time: Duration,
    /// The longest an ejection lasts, 1s to 1 day.
    #[serde(default = "defaults::max_ejection_time", with = "duration")]
    pub max_ejection_time: Duration,
    /// The most of the pool's servers ejected at once, 0 to 100 percent; one server may always be.
    #[serde(default = "defaults::max_ejection_percent")]
    pub max_ejection_percent: u32,
    /// A server whose success rate over an interval is this many standard deviations below the
    /// pool's mean is ejected, 0 (off) to 10 (Envoy's 1.9).
    #[serde(default = "defaults::success_rate_stdev")]
    pub success_rate_stdev: f64,
    /// Requests a server needs in an interval to count in the success-rate test and in `shift`,
    /// 1 to 1,000,000.
    #[serde(default = "defaults::success_rate_min_requests")]
    pub success_rate_min_requests: u64,
    /// Servers with enough requests for the success-rate test to run, 2 to 1000.
    #[serde(default = "defaults::success_rate_min_hosts")]
    pub success_rate_min_hosts: u32,
    /// `shift`: the share of its own traffic the worst server loses each interval, 0.001 to 1
    /// (the paper's Δ, 0.1); a server back under `shift_threshold` regains as much of its whole.
    #[serde(default = "defaults::delta")]
    pub shift_delta: f64,
    /// `shift`: the error ratio over an interval (0 to 1) above which a server loses traffic.
    #[serde(default = "defaults::shift_threshold")]
    pub shift_threshold: f64,
}

impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            mode: OutlierMode::Eject,
            consecutive_5xx: defaults::consecutive(),
            consecutive_gateway_errors: defaults::consecutive(),
            interval: defaults::outlier_interval(),
            base_ejection_time: defaults::base_ejection_time(),
            max_ejection_time: defaults::max_ejection_time(),
            max_ejection_percent: defaults::max_ejection_percent(),
            success_rate_stdev: defaults::success_rate_stdev(),
            success_rate_min_requests: defaults::success_rate_min_requests(),
            success_rate_min_hosts: defaults::success_rate_min_hosts(),
            shift_delta: defaults::delta(),
            shift_threshold: defaults::shift_threshold(),
        }
    }
}

/// What outlier detection does to a failing server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutlierMode {
    /// Take it out for an ejection time (Envoy's way).
    #[default]
    Eject,
    /// Move its traffic away in steps of `shift_delta` of its share per interval while its error
    /// ratio is above `shift_threshold`, and back as it recovers (the passive-measurement paper's
    /// way, on error ratios instead of SYN losses).
    Shift,
}

/// `[service.http.retry]`: a request sent again to another server when the first answered
/// with a status it names, broke or timed out; idempotent requests whose body is in hand only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// What is retried: statuses 500 to 599 (as text, `"503"`), `"reset"` (the server broke the
    /// connection), `"timeout"` (no answer within `per_try_timeout`), `"connect-failure"`.
    pub retry_on: Vec<RetryOn>,
    /// Retries of one request, 1 to 10.
    #[serde(default = "defaults::retry_count")]
    pub count: u32,
    /// How long each try waits for an answer, 1ms to 1 day; unset: `response_timeout`.
    #[serde(default, with = "optional_duration", skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<Duration>,
    /// Retries are at most this share of the requests over `budget_window`, 0 to 100 percent
    /// (Envoy's retry budget), so retries cannot multiply an overload.
    #[serde(default = "defaults::budget_percent")]
    pub budget_percent: u32,
    /// Retries allowed a second whatever the budget says, 0 to 10,000, so a quiet service can
    /// still retry.
    #[serde(default = "defaults::min_retries_per_second")]
    pub min_retries_per_second: u32,
    /// The window the budget counts over, 1s to 1 hour.
    #[serde(default = "defaults::budget_window", with = "duration")]
    pub budget_window: Duration,
}

/// One thing `retry_on` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOn {
    Status(u16),
    Reset,
    Timeout,
    ConnectFailure,
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryOn::Status(s) => write!(f, "{s}"),
            RetryOn::Reset => f.write_str("reset"),
            RetryOn::Timeout => f.write_str("timeout"),
            RetryOn::ConnectFailure => f.write_str("connect-failure"),
        }
    }
}

impl FromStr for RetryOn {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "reset" => Ok(RetryOn::Reset),
            "timeout" => Ok(RetryOn::Timeout),
            "connect-failure" => Ok(RetryOn::ConnectFailure),
            _ => match text.parse::<u16>() {
                Ok(s) if (500..=599).contains(&s) => Ok(RetryOn::Status(s)),
                _ => Err(format!("retry_on {text:?}: a status from \"500\" to \"599\", \"reset\", \"timeout\" or \"connect-failure\"")),
            },
        }
    }
}

impl Serialize for RetryOn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RetryOn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl Retry {
    /// Whether `what` is retried.
    pub fn on(&self, what: RetryOn) -> bool {
        self.retry_on.contains(&what)
    }
}
