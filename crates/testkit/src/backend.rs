//! The real server of the tests, the lab and the soak: `fulcrum backend`, a child process.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::bail;

use crate::Proc;

/// `fulcrum backend` listening on `addr`.
pub struct Backend {
    pub addr: SocketAddr,
    pub proc: Proc,
}

impl Backend {
    /// Runs `exe backend --listen LISTEN --name NAME EXTRA...` and waits (up to 10 s) for the
    /// line it prints once it listens: its own word, where a connection to the port could be
    /// answered by whoever else held it for a moment. With port 0 in `listen` the backend binds
    /// a port of the kernel's choosing and says which. Its stderr goes to `log`, else to ours.
    pub fn start(exe: &Path, name: &str, listen: SocketAddr, extra: &[&str], log: Option<&Path>) -> anyhow::Result<Backend> {
        Backend::start_as(Command::new(exe), name, listen, extra, log)
    }

    /// The same with a command the caller made for the binary (the lab's sets the namespace its
    /// real server runs in); the arguments are added here.
    pub fn start_as(mut command: Command, name: &str, listen: SocketAddr, extra: &[&str], log: Option<&Path>) -> anyhow::Result<Backend> {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path)?),
            None => Stdio::inherit(),
        };
        command.args(["--log", "warn", "backend", "--listen", &listen.to_string(), "--name", name]).args(extra).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr);
        let mut proc = Proc::spawn(name, &mut command)?;
        let mut out = proc.child.stdout.take().expect("stdout is piped");
        // Read on a thread of its own, so a backend that never speaks is given up after the bound.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = Vec::new();
            let mut byte = [0u8];
            while out.read(&mut byte).is_ok_and(|n| n == 1) && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            let _ = tx.send(String::from_utf8_lossy(&line).into_owned());
        });
        let said = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        match said.trim().parse::<SocketAddr>() {
            Ok(addr) if listen.port() == 0 || addr == listen => Ok(Backend { addr, proc }),
            _ => {
                let _ = proc.child.kill();
                let status = proc.child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
                let logged = log.and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
                bail!("real server {name} on {listen} did not say it listens ({status}, said {said:?}): {}", logged.trim_end())
            }
        }
    }

    /// What a test that waited in vain should print of this backend: whether its process still
    /// runs, whether its port accepts a connection now, and who holds the port.
    pub fn diagnose(&mut self) -> String {
        let process = match self.proc.child.try_wait() {
            Ok(None) => "running".to_string(),
            Ok(Some(status)) => format!("exited ({status})"),
            Err(e) => format!("unknown ({e})"),
        };
        let port = match TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)) {
            Ok(s) => format!("accepts (from {:?})", s.local_addr().ok()),
            Err(e) => format!("refuses ({e})"),
        };
        let sockets = Command::new("ss")
            .args(["-tanpH", &format!("( sport = :{} or dport = :{} )", self.addr.port(), self.addr.port())])
            .output()
            .map_or_else(|e| format!("ss: {e}"), |o| String::from_utf8_lossy(&o.stdout).trim_end().to_string());
        format!("backend on {}: process {} {process}, port {port}; sockets:\n{sockets}", self.addr, self.proc.pid())
    }
}
