//! `fulcrum lab soak --minutes N` (what `scripts/soak` runs): mixed load through a `tcp`, an
//! `http` and an `ftp` service for N minutes while real servers die and come back, health checks
//! fail and pass, and the config reloads every 3 s; a row every 10 s, a Markdown summary at the
//! end, and a non-zero exit when Fulcrum erred towards a healthy server or grew.
//!
//! # What runs
//! Four HTTP real servers (`fulcrum backend`) behind both the `tcp` and the `http` service, two
//! vsftpd behind the `ftp` service (see `topology`). Twelve client loops (see `load::LOOPS`):
//! keep-alive and new-connection GETs, uploads of 4 KiB to 2 MiB, slow readers (4 KiB receive
//! buffer, 4 KiB per 100 ms), slow uploads, and FTP sessions of three EPSV downloads. Every
//! body is checked byte for byte. Meanwhile (see `chaos`) h3 and f2 are killed with SIGKILL and
//! started again on the same port 2 s later, h4 is stopped (SIGSTOP) for 3 s, long enough for its
//! health check (every 1 s, fall 2) to take it down, then continued; and every 3 s the config
//! file is rewritten with h2's and f1's weights flipped between 1 and 2 and reloaded through
//! `POST /api/reload` (a refused reload fails the run).
//!
//! # Errors to healthy servers
//! h1, h2 and f1 are never touched: they are the healthy servers. A failed request or session
//! (a status other than 200, a broken or short or wrong body, a timeout of 30 s) is an *error to
//! a healthy server* unless a chaos window excuses it. A window opens just before a chaotic
//! server is killed or stopped and closes `chaos::SETTLE` (4 s) after it is back. A failure is
//! excused when its span overlaps a window and either it is known to have reached that window's
//! server (`X-Served-By` of its response, the server a TCP-mode keep-alive connection is on, the
//! FTP banner) or nothing says which server it reached. A failure known to have reached a stable
//! server is never excused. Fulcrum's own count is checked too: at the end `GET /api/stats` must
//! show 0 connect failures and 0 transfer errors on h1, h2 and f1 in every service, and 0
//! clients refused by any service.
//!
//! # Growth
//! RSS (`VmRSS`) and open sockets (`/proc/PID/fd`) of the Fulcrum process: after warm-up (a
//! third of the run, 20 s to 5 min) neither may grow more than 10%; pipe descriptors (splice
//! buffers, a bounded cache) may never exceed that cache's bound. `table` says how a burst of
//! samples is told from growth, and why pipes are judged apart.

mod chaos;
mod load;
mod table;
mod topology;
mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::Context;

use chaos::Windows;
use load::{Failure, MODES, Tally, Vips};
use table::{Growth, Row, Sample};
use topology::{Addrs, KILLED_FTP, KILLED_HTTP, STABLE, STOPPED_HTTP, Topology};

#[derive(Debug, Clone, clap::Args)]
pub struct SoakArgs {
    /// How long the load runs, in minutes (fractions allowed: 0.5 is 30 s).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Seed of the clients' random sizes and choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Keep the work folder (configs, Fulcrum's log) even when the run passes.
    #[arg(long)]
    pub keep: bool,
}

