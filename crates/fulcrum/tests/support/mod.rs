//! Helpers for integration tests: real nginx servers, a Fulcrum process, and small clients.
//! Every process is killed when its handle drops, so a failing test leaves nothing behind.
#![allow(dead_code)]

pub mod etcd;
pub mod fast;
pub mod pebble;

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh scratch directory under the target dir, unique per test. The first call of a test
/// process removes the scratch directories of test processes that have ended, so runs do not
/// pile up (the FTP test alone downloads 320 MB).
pub fn scratch(name: &str) -> PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(remove_scratch_of_ended_runs);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Scratch directories are named NAME-PID-SEQ; those whose PID no longer runs are removed.
fn remove_scratch_of_ended_runs() {
    let Ok(entries) = std::fs::read_dir(env!("CARGO_TARGET_TMPDIR")) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let mut parts = name.rsplit('-');
        let (Some(seq), Some(pid)) = (parts.next(), parts.next()) else { continue };
        let (Ok(_), Ok(pid)) = (seq.parse::<u32>(), pid.parse::<u32>()) else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The CPU clock ticks (user + system) a `/proc/PID/stat` or `/proc/PID/task/TID/stat` line
/// says were used; `None` for a line that does not parse (an empty read: the task ended).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    // Fields after the name: state is the first, utime and stime the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(field(11)? + field(12)?)
}

