//! What compressing responses costs: Fulcrum's encoder for each coding (its level and window,
//! `proxy::http::compress::Encoder`) over N MB of generated HTML and JSON (32 by default) in
//! 16 KiB frames, as a server sends them. Prints, per coding: CPU milliseconds per MB of input
//! (the thread's own CPU time), the ratio, and the memory one response's encoder holds (glibc's
//! count, so zstd's C allocations are in it); then the same with a flush after every frame (a
//! server that pauses between frames, the worst case of streaming). `bench/compression [N]` runs it in a release build.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]
// glibc's allocation counters and the thread CPU clock are FFI.
#![allow(unsafe_code)]

use fulcrum::config::Coding;
use fulcrum::proxy::http::compress::Encoder;

/// Bytes the C allocator has handed out and not taken back, mapped blocks included: Rust's
/// allocations (the system allocator here) and the C libraries' (zstd's) alike.
fn heap() -> usize {
    // SAFETY: mallinfo2 only reads glibc's counters.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

/// This thread's CPU time in nanoseconds.
fn cpu_ns() -> u128 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// N MB of what sites send: a catalogue page and an API's JSON, varied so that it does not
/// compress to nothing.
fn corpus(mb: usize) -> Vec<u8> {
    let mut text = String::with_capacity(mb << 20);
    let mut i: u64 = 0;
    while text.len() < mb << 20 {
        i += 1;
        let price = i.wrapping_mul(2_654_435_761) % 100_000;
        if i.is_multiple_of(2) {
            text.push_str(&format!("<li class=\"item\" data-id=\"{i}\"><a href=\"/p/{i}\">Product {i}</a> <span>{}.{:02} EUR</span></li>\n", price / 100, price % 100));
        } else {
            text.push_str(&format!(
                "{{\"id\":{i},\"sku\":\"S{:08x}\",\"price\":{price},\"stock\":{},\"tags\":[\"t{}\",\"t{}\"]}},\n",
                i.wrapping_mul(40503),
                price % 17,
                price % 13,
                i % 7
            ));
        }
    }
    text.into_bytes()
}

/// CPU ms per MB, the ratio, and the bytes the encoder held once a megabyte had gone through it
/// (its tables are all in place by then; what it returns per frame is counted out).
fn run(coding: Coding, corpus: &[u8], flush_each: bool) -> (f64, f64, usize) {
    let before = heap();
    let mut held = 0;
    let began = cpu_ns();
    let mut encoder = Encoder::new(coding);
    let mut out = 0usize;
    for (i, frame) in corpus.chunks(16 * 1024).enumerate() {
        out += encoder.encode(frame).expect("encode").len();
        if flush_each {
            out += encoder.flush().expect("flush").len();
        }
        if i == 63 {
            held = heap().saturating_sub(before);
        }
    }
    out += encoder.finish().expect("finish").len();
    let cpu = (cpu_ns() - began) as f64 / 1e6;
    drop(encoder);
    let mb = corpus.len() as f64 / f64::from(1 << 20);
    (cpu / mb, corpus.len() as f64 / out as f64, held)
}

fn main() {
    let mb: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(32);
    let corpus = corpus(mb);
    println!("compressing {mb} MB of HTML and JSON in 16 KiB frames, one response");
    println!("{:<6} {:>12} {:>7} {:>14}   {:>12} {:>7}", "coding", "CPU ms/MB", "ratio", "memory", "flushed: ms/MB", "ratio");
    for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
        let (ms, ratio, peak) = run(coding, &corpus, false);
        let (flushed_ms, flushed_ratio, _) = run(coding, &corpus, true);
        println!("{:<6} {ms:>12.2} {ratio:>7.2} {:>10} KiB   {flushed_ms:>12.2} {flushed_ratio:>7.2}", coding.token(), peak / 1024);
    }
}
