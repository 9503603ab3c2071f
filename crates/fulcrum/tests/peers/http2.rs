//! HTTP/2 abuse limits (`proxy/http/h2.rs`) and the strict conversions between protocol
//! versions (`proxy/http/convert.rs`: cookies, whitespace, the asterisk target, 101s and h2c
//! upgrades), with frames written by hand so the test controls exactly what a hostile client
//! sends; and routing and affinity over HTTP/2, with curl.

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use crate::support::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `GET /name` for authority `a` in HPACK: indexed :method GET, :scheme http, :path /, then
/// :authority as a literal.
fn get_headers(stream: u32) -> Vec<u8> {
    frame(1, 0x5, stream, &[0x82, 0x86, 0x84, 0x41, 0x01, b'a'])
}

/// Fulcrum serving h2c in front of `nginx`, with `http_extra` in `[service.http]`.
fn h2c_over(nginx: &Nginx, http_extra: &str) -> Fulcrum {
    Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nh2c = true\n{http_extra}[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n",
        nginx.addr
    ))
}

/// The frames of a whole connection until it closes, as (type, stream, payload).
fn read_frames(conn: &mut std::net::TcpStream) -> Vec<(u8, u32, Vec<u8>)> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw);
    let mut frames = Vec::new();
    let mut at = 0;
    while raw.len() >= at + 9 {
        let len = (usize::from(raw[at]) << 16) | (usize::from(raw[at + 1]) << 8) | usize::from(raw[at + 2]);
        let stream = u32::from_be_bytes([raw[at + 5], raw[at + 6], raw[at + 7], raw[at + 8]]) & 0x7fff_ffff;
        let end = (at + 9 + len).min(raw.len());
        frames.push((raw[at + 3], stream, raw[at + 9..end].to_vec()));
        at += 9 + len;
    }
    frames
}

/// CVE-2023-44487: a client that opens streams and resets them at once, thousands in a burst,
/// gets GOAWAY with ENHANCE_YOUR_CALM, and its requests do not reach the server in numbers.
#[test]
fn rapid_reset_ends_the_connection_with_enhance_your_calm() {
    let nginx = Nginx::start("n1", "TARGET");
    let f = h2c_over(&nginx, "");
    let mut conn = std::net::TcpStream::connect(f.listen).unwrap();
    let mut burst = PREFACE.to_vec();
    burst.extend(frame(4, 0, 0, &[]));
    for i in 0..2000u32 {
        let stream = 1 + 2 * i;
        burst.extend(get_headers(stream));
        burst.extend(frame(3, 0, stream, &8u32.to_be_bytes()));
    }
    let _ = conn.write_all(&burst);
    let frames = read_frames(&mut conn);
    let goaway = frames.iter().find(|(kind, ..)| *kind == 7).unwrap_or_else(|| panic!("no GOAWAY in {} frames", frames.len()));
    let code = u32::from_be_bytes([goaway.2[4], goaway.2[5], goaway.2[6], goaway.2[7]]);
    assert_eq!(code, 0xb, "ENHANCE_YOUR_CALM");
    let total = f.server_stats(&nginx.addr.to_string())["total"].as_u64().unwrap();
    assert!(total < 200, "{total} of 2000 reset requests reached the server");
}

/// A client may keep `max_streams` streams open; SETTINGS says so, and a request over the limit
/// is refused with REFUSED_STREAM while the others are answered.
#[test]
fn streams_past_max_streams_are_refused() {
    let nginx = Nginx::start("n2", "TARGET");
    let f = h2c_over(&nginx, "max_streams = 4\n");
    let mut conn = std::net::TcpStream::connect(f.listen).unwrap();
    let mut burst = PREFACE.to_vec();
    burst.extend(frame(4, 0, 0, &[]));
    for i in 0..6u32 {
        // Open and never finished (no END_STREAM): each holds its place.
        burst.extend(frame(1, 0x4, 1 + 2 * i, &[0x83, 0x86, 0x84, 0x41, 0x01, b'a']));
    }
    conn.write_all(&burst).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let frames = read_frames(&mut conn);
    let settings = frames.iter().find(|(kind, stream, p)| *kind == 4 && *stream == 0 && !p.is_empty()).expect("the server's SETTINGS");
    let max = settings.2.chunks(6).find(|s| s[..2] == [0, 3]).map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
    assert_eq!(max, Some(4), "SETTINGS_MAX_CONCURRENT_STREAMS");
    let refused: Vec<u32> = frames.iter().filter(|(kind, _, p)| *kind == 3 && p[..] == 7u32.to_be_bytes()).map(|(_, s, _)| *s).collect();
    assert!(!refused.is_empty() && refused.iter().all(|s| *s > 7), "streams past the fourth refused: {refused:?}");
}