/// Runs the soak; `Ok(false)` when a check failed (each printed with its reason).
pub async fn run(args: SoakArgs) -> anyhow::Result<bool> {
    anyhow::ensure!(args.minutes > 0.0 && args.minutes <= 7.0 * 24.0 * 60.0, "--minutes must be more than 0 and at most a week, not {}", args.minutes);
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    // Caches fill for minutes (spare pipes, idle server connections, the allocator's pools; with
    // glibc's malloc Fulcrum's RSS climbed for 3 to 4 minutes under this load, 12.9 MiB at 60 s to
    // 15.0-15.6 MiB from 200 s on): a long run's warm-up covers that and still judges most of it.
    let warmup = (total / 3).clamp(Duration::from_secs(20), Duration::from_secs(300)).min(total);
    let dir = std::env::temp_dir().join(format!("fulcrum-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut topo = Topology::start(&dir)?;
    let addrs = topo.addrs.clone();
    let pid = topo.fulcrum.pid();
    eprintln!("soak: {:.1} min (warm-up {} s); Fulcrum pid {pid}, admin http://{}, work folder {}", args.minutes, warmup.as_secs(), addrs.admin, dir.display());

    let start = Instant::now();
    let deadline = start + total;
    let tally = Arc::new(Tally::default());
    let windows = Arc::new(Windows::default());
    let vips = Vips { tcp: addrs.tcp, http: addrs.http, ftp: addrs.ftp };
    let loops: Vec<_> = load::LOOPS
        .iter()
        .enumerate()
        .map(|(i, (mode, kind))| tokio::spawn(load::run_loop(*mode, *kind, vips, args.seed.wrapping_mul(1000).wrapping_add(i as u64), deadline, tally.clone())))
        .collect();
    let chaos = spawn_chaos(&mut topo, windows.clone(), deadline)?;
    let reloads = Arc::new(AtomicU64::new(0));
    let reload_task = tokio::spawn(reload_loop(addrs.clone(), topo.config.clone(), deadline, reloads.clone()));

    println!("{}", table::HEADER);
    let mut samples = Vec::new();
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut next_row = Duration::from_secs(10);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now()))).await;
        if let Ok(Some(status)) = topo.fulcrum.child.try_wait() {
            problems.push(format!("Fulcrum exited ({status}) during the soak; its log: {}", topo.log.display()));
            break;
        }
        let at = start.elapsed();
        let s = Sample::of(pid, at);
        samples.push(s);
        if at >= next_row || Instant::now() >= deadline {
            let row = row(at, &tally, &windows, &reloads, s);
            println!("{}", row.markdown());
            rows.push(row);
            next_row += Duration::from_secs(10);
        }
    }

    // The requests in flight finish (bounded by their timeout); then every process stops.
    for l in loops {
        let _ = tokio::time::timeout(load::REQUEST_TIMEOUT + Duration::from_secs(5), l).await;
    }
    // Held until every process stops, after the stats are read.
    let _chaotic = match tokio::task::spawn_blocking(move || chaos.join()).await {
        Ok(Ok((r, c))) => {
            if let Err(e) = r {
                problems.push(format!("chaos: {e:#}"));
            }
            Some(c)
        }
        _ => {
            problems.push("the chaos thread failed".into());
            None
        }
    };
    match reload_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => problems.push(format!("config reload: {e:#}")),
        Err(e) => problems.push(format!("the reload task failed: {e}")),
    }
    let end = Sample::of(pid, start.elapsed());
    let last = row(start.elapsed(), &tally, &windows, &reloads, end);
    println!("{}", last.markdown());
    rows.push(last);

    let stats = stable_stats(&addrs).await;
    let (healthy, excused) = tally.judge(&windows);
    if !healthy.is_empty() {
        problems.push(format!("{} error{} to healthy servers (listed above)", healthy.len(), if healthy.len() == 1 { "" } else { "s" }));
    }
    match &stats {
        Ok((_, bad)) => problems.extend(bad.iter().cloned()),
        Err(e) => problems.push(format!("cannot read Fulcrum's stats: {e:#}")),
    }
    let rss = Growth::of(&samples, warmup, |s| s.rss_kib);
    let sockets = Growth::of(&samples, warmup, |s| s.sockets);
    for (what, g) in [("RSS", rss), ("open sockets", sockets)] {
        match g {
            Some(g) if g.grew() => {
                problems.push(format!("{what} grew {:.1}% after warm-up ({} -> {}), more than {:.0}%", g.percent(), g.reference, g.floor, table::GROWTH * 100.0))
            }
            Some(_) => {}
            None => problems.push(format!("{what}: no samples after warm-up to judge growth")),
        }
    }

    // Every sample, warm-up included: the bound holds from the start.
    let pipes_over: Vec<&Sample> = samples.iter().filter(|s| s.pipes > s.pipe_bound(topology::WORKERS)).collect();
    if let Some(s) = pipes_over.first() {
        problems.push(format!(
            "{} pipe descriptors at {} s with {} sockets open, more than the splice cache allows ({}); {} samples over",
            s.pipes,
            s.at.as_secs(),
            s.sockets,
            s.pipe_bound(topology::WORKERS),
            pipes_over.len()
        ));
    }
    let pipes_max = samples.iter().map(|s| s.pipes).max().unwrap_or(0);
    print_failures(&healthy, &excused, start);
    println!("\n{}", summary(&args, &rows, &windows, [rss, sockets], pipes_max, stats.as_ref().ok().map(|s| s.0.as_str()), &problems));
    drop(topo);
    if problems.is_empty() {
        if !args.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        eprintln!("soak: PASS");
        Ok(true)
    } else {
        for p in &problems {
            eprintln!("soak: FAIL: {p}");
        }
        eprintln!("soak: configs and Fulcrum's log kept in {}", dir.display());
        Ok(false)
    }
}

