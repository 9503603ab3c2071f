//! `mode = "kernel"`: Fulcrum controls an nftables balancer and proxies nothing.
//!
//! Everything runs in network namespaces this test makes, named with its process id and removed
//! when it ends, passed or failed: a client, a balancer that forwards IPv4, and three real
//! servers, each joined to the balancer by a veth pair made inside the namespaces (10.201.0.0/24
//! for the client, 10.202.K.0/24 for server K), with default routes via the balancer. The
//! virtual address 10.200.0.1:80 is on the balancer's loopback: the client routes it to the
//! balancer, whose prerouting hook DNATs it; a client on the balancer itself goes through the
//! output hook. Server 3 is degraded (a backlog of 1 and an accept every 100 ms), so its kernel
//! drops SYNs under load, as in the passive-measurement paper.
//!
//! Without root, `ip netns` or `nft` the test fails: kernel mode is what it tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::support::{scratch, wait_until};

const VIP: &str = "10.200.0.1";
const ADMIN: &str = "http://127.0.0.1:9090";
const SERVERS: [&str; 3] = ["s1", "s2", "s3"];
/// The degraded server's options: `passive.rs`'s.
const DEGRADED: [&str; 4] = ["--backlog", "1", "--slow-accept-ms", "100"];

/// The namespaces, the processes in them and the scratch directory; all removed on drop.
struct Net {
    prefix: String,
    dir: PathBuf,
    servers: Vec<Option<testkit::Backend>>,
    fulcrum: Option<Child>,
}

