//! The admin API with curl against a running Fulcrum: every action changes the running service
//! and shows in its traffic, invalid changes are refused with a reason and change nothing, changes
//! need JSON from the same origin, and with authentication configured nothing is served without it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

/// A service over `servers` with the test's fast HTTP check.
fn config(algorithm: &str, servers: &[SocketAddr]) -> String {
    let mut s = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nalgorithm = \"{algorithm}\"\n\n[service.health]\n{HTTP_CHECK}\n");
    for a in servers {
        s.push_str(&format!("\n[[service.server]]\naddress = \"{a}\"\n"));
    }
    s
}

fn ok(f: &Fulcrum, method: &str, path: &str, body: Value) -> String {
    let (status, answer) = f.api(method, path, Some(body));
    assert_eq!(status, 200, "{method} {path}: {answer}");
    assert_eq!(answer["ok"], true, "{answer}");
    answer["message"].as_str().unwrap_or_default().to_string()
}

fn refused(f: &Fulcrum, method: &str, path: &str, body: Value, status: u16, reason: &str) {
    let (got, answer) = f.api(method, path, Some(body));
    assert_eq!(got, status, "{method} {path} should be refused with {status}: {answer}");
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(error.contains(reason), "{method} {path}: error {error:?} should say {reason:?}");
}

fn state(f: &Fulcrum, address: &SocketAddr) -> String {
    f.server_stats(&address.to_string())["state"].as_str().unwrap().to_string()
}

fn wait_state(f: &Fulcrum, address: &SocketAddr, want: &str) {
    wait_until(&format!("{address} {want}"), Duration::from_secs(10), || state(f, address) == want);
}

fn running_toml(f: &Fulcrum) -> String {
    let (status, c) = f.api("GET", "/api/config", None);
    assert_eq!(status, 200);
    c["toml"].as_str().unwrap().to_string()
}

