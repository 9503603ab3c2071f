//! What a per-client rate table costs a request (`live::limit`): N active keys (100,000 by
//! default, client addresses), a table of twice that, and ten million checks of keys drawn
//! from them, each at its own time. Prints nanoseconds per check, the least disturbed of five
//! runs, and the table's keys.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use fulcrum::live::limit::{Counter, Key, Keyed, Rate, Table};

const CHECKS: u64 = 10_000_000;

fn main() {
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    let table = Table::new(Rate::new(50, Duration::from_secs(1), 10), 2 * n as usize);
    let keys: Vec<Key> = (0..n).map(|i| Key::network(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32)), 32, 64)).collect();
    let mut best = f64::MAX;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut now = 0u64;
    for _ in 0..5 {
        let began = Instant::now();
        for _ in 0..CHECKS {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            now += 100;
            black_box(table.check(Keyed { key: keys[(state % n) as usize], text: None }, now, 1));
        }
        best = best.min(began.elapsed().as_nanos() as f64 / CHECKS as f64);
    }
    println!("{n} active keys ({} in the table): {best:.0} ns per check", table.len());
}