/// A loopback port free right now, below the kernel's ephemeral range (`testkit::free_port`).
pub fn free_port() -> u16 {
    testkit::free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// A test that cannot run here fails with `why`, unless `FULCRUM_TEST_SKIP` (names separated
/// by commas) names it: then it says SKIPPED and the caller returns. No test passes unrun.
pub fn cannot_run(test: &str, why: &str) {
    let skip = std::env::var("FULCRUM_TEST_SKIP").unwrap_or_default();
    if skip.split(',').any(|name| name.trim() == test) {
        eprintln!("{test}: SKIPPED (FULCRUM_TEST_SKIP): {why}");
        return;
    }
    panic!("{test} cannot run on this machine: {why}; FULCRUM_TEST_SKIP={test} skips it where that is known");
}

pub fn wait_until(what: &str, limit: Duration, f: impl FnMut() -> bool) {
    assert!(testkit::wait_for(limit, f), "timed out after {limit:?} waiting for {what}");
}

fn listening(addr: SocketAddr) -> bool {
    testkit::accepts(addr)
}

/// One real nginx server whose replies name it: `/name` answers its name, `/index.html` its
/// index text, `/large` is a 64 MiB file.
pub struct Nginx {
    pub name: String,
    pub addr: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

pub const LARGE: usize = 64 << 20;

impl Nginx {
    pub fn start(name: &str, index_text: &str) -> Nginx {
        Self::start_listening(name, index_text, "", "")
    }

    /// A server whose listener takes the PROXY protocol; `/client` answers the address it carried.
    pub fn start_with_proxy_protocol(name: &str) -> Nginx {
        Self::start_listening(name, "TARGET", " proxy_protocol", "")
    }

    /// An HTTPS server with its own certificate and key (PEM files).
    pub fn start_https(name: &str, cert: &Path, key: &Path) -> Nginx {
        Self::start_listening(name, "TARGET", " ssl", &Self::certificate(cert, key))
    }

    /// An HTTPS server whose listener takes the PROXY protocol before the handshake.
    pub fn start_https_with_proxy_protocol(name: &str, cert: &Path, key: &Path) -> Nginx {
        Self::start_listening(name, "TARGET", " ssl proxy_protocol", &Self::certificate(cert, key))
    }

    fn certificate(cert: &Path, key: &Path) -> String {
        format!("ssl_certificate {};\n        ssl_certificate_key {};", cert.display(), key.display())
    }

    fn start_listening(name: &str, index_text: &str, listen_options: &str, server_extra: &str) -> Nginx {
        let dir = scratch(&format!("nginx-{name}"));
        let root = dir.join("www");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("index.html"), index_text).unwrap();
        std::fs::write(root.join("large"), large_pattern()).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let servers = format!(
            r#"    keepalive_requests 100000;
    types {{ text/html html; application/json json; image/png png; }}
    server {{
        listen {addr}{listen_options} backlog=4096;
        {server_extra}
        root {root};
        add_header X-Served-By {name} always;
        location = /name {{ default_type text/plain; return 200 "{name}\n"; }}
        location = /post {{ default_type text/plain; return 200 "{name}"; }}
        location = /session {{ add_header X-Served-By {name} always; add_header Set-Cookie "JSESSIONID=sess-{name}; Path=/" always; default_type text/plain; return 200 "{name}"; }}
        location = /client {{ default_type text/plain; return 200 "$proxy_protocol_addr:$proxy_protocol_port"; }}
        location = /headers {{ default_type text/plain; return 200 "server={name}\nxff=$http_x_forwarded_for\nproto=$http_x_forwarded_proto\nforwarded=$http_forwarded\nconnection=$http_connection\nkeep-alive=$http_keep_alive\nte=$http_te\nhost=$host\ntraceparent=$http_traceparent\ntracestate=$http_tracestate\n"; }}
        location = /flaky {{ default_type text/plain; if (-f {root}/fail) {{ return 503 "{name} failing\n"; }} return 200 "{name}\n"; }}
        location /echo/ {{ default_type text/plain; return 200 "server={name}\nuri=$request_uri\nmethod=$request_method\nhost=$http_host\nx-set=$http_x_set\nx-added=$http_x_added\nx-drop=$http_x_drop\nrequest-id=$http_x_request_id\n"; }}
        location / {{ }}
    }}
"#,
            root = root.display(),
        );
        let conf = nginx_conf(&dir, &servers);
        let child = run_nginx(&dir, &conf, addr, &format!("nginx {name}"));
        Nginx { name: name.into(), addr, dir, child: Some(child) }
    }

    /// The directory nginx serves files from (`index.html` and `large` are there).
    pub fn root(&self) -> PathBuf {
        self.dir.join("www")
    }

    /// Makes `/flaky` answer 503 (`true`) or 200 again.
    pub fn fail(&self, failing: bool) {
        let flag = self.root().join("fail");
        if failing {
            std::fs::write(flag, "").unwrap();
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// What nginx logged at `warn` and above.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same address (after `stop`).
    pub fn restart(&mut self) {
        assert!(self.child.is_none());
        let conf = std::fs::read_to_string(self.dir.join("nginx.conf")).unwrap();
        self.child = Some(run_nginx(&self.dir, &conf, self.addr, &format!("nginx {} restarted", self.name)));
    }
}

/// An nginx config for the prefix `dir` (its pid, error log and temporary files there), one
/// worker in the foreground, whose `http` block holds `http` (its `server` blocks).
pub fn nginx_conf(dir: &Path, http: &str) -> String {
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
user root root;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{http}}}
"#,
        dir = dir.display(),
    )
}

/// `fulcrum check` of `config` written to `dir/check.toml`: whether it passed, and what it
/// printed.
/// A self-signed certificate for `name` made by the openssl command, and its key: (cert, key).
pub fn openssl_self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "30",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            &format!("subjectAltName=DNS:{name}"),
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
    (cert, key)
}

pub fn check_config(config: &str, dir: &Path) -> (bool, String) {
    let path = dir.join("check.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", path.to_str().unwrap()]).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Starts nginx with `conf` written into `dir` (its prefix), and waits until it listens on
