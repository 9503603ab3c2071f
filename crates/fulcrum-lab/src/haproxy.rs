//! `haproxy`: the HAProxy paper's load test. Two real servers of the same make (each request
//! costs them 0.5 ms of CPU and 0 to 4 ms of waiting), POST requests as `ab -n 10000 -c C -p`
//! sends them, with round robin, static round robin and least connections, in two setups: today's
//! variant (100 concurrent, static-rr weighing the servers 2:1 to show what weights do) and the
//! paper's own (static-rr 1:1 as it ran it, and the concurrency closest to its 10,000 JMeter
//! threads that a 2-core machine holds: 1,000). Every configuration runs twice on the same
//! servers: through Fulcrum in HTTP mode and through HAProxy itself, so the paper's algorithms
//! are compared in both implementations. Reported as its Table 2 per setup: mean, maximum,
//! minimum and spread of the response time, requests/s, KB/s, error %, the balancer's CPU and
//! memory, and the requests each server got (its Figures 9, 13 and 17). Each configuration runs
//! `--repeat` times; the tables give each figure's mean over the repeats with its 95% confidence
//! interval, and the reading ranks two only where the test separates them after Holm's correction.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::client::{self, Link, Sample, Traffic};
use super::plot::{self, Series};
use super::procs::{Fulcrum, NotListening, Proc, Usage, await_listening};
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
/// What each request costs a real server: 0 to 4 ms of waiting and 0.5 ms of CPU, so that its
/// quota, not the client or the balancer, is what a run saturates.
const SERVER_COST: [&str; 4] = ["--jitter-ms", "4", "--cpu-us", "500"];

/// Which balancer carries a run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Implementation {
    Fulcrum,
    Haproxy,
}

const IMPLEMENTATIONS: [Implementation; 2] = [Implementation::Fulcrum, Implementation::Haproxy];

impl Implementation {
    fn name(self) -> &'static str {
        match self {
            Implementation::Fulcrum => "Fulcrum",
            Implementation::Haproxy => "HAProxy",
        }
    }
}

/// A balancer under test: where it listens and its process.
struct Front {
    listen: SocketAddr,
    proc: Proc,
}

impl Front {
    fn start(imp: Implementation, work: &Path, tag: &str, config: &Config, servers: &[(SocketAddr, u32)]) -> anyhow::Result<Front> {
        match imp {
            Implementation::Fulcrum => {
                let f = Fulcrum::start(work, tag, &service_toml("http", config.algorithm, servers, ""))?;
                Ok(Front { listen: f.listen, proc: f.proc })
            }
            Implementation::Haproxy => haproxy(work, tag, config, servers),
        }
    }
}

/// HAProxy itself in HTTP mode with the configuration's algorithm and weights, in the foreground;
/// `maxconn 8000` holds the paper setup's thousand clients and fits a limit of 20,000 descriptors
/// (HAProxy asks for two per connection and some).
fn haproxy(work: &Path, tag: &str, config: &Config, servers: &[(SocketAddr, u32)]) -> anyhow::Result<Front> {
    let bin = ["/usr/sbin/haproxy", "/usr/bin/haproxy", "/usr/local/sbin/haproxy"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("HAProxy is not installed (apt-get install haproxy)")?;
    let balance = match config.algorithm {
        "round-robin" => "roundrobin",
        "static-rr" => "static-rr",
        _ => "leastconn",
    };
    let listen = super::procs::free_addr()?;
    let mut cfg = format!(
        "global\n    maxconn 8000\n\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n\n\
         frontend lab\n    bind {listen}\n    default_backend servers\n\nbackend servers\n    balance {balance}\n"
    );
    for (i, (addr, weight)) in servers.iter().enumerate() {
        cfg.push_str(&format!("    server server{} {addr} weight {weight}\n", i + 1));
    }
    let path = work.join(format!("haproxy-{tag}.cfg"));
    std::fs::write(&path, cfg).with_context(|| format!("cannot write {}", path.display()))?;
    let log = work.join(format!("haproxy-{tag}.log"));
    let log_file = std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut proc = Proc::spawn("haproxy", Command::new(bin).arg("-db").arg("-f").arg(&path).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log_file))?;
    match await_listening(&mut proc, listen) {
        Ok(()) => {}
        Err(NotListening::Exited(status)) => {
            bail!("HAProxy exited ({status}) before listening on {listen}: {}", std::fs::read_to_string(&log).unwrap_or_default().trim_end())
        }
        Err(NotListening::TimedOut) => bail!("HAProxy did not listen on {listen} within 10 s"),
    }
    super::headroom::watch(proc.pid());
    Ok(Front { listen, proc })
}