fn row(at: Duration, tally: &Tally, windows: &Windows, reloads: &AtomicU64, s: Sample) -> Row {
    let (healthy, excused) = tally.judge(windows);
    Row {
        at,
        requests: MODES.map(|m| tally.ok(m)),
        healthy_errors: healthy.len(),
        chaos_errors: excused.len(),
        reloads: reloads.load(Relaxed),
        rss_kib: s.rss_kib,
        fds: s.fds,
        sockets: s.sockets,
        pipes: s.pipes,
    }
}

/// The chaotic servers, while the chaos thread has them.
struct Chaotic {
    killed: Option<crate::procs::Backend>,
    stopped: crate::procs::Backend,
    ftp: crate::ftp::Vsftpd,
}

/// The chaotic servers move to a thread of their own (kills and restarts block), which gives
/// them back running when it ends, so the requests still in flight at the deadline finish; every
/// event stops at the deadline.
fn spawn_chaos(topo: &mut Topology, windows: Arc<Windows>, deadline: Instant) -> anyhow::Result<std::thread::JoinHandle<(anyhow::Result<()>, Chaotic)>> {
    let take = |list: &mut Vec<crate::procs::Backend>, name: &str| list.iter().position(|b| b.proc.name == name).map(|i| list.remove(i)).context("no such server");
    let killed = Some(take(&mut topo.http, KILLED_HTTP)?);
    let stopped = take(&mut topo.http, STOPPED_HTTP)?;
    let ftp = topo.ftp.iter().position(|f| f.name == KILLED_FTP).map(|i| topo.ftp.remove(i)).context("no such FTP server")?;
    let mut c = Chaotic { killed, stopped, ftp };
    Ok(std::thread::spawn(move || {
        let r = chaos_loop(&mut c, &windows, deadline);
        (r, c)
    }))
}

fn chaos_loop(c: &mut Chaotic, windows: &Windows, deadline: Instant) -> anyhow::Result<()> {
    let pause = |d: Duration| std::thread::sleep(d.min(deadline.saturating_duration_since(Instant::now())));
    let room = |d: Duration| Instant::now() + d < deadline;
    let down = Duration::from_secs(2);
    let stop = Duration::from_secs(3);
    let gap = Duration::from_secs(2);
    pause(Duration::from_secs(5));
    while room(down) {
        let w = windows.open(KILLED_HTTP, "killed");
        let victim = c.killed.take().context("the killed server is gone")?;
        let addr = victim.addr;
        // Dropping a process's handle kills it (SIGKILL) and reaps it.
        drop(victim);
        pause(down);
        c.killed = Some(crate::procs::backend_on(KILLED_HTTP, addr, &[]).with_context(|| format!("cannot start {KILLED_HTTP} again on {addr}"))?);
        windows.close(w);
        pause(gap);
        if !room(stop) {
            break;
        }
        let w = windows.open(STOPPED_HTTP, "stopped");
        chaos::signal(c.stopped.proc.pid(), "STOP")?;
        std::thread::sleep(stop);
        chaos::signal(c.stopped.proc.pid(), "CONT")?;
        windows.close(w);
        pause(gap);
        if !room(down) {
            break;
        }
        let w = windows.open(KILLED_FTP, "killed");
        c.ftp.kill();
        pause(down);
        c.ftp.restart().with_context(|| format!("cannot start {KILLED_FTP} again on {}", c.ftp.addr))?;
        windows.close(w);
        pause(gap);
    }
    Ok(())
}

/// Every 3 s until the deadline: the config rewritten with the weights flipped, then reloaded.
async fn reload_loop(addrs: Addrs, config: std::path::PathBuf, deadline: Instant, count: Arc<AtomicU64>) -> anyhow::Result<()> {
    let every = Duration::from_secs(3);
    let mut flip = false;
    while Instant::now() + every < deadline {
        tokio::time::sleep(every).await;
        flip = !flip;
        topology::reload(&addrs, &config, flip).await.with_context(|| format!("reload {}", count.load(Relaxed) + 1))?;
        count.fetch_add(1, Relaxed);
    }
    Ok(())
}