/// CVE-2019-9512 and -9515: a client that sends PING and SETTINGS frames, each asking for an
/// acknowledgement, and never reads them. Fulcrum keeps one acknowledgement pending and stops
/// reading the connection until it is written, so the flood meets a full socket, not a growing
/// queue: the client's writes stall, Fulcrum's memory stays where it was, and other clients are
/// served meanwhile.
#[test]
fn ping_and_settings_floods_from_a_client_that_does_not_read_are_held_back() {
    let nginx = Nginx::start("n3", "TARGET");
    let f = h2c_over(&nginx, "");
    let before = f.rss_kib();
    let mut conn = std::net::TcpStream::connect(f.listen).unwrap();
    conn.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut chunk = Vec::new();
    for i in 0..1000u64 {
        chunk.extend(frame(6, 0, 0, &i.to_be_bytes()));
        chunk.extend(frame(4, 0, 0, &[0, 3, 0, 0, 0, 100]));
    }
    let mut handshake = PREFACE.to_vec();
    handshake.extend(frame(4, 0, 0, &[]));
    conn.write_all(&handshake).unwrap();
    // 4,000 chunks: 2 million frames, 64 MB, far more than the sockets on the way can hold.
    const CHUNKS: usize = 4000;
    let mut sent = 0;
    while sent < CHUNKS && conn.write_all(&chunk).is_ok() {
        sent += 1;
    }
    assert!(sent < CHUNKS, "all {} MB of the flood were taken: nothing held it back", (CHUNKS * chunk.len()) >> 20);
    let grown = f.rss_kib().saturating_sub(before);
    println!("{} MB of the flood taken before it stalled; Fulcrum grew by {grown} KiB", (sent * chunk.len()) >> 20);
    assert!(grown < 4096, "Fulcrum grew by {grown} KiB while {} MB of unread PING and SETTINGS frames came in", (sent * chunk.len()) >> 20);
    assert_eq!(http_get(f.listen, "/name").0, 200, "another client is served during the flood");
    drop(conn);
}

/// Routing and cookie affinity work over HTTP/2 as over HTTP/1.1: curl with prior knowledge
/// reaches the pool a header routes to, gets the affinity cookie, and with it stays on one
/// server while fresh clients are spread.
#[test]
fn routes_and_cookie_affinity_work_the_same_over_http2() {
    let (a, b, api) = (Nginx::start("a", "TARGET"), Nginx::start("b", "TARGET"), Nginx::start("api", "TARGET"));
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nalgorithm = \"cookie\"\n[service.http]\nh2c = true\n[service.health]\nkind = \"none\"\n\
         [[service.server]]\naddress = \"{}\"\nid = \"a\"\n[[service.server]]\naddress = \"{}\"\nid = \"b\"\n\
         [[service.pool]]\nname = \"api\"\n[service.pool.health]\nkind = \"none\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.route]]\npool = \"api\"\nheader = \"x-pool\"\nheader_value = \"api\"\n",
        a.addr, b.addr, api.addr
    ));
    let jar = scratch("h2-cookies").join("jar.txt");
    let get = |extra: &[&str]| -> (String, String) {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "10", "--http2-prior-knowledge", "-w", "\n%{http_version}"])
            .args(extra)
            .arg(format!("http://{}/name", f.listen))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, version) = text.rsplit_once('\n').unwrap_or((&text, ""));
        (body.trim_end().to_string(), version.to_string())
    };
    assert_eq!(get(&["-H", "x-pool: api"]), ("api".to_string(), "2".to_string()), "the route's pool");
    let with_jar = ["-b", jar.to_str().unwrap(), "-c", jar.to_str().unwrap()];
    let (first, version) = get(&with_jar);
    assert_eq!(version, "2");
    let names: std::collections::BTreeSet<String> = (0..10).map(|_| get(&with_jar).0).collect();
    assert_eq!(names.into_iter().collect::<Vec<_>>(), vec![first.clone()], "one server for the session");
    let jar_text = std::fs::read_to_string(&jar).unwrap();
    assert!(jar_text.contains(&format!("SERVERID\t{first}")), "{jar_text}");
    let fresh: std::collections::BTreeSet<String> = (0..4).map(|_| get(&[]).0).collect();
    assert_eq!(fresh.len(), 2, "fresh clients are spread: {fresh:?}");
}

