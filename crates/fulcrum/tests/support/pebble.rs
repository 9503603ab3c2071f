//! Pebble, the ACME test server of Let's Encrypt, on loopback ports with its own test CA, for the
//! ACME tests (standalone and fleet). Its validator asks a dnsmasq of the test's own, which answers
//! 127.0.0.1 for every name under `acme.test`, and reaches the challenges on the ports the test
//! gives (`http_port` for http-01, `tls_port` for tls-alpn-01): the ports Fulcrum listens on.
//!
//! Pebble's own HTTPS (its directory) is served with a certificate of a throwaway CA made here
//! (`wfe_ca`, what Fulcrum's `directory_ca` names); the certificates it issues chain to a root
//! it makes at each start (`root_pem`, from its management API), which curl verifies against.
//! Pebble is `pebble` on the PATH or `~/go/bin/pebble` (`scripts/test` installs it there).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, scratch};

/// What a test may change of Pebble's defaults.
#[derive(Clone, Default)]
pub struct Options {
    /// Where the validator connects for http-01 (Fulcrum's plain-HTTP port).
    pub http_port: u16,
    /// Where the validator connects for tls-alpn-01 (Fulcrum's TLS port).
    pub tls_port: u16,
    /// Certificates' validity in seconds; unset: Pebble's 90 days.
    pub validity: Option<u64>,
    /// Extra environment, e.g. `PEBBLE_WFE_NONCEREJECT=100` to refuse every nonce.
    pub env: Vec<(String, String)>,
    /// External Account Binding required, with this key id and its base64url HMAC key.
    pub eab: Option<(String, String)>,
}

pub struct Pebble {
    pub dir: PathBuf,
    /// `https://127.0.0.1:PORT/dir`: the ACME directory.
    pub directory: String,
    /// The CA file that Pebble's own HTTPS certificate chains to (`directory_ca`).
    pub wfe_ca: PathBuf,
    management: SocketAddr,
    options: Options,
    listen: SocketAddr,
    child: Option<Child>,
    dns: Child,
    dns_port: u16,
}

