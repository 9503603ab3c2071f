//! The FTP half of `java-slb` (the paper's Table 7 and Table 8's FTP rows): four vsftpd real
//! servers behind Fulcrum in FTP mode, ten clients (curl, passive mode, from 127.0.0.11 to .20)
//! each logging in and downloading ten files of mixed sizes per session, over and over, once per
//! algorithm of the paper and repeat. Each vsftpd is measured with the session processes it
//! forks, so its CPU and memory are the whole server's. vsftpd and
//! curl are the user's own tools here: without them the half is skipped and the report says why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::client;
use super::host::Host;
use super::paper::{CLIENTS, PAPER, SERVERS, client_label, server_plots, server_table, source, spread};
use super::procs::{self, Fulcrum, Proc, Usage, free_addr};
use super::report::{Report, Summary, Table};
use super::stats::{self, Design, Estimate, Family, Measure};
use super::{Ctx, Point, cpu_used, sample_usage, service_toml, timeline};

pub const ALGORITHMS: [&str; 4] = ["round-robin", "source-hash", "least-conn", "random"];

/// The sizes in bytes of the ten files every session downloads, in order.
pub fn sizes(quick: bool) -> &'static [u64] {
    if quick {
        &[1 << 10, 5 << 10, 20 << 10, 100 << 10, 300 << 10, 1 << 20, 40 << 10, 3 << 10, 60 << 10, 200 << 10]
    } else {
        &[1 << 10, 5 << 10, 20 << 10, 100 << 10, 300 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20]
    }
}

/// The sessions each client runs, one after another, per algorithm and repeat: the run lasts
/// as long as they take.
pub fn sessions_per_client(quick: bool) -> usize {
    if quick { 2 } else { 6 }
}

/// The FTP half's run conditions, for the report's head: sessions, files, and the run length
/// the sessions took (measured, since it is set by the sessions and not by a clock).
pub fn conditions(r: &mut Report, quick: bool, runs: &Result<Vec<FtpRun>, String>) {
    r.condition("FTP sessions per client, per algorithm and repeat", sessions_per_client(quick));
    let kib: Vec<String> = sizes(quick).iter().map(|b| if *b >= 1 << 20 { format!("{} MiB", b >> 20) } else { format!("{} KiB", b >> 10) }).collect();
    r.condition("FTP files per session", kib.join(", "));
    match runs {
        Ok(runs) if !runs.is_empty() => {
            let s = Estimate::of(&runs.iter().map(|x| x.seconds).collect::<Vec<_>>());
            r.condition("FTP run length per algorithm and repeat", format!("{} s (mean over the runs)", s.show(1)));
        }
        Ok(_) => r.condition("FTP run length per algorithm and repeat", "no run"),
        Err(e) => r.condition("FTP run length per algorithm and repeat", format!("the FTP half did not run: {e}")),
    }
}

/// What one algorithm's FTP run (one repeat) measured.
pub struct FtpRun {
    pub algorithm: &'static str,
    pub repeat: usize,
    /// Per client: mean seconds per ten-file session, sessions, failed sessions.
    pub clients: Vec<(f64, usize, usize)>,
    /// Control sessions per real server, from Fulcrum's stats.
    pub sessions: Vec<u64>,
    /// Per real server, its vsftpd with every session process it forked: CPU seconds over the
    /// run (rusage, microseconds) and the most resident memory sampled (KiB).
    pub servers: Vec<(f64, u64)>,
    pub fulcrum: Usage,
    pub fulcrum_cpu: f64,
    pub seconds: f64,
    /// Each real server over time (the paper's FTP figures).
    pub server_timelines: Vec<Vec<Point>>,
}

impl FtpRun {
    pub fn mean_session(&self) -> f64 {
        Summary::of(&self.clients.iter().map(|c| c.0).collect::<Vec<_>>()).mean
    }

    fn failed(&self) -> usize {
        self.clients.iter().map(|c| c.2).sum()
    }

    /// Fulcrum's CPU while the sessions ran, in % of one core (the paper's "SLB CPU").
    pub fn fulcrum_cpu_percent(&self) -> f64 {
        self.fulcrum_cpu / self.seconds.max(1e-9) * 100.0
    }
}

