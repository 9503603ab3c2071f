//! Every numeric setting of the config with its range, and config files written from them: what
//! the range tests here and the tests that run such configs (`proxy::http`) draw values from.

use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// How a setting's values are drawn and written.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// `wide`: the field's type holds 4294967295, the issue's `max_headers`.
    Count {
        min: u64,
        max: u64,
        wide: bool,
    },
    /// Durations, in whole milliseconds (every range ends on one).
    Time {
        min: u64,
        max: u64,
    },
    Share {
        min: f64,
        max: f64,
    },
    /// `data_ports`: its first port is ranged, the last follows it.
    Ports {
        min: u16,
        max: u16,
    },
}

/// One numeric key of the test config: the table it is written in and its accepted range.
#[derive(Debug, Clone)]
pub(crate) struct Setting {
    pub section: &'static str,
    pub key: &'static str,
    pub kind: Kind,
    /// The range as errors state it, e.g. "1 to 1000".
    pub range: String,
}

pub(crate) fn count<T: Shown + PartialOrd + Copy + TryInto<u64>>(section: &'static str, key: &'static str, r: &Range<T>) -> Setting
where
    T::Error: Debug,
{
    let kind = Kind::Count { min: r.min.try_into().unwrap(), max: r.max.try_into().unwrap(), wide: std::mem::size_of::<T>() >= 4 };
    Setting { section, key, kind, range: r.to_string() }
}

pub(crate) fn time(section: &'static str, key: &'static str, r: &Range<Duration>) -> Setting {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    Setting { section, key, kind: Kind::Time { min: ms(r.min), max: ms(r.max) }, range: r.to_string() }
}

/// Every numeric setting, in the tables of `SECTIONS`. Pools have their own health check,
/// `passive`, `p2c` and servers, so those are listed for the service and for its pool.
pub(crate) fn settings() -> Vec<Setting> {
    let mut all = vec![
        count("", "workers", &WORKERS),
        count("", "maxconn", &PROCESS_MAXCONN),
        time("", "shutdown_grace", &SHUTDOWN_GRACE),
        time("", "resolve_interval", &RESOLVE_INTERVAL),
        count("audit", "max_size", &AUDIT_MAX_SIZE),
        count("audit", "keep", &AUDIT_KEEP),
        time("service", "connect_timeout", &CONNECT_TIMEOUT),
        time("service", "client_timeout", &IDLE_TIMEOUT),
        time("service", "server_timeout", &IDLE_TIMEOUT),
        time("service", "queue_timeout", &QUEUE_TIMEOUT),
        count("service", "failure_limit", &FAILURE_LIMIT),
        count("service", "retries", &RETRIES),
        count("service", "maxconn", &MAXCONN),
        time("service.http", "head_timeout", &HEAD_TIMEOUT),
        time("service.http", "response_timeout", &RESPONSE_TIMEOUT),
        time("service.http", "queue_timeout", &QUEUE_TIMEOUT),
        time("service.http", "keepalive_idle", &KEEPALIVE_IDLE),
        count("service.http", "max_headers", &MAX_HEADERS),
        count("service.http", "max_head_size", &MAX_HEAD_SIZE),
        count("service.http", "max_uri_length", &MAX_URI_LENGTH),
        count("service.http", "max_request_body", &MAX_REQUEST_BODY),
        count("service.http", "max_streams", &MAX_STREAMS),
        time("service.http", "alt_svc_max_age", &ALT_SVC_MAX_AGE),
        count("service.http", "quic_retry_above", &QUIC_RETRY_ABOVE),
        count("service.http.compression", "min_size", &COMPRESS_MIN_SIZE),
        Setting { section: "service.http.tracing", key: "sample", kind: Kind::Share { min: TRACE_SAMPLE.min, max: TRACE_SAMPLE.max }, range: TRACE_SAMPLE.to_string() },
        count("service.http.tracing", "batch_size", &TRACE_BATCH),
        time("service.http.tracing", "interval", &TRACE_INTERVAL),
        count("service.http.tracing", "queue", &TRACE_QUEUE),
        time("service.http.tracing", "timeout", &TRACE_TIMEOUT),
        count("service.http.retry", "count", &RETRY_COUNT),
        time("service.http.retry", "per_try_timeout", &RESPONSE_TIMEOUT),
        count("service.http.retry", "budget_percent", &PERCENT),
        count("service.http.retry", "min_retries_per_second", &MIN_RETRIES),
        time("service.http.retry", "budget_window", &BUDGET_WINDOW),
        count("service.limit", "ipv4_prefix", &IPV4_PREFIX),
        count("service.limit", "ipv6_prefix", &IPV6_PREFIX),
        count("service.limit", "limit", &LIMIT),
        time("service.limit", "period", &LIMIT_PERIOD),
        count("service.limit", "burst", &BURST),
        time("service.limit", "hold", &LIMIT_HOLD),
        count("service.limit", "max_keys", &MAX_KEYS),
        time("service.limit", "sync_interval", &SYNC_INTERVAL),
        Setting { section: "ftp", key: "data_ports", kind: Kind::Ports { min: DATA_PORT.min, max: DATA_PORT.max }, range: DATA_PORT.to_string() },
    ];
    for (pool, health, agent, passive, p2c, damping, server, outlier) in [
        ("service", "service.health", "service.health.agent", "service.passive", "service.p2c", "service.damping", "service.server", "service.outlier"),
        (
            "service.pool",
            "service.pool.health",
            "service.pool.health.agent",
            "service.pool.passive",
            "service.pool.p2c",
            "service.pool.damping",
            "service.pool.server",
            "service.pool.outlier",
        ),
    ] {
        all.extend([
            count(pool, "panic_threshold", &PERCENT),
            count(outlier, "consecutive_5xx", &CONSECUTIVE),
            count(outlier, "consecutive_gateway_errors", &CONSECUTIVE),
            time(outlier, "interval", &OUTLIER_INTERVAL),
            time(outlier, "base_ejection_time", &BASE_EJECTION_TIME),
            time(outlier, "max_ejection_time", &MAX_EJECTION_TIME),
            count(outlier, "max_ejection_percent", &PERCENT),
            Setting {
                section: outlier,
                key: "success_rate_stdev",
                kind: Kind::Share { min: SUCCESS_RATE_STDEV.min, max: SUCCESS_RATE_STDEV.max },
                range: SUCCESS_RATE_STDEV.to_string(),
            },
            count(outlier, "success_rate_min_requests", &SUCCESS_RATE_MIN_REQUESTS),
            count(outlier, "success_rate_min_hosts", &SUCCESS_RATE_MIN_HOSTS),
            Setting { section: outlier, key: "shift_delta", kind: Kind::Share { min: DELTA.min, max: DELTA.max }, range: DELTA.to_string() },
            Setting { section: outlier, key: "shift_threshold", kind: Kind::Share { min: SHIFT_THRESHOLD.min, max: SHIFT_THRESHOLD.max }, range: SHIFT_THRESHOLD.to_string() },
            time(health, "interval", &HEALTH_INTERVAL),
            time(health, "timeout", &HEALTH_TIMEOUT),
            count(health, "rise", &RISE_FALL),
            count(health, "fall", &RISE_FALL),
            count(health, "expect_status", &EXPECT_STATUS),
            count(health, "port", &CHECK_PORT),
            count(agent, "port", &CHECK_PORT),
            time(agent, "interval", &HEALTH_INTERVAL),
            time(agent, "timeout", &HEALTH_TIMEOUT),
            Setting { section: passive, key: "delta", kind: Kind::Share { min: DELTA.min, max: DELTA.max }, range: DELTA.to_string() },
            time(passive, "slot", &SLOT),
            count(passive, "window_slots", &WINDOW_SLOTS),
            count(passive, "min_samples", &MIN_SAMPLES),
            time(p2c, "decay", &DECAY),
            time(pool, "slow_start", &SLOW_START),
            time(damping, "half_life", &HALF_LIFE),
            count(damping, "suppress", &SUPPRESS),
            count(damping, "reuse", &REUSE),
            count(server, "weight", &WEIGHT),
            count(server, "maxconn", &MAXCONN),
        ]);
    }
    all
}

