//! `fast_path = "sockmap"`: bulk both ways, half close, byte counters and the metric, whichever
//! path this machine takes. Where BPF cannot load, the test asserts the fallback (splice) carries
//! the same traffic and that the one warning says why; it prints which path it checked.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::support::*;

/// A TCP echo server: each connection gets back every byte it sent, then a FIN after the
/// client's FIN (so it needs half close to answer a client that shut its write side).
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = c.try_clone().unwrap();
                let mut w = c;
                let _ = std::io::copy(&mut r, &mut w);
                let _ = w.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 253) as u8).collect()
}

/// Sends `data`, shuts the write side, and reads everything that comes back.
fn echo_through(addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = c.try_clone().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    (&c).read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}

fn metric(f: &Fulcrum, name: &str) -> u64 {
    let (status, body) = curl(f.admin, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    body.lines().find(|l| l.starts_with(name) && !l.starts_with('#')).and_then(|l| l.split_whitespace().last()?.parse().ok()).unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Voluntary context switches of every thread of a process.
fn context_switches(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        total += status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
    }
    total
}

#[test]
fn sockmap_service_carries_bulk_both_ways_with_half_close_and_counts_the_bytes() {
    let echo = echo_server();
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"echo\"\nlisten = \"{{LISTEN}}\"\nfast_path = \"sockmap\"\nhalf_close = true\n[service.health]\nkind = \"tcp\"\ninterval = \"200ms\"\n[[service.server]]\naddress = \"{echo}\"\n"
    ));
    f.wait_all_up();
    let log = f.log();
    let loaded = log.contains("sockmap fast path loaded");
    if loaded {
        println!("this machine runs the sockmap fast path");
    } else {
        assert!(log.contains("sockmap fast path unavailable, these services splice instead:"), "neither loaded nor a warning: {log}");
        assert_eq!(log.matches("sockmap fast path unavailable").count(), 1, "the warning comes once: {log}");
        println!("this machine cannot load the sockmap program; checking the splice fallback: {}", log.lines().find(|l| l.contains("unavailable")).unwrap_or(""));
    }

    // A small exchange, a few MB both ways, and a client that half-closes right away: the
    // echo's answer must still arrive whole after the client's FIN was passed on.
    let mut sent = 0u64;
    for size in [5, 3 << 20, 0] {
        let data = pattern(size);
        let back = echo_through(f.listen, &data);
        assert!(back == data, "{size} bytes sent, {} came back (equal prefix: {})", back.len(), back.iter().zip(&data).take_while(|(a, b)| a == b).count());
        sent += size as u64;
    }
    // The process must not wake per byte: 32 MiB through the sockmap costs a handful of context
    // switches (the copy and splice path needs hundreds).
    let data = pattern(32 << 20);
    let before = context_switches(f.pid());
    let back = echo_through(f.listen, &data);
    let switches = context_switches(f.pid()) - before;
    assert!(back == data, "32 MiB came back different");
    sent += data.len() as u64;
    // The 3 MB and 32 MiB connections were linked (the 5- and 0-byte clients may half-close
    // before their server is connected, and are then spliced).
    let connections = metric(&f, "fulcrum_fast_path_sockmap_connections_total");
    if loaded {
        assert!(connections >= 2, "the bulk connections went through the sockmap, metric says {connections}");
    } else {
        assert_eq!(connections, 0);
    }
    println!("32 MiB echoed with {switches} context switches of fulcrum ({})", if loaded { "sockmap" } else { "splice" });
    if loaded {
        assert!(switches < 100, "the process woke {switches} times for 32 MiB");
    }

    // Byte counters: the stats see what the kernel moved, once the connections ended.
    let st = f.server_stats(&echo.to_string());
    wait_until("byte counters", Duration::from_secs(5), || {
        let st = f.server_stats(&echo.to_string());
        st["bytes_in"].as_u64().unwrap() >= sent && st["bytes_out"].as_u64().unwrap() >= sent
    });
    let st2 = f.server_stats(&echo.to_string());
    assert_eq!(st2["bytes_in"].as_u64().unwrap(), sent, "{st} {st2}");
    assert_eq!(st2["bytes_out"].as_u64().unwrap(), sent, "{st2}");
}

