//! The access log's shape and destination (`[service.http] log_format`, `[service.http.syslog]`):
//! a line template of named fields, parsed as the config is read, and a syslog receiver the
//! lines go to instead of the standard error.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use super::route::{Piece, pieces};
use super::*;

/// What an access log line can name in braces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogField {
    /// When the request arrived, RFC 3339 with milliseconds (UTC).
    Time,
    /// The client, `ip:port`.
    Client,
    ClientIp,
    ClientPort,
    Service,
    Pool,
    /// The server that answered, `host:port`, or `-`.
    Server,
    Method,
    /// The request target as the client sent it (at most 512 bytes).
    Path,
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`.
    Version,
    Status,
    BytesIn,
    BytesOut,
    QueueMs,
    ConnectMs,
    ResponseMs,
    /// From the request's arrival to its answer's end.
    TotalMs,
    RequestId,
    /// How the server was picked (`access_log_why`'s text).
    Why,
    /// The request's `Host` (or `:authority`).
    Host,
    UserAgent,
    Referer,
}

impl LogField {
    pub const ALL: [(&'static str, LogField); 22] = [
        ("time", LogField::Time),
        ("client", LogField::Client),
        ("client_ip", LogField::ClientIp),
        ("client_port", LogField::ClientPort),
        ("service", LogField::Service),
        ("pool", LogField::Pool),
        ("server", LogField::Server),
        ("method", LogField::Method),
        ("path", LogField::Path),
        ("version", LogField::Version),
        ("status", LogField::Status),
        ("bytes_in", LogField::BytesIn),
        ("bytes_out", LogField::BytesOut),
        ("queue_ms", LogField::QueueMs),
        ("connect_ms", LogField::ConnectMs),
        ("response_ms", LogField::ResponseMs),
        ("total_ms", LogField::TotalMs),
        ("request_id", LogField::RequestId),
        ("why", LogField::Why),
        ("host", LogField::Host),
        ("user_agent", LogField::UserAgent),
        ("referer", LogField::Referer),
    ];

    pub fn name(self) -> &'static str {
        LogField::ALL.iter().find(|(_, f)| *f == self).map_or("", |(n, _)| n)
    }
}

/// `log_format`: a line of text with `{field}`s (`{{` and `}}` for braces), as NGINX's
/// `log_format`. With `access_log = "json"` the fields it names, in its order, are the keys of
/// each line's object, and its text is not used.
#[derive(Clone, PartialEq, Eq)]
pub struct LogFormat {
    source: String,
    pub pieces: Vec<Piece<LogField>>,
    /// The fields it names, in order, each once: made with the format, read on every line.
    fields: Vec<LogField>,
}

impl LogFormat {
    /// Longest format, in bytes.
    pub const MAX_LEN: usize = 4096;

    /// The fields it names, in order, each once.
    pub fn fields(&self) -> &[LogField] {
        &self.fields
    }

    pub fn names(&self, field: LogField) -> bool {
        self.fields.contains(&field)
    }
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<LogFormat, String> {
        if s.len() > LogFormat::MAX_LEN {
            return Err(format!("a log_format is at most {} bytes; this one is {}", LogFormat::MAX_LEN, s.len()));
        }
        if let Some(c) = s.chars().find(|c| c.is_control() && *c != '\t') {
            return Err(format!("{s:?} holds the control character {c:?}: a log line is one line"));
        }
        let pieces = pieces(s, &LogField::ALL, "field")?;
        let mut fields = Vec::new();
        for p in &pieces {
            if let Piece::Var(f) = p
                && !fields.contains(f)
            {
                fields.push(*f);
            }
        }
        Ok(LogFormat { source: s.to_string(), pieces, fields })
    }
}

impl fmt::Debug for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.source)
    }
}

impl Serialize for LogFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for LogFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<LogFormat, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// `[service.http.syslog]`: access log lines go to a syslog receiver as RFC 5424 messages, over
/// UDP (`address`) or a Unix datagram socket (`socket`, e.g. `/dev/log`), instead of the
/// standard error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Syslog {
    /// A receiver over UDP, `ip:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<SocketAddr>,
    /// A receiver's Unix datagram socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    #[serde(default = "defaults::facility")]
    pub facility: Facility,
    /// The message's APP-NAME: 1 to 48 visible ASCII characters.
    #[serde(default = "defaults::syslog_tag")]
    pub tag: String,
}

/// A syslog facility (RFC 5424 section 6.2.1): where a receiver files the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Facility {
    User,
    Daemon,
    Local0,
    Local1,
    Local2,
    Local3,
    Local4,
    Local5,
    Local6,
    Local7,
}

impl Facility {
    /// Its number in the message's priority.
    pub fn code(self) -> u8 {
        match self {
            Facility::User => 1,
            Facility::Daemon => 3,
            Facility::Local0 => 16,
            Facility::Local1 => 17,
            Facility::Local2 => 18,
            Facility::Local3 => 19,
            Facility::Local4 => 20,
            Facility::Local5 => 21,
            Facility::Local6 => 22,
            Facility::Local7 => 23,
        }
    }
}