impl Net {
    fn ns(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Runs `args` in namespace `ns`, failing the test if it fails.
    fn run(&self, ns: &str, args: &[&str]) -> Output {
        let out = self.try_run(ns, args);
        assert!(out.status.success(), "in {ns}: {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn try_run(&self, ns: &str, args: &[&str]) -> Output {
        Command::new("ip").args(["netns", "exec", &self.ns(ns)]).args(args).output().unwrap()
    }

    /// The namespaces and their links. `tag` tells this test's names from another's.
    fn build(tag: &str) -> Net {
        let mut net = Net { prefix: format!("fk{}{tag}", std::process::id() % 100_000), dir: scratch("kernel"), servers: Vec::new(), fulcrum: None };
        for n in ["c", "b", "s1", "s2", "s3"] {
            let made = Command::new("ip").args(["netns", "add", &net.ns(n)]).output().unwrap();
            assert!(made.status.success(), "ip netns add: {}", String::from_utf8_lossy(&made.stderr));
            net.run(n, &["ip", "link", "set", "lo", "up"]);
        }
        net.run("b", &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        net.run("b", &["ip", "addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        net.link("c", "10.201.0");
        for (k, s) in SERVERS.iter().enumerate() {
            net.link(s, &format!("10.202.{}", k + 1));
        }
        net.servers = SERVERS.iter().map(|s| Some(net.start_server(s))).collect();
        net
    }

    /// A veth pair made in the balancer with its peer in `ns`, on `subnet`.0/24: the balancer
    /// is .1, `ns` is .2 and routes everything via .1.
    fn link(&self, ns: &str, subnet: &str) {
        let peer = self.ns(ns);
        self.run("b", &["ip", "link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", &peer]);
        self.run("b", &["ip", "addr", "add", &format!("{subnet}.1/24"), "dev", ns]);
        self.run("b", &["ip", "link", "set", ns, "up"]);
        self.run(ns, &["ip", "addr", "add", &format!("{subnet}.2/24"), "dev", "eth0"]);
        self.run(ns, &["ip", "link", "set", "eth0", "up"]);
        self.run(ns, &["ip", "route", "add", "default", "via", &format!("{subnet}.1")]);
    }

    /// The real server of namespace `s` (`s3` degraded), answering its name.
    fn start_server(&self, s: &str) -> testkit::Backend {
        let k = &s[1..];
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(s), env!("CARGO_BIN_EXE_fulcrum")]);
        let extra: &[&str] = if s == "s3" { &DEGRADED } else { &[] };
        let listen = format!("10.202.{k}.2:8080").parse().unwrap();
        testkit::Backend::start_as(command, s, listen, extra, Some(&self.dir.join(format!("{s}.log")))).unwrap_or_else(|e| panic!("{e:#}"))
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join("fulcrum.toml")
    }

    /// Starts Fulcrum in the balancer and waits until its table is there.
    fn start_fulcrum(&mut self, config: &str) {
        std::fs::write(self.config_path(), config).unwrap();
        let log = std::fs::File::create(self.dir.join("fulcrum.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns("b"), env!("CARGO_BIN_EXE_fulcrum"), "run"])
            .arg(self.config_path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.fulcrum = Some(child);
        wait_until("Fulcrum's table and admin API", Duration::from_secs(20), || self.table().is_some() && self.admin("/api/stats").is_some());
    }

    fn signal(&self, signal: &str) {
        let pid = self.fulcrum.as_ref().expect("fulcrum runs").id().to_string();
        assert!(Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
    }

    /// `nft list table ip fulcrum_web` in the balancer, if the table is there.
    fn table(&self) -> Option<String> {
        self.table_of("web")
    }

    /// The table of service `service`, if it is there.
    fn table_of(&self, service: &str) -> Option<String> {
        let out = self.try_run("b", &[nft(), "list", "table", "ip", &format!("fulcrum_{service}")]);
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// GET `path` of the admin API, from inside the balancer.
    fn admin(&self, path: &str) -> Option<serde_json::Value> {
        let out = self.try_run("b", &["curl", "--silent", "--fail", "--max-time", "5", &format!("{ADMIN}{path}")]);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
    }

    /// The stats of each server of service `web`, in config order.
    fn servers_stats(&self) -> Vec<serde_json::Value> {
        let stats = self.admin("/api/stats").expect("the admin API answers");
        stats["services"][0]["servers"].as_array().unwrap().clone()
    }

    /// One connection to the virtual address from `ns`: the name of the server that answered.
    fn ask(&self, ns: &str, path: &str, max_secs: u32) -> Option<String> {
        ask(&self.ns(ns), path, max_secs)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("fulcrum.log")).unwrap_or_default()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(mut child) = self.fulcrum.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.servers.clear();
        if std::thread::panicking() {
            eprintln!("---- fulcrum ----\n{}", self.log());
        }
        for n in ["c", "b", "s1", "s2", "s3"] {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(n)]).status();
        }
    }
}

/// One connection to the virtual address from namespace `ns` (by its full name), with curl.
fn ask(ns: &str, path: &str, max_secs: u32) -> Option<String> {
    let url = format!("http://{VIP}{path}");
    let out = Command::new("ip").args(["netns", "exec", ns, "curl", "--silent", "--fail", "--max-time", &max_secs.to_string(), &url]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// nft where the tests' PATH may not have the sbin directories.
fn nft() -> &'static str {
    if Path::new("/usr/sbin/nft").exists() { "/usr/sbin/nft" } else { "nft" }
}

/// Fails the test, saying why, where it cannot run: kernel mode needs all of this.
fn require_tools() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    assert!(root, "the kernel-mode test needs root (network namespaces and nftables)");
    let nft_runs = Command::new(nft()).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(nft_runs, "the kernel-mode test needs nft (apt-get install nftables; scripts/test installs it)");
    let curl_runs = Command::new("curl").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(curl_runs, "the kernel-mode test needs curl");
}

fn config(algorithm: &str, weights: [u32; 3], health: &str) -> String {
    let mut text = format!(
        "allow_root = true\nshutdown_grace = \"1s\"\n\n[admin]\nlisten = \"127.0.0.1:9090\"\n\n[[service]]\nname = \"web\"\nlisten = \"{VIP}:80\"\nmode = \"kernel\"\nalgorithm = \"{algorithm}\"\n\
         [service.health]\n{health}\n[service.passive]\nslot = \"1s\"\nwindow_slots = 5\nmin_samples = 10\n"
    );
    for (k, w) in weights.iter().enumerate() {
        text += &format!("[[service.server]]\naddress = \"10.202.{}.2:8080\"\nweight = {w}\n", k + 1);
    }
    text
}

const CHECKED: &str = "interval = \"200ms\"\ntimeout = \"500ms\"\nrise = 1\nfall = 1";

/// How many of `names` each server answered, in `SERVERS` order.
fn tally(names: &[String]) -> [usize; 3] {
    let mut n = [0; 3];
    for name in names {
        if let Some(k) = SERVERS.iter().position(|s| s == name) {
            n[k] += 1;
        }
    }
    n
}

#[test]
fn kernel_mode_serves_the_virtual_address_by_weight_and_health_and_a_reload_keeps_established_connections() {
    require_tools();
    let mut net = Net::build("a");
    net.start_fulcrum(&config("static-rr", [3, 2, 1], CHECKED));
    wait_until("every server up", Duration::from_secs(10), || net.servers_stats().iter().all(|s| s["state"] == "up"));

    // Forwarded clients, through prerouting: the map takes turns 3:2:1 (numgen inc).
    let answered: Vec<String> = (0..60).map(|_| net.ask("c", "/name", 3).expect("a connection to the virtual address is served")).collect();
    assert_eq!(tally(&answered), [30, 20, 10], "turns by weight: {answered:?}");
    // A client on the balancer itself, through output.
    for _ in 0..3 {
        assert!(net.ask("b", "/name", 3).is_some_and(|n| SERVERS.contains(&n.as_str())), "a local client is served too");
    }

    // The kernel counted each connection's SYN and SYN-ACK, and Fulcrum read them back.
    wait_until("the counters read back", Duration::from_secs(5), || {
        net.servers_stats().iter().zip([30, 20, 10]).all(|(s, n)| s["syn_sent"].as_u64() >= Some(n) && s["syn_acked"].as_u64() >= Some(n))
    });

    // No byte passed through Fulcrum: nothing listens on the virtual port, no connection was
    // counted as proxied.
    let listening = net.run("b", &["ss", "-Hltn", "sport = :80"]);
    assert!(listening.stdout.is_empty(), "something listens on :80: {}", String::from_utf8_lossy(&listening.stdout));
    for s in net.servers_stats() {
        assert_eq!((s["total"].as_u64(), s["bytes_in"].as_u64(), s["bytes_out"].as_u64()), (Some(0), Some(0), Some(0)), "{s}");
    }

    // A server that goes down leaves the map; back up, it returns.
    net.servers[1] = None;
    wait_until("s2 down", Duration::from_secs(10), || net.servers_stats()[1]["state"] == "down");
    let dnat = |t: String| t.lines().filter(|l| l.contains("dnat")).collect::<String>();
    wait_until("s2 out of the map", Duration::from_secs(5), || net.table().is_some_and(|t| !dnat(t).contains("10.202.2.2")));
    let without: Vec<String> = (0..12).map(|_| net.ask("c", "/name", 3).expect("served while s2 is down")).collect();
    assert_eq!(tally(&without)[1], 0, "{without:?}");
    net.servers[1] = Some(net.start_server("s2"));
    wait_until("s2 up again", Duration::from_secs(10), || net.servers_stats()[1]["state"] == "up");

    // A connection established before a reload that rewrites the map finishes on its server.
    let ns = net.ns("c");
    let held = std::thread::spawn(move || ask(&ns, "/slow/3000", 10));
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(net.config_path(), config("random", [1, 1, 1], CHECKED)).unwrap();
    net.signal("HUP");
    wait_until("the reloaded map", Duration::from_secs(10), || net.table().is_some_and(|t| t.contains("numgen random mod 10000")));
    let finished = held.join().unwrap();
    assert!(finished.as_deref().is_some_and(|n| SERVERS.contains(&n)), "the connection held across the reload: {finished:?}");

    // A reload that drops the service removes its table; its successor gets one of its own.
    std::fs::write(net.config_path(), config("random", [1, 1, 1], CHECKED).replace("name = \"web\"", "name = \"web2\"")).unwrap();
    net.signal("HUP");
    wait_until("web's table replaced by web2's", Duration::from_secs(10), || net.table().is_none() && net.table_of("web2").is_some());
    assert!(net.ask("c", "/name", 3).is_some(), "served by web2's table");

    // Stopped, Fulcrum removes its table.
    net.signal("TERM");
    let mut child = net.fulcrum.take().unwrap();
    let stopped = testkit::wait_for(Duration::from_secs(15), || child.try_wait().ok().flatten().is_some());
    assert!(stopped, "Fulcrum did not stop within 15 s");
    assert!(net.table_of("web2").is_none(), "the table outlived Fulcrum");
    let tables = net.run("b", &[nft(), "list", "tables"]);
    assert!(tables.stdout.is_empty(), "tables left in the balancer: {}", String::from_utf8_lossy(&tables.stdout));
}

#[test]
fn passive_ratio_in_the_kernel_moves_new_connections_away_from_the_server_that_drops_syns() {
    require_tools();
    let mut net = Net::build("b");
    net.start_fulcrum(&config("passive-ratio", [1, 1, 1], "kind = \"none\""));
    assert!(net.table().is_some_and(|t| t.contains("numgen random mod 10000")), "{:?}", net.table());

    // Bounded Poisson load from the client: about RATE x SECONDS connections, each in a thread
    // of its own with curl's own time limit; each records when it began and who answered.
    const RATE: f64 = 36.0;
    const SECONDS: f64 = 15.0;
    let answers: Arc<Mutex<Vec<(f64, String)>>> = Arc::default();
    let started = Instant::now();
    let mut threads = Vec::new();
    let mut next = 0.0;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut ratios = Vec::new();
    while next < SECONDS && threads.len() < (RATE * SECONDS * 1.5) as usize {
        std::thread::sleep(Duration::from_secs_f64(next).saturating_sub(started.elapsed()));
        let (answers, ns) = (answers.clone(), net.ns("c"));
        threads.push(std::thread::spawn(move || {
            if let Some(name) = ask(&ns, "/name", 10) {
                answers.lock().unwrap().push((next, name));
            }
        }));
        next += -(1.0 - rng.random::<f64>()).ln() / RATE;
        if ratios.len() < started.elapsed().as_secs() as usize {
            ratios.push(net.servers_stats()[2]["algorithm"]["ratio"].as_f64());
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    let stats = net.servers_stats();
    eprintln!("kernel passive-ratio: {} answered; the degraded server's ratio by second {ratios:?}", answers.len());
    for s in &stats {
        eprintln!("  {} ratio {} R {} syn_sent {} syn_acked {}", s["address"], s["algorithm"]["ratio"], s["algorithm"]["r"], s["syn_sent"], s["syn_acked"]);
    }

    assert!(answers.len() as f64 >= RATE * SECONDS * 0.8, "{} of about {} connections answered", answers.len(), RATE * SECONDS);
    let ratio = |k: usize| stats[k]["algorithm"]["ratio"].as_f64().unwrap();
    assert!(ratio(2) < ratio(0) && ratio(2) < ratio(1), "the degraded server's ratio fell below the others'");
    let (sent, acked) = (stats[2]["syn_sent"].as_u64().unwrap(), stats[2]["syn_acked"].as_u64().unwrap());
    assert!(sent > acked, "the degraded server's dropped SYNs were counted: N_S {sent}, N_A {acked}");
    let share = |from: f64, to: f64| {
        let names: Vec<String> = answers.iter().filter(|(t, _)| (from..to).contains(t)).map(|(_, n)| n.clone()).collect();
        tally(&names)[2] as f64 / names.len().max(1) as f64
    };
    let (first, last) = (share(0.0, 4.0), share(SECONDS - 5.0, SECONDS));
    eprintln!("  the degraded server's share of new connections: {first:.2} in the first 4 s, {last:.2} in the last 5 s");
    assert!(last < first * 0.75 && last < 0.2, "the degraded server's share of new connections: {first:.2} in the first 4 s, {last:.2} in the last 5 s");
    for s in &stats {
        assert_eq!(s["total"].as_u64(), Some(0), "Fulcrum proxied a connection: {s}");
    }

    net.signal("TERM");
    let mut child = net.fulcrum.take().unwrap();
    assert!(testkit::wait_for(Duration::from_secs(15), || child.try_wait().ok().flatten().is_some()), "Fulcrum did not stop within 15 s");
    assert!(net.table().is_none(), "the table outlived Fulcrum");
}
