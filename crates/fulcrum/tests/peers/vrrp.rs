//! The virtual IP: keepalived (VRRP) with `contrib/keepalived/keepalived.conf` moves an address
//! between two Fulcrum instances when the master's Fulcrum stops, and back when it returns.
//!
//! Everything runs in network namespaces this test creates: a switch (a bridge in a namespace of
//! its own), two load balancer hosts and a client, joined by veth pairs, on 10.77.0.0/24. Each
//! host runs a real server that answers its host's name, Fulcrum in front of it, and keepalived
//! tracking Fulcrum's `/ready`. Where namespaces cannot be made (not root, no `ip`, no
//! keepalived), the test says why and does nothing else.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{scratch, wait_until};

const VIP: &str = "10.77.0.50";

/// The namespaces and the processes in them; all removed on drop.
struct Lab {
    prefix: String,
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Lab {
    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn ip(&self, args: &[&str]) {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn in_ns(&self, ns: &str, args: &[&str]) {
        self.ip(&[&["netns", "exec", &self.ns(ns)], args].concat());
    }

    fn build() -> Lab {
        let lab = Lab { prefix: format!("fv{}", std::process::id() % 100_000), dir: scratch("vrrp"), children: Vec::new() };
        for n in ["sw", "lb1", "lb2", "cl"] {
            lab.ip(&["netns", "add", &lab.ns(n)]);
            lab.in_ns(n, &["ip", "link", "set", "lo", "up"]);
        }
        lab.in_ns("sw", &["ip", "link", "add", "br0", "type", "bridge"]);
        lab.in_ns("sw", &["ip", "link", "set", "br0", "up"]);
        for (n, address) in [("lb1", "10.77.0.1/24"), ("lb2", "10.77.0.2/24"), ("cl", "10.77.0.100/24")] {
            let (host, port) = (lab.ns(n), format!("{}-p", lab.ns(n)));
            lab.ip(&["link", "add", &host, "type", "veth", "peer", "name", &port]);
            lab.ip(&["link", "set", &host, "netns", &host]);
            lab.ip(&["link", "set", &port, "netns", &lab.ns("sw")]);
            lab.in_ns(n, &["ip", "link", "set", &host, "name", "eth0"]);
            lab.in_ns(n, &["ip", "addr", "add", address, "dev", "eth0"]);
            lab.in_ns(n, &["ip", "link", "set", "eth0", "up"]);
            lab.in_ns("sw", &["ip", "link", "set", &port, "master", "br0", "up"]);
        }
        lab
    }

    /// Starts `program args` in namespace `ns`, its output in `log`.
    fn spawn(&mut self, ns: &str, what: &str, program: &str, args: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{ns}-{what}.log"))).unwrap();
        let child = Command::new("ip").args(["netns", "exec", &self.ns(ns), program]).args(args).stdout(Stdio::null()).stderr(log).spawn().unwrap();
        self.children.push((format!("{ns}-{what}"), child));
    }

    fn stop(&mut self, ns: &str, what: &str, signal: &str) {
        let name = format!("{ns}-{what}");
        if let Some(i) = self.children.iter().position(|(n, _)| *n == name) {
            let (_, mut child) = self.children.remove(i);
            let _ = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status();
            let _ = child.wait();
        }
    }

    fn log(&self, ns: &str, what: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{ns}-{what}.log"))).unwrap_or_default()
    }

    /// Starts one load balancer host: its real server, Fulcrum, and keepalived at `priority`.
    fn start_host(&mut self, ns: &str, priority: u32) {
        let fulcrum = env!("CARGO_BIN_EXE_fulcrum");
        self.spawn(ns, "server", fulcrum, &["backend", "--listen", "127.0.0.1:9001", "--name", ns]);
        self.start_fulcrum(ns);
        let template = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/keepalived/keepalived.conf")).unwrap();
        let conf = template
            .replace("@ADMIN@", "127.0.0.1:9090")
            .replace("@INTERFACE@", "eth0")
            .replace("@ROUTER_ID@", "51")
            .replace("@PRIORITY@", &priority.to_string())
            .replace("@VIP@", &format!("{VIP}/24"));
        let left = conf.lines().filter(|l| !l.trim_start().starts_with('#') && l.contains('@')).collect::<Vec<_>>();
        assert!(left.is_empty(), "placeholders the template has and this test does not fill: {left:?}");
        let path = self.dir.join(format!("{ns}-keepalived.conf"));
        std::fs::write(&path, conf).unwrap();
        let pid = |kind: &str| self.dir.join(format!("{ns}-{kind}.pid")).display().to_string();
        let args = ["--dont-fork", "--log-console", "--no-syslog", "--vrrp", "-f", &path.display().to_string(), "-p", &pid("keepalived"), "-r", &pid("vrrp")];
        self.spawn(ns, "keepalived", "keepalived", &args);
    }

    fn start_fulcrum(&mut self, ns: &str) {
        let config = self.dir.join(format!("{ns}.toml"));
        let text = "allow_root = true\n\n[admin]\nlisten = \"127.0.0.1:9090\"\n\n[[service]]\nname = \"web\"\nlisten = \"0.0.0.0:8080\"\nmode = \"http\"\n[service.health]\ninterval = \"200ms\"\n[[service.server]]\naddress = \"127.0.0.1:9001\"\n";
        std::fs::write(&config, text).unwrap();
        self.spawn(ns, "fulcrum", env!("CARGO_BIN_EXE_fulcrum"), &["run", &config.display().to_string()]);
    }

    /// One request from the client to the virtual IP: the name of the host that answered.
    fn ask(&self) -> Option<String> {
        let out = Command::new("ip").args(["netns", "exec", &self.ns("cl"), "curl", "--silent", "--max-time", "0.3", &format!("http://{VIP}:8080/name")]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for (ns, what) in [("lb1", "keepalived"), ("lb2", "keepalived"), ("lb1", "fulcrum"), ("lb2", "fulcrum")] {
                eprintln!("---- {ns} {what} ----\n{}", self.log(ns, what));
            }
        }
        for n in ["sw", "lb1", "lb2", "cl"] {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(n)]).status();
        }
    }
}

