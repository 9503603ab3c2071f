//! What a crowd of clients can make Fulcrum hold: descriptors (the process-wide budget under a
//! small `ulimit -n`), memory (slow readers in HTTP mode) and CPU (stalled HTTP/2 prefaces),
//! against real servers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::{Backend, Fulcrum, HTTP_CHECK, service_over, wait_until};

/// Opens `n` connections at once, each sending `request`, and returns them unread.
fn crowd(addr: SocketAddr, n: usize, request: &[u8], rcvbuf: Option<usize>) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            if let Some(size) = rcvbuf {
                sock.set_recv_buffer_size(size).unwrap();
            }
            sock.connect_timeout(&addr.into(), Duration::from_secs(10)).unwrap_or_else(|e| panic!("client {i}: {e}"));
            let mut s: TcpStream = sock.into();
            s.write_all(request).unwrap();
            s
        })
        .collect()
}

/// Reads each connection to its end; returns the status of each response (0: none).
fn statuses(conns: Vec<TcpStream>) -> Vec<u16> {
    conns
        .into_iter()
        .map(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut raw = Vec::new();
            let _ = s.read_to_end(&mut raw);
            crate::support::parse_response(&raw).map_or(0, |(status, _)| status)
        })
        .collect()
}

#[test]
fn out_of_descriptors_clients_wait_in_the_backlog_and_no_server_is_blamed() {
    let backend = Backend::start("b1");
    let config = format!("maxconn = 100000\n{}", service_over("round-robin", "mode = \"tcp\"\nfailure_limit = 5", HTTP_CHECK, &[(backend.addr, "")]));
    let f = Fulcrum::start_under(&["prlimit", "--nofile=256:256"], &config);
    f.wait_all_up();
    // 1,000 clients at once: 256 descriptors carry about 60 of them; the others wait in the
    // listen backlog and are served as the first ones finish.
    let conns = crowd(f.listen, 1000, b"GET /name HTTP/1.0\r\nHost: a\r\n\r\n", None);
    // The admin listener keeps answering while the proxy is at its limit.
    let stats = f.stats();
    let statuses = statuses(conns);
    let served = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(served, 1000, "every client is served in turn; statuses other than 200: {:?}", statuses.iter().filter(|&&s| s != 200).collect::<Vec<_>>());
    let server = crate::support::server_in(&f.stats(), &backend.addr.to_string());
    assert_eq!(server["state"], "up", "{server}");
    assert_eq!((&server["connect_failures"], &server["transfer_errors"]), (&0.into(), &0.into()), "{server}");
    let log = f.log();
    assert!(!log.contains("server down"), "{log}");
    assert!(log.contains("maxconn is more than the descriptor limit carries"), "the lowered maxconn is explained: {log}");
    let full = log.lines().find(|l| l.contains("the process is at its connection limit")).unwrap_or_else(|| panic!("a full process says so: {log}"));
    assert!(full.contains("raise `maxconn`, or the descriptor limit") && full.contains("waiting="), "{full}");
    assert!(log.matches("the process is at its connection limit").count() <= 30, "at most once a second: {log}");
    let process = &f.stats()["process"];
    assert_eq!(process["descriptors"], 256, "{process}");
    let maxconn = process["maxconn"].as_u64().unwrap();
    assert!((30..=128).contains(&maxconn), "{process}");
    assert!(process["peak"].as_u64().unwrap() <= maxconn, "never more at once than the budget: {process}");
    assert!(process["waits"].as_u64().unwrap() > 0, "{process}");
    assert!(stats["services"].is_array(), "{stats}");
}

/// `n` TCP services on free ports of 127.0.3.1, each checking one server that refuses.
fn many_services(n: usize) -> String {
    (0..n)
        .map(|i| {
            let port = crate::support::free_port();
            format!(
                "[[service]]\nname = \"s{i}\"\nlisten = \"127.0.3.1:{port}\"\nmode = \"tcp\"\n[service.health]\nkind = \"tcp\"\n[[service.server]]\naddress = \"127.0.0.1:1\"\n"
            )
        })
        .collect()
}