struct Run {
    config: Config,
    implementation: Implementation,
    repeat: usize,
    samples: Vec<Sample>,
    wall: Duration,
    /// The balancer's process at the end of the run.
    balancer: Usage,
    balancer_cpu: f64,
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
        for (k, config) in CONFIGS.into_iter().enumerate() {
            let name = config.name;
            let cost: Vec<String> = SERVER_COST.iter().map(|s| s.to_string()).collect();
            let backends = start_backends("server", 2, &cost)?;
            let servers: Vec<_> = backends.iter().zip(config.weights).map(|(b, w)| (b.addr, w)).collect();
            // Both implementations on the same servers, taking turns at going first.
            let order = if (k + repeat) % 2 == 0 { IMPLEMENTATIONS } else { [IMPLEMENTATIONS[1], IMPLEMENTATIONS[0]] };
            for implementation in order {
                let f = Front::start(implementation, &ctx.work, &format!("haproxy-{name}-{}-{repeat}", implementation.name()), &config, &servers)?;
                let before = f.proc.usage();
                let pb = ctx.progress(Some(total as u64), &format!("haproxy {name} ({}), repeat {}", implementation.name(), repeat + 1));
                let (samples, wall) =
                    client::fixed(total, config.concurrency, Traffic { sources: &sources, target: f.listen, link: &link, timeout: Duration::from_secs(30) }, &pb).await;
                pb.finish_and_clear();
                let balancer = f.proc.usage();
                let r = Run { config, implementation, repeat, samples, wall, balancer, balancer_cpu: balancer.cpu_secs - before.cpu_secs };
                eprintln!(
                    "haproxy {name} through {}, repeat {}: {:.0} req/s, mean {:.1} ms, per server {:?}, {} failed",
                    implementation.name(),
                    repeat + 1,
                    total as f64 / wall.as_secs_f64(),
                    r.times().mean,
                    r.per_server(),
                    r.failed()
                );
                runs.push(r);
            }
        }
    }
    Ok(report(ctx, total, &runs))
}

