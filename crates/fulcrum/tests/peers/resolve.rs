//! Servers follow DNS: a server given by host name follows its address when DNS moves it, and a
//! service's `srv` name gives its servers and follows its records (`resolve_interval`).
//!
//! The name lives in the hosts file of a network namespace this test creates (`ip netns exec`
//! puts `/etc/netns/NAME/hosts` over `/etc/hosts` for what it runs), so the system resolver that
//! Fulcrum asks is the real one, and nothing outside the namespace sees the name. Two real servers
//! answer on 127.0.0.2 and 127.0.0.3; the name points at one, then the other. Where namespaces
//! cannot be made (not root), the test says why and does nothing else.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

struct Namespace {
    name: String,
    etc: PathBuf,
    children: Vec<Child>,
}

impl Namespace {
    fn create() -> Option<Namespace> {
        let name = format!("fr{}", std::process::id() % 100_000);
        let made = Command::new("ip").args(["netns", "add", &name]).output().ok().is_some_and(|o| o.status.success());
        if !made {
            return None;
        }
        let etc = PathBuf::from("/etc/netns").join(&name);
        std::fs::create_dir_all(&etc).ok()?;
        let ns = Namespace { name, etc, children: Vec::new() };
        ns.run(&["ip", "link", "set", "lo", "up"]);
        Some(ns)
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.name]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn spawn(&mut self, args: &[&str], log: PathBuf) {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new("ip").args(["netns", "exec", &self.name]).args(args).stdout(Stdio::null()).stderr(log).spawn().unwrap();
        self.children.push(child);
    }

