//! What a route's `client_file` costs a request: a set of N random networks (100,000 by default;
//! IPv4 from /16 to /32 and IPv6 /32 to /64), then a million lookups of random addresses, half of
//! them inside. Prints the build time and the time per lookup. `bench/lists [N]` runs it in a
//! release build.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use fulcrum::config::{Network, NetworkSet};

/// xorshift64*: the same numbers every run, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn main() {
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut kept = Vec::with_capacity(n);
    let networks: Vec<Network> = (0..n)
        .map(|i| {
            let text = if i % 4 == 3 {
                let a = Ipv6Addr::from(u128::from(rng.next()) << 64 | u128::from(rng.next()));
                format!("{a}/{}", 32 + rng.next() % 33)
            } else {
                let a = Ipv4Addr::from(rng.next() as u32);
                format!("{a}/{}", 16 + rng.next() % 17)
            };
            let net: Network = text.parse().expect("a network");
            kept.push(text.split('/').next().unwrap_or_default().parse::<IpAddr>().expect("an address"));
            net
        })
        .collect();
    let built = Instant::now();
    let set = NetworkSet::new(networks);
    let build_ms = built.elapsed().as_secs_f64() * 1e3;
    const LOOKUPS: usize = 1_000_000;
    let probes: Vec<IpAddr> = (0..LOOKUPS).map(|i| if i % 2 == 0 { kept[(rng.next() % n as u64) as usize] } else { IpAddr::V4(Ipv4Addr::from(rng.next() as u32)) }).collect();
    let started = Instant::now();
    let mut inside = 0usize;
    for ip in &probes {
        inside += usize::from(set.contains(black_box(*ip)));
    }
    let ns = started.elapsed().as_secs_f64() * 1e9 / LOOKUPS as f64;
    println!("client_file of {n} networks ({} merged ranges): built in {build_ms:.1} ms; {LOOKUPS} lookups, {inside} inside, {ns:.0} ns each", set.ranges());
}
