//! The algorithms through the whole data path, in process: real servers counted by the name
//! each reply carries.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::support::fast::Fast;
use crate::support::*;

/// Every server with its default settings.
fn equal(servers: &[SocketAddr]) -> Vec<(SocketAddr, &'static str)> {
    servers.iter().map(|s| (*s, "")).collect()
}

#[test]
fn round_robin_gives_each_of_four_servers_100_of_400_requests() {
    let f = Fast::start(4, |s| service_over("round-robin", "", HTTP_CHECK, &equal(s)));
    f.wait_all_up();
    let counts = tally(f.listen, 400);
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(counts.values().all(|&n| n == 100), "{counts:?}");
}

fn weighted(algorithm: &str) {
    let f = Fast::start(2, |s| service_over(algorithm, "", HTTP_CHECK, &[(s[0], "weight = 3"), (s[1], "weight = 1")]));
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
    let f = Fast::start(2, |s| service_over("random", "", HTTP_CHECK, &[(s[0], "weight = 3"), (s[1], "weight = 1")]));
    let counts = tally(f.listen, 800);
    let share = counts["s1"] as f64 / 800.0;
    // Binomial(800, 0.75) has sd 1.5%: 5 sd either way.
    assert!((share - 0.75).abs() <= 0.08, "s1 share {share}, {counts:?}");
}

#[test]
fn least_conn_sends_new_connections_to_the_server_with_fewest_open() {
    let f = Fast::start(4, |s| service_over("least-conn", "", HTTP_CHECK, &equal(s)));
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
    let names: BTreeMap<String, String> = f.servers.iter().enumerate().map(|(i, a)| (a.to_string(), format!("s{}", i + 1))).collect();
    for _ in 0..10 {
        // The previous request's connection counts as open until Fulcrum has seen its close.
        wait_until("the previous request's connection closed", Duration::from_secs(5), || current_total(&f) == held.len() as u64);
        let (_, who) = http_get(f.listen, "/name");
        let addr = names.iter().find(|(_, n)| **n == who.trim_end()).map(|(a, _)| a.clone()).unwrap();
        assert!(light.contains(&addr), "request went to {who}, a server with 2 open connections ({current:?})");
    }
    drop(held);
}

fn currents(f: &Fast) -> BTreeMap<String, u64> {
    let s = f.stats();
    s["services"][0]["servers"].as_array().unwrap().iter().map(|v| (v["address"].as_str().unwrap().to_string(), v["current"].as_u64().unwrap())).collect()
}

fn current_total(f: &Fast) -> u64 {
    currents(f).values().sum()
}

#[test]
fn source_hash_keeps_every_client_ip_on_one_server() {
    let f = Fast::start(4, |s| service_over("source-hash", "", HTTP_CHECK, &equal(s)));
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