    /// Rewrites the namespace's hosts file in place (the same file stays mounted over /etc/hosts).
    fn hosts(&self, text: &str) {
        std::fs::write(self.etc.join("hosts"), text).unwrap();
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

#[test]
fn a_server_named_by_host_follows_its_address_when_dns_moves_it() {
    let root = Command::new("id").arg("-u").output().ok().is_some_and(|o| o.stdout.starts_with(b"0\n"));
    let ns = if root { Namespace::create() } else { None };
    let Some(mut ns) = ns else {
        cannot_run("resolve", "it makes a network namespace, which needs root and `ip netns`");
        return;
    };
    let dir = scratch("resolve");
    ns.hosts("127.0.0.1 localhost\n127.0.0.2 web.test\n");
    let fulcrum = env!("CARGO_BIN_EXE_fulcrum");
    for (ip, name) in [("127.0.0.2", "two"), ("127.0.0.3", "three")] {
        ns.spawn(&[fulcrum, "backend", "--listen", &format!("{ip}:9001"), "--name", name], dir.join(format!("{name}.log")));
    }
    let config = dir.join("fulcrum.toml");
    std::fs::write(&config, "allow_root = true\nresolve_interval = \"1s\"\n\n[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\nmode = \"http\"\n[service.health]\ninterval = \"200ms\"\n[[service.server]]\naddress = \"web.test:9001\"\n").unwrap();
    ns.spawn(&[fulcrum, "run", config.to_str().unwrap()], dir.join("fulcrum.log"));
    let ask = || ns.run(&["curl", "--silent", "--max-time", "1", "http://127.0.0.1:8080/name"]).trim_end().to_string();
    wait_until("web.test served from 127.0.0.2", Duration::from_secs(15), || ask() == "two");

    // DNS moves the name: within a few intervals the same server (same stats) goes to the new address.
    ns.hosts("127.0.0.1 localhost\n127.0.0.3 web.test\n");
    wait_until("web.test served from 127.0.0.3", Duration::from_secs(10), || ask() == "three");
    let log = std::fs::read_to_string(dir.join("fulcrum.log")).unwrap_or_default();
    assert!(log.contains("server addresses changed in DNS (web.test:9001: 127.0.0.2:9001 -> 127.0.0.3:9001)"), "{log}");

    // A name that stops resolving keeps its last address, and says so once.
    ns.hosts("127.0.0.1 localhost\n");
    std::thread::sleep(Duration::from_millis(2500));
    for _ in 0..3 {
        assert_eq!(ask(), "three");
    }
    let log = std::fs::read_to_string(dir.join("fulcrum.log")).unwrap_or_default();
    assert_eq!(log.matches("cannot resolve, keeping 127.0.0.3:9001").count(), 1, "{log}");
}

/// dnsmasq answering `_http._tcp.web.test` with `records` (target, port, priority, weight), each
/// target at 127.0.0.1; killed on drop.
struct Dnsmasq(Child);

impl Dnsmasq {
    fn start(port: u16, records: &[(&str, u16, u16, u16)]) -> Dnsmasq {
        let mut c = Command::new("/usr/sbin/dnsmasq");
        c.args(["--keep-in-foreground", "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts", "--conf-file=/dev/null", "--pid-file="]);
        c.arg(format!("--port={port}"));
        if Command::new("id").arg("-u").output().ok().is_some_and(|o| o.stdout.starts_with(b"0\n")) {
            c.arg("--user=nobody");
        }
        for (target, p, priority, weight) in records {
            c.arg(format!("--srv-host=_http._tcp.web.test,{target},{p},{priority},{weight}"));
            c.arg(format!("--host-record={target},127.0.0.1"));
        }
        let child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("dnsmasq runs (Debian's dnsmasq-base; scripts/test installs it)");
        std::thread::sleep(Duration::from_millis(300));
        Dnsmasq(child)
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn srv_servers(f: &Fulcrum) -> Vec<(String, u64, bool)> {
    let stats = f.stats();
    let mut v: Vec<_> = stats["services"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["address"].as_str().unwrap().to_string(), s["weight"].as_u64().unwrap(), s["backup"] == true))
        .collect();
    v.sort();
    v
}

#[test]
fn a_services_servers_come_from_its_srv_records_and_follow_them() {
    let (mut a, mut b) = (Backend::start("a"), Backend::start("b"));
    let port = free_port();
    let mut dns = Dnsmasq::start(port, &[("a.web.test", a.addr.port(), 0, 1), ("b.web.test", b.addr.port(), 0, 3)]);
    let config = |interval: &str| {
        format!(
            "resolve_interval = \"1s\"\n\n[dns]\nnameservers = [\"127.0.0.1:{port}\"]\n\n[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nsrv = \"_http._tcp.web.test\"\n[service.health]\ninterval = \"{interval}\"\n"
        )
    };
    let f = Fulcrum::start(&config("200ms"));
    let (at_a, at_b) = (format!("a.web.test:{}", a.addr.port()), format!("b.web.test:{}", b.addr.port()));
    assert_eq!(srv_servers(&f), [(at_a.clone(), 1, false), (at_b.clone(), 3, false)]);
    // Said in full when it fails: once, a server stayed "connection refused" here though its
    // backend had been seen listening.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f.stats()["services"][0]["servers"].as_array().unwrap().iter().all(|s| s["state"] == "up") {
        if std::time::Instant::now() > deadline {
            let log: Vec<char> = f.log().chars().collect();
            let tail: String = log[log.len().saturating_sub(4000)..].iter().collect();
            panic!("not every server up after 20 s: {}; {}; stats {}; log (end):\n{tail}", a.diagnose(), b.diagnose(), f.stats()["services"][0]["servers"]);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = tally(f.listen, 8);
    assert_eq!((seen.get("a"), seen.get("b")), (Some(&2), Some(&6)), "weights 1:3 from the records: {seen:?}");

    // The records change: a moves to a higher priority (a backup), b's weight to 2.
    drop(dns);
    dns = Dnsmasq::start(port, &[("a.web.test", a.addr.port(), 10, 1), ("b.web.test", b.addr.port(), 0, 2)]);
    wait_until("the new records in the stats", Duration::from_secs(10), || srv_servers(&f) == [(at_a.clone(), 1, true), (at_b.clone(), 2, false)]);
    f.wait_all_up();
    assert_eq!(tally(f.listen, 4).get("b"), Some(&4));

    // The nameserver stops answering: the servers stay, and the log says so once.
    drop(dns);
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(srv_servers(&f), [(at_a.clone(), 1, true), (at_b.clone(), 2, false)]);
    assert_eq!(tally(f.listen, 2).get("b"), Some(&2));
    assert_eq!(f.log().matches("keeping the servers it named").count(), 1, "{}", f.log());

    // A reload while it is away applies, with the servers the records last named.
    f.reload(&config("300ms"));
    wait_until("the reload applied", Duration::from_secs(10), || f.log().matches("config applied").count() >= 2);
    assert_eq!(f.api("GET", "/api/config", None).1["config"]["service"][0]["health"]["interval"], "300ms", "the reload's own change");
    assert_eq!(srv_servers(&f), [(at_a, 1, true), (at_b, 2, false)]);
    assert_eq!(tally(f.listen, 2).get("b"), Some(&2));
}