#[test]
fn sockmap_connection_idle_past_its_timeout_is_closed_and_a_busy_one_is_not() {
    let echo = echo_server();
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"echo\"\nlisten = \"{{LISTEN}}\"\nfast_path = \"sockmap\"\nclient_timeout = \"400ms\"\nserver_timeout = \"400ms\"\n[service.health]\nkind = \"tcp\"\ninterval = \"200ms\"\n[[service.server]]\naddress = \"{echo}\"\n"
    ));
    f.wait_all_up();
    // Busy: a byte every 150 ms for 1.5 s keeps the connection open past the 400 ms limit.
    let mut c = TcpStream::connect(f.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for i in 0..10u8 {
        c.write_all(&[i]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i);
        std::thread::sleep(Duration::from_millis(150));
    }
    // Idle: closed after about the limit.
    let started = std::time::Instant::now();
    let mut b = [0u8; 1];
    let n = c.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "expected a close");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(4), "closed after {waited:?}");
}

/// Sockets a process holds open.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten().filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))).count()
}

/// A client that sends and closes while its server is still answering (so the answer meets a
/// reset) ends its connection at once: the FIN toward a closed socket does not wait for bytes
/// it can never take.
#[test]
fn sockmap_connection_whose_client_is_gone_ends_at_once() {
    let echo = echo_server();
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"echo\"\nlisten = \"{{LISTEN}}\"\nfast_path = \"sockmap\"\nclient_timeout = \"5m\"\nserver_timeout = \"5m\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{echo}\"\n"
    ));
    let idle = sockets(f.pid());
    let data = pattern(100_000);
    for _ in 0..50 {
        let mut c = TcpStream::connect(f.listen).unwrap();
        c.write_all(&data).unwrap();
    }
    // At most: a socket of the start-up's readiness check may still have been open before.
    wait_until("every connection ended", Duration::from_secs(10), || sockets(f.pid()) <= idle);
}

/// A TCP service with the default fast path (adaptive) unless `extra` sets one, its echo server,
/// and whether this process loaded the program (else the one line at start says why, and
/// nothing is promoted).
fn adaptive_service(extra: &str) -> (Fulcrum, SocketAddr, bool) {
    let echo = echo_server();
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"echo\"\nlisten = \"{{LISTEN}}\"\nhalf_close = true\n{extra}[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{echo}\"\n"
    ));
    let log = f.log();
    let loaded = log.contains("sockmap fast path loaded");
    if extra.contains("splice") {
        assert!(!log.contains("sockmap fast path"), "a splice service loads no program: {log}");
    } else if !loaded {
        assert_eq!(log.matches("sockmap fast path unavailable, these services splice instead:").count(), 1, "neither loaded nor one line saying why: {log}");
    }
    println!("adaptive fast path {}", if loaded { "loaded" } else { "not loaded: checking that nothing is promoted" });
    (f, echo, loaded)
}

/// `n` request/response exchanges of `size` bytes on `c`, each answer checked.
fn exchanges(c: &mut TcpStream, n: usize, size: usize, seed: usize) {
    for i in 0..n {
        let req: Vec<u8> = (0..size).map(|j| ((i + j + seed) % 251) as u8).collect();
        c.write_all(&req).unwrap();
        let mut back = vec![0u8; size];
        c.read_exact(&mut back).unwrap();
        assert!(back == req, "exchange {i} came back different");
    }
}

/// Writes `data` on one thread while reading as many bytes back on this one.
fn echo_bulk(c: &TcpStream, data: &[u8]) -> Vec<u8> {
    let mut w = c.try_clone().unwrap();
    let mut back = vec![0u8; data.len()];
    let data = data.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&data).unwrap());
    (&*c).read_exact(&mut back).unwrap();
    writer.join().unwrap();
    back
}

const BULK: usize = 48 << 20;

