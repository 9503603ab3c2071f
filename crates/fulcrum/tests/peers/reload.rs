//! Reload (SIGHUP), disable with and without terminate_on_disable, SIGTERM drain, and edits
//! applied as diffs: what an edit does not name keeps its health streak and balancer state.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::*;

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
    let second = format!(
        "{good}\n{}",
        service("round-robin", "", HTTP_CHECK, &[(&servers[0], "")]).replace("{LISTEN}", &taken.local_addr().unwrap().to_string()).replace("name = \"web\"", "name = \"web2\"")
    );
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

/// Two services: `web` (round robin over `servers`, `health` checks) and `other` over `spare`,
/// whose weight the tests edit; `other` listens on `other_listen`.
fn two_services(servers: &[std::net::SocketAddr], health: &str, spare: std::net::SocketAddr, other_listen: std::net::SocketAddr) -> String {
    let web = service_over("round-robin", "mode = \"http\"", health, &servers.iter().map(|a| (*a, "")).collect::<Vec<_>>());
    format!("{web}\n[[service]]\nname = \"other\"\nlisten = \"{other_listen}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{spare}\"\n")
}

fn weight_other(f: &Fulcrum, spare: std::net::SocketAddr, weight: u32) {
    let (status, answer) = f.api("POST", &format!("/api/services/other/servers/{spare}/weight"), Some(serde_json::json!({ "weight": weight })));
    assert_eq!(status, 200, "{answer}");
}

/// `fall = 3`: a server failing its checks goes down at its third failure, though an unrelated
/// edit came after its second (the edit neither resets its streak nor checks it early).
#[test]
fn an_unrelated_edit_keeps_a_failing_servers_streak() {
    let failing = Backend::start("failing");
    let (spare, other_listen) = (Backend::start("spare"), format!("127.0.0.1:{}", free_port()).parse().unwrap());
    let check = "kind = \"tcp\"\ninterval = \"2s\"\ntimeout = \"1s\"\nfall = 3\nrise = 1";
    let f = Fulcrum::start(&two_services(&[failing.addr], check, spare.addr, other_listen));
    f.wait_all_up();
    let server = failing.addr.to_string();
    drop(failing);
    let state = || f.server_stats(&server);
    wait_until("two failed checks", Duration::from_secs(10), || state()["check_streak"] == 2);
    weight_other(&f, spare.addr, 2);
    let after = state();
    assert_eq!((after["check_up"].as_bool(), after["check_streak"].as_u64()), (Some(true), Some(2)), "right after the edit: {after}");
    wait_until("down at the third failure", Duration::from_secs(4), || state()["check_up"] == false);
    assert_eq!(f.log().matches("server down").count(), 1, "{}", f.log());
}

/// Round robin over four servers stays exactly cyclic over 1,000 requests while another
/// service is edited 50 times: the edits do not rebuild this service's balancer.
#[test]
fn round_robin_stays_cyclic_through_unrelated_edits() {
    let backends: Vec<Backend> = (1..=4).map(|i| Backend::start(&format!("b{i}"))).collect();
    let (spare, other_listen) = (Backend::start("spare"), format!("127.0.0.1:{}", free_port()).parse().unwrap());
    let servers: Vec<_> = backends.iter().map(|b| b.addr).collect();
    let f = Fulcrum::start(&two_services(&servers, "kind = \"none\"", spare.addr, other_listen));
    let mut names = Vec::new();
    for i in 0..1000 {
        if i % 20 == 10 {
            weight_other(&f, spare.addr, 2 + (i as u32 / 20) % 2);
        }
        let (status, body) = http_get(f.listen, "/name");
        assert_eq!(status, 200, "request {i}: {body}");
        names.push(body.trim().to_string());
    }
    let cycle: Vec<&String> = names.iter().take(4).collect();
    let distinct: std::collections::BTreeSet<&String> = cycle.iter().copied().collect();
    assert_eq!(distinct.len(), 4, "{cycle:?}");
    for (i, name) in names.iter().enumerate() {
        assert_eq!(name, cycle[i % 4], "request {i} broke the cycle: {:?}", &names[i.saturating_sub(4)..(i + 4).min(names.len())]);
    }
    assert!(f.log().matches("config applied").count() >= 50, "{}", f.log());
}
