//! The one error type of the data path: what went wrong, on which side, and whether another server
//! might do better. Config errors have their own type (`config::Diagnostics`) because they carry
//! file positions; the CLI edge turns both into `anyhow`.

use std::fmt;
use std::net::SocketAddr;

/// Which party a failure belongs to; it decides what a log line blames and what a retry can fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
    Internal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No server of the service is usable, backups included.
    NoServer,
    /// The connect to a server failed or was refused.
    Connect,
    /// The connect did not finish within `connect_timeout`.
    ConnectTimeout,
    /// The connection was idle longer than its timeout.
    Idle,
    /// Reading or writing an established connection failed.
    Io,
    /// The server was disabled with `terminate_on_disable`.
    Terminated,
}

#[derive(Debug, thiserror::Error)]
pub struct Error {
    pub kind: Kind,
    pub side: Side,
    pub server: Option<SocketAddr>,
    #[source]
    pub source: Option<std::io::Error>,
}

impl Error {
    pub fn new(kind: Kind, side: Side) -> Self {
        Error { kind, side, server: None, source: None }
    }
    pub fn server(mut self, addr: SocketAddr) -> Self {
        self.server = Some(addr);
        self
    }
    pub fn io(mut self, e: std::io::Error) -> Self {
        self.source = Some(e);
        self
    }
    /// Whether trying another server could succeed: only failures before any byte was forwarded.
    pub fn retryable(&self) -> bool {
        matches!(self.kind, Kind::Connect | Kind::ConnectTimeout)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            Kind::NoServer => "no server is up",
            Kind::Connect => "connect failed",
            Kind::ConnectTimeout => "connect timed out",
            Kind::Idle => "idle timeout",
            Kind::Io => "i/o error",
            Kind::Terminated => "server disabled with terminate_on_disable",
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
