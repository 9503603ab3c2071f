//! `haproxy`: the HAProxy paper's load test. Two real servers of the same make, Fulcrum in HTTP
//! mode, POST requests as `ab -n 10000 -c C -p` sends them, with round robin, static round robin
//! and least connections, in two setups: today's variant (100 concurrent, static-rr weighing the
//! servers 2:1 to show what weights do) and the paper's own (static-rr 1:1 as it ran it, and the
//! concurrency closest to its 10,000 JMeter threads that a 2-core machine holds: 1,000).
//! Reported as its Table 2 per setup: mean, maximum, minimum and spread of the response time,
//! requests/s, KB/s, error %, Fulcrum's CPU and memory, and the requests each server got (its
//! Figures 9, 13 and 17). Each configuration runs `--repeat` times; the tables give each figure's
//! mean over the repeats with its 95% confidence interval, and the reading ranks two algorithms
//! of a setup only where Welch's t-test separates them.

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::{Fulcrum, Usage};
use super::report::{Report, Summary, Table};
use super::stats::{self, Design, Estimate};
use super::{Ctx, served_by, service_toml, start_backends};

/// One configuration: its name in the report, the algorithm, the servers' weights, the
/// concurrency, and the setup it belongs to.
#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    algorithm: &'static str,
    weights: [u32; 2],
    concurrency: usize,
    setup: Setup,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    Today,
    Paper,
}

/// The most concurrent clients of the paper's setup here: its 10,000 JMeter threads would put
/// 30,000 sockets and the client's 10,000 tasks on the same two cores as Fulcrum and both
/// servers, and the times would measure the client. A thousand is ten times today's variant.
const PAPER_CONCURRENCY: usize = 1_000;

const CONFIGS: [Config; 6] = [
    Config { name: "round-robin", algorithm: "round-robin", weights: [1, 1], concurrency: 100, setup: Setup::Today },
    Config { name: "static-rr", algorithm: "static-rr", weights: [2, 1], concurrency: 100, setup: Setup::Today },
    Config { name: "least-conn", algorithm: "least-conn", weights: [1, 1], concurrency: 100, setup: Setup::Today },
    Config { name: "paper-round-robin", algorithm: "round-robin", weights: [1, 1], concurrency: PAPER_CONCURRENCY, setup: Setup::Paper },
    Config { name: "paper-static-rr", algorithm: "static-rr", weights: [1, 1], concurrency: PAPER_CONCURRENCY, setup: Setup::Paper },
    Config { name: "paper-least-conn", algorithm: "least-conn", weights: [1, 1], concurrency: PAPER_CONCURRENCY, setup: Setup::Paper },
];
const BODY: usize = 1024;