#[test]
fn a_config_whose_own_sockets_outgrow_the_descriptor_limit_is_refused_with_what_to_raise() {
    // 80 listeners (two descriptors each: the socket and the copy an upgrade hands over), 80
    // checks and the reserve need 400 descriptors before one client: under 256 the process would
    // start with its checks and its admin API starved of them.
    let dir = crate::support::scratch("too-few-descriptors");
    let path = dir.join("fulcrum.toml");
    std::fs::write(&path, format!("allow_root = true\n{}", many_services(80))).unwrap();
    let started = Instant::now();
    let out = std::process::Command::new("prlimit").args(["--nofile=256:256", env!("CARGO_BIN_EXE_fulcrum"), "run", path.to_str().unwrap()]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused, not run: {said}");
    assert!(started.elapsed() < Duration::from_secs(10), "refused at once");
    assert!(said.contains("needs at least 400 file descriptors") && said.contains("the limit (RLIMIT_NOFILE) is 256"), "{said}");
    assert!(said.contains("80 listening sockets") && said.contains("80 health checks") && said.contains("raise `ulimit -n`"), "{said}");

    // A reload to it is refused the same way, and the running config stays.
    let backend = Backend::start("b1");
    let small = service_over("round-robin", "mode = \"tcp\"", HTTP_CHECK, &[(backend.addr, "")]);
    let f = Fulcrum::start_under(&["prlimit", "--nofile=256:256"], &small);
    f.wait_all_up();
    f.reload(&format!("{small}\n{}", many_services(80)));
    wait_until("the reload refused", Duration::from_secs(10), || f.log().contains("needs at least"));
    assert_eq!(f.stats()["services"].as_array().map(Vec::len), Some(1), "the running config stays");
    assert_eq!(crate::support::http_get(f.listen, "/name").0, 200);
}

#[test]
fn slow_readers_cost_a_bounded_amount_and_their_memory_comes_back() {
    const N: usize = 300;
    let backend = Backend::start_with("big", &["--large-size", "20000000"]);
    let f = Fulcrum::start(&service_over("round-robin", "mode = \"http\"", "kind = \"none\"", &[(backend.addr, "")]));
    // The level to come back to: the process after as many ordinary clients at once.
    let ordinary = crowd(f.listen, N, b"GET /name HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", None);
    assert!(statuses(ordinary).iter().all(|&s| s == 200));
    std::thread::sleep(Duration::from_secs(2));
    let before = f.rss_kib();
    // Clients that ask for 20 MB each and never read, with a 4 KiB receive buffer.
    let slow = crowd(f.listen, N, b"GET /large HTTP/1.1\r\nHost: a\r\n\r\n", Some(4096));
    wait_until("every slow reader served", Duration::from_secs(20), || f.stats()["services"][0]["current"] == N as u64);
    std::thread::sleep(Duration::from_secs(2));
    let during = f.rss_kib();
    let each = during.saturating_sub(before) / N as u64;
    assert!(each < 200, "a slow reader costs {each} KiB (RSS {before} -> {during} KiB)");
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut after = f.rss_kib();
    while after > before + before / 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        after = f.rss_kib();
    }
    assert!(after <= before + before / 10, "RSS {before} KiB before, {during} KiB with {N} slow readers, still {after} KiB 40 s after they left");
}

/// Sends one keep-alive request on `s` and reads its response (Content-Length framed); returns
/// the status, 0 when the connection gave none.
fn keep_alive_get(s: &mut TcpStream, path: &str) -> u16 {
    // One write: a request in pieces would wait on Nagle and the delayed ACK.
    if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes()).is_err() {
        return 0;
    }
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(0);
            if raw.len() >= end + 4 + length {
                return crate::support::parse_response(&raw).map_or(0, |(status, _)| status);
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return 0,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
        }
    }
}

/// RSS once it has stopped moving: steady within 1% for 3 s, longer than the allocator's 1 s decay,
/// so pages that are about to go back are not counted (a shorter window can catch the moment
/// before the purge starts).
fn settled_rss(f: &Fulcrum) -> u64 {
    const STEADY: usize = 12; // samples, 250 ms apart
    let mut samples = vec![f.rss_kib()];
    for _ in 0..160 {
        std::thread::sleep(Duration::from_millis(250));
        samples.push(f.rss_kib());
        let window = &samples[samples.len().saturating_sub(STEADY + 1)..];
        let (low, high) = (window.iter().min().unwrap(), window.iter().max().unwrap());
        if window.len() > STEADY && (high - low) * 100 <= *high {
            return *window.last().unwrap();
        }
    }
    *samples.last().unwrap()
}

