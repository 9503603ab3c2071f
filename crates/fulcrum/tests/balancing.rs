//! Algorithms against four real nginx servers, counted by the server name each reply carries.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::IpAddr;
use std::time::Duration;

use support::*;

#[test]
fn round_robin_gives_each_of_four_servers_100_of_400_requests() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let f = Fulcrum::start(&service("round-robin", "", HTTP_CHECK, &pool));
    f.wait_all_up();
    let counts = tally(f.listen, 400);
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(counts.values().all(|&n| n == 100), "{counts:?}");
}

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

fn weighted(algorithm: &str) {
    let servers = four_servers();
    let pool = [(&servers[0], "weight = 3"), (&servers[1], "weight = 1")];
    let f = Fulcrum::start(&service(algorithm, "", HTTP_CHECK, &pool));
    f.wait_all_up();
    let counts = tally(f.listen, 800);
    let (a, b) = (counts["s1"] as f64, counts["s2"] as f64);
    let share = a / (a + b);
    assert!((share - 0.75).abs() <= 0.02, "{algorithm}: s1 share {share}, {counts:?}");
}

#[test]
fn round_robin_weights_3_to_1_within_2_percent() {
    weighted("round-robin");
}

#[test]
fn static_rr_weights_3_to_1_within_2_percent() {
    weighted("static-rr");
}

#[test]
fn random_weights_3_to_1_roughly() {
    let servers = four_servers();
    let pool = [(&servers[0], "weight = 3"), (&servers[1], "weight = 1")];
    let f = Fulcrum::start(&service("random", "", HTTP_CHECK, &pool));
    let counts = tally(f.listen, 800);
    let share = counts["s1"] as f64 / 800.0;
    // Binomial(800, 0.75) has sd 1.5%: 5 sd either way.
    assert!((share - 0.75).abs() <= 0.08, "s1 share {share}, {counts:?}");
}

#[test]
fn least_conn_sends_new_connections_to_the_server_with_fewest_open() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let f = Fulcrum::start(&service("least-conn", "", HTTP_CHECK, &pool));
    // Hold six idle connections: least-conn spreads them 2,2,1,1 (never 3 on one server).
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(std::net::TcpStream::connect(f.listen).unwrap());
        wait_until("connection accounted", Duration::from_secs(5), || current_total(&f) == held.len() as u64);
    }
    let current = currents(&f);
    assert!(current.values().all(|&c| c == 1 || c == 2), "{current:?}");
    // Every new short request now goes to one of the two servers with one open connection.
    let light: BTreeSet<String> = current.iter().filter(|(_, c)| **c == 1).map(|(a, _)| a.clone()).collect();
    let names: BTreeMap<String, String> = servers.iter().map(|s| (s.addr.to_string(), s.name.clone())).collect();
    for _ in 0..10 {
        // The previous request's connection counts as open until Fulcrum has seen its close.
        wait_until("the previous request's connection closed", Duration::from_secs(5), || current_total(&f) == held.len() as u64);
        let (_, who) = http_get(f.listen, "/name");
        let addr = names.iter().find(|(_, n)| **n == who).map(|(a, _)| a.clone()).unwrap();
        assert!(light.contains(&addr), "request went to {who}, a server with 2 open connections ({current:?})");
    }
    drop(held);
}

fn currents(f: &Fulcrum) -> BTreeMap<String, u64> {
    let s = f.stats();
    s["services"][0]["servers"].as_array().unwrap().iter().map(|v| (v["address"].as_str().unwrap().to_string(), v["current"].as_u64().unwrap())).collect()
}

fn current_total(f: &Fulcrum) -> u64 {
    currents(f).values().sum()
}

#[test]
fn source_hash_keeps_every_client_ip_on_one_server() {
    let servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let f = Fulcrum::start(&service("source-hash", "", HTTP_CHECK, &pool));
    let mut used = BTreeSet::new();
    for host in 11..=20 {
        let ip: IpAddr = format!("127.0.0.{host}").parse().unwrap();
        let mut seen = BTreeSet::new();
        for _ in 0..20 {
            let (status, who) = http_get_from(Some(ip), f.listen, "/name").unwrap();
            assert_eq!(status, 200);
            seen.insert(who);
        }
        assert_eq!(seen.len(), 1, "client {ip} saw {seen:?}");
        used.extend(seen);
    }
    assert!(used.len() >= 2, "ten clients should not all hash to one server: {used:?}");
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
