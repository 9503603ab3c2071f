//! `passive`: the passive-measurement paper's experiment. Three real servers, one degraded the way
//! the paper's `stress` runs degraded theirs (it accepts ten connections a second and its accept
//! queue holds one, so the kernel drops SYNs past that); Poisson arrivals over a sweep of rates;
//! the equal split (round robin) against `passive-ratio`, `least-conn` and `p2c-ewma`. Reported:
//! mean time to the response head against the rate (its Figure 5; it includes Fulcrum's connection
//! to the real server, where a dropped SYN costs a retransmission) and each server's share of the
//! traffic over time under `passive-ratio`, with the controller's own ratios (its Figure 6).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::Fulcrum;
use super::report::{Report, Summary, Table, fmt};
use super::{Ctx, served_by, service_toml};

const ALGORITHMS: [&str; 4] = ["round-robin", "passive-ratio", "least-conn", "p2c-ewma"];
const NAMES: [&str; 3] = ["fast1", "fast2", "slow"];

struct Run {
    algorithm: &'static str,
    rate: f64,
    /// Every request, the warm-up's too (Figure 6 shows the controller converging).
    samples: Vec<Sample>,
    /// Requests that started before this are left out of the measured figures.
    warm_up: Duration,
    /// The controller's ratio per server, polled each second (passive-ratio only).
    ratios: Vec<(f64, Vec<f64>)>,
}

