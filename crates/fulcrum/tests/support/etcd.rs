//! A real etcd cluster on loopback ports, as the fleet tests run it: three members (Debian's
//! etcd-server), each of which can be stopped and started again on its own data.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, scratch, wait_until};

pub struct Etcd {
    dir: PathBuf,
    members: Vec<Member>,
    initial_cluster: String,
    /// Client TLS: the server's certificate and key, and the CA etcdctl trusts.
    tls: Option<Tls>,
    /// `user:password` for etcdctl once authentication is on.
    pub root: Option<String>,
}

#[derive(Clone)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    child: Option<Child>,
}

impl Etcd {
    /// Starts `n` members and waits until the cluster answers.
    pub fn start(n: usize) -> Etcd {
        Self::start_with(n, None)
    }

    /// Like `start`, with clients served over TLS.
    pub fn start_with(n: usize, tls: Option<Tls>) -> Etcd {
        let dir = scratch("etcd");
        let members: Vec<Member> = (1..=n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
                peer: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
                child: None,
            })
            .collect();
        let initial_cluster = members.iter().map(|m| format!("{}=http://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let mut etcd = Etcd { dir, members, initial_cluster, tls, root: None };
        for i in 0..n {
            etcd.start_member(i);
        }
        etcd.wait_healthy();
        etcd
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The client URLs, comma separated, as `--endpoints` takes them.
    pub fn endpoints(&self) -> String {
        self.members.iter().map(|m| format!("{}://{}", self.scheme(), m.client)).collect::<Vec<_>>().join(",")
    }

    /// The client URLs as a TOML array.
    pub fn endpoints_toml(&self) -> String {
        format!("[{}]", self.members.iter().map(|m| format!("\"{}://{}\"", self.scheme(), m.client)).collect::<Vec<_>>().join(", "))
    }

    pub fn stop_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn start_member(&mut self, i: usize) {
        let m = &self.members[i];
        let client_url = format!("{}://{}", self.scheme(), m.client);
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name))).unwrap();
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir"])
            .arg(self.dir.join(&m.name))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(self.tls.iter().flat_map(|t| ["--cert-file".into(), t.cert.display().to_string(), "--key-file".into(), t.key.display().to_string()]))
            .args(["--listen-peer-urls", &format!("http://{}", m.peer), "--initial-advertise-peer-urls", &format!("http://{}", m.peer)])
            .args(["--initial-cluster", &self.initial_cluster, "--initial-cluster-state", "new", "--initial-cluster-token", "fulcrum-test"])
            // Elections in a fraction of a second on loopback, not etcd's WAN defaults.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd runs (Debian's etcd-server; scripts/test installs it)");
        self.members[i].child = Some(child);
    }

    /// `etcdctl` against the members running now (as root once authentication is on).
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.etcdctl("5s").args(args).output().unwrap();
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn etcdctl(&self, timeout: &str) -> Command {
        let endpoints = self.members.iter().filter(|m| m.child.is_some()).map(|m| format!("{}://{}", self.scheme(), m.client)).collect::<Vec<_>>().join(",");
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3").args(["--endpoints", &endpoints, "--command-timeout", timeout]);
        if let Some(t) = &self.tls {
            c.arg("--cacert").arg(&t.ca);
        }
        if let Some(root) = &self.root {
            c.args(["--user", root]);
        }
        c
    }

    pub fn wait_healthy(&self) {
        wait_until("etcd cluster healthy", Duration::from_secs(20), || {
            self.etcdctl("1s").args(["put", "/health-probe", "1"]).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
        });
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop_member(i);
        }
    }
}
