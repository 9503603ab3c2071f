//! How long a Maglev table takes to build (`balance::maglev`, the source, URI and header hashes'
//! table) over 4, 64, 1,024 and 10,000 servers of weight 1, or the sizes given: the least of
//! five builds, in ms, and the table's bytes. The build runs on the balancer update thread when
//! a pool's servers or weights change, never on a connection's task; `bench/scale` prints it
//! beside the per-request CPU curve. Prints one JSON line last.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use fulcrum::balance::maglev::{Maglev, TABLE_SIZE};

fn main() {
    let mut sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![4, 64, 1024, 10_000];
    }
    let mut out = Vec::new();
    for n in sizes {
        let keys: Vec<String> = (0..n).map(|i| format!("127.1.{}.{}:80", i / 250, i % 250 + 1)).collect();
        let servers: Vec<(&str, u32)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                black_box(Maglev::build(black_box(&servers)));
                t.elapsed().as_secs_f64() * 1000.0
            })
            .fold(f64::INFINITY, f64::min);
        println!("{n} servers: {best:.2} ms per build ({TABLE_SIZE} slots)");
        out.push(format!("{{\"servers\": {n}, \"build_ms\": {best:.3}, \"slots\": {TABLE_SIZE}}}"));
    }
    println!("[{}]", out.join(", "));
}
