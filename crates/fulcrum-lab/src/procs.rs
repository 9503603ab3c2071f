//! The lab's processes: real servers (`fulcrum backend`) and Fulcrum itself (`fulcrum run`), each
//! a child process so its CPU time and memory come from the operating system (`/proc`), as the
//! papers read them from their hosts' monitors. The harness is `testkit`'s, shared with the
//! tests; what is the lab's own is which binary runs and how a run's config is written.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
pub use testkit::{Backend, Proc, Usage, cpu_secs_now, free_addr, has_children, listens_for, tree_usages};

use super::host::Host;

/// A real server of a run: the process, and the host it runs on when the run isolates its
/// servers ([`Host`]). It reads as its [`Backend`].
pub struct Server {
    // Dropped in this order: the server, what loads it, then its host.
    pub backend: Backend,
    /// What degrades it from beside it (`stress` in its host's quota), while it runs.
    pub load: Option<Proc>,
    pub host: Option<Host>,
}

impl std::ops::Deref for Server {
    type Target = Backend;
    fn deref(&self) -> &Backend {
        &self.backend
    }
}

impl Server {
    /// Loads the server's host with `stress ARGS`, inside its quota (the passive paper's way to
    /// make a server slow); only an isolated server has a quota to share.
    pub fn stress(&mut self, args: &[&str]) -> anyhow::Result<()> {
        let host = self.host.as_ref().context("the stress degradation needs isolated real servers (run without --shared)")?;
        self.load = Some(host.stress(args)?);
        Ok(())
    }
}

/// A real server `name` with `extra` options, on a port the kernel picks: on a host of its own
/// when the run isolates its servers, else on 127.0.0.1.
pub fn backend(name: &str, extra: &[String]) -> anyhow::Result<Server> {
    let Some(host) = Host::new()? else {
        return Ok(Server { backend: backend_on(name, SocketAddr::from(([127, 0, 0, 1], 0)), extra)?, load: None, host: None });
    };
    let args: Vec<&str> = extra.iter().map(String::as_str).collect();
    let backend = Backend::start_as(host.command(exe()?), name, SocketAddr::from((host.ip, 0)), &args, None).with_context(|| format!("cannot start real server {name}"))?;
    Ok(Server { backend, load: None, host: Some(host) })
}

/// The same on a given address (the soak restarts a killed server where it was).
pub fn backend_on(name: &str, listen: SocketAddr, extra: &[String]) -> anyhow::Result<Backend> {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    Backend::start(&exe()?, name, listen, &extra, None).with_context(|| format!("cannot start real server {name}"))
}

/// Fulcrum under test: `fulcrum run` on a config the lab wrote.
pub struct Fulcrum {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub proc: Proc,
}

impl Fulcrum {
    /// Writes `service` (TOML of one `[[service]]` whose listen address is `{LISTEN}`) with an
    /// admin table into `dir`, starts Fulcrum on it and waits until it listens.
    pub fn start(dir: &Path, tag: &str, service: &str) -> anyhow::Result<Fulcrum> {
        // A port found free can be taken before Fulcrum binds it (the lab's own clients draw
        // source ports from the same range): try again on other ports, a few times.
        let mut tries = 3;
        loop {
            match Self::start_once(dir, tag, service) {
                Err(e) if tries > 1 && format!("{e:#}").contains("Address already in use") => tries -= 1,
                other => return other,
            }
        }
    }

    /// Fulcrum as a kernel balancer's controller (`mode = "kernel"`): `service` names its own
    /// virtual address, which Fulcrum does not bind, so only the admin listener is waited for.
    pub fn start_kernel(dir: &Path, tag: &str, service: &str, vip: SocketAddr) -> anyhow::Result<Fulcrum> {
        let admin = free_addr()?;
        let proc = Self::launch(dir, tag, admin, service, &[admin])?;
        Ok(Fulcrum { listen: vip, admin, proc })
    }

    fn start_once(dir: &Path, tag: &str, service: &str) -> anyhow::Result<Fulcrum> {
        let listen = free_addr()?;
        let admin = free_addr()?;
        let proc = Self::launch(dir, tag, admin, &service.replace("{LISTEN}", &listen.to_string()), &[listen, admin])?;
        Ok(Fulcrum { listen, admin, proc })
    }