/// `addr`. The config includes the modules it needs; scripts/test installs them.
pub fn run_nginx(dir: &Path, conf: &str, addr: SocketAddr, what: &str) -> Child {
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .args(["-p", dir.to_str().unwrap(), "-c", dir.join("nginx.conf").to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx must be installed (scripts/test installs it)");
    wait_until(&format!("{what} on {addr}"), Duration::from_secs(10), || listening(addr));
    child
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn large_pattern() -> Vec<u8> {
    (0..LARGE).map(|i| (i % 251) as u8).collect()
}

/// Four nginx servers s1..s4 serving the paper's `TARGET` page.
pub fn four_servers() -> Vec<Nginx> {
    (1..=4).map(|i| Nginx::start(&format!("s{i}"), &format!("<html>TARGET s{i}</html>"))).collect()
}

/// A running `fulcrum run` process over a config written to a scratch file.
pub struct Fulcrum {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub config_path: PathBuf,
    pub log_path: PathBuf,
    /// Lines added to the `[admin]` table (authentication).
    admin_extra: String,
    /// `Authorization` header value the helpers send, when authentication is configured.
    pub authorization: Option<String>,
    proc: testkit::Proc,
}

impl Fulcrum {
    /// `config` is the whole config but the `[admin]` table, which is appended; `{LISTEN}` in it is replaced by a free port.
    pub fn start(config: &str) -> Fulcrum {
        Self::start_with_admin(config, "", None)
    }

    /// Like `start`, with `admin_extra` lines in the `[admin]` table and the `Authorization`
    /// header the helpers then send.
    pub fn start_with_admin(config: &str, admin_extra: &str, authorization: Option<String>) -> Fulcrum {
        Self::spawn(&[], config, admin_extra, authorization)
    }

    /// Like `start`, run by a command that sets its limits, e.g. `["prlimit", "--nofile=256:256"]`.
    pub fn start_under(prefix: &[&str], config: &str) -> Fulcrum {
        Self::spawn(prefix, config, "", None)
    }

    /// Like `start`, running the binary at `exe` (a copy a test replaces, as an upgrade does).
    pub fn start_exe(exe: &Path, config: &str) -> Fulcrum {
        Self::spawn(&[exe.to_str().unwrap()], config, "", None)
    }

    /// Like `start`, with `{LISTEN}` the address the test chose (one a peer was told of
    /// before Fulcrum starts, as Pebble's validator is).
    pub fn start_at(listen: SocketAddr, config: &str) -> Fulcrum {
        Self::spawn_at(&[], listen, config, "", None)
    }

    fn spawn(prefix: &[&str], config: &str, admin_extra: &str, authorization: Option<String>) -> Fulcrum {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::spawn_at(prefix, listen, config, admin_extra, authorization)
    }

    fn spawn_at(prefix: &[&str], listen: SocketAddr, config: &str, admin_extra: &str, authorization: Option<String>) -> Fulcrum {
        let dir = scratch("fulcrum");
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config_path = dir.join("fulcrum.toml");
        write_config(&config_path, admin, admin_extra, &config.replace("{LISTEN}", &listen.to_string()));
        let log_path = dir.join("fulcrum.log");
        let mut command = match prefix.split_first() {
            // A copy of the binary, run as it is.
            Some((p, [])) if p.ends_with("/fulcrum") => Command::new(p),
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(env!("CARGO_BIN_EXE_fulcrum"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_fulcrum")),
        };
        command.args(["--log", "info", "run", config_path.to_str().unwrap()]);
        let proc = testkit::start_fulcrum(&mut command, &log_path, &[admin, listen], Duration::from_secs(15)).unwrap_or_else(|e| panic!("{e:#}"));
        Fulcrum { listen, admin, config_path, log_path, admin_extra: admin_extra.to_string(), authorization, proc }
    }

    /// Rewrites the config (same admin and listen) and sends SIGHUP.
    pub fn reload(&self, config: &str) {
        write_config(&self.config_path, self.admin, &self.admin_extra, &config.replace("{LISTEN}", &self.listen.to_string()));
        self.signal(libc_sig::HUP);
    }

    pub fn signal(&self, sig: i32) {
        let ok = Command::new("kill").args([format!("-{sig}"), self.pid().to_string()]).status().unwrap().success();
        assert!(ok, "kill -{sig} failed");
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The process's resident memory in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.proc.usage().rss_kib
    }

    /// CPU time (user and system) the process has used so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        let ticks = *TICKS.get_or_init(|| {
            let out = Command::new("getconf").arg("CLK_TCK").output().expect("getconf runs");
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("CLK_TCK is a number")
        });
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        cpu_ticks(&stat).unwrap_or_else(|| panic!("no CPU times in {stat:?}")) as f64 / ticks
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits for a log line containing `text`.
    pub fn wait_log(&self, text: &str) {
        wait_until(&format!("log line with {text:?}"), Duration::from_secs(10), || self.log().contains(text));
    }

    /// `GET /api/stats` as JSON.
    pub fn stats(&self) -> serde_json::Value {
        let (status, body) = self.api("GET", "/api/stats", None);
        assert_eq!(status, 200, "stats: {body}");
        body
    }

    /// One admin API request with curl (JSON body, same-origin, authorized as configured);
    /// returns the status and the body as JSON (a string value when it is not JSON).
    pub fn api(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
        let mut headers = Vec::new();
        if let Some(a) = &self.authorization {
            headers.push(format!("Authorization: {a}"));
        }
        if method != "GET" {
            headers.push("Content-Type: application/json".to_string());
        }
        let body = body.map(|b| b.to_string()).or_else(|| (method != "GET").then(|| "{}".to_string()));
        let (status, text) = curl(self.admin, method, path, &headers, body.as_deref());
        (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
    }

    /// The stats of one server of the first service, by configured address.
    pub fn server_stats(&self, address: &str) -> serde_json::Value {
        server_in(&self.stats(), address)
    }

    /// Waits until every server of every service is up (tests that count exact shares need it).
    pub fn wait_all_up(&self) {
        wait_until("every server up", Duration::from_secs(20), || all_up(&self.stats()));
    }

    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let mut status = None;
        testkit::wait_for(limit, || {
            status = self.proc.exited();
            status.is_some()
        });
        status
    }
}

impl Drop for Fulcrum {
    fn drop(&mut self) {
        // The process ends with `proc`, after this.
        if std::thread::panicking() {
            eprintln!("---- fulcrum log ----\n{}", self.log());
        }
    }
}

pub mod libc_sig {
    pub const HUP: i32 = 1;
    pub const TERM: i32 = 15;
}

/// The tests run as root: `allow_root` says it is meant (`app::privilege`).
fn write_config(path: &Path, admin: SocketAddr, admin_extra: &str, rest: &str) {
    std::fs::write(path, format!("allow_root = true\n{rest}\n\n[admin]\nlisten = \"{admin}\"\n{admin_extra}\n")).unwrap();
}

/// An Argon2 hash of `password` for `[admin] password_hash`, made by `fulcrum hash-password`.
pub fn password_hash(password: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("hash-password").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "fulcrum hash-password failed");
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    hash
}

/// An HTTP request with curl to `addr`: (status, body). Headers as `Name: value` lines.
pub fn curl(addr: SocketAddr, method: &str, path: &str, headers: &[String], body: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "-X", method, "-w", "\n%{http_code}"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    if let Some(b) = body {
        cmd.args(["--data-binary", b]);
    }
    let out = cmd.arg(format!("http://{addr}{path}")).output().expect("curl must be installed (scripts/test installs it)");
    assert!(out.status.success(), "curl {method} {path}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The first service's server `address` in a stats snapshot (`GET /api/stats`).
pub fn server_in(stats: &serde_json::Value, address: &str) -> serde_json::Value {
    stats["services"][0]["servers"].as_array().unwrap().iter().find(|v| v["address"] == address).cloned().unwrap_or_else(|| panic!("no server {address} in {stats}"))
}

/// Whether every server of every service is up in a stats snapshot.
pub fn all_up(stats: &serde_json::Value) -> bool {
    stats["services"].as_array().unwrap().iter().all(|svc| svc["servers"].as_array().unwrap().iter().all(|v| v["state"] == "up"))
}

/// A service section over `servers` with `extra` lines added to the service table.
pub fn service(algorithm: &str, extra: &str, health: &str, servers: &[(&Nginx, &str)]) -> String {
    let at: Vec<(SocketAddr, &str)> = servers.iter().map(|(n, more)| (n.addr, *more)).collect();
    service_over(algorithm, extra, health, &at)
}

/// A service section over servers given by address, with lines added to each server's table.
pub fn service_over(algorithm: &str, extra: &str, health: &str, servers: &[(SocketAddr, &str)]) -> String {
    let mut s = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nalgorithm = \"{algorithm}\"\n{extra}\n\n[service.health]\n{health}\n");
    for (addr, more) in servers {
        s.push_str(&format!("\n[[service.server]]\naddress = \"{addr}\"\n{more}\n"));
    }
    s
}

pub const HTTP_CHECK: &str = "kind = \"http\"\ninterval = \"200ms\"\ntimeout = \"1s\"\nrise = 2\nfall = 2\npath = \"/index.html\"\nexpect_text = \"TARGET\"";

/// One HTTP/1.0 request on its own connection; returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_get_from(None, addr, path).unwrap_or_else(|e| panic!("GET {path} via {addr}: {e}"))
}

/// Like `http_get`, from a chosen loopback source address.
pub fn http_get_from(source: Option<IpAddr>, addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = connect_from(source, addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

pub fn connect_from(source: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    match source {
        None => TcpStream::connect_timeout(&addr, Duration::from_secs(5)),
        Some(ip) => {
            let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            sock.bind(&SocketAddr::new(ip, 0).into())?;
            sock.connect_timeout(&addr.into(), Duration::from_secs(5))?;
            Ok(sock.into())
        }
    }
}

pub fn parse_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err(std::io::Error::other(format!("no response head in {} bytes", raw.len())));
    };
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| std::io::Error::other("bad status line"))?;
    Ok((status, body.to_string()))
}

/// Counts which server answered `/name` over `n` requests, by name (the body without its line end).
pub fn tally(addr: SocketAddr, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for _ in 0..n {
        let (status, body) = http_get(addr, "/name");
        assert_eq!(status, 200);
        *m.entry(body.trim_end().to_string()).or_insert(0) += 1;
    }
    m
}

/// Sends a request, shuts the write side, and reads everything that comes back.
pub fn request_then_half_close(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    raw
}

pub fn body_of(raw: &[u8]) -> &[u8] {
    let pos = raw.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4).unwrap_or(raw.len());
    &raw[pos..]
}