#[test]
fn every_action_changes_the_running_service_and_save_writes_it_back() {
    let b: Vec<Backend> = (1..=4).map(|i| Backend::start(&format!("b{i}"))).collect();
    let [a1, a2, a3, a4] = [b[0].addr, b[1].addr, b[2].addr, b[3].addr];
    let f = Fulcrum::start(&config("round-robin", &[a1, a2, a3]));
    f.wait_all_up();
    let original = std::fs::read_to_string(&f.config_path).unwrap();

    // Disable: no new connections; enable brings it back.
    ok(&f, "POST", &format!("/api/services/web/servers/{a1}/state"), json!({ "state": "disable" }));
    assert_eq!(state(&f, &a1), "disabled");
    let t = tally(f.listen, 20);
    assert!(!t.contains_key("b1") && t.len() == 2, "{t:?}");
    ok(&f, "POST", &format!("/api/services/web/servers/{a1}/state"), json!({ "state": "enable" }));
    wait_state(&f, &a1, "up");

    // Drain: shown as drain, takes no new connections.
    ok(&f, "POST", &format!("/api/services/web/servers/{a2}/state"), json!({ "state": "drain" }));
    assert_eq!(state(&f, &a2), "drain");
    let t = tally(f.listen, 20);
    assert!(!t.contains_key("b2"), "{t:?}");
    ok(&f, "POST", &format!("/api/services/web/servers/{a2}/state"), json!({ "state": "enable" }));
    wait_state(&f, &a2, "up");

    // Weight and algorithm: static-rr with 3:1:1 gives b1 three of every five.
    ok(&f, "POST", &format!("/api/services/web/servers/{a1}/weight"), json!({ "weight": 3 }));
    ok(&f, "POST", "/api/services/web/algorithm", json!({ "algorithm": "static-rr" }));
    assert_eq!(f.stats()["services"][0]["algorithm"], "static-rr");
    let t = tally(f.listen, 50);
    assert_eq!(t.get("b1"), Some(&30), "{t:?}");

    // Add a server: it is checked, comes up and takes traffic; remove it again.
    ok(&f, "POST", "/api/services/web/servers", json!({ "address": a4.to_string(), "weight": 1 }));
    wait_state(&f, &a4, "up");
    assert!(tally(f.listen, 12).contains_key("b4"));
    ok(&f, "DELETE", &format!("/api/services/web/servers/{a4}"), json!({}));
    assert_eq!(f.stats()["services"][0]["servers"].as_array().unwrap().len(), 3);

    // Health check: expecting text no server has takes them all down; restoring brings them up.
    let mut health = json!({ "kind": "http", "interval": "200ms", "timeout": "1s", "rise": 2, "fall": 2, "path": "/index.html", "expect_status": 200, "expect_text": "NOWHERE" });
    ok(&f, "POST", "/api/services/web/health", health.clone());
    wait_state(&f, &a3, "down");
    health["expect_text"] = json!("TARGET");
    ok(&f, "POST", "/api/services/web/health", health);
    f.wait_all_up();

    // Service settings (the Server LB tab).
    ok(&f, "POST", "/api/services/web/settings", json!({ "connect_timeout": "1500ms", "failure_limit": 7, "terminate_on_disable": true }));
    let (_, c) = f.api("GET", "/api/config", None);
    let svc = &c["config"]["service"][0];
    assert_eq!((svc["connect_timeout"].as_str(), svc["failure_limit"].as_u64(), svc["terminate_on_disable"].as_bool()), (Some("1s 500ms"), Some(7), Some(true)), "{svc}");

    // Stop: the listener closes; start: it serves again.
    ok(&f, "POST", "/api/services/web/stop", json!({}));
    assert_eq!(f.stats()["services"][0]["enabled"], false);
    wait_until("listener closed", Duration::from_secs(5), || std::net::TcpStream::connect(f.listen).is_err());
    ok(&f, "POST", "/api/services/web/start", json!({}));
    wait_until("listener open", Duration::from_secs(5), || http_get_from(None, f.listen, "/name").is_ok());

    // Save: the file holds the running config, the previous one is kept beside it.
    let said = ok(&f, "POST", "/api/save", json!({}));
    assert!(said.contains("saved"), "{said}");
    let saved = std::fs::read_to_string(&f.config_path).unwrap();
    assert!(saved.contains("algorithm = \"static-rr\"") && saved.contains("weight = 3") && saved.contains("failure_limit = 7"), "{saved}");
    assert_eq!(std::fs::read_to_string(f.config_path.with_extension("toml.bak")).unwrap(), original);
    // What was saved is a config Fulcrum accepts as it is.
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", f.config_path.to_str().unwrap()]).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    // A whole new config through the API, then a forced reload from the file brings the saved
    // one back.
    let replaced = running_toml(&f).replace("algorithm = \"static-rr\"", "algorithm = \"least-conn\"");
    ok(&f, "POST", "/api/config/validate", json!({ "toml": replaced }));
    ok(&f, "POST", "/api/config", json!({ "toml": replaced }));
    assert_eq!(f.stats()["services"][0]["algorithm"], "least-conn");
    // The replacement is not in the file: a plain reload would drop it and is refused.
    refused(&f, "POST", "/api/reload", json!({}), 409, "1 unsaved edit would be lost: replace the config");
    ok(&f, "POST", "/api/reload?force=true", json!({}));
    assert_eq!(f.stats()["services"][0]["algorithm"], "static-rr");

    // The stats table as CSV: a header and a row per server, with the counters of the traffic.
    let (status, csv) = curl(f.admin, "GET", "/api/stats.csv", &[], None);
    assert_eq!(status, 200);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(lines[0].starts_with("service,server,backup,state,weight,current,max,total,lb_total,rate"), "{}", lines[0]);
    let b1_total: u64 = lines.iter().find(|l| l.contains(&a1.to_string())).unwrap().split(',').nth(7).unwrap().parse().unwrap();
    assert!(b1_total >= 30, "{csv}");

    // History is sampled every 10 s: after one interval every server has a point.
    wait_until("a history point", Duration::from_secs(15), || {
        let (_, h) = f.api("GET", "/api/history?service=web", None);
        h["series"].as_array().is_some_and(|s| s.len() == 3 && s.iter().all(|x| !x["points"].as_array().unwrap().is_empty()))
    });
}