    /// Writes `service` with an admin table on `admin` into `dir`, runs Fulcrum on it until
    /// every address of `ready` accepts, and counts it in the run's headroom check.
    fn launch(dir: &Path, tag: &str, admin: SocketAddr, service: &str, ready: &[SocketAddr]) -> anyhow::Result<Proc> {
        let config = format!("allow_root = true\n\n[admin]\nlisten = \"{admin}\"\n\n{service}");
        let path = dir.join(format!("fulcrum-{tag}.toml"));
        std::fs::write(&path, config).with_context(|| format!("cannot write {}", path.display()))?;
        let proc = run_fulcrum(&path, &dir.join(format!("fulcrum-{tag}.log")), ready)?;
        super::headroom::watch(proc.pid());
        Ok(proc)
    }
}

/// Why a child process was not seen listening ([`await_listening`]).
pub enum NotListening {
    Exited(std::process::ExitStatus),
    TimedOut,
}

/// Waits up to 10 s until `proc` listens on `addr`, read from its own namespace's
/// `/proc/PID/net/tcp` without connecting (a probe connection would be a session to a server
/// that forks one per connection, vsftpd), checking every 20 ms that it still runs.
pub fn await_listening(proc: &mut Proc, addr: SocketAddr) -> Result<(), NotListening> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !listens_for(proc.pid(), addr) {
        if let Some(status) = proc.exited() {
            return Err(NotListening::Exited(status));
        }
        if std::time::Instant::now() > deadline {
            return Err(NotListening::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs `fulcrum run CONFIG` with its log in `log` and waits until every address of `ready`
/// accepts; the error carries the log when Fulcrum exits or does not listen within 15 s.
pub fn run_fulcrum(config: &Path, log: &Path, ready: &[SocketAddr]) -> anyhow::Result<Proc> {
    testkit::start_fulcrum(Command::new(exe()?).args(["--log", "warn", "run"]).arg(config), log, ready, Duration::from_secs(15))
}

/// The `fulcrum` binary every child runs: the one that started the lab (`FULCRUM_EXE`, set by
/// `fulcrum lab`), else the one beside the lab's own executable.
pub fn exe() -> anyhow::Result<PathBuf> {
    if let Some(exe) = std::env::var_os("FULCRUM_EXE") {
        return Ok(PathBuf::from(exe));
    }
    let me = std::env::current_exe().context("cannot find the lab's executable")?;
    let exe = me.with_file_name("fulcrum");
    anyhow::ensure!(exe.exists(), "{} is missing: build it with `cargo build --release`", exe.display());
    Ok(exe)
}

/// The optimisation levels a run measures: the `fulcrum` binary's (its `--version` says it, as
/// "0.1.0 (opt-level 3)") and the lab's own, whose clients share the machine with it.
pub struct Build {
    pub fulcrum: String,
    pub lab: String,
}

impl Build {
    pub fn read() -> anyhow::Result<Build> {
        let exe = exe()?;
        let out = Command::new(&exe).arg("--version").output().with_context(|| format!("cannot run {} --version", exe.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let level = text.split_once("(opt-level ").and_then(|(_, rest)| rest.split_once(')')).map(|(level, _)| level.to_string());
        let fulcrum = level.with_context(|| format!("{} --version does not name its opt-level: {:?}", exe.display(), text.trim()))?;
        Ok(Build { fulcrum, lab: env!("OPT_LEVEL").to_string() })
    }

    /// Which of the two was built without optimisation, if any: its CPU, memory and speed would
    /// be a debug build's, not a release's.
    pub fn unoptimised(&self) -> Option<&'static str> {
        if self.fulcrum == "0" {
            Some("fulcrum")
        } else if self.lab == "0" {
            Some("fulcrum-lab")
        } else {
            None
        }
    }

    pub fn describe(&self) -> String {
        format!("Fulcrum at opt-level {}, the lab's clients at opt-level {}", self.fulcrum, self.lab)
    }
}

/// Fails with a clear message if a source address the clients need cannot be bound.
pub fn check_sources(sources: &[std::net::IpAddr]) -> anyhow::Result<()> {
    for ip in sources {
        if let Err(e) = std::net::TcpListener::bind((*ip, 0)) {
            bail!(
                "source address {ip} is not available ({e}); the lab's clients need 127.0.0.11 to 127.0.0.20, \
                 which Linux routes to loopback (elsewhere add them as loopback aliases)"
            );
        }
    }
    Ok(())
}
