//! `scaling`: the JServ cluster article's benchmark. 1, 2, 3 and 4 real servers behind Fulcrum
//! (HTTP mode, round robin) at concurrency 2 (10 requests) and 50 (500 requests), then two servers
//! weighted 3:1. Each real server does real work per request: it has four workers, and a request
//! holds one for 0.5 ms of CPU and 20 ms of waiting (a servlet and its database), so a server
//! answers about 190 requests a second however many cores the machine has. Each configuration
//! runs `--repeat` times; requests/s is reported as the mean over the repeats with its 95%
//! confidence interval, and a size counts as faster than the next smaller only where Welch's
//! t-test separates them.

use std::time::Duration;

use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::Fulcrum;
use super::report::{Report, Table};
use super::stats::{Estimate, verdict, welch};
use super::{Ctx, served_by, service_toml, start_backends};

const WORK: [&str; 6] = ["--workers", "4", "--cpu-us", "500", "--delay-ms", "20"];

struct Run {
    servers: usize,
    weights: Vec<u32>,
    concurrency: usize,
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

    fn per_server(&self) -> Vec<usize> {
        let by = served_by(&self.samples);
        (1..=self.servers).map(|i| by.get(&format!("node{i}")).copied().unwrap_or(0)).collect()
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    // The article's counts; a full run makes ten times as many for steadier figures.
    let scale = if ctx.quick { 1 } else { 10 };
    let loads = [(2, 10 * scale), (50, 500 * scale)];
    let sources = client::sources(10);
    let link = Link::get("/index.html");
    let work: Vec<String> = WORK.iter().map(|s| s.to_string()).collect();
    let mut plan: Vec<(usize, Vec<u32>, usize, usize)> = Vec::new();
    for n in 1..=4 {
        for (c, total) in loads {
            plan.push((n, vec![1; n], c, total));
        }
    }
    plan.push((2, vec![3, 1], 50, 500 * scale));
    let pb = ctx.progress(Some(plan.iter().map(|p| p.3 as u64).sum::<u64>() * ctx.repeat as u64), "scaling");
    let mut runs = Vec::new();
    // Repeats outermost, so a drift of the machine over the run spreads over every size.
    for repeat in 0..ctx.repeat {
        for (n, weights, concurrency, total) in plan.clone() {
            pb.set_message(format!("scaling {n} servers {weights:?} c={concurrency}, repeat {}", repeat + 1));
            let backends = start_backends("node", n, &work)?;
            let servers: Vec<_> = backends.iter().zip(&weights).map(|(b, w)| (b.addr, *w)).collect();
            let algorithm = if weights.iter().all(|w| *w == 1) { "round-robin" } else { "static-rr" };
            let name = format!("scaling-{n}-{concurrency}-{}-{repeat}", weights.iter().map(u32::to_string).collect::<Vec<_>>().join("-"));
            let f = Fulcrum::start(&ctx.work, &name, &service_toml("http", algorithm, &servers, ""))?;
            let (samples, wall) = client::fixed(total, concurrency, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
            let r = Run { servers: n, weights, concurrency, repeat, samples, wall };
            pb.suspend(|| eprintln!("scaling {} servers {:?} at c={}, repeat {}: {:.0} req/s, {} failed, per server {:?}", n, r.weights, concurrency, repeat + 1, r.rps(), r.samples.len() - r.ok(), r.per_server()));
            runs.push(r);
        }
    }
    pb.finish_and_clear();
    Ok(report(ctx, &runs))
}

/// The configurations in the order they ran: (servers, weights, concurrency).
fn configs(runs: &[Run]) -> Vec<(usize, Vec<u32>, usize)> {
    let mut seen: Vec<(usize, Vec<u32>, usize)> = Vec::new();
    for x in runs {
        let key = (x.servers, x.weights.clone(), x.concurrency);
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    seen
}

/// The repeats of one configuration.
fn of<'a>(runs: &'a [Run], servers: usize, weights: &[u32], concurrency: usize) -> Vec<&'a Run> {
    runs.iter().filter(|x| x.servers == servers && x.weights == weights && x.concurrency == concurrency).collect()
}

fn rps(runs: &[&Run]) -> Estimate {
    Estimate::of(&runs.iter().map(|x| x.rps()).collect::<Vec<_>>())
}

fn report(ctx: &Ctx, runs: &[Run]) -> Report {
    let mut r = Report::new("scaling", ctx.quick, ctx.seed);
    r.section(
        "Setup",
        &format!(
            "Real servers `fulcrum backend --workers 4 --cpu-us 500 --delay-ms 20`; Fulcrum in HTTP mode with round robin (static-rr for \
             the weighted case); each request a GET on a new connection from 127.0.0.11 to .20 in turn, `ab -n N -c C` style. Each \
             configuration ran {} times (fresh servers and Fulcrum each time); requests/s is the mean over the repeats ± the half width \
             of its 95% confidence interval, and requests, failures and the split per server are summed over the repeats.",
            ctx.repeat
        ),
    );
    let joined = |w: &[u32]| w.iter().map(u32::to_string).collect::<Vec<_>>().join(":");
    let mut t = Table::new(["Servers", "Weights", "Concurrency", "Requests", "Failed", "Requests/s", "Per server"]);
    for (n, weights, c) in configs(runs) {
        let xs = of(runs, n, &weights, c);
        let per_server = xs.iter().fold(vec![0; n], |acc, x| acc.iter().zip(x.per_server()).map(|(a, b)| a + b).collect());
        t.row([
            n.to_string(),
            joined(&weights),
            c.to_string(),
            xs.iter().map(|x| x.samples.len()).sum::<usize>().to_string(),
            xs.iter().map(|x| x.samples.len() - x.ok()).sum::<usize>().to_string(),
            rps(&xs).show(0),
            per_server.iter().map(usize::to_string).collect::<Vec<_>>().join(" / "),
        ]);
    }
    r.section("Requests per second by cluster size", &t.markdown());

    let equal = |c: usize| -> Vec<Estimate> { (1..=4).map(|n| rps(&of(runs, n, &vec![1; n], c))).collect() };
    let series: Vec<Series> = [2, 50].iter().map(|&c| Series { name: format!("concurrency {c}"), points: equal(c).iter().enumerate().map(|(i, e)| ((i + 1) as f64, e.mean)).collect() }).collect();
    if let Ok(svg) = plot::lines("Requests per second by cluster size (mean over the repeats)", "real servers", "requests/s", &series) {
        r.plot("scaling.svg", "Requests per second against the number of real servers", svg);
    }

    // Each added server, at both loads: a gain is claimed only where the test shows one.
    let mut reading = Vec::new();
    for c in [2, 50] {
        let e = equal(c);
        for n in 1..4 {
            let rate = |i: usize| Estimate::of(&e[i].values.iter().map(|v| -v).collect::<Vec<_>>());
            reading.push(format!("- concurrency {c}, {} against {n} servers: {}", n + 1, verdict(&format!("{} servers", n + 1), &rate(n), &format!("{n} servers"), &rate(n - 1), "faster", " requests/s")));
        }
    }
    r.section("Reading (requests/s; Welch's t-test over the repeats, 5% level)", &reading.join("\n"));

    let high = equal(50);
    let gains = high.windows(2).all(|w| w[1].mean > w[0].mean && (w[0].n() < 2 || welch(&w[0], &w[1]).significant));
    r.check(
        "more servers give more requests/s at concurrency 50",
        gains,
        format!("req/s with 1 to 4 servers: {}", high.iter().map(|e| e.show(0)).collect::<Vec<_>>().join(", ")),
    );
    let failed: usize = runs.iter().map(|x| x.samples.len() - x.ok()).sum();
    r.check("no request failed", failed == 0, format!("{failed} failed"));
    let weighted: Vec<Vec<usize>> = runs.iter().filter(|x| x.weights == [3, 1]).map(Run::per_server).collect();
    if !weighted.is_empty() {
        // Every repeat: a split is exact or it is not.
        let within = weighted.iter().all(|p| (p[0] as f64 / (p[0] + p[1]).max(1) as f64 - 0.75).abs() <= 0.01);
        r.check("weights 3:1 give the first server 75% (within 1%)", within, format!("per repeat: {weighted:?}"));
    }

    for (n, weights, c) in configs(runs) {
        r.estimate(format!("{n}servers.{}.c{c}.requests_per_s", joined(&weights)), &rps(&of(runs, n, &weights, c)));
    }
    r.raw = json!({
        "repeats": ctx.repeat,
        "runs": runs.iter().map(|x| json!({
            "servers": x.servers,
            "weights": x.weights,
            "concurrency": x.concurrency,
            "repeat": x.repeat,
            "requests": x.samples.len(),
            "failed": x.samples.len() - x.ok(),
            "seconds": x.wall.as_secs_f64(),
            "requests_per_s": x.rps(),
            "per_server": x.per_server(),
        })).collect::<Vec<_>>(),
    });
    r
}
