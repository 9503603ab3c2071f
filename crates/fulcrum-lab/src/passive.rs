//! `passive`: the passive-measurement paper's experiment. Three real servers (each request costs
//! them 1 ms of CPU), one degraded in two ways, each a scenario of its own: as the paper did,
//! with CPU and I/O hogs (`stress`) inside the server's own CPU quota; and by throttled accepts
//! (ten a second, one connection queued, so the kernel drops SYNs past that), which makes R rise
//! by construction and so favours `passive-ratio`. Poisson arrivals over a sweep of rates; the
//! equal split as the paper ran it (plain DNAT: round robin that never redispatches) and round
//! robin with redispatch, against `passive-ratio`, `least-conn` and `p2c-ewma`. Reported per
//! degradation: mean time to the response head against the rate (its Figure 5; it includes
//! Fulcrum's connection to the real server, where a dropped SYN costs a retransmission) and each
//! server's share of the traffic over time under `passive-ratio`, with the controller's own
//! ratios (its Figure 6). Then its Figure 2, R against the connection time ([`syn_time`]).
//!
//! Every configuration runs `--repeat` times; within one repeat every configuration sees the same
//! Poisson arrivals (one seed per repeat), and figures are means over the repeats with their 95%
//! confidence intervals. A ranking is written only where the paired t-test (a repeat's arrivals
//! pair its configurations) separates the two after Holm's correction over the report.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Means, Series};
use super::procs::Fulcrum;
use super::report::{Report, Summary, Table, fmt};
use super::stats::{Design, Estimate, paired, verdict};
use super::{Ctx, served_by, service_toml, syn_time};

/// Each configuration: its name in the report, the algorithm, and extra service lines.
const CONFIGS: [(&str, &str, &str); 6] = [
    ("equal-split", "round-robin", "retries = 0\n"),
    ("round-robin", "round-robin", ""),
    ("passive-ratio", "passive-ratio", ""),
    ("least-conn", "least-conn", ""),
    ("p2c-ewma", "p2c-ewma", ""),
    (KERNEL, "passive-ratio", ""),
];
/// The paper's own system: the passive-ratio controller steering an nftables balancer in the
/// lab's kernel (`mode = "kernel"`), no user-space hop; isolated servers only.
const KERNEL: &str = "kernel-passive-ratio";
const NAMES: [&str; 3] = ["fast1", "fast2", "slow"];
/// The baseline every other configuration is compared with.
const EQUAL: &str = "equal-split";
/// What each request costs every real server: 1 ms of CPU, so a quota of a fifth of a core
/// serves 200 requests a second and a server that shares its quota with hogs far fewer.
const SERVER_COST: [&str; 2] = ["--cpu-us", "1000"];
/// The hogs beside the degraded server, inside its quota: one spinning on the CPU, one calling
/// sync() (the paper's `stress` loaded CPU and I/O).
const STRESS: [&str; 4] = ["--cpu", "1", "--io", "1"];

/// How the slow server is made slow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Degradation {
    /// `stress` inside its quota, as the paper did: it answers late, but the kernel still
    /// completes every handshake, so R need not rise.
    Stress,
    /// Ten accepts a second and one connection queued: dropped SYNs, which R counts by
    /// construction.
    Throttled,
}

const DEGRADATIONS: [Degradation; 2] = [Degradation::Stress, Degradation::Throttled];

impl Degradation {
    fn name(self) -> &'static str {
        match self {
            Degradation::Stress => "stress",
            Degradation::Throttled => "throttled-accepts",
        }
    }

    /// The request rates swept: around the degraded server's capacity under equal split.
    fn rates(self, quick: bool) -> &'static [f64] {
        match (self, quick) {
            (Degradation::Stress, true) => &[60.0, 180.0],
            (Degradation::Stress, false) => &[20.0, 60.0, 100.0, 140.0, 180.0],
            (Degradation::Throttled, true) => &[20.0, 40.0],
            (Degradation::Throttled, false) => &[10.0, 20.0, 40.0, 60.0, 80.0],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Degradation::Stress => {
                "slow shares its CPU quota with `stress --cpu 1 --io 1` (a CPU hog and an I/O hog), the paper's way: it gets about a third \
                 of its quota, answers late, and its kernel still completes every handshake"
            }
            Degradation::Throttled => {
                "slow runs with `--backlog 1 --slow-accept-ms 100` (ten accepts a second, one connection queued; the kernel drops SYNs \
                 past that): R rises with the load by construction, which favours passive-ratio"
            }
        }
    }
}

