//! A server given by host name follows its address when DNS moves it: `resolve_interval`.
//!
//! The name lives in the hosts file of a network namespace this test creates (`ip netns exec`
//! puts `/etc/netns/NAME/hosts` over `/etc/hosts` for what it runs), so the system resolver that
//! Fulcrum asks is the real one, and nothing outside the namespace sees the name. Two real servers
//! answer on 127.0.0.2 and 127.0.0.3; the name points at one, then the other. Where namespaces
//! cannot be made (not root), the test says why and does nothing else.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{scratch, wait_until};

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
        eprintln!("resolve: SKIPPED, this machine cannot make a network namespace (needs root and `ip netns`)");
        return;
    };
    let dir = scratch("resolve");
    ns.hosts("127.0.0.1 localhost\n127.0.0.2 web.test\n");
    let fulcrum = env!("CARGO_BIN_EXE_fulcrum");
    for (ip, name) in [("127.0.0.2", "two"), ("127.0.0.3", "three")] {
        ns.spawn(&[fulcrum, "backend", "--listen", &format!("{ip}:9001"), "--name", name], dir.join(format!("{name}.log")));
    }
    let config = dir.join("fulcrum.toml");
    std::fs::write(&config, "resolve_interval = \"1s\"\n\n[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\nmode = \"http\"\n[service.health]\ninterval = \"200ms\"\n[[service.server]]\naddress = \"web.test:9001\"\n").unwrap();
    ns.spawn(&[fulcrum, "run", config.to_str().unwrap()], dir.join("fulcrum.log"));
    let ask = || ns.run(&["curl", "--silent", "--max-time", "1", "http://127.0.0.1:8080/name"]);
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