impl Run {
    fn measured(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| s.at >= self.warm_up)
    }

    fn times(&self) -> Summary {
        Summary::of(&self.measured().filter(|s| s.ok()).map(|s| s.first_byte.as_secs_f64() * 1e3).collect::<Vec<_>>())
    }

    /// Share of the answered requests per server, in NAMES order.
    fn shares(&self) -> Vec<f64> {
        let by = served_by(self.measured());
        let total = by.values().sum::<usize>().max(1) as f64;
        NAMES.iter().map(|n| by.get(*n).copied().unwrap_or(0) as f64 / total).collect()
    }

    fn requests(&self) -> usize {
        self.measured().count()
    }

    fn failed(&self) -> usize {
        self.measured().filter(|s| !s.ok()).count()
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    // Each run warms up first, so the figures are the controllers' steady state, as the paper's.
    let (rates, warm_up, seconds, window): (&[f64], u64, u64, usize) = if ctx.quick { (&[20.0, 40.0], 2, 4, 5) } else { (&[10.0, 20.0, 40.0, 60.0, 80.0], 8, 16, 10) };
    let degraded = ["--backlog", "1", "--slow-accept-ms", "100"].map(String::from);
    let backends = [
        super::procs::Backend::start(NAMES[0], &[])?,
        super::procs::Backend::start(NAMES[1], &[])?,
        super::procs::Backend::start(NAMES[2], &degraded)?,
    ];
    let servers: Vec<_> = backends.iter().map(|b| (b.addr, 1)).collect();
    let extra = format!("[service.passive]\nslot = \"1s\"\nwindow_slots = {window}\nmin_samples = 10\n[service.p2c]\ndecay = \"5s\"\n");
    let sources = client::sources(10);
    let pb = ctx.progress(Some((ALGORITHMS.len() * rates.len()) as u64), "passive");
    let mut runs = Vec::new();
    for &rate in rates {
        for (i, algorithm) in ALGORITHMS.iter().enumerate() {
            pb.set_message(format!("passive {algorithm} at {rate}/s"));
            let f = Fulcrum::start(&ctx.work, &format!("passive-{algorithm}-{rate}"), &service_toml("tcp", algorithm, &servers, &extra))?;
            let stop = CancellationToken::new();
            let poller = poll_ratios(f.admin, stop.clone());
            let seed = ctx.seed * 100 + i as u64;
            let samples = client::poisson(rate, Duration::from_secs(warm_up + seconds), seed, Traffic { sources: &sources, target: f.listen, link: &Link::get("/name"), timeout: Duration::from_secs(20) }, 2000).await;
            stop.cancel();
            let ratios = if *algorithm == "passive-ratio" { poller.await.unwrap_or_default() } else { Vec::new() };
            drop(f);
            let r = Run { algorithm, rate, samples, warm_up: Duration::from_secs(warm_up), ratios };
            pb.suspend(|| eprintln!("passive {algorithm} at {rate}/s: mean {:.1} ms, shares {:?}, {} failed", r.times().mean, r.shares().iter().map(|s| (s * 100.0).round()).collect::<Vec<_>>(), r.failed()));
            runs.push(r);
            pb.inc(1);
            // Let the degraded server's queue drain, so runs do not inherit each other's backlog.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    pb.finish_and_clear();
    Ok(report(ctx, rates, warm_up, seconds, window, &runs))
}

/// The controller's ratio of each server, read from the admin API each second.
fn poll_ratios(admin: std::net::SocketAddr, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<(f64, Vec<f64>)>> {
    tokio::spawn(async move {
        let start = std::time::Instant::now();
        let mut out = Vec::new();
        loop {
            if let Ok(body) = client::fetch(admin, "/api/stats").await
                && let Ok(v) = serde_json::from_slice::<Value>(&body)
            {
                let ratios = v["services"][0]["servers"].as_array().map(|a| a.iter().map(|s| s["algorithm"]["ratio"].as_f64().unwrap_or(f64::NAN)).collect()).unwrap_or_default();
                out.push((start.elapsed().as_secs_f64(), ratios));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.cancelled() => return out,
            }
        }
    })
}

fn report(ctx: &Ctx, rates: &[f64], warm_up: u64, seconds: u64, window: usize, runs: &[Run]) -> Report {
    let mut r = Report::new("passive", ctx.quick, ctx.seed);
    r.section(
        "Setup",
        &format!(
            "Three real servers: fast1 and fast2 as they come, slow with `--backlog 1 --slow-accept-ms 100` (ten accepts a second, \
             one connection queued; the kernel drops SYNs past that). Poisson arrivals of one GET each on a new connection, from \
             127.0.0.11 to .20 in turn, for {warm_up} s of warm-up and {seconds} s measured per rate and algorithm (a fresh Fulcrum each time). `passive-ratio` with T = 1 s and m = {window} slots. Time is measured \
             to the response head and includes Fulcrum's connection to the real server."
        ),
    );
    let mut t = Table::new(std::iter::once("Rate (req/s)".to_string()).chain(ALGORITHMS.iter().map(|a| format!("{a}: mean / p99 ms"))));
    for &rate in rates {
        t.row(std::iter::once(fmt(rate)).chain(ALGORITHMS.iter().map(|a| {
            let x = find(runs, a, rate).times();
            format!("{} / {}", fmt(x.mean), fmt(x.p99))
        })));
    }
    r.section("Mean time to the response head against the request rate (the paper's Figure 5)", &t.markdown());

    let mut t = Table::new(["Rate (req/s)", "Algorithm", "Requests", "Failed", "fast1 %", "fast2 %", "slow %"]);
    for &rate in rates {
        for a in ALGORITHMS {
            let x = find(runs, a, rate);
            let s = x.shares();
            t.row([fmt(rate), a.to_string(), x.requests().to_string(), x.failed().to_string(), format!("{:.1}", s[0] * 100.0), format!("{:.1}", s[1] * 100.0), format!("{:.1}", s[2] * 100.0)]);
        }
    }
    r.section("Each server's share of the requests", &t.markdown());

    let fig5: Vec<Series> = ALGORITHMS.iter().map(|a| Series { name: a.to_string(), points: rates.iter().map(|&rate| (rate, find(runs, a, rate).times().mean)).collect() }).collect();
    if let Ok(svg) = plot::lines("Mean time to the response head", "requests per second", "ms", &fig5) {
        r.plot("time-vs-rate.svg", "Mean time against the request rate (Figure 5)", svg);
    }
    let top = rates.last().copied().unwrap_or(0.0);
    let pr = find(runs, "passive-ratio", top);
    let mut fig6: Vec<Series> = NAMES.iter().enumerate().map(|(i, n)| Series { name: format!("{n} share"), points: share_per_second(&pr.samples, i) }).collect();
    for (i, n) in NAMES.iter().enumerate() {
        fig6.push(Series { name: format!("{n} ratio"), points: pr.ratios.iter().filter_map(|(t, v)| v.get(i).filter(|x| x.is_finite()).map(|x| (*t, *x))).collect() });
    }
    if let Ok(svg) = plot::lines(&format!("passive-ratio at {top} req/s: traffic share and controller ratio"), "seconds", "fraction of requests", &fig6) {
        r.plot("ratio-over-time.svg", "Each server's traffic ratio over time (Figure 6)", svg);
    }

    let equal = find(runs, "round-robin", top).times().mean;
    let reading = ALGORITHMS
        .iter()
        .skip(1)
        .map(|a| {
            let mean = find(runs, a, top).times().mean;
            format!("{a} {} ms ({:.2}x)", fmt(mean), mean / equal.max(1e-9))
        })
        .collect::<Vec<_>>()
        .join(", ");
    r.section("Reading", &format!("At {top} req/s the equal split's mean is {} ms; {reading}.", fmt(equal)));

    let s = pr.shares();
    r.check(
        "passive-ratio gives the degraded server the smallest share",
        s[2] < s[0] && s[2] < s[1],
        format!("at {top} req/s: fast1 {:.1}%, fast2 {:.1}%, slow {:.1}%", s[0] * 100.0, s[1] * 100.0, s[2] * 100.0),
    );

    for x in runs {
        r.figure(format!("{}.{}.mean_ms", x.algorithm, x.rate), x.times().mean);
        r.figure(format!("{}.{}.slow_share", x.algorithm, x.rate), x.shares()[2]);
    }
    r.raw = json!({
        "rates": rates,
        "warm_up_secs": warm_up,
        "measured_secs": seconds,
        "window_slots": window,
        "runs": runs.iter().map(|x| json!({
            "algorithm": x.algorithm,
            "rate": x.rate,
            "time_to_head_ms": x.times(),
            "requests": x.requests(),
            "failed": x.failed(),
            "shares": NAMES.iter().zip(x.shares()).map(|(n, s)| (n.to_string(), s)).collect::<BTreeMap<_, _>>(),
            "controller_ratios": x.ratios,
        })).collect::<Vec<_>>(),
    });
    r
}

fn find<'a>(runs: &'a [Run], algorithm: &str, rate: f64) -> &'a Run {
    runs.iter().find(|x| x.algorithm == algorithm && x.rate == rate).expect("every algorithm ran at every rate")
}

/// Server `i`'s share of the answered requests in each second of the run.
fn share_per_second(samples: &[Sample], i: usize) -> Vec<(f64, f64)> {
    let mut per: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.ok()) {
        let e = per.entry(s.at.as_secs()).or_default();
        e.1 += 1;
        if s.server.as_deref() == Some(NAMES[i]) {
            e.0 += 1;
        }
    }
    per.into_iter().map(|(t, (mine, all))| (t as f64 + 0.5, mine as f64 / all as f64)).collect()
}
