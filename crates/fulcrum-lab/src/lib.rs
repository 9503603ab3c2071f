//! `fulcrum lab`: the four source documents' experiments, repeatable on the user's own machine.
//!
//! Real servers and Fulcrum run as child processes (their CPU and memory read from `/proc`), the
//! clients run in this process from distinct loopback source addresses, every random choice has a
//! seed, and each run writes `report.md`, `results.json` and SVG plots into one folder.
//! Scenarios: `java-slb` (algorithm comparison with 10 clients browsing a site on 4 servers),
//! `passive` (a degraded server under Poisson load), `haproxy` (10,000 POSTs in HTTP mode) and
//! `scaling` (1 to 4 servers at low and high concurrency); `compare` sets two runs side by side.
//! `soak` is not an experiment but a long mixed-load run under chaos that fails when Fulcrum errs
//! towards a healthy server or grows (`scripts/soak`).
// The lab measures real time: it reads the system clocks directly (clippy.toml keeps them to
// `fulcrum::clock` in the balancer).
#![allow(clippy::disallowed_methods)]

mod client;
mod ftp;
mod haproxy;
mod headroom;
mod host;
mod java_slb;
mod paper;
mod passive;
mod plot;
mod procs;
mod report;
mod scaling;
mod site;
mod soak;
mod stats;
mod syn_time;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

pub use report::{Report, compare};

#[derive(Debug, clap::Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// The Java TCP load balancer paper: 10 clients browse a generated site on 4 real servers,
    /// once per algorithm; response time per client, CPU and memory of Fulcrum and the servers.
    JavaSlb(RunArgs),
    /// The passive-measurement paper: 3 servers, one degraded, Poisson arrivals over a sweep of
    /// rates; equal split against passive-ratio, least-conn and p2c-ewma; then R against the
    /// connection time (its Figure 2).
    Passive(PassiveArgs),
    /// The HAProxy paper: 10,000 POSTs in HTTP mode with round robin, static-rr and least-conn,
    /// in the paper's setup (1,000 concurrent, static-rr 1:1) and today's (100, static-rr 2:1).
    Haproxy(RunArgs),
    /// The JServ cluster article: 1 to 4 servers at concurrency 2 and 50, servers of one worker,
    /// servers that fail when overloaded, and two servers three times apart weighted 3:1.
    Scaling(RunArgs),
    /// Two result folders side by side (figures of B over A).
    Compare { a: PathBuf, b: PathBuf },
    /// Mixed TCP, HTTP and FTP load for --minutes while real servers are killed and stopped and
    /// the config reloads; a row every 10 s and a Markdown summary; fails on an error to a
    /// healthy server or on memory or descriptor growth after warm-up.
    Soak(soak::SoakArgs),
}

/// Options every scenario takes.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Seconds instead of minutes: small counts, for tests and a first look.
    #[arg(long, conflicts_with = "paper")]
    pub quick: bool,
    /// The paper's own durations, rates and sizes where this machine allows them (hours, not
    /// minutes); the report lists where it cannot follow the paper.
    #[arg(long)]
    pub paper: bool,
    /// Seed of the lab's random choices: the site, each client's links, the Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Times each configuration runs, each repeat with its own seed, 1 to 50: figures are
    /// reported as a mean with its 95% confidence interval [default: 5, or 3 with --quick: two
    /// repeats leave one degree of freedom, an interval twelve standard errors wide].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=50))]
    pub repeat: Option<u64>,
    /// Folder for report.md, results.json and the plots [default: lab-results/SCENARIO-TIME].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run the real servers beside the clients and Fulcrum on the whole machine, on loopback,
    /// with no quota: for a machine where the lab cannot make namespaces and cgroups (it needs
    /// root). Servers then have no capacity of their own, and an algorithm's effect may not show.
    #[arg(long)]
    pub shared: bool,
    /// Each isolated real server's CPU quota in percent of one core, 5 to 100 [default: 20; 25
    /// in haproxy, whose two servers carry it all].
    #[arg(long, value_parser = clap::value_parser!(u32).range(5..=100))]
    pub server_cpu: Option<u32>,
    /// Shape each isolated real server's outgoing link to this many Mbit/s (tbf), 1 to 100,000
    /// [default: not shaped].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub server_link: Option<u32>,
}

impl LabArgs {
    /// The scenario's options, for the commands that run a scenario.
    fn scenario(&self) -> Option<(&'static str, &RunArgs)> {
        match &self.command {
            LabCommand::JavaSlb(r) => Some(("java-slb", r)),
            LabCommand::Passive(p) => Some(("passive", &p.run)),
            LabCommand::Haproxy(r) => Some(("haproxy", r)),
            LabCommand::Scaling(r) => Some(("scaling", r)),
            LabCommand::Compare { .. } | LabCommand::Soak(_) => None,
        }
    }
}

/// What must happen before the lab starts a thread: a scenario with isolated real servers runs
/// in a network namespace of its own ([`host::enter_own_network`], which re-executes the lab).
pub fn prepare(args: &LabArgs) -> anyhow::Result<()> {
    match args.scenario() {
        Some((_, run)) if !run.shared => host::enter_own_network(),
        _ => Ok(()),
    }
}

