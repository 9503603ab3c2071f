//! `fulcrum demo --fleet`: a local etcd with the demo's services in it, and two instances that
//! take them from there, so a change made in one dashboard can be watched arriving in the other.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::app::App;
use crate::config;
use crate::fleet::snapshot::Keys;
use crate::shutdown::Shutdown;

const PREFIX: &str = "/fulcrum-demo";

/// A single-member etcd for the demo, its data in the demo's folder; stopped on drop.
pub struct LocalEtcd {
    pub endpoint: String,
    /// Held for `kill_on_drop`: etcd stops with the demo.
    _child: tokio::process::Child,
}

impl LocalEtcd {
    pub async fn start(dir: &Path) -> anyhow::Result<LocalEtcd> {
        let etcd = find_or_install_etcd().await?;
        let (client, peer) = (free_port()?, free_port()?);
        let endpoint = format!("http://127.0.0.1:{client}");
        let log = std::fs::File::create(dir.join("etcd.log")).context("creating etcd's log")?;
        let child = tokio::process::Command::new(&etcd)
            .args(["--name", "demo", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &endpoint, "--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}"), "--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("demo=http://127.0.0.1:{peer}"), "--logger", "zap", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {}", etcd.display()))?;
        Ok(LocalEtcd { endpoint, _child: child })
    }
}

/// etcd from the PATH, or Debian's etcd-server installed now (as root), as `scripts/test` does.
async fn find_or_install_etcd() -> anyhow::Result<PathBuf> {
    let found = || std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("etcd")).find(|f| f.is_file()));
    if let Some(etcd) = found() {
        return Ok(etcd);
    }
    let root = is_root();
    anyhow::ensure!(root, "the fleet demo runs etcd, which is not installed: apt-get install etcd-server");
    println!("fulcrum demo: installing etcd-server (apt-get) for the fleet demo");
    let status = tokio::process::Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends", "etcd-server"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .await
        .context("cannot run apt-get")?;
    anyhow::ensure!(status.success(), "apt-get install etcd-server failed ({status}); install etcd and run the demo again");
    found().context("etcd-server installed, but no etcd on the PATH")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|v| v.split_whitespace().next() == Some("0"))))
        .unwrap_or(false)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Puts the demo's services (`text`, the demo config) into the local etcd, then starts two
/// instances of the fleet: `lb-1` on `listen` and `admin`, `lb-2` on the next port of each.
pub async fn start(text: &str, dir: &Path, listen: SocketAddr, admin: SocketAddr) -> anyhow::Result<(LocalEtcd, Vec<(String, Arc<App>, SocketAddr, SocketAddr)>)> {
    let etcd = LocalEtcd::start(dir).await?;
    let shared = config::parse(text, "demo.toml").map_err(|d| anyhow::anyhow!("embedded demo config is invalid:\n{d}"))?;
    let keys = Keys::new(PREFIX);
    let settings = fleet_settings(&etcd.endpoint)?;
    // etcd takes a moment to elect itself; the import is tried until it answers.
    let mut tries = 0;
    let revision = loop {
        let attempt = async {
            let mut client = crate::fleet::connect(&settings).await?;
            crate::fleet::replace_services(&mut client, &keys, &shared.services, "fulcrum demo", "the demo's services").await
        };
        match attempt.await {
            Ok(r) => break r,
            Err(e) if tries >= 50 => return Err(anyhow::anyhow!("the demo's etcd did not answer: {e} (its log: {})", dir.join("etcd.log").display())),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    println!("  etcd: {} (the demo's services imported at revision {revision}, prefix {PREFIX})", etcd.endpoint);
    let mut instances = Vec::new();
    for i in 0..2u16 {
        let name = format!("lb-{}", i + 1);
        let (listen, admin) = (SocketAddr::new(listen.ip(), listen.port() + i), SocketAddr::new(admin.ip(), admin.port() + i));
        let path = dir.join(format!("{name}.toml"));
        let local = format!(
            "[admin]\nlisten = \"{admin}\"\n\n[fleet]\nendpoints = [\"{}\"]\nprefix = \"{PREFIX}\"\nname = \"{name}\"\n\n[fleet.override.http]\nlisten = \"{listen}\"\n",
            etcd.endpoint
        );
        std::fs::write(&path, local).with_context(|| format!("writing {}", path.display()))?;
        let loaded = config::load(&path).map_err(|d| anyhow::anyhow!("the demo's instance file is invalid:\n{d}"))?;
        let app = App::start(loaded.config, Some(path), Shutdown::new()).await?;
        instances.push((name, app, listen, admin));
    }
    Ok((etcd, instances))
}

fn fleet_settings(endpoint: &str) -> anyhow::Result<config::Fleet> {
    let text = format!("[fleet]\nendpoints = [\"{endpoint}\"]\nprefix = \"{PREFIX}\"\n");
    config::parse_with(&text, "demo", config::Resolve::No).map_err(|d| anyhow::anyhow!("{d}"))?.fleet.context("no [fleet]")
}
