//! `java-slb`: the Java TCP load balancer paper's experiment. Four identical real servers serve a
//! generated website; ten clients (127.0.0.11 to .20) browse their own fixed list of pages and
//! images over and over, once per algorithm: the paper's four first, then Fulcrum's others. Per
//! algorithm: each client's mean response time (Table 1), Fulcrum's CPU and peak memory (Table 2,
//! Figures 4 and 5), each real server's requests, CPU and memory with the spread across them, and
//! the rank of the algorithms by each measure (Table 8).

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::client::{self, Browser, Until};
use super::plot::{self, Series};
use super::procs::{Fulcrum, Usage};
use super::report::{Report, Summary, Table, fmt};
use super::ftp::FtpRun;
use super::{Ctx, ftp, sample_usage, served_by, service_toml, start_backends, site};

const ALGORITHMS: [&str; 7] = ["round-robin", "source-hash", "least-conn", "random", "static-rr", "passive-ratio", "p2c-ewma"];
const SERVERS: usize = 4;
const CLIENTS: usize = 10;

/// What one algorithm's run measured.
struct Run {
    algorithm: &'static str,
    /// Per client: mean response time (ms), requests, failures, servers seen.
    clients: Vec<(f64, usize, usize, usize)>,
    /// Per real server (rs1..rs4): requests, CPU seconds, peak memory KiB.
    servers: Vec<(usize, f64, u64)>,
    fulcrum: Usage,
    fulcrum_cpu: f64,
    seconds: f64,
    response: Summary,
    /// Fulcrum over time: (s, CPU % of one core, RSS MiB).
    timeline: Vec<(f64, f64, f64)>,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let (site_bytes, pages, until) = if ctx.quick { (4 << 20, 3, Until::Requests(60)) } else { (150 << 20, 10, Until::Elapsed(Duration::from_secs(60))) };
    let site = site::generate(site_bytes, ctx.seed);
    let browsers: Vec<Browser> = client::sources(CLIENTS)
        .into_iter()
        .enumerate()
        .map(|(i, source)| Browser { source, links: site::links_for_client(&site, pages, ctx.seed * 1000 + i as u64) })
        .collect();
    let mut runs = Vec::new();
    for algorithm in ALGORITHMS {
        let len = match until {
            Until::Requests(n) => Some((n * CLIENTS) as u64),
            Until::Elapsed(_) => None,
        };
        let pb = ctx.progress(len, &format!("java-slb {algorithm}"));
        let r = run_one(ctx, algorithm, &browsers, until, &pb).await?;
        pb.finish_and_clear();
        eprintln!("java-slb {algorithm}: mean response {:.1} ms, {} requests", r.response.mean, r.response.n);
        runs.push(r);
    }
    let ftp = ftp::run(ctx).await.map_err(|e| format!("{e:#}"));
    if let Err(e) = &ftp {
        eprintln!("java-slb: the FTP half did not run: {e}");
    }
    Ok(report(ctx, site_bytes, pages, &runs, &ftp))
}

async fn run_one(ctx: &Ctx, algorithm: &'static str, browsers: &[Browser], until: Until, pb: &indicatif::ProgressBar) -> anyhow::Result<Run> {
    // Fresh real servers per algorithm, so each one's peak memory belongs to this run.
    let backends = start_backends("rs", SERVERS, &[])?;
    let servers: Vec<_> = backends.iter().map(|b| (b.addr, 1)).collect();
    let f = Fulcrum::start(&ctx.work, &format!("java-slb-{algorithm}"), &service_toml("tcp", algorithm, &servers, ""))?;
    let pids: Vec<u32> = std::iter::once(f.proc.pid()).chain(backends.iter().map(|b| b.proc.pid())).collect();
    let before: Vec<Usage> = backends.iter().map(|b| b.proc.usage()).collect();
    let fulcrum_before = f.proc.usage();
    let stop = CancellationToken::new();
    let sampler = sample_usage(pids, Duration::from_millis(if ctx.quick { 100 } else { 1000 }), stop.clone());
    let started = std::time::Instant::now();
    let samples = client::browse(browsers, f.listen, until, Duration::from_secs(30), pb).await;
    let seconds = started.elapsed().as_secs_f64();
    stop.cancel();
    let usage = sampler.await?;
    let fulcrum = f.proc.usage();
    let per_server = served_by(samples.iter().flatten());
    let servers = backends
        .iter()
        .zip(&before)
        .map(|(b, u0)| {
            let u = b.proc.usage();
            (per_server.get(&b.proc.name).copied().unwrap_or(0), u.cpu_secs - u0.cpu_secs, u.peak_rss_kib)
        })
        .collect();
    let clients = samples
        .iter()
        .map(|c| {
            let ok: Vec<f64> = c.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
            (Summary::of(&ok).mean, c.len(), c.len() - ok.len(), served_by(c).len())
        })
        .collect();
    let all: Vec<f64> = samples.iter().flatten().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
    let timeline = usage
        .windows(2)
        .map(|w| {
            let dt = (w[1].0 - w[0].0).max(1e-3);
            (w[1].0, (w[1].1[0].cpu_secs - w[0].1[0].cpu_secs) / dt * 100.0, w[1].1[0].rss_kib as f64 / 1024.0)
        })
        .collect();
    Ok(Run { algorithm, clients, servers, fulcrum, fulcrum_cpu: fulcrum.cpu_secs - fulcrum_before.cpu_secs, seconds, response: Summary::of(&all), timeline })
}