struct Run {
    degradation: Degradation,
    /// The configuration's name (`CONFIGS`).
    algorithm: &'static str,
    rate: f64,
    repeat: usize,
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
    // `--paper`: its T = 20 s and m = 10 (a window of 200 s), a window of warm-up and two measured.
    let (warm_up, seconds, window, slot): (u64, u64, usize, u64) = match (ctx.quick, ctx.paper) {
        (true, _) => (2, 4, 5, 1),
        (_, true) => (200, 400, 10, 20),
        _ => (8, 16, 10, 1),
    };
    // The stress degradation shares a quota with the hogs; without isolated servers there is
    // none to share, and the hogs would load the whole machine.
    let degradations: Vec<Degradation> = DEGRADATIONS.into_iter().filter(|d| *d != Degradation::Stress || super::host::isolation().is_some()).collect();
    // `--paper`: the paper's two, its equal split and its controller.
    let isolated = super::host::isolation().is_some();
    let configs: Vec<(&'static str, &'static str, &'static str)> =
        CONFIGS.into_iter().filter(|c| (!ctx.paper || [EQUAL, "passive-ratio", KERNEL].contains(&c.0)) && (isolated || c.0 != KERNEL)).collect();
    let plan = Plan {
        degradations: &degradations,
        configs: &configs,
        quick: ctx.quick,
        paper: ctx.paper,
        warm_up: Duration::from_secs(warm_up),
        seconds: Duration::from_secs(seconds),
        window,
        slot,
    };
    let steps: usize = degradations.iter().map(|d| d.rates(ctx.quick).len()).sum();
    let pb = ctx.progress(Some((configs.len() * steps * ctx.repeat) as u64), "passive");
    let mut runs = Vec::new();
    // Repeats outermost, so a drift of the machine over the run spreads over every configuration;
    // `--lanes` of them at a time, each with servers of its own.
    for first in (0..ctx.repeat).step_by(ctx.lanes) {
        let lanes = (first..ctx.repeat.min(first + ctx.lanes)).map(|repeat| one_repeat(ctx, &plan, repeat, &pb));
        runs.extend(futures_util::future::try_join_all(lanes).await?.into_iter().flatten());
    }
    pb.finish_and_clear();
    let figure2 = syn_time::run(ctx, &degraded()).await.map_err(|e| format!("{e:#}"));
    Ok(report(ctx, &plan, &runs, &figure2))
}

/// The degraded server's options: ten accepts a second, one connection queued.
fn degraded() -> [String; 4] {
    ["--backlog", "1", "--slow-accept-ms", "100"].map(String::from)
}

/// What every configuration of a repeat runs.
struct Plan<'a> {
    degradations: &'a [Degradation],
    /// The configurations run (`CONFIGS`, or the paper's two with `--paper`).
    configs: &'a [(&'static str, &'static str, &'static str)],
    quick: bool,
    paper: bool,
    warm_up: Duration,
    seconds: Duration,
    /// The controller's window, in slots.
    window: usize,
    /// A slot's length in seconds (the paper's T).
    slot: u64,
}

impl Plan<'_> {
    /// What each connection fetches: a small page, or the paper's 100 KB file with `--paper`.
    fn link(&self) -> Link {
        Link::get(if self.paper { "/site/file-100000.html" } else { "/name" })
    }
}

/// Every degradation, configuration and rate once, against three real servers of this repeat's
/// own per degradation.
async fn one_repeat(ctx: &Ctx, plan: &Plan<'_>, repeat: usize, pb: &indicatif::ProgressBar) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for &degradation in plan.degradations {
        runs.extend(one_degradation(ctx, plan, degradation, repeat, pb).await?);
    }
    Ok(runs)
}