/// Table 8's FTP rows: (measure, digits, figure of a run), lower is better.
pub const MEASURES: [Measure<FtpRun>; 5] = [
    ("Client response time (s per session)", 3, |x| x.mean_session()),
    ("SLB CPU (% of a core)", 1, |x| x.fulcrum_cpu_percent()),
    ("SLB maximum memory (KiB)", 0, |x| x.fulcrum.peak_rss_kib as f64),
    ("Real servers' CPU, std dev across them (s)", 3, |x| spread(x.servers.iter().map(|s| s.0))),
    ("Real servers' maximum memory, std dev across them (KiB)", 0, |x| spread(x.servers.iter().map(|s| s.1 as f64))),
];

/// Runs the FTP half, `--repeat` times per algorithm; an `Err` says why it could not run (a
/// missing tool, say).
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<FtpRun>> {
    let vsftpd = vsftpd_bin()?;
    Command::new("curl").arg("--version").stdout(Stdio::null()).status().context("curl is not installed")?;
    let sizes = sizes(ctx.quick);
    let files = ctx.work.join("ftp-files");
    make_files(&files, sizes)?;
    let setup = Setup { vsftpd, files: &files, sizes, sessions_per_client: sessions_per_client(ctx.quick) };
    let mut runs = Vec::new();
    for repeat in 0..ctx.repeat {
        for (k, algorithm) in ALGORITHMS.iter().enumerate() {
            let r = run_one(ctx, &setup, k, algorithm, repeat).await?;
            eprintln!("java-slb ftp {algorithm}, repeat {}: mean session {:.3} s, sessions per server {:?}", repeat + 1, r.mean_session(), r.sessions);
            runs.push(r);
        }
    }
    // The files are tens of MiB and can be made again from the sizes.
    let _ = std::fs::remove_dir_all(&files);
    Ok(runs)
}

/// What every run of the FTP half shares: the server, the files it serves, and the sessions.
struct Setup<'a> {
    vsftpd: &'a str,
    files: &'a Path,
    /// The sizes of the files a session downloads, in order.
    sizes: &'a [u64],
    sessions_per_client: usize,
}

/// One algorithm (the `k`th of the paper's) and repeat: fresh servers and a fresh Fulcrum.
async fn run_one(ctx: &Ctx, setup: &Setup<'_>, k: usize, algorithm: &'static str, repeat: usize) -> anyhow::Result<FtpRun> {
    let Setup { vsftpd, files, sizes, sessions_per_client } = *setup;
    let dir = |i: usize| ctx.work.join(format!("vsftpd-{algorithm}-{i}"));
    let mut servers: Vec<Vsftpd> = (1..=SERVERS)
        .map(|i| match Host::new()? {
            // A host of its own has every port free.
            Some(host) => Vsftpd::start(vsftpd, &dir(i), &format!("ftp{i}"), files, SocketAddr::from((host.ip, 21)), Some(host)),
            None => Vsftpd::start(vsftpd, &dir(i), &format!("ftp{i}"), files, free_addr()?, None),
        })
        .collect::<anyhow::Result<_>>()?;
    let addrs: Vec<_> = servers.iter().map(|s| (s.addr, 1)).collect();
    let ports = format!("data_ports = \"{}-{}\"\n", 46000 + k * 200, 46199 + k * 200);
    let f = Fulcrum::start(&ctx.work, &format!("ftp-{algorithm}-{repeat}"), &service_toml("ftp", algorithm, &addrs, &ports))?;
    let pids: Vec<u32> = std::iter::once(f.proc.pid()).chain(servers.iter().filter_map(Vsftpd::pid)).collect();
    anyhow::ensure!(pids.len() == SERVERS + 1, "a vsftpd is not running");
    // Each server's CPU before the clients: vsftpd has forked nothing yet, so its own run time is
    // all of it, read in nanoseconds.
    let before: Vec<f64> = servers.iter().filter_map(Vsftpd::pid).map(procs::cpu_secs_now).collect();
    let stop = CancellationToken::new();
    let sampler = sample_usage(pids, Duration::from_millis(if ctx.quick { 100 } else { 1000 }), stop.clone());
    let started = Instant::now();
    let pb = ctx.progress(Some((sessions_per_client * CLIENTS) as u64), &format!("java-slb ftp {algorithm}, repeat {}", repeat + 1));
    let tasks: Vec<_> = client::sources(CLIENTS)
        .into_iter()
        .map(|source| {
            let (vip, pb, sizes) = (f.listen, pb.clone(), sizes.to_vec());
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut failed = 0;
                for _ in 0..sessions_per_client {
                    match session(source, vip, &sizes).await {
                        Ok(t) => times.push(t),
                        Err(e) => {
                            // The first failure of each client is shown; all are counted.
                            if failed == 0 {
                                pb.suspend(|| eprintln!("ftp session from {source} failed: {e:#}"));
                            }
                            failed += 1;
                        }
                    }
                    pb.inc(1);
                }
                (Summary::of(&times).mean, times.len() + failed, failed)
            })
        })
        .collect();
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await?);
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.cancel();
    let usage = sampler.await?;
    pb.finish_and_clear();
    let stats: Value = serde_json::from_slice(&client::fetch(f.admin, "/api/stats").await?)?;
    let sessions = stats["services"][0]["servers"].as_array().map(|a| a.iter().map(|s| s["total"].as_u64().unwrap_or(0)).collect()).unwrap_or_default();
    let most_memory = |i: usize| usage.iter().filter_map(|u| u.1.get(i)).map(|u| u.rss_kib).max().unwrap_or(0);
    // The samples' ticks serve the timelines; the totals come from each vsftpd's rusage, as
    // /proc's 10 ms ticks round a server's few short sessions down to nothing.
    let mut cpu = Vec::new();
    for (s, before) in servers.iter_mut().zip(&before) {
        cpu.push(s.end_measured()? - before);
    }
    let run = FtpRun {
        algorithm,
        repeat,
        clients,
        sessions,
        servers: (1..=SERVERS).map(|i| (cpu[i - 1], most_memory(i))).collect(),
        fulcrum: f.proc.usage(),
        fulcrum_cpu: cpu_used(&usage, 0),
        seconds,
        server_timelines: (1..=SERVERS).map(|i| timeline(&usage, i)).collect(),
    };
    drop(servers);
    let _ = (1..=SERVERS).try_for_each(|i| std::fs::remove_dir_all(dir(i)));
    Ok(run)
}

