//! What the soak runs: four HTTP real servers (`fulcrum backend` h1 to h4) behind a `tcp` and an
//! `http` service, two vsftpd (f1, f2) behind an `ftp` service, and Fulcrum on a config file it
//! writes, with its admin API on loopback. h1, h2 and f1 are stable; h3 and f2 are killed and
//! started again, h4 is stopped and continued. Every port is taken below the kernel's ephemeral
//! range, so a restarted server never finds its port taken by some client's outgoing connection.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::wire::pattern;
use crate::ftp::{Vsftpd, vsftpd_bin};
use crate::procs::{Backend, Proc, run_fulcrum};

/// The HTTP real servers; the first two are stable.
pub const HTTP_SERVERS: [&str; 4] = ["h1", "h2", "h3", "h4"];
/// Killed and started again.
pub const KILLED_HTTP: &str = "h3";
/// Stopped (SIGSTOP) until its health checks fail, then continued.
pub const STOPPED_HTTP: &str = "h4";
pub const FTP_SERVERS: [&str; 2] = ["f1", "f2"];
pub const KILLED_FTP: &str = "f2";
/// Servers no chaos touches: errors on them are Fulcrum's.
pub const STABLE: [&str; 3] = ["h1", "h2", "f1"];
/// Fulcrum's runtime threads, fixed so the bound on its spare splice pipes is known.
pub const WORKERS: u64 = 2;

/// The FTP files: name and size (pattern bytes), small to a few MiB.
pub fn ftp_files() -> Vec<(String, u64)> {
    [1_000u64, 48 << 10, 512 << 10, (3 << 20) + 7].iter().enumerate().map(|(i, n)| (format!("file{i}.bin"), *n)).collect()
}

/// Loopback ports below the ephemeral range, checked free by binding them.
pub struct Ports {
    next: u16,
}

impl Ports {
    pub fn new() -> Ports {
        // ip_local_port_range is "LOW HIGH"; start well below LOW, at a place that differs
        // between concurrent runs.
        let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok().and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok()).unwrap_or(32768);
        let base = low.saturating_sub(12_000).max(1024);
        Ports { next: base + (std::process::id() % 8000) as u16 }
    }

    /// `n` consecutive free ports; the first.
    pub fn take(&mut self, n: u16) -> anyhow::Result<u16> {
        for _ in 0..2000 {
            let first = self.next;
            self.next = self.next.checked_add(n).context("no free loopback ports left")?;
            if (first..first + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
                return Ok(first);
            }
        }
        bail!("found no {n} free loopback ports in a row")
    }

    pub fn addr(&mut self) -> anyhow::Result<SocketAddr> {
        Ok(SocketAddr::from(([127, 0, 0, 1], self.take(1)?)))
    }
}

/// The addresses of one run.
#[derive(Debug, Clone)]
pub struct Addrs {
    pub admin: SocketAddr,
    pub tcp: SocketAddr,
    pub http: SocketAddr,
    pub ftp: SocketAddr,
    pub data_ports: u16,
    pub http_servers: Vec<SocketAddr>,
    pub ftp_servers: Vec<SocketAddr>,
}

/// Data ports Fulcrum may open for FTP.
const DATA_PORTS: u16 = 100;

impl Addrs {
    pub fn pick() -> anyhow::Result<Addrs> {
        let mut p = Ports::new();
        Ok(Addrs {
            admin: p.addr()?,
            tcp: p.addr()?,
            http: p.addr()?,
            ftp: p.addr()?,
            data_ports: p.take(DATA_PORTS)?,
            http_servers: (0..HTTP_SERVERS.len()).map(|_| p.addr()).collect::<anyhow::Result<_>>()?,
            ftp_servers: (0..FTP_SERVERS.len()).map(|_| p.addr()).collect::<anyhow::Result<_>>()?,
        })
    }

    /// The server name of an address in Fulcrum's stats.
    pub fn name_of(&self, address: &str) -> Option<&'static str> {
        let find = |list: &[SocketAddr], names: &[&'static str]| list.iter().position(|a| a.to_string() == address).map(|i| names[i]);
        find(&self.http_servers, &HTTP_SERVERS).or_else(|| find(&self.ftp_servers, &FTP_SERVERS))
    }