/// The tables of the test config in file order, each with the lines it needs besides numbers: an
/// HTTP service with a routed pool (HTTP checks, so `expect_status` is used), and an FTP service.
pub(crate) const SECTIONS: &[(&str, &str)] = &[
    ("", ""),
    ("audit", "[audit]\nfile = \"/var/log/fulcrum/audit.log\"\n"),
    ("service", "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\nalgorithm = \"passive-ratio\"\n"),
    ("service.health", "[service.health]\nkind = \"http\"\npath = \"/\"\n"),
    ("service.health.agent", "[service.health.agent]\n"),
    ("service.passive", "[service.passive]\n"),
    ("service.p2c", "[service.p2c]\n"),
    ("service.damping", "[service.damping]\n"),
    ("service.http", "[service.http]\n"),
    ("service.http.compression", "[service.http.compression]\n"),
    ("service.http.tracing", "[service.http.tracing]\n"),
    ("service.http.retry", "[service.http.retry]\nretry_on = [\"503\"]\n"),
    ("service.outlier", "[service.outlier]\n"),
    ("service.server", "[[service.server]]\naddress = \"127.0.0.1:1001\"\n"),
    ("service.pool", "[[service.pool]]\nname = \"p\"\nalgorithm = \"p2c-ewma\"\n"),
    ("service.pool.health", "[service.pool.health]\nkind = \"http\"\n"),
    ("service.pool.health.agent", "[service.pool.health.agent]\n"),
    ("service.pool.passive", "[service.pool.passive]\n"),
    ("service.pool.p2c", "[service.pool.p2c]\n"),
    ("service.pool.damping", "[service.pool.damping]\n"),
    ("service.pool.outlier", "[service.pool.outlier]\n"),
    ("service.pool.server", "[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n"),
    ("service.route", "[[service.route]]\npool = \"p\"\npath_prefix = [\"/p\"]\n"),
    ("service.limit", "[[service.limit]]\nname = \"l\"\ncount = \"requests\"\n"),
    ("ftp", "[[service]]\nname = \"files\"\nlisten = \"127.0.0.1:1003\"\nmode = \"ftp\"\n"),
    ("ftp.health", "[service.health]\nkind = \"ftp\"\n"),
    ("ftp.server", "[[service.server]]\naddress = \"127.0.0.1:1004\"\n"),
];

