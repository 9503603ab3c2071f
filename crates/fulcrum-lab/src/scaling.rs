//! `scaling`: the JServ cluster article's benchmark, with real servers of the kinds the article
//! meant its figures for. Each real server does real work per request: a request holds one of its
//! workers for 0.5 ms of CPU and 20 ms of waiting (a servlet and its database), so a server's rate
//! is set by its workers, not by the machine's cores. Four clusters (Fulcrum in HTTP mode):
//! - 1 to 4 servers of four workers, at concurrency 2 (10 requests) and 50 (500 requests);
//! - 1 to 4 servers of one worker at concurrency 2, a light load that still gains from nodes;
//! - 1 to 4 servers of four workers that answer 503 to a request that waited 200 ms for a worker
//!   (the article's one node failed 62 of 500), at concurrency 50: the error column means
//!   something;
//! - two servers three times apart (twelve workers and four, each request waiting 60 ms so the
//!   machine is not the bottleneck), round robin 1:1 against static-rr 3:1, which is what the
//!   article's weights are for.
//!
//! Each configuration runs `--repeat` times; requests/s is reported as the mean over the repeats
//! with its 95% confidence interval, and a gain is claimed only where Welch's t-test shows it
//! after Holm's correction over the report.

use std::time::Duration;

use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::{Fulcrum, Server};
use super::report::{Report, Table};
use super::stats::{self, Design, Estimate, welch};
use super::{Ctx, served_by, service_toml};

/// The per-request work every server does: 0.5 ms of CPU and 20 ms of waiting.
const WORK: [&str; 4] = ["--cpu-us", "500", "--delay-ms", "20"];

/// The clusters, in the order they run and are reported.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cluster {
    /// Servers of four workers: the article's table.
    Equal,
    /// Servers of one worker.
    OneWorker,
    /// Servers of four workers that answer 503 to a request that waited 200 ms for one.
    Overloaded,
    /// One server three times the other.
    Unequal,
}

impl Cluster {
    fn key(self) -> &'static str {
        match self {
            Cluster::Equal => "equal",
            Cluster::OneWorker => "one-worker",
            Cluster::Overloaded => "overloaded",
            Cluster::Unequal => "unequal",
        }
    }

    /// Server `i`'s options.
    fn options(self, i: usize) -> Vec<String> {
        let workers = match (self, i) {
            (Cluster::OneWorker, _) => "1",
            (Cluster::Unequal, 0) => "12",
            _ => "4",
        };
        let mut o: Vec<String> = ["--workers", workers].into_iter().chain(WORK).map(String::from).collect();
        if self == Cluster::Unequal {
            // 60 ms of waiting, so that even 3:1 stays well below what the machine's two cores
            // carry: the servers, not the machine, set the rate being compared.
            o[5] = "60".into();
        }
        if self == Cluster::Overloaded {
            o.extend(["--queue-timeout-ms", "200"].map(String::from));
        }
        o
    }
}

/// One configuration of a cluster.
#[derive(Clone, Debug, PartialEq)]
struct Config {
    cluster: Cluster,
    servers: usize,
    weights: Vec<u32>,
    concurrency: usize,
    requests: usize,
}

impl Config {
    fn name(&self) -> String {
        let weights = self.weights.iter().map(u32::to_string).collect::<Vec<_>>().join(":");
        let name = format!("{}servers.{weights}.c{}", self.servers, self.concurrency);
        if self.cluster == Cluster::Equal { name } else { format!("{}.{name}", self.cluster.key()) }
    }
}

struct Run {
    config: Config,
    repeat: usize,
    samples: Vec<Sample>,
    wall: Duration,
}

