use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::*;

async fn start(index: Option<&str>, large: u64) -> (SocketAddr, CancellationToken) {
    start_with(index, large, Degrade::default()).await
}

async fn start_with(index: Option<&str>, large: u64, degrade: Degrade) -> (SocketAddr, CancellationToken) {
    let stop = CancellationToken::new();
    let args = BackendArgs { listen: "127.0.0.1:0".parse().unwrap(), name: "b7".into(), index_text: index.map(str::to_string), large_size: large, backlog: 16, degrade };
    let (addr, serving) = bind(args, stop.clone()).await.unwrap();
    tokio::spawn(serving);
    (addr, stop)
}

/// One request on its own connection; returns the raw response.
async fn raw(addr: SocketAddr, request: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    out
}

fn body(raw: &[u8]) -> &[u8] {
    let p = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    &raw[p..]
}

#[tokio::test]
async fn index_carries_target_and_the_name_by_default_or_the_given_text() {
    let (a, _s) = start(None, 10).await;
    let r = raw(a, "GET /index.html HTTP/1.0\r\n\r\n").await;
    assert_eq!(body(&r), b"<html><body>TARGET b7</body></html>");
    assert!(String::from_utf8_lossy(&r).contains("x-served-by: b7"));
    let (a, _s) = start(Some("down for maintenance"), 10).await;
    assert_eq!(body(&raw(a, "GET / HTTP/1.0\r\n\r\n").await), b"down for maintenance");
}

#[tokio::test]
async fn site_files_have_the_size_and_type_their_name_gives() {
    let (a, _s) = start(None, 10).await;
    let r = raw(a, "GET /site/img3-20480.png HTTP/1.0\r\n\r\n").await;
    assert_eq!(body(&r).len(), 20480);
    assert!(String::from_utf8_lossy(&r).contains("content-type: image/png"));
    assert!(String::from_utf8_lossy(&raw(a, "GET /site/page1-100.html HTTP/1.0\r\n\r\n").await).contains("content-type: text/html"));
    for bad in ["/site/x.html", "/site/x-12.exe", "/site/x-99999999999.jpg"] {
        assert!(String::from_utf8_lossy(&raw(a, &format!("GET {bad} HTTP/1.0\r\n\r\n")).await).starts_with("HTTP/1.0 404"), "{bad}");
    }
}

#[tokio::test]
async fn workers_bound_the_requests_served_at_once() {
    let (a, _s) = start_with(None, 10, Degrade { workers: 2, delay_ms: 50, ..Degrade::default() }).await;
    let all = futures_util::future::join_all((0..8).map(|_| raw(a, "GET /name HTTP/1.0\r\n\r\n"))).await;
    assert!(all.iter().all(|r| body(r) == b"b7\n"));
    let stats: serde_json::Value = serde_json::from_slice(body(&raw(a, "GET /stats HTTP/1.0\r\n\r\n").await)).unwrap();
    assert_eq!(stats["max_in_service"], 2, "{stats}");
}

#[tokio::test]
async fn a_request_that_waits_too_long_for_a_worker_is_answered_503() {
    // One worker held 300 ms per request, 100 ms of waiting allowed: of four at once, the first is
    // served and the others give up waiting with 503.
    let (a, _s) = start_with(None, 10, Degrade { workers: 1, queue_timeout_ms: 100, delay_ms: 300, ..Degrade::default() }).await;
    let all = futures_util::future::join_all((0..4).map(|_| raw(a, "GET /name HTTP/1.0\r\n\r\n"))).await;
    let refused = all.iter().filter(|r| String::from_utf8_lossy(r).starts_with("HTTP/1.0 503")).count();
    let served = all.iter().filter(|r| body(r) == b"b7\n").count();
    assert_eq!((served, refused), (1, 3), "{all:?}");
    let stats: serde_json::Value = serde_json::from_slice(body(&raw(a, "GET /stats HTTP/1.0\r\n\r\n").await)).unwrap();
    assert_eq!(stats["overloaded"], 3, "{stats}");
}

#[tokio::test]
async fn name_large_post_stats_and_404() {
    let (a, _s) = start(None, 300_000).await;
    assert_eq!(body(&raw(a, "GET /name HTTP/1.0\r\n\r\n").await), b"b7\n", "a line, so a terminal's prompt starts on the next");
    let large = raw(a, "GET /large HTTP/1.0\r\n\r\n").await;
    let b = body(&large);
    assert_eq!(b.len(), 300_000);
    assert!(b.iter().enumerate().all(|(i, &x)| x == routes::pattern_byte(i as u64)));
    let post = raw(a, "POST /x HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello").await;
    assert_eq!(body(&post), br#"{"name":"b7","received":5}"#);
    assert!(String::from_utf8_lossy(&raw(a, "GET /nope HTTP/1.0\r\n\r\n").await).starts_with("HTTP/1.0 404"));
    let stats: serde_json::Value = serde_json::from_slice(body(&raw(a, "GET /stats HTTP/1.0\r\n\r\n").await)).unwrap();
    assert_eq!(stats["requests"], 5);
    assert_eq!(stats["connections"], 5);
}

#[tokio::test]
async fn a_half_closed_client_still_gets_the_whole_body() {
    let (a, _s) = start(None, 5_000_000).await;
    let mut s = TcpStream::connect(a).await.unwrap();
    s.write_all(b"GET /large HTTP/1.0\r\n\r\n").await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert_eq!(body(&out).len(), 5_000_000);
}

#[tokio::test]
async fn a_taken_port_is_a_clear_error() {
    let (a, _s) = start(None, 10).await;
    let args = BackendArgs { listen: a, name: "x".into(), index_text: None, large_size: 1, backlog: 1, degrade: Degrade::default() };
    let err = bind(args, CancellationToken::new()).await.err().expect("port is taken").to_string();
    assert!(err.contains("cannot listen"), "{err}");
}

#[test]
fn degradation_flags_beyond_their_range_are_refused_not_panics() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: BackendArgs,
    }
    use clap::Parser;
    assert!(Cli::try_parse_from(["b", "--workers", "1000000", "--delay-ms", "3600000", "--cpu-us", "60000000"]).is_ok());
    for (flag, value) in
        [("--workers", "18446744073709551615"), ("--delay-ms", "18446744073709551615"), ("--jitter-ms", "3600001"), ("--slow-accept-ms", "3600001"), ("--cpu-us", "60000001")]
    {
        let e = Cli::try_parse_from(["b", flag, value]).err().unwrap_or_else(|| panic!("{flag} {value} was taken"));
        assert!(e.to_string().contains("is not in"), "{flag} {value}: {e}");
    }
}