/// A header block of literal fields, none indexed (RFC 7541 section 6.2.2, new names).
fn literal_headers(stream: u32, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    frame(1, 0x5, stream, &block)
}

/// One request of `fields` on a new h2c connection; the text of the DATA frames of its answer,
/// read until the frame that ends its stream.
fn h2_request(f: &Fulcrum, fields: &[(&str, &str)]) -> String {
    let mut conn = std::net::TcpStream::connect(f.listen).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(4, 0, 0, &[]));
    out.extend(literal_headers(1, fields));
    conn.write_all(&out).unwrap();
    let mut data = Vec::new();
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head).unwrap_or_else(|e| panic!("the answer to {fields:?} did not end: {e}"));
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload).unwrap();
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if stream != 1 {
            continue;
        }
        // RST_STREAM: no answer at all.
        assert_ne!(head[3], 3, "stream reset: {payload:?}");
        if head[3] == 0 {
            data.extend_from_slice(&payload);
        }
        // END_STREAM on DATA or HEADERS.
        if (head[3] == 0 || head[3] == 1) && head[4] & 0x1 != 0 {
            return String::from_utf8_lossy(&data).to_string();
        }
    }
}

/// Fulcrum with h2c before `server`, idle connections closed after a second.
fn h2c_before(server: std::net::SocketAddr) -> Fulcrum {
    Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nh2c = true\nhead_timeout = \"1s\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{server}\"\n"
    ))
}

/// HTTP/2 to HTTP/1.1: cookie fields are joined into one line with `; ` (RFC 9113 section
/// 8.2.3); a value with whitespace at an end is refused (section 8.2.1); the target `*` goes on
/// with OPTIONS only, from either version.
#[test]
fn http2_requests_become_strict_http_1_1_ones() {
    let (server, heads) = head_keeper();
    let f = h2c_before(server);
    let base = [(":method", "GET"), (":scheme", "http"), (":path", "/c"), (":authority", "a")];
    let body = h2_request(&f, &[&base[..], &[("cookie", "a=1"), ("x-n", "1"), ("cookie", "b=2"), ("cookie", "c=3")]].concat());
    assert_eq!(body, "ok");
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.starts_with("get /c http/1.1\r\n") && head.matches("cookie:").count() == 1 && head.contains("cookie: a=1; b=2; c=3\r\n"), "{head}");

    for value in [" padded", "padded\t", "padded "] {
        let body = h2_request(&f, &[&base[..], &[("x-a", value)]].concat());
        assert!(body.starts_with("400 Bad Request: the value of x-a begins or ends with whitespace"), "{value:?}: {body}");
    }
    let star = [(":scheme", "http"), (":path", "*"), (":authority", "a")];
    let body = h2_request(&f, &[&[(":method", "GET")][..], &star].concat());
    assert!(body.starts_with("400 Bad Request: the request target * is for OPTIONS only"), "{body}");
    assert_eq!(heads.lock().unwrap().len(), 0, "no refused request reached the server");
    assert_eq!(h2_request(&f, &[&[(":method", "OPTIONS")][..], &star].concat()), "ok");
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.starts_with("options * http/1.1\r\n"), "{head}");

    // HTTP/1.1 alike.
    let (status, body) = raw_http(f.listen, b"GET * HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("is for OPTIONS only"), "{body}");
    assert_eq!(raw_http(f.listen, b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").0, 200);
}

/// One request written as is; the status and body of its answer.
fn raw_http(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    conn.write_all(request).unwrap();
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw);
    parse_response(&raw).unwrap_or((0, String::from_utf8_lossy(&raw).to_string()))
}

/// A server that answers every request with `101 Switching Protocols`, and counts the
/// connections Fulcrum closed on it.
fn switcher() -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = closed.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).is_ok_and(|n| n == 1) {
                    head.push(b[0]);
                }
                let _ = c.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: tunnel\r\n\r\n");
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut rest = Vec::new();
                if c.read_to_end(&mut rest).is_ok() {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    (addr, closed)
}