/// The config with `values[i]` (already TOML) for `settings[i]`, and the line each one is on.
pub(crate) fn config_text(settings: &[Setting], values: &[String]) -> (String, Vec<usize>) {
    let mut text = String::new();
    let mut lines = vec![0; settings.len()];
    for (section, header) in SECTIONS {
        text.push_str(header);
        for (i, s) in settings.iter().enumerate().filter(|(_, s)| s.section == *section) {
            lines[i] = text.matches('\n').count() + 1;
            text.push_str(&format!("{} = {}\n", s.key, values[i]));
        }
    }
    (text, lines)
}

pub(crate) fn ms(n: u64) -> String {
    format!("\"{n}ms\"")
}

pub(crate) fn share(v: f64) -> String {
    // Debug keeps the decimal point TOML needs to read a float ("1.0", not "1").
    format!("{v:?}")
}

/// Values of a setting's range, half of them one of its ends.
pub(crate) fn in_range(kind: Kind) -> BoxedStrategy<String> {
    match kind {
        Kind::Count { min, max, .. } => prop_oneof![Just(min), Just(max), min..=max].prop_map(|n| n.to_string()).boxed(),
        Kind::Time { min, max } => prop_oneof![Just(min), Just(max), min..=max].prop_map(ms).boxed(),
        Kind::Share { min, max } => prop_oneof![Just(min), Just(max), min..=max].prop_map(share).boxed(),
        Kind::Ports { min, max } => prop_oneof![Just(min), Just(max), min..=max]
            .prop_flat_map(move |first| prop_oneof![Just(first), Just(max), first..=max].prop_map(move |last| format!("\"{first}-{last}\"")))
            .boxed(),
    }
}

/// Values just outside a setting's range (and, for durations and shares, the absurd ones).
pub(crate) fn outside(kind: Kind) -> Vec<String> {
    match kind {
        Kind::Count { min, max, wide } => {
            let mut v: Vec<String> = min.checked_sub(1).into_iter().chain(Some(max + 1)).map(|n| n.to_string()).collect();
            if wide && max < u64::from(u32::MAX) {
                v.push(u32::MAX.to_string());
            }
            v
        }
        Kind::Time { min, max } => {
            let mut v: Vec<String> = min.checked_sub(1).into_iter().chain(Some(max + 1)).map(ms).collect();
            v.push("\"10000000000s\"".into());
            v
        }
        Kind::Share { min, max } => {
            let below = if min > 0.0 { min / 2.0 } else { -0.001 };
            vec![share(below), share(max * 1.001), "nan".into(), "inf".into(), "-inf".into(), "-0.5".into()]
        }
        Kind::Ports { min, .. } => vec![format!("\"{}-{}\"", min - 1, min), "\"1-100\"".into()],
    }
}

/// Each setting at its smallest accepted value: the background for one value outside.
pub(crate) fn minimal(settings: &[Setting]) -> Vec<String> {
    settings
        .iter()
        .map(|s| match s.kind {
            Kind::Count { min, .. } => min.to_string(),
            Kind::Time { min, .. } => ms(min),
            Kind::Share { min, .. } => share(min),
            Kind::Ports { min, .. } => format!("\"{min}-{min}\""),
        })
        .collect()
}

/// Values drawn for every setting, each from its range.
pub(crate) fn drawn_values() -> Vec<BoxedStrategy<String>> {
    settings().into_iter().map(|s| in_range(s.kind)).collect()
}

/// The config of drawn `values` (a `reuse` above its `suppress` lowered to fit), as parsed.
pub(crate) fn drawn_config(mut values: Vec<String>) -> Result<crate::config::Config, TestCaseError> {
    let settings = settings();
    below_suppress(&settings, &mut values);
    let (text, _) = config_text(&settings, &values);
    crate::config::parse(&text, "t.toml").map_err(|d| TestCaseError::fail(format!("{d}\n{text}")))
}

/// `reuse` must be below `suppress` (or damping off), a rule between two values that each
/// range alone does not state: a drawn `reuse` is lowered to fit.
pub(crate) fn below_suppress(settings: &[Setting], values: &mut [String]) {
    for section in ["service.damping", "service.pool.damping"] {
        let at = |key| settings.iter().position(|s| s.section == section && s.key == key).unwrap();
        let (suppress, reuse) = (at("suppress"), at("reuse"));
        let (s, r): (u64, u64) = (values[suppress].parse().unwrap(), values[reuse].parse().unwrap());
        if s > 0 && r >= s {
            match s - 1 {
                0 => values[suppress] = "0".into(),
                fit => values[reuse] = fit.to_string(),
            }
        }
    }
}