    /// The config; `flip` changes h2's and f1's weights (1 or 2), so every reload changes
    /// something in each service.
    pub fn config(&self, flip: bool) -> String {
        let w = if flip { 2 } else { 1 };
        let health = |kind: &str| {
            let path = if kind == "http" { "path = \"/index.html\"\n" } else { "" };
            format!("\n[service.health]\nkind = \"{kind}\"\ninterval = \"1s\"\ntimeout = \"500ms\"\nrise = 2\nfall = 2\n{path}")
        };
        let servers = |list: &[SocketAddr], names: &[&str]| {
            let weight = |name: &str| if name == "h2" || name == "f1" { w } else { 1 };
            crate::servers_toml(&list.iter().zip(names).map(|(a, n)| (*a, weight(n))).collect::<Vec<_>>())
        };
        let service = |name: &str, listen: SocketAddr, extra: &str, kind: &str, (list, names): (&[SocketAddr], &[&str])| {
            format!(
                "\n[[service]]\nname = \"{name}\"\nlisten = \"{listen}\"\nmode = \"{name}\"\nalgorithm = \"round-robin\"\nconnect_timeout = \"1s\"\n{extra}{}{}",
                health(kind),
                servers(list, names)
            )
        };
        let ftp_extra = format!("data_ports = \"{}-{}\"\n", self.data_ports, self.data_ports + DATA_PORTS - 1);
        format!(
            "# Written by the soak; rewritten with other weights before each reload.\nallow_root = true\nworkers = {WORKERS}\n\n[admin]\nlisten = \"{}\"\n{}{}{}",
            self.admin,
            service("tcp", self.tcp, "", "http", (&self.http_servers, &HTTP_SERVERS)),
            service("http", self.http, "", "http", (&self.http_servers, &HTTP_SERVERS)),
            service("ftp", self.ftp, &ftp_extra, "ftp", (&self.ftp_servers, &FTP_SERVERS)),
        )
    }
}

/// Every process of a run; dropping it kills them all.
pub struct Topology {
    pub addrs: Addrs,
    pub config: PathBuf,
    pub log: PathBuf,
    pub http: Vec<Backend>,
    pub ftp: Vec<Vsftpd>,
    pub fulcrum: Proc,
}

impl Topology {
    pub fn start(dir: &Path) -> anyhow::Result<Topology> {
        let vsftpd = vsftpd_bin()?;
        let addrs = Addrs::pick()?;
        let http = HTTP_SERVERS.iter().zip(&addrs.http_servers).map(|(n, a)| crate::procs::backend_on(n, *a, &[])).collect::<anyhow::Result<Vec<_>>>()?;
        let files = dir.join("ftp-files");
        std::fs::create_dir_all(&files).with_context(|| format!("cannot create {}", files.display()))?;
        for (name, size) in ftp_files() {
            std::fs::write(files.join(&name), (0..size).map(pattern).collect::<Vec<u8>>()).with_context(|| format!("cannot write {name}"))?;
        }
        let ftp = FTP_SERVERS
            .iter()
            .zip(&addrs.ftp_servers)
            .map(|(n, a)| Vsftpd::start(vsftpd, &dir.join(format!("vsftpd-{n}")), n, &files, *a, None))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let config = dir.join("fulcrum.toml");
        std::fs::write(&config, addrs.config(false)).with_context(|| format!("cannot write {}", config.display()))?;
        let log = dir.join("fulcrum.log");
        let fulcrum = run_fulcrum(&config, &log, &[addrs.admin, addrs.tcp, addrs.http, addrs.ftp])?;
        Ok(Topology { addrs, config, log, http, ftp, fulcrum })
    }
}

/// Rewrites the config with `flip` and asks Fulcrum to reload it; an error says why it was
/// refused.
pub async fn reload(addrs: &Addrs, config: &Path, flip: bool) -> anyhow::Result<()> {
    std::fs::write(config, addrs.config(flip)).with_context(|| format!("cannot write {}", config.display()))?;
    let answer = admin_post(addrs.admin, "/api/reload").await?;
    anyhow::ensure!(answer.contains("\"ok\":true"), "reload refused: {}", answer.lines().last().unwrap_or(""));
    Ok(())
}

/// POSTs `{}` to the admin API; the whole answer, head and body.
async fn admin_post(admin: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(admin).await.with_context(|| format!("cannot reach the admin API at {admin}"))?;
    let req = format!("POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}");
    s.write_all(req.as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}
