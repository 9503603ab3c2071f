//! Reload (SIGHUP), disable with and without terminate_on_disable, and SIGTERM drain.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::*;

/// Reads the response of `/large` slowly, so it spans a reload.
fn slow_download(addr: std::net::SocketAddr) -> std::thread::JoinHandle<Vec<u8>> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /large HTTP/1.0\r\n\r\n").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    std::thread::spawn(move || {
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            raw.extend_from_slice(&buf[..n]);
            // Paced at about 32 MiB/s, so 64 MiB takes about 2 s: long enough to act in the middle.
            std::thread::sleep(Duration::from_micros(n as u64 / 32));
        }
        raw
    })
}

#[test]
fn reload_under_a_64_mib_transfer_adds_and_removes_servers_without_breaking_it() {
    let servers = four_servers();
    let first = service("round-robin", "", HTTP_CHECK, &[(&servers[0], "")]);
    let f = Fulcrum::start(&first);
    let download = slow_download(f.listen);
    std::thread::sleep(Duration::from_millis(300));
    // s1, which serves the transfer, leaves; s2 and s3 join.
    f.reload(&service("round-robin", "", HTTP_CHECK, &[(&servers[1], ""), (&servers[2], "")]));
    f.wait_log("config applied");
    wait_until("new servers up", Duration::from_secs(10), || {
        let s = f.stats();
        let list = s["services"][0]["servers"].as_array().unwrap().clone();
        list.len() == 2 && list.iter().all(|v| v["state"] == "up")
    });
    let counts = tally(f.listen, 20);
    assert_eq!(counts.keys().cloned().collect::<Vec<_>>(), ["s2", "s3"], "{counts:?}");
    let raw = download.join().unwrap();
    let body = body_of(&raw);
    assert_eq!(body.len(), LARGE, "the transfer in flight must finish whole");
    assert!(body == large_pattern().as_slice());
}

#[test]
fn a_broken_config_on_reload_is_refused_and_the_service_keeps_working() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let good = service("round-robin", "", HTTP_CHECK, &pool);
    let f = Fulcrum::start(&good);
    f.reload(&good.replace("round-robin", "fastest-first"));
    f.wait_log("reload refused");
    assert!(f.log().contains("fastest-first"), "the log says what is wrong");
    assert_eq!(tally(f.listen, 40).len(), 4);
    // A port already taken is refused too, before anything changes.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let second = format!("{good}\n{}", service("round-robin", "", HTTP_CHECK, &[(&servers[0], "")]).replace("{LISTEN}", &taken.local_addr().unwrap().to_string()).replace("name = \"web\"", "name = \"web2\""));
    f.reload(&second);
    wait_until("bind refusal logged", Duration::from_secs(10), || f.log().matches("reload refused").count() >= 2);
    assert_eq!(f.stats()["services"].as_array().unwrap().len(), 1);
    assert_eq!(tally(f.listen, 8).len(), 4);
}

#[test]
fn reload_adds_and_removes_listeners() {
    let servers = four_servers();
    let one = service("round-robin", "", HTTP_CHECK, &[(&servers[0], "")]);
    let f = Fulcrum::start(&one);
    let port = free_port();
    let extra = service("round-robin", "", HTTP_CHECK, &[(&servers[1], "")]).replace("{LISTEN}", &format!("127.0.0.1:{port}")).replace("name = \"web\"", "name = \"second\"");
    f.reload(&format!("{one}\n{extra}"));
    let second: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_until("second service answers", Duration::from_secs(10), || http_get_from(None, second, "/name").map(|r| r.1 == "s2\n").unwrap_or(false));
    f.reload(&one);
    wait_until("second listener closed", Duration::from_secs(10), || TcpStream::connect(second).is_err());
    assert_eq!(http_get(f.listen, "/name").1, "s1\n");
}

fn ask(c: &mut TcpStream) -> Option<String> {
    c.write_all(b"GET /name HTTP/1.1\r\nHost: t\r\n\r\n").ok()?;
    let mut buf = [0u8; 4096];
    let n = c.read(&mut buf).ok()?;
    if n == 0 {
        return None;
    }
    Some(String::from_utf8_lossy(&buf[..n]).rsplit("\r\n\r\n").next()?.trim_end().to_string())
}

fn disable_s1(terminate: bool) -> Option<String> {
    let servers = four_servers();
    let opt = format!("terminate_on_disable = {terminate}");
    let f = Fulcrum::start(&service("round-robin", &opt, HTTP_CHECK, &[(&servers[0], ""), (&servers[1], "")]));
    // Find a connection that landed on s1.
    let mut c = loop {
        let mut c = TcpStream::connect(f.listen).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        if ask(&mut c).as_deref() == Some("s1") {
            break c;
        }
    };
    f.reload(&service("round-robin", &opt, HTTP_CHECK, &[(&servers[0], "enabled = false"), (&servers[1], "")]));
    f.wait_log("config applied");
    assert_eq!(tally(f.listen, 10).keys().cloned().collect::<Vec<_>>(), ["s2"], "a disabled server gets no new connections");
    std::thread::sleep(Duration::from_millis(200));
    ask(&mut c)
}

#[test]
fn terminate_on_disable_true_closes_the_disabled_servers_connections() {
    assert_eq!(disable_s1(true), None);
}

#[test]
fn terminate_on_disable_false_lets_the_disabled_servers_connections_finish() {
    assert_eq!(disable_s1(false).as_deref(), Some("s1"));
}

#[test]
fn sigterm_stops_accepting_and_drains_connections_in_flight() {
    let servers = four_servers();
    let mut f = Fulcrum::start(&format!("shutdown_grace = \"10s\"\n{}", service("round-robin", "", HTTP_CHECK, &[(&servers[0], "")])));
    let download = slow_download(f.listen);
    std::thread::sleep(Duration::from_millis(300));
    f.signal(libc_sig::TERM);
    wait_until("listener closed", Duration::from_secs(5), || TcpStream::connect(f.listen).is_err());
    let raw = download.join().unwrap();
    assert_eq!(body_of(&raw).len(), LARGE, "the transfer in flight finishes during the drain");
    let status = f.wait_exit(Duration::from_secs(15)).expect("fulcrum exits after the drain");
    assert!(status.success(), "{status:?}");
}