/// How a scenario's real servers are isolated, from its options.
fn isolation(name: &str, run: &RunArgs) -> Option<host::Isolation> {
    let percent = run.server_cpu.unwrap_or(if name == "haproxy" { 25 } else { 20 });
    (!run.shared).then_some(host::Isolation { cpu: f64::from(percent) / 100.0, link_mbit: run.server_link })
}

/// The passive scenario's options: a few dozen requests a second, whose figures are a slow
/// server's queue and the kernel's SYN retransmissions, not the machine's CPU, so its repeats
/// can run side by side.
#[derive(Debug, Clone, clap::Args)]
pub struct PassiveArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Repeats that run at the same time, each with real servers and a Fulcrum of its own, 1 to
    /// 10: the same figures in a fraction of the wall time [default: 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10))]
    pub lanes: Option<u64>,
}

/// Runs one lab command; the error says what to fix.
pub async fn run(args: LabArgs) -> anyhow::Result<bool> {
    let mut lanes = 1;
    let (name, run): (&'static str, RunArgs) = match args.command {
        LabCommand::Compare { a, b } => {
            print!("{}", compare(&a, &b)?);
            return Ok(true);
        }
        LabCommand::Soak(args) => return soak::run(args).await,
        LabCommand::JavaSlb(r) => ("java-slb", r),
        LabCommand::Passive(p) => {
            lanes = p.lanes.unwrap_or(1) as usize;
            ("passive", p.run)
        }
        LabCommand::Haproxy(r) => ("haproxy", r),
        LabCommand::Scaling(r) => ("scaling", r),
    };
    // A full run's figures are published as Fulcrum's; a quick one checks that the scenario runs.
    // Refused before the result folder is made.
    let build = procs::Build::read()?;
    if let Some(which) = build.unoptimised().filter(|_| !run.quick) {
        bail!(
            "{which} was built without optimisation (opt-level 0), and a full run measures Fulcrum's CPU, memory and speed: \
             build both with `cargo build --release --workspace` (or run `cargo run --release -- lab {name}`); --quick runs any build"
        );
    }
    let dir = run.out.clone().unwrap_or_else(|| {
        let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string().replace(':', "");
        PathBuf::from("lab-results").join(format!("{name}-{stamp}"))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the result folder {}", dir.display()))?;
    // Absolute, since child processes (vsftpd's anon_root) get paths inside it.
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    procs::check_sources(&client::sources(10))?;
    // A thousand concurrent clients (haproxy's paper setup) need more descriptors than a shell's
    // usual 1,024; the children (Fulcrum, the servers) inherit the raised limit.
    if let Ok((_, hard)) = rlimit::getrlimit(rlimit::Resource::NOFILE) {
        let _ = rlimit::increase_nofile_limit(hard.min(65_536));
    }
    let work = dir.join("work");
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    if let Some(how) = isolation(name, &run) {
        host::isolate(how)?;
    }
    let repeat = run.repeat.map_or(if run.quick { 3 } else { 5 }, |n| n as usize);
    let ctx = Ctx { dir: dir.clone(), work, quick: run.quick, paper: run.paper, seed: run.seed, repeat, lanes: lanes.min(repeat) };
    let scenario = async {
        match name {
            "java-slb" => java_slb::run(&ctx).await,
            "passive" => passive::run(&ctx).await,
            "haproxy" => haproxy::run(&ctx).await,
            _ => scaling::run(&ctx).await,
        }
    };
    // Ctrl-C (or SIGTERM) drops the scenario, and with it every child process it started (a
    // `Proc` kills its child when dropped), so no real server or Fulcrum is left holding a port.
    // The handlers are installed before the scenario starts: a scenario starts its first
    // children before it first waits, and a signal that came then would otherwise end the
    // process the default way, leaving them running.
    use tokio::signal::unix::{SignalKind, signal};
    let (mut interrupt, mut terminate) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
    let started = std::time::Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let headroom = headroom::sample(stop.clone());
    let outcome = tokio::select! {
        r = scenario => r,
        _ = interrupt.recv() => Err(anyhow::anyhow!("interrupted; the real servers and Fulcrum it started are stopped")),
        _ = terminate.recv() => Err(anyhow::anyhow!("terminated; the real servers and Fulcrum it started are stopped")),
    };
    host::finish();
    let mut report = outcome?;
    stop.cancel();
    report.duration = Some(started.elapsed());
    report.condition(
        "mode",
        if run.paper {
            "--paper (the paper's durations, rates and sizes where the machine allows)"
        } else if run.quick {
            "--quick"
        } else {
            "the default"
        },
    );
    report.condition("build", build.describe());
    report.condition("real servers", host::isolation().map_or("on loopback beside the clients and Fulcrum, no quota (--shared)".to_string(), |i| i.describe()));
    headroom.await?.report(&mut report);
    report.write(&dir)?;
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    for c in &report.checks {
        eprintln!("{} {}: {}", if c.passed { "PASS" } else { "FAIL" }, c.name, c.detail);
    }
    eprintln!("report: {}", dir.join("report.md").display());
    if failed > 0 {
        eprintln!("{failed} check{} failed", if failed == 1 { "" } else { "s" });
    }
    Ok(failed == 0)
}

/// What a scenario needs to know about its run.
pub struct Ctx {
    /// The result folder.
    pub dir: PathBuf,
    /// `dir/work`: Fulcrum's configs and logs, and the FTP servers' files while they run.
    pub work: PathBuf,
    pub quick: bool,
    /// `--paper`: the paper's own durations, rates and sizes where the machine allows.
    pub paper: bool,
    pub seed: u64,
    /// Runs of each configuration (`--repeat`).
    pub repeat: usize,
    /// Repeats that run at the same time (`passive --lanes`; 1 elsewhere), at most `repeat`.
    pub lanes: usize,
}

impl Ctx {
    /// A progress bar of `len` steps, or a counter when the length is not known (both hidden when
    /// standard error is not a terminal).
    pub fn progress(&self, len: Option<u64>, what: &str) -> ProgressBar {
        let (pb, template) = match len {
            Some(n) => (ProgressBar::new(n), "{spinner} {msg:32} [{bar:30}] {pos}/{len} {elapsed}"),
            None => (ProgressBar::no_length(), "{spinner} {msg:32} {pos} requests {elapsed}"),
        };
        let style = ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> ");
        pb.set_style(style);
        pb.set_message(what.to_string());
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    }
}

/// The `[[service]]` TOML of a lab run: `mode`, `algorithm`, the servers with their weights,
/// and `extra` lines for the service table.
pub fn service_toml(mode: &str, algorithm: &str, servers: &[(std::net::SocketAddr, u32)], extra: &str) -> String {
    let s = format!(
        "[[service]]\nname = \"lab\"\nlisten = \"{{LISTEN}}\"\nmode = \"{mode}\"\nalgorithm = \"{algorithm}\"\n\
         connect_timeout = \"5s\"\nfailure_limit = 0\n{extra}\n[service.health]\nkind = \"none\"\n"
    );
    s + &servers_toml(servers)
}

/// The `[[service.server]]` tables of `servers`, each with its weight.
pub fn servers_toml(servers: &[(std::net::SocketAddr, u32)]) -> String {
    servers.iter().map(|(addr, weight)| format!("\n[[service.server]]\naddress = \"{addr}\"\nweight = {weight}\n")).collect()
}

/// How many samples each real server answered, by the name in `X-Served-By`.
pub fn served_by<'a>(samples: impl IntoIterator<Item = &'a client::Sample>) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for s in samples {
        if let (true, Some(name)) = (s.ok(), &s.server) {
            *m.entry(name.clone()).or_insert(0) += 1;
        }
    }
    m
}

