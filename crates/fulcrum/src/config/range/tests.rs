//! Every numeric setting, written into a config file: values drawn from its range (mostly its
//! ends) are accepted and run, values just outside it are refused with the range in the message.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::{Config, parse};

/// How a setting's values are drawn and written.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `wide`: the field's type holds 4294967295, the issue's `max_headers`.
    Count { min: u64, max: u64, wide: bool },
    /// Durations, in whole milliseconds (every range ends on one).
    Time { min: u64, max: u64 },
    Share { min: f64, max: f64 },
    /// `data_ports`: its first port is ranged, the last follows it.
    Ports { min: u16, max: u16 },
}

/// One numeric key of the test config: the table it is written in and its accepted range.
#[derive(Debug, Clone)]
struct Setting {
    section: &'static str,
    key: &'static str,
    kind: Kind,
    /// The range as errors state it, e.g. "1 to 1000".
    range: String,
}

fn count<T: Shown + PartialOrd + Copy + TryInto<u64>>(section: &'static str, key: &'static str, r: &Range<T>) -> Setting
where
    T::Error: Debug,
{
    let kind = Kind::Count { min: r.min.try_into().unwrap(), max: r.max.try_into().unwrap(), wide: std::mem::size_of::<T>() >= 4 };
    Setting { section, key, kind, range: r.to_string() }
}

fn time(section: &'static str, key: &'static str, r: &Range<Duration>) -> Setting {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap();
    Setting { section, key, kind: Kind::Time { min: ms(r.min), max: ms(r.max) }, range: r.to_string() }
}

