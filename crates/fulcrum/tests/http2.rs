//! HTTP/2 abuse limits (`proxy/http/h2.rs`), with frames written by hand so the test controls
//! exactly what a hostile client sends; and routing and affinity over HTTP/2, with curl.

mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use support::*;

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
        let out = Command::new("curl").args(["-s", "--max-time", "10", "--http2-prior-knowledge", "-w", "\n%{http_version}"]).args(extra).arg(format!("http://{}/name", f.listen)).output().unwrap();
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