/// Fulcrum's own counters per server: a Markdown table, and what is wrong on a stable server.
async fn stable_stats(addrs: &Addrs) -> anyhow::Result<(String, Vec<String>)> {
    let body = crate::client::fetch(addrs.admin, "/api/stats").await?;
    let stats: serde_json::Value = serde_json::from_slice(&body).context("the stats are not JSON")?;
    let mut table = String::from(
        "| service | server | role | state | total | connect failures | transfer errors | data transfers | downtime (s) |\n|---|---|---|---|---:|---:|---:|---:|---:|\n",
    );
    let mut bad = Vec::new();
    for svc in stats["services"].as_array().context("no services in the stats")? {
        let service = svc["name"].as_str().unwrap_or("?");
        if svc["refused"].as_u64() != Some(0) {
            bad.push(format!("service {service} refused {} clients (no server could take them)", svc["refused"]));
        }
        for s in svc["servers"].as_array().context("no servers in the stats")? {
            let address = s["address"].as_str().unwrap_or("?");
            let name = addrs.name_of(address).unwrap_or("?");
            let stable = STABLE.contains(&name);
            let n = |k: &str| s[k].as_u64().unwrap_or(u64::MAX);
            table.push_str(&format!(
                "| {service} | {name} ({address}) | {} | {} | {} | {} | {} | {} | {} |\n",
                if stable { "stable" } else { "chaotic" },
                s["state"].as_str().unwrap_or("?"),
                n("total"),
                n("connect_failures"),
                n("transfer_errors"),
                n("data_transfers"),
                n("downtime_secs"),
            ));
            if stable {
                for k in ["connect_failures", "transfer_errors"] {
                    if n(k) != 0 {
                        bad.push(format!("Fulcrum counted {} {} on stable server {name} in service {service}", n(k), k.replace('_', " ")));
                    }
                }
            }
        }
    }
    Ok((table, bad))
}

fn print_failures(healthy: &[Failure], excused: &[Failure], start: Instant) {
    let line = |f: &Failure| {
        format!(
            "  {:.1}-{:.1} s {} {:?} server {}: {}",
            f.start.duration_since(start).as_secs_f64(),
            f.end.duration_since(start).as_secs_f64(),
            f.mode.name(),
            f.kind,
            f.server.as_deref().unwrap_or("unknown"),
            f.error
        )
    };
    if !healthy.is_empty() {
        println!("\nErrors to healthy servers:");
        healthy.iter().for_each(|f| println!("{}", line(f)));
    }
    if !excused.is_empty() {
        println!("\nErrors in chaos windows (excused), the first 20:");
        excused.iter().take(20).for_each(|f| println!("{}", line(f)));
    }
}

/// The Markdown summary to paste into a note.
fn summary(args: &SoakArgs, rows: &[Row], windows: &Windows, [rss, sockets]: [Option<Growth>; 2], pipes_max: u64, stats: Option<&str>, problems: &[String]) -> String {
    let mut out = format!("## Soak, {} min, seed {}\n\n{}\n", args.minutes, args.seed, table::HEADER);
    for r in rows {
        out.push_str(&r.markdown());
        out.push('\n');
    }
    let events = windows.all();
    let count = |what: &str| events.iter().filter(|w| w.what == what).count();
    out.push_str(&format!("\nChaos: {} kills, {} stops; reloads every 3 s.\n", count("killed"), count("stopped")));
    let growth = |name: &str, g: Option<Growth>, unit: &str| match g {
        Some(g) => format!("{name}: {} {unit} at the end of warm-up, highest 10 s floor after it {} {unit} ({:+.1}%)\n", g.reference, g.floor, g.percent()),
        None => format!("{name}: not judged (no samples after warm-up)\n"),
    };
    out.push_str(&growth("RSS", rss, "KiB"));
    out.push_str(&growth("Open sockets", sockets, ""));
    out.push_str(&format!("Pipe descriptors: at most {pipes_max} (spare splice pipes are bounded at {} per runtime thread, {} threads)\n", table::SPARE_PIPES, topology::WORKERS));
    if let Some(s) = stats {
        out.push_str(&format!("\nFulcrum's counters at the end:\n\n{s}"));
    }
    out.push_str(&if problems.is_empty() {
        "\nVerdict: PASS\n".to_string()
    } else {
        format!("\nVerdict: FAIL\n\n{}\n", problems.iter().map(|p| format!("- {p}")).collect::<Vec<_>>().join("\n"))
    });
    out
}