/// An idle keep-alive connection holds no buffer in either mode (HTTP mode frees hyper's state
/// while the client is quiet) and still answers its next request. README: Limits and hardening.
#[test]
fn idle_keep_alive_connections_cost_little_and_still_answer() {
    const N: usize = 2000;
    let backend = Backend::start("b1");
    for (mode, limit_kib) in [("tcp", 2.0), ("http", 4.0)] {
        let http = if mode == "http" { "\n[service.http]\nhead_timeout = \"5m\"" } else { "" };
        let extra = format!("mode = \"{mode}\"\nclient_timeout = \"5m\"\nserver_timeout = \"5m\"{http}");
        let f = Fulcrum::start(&service_over("round-robin", &extra, "kind = \"none\"", &[(backend.addr, "")]));
        let connect = || {
            let s = TcpStream::connect(f.listen).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        };
        // A first crowd warms the allocator and the server connections, then leaves.
        let warm: Vec<TcpStream> = (0..N).map(|_| connect()).collect::<Vec<_>>();
        drop(warm);
        let before = settled_rss(&f);
        let mut idle: Vec<TcpStream> = (0..N)
            .map(|_| {
                let mut s = connect();
                assert_eq!(keep_alive_get(&mut s, "/name"), 200);
                s
            })
            .collect();
        let after = settled_rss(&f);
        let each = after.saturating_sub(before) as f64 / N as f64;
        println!("{mode}: {each:.2} KiB per idle keep-alive connection (RSS {before} -> {after} KiB with {N})");
        assert!(each <= limit_kib, "{mode}: an idle keep-alive connection costs {each:.2} KiB (RSS {before} -> {after} KiB with {N})");
        let answered = idle.iter_mut().map(|s| keep_alive_get(s, "/name")).filter(|&status| status == 200).count();
        assert_eq!(answered, N, "{mode}: every idle connection answers its next request");
    }
}

/// With `h2c`, 3,000 clients that each sent part of the HTTP/2 preface and stopped cost Fulcrum
/// under 0.05 CPU-seconds per second (each waits on its socket, never on a timer), are closed at
/// `head_timeout`, and a client whose preface comes in pieces is still served in HTTP/2.
#[test]
fn stalled_http2_prefaces_cost_no_cpu_while_they_wait() {
    const N: usize = 3000;
    const QUIET: Duration = Duration::from_secs(4);
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&service_over("round-robin", "mode = \"http\"\n[service.http]\nh2c = true\nhead_timeout = \"12s\"", "kind = \"none\"", &[(backend.addr, "")]));
    let stalled = crowd(f.listen, N, b"PRI * HTTP/2.0\r\n", None);
    wait_until("every stalled client accepted", Duration::from_secs(20), || f.stats()["services"][0]["current"].as_u64() == Some(N as u64));
    let before = (f.cpu_seconds(), Instant::now());
    std::thread::sleep(QUIET);
    let per_second = (f.cpu_seconds() - before.0) / before.1.elapsed().as_secs_f64();
    println!("{N} stalled prefaces: {per_second:.4} CPU-s per second");
    assert!(per_second < 0.05, "{N} stalled HTTP/2 prefaces cost {per_second:.4} CPU-s per second");

    // The rest of the preface, a while later, and an empty SETTINGS: Fulcrum answers in HTTP/2.
    let mut late = TcpStream::connect(f.listen).unwrap();
    late.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    late.write_all(b"\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").unwrap();
    late.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 9];
    late.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "the server's first frame is its SETTINGS: {head:?}");

    // At head_timeout every stalled client is closed.
    let mut closed = 0;
    for mut s in stalled {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Ok(0) | Err(_)) {
            closed += 1;
        }
    }
    assert_eq!(closed, N, "stalled clients closed at head_timeout");
}