/// Table 7 (FTP response time per client), the FTP runs' Fulcrum figures, the real servers in
/// the layout of Tables 3 to 6 and their CPU over time; or why the half is missing.
pub fn tables(r: &mut Report, ftp: &Result<Vec<FtpRun>, String>) {
    let runs = match ftp {
        Ok(runs) => runs,
        Err(e) => return r.section("Table 7. FTP service response time", &format!("Not run: {e}.")),
    };
    let over = |algorithm: &str, figure: &dyn Fn(&FtpRun) -> f64| stats::over(runs, |x| x.algorithm == algorithm, figure);
    let mut t = Table::new(std::iter::once("Client".to_string()).chain(ALGORITHMS.iter().map(|a| a.to_string())));
    for c in 0..CLIENTS {
        t.row(std::iter::once(client_label(c)).chain(ALGORITHMS.iter().map(|a| over(a, &|x| x.clients[c].0).show(3))));
    }
    t.row(std::iter::once("**Algorithm average**".to_string()).chain(ALGORITHMS.iter().map(|a| format!("**{}**", over(a, &FtpRun::mean_session).show(3)))));
    r.section(
        "Table 7. FTP service response time (s per session of ten files)",
        &format!(
            "Four vsftpd servers, Fulcrum in FTP mode, each client a curl session (passive mode) that downloads ten files; mean over the repeats ± its 95% interval.\n\n{}",
            t.markdown()
        ),
    );
    let mut t = Table::new(["Algorithm", "Sessions per server (all repeats)", "Failed sessions", "Fulcrum CPU (% of a core)", "Fulcrum maximum memory (KiB)"]);
    for a in ALGORITHMS {
        let picked: Vec<&FtpRun> = runs.iter().filter(|x| x.algorithm == a).collect();
        let sessions: Vec<u64> = (0..SERVERS).map(|i| picked.iter().map(|x| x.sessions.get(i).copied().unwrap_or(0)).sum()).collect();
        let failed: usize = picked.iter().map(|x| x.failed()).sum();
        t.row([a.to_string(), format!("{sessions:?}"), failed.to_string(), over(a, &FtpRun::fulcrum_cpu_percent).show(1), over(a, &|x| x.fulcrum.peak_rss_kib as f64).show(0)]);
    }
    r.section("FTP: sessions, and Fulcrum's CPU and memory while they ran", &t.markdown());
    for (k, (a, paper)) in PAPER.iter().enumerate() {
        let t = server_table(&[("Maximum memory usage (KiB)", 0, &|i| over(a, &|x| x.servers[i].1 as f64)), ("CPU (s)", 2, &|i| over(a, &|x| x.servers[i].0))]);
        r.section(
            &format!("FTP, as Table {}: the real servers with {paper} ({a})", k + 3),
            &format!("vsftpd with the session processes it forked, measured together.\n\n{}", t.markdown()),
        );
        if let Some(x) = runs.iter().find(|x| x.algorithm == *a && x.repeat == 0) {
            server_plots(r, "ftp", a, &format!("6({})", (b'a' + k as u8) as char), &format!("{} ({paper})", 7 + k), &x.server_timelines);
        }
    }
    let failed: usize = runs.iter().map(FtpRun::failed).sum();
    r.check("no FTP session failed (every file's size checked)", failed == 0, format!("{failed} failed"));
    let rr: Vec<&Vec<u64>> = runs.iter().filter(|x| x.algorithm == "round-robin").map(|x| &x.sessions).collect();
    let even = |s: &Vec<u64>| s.iter().max().copied().unwrap_or(0) - s.iter().min().copied().unwrap_or(0) <= 1 && s.iter().any(|&n| n > 0);
    r.check("FTP round robin spreads the sessions evenly on every repeat", !rr.is_empty() && rr.iter().all(|s| even(s)), format!("sessions per server per repeat {rr:?}"));
    for a in ALGORITHMS {
        r.estimate(format!("ftp.{a}.mean_session_s"), &over(a, &FtpRun::mean_session));
        r.estimate(format!("ftp.{a}.fulcrum_cpu_percent"), &over(a, &FtpRun::fulcrum_cpu_percent));
        r.estimate(format!("ftp.{a}.servers_cpu_spread_s"), &over(a, &|x| spread(x.servers.iter().map(|s| s.0))));
    }
}