impl Run {
    fn per_second(&self) -> f64 {
        self.samples.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// One configuration's figure through one implementation, over its repeats (in repeat order, so
/// two implementations' estimates pair by repeat).
fn over(runs: &[Run], imp: Implementation, name: &str, figure: impl Fn(&Run) -> f64) -> Estimate {
    stats::over(runs, |x| x.implementation == imp && x.config.name == name, figure)
}

fn report(ctx: &Ctx, total: usize, runs: &[Run]) -> Report {
    let mut r = Report::new("haproxy", ctx.quick, ctx.seed);
    r.condition("requests per configuration, implementation and repeat", total);
    r.condition("request", format!("POST of {BODY} bytes on a new connection"));
    r.condition("concurrency", format!("100 (today's variant), {PAPER_CONCURRENCY} (the paper's setup)"));
    r.condition("real server cost per request", "0.5 ms of CPU (counted on the thread's CPU clock) and 0 to 4 ms of waiting");
    r.condition("repeats", ctx.repeat);
    r.deviation(&format!("{PAPER_CONCURRENCY} concurrent clients where the paper ran 10,000 JMeter threads: the clients run on this machine beside the balancer, and 10,000 connections through a balancer need 20,000 descriptors and more, past this machine's limit of 20,000{}.", if ctx.paper { " (`--paper` changes nothing here)" } else { "" }));
    r.deviation("The real servers are `fulcrum backend` with a fixed CPU cost per request, not the paper's web servers.");
    r.deviation(super::host::deviation());
    r.section(
        "Setup",
        &format!(
            "Two real servers (`fulcrum backend --jitter-ms 4 --cpu-us 500`: 0 to 4 ms of waiting and 0.5 ms of CPU per request), \
             {total} POSTs of {BODY} bytes each on a new connection from 127.0.0.11 to .20 in turn (`ab -n {total} -c C`), through \
             Fulcrum in HTTP mode and through HAProxy itself (`balance roundrobin`, `static-rr`, `leastconn`, the same weights, HTTP \
             mode, its defaults otherwise), on the same servers, the two taking turns at going first. Two setups: today's variant, \
             100 concurrent with static-rr weighing the servers 2:1; and the paper's, static-rr 1:1 as it ran it, at \
             {PAPER_CONCURRENCY} concurrent, the closest to its 10,000 JMeter threads that this machine holds (10,000 would put \
             30,000 sockets and the client's 10,000 tasks on the cores that run the balancer, and the times would measure the \
             client). Each configuration ran {} times (fresh servers each time; the load has no random choice, so repeats differ by \
             the machine's timing alone); figures are the mean over the repeats ± the half width of its 95% confidence interval.",
            ctx.repeat
        ),
    );
    let mut reading = Vec::new();
    let time = |imp: Implementation, c: &Config| over(runs, imp, c.name, |x| x.times().mean);
    // Higher is better for a rate: the verdict is asked of its negation.
    let rate = |imp: Implementation, c: &Config| over(runs, imp, c.name, |x| -x.per_second());
    for (setup, title) in [
        (Setup::Paper, format!("Table 2. Results per algorithm, the paper's setup ({PAPER_CONCURRENCY} concurrent, static-rr 1:1)")),
        (Setup::Today, "Table 2, today's variant (100 concurrent, static-rr 2:1)".to_string()),
    ] {
        let configs: Vec<Config> = CONFIGS.into_iter().filter(|c| c.setup == setup).collect();
        let mut t = Table::new([
            "Algorithm",
            "Balancer",
            "Mean ms",
            "Max ms",
            "Min ms",
            "Std dev ms",
            "Requests/s",
            "KB/s",
            "Errors %",
            "Balancer CPU %",
            "Balancer peak MiB",
            "server1 / server2 (all repeats)",
        ]);
        for c in &configs {
            for imp in IMPLEMENTATIONS {
                let e = |f: &dyn Fn(&Run) -> f64, digits: usize| over(runs, imp, c.name, f).show(digits);
                let split = split(runs, imp, c.name);
                t.row([
                    c.algorithm.to_string(),
                    imp.name().to_string(),
                    e(&|x| x.times().mean, 2),
                    e(&|x| x.times().max, 1),
                    e(&|x| x.times().min, 2),
                    e(&|x| x.times().std, 2),
                    e(&Run::per_second, 0),
                    e(&|x| x.samples.iter().map(|s| s.bytes).sum::<u64>() as f64 / 1024.0 / x.wall.as_secs_f64().max(1e-9), 0),
                    e(&|x| x.failed() as f64 * 100.0 / x.samples.len().max(1) as f64, 2),
                    e(&|x| x.balancer_cpu / x.wall.as_secs_f64().max(1e-9) * 100.0, 1),
                    e(&|x| x.balancer.peak_rss_kib as f64 / 1024.0, 1),
                    format!("{} / {}", split[0], split[1]),
                ]);
            }
        }
        r.section(&title, &t.markdown());
        // Every pair of algorithms within an implementation (fresh servers each: Welch's test),
        // then each algorithm in the two implementations (the same servers and repeat: paired).
        let label = if setup == Setup::Paper { "paper's setup" } else { "today's variant" };
        for imp in IMPLEMENTATIONS {
            for (i, a) in configs.iter().enumerate() {
                for b in &configs[i + 1..] {
                    let (an, bn) = (format!("{} {}", imp.name(), a.algorithm), format!("{} {}", imp.name(), b.algorithm));
                    reading.push(format!("- {label}, mean time: {}", r.tests.verdict(&an, &time(imp, a), &bn, &time(imp, b), Design::Independent, "faster", " ms")));
                    reading.push(format!("- {label}, requests/s: {}", r.tests.verdict(&an, &rate(imp, a), &bn, &rate(imp, b), Design::Independent, "faster", " requests/s")));
                }
            }
        }
        for c in &configs {
            let [f, h] = IMPLEMENTATIONS.map(|imp| format!("{} {}", imp.name(), c.algorithm));
            let [(ft, ht), (fr, hr)] = [(time(IMPLEMENTATIONS[0], c), time(IMPLEMENTATIONS[1], c)), (rate(IMPLEMENTATIONS[0], c), rate(IMPLEMENTATIONS[1], c))];
            reading.push(format!("- {label}, mean time: {}", r.tests.verdict(&f, &ft, &h, &ht, Design::Paired, "faster", " ms")));
            reading.push(format!("- {label}, requests/s: {}", r.tests.verdict(&f, &fr, &h, &hr, Design::Paired, "faster", " requests/s")));
        }
    }
    r.section(
        "Reading (algorithms within an implementation: Welch's t-test; one algorithm in the two implementations: the paired t-test, a repeat's servers being the same; Holm's correction over the report)",
        &reading.join("\n"),
    );

    let curves: Vec<Series> = runs
        .iter()
        .filter(|x| x.repeat == 0)
        .map(|x| {
            let mut v: Vec<f64> = x.samples.iter().filter(|s| s.ok()).map(|s| s.total.as_secs_f64() * 1e3).collect();
            v.sort_by(f64::total_cmp);
            let n = v.len().max(1);
            let points = (0..=100).filter_map(|p| v.get(((p as f64 / 100.0) * (n - 1) as f64).round() as usize).map(|&ms| (p as f64, ms))).collect();
            Series { name: format!("{} ({})", x.config.name, x.implementation.name()), points }
        })
        .collect();
    if let Ok(svg) = plot::lines("Response time by percentile", "percentile", "ms", &curves) {
        r.plot("response-percentiles.svg", "Response time by percentile per configuration and balancer (first repeat)", svg);
    }

    let failed: usize = runs.iter().map(Run::failed).sum();
    r.check("no request failed", failed == 0, format!("{failed} of {}", runs.len() * total));
    for c in CONFIGS {
        for imp in IMPLEMENTATIONS {
            if c.algorithm != "least-conn" {
                // Every repeat: a split is exact or it is not, there is no noise to average away.
                let want = c.weights[0] as f64 / (c.weights[0] + c.weights[1]) as f64;
                let splits: Vec<[usize; 2]> = runs.iter().filter(|x| x.implementation == imp && x.config.name == c.name).map(Run::per_server).collect();
                let within = splits.iter().all(|[a, b]| (*a as f64 / (a + b).max(1) as f64 - want).abs() <= 0.01);
                r.check(
                    &format!("{} {} spreads requests within 1% of its weights {}:{}", imp.name(), c.name, c.weights[0], c.weights[1]),
                    within,
                    format!(
                        "server1 / server2 per repeat: {}; weights want {:.2}% to server1",
                        splits.iter().map(|[a, b]| format!("{a} / {b}")).collect::<Vec<_>>().join(", "),
                        want * 100.0
                    ),
                );
            }
            let key = format!("{}.{}", imp.name().to_lowercase(), c.name);
            r.estimate(format!("{key}.requests_per_s"), &over(runs, imp, c.name, Run::per_second));
            r.estimate(format!("{key}.mean_ms"), &over(runs, imp, c.name, |x| x.times().mean));
            r.estimate(format!("{key}.balancer_cpu_s"), &over(runs, imp, c.name, |x| x.balancer_cpu));
        }
    }
    r.raw = json!({
        "requests": total,
        "body_bytes": BODY,
        "repeats": ctx.repeat,
        "estimates": CONFIGS.iter().flat_map(|c| IMPLEMENTATIONS.map(|imp| json!({
            "name": c.name,
            "implementation": imp.name(),
            "algorithm": c.algorithm,
            "concurrency": c.concurrency,
            "mean_ms": over(runs, imp, c.name, |x| x.times().mean),
            "requests_per_s": over(runs, imp, c.name, Run::per_second),
            "balancer_cpu_s": over(runs, imp, c.name, |x| x.balancer_cpu),
        }))).collect::<Vec<_>>(),
        "runs": runs.iter().map(|x| json!({
            "name": x.config.name,
            "implementation": x.implementation.name(),
            "algorithm": x.config.algorithm,
            "weights": x.config.weights,
            "concurrency": x.config.concurrency,
            "repeat": x.repeat,
            "seconds": x.wall.as_secs_f64(),
            "response_ms": x.times(),
            "failed": x.failed(),
            "per_server": x.per_server(),
            "balancer": {"cpu_secs": x.balancer_cpu, "peak_rss_kib": x.balancer.peak_rss_kib},
        })).collect::<Vec<_>>(),
    });
    r
}

/// The requests each server got through one implementation, over every repeat.
fn split(runs: &[Run], imp: Implementation, name: &str) -> [usize; 2] {
    runs.iter().filter(|x| x.implementation == imp && x.config.name == name).fold([0, 0], |[a, b], x| {
        let [p, q] = x.per_server();
        [a + p, b + q]
    })
}