async fn one_degradation(ctx: &Ctx, plan: &Plan<'_>, degradation: Degradation, repeat: usize, pb: &indicatif::ProgressBar) -> anyhow::Result<Vec<Run>> {
    let cost: Vec<String> = SERVER_COST.iter().map(|s| s.to_string()).collect();
    let slow_options: Vec<String> = match degradation {
        Degradation::Stress => cost.clone(),
        Degradation::Throttled => cost.iter().cloned().chain(degraded()).collect(),
    };
    let mut slow = super::procs::backend(NAMES[2], &slow_options)?;
    if degradation == Degradation::Stress {
        slow.stress(&STRESS)?;
    }
    let backends = [super::procs::backend(NAMES[0], &cost)?, super::procs::backend(NAMES[1], &cost)?, slow];
    let servers: Vec<_> = backends.iter().map(|b| (b.addr, 1)).collect();
    let extra = format!("[service.passive]\nslot = \"{}s\"\nwindow_slots = {}\nmin_samples = 10\n[service.p2c]\ndecay = \"5s\"\n", plan.slot, plan.window);
    let sources = client::sources(10);
    let seed = ctx.seed * 1000 + repeat as u64;
    let mut runs = Vec::new();
    let d = degradation.name();
    for &rate in degradation.rates(plan.quick) {
        for &(algorithm, balancer, lines) in plan.configs {
            pb.set_message(format!("passive {d} {algorithm} at {rate}/s, repeat {}", repeat + 1));
            let tag = format!("passive-{d}-{algorithm}-{rate}-{repeat}");
            let (f, clients) = if algorithm == KERNEL {
                let (vip, clients) = super::host::kernel_addresses()?;
                // Lanes share the lab's namespace: each its own port and table (named by the service).
                let vip = std::net::SocketAddr::from((vip, 8000 + repeat as u16));
                (Fulcrum::start_kernel(&ctx.work, &tag, &kernel_toml(&format!("lab{repeat}"), vip, &servers, plan), vip)?, clients)
            } else {
                (Fulcrum::start(&ctx.work, &tag, &service_toml("tcp", balancer, &servers, &format!("{lines}{extra}")))?, sources.clone())
            };
            let stop = CancellationToken::new();
            let poller = poll_ratios(f.admin, stop.clone());
            let samples = client::poisson(
                rate,
                plan.warm_up + plan.seconds,
                seed,
                Traffic { sources: &clients, target: f.listen, link: &plan.link(), timeout: Duration::from_secs(20) },
                2000,
            )
            .await;
            stop.cancel();
            let ratios = if algorithm == "passive-ratio" { poller.await.unwrap_or_default() } else { Vec::new() };
            drop(f);
            let r = Run { degradation, algorithm, rate, repeat, samples, warm_up: plan.warm_up, ratios };
            pb.suspend(|| {
                eprintln!(
                    "passive {d} {algorithm} at {rate}/s, repeat {}: mean {:.1} ms, shares {:?}, {} failed",
                    repeat + 1,
                    r.times().mean,
                    r.shares().iter().map(|s| (s * 100.0).round()).collect::<Vec<_>>(),
                    r.failed()
                )
            });
            runs.push(r);
            pb.inc(1);
            // Let the degraded server's queue drain, so runs do not inherit each other's backlog.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Ok(runs)
}

/// The kernel configuration's service: `passive-ratio` steering nftables on `vip`, the same
/// window as the proxy's.
fn kernel_toml(name: &str, vip: std::net::SocketAddr, servers: &[(std::net::SocketAddr, u32)], plan: &Plan<'_>) -> String {
    let service = format!(
        "[[service]]\nname = \"{name}\"\nlisten = \"{vip}\"\nmode = \"kernel\"\nalgorithm = \"passive-ratio\"\n\
         [service.passive]\nslot = \"{}s\"\nwindow_slots = {}\nmin_samples = 10\n[service.health]\nkind = \"none\"\n",
        plan.slot, plan.window
    );
    service + &super::servers_toml(servers)
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

/// One configuration at one rate over its repeats.
struct Cell<'a> {
    runs: Vec<&'a Run>,
}

impl Cell<'_> {
    /// The mean time to the response head, one value per repeat.
    fn mean_ms(&self) -> Estimate {
        Estimate::of(&self.runs.iter().map(|r| r.times().mean).collect::<Vec<_>>())
    }

    fn p99_ms(&self) -> Estimate {
        Estimate::of(&self.runs.iter().map(|r| r.times().p99).collect::<Vec<_>>())
    }

    /// Server `i`'s share of the answered requests, one value per repeat.
    fn share(&self, i: usize) -> Estimate {
        Estimate::of(&self.runs.iter().map(|r| r.shares()[i]).collect::<Vec<_>>())
    }

    fn requests(&self) -> usize {
        self.runs.iter().map(|r| r.requests()).sum()
    }

    fn failed(&self) -> usize {
        self.runs.iter().map(|r| r.failed()).sum()
    }
}

fn cell<'a>(runs: &'a [Run], degradation: Degradation, algorithm: &str, rate: f64) -> Cell<'a> {
    Cell { runs: runs.iter().filter(|x| x.degradation == degradation && x.algorithm == algorithm && x.rate == rate).collect() }
}

