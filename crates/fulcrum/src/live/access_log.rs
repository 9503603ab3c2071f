//! Where a service's access log lines go, built with the service (`[service.http] access_log`,
//! `log_format`, `[service.http.syslog]`): the standard error through `tracing` (target
//! `access`), or a syslog receiver.
//!
//! Syslog: each line becomes an RFC 5424 message (`<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID
//! access - LINE`, severity informational) sent over UDP or a Unix datagram socket by a thread of
//! its own, so a slow or absent receiver never holds a thread that moves traffic. The thread
//! takes lines from a queue of [`QUEUE`] lines; a line that finds the queue full is dropped and
//! counted (`dropped`, logged once a minute at most), as is one the receiver refuses.

use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use super::losses::Losses;
use crate::config::{AccessLog, Http, LogFormat, Syslog};

/// Lines waiting for the syslog thread, at most.
pub const QUEUE: usize = 4096;
/// Longest message sent, in bytes: a line longer than this is cut (RFC 5424 asks receivers for
/// at least 2048; a line's fields are bounded well below this).
pub const MAX_MESSAGE: usize = 8192;

/// A service's access log: its format, and where its lines go.
pub struct AccessLogger {
    pub format: AccessLog,
    pub template: Option<LogFormat>,
    syslog: Option<SyslogSender>,
}

impl AccessLogger {
    /// The logger `http` asks for; `None` with `access_log = "off"`. Opens the syslog socket
    /// (no receiver needs to be there yet: the thread connects, and again after a failure).
    pub fn new(service: &str, http: &Http) -> std::io::Result<Option<AccessLogger>> {
        if http.access_log == AccessLog::Off {
            return Ok(None);
        }
        let syslog = http.syslog.as_ref().map(|s| SyslogSender::start(service, s)).transpose()?;
        Ok(Some(AccessLogger { format: http.access_log, template: http.log_format.clone(), syslog }))
    }

    /// Whether `new` would build the same logger for `http`: a reload that changes nothing of
    /// it keeps the running one (and its syslog thread).
    pub fn same(a: &Http, b: &Http) -> bool {
        a.access_log == b.access_log && a.log_format == b.log_format && a.syslog == b.syslog
    }

    pub fn emit(&self, line: &str) {
        match &self.syslog {
            Some(s) => s.send(line),
            None => tracing::info!(target: "access", "{line}"),
        }
    }

    /// Lines the syslog thread could not send or had no room for.
    pub fn dropped(&self) -> u64 {
        self.syslog.as_ref().map_or(0, |s| s.shared.count())
    }
}

struct SyslogSender {
    lines: SyncSender<String>,
    shared: Arc<Losses>,
}

impl SyslogSender {
    fn start(service: &str, cfg: &Syslog) -> std::io::Result<SyslogSender> {
        let target = match (&cfg.address, &cfg.socket) {
            (Some(addr), _) => {
                let local: std::net::SocketAddr = if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
                Target::Udp(UdpSocket::bind(local)?, *addr)
            }
            (None, Some(path)) => Target::Unix(UnixDatagram::unbound()?, path.clone()),
            (None, None) => return Err(std::io::Error::other("syslog needs an address or a socket")),
        };
        let header = Header { pri: u16::from(cfg.facility.code()) * 8 + 6, host: hostname(), tag: cfg.tag.clone(), pid: std::process::id() };
        let shared = Arc::new(Losses::new(service, "access log lines lost on their way to syslog"));
        let (lines, rx) = sync_channel(QUEUE);
        let thread_shared = shared.clone();
        std::thread::Builder::new().name("fulcrum-syslog".into()).spawn(move || send_loop(rx, target, header, &thread_shared))?;
        Ok(SyslogSender { lines, shared })
    }

    fn send(&self, line: &str) {
        match self.lines.try_send(line.to_string()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.shared.lose(1, "the queue is full (the receiver is slower than the traffic)"),
            Err(TrySendError::Disconnected(_)) => self.shared.lose(1, "the syslog thread is gone"),
        }
    }
}

enum Target {
    Udp(UdpSocket, std::net::SocketAddr),
    Unix(UnixDatagram, std::path::PathBuf),
}

struct Header {
    pri: u16,
    host: String,
    tag: String,
    pid: u32,
}

impl Header {
    /// The RFC 5424 message for `line`.
    fn message(&self, line: &str) -> Vec<u8> {
        let time = humantime::format_rfc3339_micros(crate::clock::wall());
        let mut m = format!("<{}>1 {time} {} {} {} access - ", self.pri, self.host, self.tag, self.pid).into_bytes();
        let room = MAX_MESSAGE.saturating_sub(m.len());
        let mut cut = line.len().min(room);
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        m.extend_from_slice(&line.as_bytes()[..cut]);
        m
    }
}

/// The syslog thread: sends each line until the logger is dropped (a reload that changed it, or
/// the service gone), when the queue's sender closes.
fn send_loop(rx: Receiver<String>, target: Target, header: Header, shared: &Losses) {
    let mut connected = false;
    while let Ok(line) = rx.recv() {
        let message = header.message(&line);
        let sent = match &target {
            Target::Udp(socket, addr) => socket.send_to(&message, addr).map(drop),
            Target::Unix(socket, path) => {
                if !connected {
                    connected = socket.connect(path).is_ok();
                }
                let sent = socket.send(&message).map(drop);
                // A receiver restarted (rsyslog, journald) has a new socket: connect again.
                connected &= sent.is_ok();
                sent
            }
        };
        if let Err(e) = sent {
            shared.lose(1, &format!("the receiver refused it: {e}"));
        }
    }
}

/// This machine's name for the HOSTNAME field: 1 to 255 visible ASCII characters, else `-`.
fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    if name.is_empty() || name.len() > 255 || !name.bytes().all(|b| b.is_ascii_graphic()) { "-".into() } else { name.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_has_the_rfc_5424_header_and_is_cut_at_its_bound() {
        let h = Header { pri: 16 * 8 + 6, host: "web1".into(), tag: "fulcrum".into(), pid: 42 };
        let m = String::from_utf8(h.message("GET / 200")).unwrap();
        assert!(m.starts_with("<134>1 20"), "{m}");
        assert!(m.ends_with("Z web1 fulcrum 42 access - GET / 200"), "{m}");
        let long = "é".repeat(MAX_MESSAGE);
        let m = h.message(&long);
        assert!(m.len() <= MAX_MESSAGE && std::str::from_utf8(&m).is_ok());
    }
}
