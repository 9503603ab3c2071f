//! Isolated real servers: each server of a run gets a host of its own, a network namespace joined
//! to the lab's by a veth pair, its CPU capped by a cgroup quota (v1 `cpu.cfs_quota_us`, v2
//! `cpu.max`) and its outgoing link optionally shaped with `tbf`. On one machine the clients,
//! Fulcrum and the servers would otherwise share the same cores, and a server could never be
//! slower than another: with a quota each server saturates before the clients or Fulcrum do, as
//! on the papers' separate machines. The hosts' cgroups also carry the largest CPU weight, so a
//! machine busy with other work still gives each host its quota. The lab itself (its clients
//! and every Fulcrum it starts) runs in a network namespace of its own too
//! ([`enter_own_network`]), so every packet of a run stays in namespaces the run made. Hosts are
//! made with `ip` and removed when dropped.

use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::procs::Proc;

/// How a run's real servers are isolated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Isolation {
    /// Each server's CPU quota, in cores (0.25 is a quarter of one core).
    pub cpu: f64,
    /// Each server's outgoing link in Mbit/s, shaped with `tbf`; `None` leaves it as the veth is.
    pub link_mbit: Option<u32>,
}

impl Isolation {
    /// What a report says of it.
    pub fn describe(&self) -> String {
        format!(
            "each in a network namespace of its own (veth to the lab's), CPU capped at {:.0}% of one core by a cgroup quota, link {}",
            self.cpu * 100.0,
            self.link_mbit.map_or("not shaped".to_string(), |m| format!("shaped to {m} Mbit/s with tbf"))
        )
    }
}

static ISOLATION: OnceLock<Isolation> = OnceLock::new();
/// The next host's number: its addresses and names.
static NEXT: AtomicU32 = AtomicU32::new(1);
/// The folder of this run's cgroups, made by [`isolate`].
static CGROUPS: OnceLock<Result<Cgroups, String>> = OnceLock::new();

/// Marks a lab process that already runs in a network namespace of its own.
const OWN_NETWORK: &str = "FULCRUM_LAB_OWN_NETWORK";

/// Makes the lab run in a network namespace of its own: re-executes this program under
/// `unshare --net` (the same process id) unless it already is there, then brings its loopback
/// up. Call it before any thread starts.
pub fn enter_own_network() -> anyhow::Result<()> {
    if std::env::var_os(OWN_NETWORK).is_some() {
        return ip(&["link", "set", "lo", "up"]);
    }
    let probe = Command::new("unshare").args(["--net", "true"]).stderr(Stdio::null()).status();
    if !probe.as_ref().is_ok_and(|s| s.success()) {
        bail!(
            "cannot make a network namespace for the isolated real servers (`unshare --net` {}): run the lab as root, \
             or with --shared to run the servers beside the clients on the whole machine",
            probe.map_or_else(|e| format!("did not run: {e}"), |s| format!("failed: {s}"))
        );
    }
    let me = std::env::current_exe().context("cannot find the lab's executable")?;
    let err = Command::new("unshare").arg("--net").arg("--").arg(me).args(std::env::args_os().skip(1)).env(OWN_NETWORK, "1").exec();
    bail!("cannot run the lab under unshare --net: {err}")
}

/// Sets how this run isolates its servers; without a call, servers run unconfined on loopback.
/// Makes the run's cgroup folder now, so a machine without one fails before the run starts.
pub fn isolate(how: Isolation) -> anyhow::Result<()> {
    let _ = ISOLATION.set(how);
    cgroups().map(|_| ())
}

/// The run's isolation, if any.
pub fn isolation() -> Option<Isolation> {
    ISOLATION.get().copied()
}

/// The report's deviation from the papers' separate machines, as this run placed its servers.
pub fn deviation() -> &'static str {
    if isolation().is_some() {
        "The real servers are network namespaces with a CPU quota each on this one machine, not machines of their own: they share its memory, caches and kernel with the clients and the balancer."
    } else {
        "The clients, the balancer and the real servers share one machine and its cores (--shared), so the real servers have no capacity of their own and an algorithm's effect may not show."
    }
}

/// A real server's host: its namespace, address and cgroup.
pub struct Host {
    /// The server's address, on its end of the veth.
    pub ip: Ipv4Addr,
    netns: String,
    cgroup: PathBuf,
}