fn report(ctx: &Ctx, plan: &Plan<'_>, runs: &[Run], figure2: &Result<Vec<syn_time::Point>, String>) -> Report {
    let (warm_up, seconds, window, slot) = (plan.warm_up.as_secs(), plan.seconds.as_secs(), plan.window, plan.slot);
    let mut r = Report::new("passive", ctx.quick, ctx.seed);
    for d in plan.degradations {
        r.condition(&format!("request rates, {} (req/s)", d.name()), d.rates(ctx.quick).iter().map(|x| fmt(*x)).collect::<Vec<_>>().join(", "));
    }
    r.condition("warm-up and measured time per rate and configuration", format!("{warm_up} s and {seconds} s"));
    r.condition("passive-ratio window", format!("T = {slot} s, m = {window} slots"));
    r.condition("each connection fetches", if plan.paper { "a 100,000-byte file (the paper's)" } else { "a small page" });
    r.condition("real server cost per request", "1 ms of CPU (on the thread's CPU clock)");
    r.condition("repeats", ctx.repeat);
    if plan.paper {
        let hours = |rate: f64| 1e5 / rate * 15.0 / 3600.0;
        r.deviation(&format!(
            "{warm_up} s of warm-up and {seconds} s measured per rate and configuration, with {} repeats, where the paper measured 10^5 connections per rate 15 times: at 10 req/s that alone would take {:.0} hours per configuration here.",
            ctx.repeat,
            hours(10.0)
        ));
    } else {
        r.deviation("T = 1 s windows where the paper used T = 20 s, and seconds per rate where it measured 10^5 connections 15 times: a run of the paper's length would take days here (`--paper` runs its T, m and file size for minutes per rate).");
    }
    r.deviation("The throttled-accepts degradation drops SYNs the way R counts them and so favours R by construction; it runs beside the paper's own `stress` degradation and is reported apart.");
    if !plan.degradations.contains(&Degradation::Stress) {
        r.deviation("The stress degradation did not run: it needs isolated real servers (a quota to share with the hogs), and this run had --shared.");
    }
    if plan.configs.iter().any(|c| c.0 == KERNEL) {
        r.deviation(&format!("Fulcrum's proxy configurations count its own connects to each server; only `{KERNEL}` is the paper's kernel balancer (nftables where it had iptables), counting clients' SYNs and servers' SYN-ACKs passively."));
    } else {
        r.deviation("Fulcrum is a user-space proxy that counts its own connects to each server; the paper's balancer was the kernel's (iptables), counting clients' SYNs and servers' SYN-ACKs passively. The kernel configuration needs isolated servers and did not run.");
    }
    if !plan.paper {
        r.deviation("One GET of a small page per connection, where the paper's clients fetched 100 KB files.");
    }
    r.deviation(super::host::deviation());
    let names: Vec<&str> = plan.configs.iter().map(|c| c.0).collect();
    r.section(
        "Setup",
        &format!(
            "Three real servers, each request costing them 1 ms of CPU (`--cpu-us 1000`): fast1 and fast2 as they come, slow degraded \
             one of two ways, each reported in a part of its own:\n\n{}\n\nPoisson arrivals of one GET each on a new connection, from \
             127.0.0.11 to .20 in turn, for {warm_up} s of warm-up and {seconds} s measured per rate and configuration (a fresh Fulcrum each time). \
             `equal-split` is the paper's baseline, plain DNAT: round robin that never redispatches (`retries = 0`); `round-robin` \
             redispatches a failed connect as Fulcrum does by default. `passive-ratio` with T = {slot} s and m = {window} slots. `{KERNEL}` \
             (isolated servers only) is the paper's own system: the same controller steering an nftables balancer in the lab's \
             kernel (`mode = \"kernel\"`: numgen DNAT of a virtual address, SYNs and SYN-ACKs counted by the kernel), its clients \
             10.63.255.11 to .20, no user-space hop. Time is measured to the response head and includes the connection to the real \
             server (through Fulcrum, or straight through the kernel's DNAT). Each configuration ran {} times (seeds {} to {}, one \
             per repeat, the same arrivals for every configuration of a repeat); figures are the mean over the repeats ± the half width \
             of its 95% confidence interval.{}",
            plan.degradations.iter().map(|d| format!("- **{}**: {}.", d.name(), d.describe())).collect::<Vec<_>>().join("\n"),
            ctx.repeat,
            ctx.seed * 1000,
            ctx.seed * 1000 + ctx.repeat as u64 - 1,
            if ctx.lanes > 1 { format!(" {} repeats ran at a time (`--lanes`), each with servers and a Fulcrum of its own.", ctx.lanes) } else { String::new() },
        ),
    );
    let pct = |e: Estimate| Estimate::of(&e.values.iter().map(|v| v * 100.0).collect::<Vec<_>>()).show(1);
    for &d in plan.degradations {
        let (dn, rates) = (d.name(), d.rates(ctx.quick));
        let mut t = Table::new(std::iter::once("Rate (req/s)".to_string()).chain(names.iter().map(|a| format!("{a}: mean ms"))));
        for &rate in rates {
            t.row(std::iter::once(fmt(rate)).chain(names.iter().map(|a| cell(runs, d, a, rate).mean_ms().show(1))));
        }
        r.section(&format!("{dn}: mean time to the response head against the request rate (the paper's Figure 5)"), &t.markdown());

        let mut t = Table::new(["Rate (req/s)", "Configuration", "Requests", "Failed", "p99 ms", "fast1 %", "fast2 %", "slow %"]);
        for &rate in rates {
            for a in &names {
                let x = cell(runs, d, a, rate);
                t.row([fmt(rate), a.to_string(), x.requests().to_string(), x.failed().to_string(), x.p99_ms().show(0), pct(x.share(0)), pct(x.share(1)), pct(x.share(2))]);
            }
        }
        r.section(&format!("{dn}: each server's share of the requests (requests and failures summed over the repeats)"), &t.markdown());

        let fig5: Vec<Means> = names.iter().map(|a| Means { name: a.to_string(), points: rates.iter().map(|&rate| (rate, cell(runs, d, a, rate).mean_ms())).collect() }).collect();
        if let Ok(svg) = plot::means(&format!("{dn}: mean time to the response head (mean over the repeats, 95% intervals)"), "requests per second", "ms", &fig5) {
            r.plot(&format!("time-vs-rate-{dn}.svg"), &format!("{dn}: mean time against the request rate (Figure 5)"), svg);
        }
        let top = rates.last().copied().unwrap_or(0.0);
        let pr = cell(runs, d, "passive-ratio", top);
        if let Some(first) = pr.runs.first() {
            let mut fig6: Vec<Series> = NAMES.iter().enumerate().map(|(i, n)| Series { name: format!("{n} share"), points: share_per_second(&first.samples, i) }).collect();
            for (i, n) in NAMES.iter().enumerate() {
                fig6.push(Series { name: format!("{n} ratio"), points: first.ratios.iter().filter_map(|(t, v)| v.get(i).filter(|x| x.is_finite()).map(|x| (*t, *x))).collect() });
            }
            if let Ok(svg) =
                plot::lines(&format!("{dn}: passive-ratio at {top} req/s (first repeat): traffic share and controller ratio"), "seconds", "fraction of requests", &fig6)
            {
                r.plot(&format!("ratio-over-time-{dn}.svg"), &format!("{dn}: each server's traffic ratio over time (Figure 6)"), svg);
            }
        }

        // The reading: each configuration against the paper's equal split, at every rate, ranked
        // only where the test separates them.
        let mut reading = String::new();
        for &rate in rates {
            let equal = cell(runs, d, EQUAL, rate).mean_ms();
            let lines: Vec<String> = names
                .iter()
                .filter(|a| **a != EQUAL)
                .map(|a| format!("- {}", r.tests.verdict(a, &cell(runs, d, a, rate).mean_ms(), EQUAL, &equal, Design::Paired, "faster", " ms")))
                .collect();
            reading.push_str(&format!("At {} req/s (equal split {} ms):\n\n{}\n\n", fmt(rate), equal.show(1), lines.join("\n")));
        }
        r.section(
            &format!("{dn}: reading (mean time to the response head; paired t-test over the repeats, each repeat's arrivals being the same for every configuration; Holm's correction over the report)"),
            reading.trim_end(),
        );

        // The checks: what Fulcrum must do whatever the degradation.
        let (prt, eqt) = (pr.mean_ms(), cell(runs, d, EQUAL, top).mean_ms());
        let slower = paired(&eqt, &prt);
        r.check(
            &format!("{dn}: passive-ratio is not slower than the equal split under the heaviest load"),
            !(slower.significant && slower.difference > 0.0),
            format!(
                "at {top} req/s: passive-ratio {} ms, equal split {} ms; {}",
                prt.show(1),
                eqt.show(1),
                verdict("passive-ratio", &prt, EQUAL, &eqt, Design::Paired, "faster", " ms")
            ),
        );
        let (slow, fast1, fast2) = (pr.share(2), pr.share(0), pr.share(1));
        let shares = format!("at {top} req/s: fast1 {}%, fast2 {}%, slow {}%", pct(fast1.clone()), pct(fast2.clone()), pct(slow.clone()));
        if d == Degradation::Throttled {
            // Dropped SYNs are what R measures: the controller must see them.
            let below = |fast: &Estimate| slow.mean < fast.mean && (paired(&slow, fast).significant || slow.n() < 2);
            r.check("throttled-accepts: passive-ratio gives the degraded server the smallest share", below(&fast1) && below(&fast2), shares);
        } else {
            r.condition(&format!("{dn}: passive-ratio's shares under the heaviest load"), shares);
        }
        for &rate in rates {
            for a in &names {
                let x = cell(runs, d, a, rate);
                r.estimate(format!("{dn}.{a}.{rate}.mean_ms"), &x.mean_ms());
                r.estimate(format!("{dn}.{a}.{rate}.slow_share"), &x.share(2));
            }
        }
    }

    syn_time::report(&mut r, ctx, figure2);

    r.raw = json!({
        "degradations": plan.degradations.iter().map(|d| json!({ "name": d.name(), "rates": d.rates(ctx.quick) })).collect::<Vec<_>>(),
        "warm_up_secs": warm_up,
        "measured_secs": seconds,
        "window_slots": window,
        "repeats": ctx.repeat,
        "lanes": ctx.lanes,
        "figure2": syn_time::raw(figure2),
        "estimates": plan.degradations.iter().flat_map(|&d| d.rates(ctx.quick).iter().flat_map(move |&rate| plan.configs.iter().map(move |c| (d, c.0, rate)))).map(|(d, a, rate)| {
            let x = cell(runs, d, a, rate);
            json!({ "degradation": d.name(), "algorithm": a, "rate": rate, "mean_ms": x.mean_ms(), "p99_ms": x.p99_ms(), "slow_share": x.share(2) })
        }).collect::<Vec<_>>(),
        "runs": runs.iter().map(|x| json!({
            "degradation": x.degradation.name(),
            "algorithm": x.algorithm,
            "rate": x.rate,
            "repeat": x.repeat,
            "time_to_head_ms": x.times(),
            "requests": x.requests(),
            "failed": x.failed(),
            "shares": NAMES.iter().zip(x.shares()).map(|(n, s)| (n.to_string(), s)).collect::<BTreeMap<_, _>>(),
            "controller_ratios": x.ratios,
        })).collect::<Vec<_>>(),
    });
    r
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
