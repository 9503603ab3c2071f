//! `haproxy`: the HAProxy paper's load test. Two real servers of the same make, Fulcrum in HTTP
//! mode, 10,000 POST requests at 100 concurrent (as `ab -n 10000 -c 100 -p`), once with round robin,
//! static round robin (weights 2:1) and least connections. Reported as its Table 2: mean, maximum,
//! minimum and spread of the response time, requests/s, KB/s, error %, Fulcrum's CPU and memory,
//! and the requests each server got (its Figures 9, 13 and 17). Each algorithm runs `--repeat`
//! times; the table gives each figure's mean over the repeats with its 95% confidence interval,
//! and the reading ranks two algorithms only where Welch's t-test separates them.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::{Fulcrum, Usage};
use super::report::{Report, Summary, Table};
use super::stats::{Estimate, verdict};
use super::{Ctx, served_by, service_toml, start_backends};

const ALGORITHMS: [(&str, [u32; 2]); 3] = [("round-robin", [1, 1]), ("static-rr", [2, 1]), ("least-conn", [1, 1])];
const CONCURRENCY: usize = 100;
const BODY: usize = 1024;

struct Run {
    algorithm: &'static str,
    weights: [u32; 2],
    repeat: usize,
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
    // Repeats outermost, so a drift of the machine over the run spreads over every algorithm.
    for repeat in 0..ctx.repeat {
        for (algorithm, weights) in ALGORITHMS {
            let backends = start_backends("server", 2, &["--jitter-ms".into(), "4".into()])?;
            let servers: Vec<_> = backends.iter().zip(weights).map(|(b, w)| (b.addr, w)).collect();
            let f = Fulcrum::start(&ctx.work, &format!("haproxy-{algorithm}-{repeat}"), &service_toml("http", algorithm, &servers, ""))?;
            let before = f.proc.usage();
            let pb = ctx.progress(Some(total as u64), &format!("haproxy {algorithm}, repeat {}", repeat + 1));
            let (samples, wall) = client::fixed(total, CONCURRENCY, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
            pb.finish_and_clear();
            let fulcrum = f.proc.usage();
            let r = Run { algorithm, weights, repeat, samples, wall, fulcrum, fulcrum_cpu: fulcrum.cpu_secs - before.cpu_secs };
            eprintln!("haproxy {algorithm}, repeat {}: {:.0} req/s, mean {:.1} ms, per server {:?}, {} failed", repeat + 1, total as f64 / wall.as_secs_f64(), r.times().mean, r.per_server(), r.failed());
            runs.push(r);
        }
    }
    Ok(report(ctx, total, &runs))
}

impl Run {
    fn per_second(&self) -> f64 {
        self.samples.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// One algorithm's figure over its repeats.
fn over(runs: &[Run], algorithm: &str, figure: impl Fn(&Run) -> f64) -> Estimate {
    Estimate::of(&runs.iter().filter(|x| x.algorithm == algorithm).map(figure).collect::<Vec<_>>())
}

fn report(ctx: &Ctx, total: usize, runs: &[Run]) -> Report {
    let mut r = Report::new("haproxy", ctx.quick, ctx.seed);
    r.section(
        "Setup",
        &format!(
            "Two real servers (`fulcrum backend --jitter-ms 4`: 0 to 4 ms per request), Fulcrum in HTTP mode, {total} POSTs of {BODY} bytes \
             at {CONCURRENCY} concurrent, each on a new connection from 127.0.0.11 to .20 in turn (`ab -n {total} -c {CONCURRENCY}`). \
             static-rr weighs the servers 2:1. Each algorithm ran {} times (fresh servers and Fulcrum each time; the load has no \
             random choice, so repeats differ by the machine's timing alone); figures are the mean over the repeats ± the half \
             width of its 95% confidence interval.",
            ctx.repeat
        ),
    );
    let mut t = Table::new(["Algorithm", "Mean ms", "Max ms", "Min ms", "Std dev ms", "Requests/s", "KB/s", "Errors %", "Fulcrum CPU %", "Fulcrum peak MiB", "server1 / server2"]);
    for (algorithm, _) in ALGORITHMS {
        let e = |f: &dyn Fn(&Run) -> f64, digits: usize| over(runs, algorithm, f).show(digits);
        let split: [usize; 2] = runs.iter().filter(|x| x.algorithm == algorithm).fold([0, 0], |[a, b], x| {
            let [c, d] = x.per_server();
            [a + c, b + d]
        });
        t.row([
            algorithm.to_string(),
            e(&|x| x.times().mean, 2),
            e(&|x| x.times().max, 1),
            e(&|x| x.times().min, 2),
            e(&|x| x.times().std, 2),
            e(&Run::per_second, 0),
            e(&|x| x.samples.iter().map(|s| s.bytes).sum::<u64>() as f64 / 1024.0 / x.wall.as_secs_f64().max(1e-9), 0),
            e(&|x| x.failed() as f64 * 100.0 / x.samples.len().max(1) as f64, 2),
            e(&|x| x.fulcrum_cpu / x.wall.as_secs_f64().max(1e-9) * 100.0, 1),
            e(&|x| x.fulcrum.peak_rss_kib as f64 / 1024.0, 1),
            format!("{} / {}", split[0], split[1]),
        ]);
    }
    r.section("Table 2. Results per algorithm (server split summed over the repeats)", &t.markdown());

    // The reading: every pair, by mean time and by rate, ranked only where the test separates them.
    let mut reading = Vec::new();
    for (i, (a, _)) in ALGORITHMS.iter().enumerate() {
        for (b, _) in &ALGORITHMS[i + 1..] {
            reading.push(format!("- mean time: {}", verdict(a, &over(runs, a, |x| x.times().mean), b, &over(runs, b, |x| x.times().mean), "faster", " ms")));
            // Higher is better for a rate: the verdict is asked of its negation.
            let rate = |name: &str| over(runs, name, |x| -x.per_second());
            reading.push(format!("- requests/s: {}", verdict(a, &rate(a), b, &rate(b), "faster", " requests/s")));
        }
    }
    r.section("Reading (Welch's t-test over the repeats, 5% level)", &reading.join("\n"));

    let curves: Vec<Series> = runs
        .iter()
        .filter(|x| x.repeat == 0)
        .map(|x| {
            let mut v: Vec<f64> = x.samples.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1);
            let points = (0..=100).filter_map(|p| v.get(((p as f64 / 100.0) * (n - 1) as f64).round() as usize).map(|&ms| (p as f64, ms))).collect();
            Series { name: x.algorithm.into(), points }
        })
        .collect();
    if let Ok(svg) = plot::lines("Response time by percentile", "percentile", "ms", &curves) {
        r.plot("response-percentiles.svg", "Response time by percentile per algorithm (first repeat)", svg);
    }

    let failed: usize = runs.iter().map(Run::failed).sum();
    r.check("no request failed", failed == 0, format!("{failed} of {}", runs.len() * total));
    for (algorithm, weights) in ALGORITHMS {
        if algorithm != "least-conn" {
            // Every repeat: a split is exact or it is not, there is no noise to average away.
            let want = weights[0] as f64 / (weights[0] + weights[1]) as f64;
            let splits: Vec<[usize; 2]> = runs.iter().filter(|x| x.algorithm == algorithm).map(Run::per_server).collect();
            let within = splits.iter().all(|[a, b]| (*a as f64 / (a + b).max(1) as f64 - want).abs() <= 0.01);
            r.check(
                &format!("{algorithm} spreads requests within 1% of its weights"),
                within,
                format!("server1 / server2 per repeat: {}; weights want {:.2}% to server1", splits.iter().map(|[a, b]| format!("{a} / {b}")).collect::<Vec<_>>().join(", "), want * 100.0),
            );
        }
        r.estimate(format!("{algorithm}.requests_per_s"), &over(runs, algorithm, Run::per_second));
        r.estimate(format!("{algorithm}.mean_ms"), &over(runs, algorithm, |x| x.times().mean));
        r.estimate(format!("{algorithm}.fulcrum_cpu_s"), &over(runs, algorithm, |x| x.fulcrum_cpu));
    }
    r.raw = json!({
        "requests": total,
        "concurrency": CONCURRENCY,
        "body_bytes": BODY,
        "repeats": ctx.repeat,
        "estimates": ALGORITHMS.iter().map(|(a, _)| json!({
            "algorithm": a,
            "mean_ms": over(runs, a, |x| x.times().mean),
            "requests_per_s": over(runs, a, Run::per_second),
            "fulcrum_cpu_s": over(runs, a, |x| x.fulcrum_cpu),
        })).collect::<Vec<_>>(),
        "runs": runs.iter().map(|x| json!({
            "algorithm": x.algorithm,
            "weights": x.weights,
            "repeat": x.repeat,
            "seconds": x.wall.as_secs_f64(),
            "response_ms": x.times(),
            "failed": x.failed(),
            "per_server": x.per_server(),
            "fulcrum": {"cpu_secs": x.fulcrum_cpu, "peak_rss_kib": x.fulcrum.peak_rss_kib},
        })).collect::<Vec<_>>(),
    });
    r
}