#[test]
fn invalid_changes_are_refused_with_the_reason_and_change_nothing() {
    let b1 = Backend::start("b1");
    let b2 = Backend::start("b2");
    let f = Fulcrum::start(&config("round-robin", &[b1.addr, b2.addr]));
    f.wait_all_up();
    let before = running_toml(&f);
    let a1 = b1.addr;

    refused(&f, "POST", "/api/services/nope/algorithm", json!({ "algorithm": "random" }), 422, "no service \"nope\"");
    refused(&f, "POST", "/api/services/web/servers/127.0.0.1:9/weight", json!({ "weight": 2 }), 422, "has no server");
    refused(&f, "POST", &format!("/api/services/web/servers/{a1}/weight"), json!({ "weight": 0 }), 422, "weight = 0 is out of range: use 1 to 256");
    refused(&f, "POST", &format!("/api/services/web/servers/{a1}/weight"), json!({ "weight": "heavy" }), 422, "weight");
    refused(&f, "POST", &format!("/api/services/web/servers/{a1}/state"), json!({ "state": "paused" }), 422, "unknown variant `paused`");
    refused(&f, "POST", "/api/services/web/algorithm", json!({ "algorithm": "fastest" }), 422, "unknown variant `fastest`");
    refused(&f, "POST", "/api/services/web/servers", json!({ "address": "no-port-here" }), 422, "has no port");
    refused(&f, "POST", "/api/services/web/servers", json!({ "address": a1.to_string() }), 422, "already has server");
    refused(&f, "POST", "/api/services/web/servers", json!({ "address": "host.invalid:80" }), 422, "cannot resolve");
    refused(&f, "DELETE", "/api/services/web/servers/127.0.0.1:9", json!({}), 422, "has no server");
    refused(&f, "POST", "/api/services/web/health", json!({ "kind": "http", "interval": "soon" }), 422, "invalid duration");
    refused(&f, "POST", "/api/services/web/health", json!({ "kind": "http", "path": "index.html" }), 422, "not an absolute path");
    refused(&f, "POST", "/api/services/web/health", json!({ "kind": "http", "expect_status": 999 }), 422, "expect_status = 999 is out of range: use 100 to 599");
    refused(&f, "POST", "/api/services/web/settings", json!({ "retries": 1000 }), 422, "retries = 1000 is out of range: use 0 to 100");
    refused(&f, "POST", "/api/services/web/settings", json!({ "connect_timeout": "10000000000s" }), 422, "is out of range: use 1ms to 5m");
    refused(&f, "POST", "/api/services/web/settings", json!({ "listen": "localhost" }), 422, "not ip:port");
    refused(&f, "POST", "/api/services/web/settings", json!({ "colour": "red" }), 422, "unknown field `colour`");
    // A port another program holds: the bind fails and the running config stays.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    refused(&f, "POST", "/api/services/web/settings", json!({ "listen": taken.local_addr().unwrap().to_string() }), 422, "cannot listen");
    refused(&f, "POST", "/api/config", json!({ "toml": "[[service]]\nname = \"web\"\nlisten = 42\n" }), 422, "request:3:10: error: invalid type");
    refused(&f, "POST", "/api/config/validate", json!({ "toml": "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\n" }), 422, "has no servers");
    refused(&f, "POST", "/api/config", json!({ "text": "x" }), 422, "missing field `toml`");
    let (status, _) = f.api("POST", "/api/services/web/bogus", Some(json!({})));
    assert_eq!(status, 404);

    assert_eq!(running_toml(&f), before, "a refused change must leave the running config as it was");
    let t = tally(f.listen, 10);
    assert_eq!(t.len(), 2, "{t:?}");
}

