//! Shared pools (`[[pool]]`), as HAProxy's backends are shared by its frontends: an HTTP and a
//! TCP service over one pool of real nginx servers have one health check per server, one
//! least-conn count, one stats row and one set of admin actions, and an edit of one service
//! leaves the pool's state as it runs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use crate::support::*;

/// An nginx whose access log holds each request's URI, one a line: what counts the checks.
struct Logged {
    name: String,
    addr: SocketAddr,
    log: PathBuf,
    child: Child,
}

impl Logged {
    fn start(name: &str) -> Logged {
        let dir = scratch(&format!("shared-{name}"));
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("access.log");
        // Temporary files go under the prefix, nginx's default.
        let conf = format!(
            r#"daemon off; master_process off; pid {dir}/nginx.pid; error_log {dir}/error.log warn;
events {{ }}
http {{
    log_format uri "$request_uri";
    access_log {log} uri;
    server {{
        listen {addr};
        location = /check {{ default_type text/plain; return 200 "ok\n"; }}
        location = /name {{ default_type text/plain; return 200 "{name}\n"; }}
    }}
}}
"#,
            dir = dir.display(),
            log = log.display(),
        );
        let child = run_nginx(&dir, &conf, addr, &format!("nginx {name}"));
        Logged { name: name.into(), addr, log, child }
    }

