//! `fulcrum check` on broken configs: each error names the exact line, and the exit is non-zero.
//! And the other side of the ranges `check` enforces: a service at the top of every range serves.

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use crate::support::{Backend, Fulcrum};

fn check(file: &str) -> (bool, String) {
    let path = format!("{}/tests/configs/{file}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", &path]).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn each_broken_config_is_refused_at_its_line() {
    let cases = [
        ("unknown-key.toml", 4, "half_closed"),
        ("bad-duration.toml", 4, "2 parsecs"),
        ("duplicate-listen.toml", 10, "used by service"),
        ("zero-servers.toml", 2, "has no servers"),
        ("weight-range.toml", 11, "weight = 1000 is out of range: use 1 to 256"),
        ("unresolvable.toml", 6, "no-such-host.invalid"),
        ("bad-algorithm.toml", 4, "fastest"),
        ("syntax.toml", 2, ""),
        ("public-admin.toml", 2, "loopback"),
    ];
    for (file, line, text) in cases {
        let (ok, err) = check(file);
        assert!(!ok, "{file} must be refused");
        let located = format!("{file}:{line}:");
        assert!(err.contains(&located), "{file}: expected an error at {located}, got:\n{err}");
        assert!(err.contains(text), "{file}: expected {text:?} in:\n{err}");
        assert!(err.contains("hint:") || file == "syntax.toml", "{file}: expected a hint in:\n{err}");
        assert!(!err.contains("panicked"), "{file}: {err}");
    }
}

#[test]
fn the_paper_rule_and_the_demo_config_pass() {
    let path = format!("{}/../../examples/paper-http.toml", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", &path]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", "/nonexistent/fulcrum.toml"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the config file"), "{err}");
}

#[test]
fn a_header_limit_hyper_cannot_allocate_is_refused_with_its_range_and_place() {
    let (ok, err) = check("max-headers.toml");
    assert!(!ok, "max_headers = 4294967295 must be refused:\n{err}");
    assert!(err.contains("max-headers.toml:7:15: error: max_headers = 4294967295 is out of range: use 1 to 1000"), "{err}");
    assert!(err.contains("hint: hyper sets aside room"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Every number of an HTTP service at the top of its range (workers and shutdown_grace, which
/// are process-wide, aside).
const UPPER_BOUNDS: &str = r#"
[[service]]
name = "web"
listen = "{LISTEN}"
mode = "http"
algorithm = "passive-ratio"
connect_timeout = "5m"
client_timeout = "24days"
server_timeout = "24days"
queue_timeout = "1h"
failure_limit = 1000
retries = 100
maxconn = 1000000

[service.health]
kind = "http"
interval = "1day"
timeout = "1m"
rise = 1000
fall = 1000
path = "/index.html"

[service.passive]
delta = 1.0
slot = "1h"
window_slots = 1000
min_samples = 1000000

[service.p2c]
decay = "1h"

[service.http]
head_timeout = "1h"
response_timeout = "1day"
queue_timeout = "1h"
keepalive_idle = "1h"
max_headers = 1000
max_head_size = 1048576
max_uri_length = 65534

[[service.server]]
address = "{SERVER}"
weight = 256
maxconn = 1000000
"#;

/// One request on its own connection; the status and body of the answer.
fn request(fulcrum: &Fulcrum, head: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(fulcrum.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    crate::support::parse_response(&raw).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&raw)))
}

#[test]
fn a_service_at_the_top_of_every_range_answers_and_one_past_is_refused_on_reload() {
    let server = Backend::start("top");
    let config = UPPER_BOUNDS.replace("{SERVER}", &server.addr.to_string());
    let fulcrum = Fulcrum::start(&config);
    fulcrum.wait_all_up();
    assert_eq!(request(&fulcrum, "GET /name HTTP/1.0\r\nHost: t\r\n\r\n"), (200, "top\n".to_string()));

    // A target of 60,000 bytes and a 70 KB head with 90 fields: over the defaults (8192 and
    // 16384 bytes, so 414 or 431 there), within the upper bounds and the real server's limits.
    let target = format!("/name?pad={}", "a".repeat(60_000));
    let fields: String = (0..88).map(|i| format!("x-pad-{i}: {}\r\n", "b".repeat(120))).collect();
    let head = format!("GET {target} HTTP/1.0\r\nHost: t\r\n{fields}\r\n");
    assert!(head.len() > 70_000);
    assert_eq!(request(&fulcrum, &head), (200, "top\n".to_string()));

    fulcrum.reload(&config.replace("max_headers = 1000", "max_headers = 1001"));
    fulcrum.wait_log("max_headers = 1001 is out of range: use 1 to 1000");
    assert_eq!(request(&fulcrum, "GET /name HTTP/1.0\r\nHost: t\r\n\r\n"), (200, "top\n".to_string()), "the running config stays");
}

#[test]
fn a_misspelt_key_gets_the_nearest_one_as_a_hint() {
    let (ok, err) = check("unknown-key.toml");
    assert!(!ok && err.contains("hint: did you mean `half_close`?"), "{err}");
}

/// Every file in `examples/` is a config a user can copy and run: `check` passes each one as it
/// is, with only what its header says to make (the HTTPS example's certificate, by the header's
/// own openssl command; the ACME example's state directory, by its mkdir). `check` says how many
/// services it found, in words.
#[test]
fn every_example_passes_check() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let dir = crate::support::scratch("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // What configs name beside them (the front door's error pages).
            let to = dir.join(path.file_name().unwrap());
            std::fs::create_dir_all(&to).unwrap();
            for file in std::fs::read_dir(&path).unwrap() {
                let file = file.unwrap().path();
                std::fs::copy(&file, to.join(file.file_name().unwrap())).unwrap();
            }
            continue;
        }
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        // A header's `openssl req` command (with its continuation lines) runs as written.
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).map(|l| l.trim_start_matches('#').trim()).collect();
        for mkdir in header.iter().filter(|l| l.starts_with("mkdir ")) {
            let out = Command::new("sh").args(["-c", mkdir]).current_dir(&dir).output().unwrap();
            assert!(out.status.success(), "{}: {mkdir}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        }
        if let Some(at) = header.iter().position(|l| l.starts_with("openssl req")) {
            let mut command = String::new();
            for line in &header[at..] {
                command.push_str(line);
                command.push('\n');
                if !line.ends_with('\\') {
                    break;
                }
            }
            let out = Command::new("sh").args(["-c", &command]).current_dir(&dir).output().unwrap();
            assert!(out.status.success(), "{}: {command}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        }
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("check").arg(path.file_name().unwrap()).current_dir(&dir).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {said}{}", path.display(), String::from_utf8_lossy(&out.stderr));
        assert!(said.trim_end().ends_with("ok (1 service)") || said.contains(" services)"), "{said}");
        checked += 1;
    }
    assert!(checked >= 5, "{checked} examples");
}
