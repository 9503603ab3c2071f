//! Every numeric setting, written into a config file: values drawn from its range (mostly its
//! ends) are accepted, values just outside it are refused with the range in the message. That
//! such configs also run is `proxy::http::limits_tests`'s.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::testing::*;
use super::*;
use crate::config::parse;

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
    let text =
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[service.http]\nmax_headers = 4294967295\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n";
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
    fn any_config_within_the_ranges_is_accepted_and_reads_back(values in drawn_values()) {
        let config = drawn_config(values)?;
        let read_back = crate::config::revalidate(&config).map_err(|d| TestCaseError::fail(format!("written back: {d}")))?;
        prop_assert_eq!(&read_back, &config);
    }
}

#[test]
fn settings_are_listed_once() {
    let mut seen = HashMap::new();
    for s in settings() {
        assert!(seen.insert((s.section, s.key), ()).is_none(), "{} twice in [{}]", s.key, s.section);
    }
}