/// Every numeric setting, in the tables of `SECTIONS`. Pools have their own health check,
/// `passive`, `p2c` and servers, so those are listed for the service and for its pool.
fn settings() -> Vec<Setting> {
    let mut all = vec![
        count("", "workers", &WORKERS),
        count("", "maxconn", &PROCESS_MAXCONN),
        time("", "shutdown_grace", &SHUTDOWN_GRACE),
        time("", "resolve_interval", &RESOLVE_INTERVAL),
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
        count("service.http", "max_streams", &MAX_STREAMS),
        Setting { section: "ftp", key: "data_ports", kind: Kind::Ports { min: DATA_PORT.min, max: DATA_PORT.max }, range: DATA_PORT.to_string() },
    ];
    for (pool, health, passive, p2c, damping, server) in [
        ("service", "service.health", "service.passive", "service.p2c", "service.damping", "service.server"),
        ("service.pool", "service.pool.health", "service.pool.passive", "service.pool.p2c", "service.pool.damping", "service.pool.server"),
    ] {
        all.extend([
            time(health, "interval", &HEALTH_INTERVAL),
            time(health, "timeout", &HEALTH_TIMEOUT),
            count(health, "rise", &RISE_FALL),
            count(health, "fall", &RISE_FALL),
            count(health, "expect_status", &EXPECT_STATUS),
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
const SECTIONS: &[(&str, &str)] = &[
    ("", ""),
    ("service", "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\nalgorithm = \"passive-ratio\"\n"),
    ("service.health", "[service.health]\nkind = \"http\"\npath = \"/\"\n"),
    ("service.passive", "[service.passive]\n"),
    ("service.p2c", "[service.p2c]\n"),
    ("service.damping", "[service.damping]\n"),
    ("service.http", "[service.http]\n"),
    ("service.server", "[[service.server]]\naddress = \"127.0.0.1:1001\"\n"),
    ("service.pool", "[[service.pool]]\nname = \"p\"\nalgorithm = \"p2c-ewma\"\n"),
    ("service.pool.health", "[service.pool.health]\nkind = \"http\"\n"),
    ("service.pool.passive", "[service.pool.passive]\n"),
    ("service.pool.p2c", "[service.pool.p2c]\n"),
    ("service.pool.damping", "[service.pool.damping]\n"),
    ("service.pool.server", "[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n"),
    ("service.route", "[[service.route]]\npool = \"p\"\npath_prefix = [\"/p\"]\n"),
    ("ftp", "[[service]]\nname = \"files\"\nlisten = \"127.0.0.1:1003\"\nmode = \"ftp\"\n"),
    ("ftp.health", "[service.health]\nkind = \"ftp\"\n"),
    ("ftp.server", "[[service.server]]\naddress = \"127.0.0.1:1004\"\n"),
];

/// The config with `values[i]` (already TOML) for `settings[i]`, and the line each one is on.
fn config_text(settings: &[Setting], values: &[String]) -> (String, Vec<usize>) {
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

fn ms(n: u64) -> String {
    format!("\"{n}ms\"")
}

fn share(v: f64) -> String {
    // Debug keeps the decimal point TOML needs to read a float ("1.0", not "1").
    format!("{v:?}")
}

/// Values of a setting's range, half of them one of its ends.
fn in_range(kind: Kind) -> BoxedStrategy<String> {
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
fn outside(kind: Kind) -> Vec<String> {
    match kind {
        Kind::Count { min, max, wide } => {
            let mut v: Vec<String> = min.checked_sub(1).into_iter().chain(Some(max + 1)).map(|n| n.to_string()).collect();
            if wide {
                v.push(u32::MAX.to_string());
            }
            v
        }
        Kind::Time { min, max } => {
            let mut v: Vec<String> = min.checked_sub(1).into_iter().chain(Some(max + 1)).map(ms).collect();
            v.push("\"10000000000s\"".into());
            v
        }
        Kind::Share { min, max } => vec![share(min / 2.0), share(max * 1.001), "nan".into(), "inf".into(), "-inf".into(), "-0.5".into()],
        Kind::Ports { min, .. } => vec![format!("\"{}-{}\"", min - 1, min), "\"1-100\"".into()],
    }
}

/// Each setting at its smallest accepted value: the background for one value outside.
fn minimal(settings: &[Setting]) -> Vec<String> {
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

/// What the app builds from a config: the live generation (balancers with their tuning, health
/// state), and for every HTTP service hyper's server, which reads one request through it.
fn run(config: &Config) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(async {
        let live = crate::live::Live::new(config.clone()).unwrap_or_else(|e| panic!("live state: {e}"));
        assert_eq!(live.current().services.len(), config.services.len());
        for service in config.services.iter().filter(|s| s.mode == crate::config::Mode::Http) {
            let status = one_request(&service.http).await;
            assert!(status.ends_with(" 200 OK"), "{status:?} with {:?}", service.http);
        }
    });
    let durations = config.services.iter().flat_map(|s| {
        let own = [s.connect_timeout, s.client_timeout, s.server_timeout, s.queue_timeout(), s.http.head_timeout, s.http.response_timeout, s.http.keepalive_idle, s.slow_start, s.damping.half_life];
        let pooled = std::iter::once((&s.health, &s.passive, &s.p2c)).chain(s.pools.iter().map(|p| (&p.health, &p.passive, &p.p2c)));
        own.into_iter().chain(pooled.flat_map(|(h, p, c)| [h.interval, h.timeout, p.slot, c.decay]))
    });
    for d in durations.chain(Some(config.shutdown_grace)) {
        assert!(std::time::Instant::now().checked_add(d * 2).is_some(), "{d:?} overflows Instant arithmetic");
    }
}

/// One request through hyper's server built with `http`'s limits; the response's status line.
async fn one_request(http: &crate::config::Http) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let svc = hyper::service::service_fn(|_req| async { Ok::<_, std::convert::Infallible>(hyper::Response::new(String::from("ok"))) });
    let conn = crate::proxy::http::server_builder(http, http.head_timeout).serve_connection(hyper_util::rt::TokioIo::new(server), svc);
    let served = tokio::spawn(conn);
    // As many header fields as allowed (up to 50), Host included; HTTP/1.0, so hyper closes after.
    let headers: String = (1..http.max_headers.min(50)).map(|i| format!("x-h{i}: v\r\n")).collect();
    client.write_all(format!("GET / HTTP/1.0\r\nHost: t\r\n{headers}\r\n").as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    client.read_to_end(&mut raw).await.unwrap();
    served.await.unwrap().unwrap();
    String::from_utf8_lossy(&raw).lines().next().unwrap_or_default().to_string()
}

#[test]
fn the_config_of_every_setting_at_its_smallest_value_runs() {
    let settings = settings();
    let (text, _) = config_text(&settings, &minimal(&settings));
    let config = parse(&text, "t.toml").unwrap_or_else(|d| panic!("{d}\n{text}"));
    run(&config);
}

#[test]
fn every_numeric_key_of_the_schema_has_a_range_here() {
    let settings = settings();
    let (text, _) = config_text(&settings, &minimal(&settings));
    let config = parse(&text, "t.toml").unwrap();
    let mut numeric = BTreeSet::new();
    collect_numeric(&serde_json::to_value(&config).unwrap(), "", &mut numeric);
    let known: BTreeSet<&str> = settings.iter().map(|s| s.key).collect();
    let missing: Vec<_> = numeric.iter().filter(|k| !known.contains(k.as_str())).collect();
    assert!(missing.is_empty(), "numeric settings without a range in config::range: {missing:?}");
    assert!(numeric.len() >= 20, "the walk found {numeric:?}");
}

/// Keys whose values are numbers or durations, anywhere in `value`.
fn collect_numeric(value: &serde_json::Value, key: &str, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Number(_) => {
            out.insert(key.to_string());
        }
        serde_json::Value::String(s) if key == "data_ports" || humantime::parse_duration(s).is_ok() => {
            out.insert(key.to_string());
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_numeric(v, key, out)),
        serde_json::Value::Object(map) => map.iter().for_each(|(k, v)| collect_numeric(v, k, out)),
        _ => {}
    }
}

#[test]
fn a_value_outside_its_range_is_refused_at_its_line_with_the_range() {
    let settings = settings();
    let background = minimal(&settings);
    let mut refused = 0;
    for (i, setting) in settings.iter().enumerate() {
        for bad in outside(setting.kind) {
            let mut values = background.clone();
            values[i] = bad.clone();
            let (text, lines) = config_text(&settings, &values);
            let d = match parse(&text, "t.toml") {
                Ok(_) => panic!("[{}] {} = {bad} was accepted", setting.section, setting.key),
                Err(d) => d,
            };
            assert_eq!(d.len(), 1, "[{}] {} = {bad}: one error expected:\n{d}", setting.section, setting.key);
            let e = &d.0[0];
            assert_eq!(e.line, lines[i], "[{}] {} = {bad}: {e}", setting.section, setting.key);
            assert!(e.message.contains(setting.key), "{e}");
            assert!(e.message.contains(&format!("use {}", setting.range)), "[{}] {} = {bad}: the range is not named: {e}", setting.section, setting.key);
            assert!(e.hint.is_some(), "{e}");
            refused += 1;
        }
    }
    assert!(refused > 2 * settings.len(), "{refused} values tried");
}

#[test]
fn the_issues_max_headers_is_refused_with_the_range() {
    let text = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[service.http]\nmax_headers = 4294967295\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n";
    let d = parse(text, "t.toml").unwrap_err();
    assert_eq!((d.0[0].line, d.0[0].column), (6, 15), "{d}");
    assert_eq!(d.0[0].message, "max_headers = 4294967295 is out of range: use 1 to 1000");
}

#[test]
fn ranges_are_said_as_they_are_written() {
    assert_eq!(MAX_HEAD_SIZE.to_string(), "8192 to 1048576");
    assert_eq!(SHUTDOWN_GRACE.to_string(), "0s to 1day");
    assert_eq!(IDLE_TIMEOUT.to_string(), "1ms to 24days");
    assert_eq!(DELTA.to_string(), "0.001 to 1");
    assert!(!DELTA.contains(f64::NAN) && !DELTA.contains(f64::INFINITY) && DELTA.contains(1.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_config_within_the_ranges_is_accepted_and_runs(mut values in settings().into_iter().map(|s| in_range(s.kind)).collect::<Vec<_>>()) {
        let settings = settings();
        below_suppress(&settings, &mut values);
        let (text, _) = config_text(&settings, &values);
        let config = parse(&text, "t.toml").map_err(|d| TestCaseError::fail(format!("{d}\n{text}")))?;
        let read_back = crate::config::revalidate(&config).map_err(|d| TestCaseError::fail(format!("written back: {d}")))?;
        prop_assert_eq!(&read_back, &config);
        run(&config);
    }
}

/// `reuse` must be below `suppress` (or damping off), a rule between two values that each
/// range alone does not state: a drawn `reuse` is lowered to fit.
fn below_suppress(settings: &[Setting], values: &mut [String]) {
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

#[test]
fn settings_are_listed_once() {
    let mut seen = HashMap::new();
    for s in settings() {
        assert!(seen.insert((s.section, s.key), ()).is_none(), "{} twice in [{}]", s.key, s.section);
    }
}