/// The Pebble binary: on the PATH, or where `scripts/test` installs it.
pub fn binary() -> PathBuf {
    if let Ok(out) = Command::new("sh").args(["-c", "command -v pebble"]).output()
        && out.status.success()
    {
        return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let path = Path::new(&home).join("go/bin/pebble");
    assert!(path.exists(), "pebble is not installed (scripts/test installs it: go install github.com/letsencrypt/pebble/v2/cmd/pebble@latest)");
    path
}

impl Pebble {
    /// Starts Pebble (and its nameserver) and waits until its directory answers.
    pub fn start(options: Options) -> Pebble {
        let dir = scratch("pebble");
        let wfe_ca = wfe_certificate(&dir);
        let port = || -> SocketAddr { format!("127.0.0.1:{}", free_port()).parse().unwrap() };
        let (listen, management) = (port(), port());
        let dns_port = free_port();
        let dns = dnsmasq(dns_port);
        let mut pebble = Pebble { directory: format!("https://{listen}/dir"), dir, wfe_ca, management, options, listen, child: None, dns, dns_port };
        // A port found free may be taken by another test before Pebble binds it: Pebble then
        // exits saying so, and starts again on other ports (no one knows these ones yet).
        for attempt in 1.. {
            pebble.write_config();
            match pebble.try_run() {
                Ok(()) => break,
                Err(log) if attempt < 5 && log.contains("address already in use") => {
                    (pebble.listen, pebble.management) = (port(), port());
                    pebble.directory = format!("https://{}/dir", pebble.listen);
                }
                Err(log) => panic!("Pebble did not start: {log}"),
            }
        }
        pebble
    }

    fn write_config(&self) {
        let mut profile = serde_json::json!({ "description": "the test's" });
        if let Some(v) = self.options.validity {
            profile["validityPeriod"] = v.into();
        }
        let mut config = serde_json::json!({ "pebble": {
            "listenAddress": self.listen.to_string(),
            "managementListenAddress": self.management.to_string(),
            "certificate": self.dir.join("wfe.pem"),
            "privateKey": self.dir.join("wfe.key"),
            "httpPort": self.options.http_port,
            "tlsPort": self.options.tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": self.options.eab.is_some(),
            "retryAfter": { "authz": 1, "order": 1 },
            "keyAlgorithm": "ecdsa",
            "profiles": { "default": profile },
        }});
        if let Some((kid, key)) = &self.options.eab {
            config["pebble"]["externalAccountMACKeys"] = serde_json::json!({ kid: key });
        }
        std::fs::write(self.dir.join("pebble.json"), serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    }

    /// Runs Pebble (again, after `stop`: a new CA, since Pebble keeps everything in memory).
    pub fn run(&mut self) {
        if let Err(why) = self.try_run() {
            panic!("Pebble did not start again: {why}");
        }
    }

    /// Runs Pebble until its directory answers; or why it did not, with its log.
    fn try_run(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("pebble.log")).unwrap();
        let mut c = Command::new(binary());
        c.arg("-config").arg(self.dir.join("pebble.json")).arg("-dnsserver").arg(format!("127.0.0.1:{}", self.dns_port));
        c.env("PEBBLE_VA_NOSLEEP", "1").env("PEBBLE_WFE_NONCEREJECT", "0").env("PEBBLE_AUTHZREUSE", "0");
        for (k, v) in &self.options.env {
            c.env(k, v);
        }
        let before = log.metadata().map_or(0, |m| m.len() as usize);
        let mut child = c.stdout(log.try_clone().unwrap()).stderr(log).stdin(Stdio::null()).spawn().expect("pebble runs");
        let url = format!("https://{}/dir", self.listen);
        let answers =
            || Command::new("curl").args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"]).arg(&self.wfe_ca).arg(&url).output().is_ok_and(|o| o.stdout == b"200");
        // Until it answers, or exits (a port taken under it, a bad config).
        let mut exited = None;
        let settled = testkit::wait_for(Duration::from_secs(20), || {
            exited = child.try_wait().ok().flatten();
            exited.is_some() || answers()
        });
        // This run's part of the log (it is appended to across runs).
        let log = || std::fs::read(self.dir.join("pebble.log")).map(|l| String::from_utf8_lossy(l.get(before..).unwrap_or_default()).into_owned()).unwrap_or_default();
        let outcome = match (settled, exited) {
            (_, Some(status)) => Err(format!("it exited ({status}); its log:\n{}", log())),
            (true, None) => Ok(()),
            (false, None) => Err(format!("no answer at {url} within 20 s; its log:\n{}", log())),
        };
        self.child = Some(child);
        outcome
    }

    /// Stops Pebble: the CA then does not answer at all.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The root that issued certificates chain to, PEM, written to `root.pem` in its directory.
    pub fn root_pem(&self) -> PathBuf {
        let out = Command::new("curl").args(["-sf", "--cacert"]).arg(&self.wfe_ca).arg(format!("https://{}/roots/0", self.management)).output().unwrap();
        assert!(out.status.success() && out.stdout.starts_with(b"-----BEGIN CERTIFICATE-----"), "Pebble's root: {}", String::from_utf8_lossy(&out.stderr));
        let path = self.dir.join("root.pem");
        std::fs::write(&path, &out.stdout).unwrap();
        path
    }

    /// Pebble's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}

/// dnsmasq answering 127.0.0.1 for `acme.test` and every name under it.
fn dnsmasq(port: u16) -> Child {
    let mut c = Command::new("/usr/sbin/dnsmasq");
    c.args(["--keep-in-foreground", "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts", "--conf-file=/dev/null", "--pid-file="]);
    c.arg(format!("--port={port}")).arg("--address=/acme.test/127.0.0.1");
    if Command::new("id").arg("-u").output().ok().is_some_and(|o| o.stdout.starts_with(b"0\n")) {
        c.arg("--user=nobody");
    }
    let child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("dnsmasq runs (Debian's dnsmasq-base; scripts/test installs it)");
    std::thread::sleep(Duration::from_millis(300));
    child
}

/// A throwaway CA (`wfe-ca.pem`) and the certificate Pebble's HTTPS serves (`wfe.pem`, `wfe.key`)
/// for 127.0.0.1 and localhost; returns the CA file.
fn wfe_certificate(dir: &Path) -> PathBuf {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[&["req", "-x509"][..], &ec, &["-keyout", "wfe-ca.key", "-out", "wfe-ca.pem", "-days", "2", "-subj", "/CN=Pebble WFE test CA"]].concat());
    run(&[&["req"][..], &ec, &["-keyout", "wfe.key", "-out", "wfe.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(dir.join("wfe.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    run(&["x509", "-req", "-in", "wfe.csr", "-CA", "wfe-ca.pem", "-CAkey", "wfe-ca.key", "-CAcreateserial", "-out", "wfe.pem", "-days", "2", "-extfile", "wfe.ext"]);
    dir.join("wfe-ca.pem")
}
