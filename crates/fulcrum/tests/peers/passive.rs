//! The passive-measurement scenario: three real servers, one degraded by a tiny backlog and a slow
//! accept loop so the kernel drops SYNs; bounded Poisson load; `passive-ratio`, round robin and
//! `p2c-ewma` compared in one run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;
use rand::{Rng, SeedableRng};

/// Connections per second offered, and for how long.
const RATE: f64 = 40.0;
const SECONDS: f64 = 12.0;

struct Scenario {
    servers: Vec<Backend>,
}

impl Scenario {
    fn new() -> Scenario {
        Scenario {
            servers: vec![
                Backend::start("fast1"),
                Backend::start("fast2"),
                // Accepts 10 connections a second with room for two in its queue: at a third of
                // 40/s it overflows, and the kernel drops SYNs.
                Backend::start_with("slow", &["--backlog", "1", "--slow-accept-ms", "100"]),
            ],
        }
    }

    fn config(&self, algorithm: &str) -> String {
        let mut s = format!(
            "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nalgorithm = \"{algorithm}\"\nconnect_timeout = \"4s\"\nfailure_limit = 0\n\
             [service.health]\nkind = \"none\"\n[service.passive]\nslot = \"1s\"\nwindow_slots = 5\nmin_samples = 10\n[service.p2c]\ndecay = \"5s\"\n"
        );
        for b in &self.servers {
            s.push_str(&format!("[[service.server]]\naddress = \"{}\"\n", b.addr));
        }
        s
    }

    fn slow(&self) -> String {
        self.servers[2].addr.to_string()
    }
}

/// Bounded Poisson load: about RATE x SECONDS connections, each one request, each in its own
/// thread with its own timeouts. Returns how many got a response.
fn poisson_load(f: &Fulcrum, seed: u64, mut during: impl FnMut(usize)) -> usize {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let ok = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut threads = Vec::new();
    let mut next = 0.0;
    let mut step = 0;
    while next < SECONDS && threads.len() < (RATE * SECONDS * 2.0) as usize {
        let wait = Duration::from_secs_f64(next).saturating_sub(started.elapsed());
        std::thread::sleep(wait);
        let (ok, addr) = (ok.clone(), f.listen);
        threads.push(std::thread::spawn(move || {
            if matches!(http_get_from(None, addr, "/name"), Ok((200, _))) {
                ok.fetch_add(1, Ordering::Relaxed);
            }
        }));
        next += -(1.0 - rng.random::<f64>()).ln() / RATE;
        if started.elapsed().as_secs() as usize > step {
            step = started.elapsed().as_secs() as usize;
            during(step);
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    ok.load(Ordering::Relaxed)
}

/// Mean connect time of established connects over all servers, in ms, from Fulcrum's stats.
fn mean_connect_ms(f: &Fulcrum) -> f64 {
    let s = f.stats();
    let servers = s["services"][0]["servers"].as_array().unwrap();
    let (mut total, mut n) = (0.0, 0.0);
    for v in servers {
        let acked = v["syn_acked"].as_f64().unwrap();
        if acked > 0.0 {
            total += v["connect_ms"].as_f64().unwrap() * acked;
            n += acked;
        }
    }
    total / n
}

fn totals(f: &Fulcrum) -> Vec<(String, u64)> {
    let s = f.stats();
    s["services"][0]["servers"].as_array().unwrap().iter().map(|v| (v["address"].as_str().unwrap().to_string(), v["total"].as_u64().unwrap())).collect()
}

#[test]
fn passive_ratio_starves_the_degraded_server_and_beats_round_robin_on_connect_time() {
    let sc = Scenario::new();

    // Round robin first, as the equal split the paper compares against.
    let rr = Fulcrum::start(&sc.config("round-robin"));
    let served_rr = poisson_load(&rr, 7, |_| {});
    let rr_connect = mean_connect_ms(&rr);
    drop(rr);

    // Let the slow server's queue drain before the second run.
    std::thread::sleep(Duration::from_secs(2));
    let pr = Fulcrum::start(&sc.config("passive-ratio"));
    let slow = sc.slow();
    let mut ratio_by_step = Vec::new();
    let served_pr = poisson_load(&pr, 7, |step| {
        let v = pr.server_stats(&slow);
        ratio_by_step.push((step, v["algorithm"]["ratio"].as_f64().unwrap_or(1.0), v["algorithm"]["r"].as_f64()));
    });
    let pr_connect = mean_connect_ms(&pr);
    let v = pr.server_stats(&slow);
    eprintln!("round robin: {served_rr} served, mean connect {rr_connect:.1} ms; passive-ratio: {served_pr} served, mean connect {pr_connect:.1} ms");
    eprintln!("slow server under passive-ratio: {v}");
    eprintln!("ratio of the slow server by second: {ratio_by_step:?}");

    let (n_s, n_a) = (v["syn_sent"].as_u64().unwrap(), v["syn_acked"].as_u64().unwrap());
    assert!(n_s > n_a, "the degraded server's SYN retransmissions are seen: N_S {n_s}, N_A {n_a}");
    let ratio = v["algorithm"]["ratio"].as_f64().unwrap();
    assert!(ratio < 0.2, "ratio of the degraded server {ratio} after {} steps", ratio_by_step.len());
    let fell_at = ratio_by_step.iter().find(|(_, r, _)| *r < 0.2).map(|(s, _, _)| *s);
    assert!(fell_at.is_some_and(|s| s <= 10), "the ratio fell below 0.2 at second {fell_at:?}: {ratio_by_step:?}");
    assert!(pr_connect < rr_connect, "mean connect time: passive-ratio {pr_connect:.1} ms vs round robin {rr_connect:.1} ms");
    let t = totals(&pr);
    let slow_total = t.iter().find(|(a, _)| *a == slow).unwrap().1;
    assert!(t.iter().all(|(a, n)| *a == slow || *n > slow_total), "{t:?}");

    // The same figures in /metrics.
    let (status, text) = http_get(pr.admin, "/metrics");
    assert_eq!(status, 200);
    let metric = |name: &str| -> f64 {
        let prefix = format!("{name}{{service=\"web\",server=\"{slow}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix} in:\n{text}"));
        line[prefix.len()..].parse().unwrap()
    };
    assert!(metric("fulcrum_server_traffic_ratio") < 0.2);
    assert!(metric("fulcrum_server_syn_sent_total") > metric("fulcrum_server_syn_acked_total"));
    assert!(text.contains("# TYPE fulcrum_server_syn_sent_total counter"));
}

#[test]
fn p2c_ewma_sends_the_degraded_server_the_least_traffic() {
    let sc = Scenario::new();
    let f = Fulcrum::start(&sc.config("p2c-ewma"));
    let served = poisson_load(&f, 11, |_| {});
    let t = totals(&f);
    eprintln!("p2c-ewma: {served} served, per server {t:?}");
    let slow = sc.slow();
    let slow_total = t.iter().find(|(a, _)| *a == slow).unwrap().1;
    assert!(t.iter().all(|(a, n)| *a == slow || *n > slow_total), "{t:?}");
    assert!(served as f64 >= RATE * SECONDS * 0.8, "served {served}");
}