/// Starts `n` real servers named `{prefix}1`.. with the same options.
pub fn start_backends(prefix: &str, n: usize, extra: &[String]) -> anyhow::Result<Vec<procs::Server>> {
    (1..=n).map(|i| procs::backend(&format!("{prefix}{i}"), extra)).collect()
}

/// Samples a set of processes' usage, each with the processes it forked ([`procs::tree_usages`]),
/// every `every` until `stop` fires; (seconds, usage per proc).
pub fn sample_usage(pids: Vec<u32>, every: Duration, stop: tokio_util::sync::CancellationToken) -> tokio::task::JoinHandle<Vec<(f64, Vec<procs::Usage>)>> {
    tokio::spawn(async move {
        let start = std::time::Instant::now();
        let mut out = Vec::new();
        loop {
            out.push((start.elapsed().as_secs_f64(), procs::tree_usages(&pids)));
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.cancelled() => break,
            }
        }
        out.push((start.elapsed().as_secs_f64(), procs::tree_usages(&pids)));
        out
    })
}

/// One point of a process's use over time: (s, CPU % of one core, resident MiB).
pub type Point = (f64, f64, f64);

/// The CPU seconds process `i` of [`sample_usage`]'s samples used from the first to the last.
pub fn cpu_used(usage: &[(f64, Vec<procs::Usage>)], i: usize) -> f64 {
    let at = |sample: Option<&(f64, Vec<procs::Usage>)>| sample.and_then(|s| s.1.get(i)).map_or(0.0, |u| u.cpu_secs);
    at(usage.last()) - at(usage.first())
}

/// Process `i` of a run's samples over time: CPU % of one core between samples, resident MiB.
pub fn timeline(usage: &[(f64, Vec<procs::Usage>)], i: usize) -> Vec<Point> {
    usage
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0].1.get(i)?, w[1].1.get(i)?);
            let dt = (w[1].0 - w[0].0).max(1e-3);
            Some((w[1].0, (b.cpu_secs - a.cpu_secs) / dt * 100.0, b.rss_kib as f64 / 1024.0))
        })
        .collect()
}
