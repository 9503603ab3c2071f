//! `haproxy`: the HAProxy paper's load test. Two real servers of the same make, Fulcrum in HTTP
//! mode, 10,000 POST requests at 100 concurrent (as `ab -n 10000 -c 100 -p`), once with round robin,
//! static round robin (weights 2:1) and least connections. Reported as its Table 2: mean, maximum,
//! minimum and spread of the response time, requests/s, KB/s, error %, Fulcrum's CPU and memory,
//! and the requests each server got (its Figures 9, 13 and 17).

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::{Fulcrum, Usage};
use super::report::{Report, Summary, Table, fmt};
use super::{Ctx, served_by, service_toml, start_backends};

const ALGORITHMS: [(&str, [u32; 2]); 3] = [("round-robin", [1, 1]), ("static-rr", [2, 1]), ("least-conn", [1, 1])];
const CONCURRENCY: usize = 100;
const BODY: usize = 1024;

struct Run {
    algorithm: &'static str,
    weights: [u32; 2],
    samples: Vec<Sample>,
    wall: Duration,
    fulcrum: Usage,
    fulcrum_cpu: f64,
}

impl Run {
    fn times(&self) -> Summary {
        Summary::of(&self.samples.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect::<Vec<_>>())
    }

    fn failed(&self) -> usize {
        self.samples.iter().filter(|s| !s.ok()).count()
    }

    fn per_server(&self) -> [usize; 2] {
        let by = served_by(&self.samples);
        [by.get("server1").copied().unwrap_or(0), by.get("server2").copied().unwrap_or(0)]
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Report> {
    let total = if ctx.quick { 1_000 } else { 10_000 };
    let body: Bytes = (0..BODY).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>().into();
    let link = Link { method: Method::POST, path: "/submit".into(), body };
    let sources = client::sources(10);
    let mut runs = Vec::new();
    for (algorithm, weights) in ALGORITHMS {
        let backends = start_backends("server", 2, &["--jitter-ms".into(), "4".into()])?;
        let servers: Vec<_> = backends.iter().zip(weights).map(|(b, w)| (b.addr, w)).collect();
        let f = Fulcrum::start(&ctx.work, &format!("haproxy-{algorithm}"), &service_toml("http", algorithm, &servers, ""))?;
        let before = f.proc.usage();
        let pb = ctx.progress(Some(total as u64), &format!("haproxy {algorithm}"));
        let (samples, wall) = client::fixed(total, CONCURRENCY, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
        pb.finish_and_clear();
        let fulcrum = f.proc.usage();
        let r = Run { algorithm, weights, samples, wall, fulcrum, fulcrum_cpu: fulcrum.cpu_secs - before.cpu_secs };
        eprintln!("haproxy {algorithm}: {:.0} req/s, mean {:.1} ms, per server {:?}, {} failed", total as f64 / wall.as_secs_f64(), r.times().mean, r.per_server(), r.failed());
        runs.push(r);
    }
    Ok(report(ctx, total, &runs))
}

fn report(ctx: &Ctx, total: usize, runs: &[Run]) -> Report {
    let mut r = Report::new("haproxy", ctx.quick, ctx.seed);
    r.section(
        "Setup",
        &format!(
            "Two real servers (`fulcrum backend --jitter-ms 4`: 0 to 4 ms per request), Fulcrum in HTTP mode, {total} POSTs of {BODY} bytes \
             at {CONCURRENCY} concurrent, each on a new connection from 127.0.0.11 to .20 in turn (`ab -n {total} -c {CONCURRENCY}`). \
             static-rr weighs the servers 2:1."
        ),
    );
    let mut t = Table::new(["Algorithm", "Mean ms", "Max ms", "Min ms", "Std dev ms", "Requests/s", "KB/s", "Errors %", "Fulcrum CPU %", "Fulcrum peak MiB", "server1 / server2"]);
    for x in runs {
        let s = x.times();
        let secs = x.wall.as_secs_f64().max(1e-9);
        let bytes: u64 = x.samples.iter().map(|s| s.bytes).sum();
        let [a, b] = x.per_server();
        t.row([
            x.algorithm.to_string(),
            fmt(s.mean),
            fmt(s.max),
            fmt(s.min),
            fmt(s.std),
            fmt(x.samples.len() as f64 / secs),
            fmt(bytes as f64 / 1024.0 / secs),
            format!("{:.2}", x.failed() as f64 * 100.0 / x.samples.len().max(1) as f64),
            fmt(x.fulcrum_cpu / secs * 100.0),
            format!("{:.1}", x.fulcrum.peak_rss_kib as f64 / 1024.0),
            format!("{a} / {b}"),
        ]);
    }
    r.section("Table 2. Results per algorithm", &t.markdown());

    let curves: Vec<Series> = runs
        .iter()
        .map(|x| {
            let mut v: Vec<f64> = x.samples.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1);
            let points = (0..=100).filter_map(|p| v.get(((p as f64 / 100.0) * (n - 1) as f64).round() as usize).map(|&ms| (p as f64, ms))).collect();
            Series { name: x.algorithm.into(), points }
        })
        .collect();
    if let Ok(svg) = plot::lines("Response time by percentile", "percentile", "ms", &curves) {
        r.plot("response-percentiles.svg", "Response time by percentile per algorithm", svg);
    }

    let failed: usize = runs.iter().map(Run::failed).sum();
    r.check("no request failed", failed == 0, format!("{failed} of {}", runs.len() * total));
    for x in runs {
        let [a, b] = x.per_server();
        let share = a as f64 / (a + b).max(1) as f64;
        let want = x.weights[0] as f64 / (x.weights[0] + x.weights[1]) as f64;
        if x.algorithm != "least-conn" {
            r.check(
                &format!("{} spreads requests within 1% of its weights", x.algorithm),
                (share - want).abs() <= 0.01,
                format!("server1 {a}, server2 {b}: {:.2}% to server1, weights want {:.2}%", share * 100.0, want * 100.0),
            );
        }
        r.figure(format!("{}.requests_per_s", x.algorithm), x.samples.len() as f64 / x.wall.as_secs_f64().max(1e-9));
        r.figure(format!("{}.mean_ms", x.algorithm), x.times().mean);
        r.figure(format!("{}.fulcrum_cpu_s", x.algorithm), x.fulcrum_cpu);
    }
    r.raw = json!({
        "requests": total,
        "concurrency": CONCURRENCY,
        "body_bytes": BODY,
        "runs": runs.iter().map(|x| json!({
            "algorithm": x.algorithm,
            "weights": x.weights,
            "seconds": x.wall.as_secs_f64(),
            "response_ms": x.times(),
            "failed": x.failed(),
            "per_server": x.per_server(),
            "fulcrum": {"cpu_secs": x.fulcrum_cpu, "peak_rss_kib": x.fulcrum.peak_rss_kib},
        })).collect::<Vec<_>>(),
    });
    r
}