impl Run {
    fn rps(&self) -> f64 {
        self.ok() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    fn ok(&self) -> usize {
        self.samples.iter().filter(|s| s.ok()).count()
    }

    fn failed(&self) -> usize {
        self.samples.len() - self.ok()
    }

    fn failed_percent(&self) -> f64 {
        self.failed() as f64 * 100.0 / self.samples.len().max(1) as f64
    }

    fn per_server(&self) -> Vec<usize> {
        let by = served_by(&self.samples);
        (1..=self.config.servers).map(|i| by.get(&format!("node{i}")).copied().unwrap_or(0)).collect()
    }
}

fn plan(scale: usize) -> Vec<Config> {
    let sized = |cluster, concurrency, requests| (1..=4).map(move |n| Config { cluster, servers: n, weights: vec![1; n], concurrency, requests });
    let mut plan = Vec::new();
    for n in 1..=4 {
        for (concurrency, requests) in [(2, 10 * scale), (50, 500 * scale)] {
            plan.push(Config { cluster: Cluster::Equal, servers: n, weights: vec![1; n], concurrency, requests });
        }
    }
    plan.extend(sized(Cluster::OneWorker, 2, 10 * scale));
    plan.extend(sized(Cluster::Overloaded, 50, 500 * scale));
    // More requests in the quick run than the article's 500: the drain at a run's end, where
    // the slower server still works off its queue, is noise a short run cannot average away.
    for weights in [vec![1, 1], vec![3, 1]] {
        plan.push(Config { cluster: Cluster::Unequal, servers: 2, weights, concurrency: 50, requests: if scale == 1 { 1000 } else { 5000 } });
    }
    plan
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    // The article's counts (`--quick`, `--paper`); a full run makes ten times as many for
    // steadier figures.
    let plan = plan(if ctx.quick || ctx.paper { 1 } else { 10 });
    let sources = client::sources(10);
    let link = Link::get("/index.html");
    let pb = ctx.progress(Some(plan.iter().map(|p| p.requests as u64).sum::<u64>() * ctx.repeat as u64), "scaling");
    let mut runs = Vec::new();
    // Repeats outermost, so a drift of the machine over the run spreads over every configuration.
    for repeat in 0..ctx.repeat {
        for config in &plan {
            let name = config.name();
            pb.set_message(format!("scaling {name}, repeat {}", repeat + 1));
            let backends: Vec<Server> = (0..config.servers).map(|i| crate::procs::backend(&format!("node{}", i + 1), &config.cluster.options(i))).collect::<anyhow::Result<_>>()?;
            let servers: Vec<_> = backends.iter().zip(&config.weights).map(|(b, w)| (b.addr, *w)).collect();
            let algorithm = if config.weights.iter().all(|w| *w == 1) { "round-robin" } else { "static-rr" };
            let f = Fulcrum::start(&ctx.work, &format!("scaling-{name}-{repeat}").replace(':', "-"), &service_toml("http", algorithm, &servers, ""))?;
            let (samples, wall) =
                client::fixed(config.requests, config.concurrency, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
            let r = Run { config: config.clone(), repeat, samples, wall };
            pb.suspend(|| eprintln!("scaling {name}, repeat {}: {:.0} req/s, {} failed, per server {:?}", repeat + 1, r.rps(), r.failed(), r.per_server()));
            runs.push(r);
        }
    }
    pb.finish_and_clear();
    Ok(report(ctx, &plan, &runs))
}

fn over(runs: &[Run], config: &Config, figure: fn(&Run) -> f64) -> Estimate {
    stats::over(runs, |x| x.config == *config, figure)
}

fn report(ctx: &Ctx, plan: &[Config], runs: &[Run]) -> Report {
    let mut r = Report::new("scaling", ctx.quick, ctx.seed);
    r.condition("work per request", "0.5 ms of CPU and 20 ms of waiting, holding one of the server's workers");
    r.condition("configurations", plan.len());
    r.condition("repeats", ctx.repeat);
    r.deviation("Real servers that model a servlet and its database by a fixed CPU time and wait per request, where the article measured JServ nodes.");
    r.deviation(super::host::deviation());
    if !ctx.quick && !ctx.paper {
        r.deviation("Ten times the article's requests per configuration (100 at concurrency 2, 5,000 at 50) for steadier figures; `--paper` and `--quick` run its own 10 and 500.");
    }
    r.section(
        "Setup",
        &format!(
            "Real servers `fulcrum backend --workers W --cpu-us 500 --delay-ms 20`: a request holds a worker for 0.5 ms of CPU and 20 ms \
             of waiting, so a server of four workers answers about 190 requests a second. Fulcrum in HTTP mode with round robin \
             (static-rr where weights differ); each request a GET on a new connection from 127.0.0.11 to .20 in turn, `ab -n N -c C` \
             style. Each configuration ran {} times (fresh servers and Fulcrum each time); requests/s and failures are the mean over \
             the repeats ± the half width of its 95% confidence interval, and the split per server is summed over the repeats.",
            ctx.repeat
        ),
    );
    let joined = |w: &[u32]| w.iter().map(u32::to_string).collect::<Vec<_>>().join(":");
    let table = |r: &mut Report, title: &str, about: &str, cluster: Cluster| {
        let mut t = Table::new(["Servers", "Weights", "Concurrency", "Requests (all repeats)", "Failed %", "Requests/s", "Per server (all repeats)"]);
        for c in plan.iter().filter(|c| c.cluster == cluster) {
            let xs: Vec<&Run> = runs.iter().filter(|x| x.config == *c).collect();
            let per_server = xs.iter().fold(vec![0; c.servers], |acc, x| acc.iter().zip(x.per_server()).map(|(a, b)| a + b).collect());
            t.row([
                c.servers.to_string(),
                joined(&c.weights),
                c.concurrency.to_string(),
                xs.iter().map(|x| x.samples.len()).sum::<usize>().to_string(),
                over(runs, c, Run::failed_percent).show(1),
                over(runs, c, Run::rps).show(0),
                per_server.iter().map(usize::to_string).collect::<Vec<_>>().join(" / "),
            ]);
        }
        r.section(title, &format!("{about}\n\n{}", t.markdown()));
    };
    table(&mut r, "Requests per second by cluster size", "Servers of four workers, as the article's table.", Cluster::Equal);
    table(&mut r, "Servers of one worker", "One worker each, at a light load of two concurrent clients.", Cluster::OneWorker);
    table(
        &mut r,
        "Servers that fail when overloaded",
        "Four workers each; a request that waited 200 ms for a worker is answered 503, as a servlet engine fails requests when \
         overloaded (the article's one node failed 62 of its 500 requests).",
        Cluster::Overloaded,
    );
    table(
        &mut r,
        "Servers three times apart",
        "node1 has twelve workers, node2 four, and a request waits 60 ms (not 20) so that the servers, not the machine, set the rate: \
         round robin 1:1 against static-rr 3:1.",
        Cluster::Unequal,
    );

    let sizes = |cluster: Cluster, concurrency: usize, figure: fn(&Run) -> f64| -> Vec<Estimate> {
        plan.iter().filter(|c| c.cluster == cluster && c.concurrency == concurrency).map(|c| over(runs, c, figure)).collect()
    };
    let curve = |name: &str, e: Vec<Estimate>| Series { name: name.into(), points: e.iter().enumerate().map(|(i, e)| ((i + 1) as f64, e.mean)).collect() };
    let series = [
        curve("four workers, concurrency 2", sizes(Cluster::Equal, 2, Run::rps)),
        curve("four workers, concurrency 50", sizes(Cluster::Equal, 50, Run::rps)),
        curve("one worker, concurrency 2", sizes(Cluster::OneWorker, 2, Run::rps)),
        curve("overloaded, concurrency 50", sizes(Cluster::Overloaded, 50, Run::rps)),
    ];
    if let Ok(svg) = plot::lines("Requests per second by cluster size (mean over the repeats)", "real servers", "requests/s", &series) {
        r.plot("scaling.svg", "Requests per second against the number of real servers", svg);
    }

    // Each added server: a gain is claimed only where the test shows one.
    let mut reading = Vec::new();
    let negated = |e: &Estimate| Estimate::of(&e.values.iter().map(|v| -v).collect::<Vec<_>>());
    for (cluster, c, label) in [
        (Cluster::Equal, 2, "four workers, concurrency 2"),
        (Cluster::Equal, 50, "four workers, concurrency 50"),
        (Cluster::OneWorker, 2, "one worker, concurrency 2"),
        (Cluster::Overloaded, 50, "overloaded, concurrency 50"),
    ] {
        let e = sizes(cluster, c, Run::rps);
        for n in 1..e.len() {
            reading.push(format!(
                "- {label}, {} against {n} servers: {}",
                n + 1,
                r.tests.verdict(&format!("{} servers", n + 1), &negated(&e[n]), &format!("{n} servers"), &negated(&e[n - 1]), Design::Independent, "faster", " requests/s")
            ));
        }
    }
    let failures = sizes(Cluster::Overloaded, 50, Run::failed_percent);
    if let (Some(one), Some(four)) = (failures.first(), failures.last()) {
        reading.push(format!("- overloaded, failed requests: {}", r.tests.verdict("4 servers", four, "1 server", one, Design::Independent, "lower", " %")));
    }
    let unequal: Vec<Estimate> = plan.iter().filter(|c| c.cluster == Cluster::Unequal).map(|c| over(runs, c, Run::rps)).collect();
    if let [even, weighted] = unequal.as_slice() {
        reading.push(format!(
            "- servers three times apart, requests/s: {}",
            r.tests.verdict("3:1", &negated(weighted), "1:1", &negated(even), Design::Independent, "faster", " requests/s")
        ));
    }
    r.section("Reading (Welch's t-test over the repeats; Holm's correction over the report)", &reading.join("\n"));

    // The checks use the same rule, on the claim a short run can carry: the most servers beat
    // one, and no added server is slower beyond noise. Each step's own gain is in the reading
    // above; a quick run of a few repeats on a busy machine cannot promise every step apart.
    let faster = |a: &Estimate, b: &Estimate| b.mean > a.mean && (a.n() < 2 || welch(a, b).significant);
    let slower = |a: &Estimate, b: &Estimate| b.mean < a.mean && a.n() >= 2 && welch(a, b).significant;
    let gains = |e: &[Estimate]| match (e.first(), e.last()) {
        (Some(one), Some(most)) if e.len() > 1 => faster(one, most) && !e.windows(2).any(|w| slower(&w[0], &w[1])),
        _ => false,
    };
    let high = sizes(Cluster::Equal, 50, Run::rps);
    r.check(
        "more servers give more requests/s at concurrency 50 (the most beat one; no added server is slower)",
        gains(&high),
        format!("req/s with 1 to 4 servers: {}", high.iter().map(|e| e.show(0)).collect::<Vec<_>>().join(", ")),
    );
    let failed: usize = runs.iter().filter(|x| x.config.cluster != Cluster::Overloaded).map(Run::failed).sum();
    r.check("no request failed on servers that queue", failed == 0, format!("{failed} failed"));
    if let (Some(one), Some(four)) = (failures.first(), failures.last()) {
        let fewer = one.mean > 0.0 && four.mean < one.mean && (one.n() < 2 || welch(four, one).significant);
        r.check(
            "an overloaded server fails requests, and four fail fewer than one",
            fewer,
            format!("failed % with 1 to 4 servers: {}", failures.iter().map(|e| e.show(1)).collect::<Vec<_>>().join(", ")),
        );
    }
    if let [even, weighted] = unequal.as_slice() {
        r.check(
            "weights 3:1 give servers three times apart more requests/s than 1:1",
            faster(even, weighted),
            format!("1:1 {} req/s, 3:1 {} req/s", even.show(0), weighted.show(0)),
        );
    }
    let weighted: Vec<Vec<usize>> = runs.iter().filter(|x| x.config.weights == [3, 1]).map(Run::per_server).collect();
    if !weighted.is_empty() {
        // Every repeat: a split is exact or it is not.
        let within = weighted.iter().all(|p| (p[0] as f64 / (p[0] + p[1]).max(1) as f64 - 0.75).abs() <= 0.01);
        r.check("weights 3:1 give the first server 75% (within 1%)", within, format!("per repeat: {weighted:?}"));
    }

    for c in plan {
        r.estimate(format!("{}.requests_per_s", c.name()), &over(runs, c, Run::rps));
        if c.cluster == Cluster::Overloaded {
            r.estimate(format!("{}.failed_percent", c.name()), &over(runs, c, Run::failed_percent));
        }
    }
    r.raw = json!({
        "repeats": ctx.repeat,
        "runs": runs.iter().map(|x| json!({
            "cluster": x.config.cluster.key(),
            "servers": x.config.servers,
            "weights": x.config.weights,
            "concurrency": x.config.concurrency,
            "options": (0..x.config.servers).map(|i| x.config.cluster.options(i).join(" ")).collect::<Vec<_>>(),
            "repeat": x.repeat,
            "requests": x.samples.len(),
            "failed": x.failed(),
            "seconds": x.wall.as_secs_f64(),
            "requests_per_s": x.rps(),
            "per_server": x.per_server(),
        })).collect::<Vec<_>>(),
    });
    r
}