/// A 101 to a request that did not ask to upgrade, or to an HTTP/2 client (which has no 101:
/// RFC 9113 section 8.6), is a 502, and the server connection is closed; an HTTP/1.1 client's
/// `Upgrade: h2c` never reaches a server, which hears a plain request.
#[test]
fn a_101_goes_only_to_an_http_1_1_client_that_asked_and_h2c_upgrades_never_pass() {
    let (server, closed) = switcher();
    let f = h2c_before(server);
    let (status, body) = raw_http(f.listen, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("did not ask to upgrade"), "{body}");
    let body = h2_request(&f, &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "a")]);
    assert!(body.starts_with("502 Bad Gateway: the server switched protocols (101) for a request that did not ask to upgrade"), "{body}");
    wait_until("both server connections closed", Duration::from_secs(10), || closed.load(std::sync::atomic::Ordering::SeqCst) == 2);
    // A WebSocket-style request that asked is switched.
    let mut conn = std::net::TcpStream::connect(f.listen).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: tunnel\r\n\r\n").unwrap();
    let mut got = [0u8; 12];
    conn.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"HTTP/1.1 101");
    drop(conn);

    // curl's h2c upgrade: the server hears a plain HTTP/1.1 request, the client a 1.1 answer.
    let (plain, heads) = head_keeper();
    let g = h2c_before(plain);
    let out = Command::new("curl").args(["-s", "--max-time", "10", "--http2", "-w", "\n%{http_version}"]).arg(format!("http://{}/up", g.listen)).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n1.1");
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(head.starts_with("get /up http/1.1\r\n") && !head.contains("upgrade") && !head.contains("http2-settings"), "{head}");
    // Raw, with another protocol beside h2c: only h2c goes.
    let (status, _) = raw_http(g.listen, b"GET /two HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n");
    assert_eq!(status, 200);
    let head = heads.lock().unwrap().pop().unwrap();
    assert!(!head.contains("upgrade") && !head.contains("http2-settings"), "{head}");
}

/// The WebSocket client over HTTP/2 (RFC 8441) of tests/websocket, on Python's h2: its JSON line.
fn h2_websocket(f: &Fulcrum, protocol: &str, messages: usize) -> serde_json::Value {
    let script = format!("{}/tests/websocket/h2_client.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .args([&script, "127.0.0.1", &f.listen.port().to_string(), "/chat", protocol, &messages.to_string()])
        .output()
        .expect("python3 with h2 (scripts/test installs it)");
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}{}", String::from_utf8_lossy(&out.stderr)))
}

/// WebSocket over HTTP/2 (RFC 8441): Fulcrum announces extended CONNECT, and a client's
/// `:protocol websocket` stream reaches an HTTP/1.1 WebSocket server (tokio-tungstenite, which
/// checks the opening handshake) as an Upgrade, then carries the frames both ways. Another
/// `:protocol` is refused with 501, and a server whose 101 does not answer the WebSocket key
/// gets the client a 502, its connection closed.
#[test]
fn a_websocket_over_http2_reaches_an_http_1_1_websocket_server() {
    let f = h2c_before(websocket_echo());
    let got = h2_websocket(&f, "websocket", 5);
    assert_eq!(got["enable_connect_protocol"], 1, "{got}");
    assert_eq!(got["status"], 200, "{got}");
    assert!(got["headers"].get("sec-websocket-accept").is_none() && got["headers"].get("upgrade").is_none(), "{got}");
    let echoed: Vec<&str> = got["echoed"].as_array().unwrap().iter().filter_map(|m| m.as_str()).collect();
    assert_eq!(echoed, (0..5).map(|i| format!("hello {i}")).collect::<Vec<_>>(), "{got}");

    let other = h2_websocket(&f, "connect-udp", 0);
    assert_eq!(other["status"], 501, "{other}");

    let (server, closed) = switcher();
    let g = h2c_before(server);
    let wrong = h2_websocket(&g, "websocket", 1);
    assert_eq!(wrong["status"], 502, "{wrong}");
    wait_until("the server connection closed", Duration::from_secs(10), || closed.load(std::sync::atomic::Ordering::SeqCst) == 1);
    assert!(g.log().contains("does not answer the WebSocket key"), "{}", g.log());
}