#[test]
fn changes_must_be_json_from_the_same_origin() {
    let b1 = Backend::start("b1");
    let f = Fulcrum::start(&config("round-robin", &[b1.addr]));
    let path = format!("/api/services/web/servers/{}/state", b1.addr);
    let body = Some(r#"{"state":"disable"}"#);

    // A cross-site form post: not JSON.
    let form = vec!["Content-Type: application/x-www-form-urlencoded".to_string()];
    let (status, answer) = curl(f.admin, "POST", &path, &form, body);
    assert_eq!(status, 415, "{answer}");
    assert!(answer.contains("application/json"), "{answer}");
    // Another site's page sending JSON (the browser adds Origin).
    let evil = vec!["Content-Type: application/json".to_string(), "Origin: http://evil.example".to_string()];
    let (status, answer) = curl(f.admin, "POST", &path, &evil, body);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("cross-origin"), "{answer}");
    assert_eq!(f.server_stats(&b1.addr.to_string())["enabled"], Value::Null);
    assert_ne!(f.server_stats(&b1.addr.to_string())["state"], "disabled");
    // A name that is not an address (DNS rebinding) is refused while there is no authentication.
    let rebound = vec!["Host: rebind.example:80".to_string()];
    let (status, answer) = curl(f.admin, "GET", "/api/stats", &rebound, None);
    assert_eq!(status, 421, "{answer}");
    let (status, _) = curl(f.admin, "GET", "/api/stats", &[format!("Host: localhost:{}", f.admin.port())], None);
    assert_eq!(status, 200);
    // The dashboard's own origin is accepted.
    let own = vec!["Content-Type: application/json".to_string(), format!("Origin: http://{}", f.admin)];
    let (status, answer) = curl(f.admin, "POST", &path, &own, body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(f.server_stats(&b1.addr.to_string())["state"], "disabled");
}

#[test]
fn with_authentication_configured_nothing_is_served_without_it() {
    let b1 = Backend::start("b1");
    let dir = scratch("admin-auth");
    let token = "7f3c9a1e5b2d8f406c1a9e3b7d5f2a8c";
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let hash = password_hash("correct horse");
    let admin = format!("token_file = \"{}\"\nuser = \"admin\"\npassword_hash = \"{hash}\"", token_file.display());
    let f = Fulcrum::start_with_admin(&config("round-robin", &[b1.addr]), &admin, Some(format!("Bearer {token}")));

    for path in ["/", "/api/stats", "/metrics", "/api/config", "/api/stats.csv"] {
        let (status, body) = curl(f.admin, "GET", path, &[], None);
        assert_eq!(status, 401, "GET {path} without credentials: {body}");
    }
    let out = std::process::Command::new("curl").args(["-s", "-D", "-", "-o", "/dev/null", &format!("http://{}/api/stats", f.admin)]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).to_lowercase().contains("www-authenticate: basic"), "the browser is asked for credentials");

    let json = "Content-Type: application/json".to_string();
    let path = format!("/api/services/web/servers/{}/state", b1.addr);
    let (status, _) = curl(f.admin, "POST", &path, std::slice::from_ref(&json), Some(r#"{"state":"disable"}"#));
    assert_eq!(status, 401);
    let (status, _) = curl(f.admin, "POST", &path, &[json.clone(), "Authorization: Bearer wrong-token-wrong-token".into()], Some(r#"{"state":"disable"}"#));
    assert_eq!(status, 401);
    let basic_wrong = format!("Authorization: Basic {}", b64("admin:battery staple"));
    let (status, _) = curl(f.admin, "GET", "/api/stats", &[basic_wrong], None);
    assert_eq!(status, 401);
    assert_ne!(f.server_stats(&b1.addr.to_string())["state"], "disabled", "an unauthenticated change must not happen");

    // The bearer token, HTTP basic with the password, and basic with the token as password.
    ok(&f, "POST", &path, json!({ "state": "disable" }));
    assert_eq!(f.server_stats(&b1.addr.to_string())["state"], "disabled");
    for credentials in ["admin:correct horse".to_string(), format!("anyone:{token}")] {
        // After the wrong password above, this address waits a moment (429) before its next one is checked.
        wait_until(&format!("{credentials} accepted"), Duration::from_secs(10), || {
            let (status, body) = curl(f.admin, "GET", "/api/stats", &[format!("Authorization: Basic {}", b64(&credentials))], None);
            assert!(status == 200 || status == 429, "{credentials}: {status} {body}");
            status == 200
        });
    }
}

#[test]
fn an_admin_listener_off_loopback_without_authentication_does_not_start() {
    let dir = scratch("admin-open");
    let path = dir.join("open.toml");
    let text = "[admin]\nlisten = \"0.0.0.0:0\"\n\n[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\n[[service.server]]\naddress = \"127.0.0.1:2\"\n";
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["run", path.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address and no authentication is configured"), "{err}");
}

/// `/metrics` read by the Python Prometheus client's own text-format parser.
#[test]
fn metrics_parse_with_the_prometheus_text_parser() {
    let b1 = Backend::start("b1");
    let b2 = Backend::start("b2");
    let f = Fulcrum::start(&config("passive-ratio", &[b1.addr, b2.addr]));
    f.wait_all_up();
    tally(f.listen, 10);
    let (status, text) = curl(f.admin, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
families = {f.name: f for f in text_string_to_metric_families(sys.stdin.read())}
conns = {s.labels["server"]: s.value for s in families["fulcrum_server_connections"].samples if s.name == "fulcrum_server_connections_total"}
assert families["fulcrum_server_connections"].type == "counter"
assert families["fulcrum_server_current_connections"].type == "gauge"
# The process's own families, as the client libraries name them.
assert families["process_cpu_seconds"].type == "counter" and families["process_cpu_seconds"].samples[0].value > 0
assert families["process_resident_memory_bytes"].samples[0].value > 1e6
assert 3 <= families["process_open_fds"].samples[0].value <= families["process_max_fds"].samples[0].value
assert families["process_start_time_seconds"].samples[0].value > 1.6e9
print(len(families), sum(conns.values()), families["fulcrum_server_traffic_ratio"].type, len(families["fulcrum_server_up"].samples))
"#;
    let fields: Vec<String> = parsed(script, &text).split_whitespace().map(String::from).collect();
    assert!(fields[0].parse::<usize>().unwrap() >= 20, "{fields:?}");
    assert!(fields[1].parse::<f64>().unwrap() >= 10.0, "the connections counted: {fields:?}");
    assert_eq!(fields[2], "gauge");
    assert_eq!(fields[3], "2");
    let p = &f.stats()["process"];
    assert!(
        p["cpu_seconds_total"].as_f64().unwrap() > 0.0 && p["resident_memory_bytes"].as_u64().unwrap() > 1 << 20 && p["open_fds"].as_u64().unwrap() >= 3,
        "the same figures in /api/stats: {p}"
    );
    assert!(p["uptime_seconds"].as_f64().unwrap() >= 0.0 && p["max_fds"].as_u64() == p["descriptors"].as_u64(), "{p}");
}

fn b64(s: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("base64").arg("-w0").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
}

/// HTTP figures in /metrics, as the Prometheus client's parser reads them: responses by status
/// class (the service's and each server's), Fulcrum's own by status, the two duration histograms
/// with one observation per response, and each route's hits, answers by class and duration
/// histogram; /api/stats has p50, p95 and p99.
#[test]
fn http_responses_their_times_and_route_hits_are_metrics() {
    let b1 = Backend::start("b1");
    let routes = "\n[[service.route]]\npath_prefix = [\"/closed\"]\ndeny = 403\n\n[[service.route]]\npath_prefix = [\"/never\"]\ndeny = 404\n\n[[service.route]]\npath_prefix = [\"/name\"]\n";
    let config = service_over("round-robin", "mode = \"http\"", "kind = \"none\"", &[(b1.addr, "")]).replace("\n\n[service.health]", &format!("\n{routes}\n[service.health]"));
    let f = Fulcrum::start(&config);
    for (path, n, want) in [("/name", 10, 200), ("/closed/x", 3, 403), ("/no-such-page", 2, 404)] {
        for _ in 0..n {
            assert_eq!(http_get(f.listen, path).0, want, "{path}");
        }
    }
    wait_until("every response timed", Duration::from_secs(5), || f.stats()["services"][0]["http"]["total"]["count"] == 15);
    let (status, text) = curl(f.admin, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = {f.name: f for f in text_string_to_metric_families(sys.stdin.read())}
def samples(family, suffix=""):
    return [s for s in families[family].samples if s.name == family + suffix]
out = {
    "types": [families[n].type for n in ["fulcrum_http_responses", "fulcrum_http_request_duration_seconds", "fulcrum_http_first_byte_seconds", "fulcrum_route_hits"]],
    "classes": {s.labels["class"]: int(s.value) for s in samples("fulcrum_http_responses", "_total")},
    "own": {s.labels["code"]: int(s.value) for s in samples("fulcrum_http_own_responses", "_total")},
    "server": {s.labels["class"]: int(s.value) for s in samples("fulcrum_http_server_responses", "_total")},
    "total_count": int(samples("fulcrum_http_request_duration_seconds", "_count")[0].value),
    "total_inf": int([s.value for s in samples("fulcrum_http_request_duration_seconds", "_bucket") if s.labels["le"] == "+Inf"][0]),
    "first_byte_count": int(samples("fulcrum_http_first_byte_seconds", "_count")[0].value),
    "hits": {s.labels["route"]: int(s.value) for s in samples("fulcrum_route_hits", "_total")},
    "route_classes": {s.labels["route"] + " " + s.labels["class"]: int(s.value) for s in samples("fulcrum_http_route_responses", "_total") if s.value},
    "route_type": families["fulcrum_http_route_request_duration_seconds"].type,
    "route_counts": {s.labels["route"]: int(s.value) for s in samples("fulcrum_http_route_request_duration_seconds", "_count")},
    "server_counts": [int(sum(s.value for s in samples(f"fulcrum_http_server_{n}_seconds", "_count"))) for n in ["first_byte", "request_duration"]],
    "server_type": families["fulcrum_http_server_request_duration_seconds"].type,
}
print(json.dumps(out))
"#;
    let m: serde_json::Value = serde_json::from_str(&parsed(script, &text)).unwrap();
    assert_eq!(m["types"], serde_json::json!(["counter", "histogram", "histogram", "counter"]), "{m}");
    assert_eq!(m["classes"], serde_json::json!({"1xx": 0, "2xx": 10, "3xx": 0, "4xx": 5, "5xx": 0}), "{m}");
    assert_eq!(m["own"], serde_json::json!({"403": 3}), "the server's 404s are not Fulcrum's: {m}");
    assert_eq!(m["server"], serde_json::json!({"1xx": 0, "2xx": 10, "3xx": 0, "4xx": 2, "5xx": 0}), "{m}");
    assert_eq!((m["total_count"].as_u64(), m["total_inf"].as_u64(), m["first_byte_count"].as_u64()), (Some(15), Some(15), Some(12)), "{m}");
    assert_eq!(m["hits"], serde_json::json!({"0": 3, "1": 0, "2": 10}), "{m}");
    assert_eq!(m["route_classes"], serde_json::json!({"0 4xx": 3, "2 2xx": 10}), "{m}");
    assert_eq!((m["route_type"].as_str(), &m["route_counts"]), (Some("histogram"), &serde_json::json!({"0": 3, "1": 0, "2": 10})), "{m}");
    assert_eq!((m["server_type"].as_str(), &m["server_counts"]), (Some("histogram"), &serde_json::json!([12, 12])), "the server's 12 answers: {m}");
    let http = &f.stats()["services"][0]["http"];
    let (p50, p99) = (http["p50_ms"].as_f64().unwrap(), http["p99_ms"].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= 10_000.0, "{http}");
}

/// What `script` (Python, with the Prometheus client's text parser) prints of `text` on its
/// standard input; the parser refusing the text fails the test.
pub(crate) fn parsed(script: &str, text: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the parser refused /metrics (pip install prometheus_client; scripts/test does): {err}\n{text}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A service's rules replaced through the API, as the dashboard's Rules tab sends them: the new
/// rules take requests at once; a bad one is refused with the check's words and its place, and
/// the running rules stay.
#[test]
fn a_services_rules_are_replaced_whole_through_the_api() {
    let b1 = Backend::start("b1");
    let f = Fulcrum::start(&service_over("round-robin", "mode = \"http\"", "kind = \"none\"", &[(b1.addr, "")]));
    assert_eq!(http_get(f.listen, "/closed/x").0, 404, "no rule yet: the server's own 404");
    let rules = serde_json::json!([
        { "path_prefix": ["/closed"], "deny": 403 },
        { "path": ["/old"], "redirect": { "status": 308, "path": "/new" } },
    ]);
    let (status, answer) = f.api("POST", "/api/services/web/routes", Some(rules));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(http_get(f.listen, "/closed/x").0, 403);
    assert_eq!(http_get(f.listen, "/old").0, 308);
    assert_eq!(f.api("GET", "/api/config", None).1["config"]["service"][0]["route"][1]["redirect"]["path"], "/new");
    let bad = serde_json::json!([{ "path_prefix": ["/closed"], "deny": 403 }, { "path": ["/x"], "redirect": { "status": 299 } }]);
    let (status, answer) = f.api("POST", "/api/services/web/routes", Some(bad));
    assert_eq!(status, 422, "{answer}");
    let why = answer.to_string();
    assert!(why.contains("route[1]") && why.contains("299"), "the refusal points at the rule: {why}");
    let unknown = serde_json::json!([{ "path_prefix": ["/a"], "deny_all": true }]);
    let (status, answer) = f.api("POST", "/api/services/web/routes", Some(unknown));
    assert!(status == 400 || status == 422, "{status} {answer}");
    assert!(answer.to_string().contains("deny_all"), "{answer}");
    assert_eq!(http_get(f.listen, "/old").0, 308, "the running rules stayed");
}