/// A `fulcrum backend` real server: HTTP that keeps serving a half-closed connection (nginx
/// aborts a response when its client half-closes, so half-close tests use this one). The
/// harness's (`testkit::Backend`: `addr`, `diagnose`), started the tests' way.
pub struct Backend(testkit::Backend);

impl std::ops::Deref for Backend {
    type Target = testkit::Backend;
    fn deref(&self) -> &testkit::Backend {
        &self.0
    }
}

impl std::ops::DerefMut for Backend {
    fn deref_mut(&mut self) -> &mut testkit::Backend {
        &mut self.0
    }
}

impl Backend {
    pub fn start(name: &str) -> Backend {
        Self::start_with(name, &[])
    }

    /// A backend with extra `fulcrum backend` options (degradations), on a `free_port`: below
    /// the ephemeral range, so a test can start it again on the same port after stopping it. A
    /// port that another process took between `free_port` and the backend's bind is given up
    /// for the next one.
    pub fn start_with(name: &str, extra: &[&str]) -> Backend {
        let mut failed = Vec::new();
        for _ in 0..3 {
            match Self::spawn(name, SocketAddr::from(([127, 0, 0, 1], free_port())), extra) {
                Ok(b) => return b,
                Err(why) => failed.push(format!("{why:#}")),
            }
        }
        panic!("backend {name} did not start: {failed:#?}");
    }

    /// A backend on `addr`: one started again where an earlier one was stopped.
    pub fn start_at(name: &str, addr: SocketAddr, extra: &[&str]) -> Backend {
        Self::spawn(name, addr, extra).unwrap_or_else(|e| panic!("{e:#}"))
    }

    fn spawn(name: &str, addr: SocketAddr, extra: &[&str]) -> anyhow::Result<Backend> {
        let log = scratch("backend").join(format!("{name}.log"));
        Ok(Backend(testkit::Backend::start(Path::new(env!("CARGO_BIN_EXE_fulcrum")), name, addr, extra, Some(&log))?))
    }
}

/// An HTTP server that keeps each request head it gets and answers `ok`.
pub fn head_keeper() -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut b).is_ok_and(|n| n == 1) {
                head.push(b[0]);
            }
            kept.lock().unwrap().push(String::from_utf8_lossy(&head).to_ascii_lowercase());
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (addr, heads)
}
