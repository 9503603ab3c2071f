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
