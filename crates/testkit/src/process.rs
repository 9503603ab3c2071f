//! A child process that cannot outlive its test: killed and reaped when its handle drops, so a
//! failing test leaves nothing behind.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// One child process, by the name its errors give it.
pub struct Proc {
    pub name: String,
    pub child: Child,
}

impl Proc {
    /// Spawns `command` as `name`.
    pub fn spawn(name: &str, command: &mut Command) -> anyhow::Result<Proc> {
        let child = command.spawn().with_context(|| format!("cannot start {name} ({:?})", command.get_program()))?;
        Ok(Proc { name: name.to_string(), child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it used so far (CPU seconds, resident memory).
    pub fn usage(&self) -> crate::Usage {
        crate::Usage::of(self.pid())
    }

    /// Its exit status if it has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Ends the process (SIGKILL) and returns the CPU seconds it and every descendant it reaped
    /// used in its life, from the kernel's rusage (microseconds). `/proc` counts the same in
    /// 10 ms ticks and truncates each read, which rounds the short sessions of a forking server
    /// (vsftpd) to nothing.
    pub fn end_measured(&mut self) -> anyhow::Result<f64> {
        self.child.kill().with_context(|| format!("cannot end {}", self.name))?;
        let cpu = crate::usage::exited_cpu_secs(self.pid()).with_context(|| format!("cannot read what {} used", self.name))?;
        self.child.wait().with_context(|| format!("cannot reap {}", self.name))?;
        Ok(cpu)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 20 ms until it holds or `limit` passes; whether it held.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts Fulcrum as `command` (the `fulcrum` binary, or a command that runs it, with its
/// arguments), its stderr in `log`, and waits until every address of `ready` accepts. The error
/// carries the log when Fulcrum exits first or does not listen within `limit`.
pub fn start_fulcrum(command: &mut Command, log: &Path, ready: &[SocketAddr], limit: Duration) -> anyhow::Result<Proc> {
    let log_file = std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut proc = Proc::spawn("fulcrum", command.env_remove("RUST_LOG").stdin(Stdio::null()).stdout(Stdio::null()).stderr(log_file))?;
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    let mut exited = None;
    let listening = wait_for(limit, || {
        exited = proc.exited();
        exited.is_some() || ready.iter().all(|a| crate::accepts(*a))
    });
    if let Some(status) = exited {
        bail!("fulcrum exited ({status}) before listening on {ready:?}:\n{}", log_text());
    }
    if !listening {
        bail!("fulcrum did not listen on {ready:?} within {limit:?}:\n{}", log_text());
    }
    Ok(proc)
}
