//! `fulcrum demo`, the README's first command: it starts, serves through four real servers,
//! reports, and stops by itself when asked to.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

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

#[test]
fn demo_with_tls_serves_https_with_the_certificate_it_made() {
    // Ports picked free can be taken by another test before the demo binds them (the fleet
    // demo beside this one binds the port after each of its own): a demo that could not bind
    // exits before naming its certificate, and is started again on other ports.
    let (mut child, cert, tls_port) = (0..3)
        .find_map(|_| {
            let (listen, admin, tls_port) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()), free_port());
            let mut child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
                .args(["demo", "--tls", "--listen", &listen, "--admin", &admin, "--tls-listen", &format!("127.0.0.1:{tls_port}"), "--rate", "0", "--seconds", "6"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            while std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0 {
                if let Some(path) = line.trim().strip_prefix("its certificate (made now, for localhost):") {
                    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
                    return Some((child, path.trim().to_string(), tls_port));
                }
                line.clear();
            }
            let _ = child.wait();
            None
        })
        .expect("the demo names its certificate");
    let get = || {
        let out = Command::new("curl").args(["-s", "--max-time", "5", "--cacert", &cert, &format!("https://localhost:{tls_port}/name")]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    wait_until("the https service", Duration::from_secs(15), || get().starts_with("server"));
    let names: BTreeSet<String> = (0..8).map(|_| get()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_fleet_demo_runs_two_instances_over_etcd_and_a_change_in_one_reaches_the_other() {
    // The second instance takes the port after each of the first's (free_port never hands those out).
    let (p1, a1) = loop {
        let (p, a) = (free_port(), free_port());
        let next_free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok();
        if next_free(p) && next_free(a) {
            break (p, a);
        }
    };
    let child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["demo", "--fleet", "--listen", &format!("127.0.0.1:{p1}"), "--admin", &format!("127.0.0.1:{a1}"), "--rate", "0", "--seconds", "12"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lb1, lb2): (std::net::SocketAddr, std::net::SocketAddr) = (format!("127.0.0.1:{a1}").parse().unwrap(), format!("127.0.0.1:{}", a1 + 1).parse().unwrap());
    let service2 = format!("127.0.0.1:{}", p1 + 1).parse().unwrap();
    wait_until("the second instance's service", Duration::from_secs(30), || http_get_from(None, service2, "/name").is_ok());
    let stats = |admin| -> serde_json::Value { serde_json::from_str(&http_get(admin, "/api/stats").1).unwrap() };
    // An edit is written to etcd: the first instance must have connected (a busy machine may
    // let the second instance serve first).
    wait_until("the first instance's etcd connection", Duration::from_secs(30), || stats(lb1)["fleet"]["connected"] == true);
    let server = stats(lb1)["services"][0]["servers"][0]["address"].as_str().unwrap().to_string();
    let headers = ["Content-Type: application/json".to_string()];
    let (status, body) = curl(lb1, "POST", &format!("/api/services/http/servers/{server}/weight"), &headers, Some(r#"{"weight": 4}"#));
    assert_eq!(status, 200, "{body}");
    wait_until("the weight on the other instance", Duration::from_secs(10), || stats(lb2)["services"][0]["servers"][0]["weight"] == 4);
    assert_eq!(stats(lb2)["fleet"]["name"], "lb-2");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("lb-1: dashboard http://{lb1}/")) && text.contains(&format!("lb-2: dashboard http://{lb2}/")), "{text}");
    assert!(text.contains("etcdctl --endpoints http://127.0.0.1:"), "{text}");
}

#[test]
fn a_demo_whose_port_is_taken_names_the_flag_and_leaves_nothing_behind() {
    for flag in ["--listen", "--admin"] {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = format!("127.0.0.1:{}", free_port());
        let (listen, admin) = if flag == "--listen" { (taken.local_addr().unwrap().to_string(), other) } else { (other, taken.local_addr().unwrap().to_string()) };
        let child = Command::new(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["demo", "--listen", &listen, "--admin", &admin, "--rate", "0", "--seconds", "5"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(&format!("choose another with {flag}")), "{flag}: {err}");
        assert!(!std::env::temp_dir().join(format!("fulcrum-demo-{pid}")).exists(), "{flag}: the demo's directory is gone");
    }
}