impl Host {
    /// A new host when the run isolates its servers, `None` when it does not.
    pub fn new() -> anyhow::Result<Option<Host>> {
        let Some(how) = isolation() else { return Ok(None) };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Two addresses of a /30 per host, from 10.64.0.0: room for 4 million hosts.
        let base = u32::from(Ipv4Addr::new(10, 64, 0, 0)) + n * 4;
        let (ours, theirs) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
        let netns = format!("fulcrum-lab-{}-{n}", std::process::id());
        let cgroup = cgroups()?.make(n, how.cpu)?;
        // From here the host owns what was made, so a failure below removes it.
        let host = Host { ip: theirs, netns, cgroup };
        let veth = format!("lab{n}");
        ip(&["netns", "add", &host.netns])?;
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &host.netns])?;
        ip(&["addr", "add", &format!("{ours}/30"), "dev", &veth])?;
        ip(&["link", "set", &veth, "up"])?;
        ip(&["-n", &host.netns, "addr", "add", &format!("{theirs}/30"), "dev", "eth0"])?;
        ip(&["-n", &host.netns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &host.netns, "link", "set", "lo", "up"])?;
        // Replies to clients the lab's kernel balancer forwards (kernel mode) go back the way
        // they came.
        ip(&["-n", &host.netns, "route", "add", "default", "via", &ours.to_string()])?;
        if let Some(mbit) = how.link_mbit {
            // A burst of 10 ms at the rate, and at most 50 ms of queue before tbf drops.
            let burst = (mbit as u64 * 1_000_000 / 8 / 100).max(16 * 1024);
            run(Command::new("ip").args(["netns", "exec", &host.netns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf"]).args([
                "rate",
                &format!("{mbit}mbit"),
                "burst",
                &burst.to_string(),
                "latency",
                "50ms",
            ]))?;
        }
        Ok(Some(host))
    }

    /// A command that runs `program` in this host's cgroup and namespace: a shell joins the
    /// cgroup, then execs `ip netns exec`, which execs the program, so the child's id is the
    /// program's and nothing it forks, even at once, escapes the quota (moving a process after
    /// it started leaves the children it already forked behind). The cgroup is joined first
    /// since `ip netns exec` mounts a /sys of the namespace's own, without the cgroup folders.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", r#"echo $$ > "$0" && exec ip netns exec "$@""#]).arg(self.cgroup.join("cgroup.procs")).arg(&self.netns).arg(program);
        c
    }

    /// Runs `stress ARGS` (CPU and I/O hogs, as the passive paper loaded its server) inside this
    /// host's quota, so the server beside it gets what the hogs leave of it.
    pub fn stress(&self, args: &[&str]) -> anyhow::Result<Proc> {
        let mut command = self.command("stress");
        command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut proc = Proc::spawn("stress", &mut command)?;
        // stress that is not installed ends at once; one that runs keeps running.
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = proc.exited() {
            bail!("stress did not run ({status}): the stress degradation needs `stress` (apt-get install stress)");
        }
        Ok(proc)
    }

    /// The CPU time the quota withheld from the host so far (seconds), from the cgroup's
    /// `cpu.stat`: how often the server was held back.
    pub fn throttled_secs(&self) -> f64 {
        let stat = std::fs::read_to_string(self.cgroup.join("cpu.stat")).unwrap_or_default();
        let field = |name: &str| stat.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok());
        // v1 counts nanoseconds in throttled_time, v2 microseconds in throttled_usec.
        field("throttled_time ").map(|ns| ns / 1e9).or_else(|| field("throttled_usec ").map(|us| us / 1e6)).unwrap_or(0.0)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Whatever still runs in the cgroup (stress's workers, a forked session) ends with it.
        let procs = self.cgroup.join("cgroup.procs");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pids: Vec<String> = std::fs::read_to_string(&procs).unwrap_or_default().split_whitespace().map(String::from).collect();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            let _ = Command::new("kill").arg("-KILL").args(&pids).stderr(Stdio::null()).status();
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.cgroup);
        let _ = ip(&["netns", "del", &self.netns]);
    }
}

