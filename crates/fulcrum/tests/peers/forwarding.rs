//! The L4 data path: half close, bulk integrity through splice, idle timeouts, and the workers
//! of `reuse_port` that each accept on a socket of their own.

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::*;

fn one_server(extra: &str) -> (Nginx, Fulcrum) {
    let s = Nginx::start("s1", "TARGET");
    let f = Fulcrum::start(&service("round-robin", extra, HTTP_CHECK, &[(&s, "")]));
    (s, f)
}

/// A service over one `fulcrum backend`, which serves half-closed connections to the end.
fn one_backend(extra: &str) -> (Backend, Fulcrum) {
    let b = Backend::start("b1");
    let f =
        Fulcrum::start(&format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\n{extra}\n[service.health]\n{HTTP_CHECK}\n[[service.server]]\naddress = \"{}\"\n", b.addr));
    (b, f)
}

#[test]
fn half_close_client_that_shuts_its_write_side_still_gets_the_whole_response() {
    let (_b, f) = one_backend("half_close = true");
    let raw = request_then_half_close(f.listen, "/large");
    let body = body_of(&raw);
    assert_eq!(body.len(), LARGE);
    assert!(body == large_pattern().as_slice(), "body differs from the file");
}

#[test]
fn without_half_close_a_client_fin_closes_both_sides() {
    let (_b, f) = one_backend("half_close = false");
    let raw = request_then_half_close(f.listen, "/large");
    assert!(body_of(&raw).len() < LARGE, "the response must be cut when half_close = false");
}

#[test]
fn bulk_download_arrives_whole_and_is_counted() {
    let (s, f) = one_server("");
    let pattern = large_pattern();
    for _ in 0..3 {
        let mut c = TcpStream::connect(f.listen).unwrap();
        std::io::Write::write_all(&mut c, b"GET /large HTTP/1.0\r\n\r\n").unwrap();
        let mut raw = Vec::new();
        c.read_to_end(&mut raw).unwrap();
        assert_eq!(parse_response(&raw).unwrap().0, 200);
        assert!(body_of(&raw) == pattern.as_slice(), "64 MiB body differs");
    }
    let st = f.server_stats(&s.addr.to_string());
    assert!(st["bytes_out"].as_u64().unwrap() >= 3 * LARGE as u64, "{st}");
    assert!(st["bytes_in"].as_u64().unwrap() > 0, "{st}");
}

#[test]
fn an_idle_connection_is_closed_after_the_client_timeout() {
    let (_s, f) = one_server("client_timeout = \"300ms\"\nserver_timeout = \"300ms\"");
    let mut c = TcpStream::connect(f.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = c.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "expected a close");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(5), "closed after {waited:?}");
}

/// Listening sockets on `port`, whoever holds them (the port is the test's own).
fn listening_sockets(port: u16) -> usize {
    let out = std::process::Command::new("ss").args(["-Hltn", &format!("sport = :{port}")]).output().expect("ss runs (iproute2)");
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.trim().is_empty()).count()
}

/// CPU clock ticks (user + system) of each of `pid`'s threads named `worker-N` (`proxy::workers`), by name.
fn worker_ticks(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut ticks = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default().trim().to_string();
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        if !comm.starts_with("worker-") {
            continue;
        }
        ticks.insert(comm, cpu_ticks(&stat).unwrap_or(0));
    }
    ticks
}

#[test]
fn with_reuse_port_each_worker_accepts_on_a_socket_of_its_own() {
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let tcp_check = "kind = \"tcp\"\ninterval = \"200ms\"";
    let base = format!("workers = 2\nreuse_port = true\n\n{}", service_over("round-robin", "", tcp_check, &[(a.addr, ""), (b.addr, "")]));
    let f = Fulcrum::start(&base);
    f.wait_all_up();
    assert_eq!(listening_sockets(f.listen.port()), 2, "a socket per worker on {}", f.listen);
    assert_eq!(f.stats()["services"][0]["queue_limit"], 8192, "two accept backlogs of 4096");
    let before = worker_ticks(f.pid());
    assert_eq!(before.keys().collect::<Vec<_>>(), ["worker-0", "worker-1"]);

    // New connections from 30 client addresses: the kernel spreads them over both sockets, and
    // round robin holds across the workers, since the pool is shared.
    let mut seen = std::collections::BTreeMap::new();
    for i in 0..3000u32 {
        let source = std::net::IpAddr::from([127, 0, 0, 10 + (i % 30) as u8]);
        let (status, body) = http_get_from(Some(source), f.listen, "/name").unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(status, 200);
        *seen.entry(body.trim_end().to_string()).or_insert(0u32) += 1;
    }
    assert_eq!((seen.get("a"), seen.get("b")), (Some(&1500), Some(&1500)), "{seen:?}");
    let after = worker_ticks(f.pid());
    for (name, used) in &after {
        assert!(used > &before[name], "{name} took no part: {before:?} then {after:?}");
    }

    // A reload's new address (an HTTP service) gets a socket per worker; dropped, it has none.
    let port = free_port();
    let http = format!(
        "{base}\n[[service]]\nname = \"api\"\nlisten = \"127.0.0.1:{port}\"\nmode = \"http\"\n[service.health]\n{tcp_check}\n[[service.server]]\naddress = \"{}\"\n",
        a.addr
    );
    f.reload(&http);
    wait_until("a socket per worker on the new address", Duration::from_secs(10), || listening_sockets(port) == 2);
    let api: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_until("the new service's server up", Duration::from_secs(10), || f.stats()["services"][1]["servers"][0]["state"] == "up");
    assert_eq!(tally(api, 50).get("a"), Some(&50));
    f.reload(&base);
    wait_until("the dropped address's sockets closed", Duration::from_secs(10), || listening_sockets(port) == 0);
    assert_eq!(listening_sockets(f.listen.port()), 2);
    assert_eq!(tally(f.listen, 4).len(), 2);

    // At the service's maxconn, clients wait in the accept queues of both sockets (or in a loop
    // that accepted one as the other filled the service), and the stats count them all.
    f.reload(&base.replace("algorithm = \"round-robin\"", "algorithm = \"round-robin\"\nmaxconn = 1"));
    wait_until("maxconn 1 applied", Duration::from_secs(10), || f.log().matches("config applied").count() >= 3);
    let held = connect_from(None, f.listen).unwrap();
    wait_until("the first client served", Duration::from_secs(5), || f.stats()["services"][0]["current"] == 1);
    let waiting: Vec<_> = (0..6u8).map(|i| connect_from(Some([127, 0, 0, 50 + i].into()), f.listen).unwrap()).collect();
    wait_until("six clients counted as waiting", Duration::from_secs(5), || f.stats()["services"][0]["queue"] == 6);
    assert_eq!(f.stats()["services"][0]["current"], 1, "maxconn holds over both workers' loops");
    drop(held);
    wait_until("a waiting client served", Duration::from_secs(5), || f.stats()["services"][0]["queue"] == 5);
    drop(waiting);
}
