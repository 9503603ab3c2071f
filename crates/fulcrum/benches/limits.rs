//! What a per-client table costs (`live::limit`), with N keys (100,000 by default, or the number
//! given):
//!
//! - memory: the bytes a table allocates per key once it holds the N keys (its `max_keys` well
//!   above, so nothing is evicted), and once it is full at `max_keys` = N (its shards' Vec and
//!   hash map grown to what a full table holds), for the local rate table with network keys and
//!   with 16-byte text keys (a header's value, kept as its label), the `connections` table with
//!   one connection open per key, and the Redis-shared rate table (never started: no Redis).
//!   Counted by a global allocator that adds up the bytes asked for and not yet freed; the
//!   `fulcrum` binary's jemalloc serves these sizes within a few percent of that;
//! - time: ten million checks of the local rate table, keys drawn from the N, each at its own
//!   time, in a table of 2N: nanoseconds per check, the least disturbed of five runs.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]
// A global allocator is unsafe to implement: this one counts and hands each call to the system's.
#![allow(unsafe_code)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fulcrum::live::limit::concurrent::Held;
use fulcrum::live::limit::gcra::BYTES_PER_KEY;
use fulcrum::live::limit::{Concurrent, Counter, Key, Keyed, Rate, Shared, Table};

const CHECKS: u64 = 10_000_000;

#[path = "support/counting.rs"]
mod counting;
use counting::live;

fn network(i: u64) -> Key {
    Key::network(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32)), 32, 64)
}

/// A 16-byte text, distinct for each `i`, as a header's value would be.
fn text(i: u64) -> [u8; 16] {
    let mut t = *b"client-000000000";
    let mut v = i;
    for b in t[7..].iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
    t
}

/// What a table costs a key: `fill` makes the table with `max_keys`, offers it keys and
/// returns it with the bytes it holds besides the table (held guards) and the keys it holds.
fn per_key<T>(what: &str, max_keys: usize, fill: impl FnOnce(usize) -> (T, usize, usize)) {
    let before = live();
    let (table, besides, keys) = fill(max_keys);
    let bytes = live() - before - besides as isize;
    drop(table);
    println!("{what}: {:.0} bytes per key ({keys} keys, max_keys {max_keys})", bytes as f64 / keys as f64);
}

/// A rate table offered `offered` keys (`text`: 16-byte text keys, else networks).
fn gcra(max_keys: usize, offered: u64, text_keys: bool) -> (Table, usize, usize) {
    let table = Table::new(Rate::new(50, Duration::from_secs(1), 10), max_keys);
    for i in 0..offered {
        let t = text(i);
        let key = if text_keys { Keyed { key: Key::text(&t), text: Some(&t) } } else { Keyed { key: network(i), text: None } };
        table.check(key, i + 1, 1);
    }
    let keys = table.len();
    (table, 0, keys)
}

/// A `connections` table with one connection open for each of `offered` keys (a full table
/// lets the rest through uncounted); the guards are kept, and their Vec is not the table's.
fn concurrent(max_keys: usize, offered: u64) -> ((Arc<Concurrent>, Vec<Held>), usize, usize) {
    let table = Arc::new(Concurrent::new(10, max_keys));
    let mut held = Vec::with_capacity(offered as usize);
    for i in 0..offered {
        if let Ok(Some(h)) = table.open(Keyed { key: network(i), text: None }) {
            held.push(h);
        }
    }
    let besides = held.capacity() * size_of::<Held>();
    let keys = table.len();
    assert_eq!(keys, held.len());
    ((table, held), besides, keys)
}

/// A Redis-shared rate table, never started (no Redis), offered `offered` network keys.
fn shared(max_keys: usize, offered: u64) -> (Arc<Shared>, usize, usize) {
    let table = Shared::new("bench", 1_000_000, Duration::from_secs(1), max_keys, false);
    for i in 0..offered {
        table.check(Keyed { key: network(i), text: None }, i + 1, 1);
    }
    let keys = table.len();
    (table, 0, keys)
}

fn main() {
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    let roomy = 10 * n as usize;
    // A full table: offered three times its keys, so every shard has filled up and evicted.
    let full = n as usize;
    per_key("gcra table, network keys", roomy, |m| gcra(m, n, false));
    per_key("gcra table, network keys, full", full, |m| gcra(m, 3 * n, false));
    per_key("gcra table, 16-byte text keys", roomy, |m| gcra(m, n, true));
    per_key("gcra table, 16-byte text keys, full", full, |m| gcra(m, 3 * n, true));
    per_key("concurrent table, one connection per key", roomy, |m| concurrent(m, n));
    per_key("concurrent table, one connection per key, full", full, |m| concurrent(m, 3 * n));
    per_key("shared table, network keys", roomy, |m| shared(m, n));
    per_key("shared table, network keys, full", full, |m| shared(m, 3 * n));
    println!("gcra::BYTES_PER_KEY: {BYTES_PER_KEY}");

    let table = Table::new(Rate::new(50, Duration::from_secs(1), 10), 2 * n as usize);
    let keys: Vec<Key> = (0..n).map(network).collect();
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
