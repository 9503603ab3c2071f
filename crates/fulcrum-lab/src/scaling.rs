//! `scaling`: the JServ cluster article's benchmark. 1, 2, 3 and 4 real servers behind Fulcrum
//! (HTTP mode, round robin) at concurrency 2 (10 requests) and 50 (500 requests), then two servers
//! weighted 3:1. Each real server does real work per request: it has four workers, and a request
//! holds one for 0.5 ms of CPU and 20 ms of waiting (a servlet and its database), so a server
//! answers about 190 requests a second however many cores the machine has.

use std::time::Duration;

use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::Fulcrum;
use super::report::{Report, Table, fmt};
use super::{Ctx, served_by, service_toml, start_backends};

const WORK: [&str; 6] = ["--workers", "4", "--cpu-us", "500", "--delay-ms", "20"];

struct Run {
    servers: usize,
    weights: Vec<u32>,
    concurrency: usize,
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
    let pb = ctx.progress(Some(plan.iter().map(|p| p.3 as u64).sum()), "scaling");
    let mut runs = Vec::new();
    for (n, weights, concurrency, total) in plan {
        pb.set_message(format!("scaling {n} servers {weights:?} c={concurrency}"));
        let backends = start_backends("node", n, &work)?;
        let servers: Vec<_> = backends.iter().zip(&weights).map(|(b, w)| (b.addr, *w)).collect();
        let algorithm = if weights.iter().all(|w| *w == 1) { "round-robin" } else { "static-rr" };
        let f = Fulcrum::start(&ctx.work, &format!("scaling-{n}-{concurrency}-{}", weights.iter().map(u32::to_string).collect::<Vec<_>>().join("-")), &service_toml("http", algorithm, &servers, ""))?;
        let (samples, wall) = client::fixed(total, concurrency, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
        let r = Run { servers: n, weights, concurrency, samples, wall };
        pb.suspend(|| eprintln!("scaling {} servers {:?} at c={}: {:.0} req/s, {} failed, per server {:?}", n, r.weights, concurrency, r.rps(), r.samples.len() - r.ok(), r.per_server()));
        runs.push(r);
    }
    pb.finish_and_clear();
    Ok(report(ctx, &runs))
}

fn report(ctx: &Ctx, runs: &[Run]) -> Report {
    let mut r = Report::new("scaling", ctx.quick, ctx.seed);
    r.section(
        "Setup",
        "Real servers `fulcrum backend --workers 4 --cpu-us 500 --delay-ms 20`; Fulcrum in HTTP mode with round robin (static-rr for \
         the weighted case); each request a GET on a new connection from 127.0.0.11 to .20 in turn, `ab -n N -c C` style.",
    );
    let mut t = Table::new(["Servers", "Weights", "Concurrency", "Requests", "Failed", "Requests/s", "Per server"]);
    for x in runs {
        t.row([
            x.servers.to_string(),
            x.weights.iter().map(u32::to_string).collect::<Vec<_>>().join(":"),
            x.concurrency.to_string(),
            x.samples.len().to_string(),
            (x.samples.len() - x.ok()).to_string(),
            fmt(x.rps()),
            x.per_server().iter().map(usize::to_string).collect::<Vec<_>>().join(" / "),
        ]);
    }
    r.section("Requests per second by cluster size", &t.markdown());

    let equal = |c: usize| -> Vec<&Run> { runs.iter().filter(|x| x.concurrency == c && x.weights.iter().all(|w| *w == 1)).collect() };
    let series: Vec<Series> = [2, 50].iter().map(|&c| Series { name: format!("concurrency {c}"), points: equal(c).iter().map(|x| (x.servers as f64, x.rps())).collect() }).collect();
    if let Ok(svg) = plot::lines("Requests per second by cluster size", "real servers", "requests/s", &series) {
        r.plot("scaling.svg", "Requests per second against the number of real servers", svg);
    }

    let high: Vec<f64> = equal(50).iter().map(|x| x.rps()).collect();
    r.check(
        "more servers give more requests/s at concurrency 50",
        high.windows(2).all(|w| w[1] > w[0]),
        format!("req/s with 1 to 4 servers: {:?}", high.iter().map(|v| v.round()).collect::<Vec<_>>()),
    );
    let failed: usize = runs.iter().map(|x| x.samples.len() - x.ok()).sum();
    r.check("no request failed", failed == 0, format!("{failed} failed"));
    if let Some(w) = runs.iter().find(|x| x.weights == [3, 1]) {
        let p = w.per_server();
        let share = p[0] as f64 / (p[0] + p[1]).max(1) as f64;
        r.check("weights 3:1 give the first server 75% (within 1%)", (share - 0.75).abs() <= 0.01, format!("{p:?}: {:.1}%", share * 100.0));
    }

    for x in runs {
        let w = x.weights.iter().map(u32::to_string).collect::<Vec<_>>().join(":");
        r.figure(format!("{}servers.{w}.c{}.requests_per_s", x.servers, x.concurrency), x.rps());
    }
    r.raw = json!({
        "runs": runs.iter().map(|x| json!({
            "servers": x.servers,
            "weights": x.weights,
            "concurrency": x.concurrency,
            "requests": x.samples.len(),
            "failed": x.samples.len() - x.ok(),
            "seconds": x.wall.as_secs_f64(),
            "requests_per_s": x.rps(),
            "per_server": x.per_server(),
        })).collect::<Vec<_>>(),
    });
    r
}