/// Why this machine cannot run the test, if it cannot.
fn cannot_run() -> Option<String> {
    let root = Command::new("id").arg("-u").output().ok().is_some_and(|o| o.stdout.starts_with(b"0\n"));
    if !root {
        return Some("network namespaces need root".into());
    }
    if Command::new("keepalived").arg("--version").output().is_err() {
        return Some("keepalived is not installed (scripts/test installs it)".into());
    }
    let probe = format!("fvprobe{}", std::process::id() % 100_000);
    let made = Command::new("ip").args(["netns", "add", &probe]).output().ok().is_some_and(|o| o.status.success());
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    (!made).then(|| "`ip netns add` is not allowed here".into())
}

#[test]
fn keepalived_moves_the_virtual_ip_when_the_masters_fulcrum_stops_and_back_when_it_returns() {
    if let Some(why) = cannot_run() {
        crate::support::cannot_run("vrrp", &why);
        return;
    }
    let mut lab = Lab::build();
    lab.start_host("lb1", 150);
    lab.start_host("lb2", 100);
    wait_until("lb1 to hold the virtual IP", Duration::from_secs(20), || lab.ask().as_deref() == Some("lb1"));
    assert!(lab.log("lb2", "keepalived").contains("Entering BACKUP STATE"), "{}", lab.log("lb2", "keepalived"));

    // The master's Fulcrum stops: /ready fails, keepalived gives the address up, lb2 takes it.
    let stopped = Instant::now();
    lab.stop("lb1", "fulcrum", "TERM");
    let (mut failed, mut answered) = (0, None);
    while stopped.elapsed() < Duration::from_secs(15) {
        match lab.ask() {
            Some(host) if host == "lb2" => {
                answered = Some(stopped.elapsed());
                break;
            }
            _ => failed += 1,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let window = answered.unwrap_or_else(|| panic!("lb2 never answered on the virtual IP; {failed} requests failed"));
    eprintln!("vrrp: failover took {} ms, {failed} requests failed in it (each waits up to 300 ms)", window.as_millis());
    let master = lab.log("lb1", "keepalived");
    assert!(master.contains("fulcrum_ready) failed") && master.contains("Entering FAULT STATE"), "{master}");
    for _ in 0..5 {
        assert_eq!(lab.ask().as_deref(), Some("lb2"));
    }

    // lb1's Fulcrum returns: with the higher priority, lb1 takes the address back.
    lab.start_fulcrum("lb1");
    wait_until("lb1 to take the virtual IP back", Duration::from_secs(20), || lab.ask().as_deref() == Some("lb1"));
}