    /// Requests nginx logged for `uri` (it writes each line as the request ends).
    fn requests(&self, uri: &str) -> usize {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().filter(|l| *l == uri).count()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One pool of `servers` with least-conn and an HTTP check so rare that each server is checked
/// exactly once while the test runs (its first check, at start); an HTTP service on `{LISTEN}`
/// and a TCP service on `raw` both send their traffic to it; `web_extra` goes into the HTTP
/// service's table.
fn config(servers: &[&Logged], raw: SocketAddr, web_extra: &str) -> String {
    let mut text = String::from(
        "[[pool]]\nname = \"back\"\nalgorithm = \"least-conn\"\n\
         [pool.health]\nkind = \"http\"\ninterval = \"1h\"\ntimeout = \"2s\"\npath = \"/check\"\n",
    );
    for s in servers {
        text += &format!("[[pool.server]]\naddress = \"{}\"\n", s.addr);
    }
    text += &format!("\n[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\ndefault_pool = \"back\"\n{web_extra}\n");
    text += &format!("\n[[service]]\nname = \"raw\"\nlisten = \"{raw}\"\ndefault_pool = \"back\"\n");
    text
}

/// The stats entry named `name`.
fn entry(stats: &serde_json::Value, name: &str) -> serde_json::Value {
    stats["services"].as_array().unwrap().iter().find(|s| s["name"] == name).cloned().unwrap_or_else(|| panic!("no entry {name} in {stats}"))
}

/// A keep-alive connection through the TCP service that asked for `/name` once and is held open:
/// it holds a place on the server that answered, whose name it returns.
fn held_connection(raw: SocketAddr) -> (TcpStream, String) {
    let mut c = TcpStream::connect(raw).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /name HTTP/1.1\r\nHost: back\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    // The body is the server's name and a line end, after the head.
    let whole = |got: &[u8]| got.windows(4).position(|w| w == b"\r\n\r\n").is_some_and(|i| got.len() > i + 4 && got.ends_with(b"\n"));
    while !whole(&got) {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed the held connection: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let (_, body) = parse_response(&got).unwrap();
    (c, body.trim().to_string())
}

/// Who answered `/name` over `n` requests through the HTTP service.
fn names_over_http(addr: SocketAddr, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let (status, body) = http_get(addr, "/name");
            assert_eq!(status, 200, "{body}");
            body.trim().to_string()
        })
        .collect()
}

/// Two logged servers named `a` and `b`, and Fulcrum running `config` over them with every
/// server up; the TCP service's address.
fn start(a: &str, b: &str) -> (Logged, Logged, SocketAddr, Fulcrum) {
    let (s1, s2) = (Logged::start(a), Logged::start(b));
    let raw: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let f = Fulcrum::start(&config(&[&s1, &s2], raw, ""));
    f.wait_all_up();
    (s1, s2, raw, f)
}

#[test]
fn two_services_over_one_pool_share_its_checks_counts_stats_and_admin_and_an_edit_keeps_its_state() {
    let (s1, s2, raw, f) = start("s1", "s2");

    // One stats row for the pool, naming its users; the services' rows name the pool.
    let stats = f.stats();
    let names: Vec<&str> = stats["services"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["web", "raw", "back"], "{stats}");
    let back = entry(&stats, "back");
    assert_eq!(back["shared_by"], serde_json::json!(["web", "raw"]));
    assert_eq!(back["servers"].as_array().unwrap().len(), 2);
    for service in ["web", "raw"] {
        assert_eq!(entry(&stats, service)["shared_pools"], serde_json::json!(["back"]), "{service}");
    }

    // One check stream per server, not one per service.
    assert_eq!((s1.requests("/check"), s2.requests("/check")), (1, 1), "each server checked once, by the pool");

    // A connection held through the TCP service counts for the HTTP service's least-conn pick.
    let (held, holder) = held_connection(raw);
    let other = if holder == s1.name { &s2.name } else { &s1.name };
    assert_eq!(names_over_http(f.listen, 6), vec![other.clone(); 6], "while {holder} holds the TCP connection");
    let back = entry(&f.stats(), "back");
    let current: Vec<u64> = back["servers"].as_array().unwrap().iter().map(|v| v["current"].as_u64().unwrap()).collect();
    assert_eq!(current.iter().sum::<u64>(), 1, "the held connection, in the pool's one row: {back}");
    drop(held);
    wait_until("the held connection closes", Duration::from_secs(10), || entry(&f.stats(), "back")["servers"].as_array().unwrap().iter().all(|v| v["current"] == 0));

    // Disabling a server of the pool by its name takes it out for both services.
    let (status, body) = f.api("POST", &format!("/api/pools/back/servers/{}/state", s1.addr), Some(serde_json::json!({"state": "disable"})));
    assert_eq!(status, 200, "{body}");
    assert_eq!(names_over_http(f.listen, 4), vec![s2.name.clone(); 4]);
    for _ in 0..3 {
        let (c, name) = held_connection(raw);
        drop(c);
        assert_eq!(name, s2.name, "the TCP service follows the disable too");
    }
    let (status, body) = f.api("POST", &format!("/api/pools/back/servers/{}/state", s1.addr), Some(serde_json::json!({"state": "enable"})));
    assert_eq!(status, 200, "{body}");
    let (status, _) = f.api("POST", "/api/pools/nope/servers/127.0.0.1:1/state", Some(serde_json::json!({"state": "disable"})));
    assert_ne!(status, 200, "an unknown pool is refused");

    // Editing the HTTP service leaves the pool as it runs: no check starts again, and its
    // servers' counters and last checks go on.
    wait_until("s1 back in rotation", Duration::from_secs(10), || entry(&f.stats(), "back")["servers"][0]["state"] == "up");
    let before = entry(&f.stats(), "back");
    f.reload(&config(&[&s1, &s2], raw, "connect_timeout = \"3s\""));
    f.wait_log("1 service changed (web)");
    let after = entry(&f.stats(), "back");
    for (b, a) in before["servers"].as_array().unwrap().iter().zip(after["servers"].as_array().unwrap()) {
        for key in ["total", "lb_total", "last_check", "check_streak", "state", "connect_failures"] {
            assert_eq!(b[key], a[key], "{key} of {}: {before} then {after}", b["address"]);
        }
    }
    assert_eq!(before["total"], after["total"], "the pool's own counters");
    assert_eq!((s1.requests("/check"), s2.requests("/check")), (1, 1), "no check started again");
    let answered = names_over_http(f.listen, 4);
    assert!(answered.iter().all(|n| *n == s1.name || *n == s2.name), "{answered:?}");

    // Editing the pool (a weight) keeps its servers' state and their checks as well.
    let before = entry(&f.stats(), "back");
    let server = format!("address = \"{}\"\n", s2.addr);
    f.reload(&config(&[&s1, &s2], raw, "connect_timeout = \"3s\"").replace(&server, &format!("{server}weight = 2\n")));
    f.wait_log("1 shared pool changed (back)");
    let after = entry(&f.stats(), "back");
    assert_eq!(after["servers"][1]["weight"], 2, "{after}");
    assert_eq!(
        (before["servers"][0]["total"].clone(), before["servers"][0]["last_check"].clone()),
        (after["servers"][0]["total"].clone(), after["servers"][0]["last_check"].clone())
    );
    assert_eq!((s1.requests("/check"), s2.requests("/check")), (1, 1), "no check started again");
}

/// `explain` names the shared pool a request goes to, and says it is shared.
#[test]
fn explain_names_the_shared_pool() {
    let (_s1, _s2, _raw, f) = start("e1", "e2");
    let (status, body) = f.api("GET", "/api/explain?service=web&client=127.0.0.9&path=/name", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["pool"].as_str(), body["shared"].as_bool()), (Some("back"), Some(true)), "{body}");
    assert_eq!(body["algorithm"], "least-conn");
}
