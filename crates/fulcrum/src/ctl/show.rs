//! The API's answers as `fulcrum ctl` prints them for a person: the message of a change, the
//! services and servers of the stats as tables, an explanation as its decision and candidates.
//! `--json` skips all of this.

use std::fmt::Write;

use serde_json::Value;

use super::CtlCommand;

/// The answer to `command`, as lines ending in a newline.
pub fn answer(command: &CtlCommand, json: &Value) -> String {
    match command {
        CtlCommand::Stats { service } => stats(json, service.as_deref()),
        CtlCommand::Explain { .. } => explain(json),
        CtlCommand::Config => line(json.get("toml").and_then(Value::as_str).unwrap_or_default()),
        _ => line(&json.get("message").map_or_else(|| text(json), text)),
    }
}

/// A value as text: a string as it is, anything else as JSON.
pub fn text(json: &Value) -> String {
    match json {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

fn line(text: &str) -> String {
    if text.is_empty() || text.ends_with('\n') { text.to_string() } else { format!("{text}\n") }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("-")
}

fn num(v: &Value, key: &str) -> String {
    v.get(key).map_or_else(|| "-".into(), |n| n.to_string())
}

/// Each service (or the one named) with its connections, then a row per server.
fn stats(json: &Value, only: Option<&str>) -> String {
    let mut out = String::new();
    let services = json.get("services").and_then(Value::as_array).cloned().unwrap_or_default();
    let shown: Vec<&Value> = services.iter().filter(|s| only.is_none_or(|name| str_of(s, "name") == name)).collect();
    if shown.is_empty() {
        return match only {
            Some(name) => format!("no service named {name:?}\n"),
            None => "no services\n".into(),
        };
    }
    for s in shown {
        let state = if s.get("enabled").and_then(Value::as_bool) == Some(false) { "stopped" } else { "listening" };
        let _ = writeln!(
            out,
            "{} on {} ({}, {}, {state}): {} connections now, {} in all, {} refused",
            str_of(s, "name"),
            str_of(s, "listen"),
            str_of(s, "mode"),
            str_of(s, "algorithm"),
            num(s, "current"),
            num(s, "total"),
            num(s, "refused")
        );
        let _ = writeln!(out, "  {:<28} {:<10} {:>6} {:>8} {:>10} {:>9}", "SERVER", "STATE", "WEIGHT", "CURRENT", "TOTAL", "FAILURES");
        for server in s.get("servers").and_then(Value::as_array).into_iter().flatten() {
            let backup = if server.get("backup").and_then(Value::as_bool) == Some(true) { " (backup)" } else { "" };
            let _ = writeln!(
                out,
                "  {:<28} {:<10} {:>6} {:>8} {:>10} {:>9}",
                format!("{}{backup}", str_of(server, "address")),
                str_of(server, "state"),
                num(server, "weight"),
                num(server, "current"),
                num(server, "total"),
                num(server, "connect_failures")
            );
        }
    }
    out
}

/// The pick and why, then every candidate with what kept it out.
fn explain(json: &Value) -> String {
    let mut out = String::new();
    let pick = json.get("pick").and_then(Value::as_str).unwrap_or("no server");
    let _ = writeln!(out, "{} for client {}: {pick}", str_of(json, "service"), str_of(json, "client"));
    let _ = writeln!(out, "  pool {}, algorithm {}: {}", str_of(json, "pool"), str_of(json, "algorithm"), str_of(json, "why"));
    for c in json.get("candidates").and_then(Value::as_array).into_iter().flatten() {
        let skipped = c.get("skipped").and_then(Value::as_str).map(|why| format!(": skipped, {why}")).unwrap_or_default();
        let _ = writeln!(out, "  {:<28} {:<10} weight {}{skipped}", str_of(c, "address"), str_of(c, "state"), num(c, "weight"));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stats_show_a_row_per_server_and_name_a_missing_service() {
        let json = json!({ "services": [{ "name": "web", "listen": "127.0.0.1:80", "mode": "http", "algorithm": "round-robin", "enabled": true,
            "current": 1, "total": 7, "refused": 0,
            "servers": [{ "address": "10.0.0.1:80", "state": "drain", "weight": 3, "current": 1, "total": 7, "connect_failures": 0, "backup": false }] }] });
        let shown = stats(&json, None);
        assert!(shown.starts_with("web on 127.0.0.1:80 (http, round-robin, listening): 1 connections now, 7 in all"), "{shown}");
        assert!(shown.lines().any(|l| l.contains("10.0.0.1:80") && l.contains("drain") && l.contains(" 3 ")), "{shown}");
        assert_eq!(stats(&json, Some("api")), "no service named \"api\"\n");
    }
}