fn report(ctx: &Ctx, site_bytes: u64, pages: usize, runs: &[Run], ftp: &Result<Vec<FtpRun>, String>) -> Report {
    let mut r = Report::new("java-slb", ctx.quick, ctx.seed);
    let how = if ctx.quick { "60 requests per client" } else { "60 s per algorithm" };
    r.section(
        "Setup",
        &format!(
            "Four real servers (`fulcrum backend`), a generated site of {} MiB (pages of 2 to 40 KiB, each with 2 to 8 images, \
             most under 30 KiB, one in twenty up to 3 MiB), ten clients from 127.0.0.11 to 127.0.0.20, each browsing {pages} pages \
             and their images over and over, one new connection per request; Fulcrum in TCP mode; {how}.",
            site_bytes >> 20
        ),
    );

    // Table 1: mean response time per client.
    let mut t = Table::new(std::iter::once("Client".to_string()).chain(runs.iter().map(|x| x.algorithm.to_string())));
    for c in 0..CLIENTS {
        t.row(std::iter::once(client_label(c)).chain(runs.iter().map(|x| fmt(x.clients[c].0))));
    }
    t.row(std::iter::once("**Algorithm average**".to_string()).chain(runs.iter().map(|x| format!("**{}**", fmt(x.response.mean)))));
    r.section("Table 1. HTTP service response time (ms, mean per request)", &t.markdown());

    // Table 2: Fulcrum's own use.
    let mut t = Table::new(["Algorithm", "Requests", "Requests/s", "Failed", "Fulcrum CPU (s)", "Fulcrum CPU (% of a core)", "Fulcrum peak memory (KiB)"]);
    for x in runs {
        let failed: usize = x.clients.iter().map(|c| c.2).sum();
        t.row([
            x.algorithm.to_string(),
            x.response.n.to_string(),
            fmt(x.response.n as f64 / x.seconds),
            failed.to_string(),
            fmt(x.fulcrum_cpu),
            fmt(x.fulcrum_cpu / x.seconds * 100.0),
            x.fulcrum.peak_rss_kib.to_string(),
        ]);
    }
    r.section("Table 2. Fulcrum's CPU and maximum memory", &t.markdown());

    // Tables 3 to 6 in one: the real servers.
    let mut t = Table::new(["Algorithm", "Requests rs1 / rs2 / rs3 / rs4", "Std dev of requests", "CPU s rs1 / rs2 / rs3 / rs4", "Peak memory MiB rs1 / rs2 / rs3 / rs4"]);
    for x in runs {
        let req: Vec<f64> = x.servers.iter().map(|s| s.0 as f64).collect();
        t.row([
            x.algorithm.to_string(),
            x.servers.iter().map(|s| s.0.to_string()).collect::<Vec<_>>().join(" / "),
            fmt(Summary::of(&req).std),
            x.servers.iter().map(|s| fmt(s.1)).collect::<Vec<_>>().join(" / "),
            x.servers.iter().map(|s| format!("{:.1}", s.2 as f64 / 1024.0)).collect::<Vec<_>>().join(" / "),
        ]);
    }
    r.section("Tables 3 to 6. The real servers", &t.markdown());

    // Table 8: the rank of the algorithms by each measure, lowest first.
    type Measure = fn(&Run) -> f64;
    let measures: [(&str, Measure); 6] = [
        ("Client response time (ms)", |x| x.response.mean),
        ("Fulcrum CPU per request (µs)", |x| x.fulcrum_cpu * 1e6 / x.response.n.max(1) as f64),
        ("Fulcrum peak memory (KiB)", |x| x.fulcrum.peak_rss_kib as f64),
        ("Real servers' CPU s, std dev", |x| Summary::of(&x.servers.iter().map(|s| s.1).collect::<Vec<_>>()).std),
        ("Real servers' peak memory, sum (KiB)", |x| x.servers.iter().map(|s| s.2 as f64).sum()),
        ("Requests per server, std dev", |x| Summary::of(&x.servers.iter().map(|s| s.0 as f64).collect::<Vec<_>>()).std),
    ];
    let ordinals = ["1st", "2nd", "3rd", "4th", "5th", "6th", "7th"];
    let mut t = Table::new(std::iter::once("Measure (lower is better)").chain(ordinals.iter().copied().take(runs.len())));
    for (name, f) in measures {
        let mut order: Vec<&Run> = runs.iter().collect();
        order.sort_by(|a, b| f(a).total_cmp(&f(b)));
        t.row(std::iter::once(name.to_string()).chain(order.iter().map(|x| format!("{} ({})", x.algorithm, fmt(f(x))))));
    }
    r.section("Table 8. Algorithms ranked (HTTP)", &t.markdown());
    ftp_tables(&mut r, ftp);

    // Plots: Figures 4 and 5, and Table 1 as a chart.
    let series = |f: fn(&(f64, f64, f64)) -> f64| -> Vec<Series> { runs.iter().map(|x| Series { name: x.algorithm.into(), points: x.timeline.iter().map(|p| (p.0, f(p))).collect() }).collect() };
    if let Ok(svg) = plot::lines("Fulcrum CPU while the clients browse", "seconds", "% of one core", &series(|p| p.1)) {
        r.plot("fulcrum-cpu.svg", "Fulcrum CPU over time (the paper's Figure 4)", svg);
    }
    if let Ok(svg) = plot::lines("Fulcrum memory while the clients browse", "seconds", "resident MiB", &series(|p| p.2)) {
        r.plot("fulcrum-memory.svg", "Fulcrum memory over time (the paper's Figure 5)", svg);
    }
    let per_client: Vec<Series> = runs.iter().map(|x| Series { name: x.algorithm.into(), points: x.clients.iter().enumerate().map(|(i, c)| ((i + 1) as f64, c.0)).collect() }).collect();
    if let Ok(svg) = plot::lines("Mean response time per client", "client", "ms", &per_client) {
        r.plot("response-per-client.svg", "Mean response time per client and algorithm (Table 1)", svg);
    }

    // Checks.
    if let Some(rr) = runs.iter().find(|x| x.algorithm == "round-robin") {
        let req: Vec<f64> = rr.servers.iter().map(|s| s.0 as f64).collect();
        let mean = Summary::of(&req).mean;
        let worst = req.iter().map(|c| (c - mean).abs() / mean.max(1.0)).fold(0.0, f64::max);
        r.check("round robin spreads requests within 1% of equal", worst <= 0.01, format!("requests per server {req:?}, worst {:.2}% off the mean", worst * 100.0));
    }
    if let Some(sh) = runs.iter().find(|x| x.algorithm == "source-hash") {
        let seen: Vec<usize> = sh.clients.iter().map(|c| c.3).collect();
        r.check("source-IP hash keeps each client on one server", seen.iter().all(|&n| n == 1), format!("servers seen per client {seen:?}"));
    }
    let failed: usize = runs.iter().flat_map(|x| &x.clients).map(|c| c.2).sum();
    r.check("no request failed", failed == 0, format!("{failed} failed of {}", runs.iter().map(|x| x.response.n).sum::<usize>() + failed));

    for x in runs {
        r.figure(format!("{}.mean_response_ms", x.algorithm), x.response.mean);
        r.figure(format!("{}.requests_per_s", x.algorithm), x.response.n as f64 / x.seconds);
        r.figure(format!("{}.fulcrum_cpu_s", x.algorithm), x.fulcrum_cpu);
        r.figure(format!("{}.fulcrum_peak_kib", x.algorithm), x.fulcrum.peak_rss_kib as f64);
    }
    r.raw = json!({
        "site_bytes": site_bytes,
        "pages_per_client": pages,
        "ftp": match ftp {
            Ok(runs) => json!(runs.iter().map(|x| json!({
                "algorithm": x.algorithm,
                "clients": x.clients.iter().enumerate().map(|(i, c)| json!({"source": source(i), "mean_session_secs": c.0, "sessions": c.1, "failed": c.2})).collect::<Vec<_>>(),
                "sessions_per_server": x.sessions,
                "fulcrum": {"cpu_secs": x.fulcrum_cpu, "peak_rss_kib": x.fulcrum.peak_rss_kib},
            })).collect::<Vec<_>>()),
            Err(e) => json!({"not_run": e}),
        },
        "runs": runs.iter().map(|x| json!({
            "algorithm": x.algorithm,
            "seconds": x.seconds,
            "response_ms": x.response,
            "clients": x.clients.iter().enumerate().map(|(i, c)| json!({"source": source(i), "mean_ms": c.0, "requests": c.1, "failed": c.2, "servers_seen": c.3})).collect::<Vec<_>>(),
            "servers": x.servers.iter().enumerate().map(|(i, s)| json!({"name": format!("rs{}", i + 1), "requests": s.0, "cpu_secs": s.1, "peak_rss_kib": s.2})).collect::<Vec<_>>(),
            "fulcrum": {"cpu_secs": x.fulcrum_cpu, "peak_rss_kib": x.fulcrum.peak_rss_kib},
            "fulcrum_timeline": x.timeline,
        })).collect::<Vec<_>>(),
    });
    r
}

