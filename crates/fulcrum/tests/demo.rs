//! `fulcrum demo`, the README's first command: it starts, serves through four real servers,
//! reports, and stops by itself when asked to.

mod support;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

#[test]
fn demo_serves_four_real_servers_and_exits_cleanly() {
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["demo", "--listen", &listen, "--admin", &admin, "--seconds", "7"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = listen.parse().unwrap();
    wait_until("demo service", Duration::from_secs(15), || http_get_from(None, addr, "/name").is_ok());
    let names: BTreeSet<String> = (0..8).map(|_| http_get(addr, "/name").1).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    let (status, stats) = http_get(admin.parse().unwrap(), "/api/stats");
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["services"][0]["servers"].as_array().unwrap().len(), 4);
    let (status, page) = http_get(admin.parse().unwrap(), "/");
    assert_eq!(status, 200);
    assert!(page.contains("Real Servers") && page.contains("/app.js"), "the dashboard is served: {page}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("http://{listen}/")), "{text}");
    assert!(text.contains(&format!("http://{admin}/api/stats")), "{text}");
    assert!(text.contains("dashboard:") && text.contains(&format!("http://{admin}/\n")), "the demo names its dashboard: {text}");
    assert!(text.contains(" up "), "the demo reports server states: {text}");
}