/// The virtual address of a kernel-mode balancer in the lab's own namespace, and ten client
/// addresses beside it: 10.63.255.1 and 10.63.255.11 to .20 on the namespace's loopback
/// interface, added once. Sources in 127.0.0.0/8 cannot leave for a server's veth once DNAT
/// sends them there (Linux drops them as martians), so the clients of a kernel balancer use
/// these.
pub fn kernel_addresses() -> anyhow::Result<(Ipv4Addr, Vec<std::net::IpAddr>)> {
    static MADE: OnceLock<Result<(), String>> = OnceLock::new();
    if isolation().is_none() {
        bail!("a kernel balancer in the lab needs isolated real servers (run without --shared)");
    }
    MADE.get_or_init(|| {
        let make = || -> anyhow::Result<()> {
            for host in std::iter::once(1).chain(11..=20) {
                ip(&["addr", "add", &format!("10.63.255.{host}/32"), "dev", "lo"])?;
            }
            Ok(())
        };
        make().map_err(|e| format!("{e:#}"))
    })
    .clone()
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((Ipv4Addr::new(10, 63, 255, 1), (11..=20).map(|h| std::net::IpAddr::from([10, 63, 255, h])).collect()))
}

/// Removes the run's cgroup folder once every host is gone.
pub fn finish() {
    if let Some(Ok(c)) = CGROUPS.get() {
        let _ = std::fs::remove_dir(&c.dir);
    }
}

/// The run's cgroup folder for the CPU controller.
struct Cgroups {
    dir: PathBuf,
    v2: bool,
}

/// The run folder's CPU weight, the largest each version takes (v1 `cpu.shares`, v2
/// `cpu.weight`). A quota only caps a host: on a machine busy with other work (the test
/// suite's other tiers beside the lab's tests) a host would get less than its quota, and a
/// server would be slow for reasons that are not the run's. With this weight the hosts get up
/// to their quotas first; on an idle machine it changes nothing. The lab's own process (its
/// clients and balancers) keeps its usual weight: with the same priority, a heavy
/// scenario would take both cores from whatever else the machine runs.
const V1_SHARES: u64 = 262_144;
const V2_WEIGHT: u64 = 10_000;

fn cgroups() -> anyhow::Result<&'static Cgroups> {
    CGROUPS.get_or_init(|| Cgroups::open().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow::anyhow!("{e}"))
}

impl Cgroups {
    fn open() -> anyhow::Result<Cgroups> {
        let name = format!("fulcrum-lab-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let (dir, v2) = if v1.join("cpu.cfs_quota_us").exists() {
            (v1.join(name), false)
        } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu")) {
            (Path::new("/sys/fs/cgroup").join(name), true)
        } else {
            bail!("no CPU cgroup controller here (neither /sys/fs/cgroup/cpu nor cpu in /sys/fs/cgroup/cgroup.controllers): run the lab with --shared");
        };
        if v2 {
            // The root must hand the CPU controller down to its children, and this run's folder
            // to its hosts.
            let _ = std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+cpu");
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the cgroup {} (the lab needs root; or run with --shared)", dir.display()))?;
        let set = |file: &str, value: String| std::fs::write(dir.join(file), &value).with_context(|| format!("cannot write {value} to {}", dir.join(file).display()));
        if v2 {
            set("cgroup.subtree_control", "+cpu".into())?;
            set("cpu.weight", V2_WEIGHT.to_string())?;
        } else {
            set("cpu.shares", V1_SHARES.to_string())?;
        }
        Ok(Cgroups { dir, v2 })
    }

    /// Host `n`'s cgroup with a quota of `cores` per 100 ms period.
    fn make(&self, n: u32, cores: f64) -> anyhow::Result<PathBuf> {
        let dir = self.dir.join(n.to_string());
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the cgroup {}", dir.display()))?;
        let period = 100_000u64;
        let quota = ((cores * period as f64).round() as u64).max(1000);
        let set = |file: &str, value: String| std::fs::write(dir.join(file), &value).with_context(|| format!("cannot write {value} to {}", dir.join(file).display()));
        if self.v2 {
            set("cpu.max", format!("{quota} {period}"))?;
        } else {
            set("cpu.cfs_period_us", period.to_string())?;
            set("cpu.cfs_quota_us", quota.to_string())?;
        }
        Ok(dir)
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    run(Command::new("ip").args(args))
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let out = command.stdin(Stdio::null()).output().with_context(|| format!("cannot run {:?} (iproute2 is needed: apt-get install iproute2)", command.get_program()))?;
    if !out.status.success() {
        bail!("{:?} {:?} failed: {}", command.get_program(), command.get_args().collect::<Vec<_>>(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
