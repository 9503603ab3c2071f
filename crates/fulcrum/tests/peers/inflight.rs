//! What is in flight on a server, read from `GET /api/services/S/servers/ADDR/inflight` while a
//! real client holds a slow request (the real server's `/slow/MS`) or a TCP connection open
//! through Fulcrum: the entry names the client's address and port, its age and, for HTTP, the
//! request line; it is gone once the request or connection ends.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::*;

fn inflight(f: &Fulcrum, service: &str, server: &str) -> serde_json::Value {
    let (code, answer) = f.api("GET", &format!("/api/services/{service}/servers/{server}/inflight"), None);
    assert_eq!(code, 200, "{answer}");
    answer
}

/// The entry of `client` among a server's in-flight ones.
fn entry_of(answer: &serde_json::Value, client: std::net::SocketAddr) -> Option<serde_json::Value> {
    answer["inflight"].as_array()?.iter().find(|e| e["client"] == client.to_string()).cloned()
}

#[test]
fn a_slow_request_shows_with_its_client_and_request_line_until_it_ends() {
    let backend = Backend::start("slow");
    let f = Fulcrum::start(&format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[[service.server]]\naddress = \"{}\"\n", backend.addr));
    f.wait_all_up();
    let server = backend.addr.to_string();
    let mut client = TcpStream::connect(f.listen).unwrap();
    let me = client.local_addr().unwrap();
    client.write_all(b"GET /slow/1500?x=1 HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n").unwrap();
    let mut seen = serde_json::Value::Null;
    wait_until("the request in flight", Duration::from_secs(3), || {
        seen = inflight(&f, "web", &server);
        entry_of(&seen, me).is_some()
    });
    let e = entry_of(&seen, me).unwrap();
    assert_eq!(e["request"], "GET /slow/1500?x=1 HTTP/1.1", "{seen}");
    assert!(e["age_ms"].as_u64().unwrap() < 1500, "{seen}");
    assert_eq!((seen["current"].as_u64(), seen["shown_at_most"].as_u64()), (Some(1), Some(64)), "{seen}");
    // A moment later it is older.
    std::thread::sleep(Duration::from_millis(300));
    let later = entry_of(&inflight(&f, "web", &server), me).expect("still in flight");
    assert!(later["age_ms"].as_u64() > e["age_ms"].as_u64(), "{later} after {e}");
    let mut answer = String::new();
    client.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    wait_until("the request gone", Duration::from_secs(3), || inflight(&f, "web", &server)["inflight"].as_array().is_some_and(|a| a.is_empty()));
    let (code, _) = f.api("GET", "/api/services/web/servers/127.0.0.1:9/inflight", None);
    assert_eq!(code, 404);
}

#[test]
fn an_open_tcp_connection_shows_with_its_client_until_it_closes() {
    let n = Nginx::start("s1", "TARGET");
    let f = Fulcrum::start(&format!("[[service]]\nname = \"raw\"\nlisten = \"{{LISTEN}}\"\nmode = \"tcp\"\n[[service.server]]\naddress = \"{}\"\n", n.addr));
    f.wait_all_up();
    let server = n.addr.to_string();
    let held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(f.listen).unwrap()).collect();
    let clients: Vec<_> = held.iter().map(|s| s.local_addr().unwrap()).collect();
    let mut seen = serde_json::Value::Null;
    wait_until("three connections in flight", Duration::from_secs(3), || {
        seen = inflight(&f, "raw", &server);
        clients.iter().all(|c| entry_of(&seen, *c).is_some())
    });
    let e = entry_of(&seen, clients[0]).unwrap();
    assert!(e.get("request").is_none(), "a TCP connection has no request line: {e}");
    drop(held);
    wait_until("the connections gone", Duration::from_secs(3), || inflight(&f, "raw", &server)["inflight"].as_array().is_some_and(|a| a.is_empty()));
}
