//! Balancing against four real nginx servers where the peer matters: curl as the client, two
//! Fulcrum processes agreeing on source hashing, and nginx keep-alive. The algorithms themselves
//! are tested in process, in `tests/fast/balancing.rs`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::time::Duration;

use crate::support::*;

#[test]
fn curl_through_fulcrum_reaches_every_server() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let f = Fulcrum::start(&service("round-robin", "", HTTP_CHECK, &pool));
    let mut seen = BTreeSet::new();
    for _ in 0..8 {
        let out = std::process::Command::new("curl").args(["-sS", "--max-time", "5", &format!("http://{}/name", f.listen)]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        seen.insert(String::from_utf8(out.stdout).unwrap());
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
}

#[test]
fn two_fulcrum_processes_agree_on_source_hash() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let a = Fulcrum::start(&service("source-hash", "", HTTP_CHECK, &pool));
    let b = Fulcrum::start(&service("source-hash", "", HTTP_CHECK, &pool));
    for host in 11..=20 {
        let ip: IpAddr = format!("127.0.0.{host}").parse().unwrap();
        let via_a = http_get_from(Some(ip), a.listen, "/name").unwrap().1;
        let via_b = http_get_from(Some(ip), b.listen, "/name").unwrap().1;
        assert_eq!(via_a, via_b, "client {ip}");
    }
}

#[test]
fn keep_alive_requests_stay_on_one_connection_and_server() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let f = Fulcrum::start(&service("round-robin", "", HTTP_CHECK, &pool));
    let mut s = std::net::TcpStream::connect(f.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut names = BTreeSet::new();
    for _ in 0..5 {
        s.write_all(b"GET /name HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        names.insert(text.rsplit("\r\n\r\n").next().unwrap().to_string());
    }
    assert_eq!(names.len(), 1, "{names:?}");
}
