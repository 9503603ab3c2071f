//! The soak's disturbances and the record of when each one could cause an error: chaotic real
//! servers are killed and started again on the same port, or stopped (SIGSTOP) so their health
//! checks time out and started again (SIGCONT); every few seconds the config file is rewritten
//! with a weight changed and reloaded through the admin API. Each server event opens a window;
//! only a failure inside a window of its own server (or of any chaotic server, when the failure
//! cannot say which server it reached) is excused.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

/// How long after a chaotic server is back an error can still be its doing: Fulcrum sees it up
/// only after `rise` passing checks (2 x 1 s here), and keep-alive connections opened to the
/// old process are found closed when next used.
pub const SETTLE: Duration = Duration::from_secs(4);

/// One chaotic event: `server` was down (killed, or stopped) from `from` until `to` (open while
/// the event lasts).
#[derive(Debug, Clone)]
pub struct Window {
    pub server: String,
    pub what: &'static str,
    pub from: Instant,
    pub to: Option<Instant>,
}

/// The windows so far; shared by the chaos task (which opens and closes them) and the tally
/// (which reads them to judge failures).
#[derive(Default)]
pub struct Windows(Mutex<Vec<Window>>);

impl Windows {
    /// Opens a window before the event starts, so no failure it causes precedes it.
    pub fn open(&self, server: &str, what: &'static str) -> usize {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        w.push(Window { server: server.to_string(), what, from: Instant::now(), to: None });
        w.len() - 1
    }

    /// Closes window `i` `SETTLE` after the server is back.
    pub fn close(&self, i: usize) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = w.get_mut(i) {
            w.to = Some(Instant::now() + SETTLE);
        }
    }

    /// Whether a failure from `start` to `end`, on `server` if known, falls in a window.
    pub fn excuses(&self, server: Option<&str>, start: Instant, end: Instant) -> bool {
        let w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        w.iter().any(|w| start <= w.to.unwrap_or_else(Instant::now) && end >= w.from && server.is_none_or(|s| s == w.server))
    }

    pub fn all(&self) -> Vec<Window> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Sends `signal` (`STOP`, `CONT`) to a process with kill(1): the lab's crates have no unsafe
/// code to call kill(2) with.
pub fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().context("cannot run kill")?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed ({status})");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_excuses_its_own_server_and_unknown_ones_but_never_a_stable_server() {
        let windows = Windows::default();
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let w = windows.open("h3", "killed");
        let during = Instant::now();
        windows.close(w);
        assert!(windows.excuses(Some("h3"), during, during));
        assert!(windows.excuses(None, during, during));
        assert!(!windows.excuses(Some("h1"), during, during), "a failure on a stable server is never excused");
        assert!(!windows.excuses(None, before, before), "a failure that ended before the kill is not its doing");
        // Closed SETTLE after the server came back: later failures are not excused.
        let after = Instant::now() + SETTLE + Duration::from_millis(10);
        assert!(!windows.excuses(None, after, after));
    }

    #[test]
    fn an_open_window_excuses_failures_up_to_now() {
        let windows = Windows::default();
        windows.open("h4", "stopped");
        let now = Instant::now();
        assert!(windows.excuses(Some("h4"), now, now));
        assert_eq!(windows.all().len(), 1);
    }
}