/// The address client `i` used.
fn source(i: usize) -> String {
    client::sources(CLIENTS).get(i).map_or_else(|| "?".to_string(), |a| a.to_string())
}

/// "Client 3 (127.0.0.13)": the paper's row name and the address that client used.
fn client_label(i: usize) -> String {
    format!("Client {} ({})", i + 1, source(i))
}

/// Table 7 (FTP response time per client) and the FTP runs' Fulcrum figures, or why they are missing.
fn ftp_tables(r: &mut Report, ftp: &Result<Vec<FtpRun>, String>) {
    let runs = match ftp {
        Ok(runs) => runs,
        Err(e) => return r.section("Table 7. FTP service response time", &format!("Not run: {e}.")),
    };
    let mut t = Table::new(std::iter::once("Client".to_string()).chain(runs.iter().map(|x| x.algorithm.to_string())));
    for c in 0..CLIENTS {
        t.row(std::iter::once(client_label(c)).chain(runs.iter().map(|x| fmt(x.clients[c].0))));
    }
    let mean = |x: &FtpRun| Summary::of(&x.clients.iter().map(|c| c.0).collect::<Vec<_>>()).mean;
    t.row(std::iter::once("**Algorithm average**".to_string()).chain(runs.iter().map(|x| format!("**{}**", fmt(mean(x))))));
    r.section(
        "Table 7. FTP service response time (s per session of ten files)",
        &format!("Four vsftpd servers, Fulcrum in FTP mode, each client a curl session (passive mode) that downloads ten files.\n\n{}", t.markdown()),
    );
    let mut t = Table::new(["Algorithm", "Sessions per server", "Failed sessions", "Fulcrum CPU (s)", "Fulcrum peak memory (KiB)"]);
    for x in runs {
        let failed: usize = x.clients.iter().map(|c| c.2).sum();
        t.row([x.algorithm.to_string(), format!("{:?}", x.sessions), failed.to_string(), fmt(x.fulcrum_cpu), x.fulcrum.peak_rss_kib.to_string()]);
    }
    r.section("FTP: sessions and Fulcrum's use", &t.markdown());
    let failed: usize = runs.iter().flat_map(|x| &x.clients).map(|c| c.2).sum();
    r.check("no FTP session failed (every file's size checked)", failed == 0, format!("{failed} failed"));
    if let Some(rr) = runs.iter().find(|x| x.algorithm == "round-robin") {
        let (lo, hi) = (rr.sessions.iter().min().copied().unwrap_or(0), rr.sessions.iter().max().copied().unwrap_or(0));
        r.check("FTP round robin spreads the sessions evenly", hi - lo <= 1 && hi > 0, format!("sessions per server {:?}", rr.sessions));
    }
    for x in runs {
        r.figure(format!("ftp.{}.mean_session_s", x.algorithm), mean(x));
    }
}
