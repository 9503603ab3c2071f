//! `java-slb`: the Java TCP load balancer paper's experiment. Four identical real servers serve a
//! generated website; ten clients (127.0.0.11 to .20) browse their own fixed list of pages and
//! images over and over, once per algorithm: the paper's four first, then Fulcrum's others. Every
//! algorithm runs `--repeat` times, each repeat with its own links per client. Per algorithm:
//! each client's mean response time (Table 1), Fulcrum's CPU and peak memory (Table 2, Figures 4
//! and 5), each real server's requests, CPU and maximum memory (Tables 3 to 6, Figures 6 to 10),
//! and the algorithms ranked by each measure (Table 8), the real servers by the spread across them
//! as the paper ranks them, and every row of the paper's Table 8 held against the lab's tests
//! (agrees, disagrees, or not shown, with the likely reason where they differ). Every figure is a
//! mean over the repeats with its 95% interval, and a rank is claimed only where the paired t-test
//! (a repeat's pages pair its algorithms) separates the two after Holm's correction over the
//! report, every pair tested. The FTP half ([`ftp`]) gives Table 7 and Table 8's FTP rows.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::client::{self, Browser, Until};
use super::ftp::FtpRun;
use super::paper::{CLIENTS, PAPER, SERVERS, client_label, server_plots, server_table, source, spread};
use super::plot::{self, Means, Series};
use super::procs::{Fulcrum, Usage};
use super::report::{Report, Summary, Table};
use super::stats::{self, Design, Estimate, Measure};
use super::{Ctx, Point, cpu_used, ftp, sample_usage, served_by, service_toml, site, start_backends, timeline};

const ALGORITHMS: [&str; 7] = ["round-robin", "source-hash", "least-conn", "random", "static-rr", "passive-ratio", "p2c-ewma"];

/// One row of the paper's Table 8 ("Algorithms Rank with Linux"): the service, the paper's
/// measure, the lab's measure it is held against (the start of its name in the lab's Table 8),
/// the paper's rank of its four (best first, in its abbreviations; `None`: "no significant
/// difference"), and why the lab may rank otherwise.
struct PaperRow {
    service: &'static str,
    measure: &'static str,
    lab_measure: &'static str,
    rank: Option<[&'static str; 4]>,
    reason: &'static str,
}

// Why the lab may rank a row otherwise than the paper did (a `PaperRow`'s reason).
const ALIKE: &str = "the four real servers here are alike (one machine, and the same CPU quota each when isolated), so no server is slower than another and a difference the paper saw between its machines, which were not alike, has nothing to come from here";
const BALANCER_MEMORY: &str = "Fulcrum's peak resident memory is its allocator's arenas and the connections open at once, which the algorithm changes only by a few connections; the Java balancer's heap grew with objects made per connection and collected later";
const SERVER_SPREAD: &str = "a server's CPU and memory here follow the requests it got, which round robin splits evenly and the others but source-hash nearly so; with ten clients source-hash puts whole clients together, so its spread follows which clients hashed together more than the algorithm";
const PICK_COST: &str =
    "a pick costs a little more or less by algorithm, and repeats of thousands of requests each can resolve a small difference that the paper's one run could not";
const FTP_WORK: &str = "Fulcrum's FTP work per session is a control connection's commands and the data connections it relays, the same whatever the algorithm picks";

const PAPER_TABLE_8: [PaperRow; 10] = [
    PaperRow { service: "HTTP", measure: "client response time", lab_measure: "Client response time", rank: Some(["HIP", "RR", "LC", "RD"]), reason: ALIKE },
    PaperRow { service: "HTTP", measure: "SLB CPU", lab_measure: "SLB CPU", rank: None, reason: PICK_COST },
    PaperRow { service: "HTTP", measure: "SLB memory", lab_measure: "SLB maximum memory", rank: Some(["RR", "LC", "RD", "HIP"]), reason: BALANCER_MEMORY },
    PaperRow { service: "HTTP", measure: "real servers' CPU", lab_measure: "Real servers' CPU", rank: Some(["LC", "HIP", "RD", "RR"]), reason: SERVER_SPREAD },
    PaperRow { service: "HTTP", measure: "real servers' memory", lab_measure: "Real servers' maximum memory", rank: Some(["RD", "RR", "LC", "HIP"]), reason: SERVER_SPREAD },
    PaperRow { service: "FTP", measure: "client response time", lab_measure: "Client response time", rank: Some(["LC", "RR", "HIP", "RD"]), reason: ALIKE },
    PaperRow { service: "FTP", measure: "SLB CPU", lab_measure: "SLB CPU", rank: None, reason: FTP_WORK },
    PaperRow { service: "FTP", measure: "SLB memory", lab_measure: "SLB maximum memory", rank: Some(["LC", "HIP", "RR", "RD"]), reason: BALANCER_MEMORY },
    PaperRow { service: "FTP", measure: "real servers' CPU", lab_measure: "Real servers' CPU", rank: Some(["LC", "RR", "RD", "HIP"]), reason: SERVER_SPREAD },
    PaperRow { service: "FTP", measure: "real servers' memory", lab_measure: "Real servers' maximum memory", rank: Some(["LC", "HIP", "RR", "RD"]), reason: SERVER_SPREAD },
];

/// The algorithm the paper's abbreviation names.
fn paper_name(abbreviation: &str) -> &'static str {
    match abbreviation {
        "HIP" => "source-hash",
        "LC" => "least-conn",
        "RD" => "random",
        _ => "round-robin",
    }
}

