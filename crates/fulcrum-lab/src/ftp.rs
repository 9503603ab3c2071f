//! The FTP half of `java-slb` (the paper's Table 7): four vsftpd real servers behind Fulcrum in FTP
//! mode, ten clients (curl, passive mode, from 127.0.0.11 to .20) each logging in and downloading
//! ten files of mixed sizes per session, over and over, once per algorithm of the paper. vsftpd and
//! curl are the user's own tools here: without them the half is skipped and the report says why.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use super::client;
use super::procs::{Fulcrum, Proc, Usage, free_addr};
use super::report::Summary;
use super::{Ctx, service_toml};

pub const ALGORITHMS: [&str; 4] = ["round-robin", "source-hash", "least-conn", "random"];
const SERVERS: usize = 4;

/// What one algorithm's FTP run measured.
pub struct FtpRun {
    pub algorithm: &'static str,
    /// Per client: mean seconds per ten-file session, sessions, failed sessions.
    pub clients: Vec<(f64, usize, usize)>,
    /// Control sessions per real server, from Fulcrum's stats.
    pub sessions: Vec<u64>,
    pub fulcrum: Usage,
    pub fulcrum_cpu: f64,
}

/// Runs the FTP half; an `Err` says why it could not run (a missing tool, say).
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<FtpRun>> {
    let vsftpd = vsftpd_bin()?;
    Command::new("curl").arg("--version").stdout(Stdio::null()).status().context("curl is not installed")?;
    let sizes: &[u64] = if ctx.quick { &[1 << 10, 5 << 10, 20 << 10, 100 << 10, 300 << 10, 1 << 20, 40 << 10, 3 << 10, 60 << 10, 200 << 10] } else { &[1 << 10, 5 << 10, 20 << 10, 100 << 10, 300 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20] };
    let files = ctx.work.join("ftp-files");
    make_files(&files, sizes)?;
    let sessions_per_client = if ctx.quick { 2 } else { 6 };
    let mut runs = Vec::new();
    for (k, algorithm) in ALGORITHMS.iter().enumerate() {
        let servers: Vec<Vsftpd> = (1..=SERVERS).map(|i| Vsftpd::start(vsftpd, &ctx.work.join(format!("vsftpd-{algorithm}-{i}")), &format!("ftp{i}"), &files, free_addr()?)).collect::<anyhow::Result<_>>()?;
        let addrs: Vec<_> = servers.iter().map(|s| (s.addr, 1)).collect();
        let ports = format!("data_ports = \"{}-{}\"\n", 46000 + k * 200, 46199 + k * 200);
        let f = Fulcrum::start(&ctx.work, &format!("ftp-{algorithm}"), &service_toml("ftp", algorithm, &addrs, &ports))?;
        let before = f.proc.usage();
        let pb = ctx.progress(Some((sessions_per_client * 10) as u64), &format!("java-slb ftp {algorithm}"));
        let tasks: Vec<_> = client::sources(10)
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
        pb.finish_and_clear();
        let stats: Value = serde_json::from_slice(&client::fetch(f.admin, "/api/stats").await?)?;
        let sessions = stats["services"][0]["servers"].as_array().map(|a| a.iter().map(|s| s["total"].as_u64().unwrap_or(0)).collect()).unwrap_or_default();
        let fulcrum = f.proc.usage();
        eprintln!("java-slb ftp {algorithm}: mean session {:.3} s, sessions per server {sessions:?}", Summary::of(&clients.iter().map(|c| c.0).collect::<Vec<_>>()).mean);
        runs.push(FtpRun { algorithm, clients, sessions, fulcrum, fulcrum_cpu: fulcrum.cpu_secs - before.cpu_secs });
        drop(servers);
        let _ = (1..=SERVERS).try_for_each(|i| std::fs::remove_dir_all(ctx.work.join(format!("vsftpd-{algorithm}-{i}"))));
    }
    // The files are tens of MiB and can be made again from the sizes.
    let _ = std::fs::remove_dir_all(&files);
    Ok(runs)
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
}

impl Vsftpd {
    pub fn start(bin: &str, dir: &Path, name: &str, files: &Path, addr: SocketAddr) -> anyhow::Result<Vsftpd> {
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
                "listen=YES\nlisten_address=127.0.0.1\nlisten_port={}\nbackground=NO\nanonymous_enable=YES\nanon_root={}\n\
                 no_anon_password=YES\nlocal_enable=NO\nwrite_enable=NO\nconnect_from_port_20=NO\nseccomp_sandbox=NO\n\
                 secure_chroot_dir={}\nxferlog_enable=NO\nmax_clients=0\nmax_per_ip=0\nftpd_banner=vsftpd {name}\n",
                addr.port(),
                root.display(),
                empty.display()
            ),
        )?;
        let mut v = Vsftpd { addr, name: name.to_string(), bin: bin.to_string(), conf, proc: None };
        v.restart()?;
        Ok(v)
    }

    /// Starts vsftpd again (after `kill`) and waits until it listens.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let child = Command::new(&self.bin).arg(&self.conf).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().context("cannot start vsftpd")?;
        let mut proc = Proc { name: self.name.clone(), child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(self.addr).is_err() {
            if let Ok(Some(status)) = proc.child.try_wait() {
                bail!("vsftpd {} exited ({status}) before listening on {}", self.name, self.addr);
            }
            if Instant::now() > deadline {
                bail!("vsftpd {} did not listen on {} within 10 s (it needs root to run as its ftp user)", self.name, self.addr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.proc = Some(proc);
        Ok(())
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