/// The Reading's FTP lines: each algorithm's session time against round robin's, tested in the
/// report's family (Welch's test: every repeat runs the same sessions, so a repeat ties nothing).
pub fn reading(tests: &mut Family, runs: &[FtpRun]) -> Vec<String> {
    let session = |a: &str| stats::over(runs, |x| x.algorithm == a, FtpRun::mean_session);
    ALGORITHMS
        .iter()
        .filter(|a| **a != "round-robin")
        .map(|a| format!("- FTP session time: {}", tests.verdict("round-robin", &session("round-robin"), a, &session(a), Design::Independent, "faster", " s")))
        .collect()
}

/// The FTP runs for results.json.
pub fn raw(runs: &[FtpRun]) -> Value {
    json!(
        runs.iter()
            .map(|x| json!({
                "algorithm": x.algorithm,
                "repeat": x.repeat,
                "seconds": x.seconds,
                "clients": x.clients.iter().enumerate().map(|(i, c)| json!({"source": source(i), "mean_session_secs": c.0, "sessions": c.1, "failed": c.2})).collect::<Vec<_>>(),
                "sessions_per_server": x.sessions,
                "servers": x.servers.iter().enumerate().map(|(i, s)| json!({"name": format!("ftp{}", i + 1), "cpu_secs": s.0, "max_rss_kib": s.1})).collect::<Vec<_>>(),
                "fulcrum": {"cpu_secs": x.fulcrum_cpu, "cpu_percent": x.fulcrum_cpu_percent(), "peak_rss_kib": x.fulcrum.peak_rss_kib},
                "server_timelines": x.server_timelines,
            }))
            .collect::<Vec<_>>()
    )
}

/// One client session with curl: log in, download the ten files; the seconds it took. Every
/// file's size is checked.
async fn session(source: std::net::IpAddr, vip: SocketAddr, sizes: &[u64]) -> anyhow::Result<f64> {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "300", "--interface"]).arg(source.to_string()).args(["-w", "%{size_download}\\n"]);
    for i in 0..sizes.len() {
        cmd.arg(format!("ftp://{vip}/pub/file{i}.bin")).args(["-o", "/dev/null"]);
    }
    let started = Instant::now();
    let out = cmd.stdin(Stdio::null()).output().await.context("cannot run curl")?;
    let secs = started.elapsed().as_secs_f64();
    let got: Vec<u64> = String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect();
    if !out.status.success() || got != sizes {
        bail!("curl {}: sizes {got:?}, want {sizes:?}; {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(secs)
}

/// The vsftpd binary, or why there is none.
pub fn vsftpd_bin() -> anyhow::Result<&'static str> {
    ["/usr/sbin/vsftpd", "/usr/bin/vsftpd"].into_iter().find(|p| Path::new(p).exists()).context("vsftpd is not installed (apt-get install vsftpd)")
}