#[test]
fn adaptive_keep_alive_connection_is_promoted_and_its_bytes_and_counters_are_intact() {
    let (f, echo, loaded) = adaptive_service("");
    let mut c = TcpStream::connect(f.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Short exchanges: 16 make the 32 turns; 200 more run through the sockmap.
    exchanges(&mut c, 216, 300, 0);
    let (promoted, active) = (metric(&f, "fulcrum_fast_path_sockmap_promoted_total"), metric(&f, "fulcrum_fast_path_sockmap_active"));
    if loaded {
        assert_eq!((promoted, active), (1, 1), "the keep-alive connection is in the sockmap");
    } else {
        assert_eq!((promoted, active), (0, 0));
    }
    let st = f.stats();
    assert_eq!(st["services"][0]["sockmap_active"].as_u64(), Some(active), "{st}");
    assert_eq!(st["services"][0]["sockmap_promoted"].as_u64(), Some(promoted), "{st}");
    drop(c);
    wait_until("the connection ended", Duration::from_secs(5), || metric(&f, "fulcrum_fast_path_sockmap_active") == 0);
    wait_until("byte counters", Duration::from_secs(5), || f.server_stats(&echo.to_string())["bytes_out"].as_u64() == Some(216 * 300));
    let st = f.server_stats(&echo.to_string());
    assert_eq!((st["bytes_in"].as_u64(), st["bytes_out"].as_u64()), (Some(216 * 300), Some(216 * 300)), "{st}");
}

#[test]
fn adaptive_connection_that_turns_to_bulk_leaves_the_sockmap_with_every_byte_in_order() {
    let (f, echo, loaded) = adaptive_service("");
    let mut c = TcpStream::connect(f.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    exchanges(&mut c, 40, 200, 1);
    assert_eq!(metric(&f, "fulcrum_fast_path_sockmap_promoted_total"), u64::from(loaded));
    // Bulk both ways at once: the echo sends back what it reads while the client still writes.
    let data = pattern(BULK);
    let back = echo_bulk(&c, &data);
    assert!(back == data, "bulk came back different (equal prefix: {})", back.iter().zip(&data).take_while(|(a, b)| a == b).count());
    if loaded {
        wait_until("the bulk connection left the sockmap", Duration::from_secs(10), || metric(&f, "fulcrum_fast_path_sockmap_demoted_total") == 1);
        assert_eq!(metric(&f, "fulcrum_fast_path_sockmap_active"), 0);
    }
    // After the move: small exchanges, bulk again and a half close, all in order.
    exchanges(&mut c, 20, 500, 2);
    let back = echo_bulk(&c, &data);
    assert!(back == data, "bulk after the move came back different");
    c.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{} bytes after the echo's FIN", rest.len());
    let total = (40 * 200 + 20 * 500 + 2 * BULK) as u64;
    wait_until("byte counters", Duration::from_secs(5), || f.server_stats(&echo.to_string())["bytes_out"].as_u64() == Some(total));
    let st = f.server_stats(&echo.to_string());
    assert_eq!(st["bytes_in"].as_u64(), Some(total), "{st}");
    assert_eq!(metric(&f, "fulcrum_fast_path_sockmap_promoted_total"), u64::from(loaded), "a connection moves in once");
}

#[test]
fn adaptive_connection_half_closes_after_its_promotion() {
    let (f, _echo, loaded) = adaptive_service("");
    let mut c = TcpStream::connect(f.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchanges(&mut c, 30, 100, 3);
    assert_eq!(metric(&f, "fulcrum_fast_path_sockmap_active"), u64::from(loaded));
    // The last request and the client's FIN: the echo answers after it, through the open
    // direction, then closes.
    let last = pattern(200_000);
    c.write_all(&last).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    assert!(back == last, "{} of {} bytes came back after the half close", back.len(), last.len());
    wait_until("the connection ended", Duration::from_secs(5), || metric(&f, "fulcrum_fast_path_sockmap_active") == 0);
}

#[test]
fn adaptive_short_connections_never_enter_the_sockmap() {
    let (f, _echo, _) = adaptive_service("");
    for i in 0..40 {
        let mut c = TcpStream::connect(f.listen).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // A few exchanges each: fewer than the turns a promotion takes.
        exchanges(&mut c, 1 + i % 8, 100, i);
    }
    // A splice service is never promoted however long its connection.
    let (g, _echo, _) = adaptive_service("fast_path = \"splice\"\n");
    let mut c = TcpStream::connect(g.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchanges(&mut c, 100, 100, 0);
    for f in [&f, &g] {
        assert_eq!(metric(f, "fulcrum_fast_path_sockmap_connections_total"), 0);
        assert_eq!(metric(f, "fulcrum_fast_path_sockmap_promoted_total"), 0);
    }
}

#[test]
fn adaptive_connection_keeps_its_idle_timeout_after_promotion() {
    let (f, _echo, loaded) = adaptive_service("client_timeout = \"400ms\"\nserver_timeout = \"400ms\"\n");
    let mut c = TcpStream::connect(f.listen).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    exchanges(&mut c, 20, 50, 4);
    assert_eq!(metric(&f, "fulcrum_fast_path_sockmap_active"), u64::from(loaded));
    // Busy: an exchange every 150 ms for 1.5 s keeps it open past the 400 ms limit.
    for i in 0..10 {
        exchanges(&mut c, 1, 10, i);
        std::thread::sleep(Duration::from_millis(150));
    }
    // Idle: closed after about the limit.
    let started = std::time::Instant::now();
    let mut b = [0u8; 1];
    assert_eq!(c.read(&mut b).unwrap_or(0), 0, "expected a close");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(4), "closed after {waited:?}");
    wait_until("the connection ended", Duration::from_secs(5), || metric(&f, "fulcrum_fast_path_sockmap_active") == 0);
}
