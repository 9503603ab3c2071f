//! The L4 data path: half close, bulk integrity through splice, idle timeouts.

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::*;

fn one_server(extra: &str) -> (Nginx, Fulcrum) {
    let s = Nginx::start("s1", "TARGET");
    let f = Fulcrum::start(&service("round-robin", extra, HTTP_CHECK, &[(&s, "")]));
    (s, f)
}

/// A service over one `fulcrum backend`, which serves half-closed connections to the end.
fn one_backend(extra: &str) -> (Backend, Fulcrum) {
    let b = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\n{extra}\n[service.health]\n{HTTP_CHECK}\n[[service.server]]\naddress = \"{}\"\n",
        b.addr
    ));
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