/// One vsftpd serving `files` anonymously under `pub/`; it can be killed and started again on
/// the same address (the soak does).
pub struct Vsftpd {
    pub addr: SocketAddr,
    pub name: String,
    bin: String,
    conf: PathBuf,
    proc: Option<Proc>,
    /// Its host when the run isolates its servers (dropped after the process).
    host: Option<Host>,
}

impl Vsftpd {
    pub fn start(bin: &str, dir: &Path, name: &str, files: &Path, addr: SocketAddr, host: Option<Host>) -> anyhow::Result<Vsftpd> {
        use std::os::unix::fs::PermissionsExt;
        let root = dir.join("root");
        let empty = dir.join("empty");
        std::fs::create_dir_all(root.join("pub")).and_then(|_| std::fs::create_dir_all(&empty)).with_context(|| format!("cannot create {}", dir.display()))?;
        for entry in std::fs::read_dir(files)? {
            let entry = entry?;
            let to = root.join("pub").join(entry.file_name());
            if !to.exists() {
                std::fs::hard_link(entry.path(), &to).or_else(|_| std::fs::copy(entry.path(), &to).map(|_| ()))?;
            }
        }
        // vsftpd refuses an anonymous root its user can write to.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o555))?;
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o555))?;
        let conf = dir.join("vsftpd.conf");
        std::fs::write(
            &conf,
            format!(
                "listen=YES\nlisten_address={}\nlisten_port={}\nbackground=NO\nanonymous_enable=YES\nanon_root={}\n\
                 no_anon_password=YES\nlocal_enable=NO\nwrite_enable=NO\nconnect_from_port_20=NO\nseccomp_sandbox=NO\n\
                 secure_chroot_dir={}\nxferlog_enable=NO\nmax_clients=0\nmax_per_ip=0\nftpd_banner=vsftpd {name}\n",
                addr.ip(),
                addr.port(),
                root.display(),
                empty.display()
            ),
        )?;
        let mut v = Vsftpd { addr, name: name.to_string(), bin: bin.to_string(), conf, proc: None, host };
        v.restart()?;
        Ok(v)
    }

    /// Starts vsftpd again (after `kill`) and waits until it listens.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let mut command = self.host.as_ref().map_or_else(|| Command::new(&self.bin), |h| h.command(&self.bin));
        let child = command.arg(&self.conf).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().context("cannot start vsftpd")?;
        let mut proc = Proc { name: self.name.clone(), child };
        // Not probed with a connection, which vsftpd would answer with a session process whose
        // CPU would count with the run's.
        match procs::await_listening(&mut proc, self.addr) {
            Ok(()) => {}
            Err(procs::NotListening::Exited(status)) => bail!("vsftpd {} exited ({status}) before listening on {}", self.name, self.addr),
            Err(procs::NotListening::TimedOut) => bail!("vsftpd {} did not listen on {} within 10 s (it needs root to run as its ftp user)", self.name, self.addr),
        }
        self.proc = Some(proc);
        Ok(())
    }

    /// The listening process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Once the sessions' processes have ended (waits up to 5 s), ends vsftpd and returns the CPU
    /// seconds it used in its life with every session process it reaped, at microsecond
    /// precision (see [`Proc::end_measured`]).
    pub fn end_measured(&mut self) -> anyhow::Result<f64> {
        let mut proc = self.proc.take().with_context(|| format!("vsftpd {} is not running", self.name))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while procs::has_children(proc.pid()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        proc.end_measured()
    }

    /// Kills the listening process (SIGKILL) and reaps it; sessions in progress are left to
    /// their own processes, as when a real vsftpd's master dies.
    pub fn kill(&mut self) {
        self.proc = None;
    }
}

/// Ten files of the given sizes with varied content.
fn make_files(dir: &PathBuf, sizes: &[u64]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for (i, size) in sizes.iter().enumerate() {
        let mut data = Vec::with_capacity(*size as usize + 8);
        while (data.len() as u64) < *size {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(&x.to_le_bytes());
        }
        data.truncate(*size as usize);
        std::fs::write(dir.join(format!("file{i}.bin")), data)?;
    }
    Ok(())
}
