//! The error of the data path: what went wrong, on which side, and whether another server might
//! do better. The dispatcher decides redispatch from [`Error::retryable`] alone, so a failure is
//! classified once, where it happens. Config errors have their own type (`config::Diagnostics`)
//! because they carry file positions; the CLI edge turns both into `anyhow`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Which party a failure belongs to; it decides what a log line blames and what a retry can fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    /// This process or host: out of descriptors, memory or ephemeral ports. Never counted against
    /// a server, and no other server would fare better.
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No server of the service is usable, backups included.
    NoServer,
    /// Every usable server stayed at its `maxconn` for `queue_timeout`.
    QueueTimeout,
    /// The connect to a server failed or was refused.
    Connect,
    /// The connect did not finish within `connect_timeout`.
    ConnectTimeout,
}

#[derive(Debug, thiserror::Error)]
pub struct Error {
    pub kind: Kind,
    pub side: Side,
    pub server: Option<SocketAddr>,
    #[source]
    pub source: Option<io::Error>,
}

impl Error {
    pub fn new(kind: Kind, side: Side) -> Self {
        Error { kind, side, server: None, source: None }
    }
    pub fn server(mut self, addr: SocketAddr) -> Self {
        self.server = Some(addr);
        self
    }
    pub fn io(mut self, e: io::Error) -> Self {
        self.source = Some(e);
        self
    }
    /// A failed connect, blamed on the server unless the error is the host's own.
    pub fn connect(addr: SocketAddr, e: io::Error) -> Self {
        let side = if is_local(&e) { Side::Local } else { Side::Server };
        Error::new(Kind::Connect, side).server(addr).io(e)
    }
    /// Whether trying another server could succeed: only a server's failure before any byte was
    /// forwarded.
    pub fn retryable(&self) -> bool {
        self.side == Side::Server && matches!(self.kind, Kind::Connect | Kind::ConnectTimeout)
    }
}

/// Errors that say this host ran out of something (descriptors, memory, buffers, local ports):
/// the server was never reached.
pub fn is_local(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL))
}

/// A log line that may be written at most once a second: errors of this host (out of descriptors)
/// come in floods, one per connection, and are one cause. `held` counts the lines left out.
pub struct Throttle {
    /// When the next line may be written, in ms since the Unix epoch.
    next: AtomicU64,
    held: AtomicU64,
}

impl Throttle {
    pub const fn new() -> Self {
        Throttle { next: AtomicU64::new(0), held: AtomicU64::new(0) }
    }

    /// `Some(lines held back since the last one)` when a line may be written now.
    pub fn ready(&self) -> Option<u64> {
        self.ready_at(crate::clock::unix_ms())
    }

    fn ready_at(&self, now_ms: u64) -> Option<u64> {
        let next = self.next.load(Relaxed);
        if now_ms < next || self.next.compare_exchange(next, now_ms + 1000, Relaxed, Relaxed).is_err() {
            self.held.fetch_add(1, Relaxed);
            return None;
        }
        Some(self.held.swap(0, Relaxed))
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            Kind::NoServer => "no server is up",
            Kind::QueueTimeout => "every server stayed at its maxconn (queue timeout)",
            Kind::Connect if self.side == Side::Local => "cannot open a connection on this host",
            Kind::Connect => "connect failed",
            Kind::ConnectTimeout => "connect timed out",
        };
        write!(f, "{what}")?;
        if let Some(s) = self.server {
            write!(f, " (server {s})")?;
        }
        if let Some(e) = &self.source {
            write!(f, ": {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttled_line_is_written_once_a_second_and_counts_what_it_held() {
        let t = Throttle::new();
        assert_eq!(t.ready_at(10_000), Some(0));
        assert_eq!(t.ready_at(10_001), None);
        assert_eq!(t.ready_at(10_999), None);
        assert_eq!(t.ready_at(11_000), Some(2));
        assert_eq!(t.ready_at(11_500), None);
    }

    #[test]
    fn out_of_descriptors_is_local_and_not_retried_elsewhere() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let local = Error::connect(addr, io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(local.side, Side::Local);
        assert!(!local.retryable());
        let refused = Error::connect(addr, io::Error::from_raw_os_error(libc::ECONNREFUSED));
        assert_eq!(refused.side, Side::Server);
        assert!(refused.retryable());
        assert!(!Error::new(Kind::NoServer, Side::Server).retryable());
    }
}