struct Run {
    config: Config,
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
        for config in CONFIGS {
            let name = config.name;
            let backends = start_backends("server", 2, &["--jitter-ms".into(), "4".into()])?;
            let servers: Vec<_> = backends.iter().zip(config.weights).map(|(b, w)| (b.addr, w)).collect();
            let f = Fulcrum::start(&ctx.work, &format!("haproxy-{name}-{repeat}"), &service_toml("http", config.algorithm, &servers, ""))?;
            let before = f.proc.usage();
            let pb = ctx.progress(Some(total as u64), &format!("haproxy {name}, repeat {}", repeat + 1));
            let (samples, wall) =
                client::fixed(total, config.concurrency, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
            pb.finish_and_clear();
            let fulcrum = f.proc.usage();
            let r = Run { config, repeat, samples, wall, fulcrum, fulcrum_cpu: fulcrum.cpu_secs - before.cpu_secs };
            eprintln!(
                "haproxy {name}, repeat {}: {:.0} req/s, mean {:.1} ms, per server {:?}, {} failed",
                repeat + 1,
                total as f64 / wall.as_secs_f64(),
                r.times().mean,
                r.per_server(),
                r.failed()
            );
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

/// One configuration's figure over its repeats.
fn over(runs: &[Run], name: &str, figure: impl Fn(&Run) -> f64) -> Estimate {
    stats::over(runs, |x| x.config.name == name, figure)
}

fn report(ctx: &Ctx, total: usize, runs: &[Run]) -> Report {
    let mut r = Report::new("haproxy", ctx.quick, ctx.seed);
    r.condition("requests per configuration and repeat", total);
    r.condition("request", format!("POST of {BODY} bytes on a new connection"));
    r.condition("concurrency", format!("100 (today's variant), {PAPER_CONCURRENCY} (the paper's setup)"));
    r.condition("repeats", ctx.repeat);
    r.deviation(&format!("{PAPER_CONCURRENCY} concurrent clients where the paper ran 10,000 JMeter threads: this machine's two cores also run Fulcrum and both servers."));
    r.deviation("Fulcrum runs the paper's algorithms; the paper measured HAProxy itself.");
    r.deviation("The clients, Fulcrum and the real servers share one machine.");
    r.section(
        "Setup",
        &format!(
            "Two real servers (`fulcrum backend --jitter-ms 4`: 0 to 4 ms per request), Fulcrum in HTTP mode, {total} POSTs of {BODY} bytes \
             each on a new connection from 127.0.0.11 to .20 in turn (`ab -n {total} -c C`). Two setups: today's variant, 100 \
             concurrent with static-rr weighing the servers 2:1; and the paper's, static-rr 1:1 as it ran it, at {PAPER_CONCURRENCY} \
             concurrent, the closest to its 10,000 JMeter threads that this machine holds (10,000 would put 30,000 sockets and the \
             client's 10,000 tasks on the cores that run Fulcrum and both servers, and the times would measure the client). Each \
             configuration ran {} times (fresh servers and Fulcrum each time; the load has no random choice, so repeats differ by the \
             machine's timing alone); figures are the mean over the repeats ± the half width of its 95% confidence interval.",
            ctx.repeat
        ),
    );
    let mut reading = Vec::new();
    for (setup, title) in [
        (Setup::Paper, format!("Table 2. Results per algorithm, the paper's setup ({PAPER_CONCURRENCY} concurrent, static-rr 1:1)")),
        (Setup::Today, "Table 2, today's variant (100 concurrent, static-rr 2:1)".to_string()),
    ] {
        let configs: Vec<Config> = CONFIGS.into_iter().filter(|c| c.setup == setup).collect();
        let mut t = Table::new([
            "Algorithm",
            "Mean ms",
            "Max ms",
            "Min ms",
            "Std dev ms",
            "Requests/s",
            "KB/s",
            "Errors %",
            "Fulcrum CPU %",
            "Fulcrum peak MiB",
            "server1 / server2 (all repeats)",
        ]);
        for c in &configs {
            let e = |f: &dyn Fn(&Run) -> f64, digits: usize| over(runs, c.name, f).show(digits);
            let split: [usize; 2] = runs.iter().filter(|x| x.config.name == c.name).fold([0, 0], |[a, b], x| {
                let [p, q] = x.per_server();
                [a + p, b + q]
            });
            t.row([
                c.algorithm.to_string(),
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
        r.section(&title, &t.markdown());
        // Every pair of the setup, by mean time and by rate, ranked only where the test separates them.
        let label = if setup == Setup::Paper { "paper's setup" } else { "today's variant" };
        for (i, a) in configs.iter().enumerate() {
            for b in &configs[i + 1..] {
                let time = |c: &Config| over(runs, c.name, |x| x.times().mean);
                reading.push(format!("- {label}, mean time: {}", r.tests.verdict(a.algorithm, &time(a), b.algorithm, &time(b), Design::Independent, "faster", " ms")));
                // Higher is better for a rate: the verdict is asked of its negation.
                let rate = |c: &Config| over(runs, c.name, |x| -x.per_second());
                reading.push(format!("- {label}, requests/s: {}", r.tests.verdict(a.algorithm, &rate(a), b.algorithm, &rate(b), Design::Independent, "faster", " requests/s")));
            }
        }
    }
    r.section("Reading (Welch's t-test over the repeats; Holm's correction over the report)", &reading.join("\n"));

    let curves: Vec<Series> = runs
        .iter()
        .filter(|x| x.repeat == 0)
        .map(|x| {
            let mut v: Vec<f64> = x.samples.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1);
            let points = (0..=100).filter_map(|p| v.get(((p as f64 / 100.0) * (n - 1) as f64).round() as usize).map(|&ms| (p as f64, ms))).collect();
            Series { name: x.config.name.into(), points }
        })
        .collect();
    if let Ok(svg) = plot::lines("Response time by percentile", "percentile", "ms", &curves) {
        r.plot("response-percentiles.svg", "Response time by percentile per configuration (first repeat)", svg);
    }

    let failed: usize = runs.iter().map(Run::failed).sum();
    r.check("no request failed", failed == 0, format!("{failed} of {}", runs.len() * total));
    for c in CONFIGS {
        if c.algorithm != "least-conn" {
            // Every repeat: a split is exact or it is not, there is no noise to average away.
            let want = c.weights[0] as f64 / (c.weights[0] + c.weights[1]) as f64;
            let splits: Vec<[usize; 2]> = runs.iter().filter(|x| x.config.name == c.name).map(Run::per_server).collect();
            let within = splits.iter().all(|[a, b]| (*a as f64 / (a + b).max(1) as f64 - want).abs() <= 0.01);
            r.check(
                &format!("{} spreads requests within 1% of its weights {}:{}", c.name, c.weights[0], c.weights[1]),
                within,
                format!(
                    "server1 / server2 per repeat: {}; weights want {:.2}% to server1",
                    splits.iter().map(|[a, b]| format!("{a} / {b}")).collect::<Vec<_>>().join(", "),
                    want * 100.0
                ),
            );
        }
        r.estimate(format!("{}.requests_per_s", c.name), &over(runs, c.name, Run::per_second));
        r.estimate(format!("{}.mean_ms", c.name), &over(runs, c.name, |x| x.times().mean));
        r.estimate(format!("{}.fulcrum_cpu_s", c.name), &over(runs, c.name, |x| x.fulcrum_cpu));
    }
    r.raw = json!({
        "requests": total,
        "body_bytes": BODY,
        "repeats": ctx.repeat,
        "estimates": CONFIGS.iter().map(|c| json!({
            "name": c.name,
            "algorithm": c.algorithm,
            "concurrency": c.concurrency,
            "mean_ms": over(runs, c.name, |x| x.times().mean),
            "requests_per_s": over(runs, c.name, Run::per_second),
            "fulcrum_cpu_s": over(runs, c.name, |x| x.fulcrum_cpu),
        })).collect::<Vec<_>>(),
        "runs": runs.iter().map(|x| json!({
            "name": x.config.name,
            "algorithm": x.config.algorithm,
            "weights": x.config.weights,
            "concurrency": x.config.concurrency,
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