/// What one algorithm's run (one repeat) measured.
struct Run {
    algorithm: &'static str,
    repeat: usize,
    /// Per client: mean response time (ms), requests, failures, servers seen.
    clients: Vec<(f64, usize, usize, usize)>,
    /// Per client: the mean time of a whole session (its pages and their images once, in
    /// order: the paper's Table 1 measure, in seconds) and how many it completed.
    sessions: Vec<(f64, usize)>,
    /// Per real server (rs1..rs4): requests, CPU seconds, maximum memory KiB.
    servers: Vec<(usize, f64, u64)>,
    fulcrum: Usage,
    fulcrum_cpu: f64,
    seconds: f64,
    response: Summary,
    /// Fulcrum over time (Figures 4 and 5).
    timeline: Vec<Point>,
    /// Each real server over time (Figures 6 to 10).
    server_timelines: Vec<Vec<Point>>,
}

impl Run {
    fn requests_per_s(&self) -> f64 {
        self.response.n as f64 / self.seconds.max(1e-9)
    }

    fn failed(&self) -> usize {
        self.clients.iter().map(|c| c.2).sum()
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    // `--paper`: each algorithm browsed for thirty minutes, as the paper ran it.
    let (site_bytes, pages, until) = match (ctx.quick, ctx.paper) {
        (true, _) => (4 << 20, 3, Until::Requests(60)),
        (_, true) => (150 << 20, 10, Until::Elapsed(Duration::from_secs(30 * 60))),
        _ => (150 << 20, 10, Until::Elapsed(Duration::from_secs(60))),
    };
    let site = site::generate(site_bytes, ctx.seed);
    let mut runs = Vec::new();
    // Repeats outside, algorithms inside: a slow drift of the machine spreads over every
    // algorithm instead of landing on one.
    for repeat in 0..ctx.repeat {
        let seed = ctx.seed + repeat as u64;
        let browsers: Vec<Browser> =
            client::sources(CLIENTS).into_iter().enumerate().map(|(i, source)| Browser { source, links: site::links_for_client(&site, pages, seed * 1000 + i as u64) }).collect();
        for algorithm in ALGORITHMS {
            let len = match until {
                Until::Requests(n) => Some((n * CLIENTS) as u64),
                Until::Elapsed(_) => None,
            };
            let pb = ctx.progress(len, &format!("java-slb {algorithm}, repeat {}", repeat + 1));
            let r = run_one(ctx, algorithm, repeat, &browsers, until, &pb).await?;
            pb.finish_and_clear();
            eprintln!("java-slb {algorithm}, repeat {}: mean response {:.1} ms, {} requests", repeat + 1, r.response.mean, r.response.n);
            runs.push(r);
        }
    }
    let ftp = ftp::run(ctx).await.map_err(|e| format!("{e:#}"));
    if let Err(e) = &ftp {
        eprintln!("java-slb: the FTP half did not run: {e}");
    }
    Ok(report(ctx, site_bytes, pages, &runs, &ftp))
}

async fn run_one(ctx: &Ctx, algorithm: &'static str, repeat: usize, browsers: &[Browser], until: Until, pb: &indicatif::ProgressBar) -> anyhow::Result<Run> {
    // Fresh real servers per run, so each one's maximum memory belongs to this run.
    let backends = start_backends("rs", SERVERS, &[])?;
    let servers: Vec<_> = backends.iter().map(|b| (b.addr, 1)).collect();
    let f = Fulcrum::start(&ctx.work, &format!("java-slb-{algorithm}-{repeat}"), &service_toml("tcp", algorithm, &servers, ""))?;
    let pids: Vec<u32> = std::iter::once(f.proc.pid()).chain(backends.iter().map(|b| b.proc.pid())).collect();
    let stop = CancellationToken::new();
    let sampler = sample_usage(pids, Duration::from_millis(if ctx.quick { 100 } else { 1000 }), stop.clone());
    let started = std::time::Instant::now();
    let samples = client::browse(browsers, f.listen, until, Duration::from_secs(30), pb).await;
    let seconds = started.elapsed().as_secs_f64();
    stop.cancel();
    let usage = sampler.await?;
    let fulcrum = f.proc.usage();
    let per_server = served_by(samples.iter().flatten());
    let servers = backends.iter().enumerate().map(|(i, b)| (per_server.get(&b.proc.name).copied().unwrap_or(0), cpu_used(&usage, i + 1), b.proc.usage().peak_rss_kib)).collect();
    let clients = samples
        .iter()
        .map(|c| {
            let ok: Vec<f64> = c.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
            (Summary::of(&ok).mean, c.len(), c.len() - ok.len(), served_by(c).len())
        })
        .collect();
    let sessions = samples
        .iter()
        .zip(browsers)
        .map(|(c, b)| {
            // Requests follow each other, so a session's time is the sum of its requests'.
            let whole: Vec<f64> = c.chunks_exact(b.links.len().max(1)).map(|s| s.iter().map(|x| x.total.as_secs_f64()).sum()).collect();
            (Summary::of(&whole).mean, whole.len())
        })
        .collect();
    let all: Vec<f64> = samples.iter().flatten().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
    Ok(Run {
        algorithm,
        repeat,
        clients,
        sessions,
        servers,
        fulcrum,
        fulcrum_cpu: cpu_used(&usage, 0),
        seconds,
        response: Summary::of(&all),
        timeline: timeline(&usage, 0),
        server_timelines: (1..=SERVERS).map(|i| timeline(&usage, i)).collect(),
    })
}

fn report(ctx: &Ctx, site_bytes: u64, pages: usize, runs: &[Run], ftp: &Result<Vec<FtpRun>, String>) -> Report {
    let mut r = Report::new("java-slb", ctx.quick, ctx.seed);
    let how = match (ctx.quick, ctx.paper) {
        (true, _) => "60 requests per client",
        (_, true) => "30 minutes per algorithm (the paper's)",
        _ => "60 s per algorithm",
    };
    r.condition("clients", format!("{CLIENTS}, from 127.0.0.11 to 127.0.0.{}", 10 + CLIENTS));
    r.condition("HTTP pages per client", pages);
    r.condition("HTTP site", format!("{} MiB", site_bytes >> 20));
    r.condition("HTTP run length per algorithm and repeat", how);
    r.condition("repeats", ctx.repeat);
    ftp::conditions(&mut r, ctx.quick, ftp);
    r.deviation(super::host::deviation());
    r.deviation("Every repeat gives each client its own pages; the paper ran each algorithm once.");
    if !ctx.paper {
        r.deviation("60 s of browsing per algorithm and repeat where the paper browsed for thirty minutes (`--paper` runs its thirty).");
    }
    r.deviation("The site is generated (150 MiB of pages and images of mixed sizes), not the paper's own 152 MB site; clients browse without pauses, as its iMacros replays did.");
    r.deviation(
        "The FTP half keeps its session count in every mode: the paper's FTP sessions ran about 330 s each on its machines; here a session's length is what its ten files take.",
    );
    r.deviation("Fulcrum's other algorithms (static-rr, passive-ratio, p2c-ewma) run beside the paper's four; Table 8 ranks the paper's four.");
    r.deviation("Each request is a new connection from a client address of its own on 127.0.0.0/8, not a browser on a machine of its own.");
    let over = |algorithm: &str, figure: &dyn Fn(&Run) -> f64| stats::over(runs, |x| x.algorithm == algorithm, figure);
    r.section(
        "Setup",
        &format!(
            "Four real servers (`fulcrum backend`), a generated site of {} MiB (pages of 2 to 40 KiB, each with 2 to 8 images, \
             most under 30 KiB, one in twenty up to 3 MiB), ten clients from 127.0.0.11 to 127.0.0.20, each browsing {pages} pages \
             and their images over and over, one new connection per request; Fulcrum in TCP mode; {how}. Each algorithm ran {} \
             times, every repeat with its own pages per client (seeds {} to {}), repeats taken in turn across the algorithms; \
             figures are the mean over the repeats ± the half width of its 95% confidence interval.",
            site_bytes >> 20,
            ctx.repeat,
            ctx.seed,
            ctx.seed + ctx.repeat as u64 - 1
        ),
    );

    // Table 1: mean response time per client.
    let mut t = Table::new(std::iter::once("Client".to_string()).chain(ALGORITHMS.iter().map(|a| a.to_string())));
    for c in 0..CLIENTS {
        t.row(std::iter::once(client_label(c)).chain(ALGORITHMS.iter().map(|a| over(a, &|x| x.clients[c].0).show(1))));
    }
    t.row(std::iter::once("**Algorithm average**".to_string()).chain(ALGORITHMS.iter().map(|a| format!("**{}**", over(a, &|x| x.response.mean).show(1)))));
    r.section("Table 1. HTTP service response time (ms, mean per request)", &t.markdown());

    // Table 1 in the paper's own measure: a whole session of a client's pages, in seconds.
    let mut t = Table::new(std::iter::once("Client".to_string()).chain(ALGORITHMS.iter().map(|a| a.to_string())));
    for c in 0..CLIENTS {
        t.row(std::iter::once(client_label(c)).chain(ALGORITHMS.iter().map(|a| {
            let done: usize = runs.iter().filter(|x| x.algorithm == *a).map(|x| x.sessions[c].1).sum();
            if done == 0 { "no whole session".to_string() } else { over(a, &|x| x.sessions[c].0).show(2) }
        })));
    }
    r.section(
        "Table 1 in the paper's measure: HTTP session time (s, mean per whole session)",
        &format!(
            "The paper timed a client's whole browse of its pages (its Table 1, in seconds); here a session is one pass over a \
             client's {pages} pages and their images, one request after another, and only whole sessions count.\n\n{}",
            t.markdown()
        ),
    );

    // Table 2: Fulcrum's own use.
    let mut t = Table::new(["Algorithm", "Requests/s", "Failed (all repeats)", "Fulcrum CPU (% of a core)", "Fulcrum CPU per request (µs)", "Fulcrum maximum memory (KiB)"]);
    for a in ALGORITHMS {
        let failed: usize = runs.iter().filter(|x| x.algorithm == a).map(Run::failed).sum();
        t.row([
            a.to_string(),
            over(a, &Run::requests_per_s).show(0),
            failed.to_string(),
            over(a, &|x| x.fulcrum_cpu / x.seconds * 100.0).show(1),
            over(a, &cpu_per_request).show(1),
            over(a, &|x| x.fulcrum.peak_rss_kib as f64).show(0),
        ]);
    }
    r.section("Table 2. Fulcrum's CPU and maximum memory", &t.markdown());

    // Tables 3 to 6: one per algorithm of the paper, in its layout; Fulcrum's others after.
    let servers = |a: &str| {
        server_table(&[
            ("Maximum memory usage (KiB)", 0, &|i| over(a, &|x| x.servers[i].2 as f64)),
            ("CPU (s)", 2, &|i| over(a, &|x| x.servers[i].1)),
            ("Requests", 0, &|i| over(a, &|x| x.servers[i].0 as f64)),
        ])
    };
    for (k, (a, paper)) in PAPER.iter().enumerate() {
        r.section(&format!("Table {}. Maximum memory usage with {paper} ({a})", k + 3), &servers(a).markdown());
        if let Some(x) = runs.iter().find(|x| x.algorithm == *a && x.repeat == 0) {
            server_plots(&mut r, "http", a, &format!("6({})", (b'a' + k as u8) as char), &format!("{} ({paper})", 7 + k), &x.server_timelines);
        }
    }
    for a in ALGORITHMS.iter().filter(|a| !PAPER.iter().any(|p| p.0 == **a)) {
        r.section(&format!("The real servers with {a} (not in the paper)"), &servers(a).markdown());
    }

    // Table 8: the algorithms ranked by each measure.
    let measures: [Measure<Run>; 6] = [
        ("Client response time (ms)", 1, |x| x.response.mean),
        ("SLB CPU per request (µs)", 1, cpu_per_request),
        ("SLB maximum memory (KiB)", 0, |x| x.fulcrum.peak_rss_kib as f64),
        ("Real servers' CPU, std dev across them (s)", 3, |x| spread(x.servers.iter().map(|s| s.1))),
        ("Real servers' maximum memory, std dev across them (KiB)", 0, |x| spread(x.servers.iter().map(|s| s.2 as f64))),
        ("Requests per real server, std dev across them", 1, |x| spread(x.servers.iter().map(|s| s.0 as f64))),
    ];
    let mut t = Table::new(["Service", "Measure (lower is better)", "Ranking"]);
    // Each row's ranking, kept to hold the paper's Table 8 against it.
    let mut ranked: Vec<(&str, &str, String)> = Vec::new();
    for (name, digits, f) in measures {
        let entries: Vec<(String, Estimate)> = ALGORITHMS.iter().map(|a| (a.to_string(), over(a, &f))).collect();
        // Paired: every algorithm of a repeat browsed the same pages.
        let ranking = r.tests.ranking(&format!("HTTP, {name}"), &entries, digits, Design::Paired);
        t.row(["HTTP", name, &ranking]);
        ranked.push(("HTTP", name, ranking));
    }
    if let Ok(ftp_runs) = ftp {
        for (name, digits, f) in ftp::MEASURES {
            let entries: Vec<(String, Estimate)> = ftp::ALGORITHMS.iter().map(|a| (a.to_string(), stats::over(ftp_runs, |x| x.algorithm == *a, f))).collect();
            // Independent: the FTP sessions are the same on every repeat, so a repeat ties nothing.
            let ranking = r.tests.ranking(&format!("FTP, {name}"), &entries, digits, Design::Independent);
            t.row(["FTP", name, &ranking]);
            ranked.push(("FTP", name, ranking));
        }
    }
    r.section(
        "Table 8. Algorithms ranked",
        &format!(
            "Each measure's algorithms from lowest to highest mean, every pair tested over the repeats (HTTP: the paired t-test, \
             each repeat's pages being the same for every algorithm; FTP: Welch's t-test). `<` joins neighbours the test separates \
             after Holm's correction, with the adjusted p, `≈` neighbours it does not; \"further apart\" names the pairs that are not \
             neighbours yet are separated. Only a `<` is a ranking. The real servers are ranked by the spread across them, as the \
             paper ranks them.\n\n{}",
            t.markdown()
        ),
    );

    // Table 8 of the paper, row by row, against the lab's tests.
    let mut t = Table::new(["Service", "Paper's measure", "Paper's rank (best first)", "The lab's tests, step by step (Holm p)"]);
    for row in PAPER_TABLE_8 {
        let Some((_, _, ranking)) = ranked.iter().find(|x| x.0 == row.service && x.1.starts_with(row.lab_measure)) else { continue };
        let paper = row.rank.map(|rank| rank.map(paper_name));
        let shown = paper.map_or_else(|| "no significant difference".to_string(), |p| p.join(" < "));
        let line = r.tests.agreement(ranking, paper.as_ref().map(|p| &p[..]), row.reason);
        t.row([row.service, row.measure, &shown, &line]);
    }
    r.section(
        "Table 8 against the paper",
        &format!(
            "Every row of the paper's Table 8, its four algorithms in the paper's order, and what the tests above say of each step \
             of that order: the same (`<`), the other way, or not separated (`≈`). \"agrees\" needs every step the same; \"not shown\" \
             has none the other way but some the lab cannot separate at this sample size. Where the two differ, the likely reason \
             follows. The paper ranked each measure from one run, without a test.\n\n{}",
            t.markdown()
        ),
    );
    let rr = over("round-robin", &|x| x.response.mean);
    let mut reading: Vec<String> = ALGORITHMS
        .iter()
        .filter(|a| **a != "round-robin")
        .map(|a| format!("- response time: {}", r.tests.verdict("round-robin", &rr, a, &over(a, &|x| x.response.mean), Design::Paired, "faster", " ms")))
        .collect();
    if let Ok(ftp_runs) = ftp {
        reading.extend(ftp::reading(&mut r.tests, ftp_runs));
    }
    r.section("Reading (paired t-test over the repeats for HTTP, Welch's for FTP; Holm's correction over the report)", &reading.join("\n"));
    ftp::tables(&mut r, ftp);

    // Plots of the first repeat: Figures 4 and 5 (Fulcrum), and Table 1 as a chart.
    let first: Vec<&Run> = runs.iter().filter(|x| x.repeat == 0).collect();
    let series =
        |f: fn(&Point) -> f64| -> Vec<Series> { first.iter().map(|x| Series { name: x.algorithm.into(), points: x.timeline.iter().map(|p| (p.0, f(p))).collect() }).collect() };
    if let Ok(svg) = plot::lines("Fulcrum CPU while the clients browse", "seconds", "% of one core", &series(|p| p.1)) {
        r.plot("fulcrum-cpu.svg", "Fulcrum CPU over time (the paper's Figure 4, first repeat)", svg);
    }
    if let Ok(svg) = plot::lines("Fulcrum memory while the clients browse", "seconds", "resident MiB", &series(|p| p.2)) {
        r.plot("fulcrum-memory.svg", "Fulcrum memory over time (the paper's Figure 5, first repeat)", svg);
    }
    let per_client: Vec<Means> =
        ALGORITHMS.iter().map(|a| Means { name: a.to_string(), points: (0..CLIENTS).map(|c| (c as f64, over(a, &|x| x.clients[c].0))).collect() }).collect();
    let clients: Vec<String> = (1..=CLIENTS).map(|c| format!("client {c}")).collect();
    if let Ok(svg) = plot::categories("Mean response time per client (95% intervals)", "client", &clients, "ms", &per_client) {
        r.plot("response-per-client.svg", "Mean response time per client and algorithm (Table 1, mean over the repeats)", svg);
    }

    // Checks: on every repeat, since a split is exact or it is not.
    let rr: Vec<&Run> = runs.iter().filter(|x| x.algorithm == "round-robin").collect();
    let worst = rr
        .iter()
        .map(|x| {
            let req: Vec<f64> = x.servers.iter().map(|s| s.0 as f64).collect();
            let mean = Summary::of(&req).mean;
            req.iter().map(|c| (c - mean).abs() / mean.max(1.0)).fold(0.0, f64::max)
        })
        .fold(0.0, f64::max);
    let splits: Vec<String> = rr.iter().map(|x| x.servers.iter().map(|s| s.0.to_string()).collect::<Vec<_>>().join("/")).collect();
    r.check(
        "round robin spreads requests within 1% of equal on every repeat",
        !rr.is_empty() && worst <= 0.01,
        format!("requests per server per repeat {}, worst {:.2}% off the mean", splits.join(", "), worst * 100.0),
    );
    let sh: Vec<Vec<usize>> = runs.iter().filter(|x| x.algorithm == "source-hash").map(|x| x.clients.iter().map(|c| c.3).collect()).collect();
    r.check(
        "source-IP hash keeps each client on one server on every repeat",
        !sh.is_empty() && sh.iter().flatten().all(|&n| n == 1),
        format!("servers seen per client, per repeat {sh:?}"),
    );
    let failed: usize = runs.iter().map(Run::failed).sum();
    r.check("no request failed", failed == 0, format!("{failed} failed of {}", runs.iter().map(|x| x.response.n).sum::<usize>() + failed));

    for a in ALGORITHMS {
        r.estimate(format!("{a}.mean_response_ms"), &over(a, &|x| x.response.mean));
        r.estimate(format!("{a}.requests_per_s"), &over(a, &Run::requests_per_s));
        r.estimate(format!("{a}.fulcrum_cpu_s"), &over(a, &|x| x.fulcrum_cpu));
        r.estimate(format!("{a}.fulcrum_peak_kib"), &over(a, &|x| x.fulcrum.peak_rss_kib as f64));
        r.estimate(format!("{a}.servers_cpu_spread_s"), &over(a, &|x| spread(x.servers.iter().map(|s| s.1))));
    }
    r.raw = json!({
        "site_bytes": site_bytes,
        "pages_per_client": pages,
        "repeats": ctx.repeat,
        "ftp": match ftp {
            Ok(runs) => ftp::raw(runs),
            Err(e) => json!({"not_run": e}),
        },
        "runs": runs.iter().map(|x| json!({
            "algorithm": x.algorithm,
            "repeat": x.repeat,
            "seconds": x.seconds,
            "response_ms": x.response,
            "clients": x.clients.iter().enumerate().map(|(i, c)| json!({"source": source(i), "mean_ms": c.0, "requests": c.1, "failed": c.2, "servers_seen": c.3})).collect::<Vec<_>>(),
            "servers": x.servers.iter().enumerate().map(|(i, s)| json!({"name": format!("rs{}", i + 1), "requests": s.0, "cpu_secs": s.1, "peak_rss_kib": s.2})).collect::<Vec<_>>(),
            "fulcrum": {"cpu_secs": x.fulcrum_cpu, "peak_rss_kib": x.fulcrum.peak_rss_kib},
            "fulcrum_timeline": x.timeline,
            "server_timelines": x.server_timelines,
        })).collect::<Vec<_>>(),
    });
    r
}

fn cpu_per_request(x: &Run) -> f64 {
    x.fulcrum_cpu * 1e6 / x.response.n.max(1) as f64
}
