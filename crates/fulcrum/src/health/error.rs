//! Why an active check failed. The text is what the dashboard shows after `fail:` and what the log
//! says when a server goes down.
//!
//! Each message already includes its cause's text, so causes are kept as fields and not also
//! returned as `source()`: a printer of error chains would otherwise repeat them.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("connect failed: {0}")]
    Connect(std::io::Error),
    /// A server sent the PROXY protocol: writing the check's LOCAL header failed.
    #[error("sending the PROXY header: {0}")]
    ProxyHeader(std::io::Error),
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// HTTP: the connection handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(hyper::Error),
    /// HTTP: the kept-alive connection closed between checks.
    #[error("connection lost: {0}")]
    ConnectionLost(hyper::Error),
    #[error("no connection")]
    NoConnection,
    /// HTTP: the configured path does not make a request.
    #[error("bad request: {0}")]
    BadRequest(hyper::http::Error),
    #[error("request failed: {0}")]
    Request(hyper::Error),
    #[error("reading body failed: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
    /// HTTP: the answer's status is not `expect_status`; `request` is the method and path.
    #[error("{request} answered {status}, expected {expected}")]
    Status { request: String, status: u16, expected: u16 },
    #[error("{request} answered {status} without the text {text:?}")]
    TextNotFound { request: String, status: u16, text: String },
    /// TCP: sending `send` failed.
    #[error("sending: {0}")]
    Send(std::io::Error),
    /// TCP: reading the server's first bytes failed.
    #[error("reading: {0}")]
    Read(std::io::Error),
    /// TCP: the server's first bytes (`said`: their first 60 characters) do not contain
    /// `expect_text`.
    #[error("the answer {said:?} does not contain {text:?}")]
    TcpTextNotFound { said: String, text: String },
    /// HTTP and gRPC with `server_tls`: the handshake or the server's certificate failed.
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    /// gRPC: the call failed, or the server is not SERVING.
    #[error("{0}")]
    Grpc(String),
    /// FTP: reading the server's greeting failed.
    #[error("reading the greeting: {0}")]
    Greeting(std::io::Error),
    #[error("closed before greeting")]
    ClosedBeforeGreeting,
    /// FTP: the greeting's last line (its first 60 characters) does not start with 220.
    #[error("greeting {greeting:?} is not 220")]
    NotReady { greeting: String },
}

impl CheckError {
    /// Whether this host, not the server, failed the check: out of descriptors, memory or local
    /// ports before a connection was made (`error::is_local`). Such a check says nothing of the
    /// server.
    pub fn is_local(&self) -> bool {
        matches!(self, CheckError::Connect(e) if crate::error::is_local(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_descriptors_is_this_hosts_failure_and_a_refusal_the_servers() {
        assert!(CheckError::Connect(std::io::Error::from_raw_os_error(libc::EMFILE)).is_local());
        assert!(!CheckError::Connect(std::io::Error::from_raw_os_error(libc::ECONNREFUSED)).is_local());
        assert!(!CheckError::Read(std::io::Error::from_raw_os_error(libc::EMFILE)).is_local(), "a connection was made: the server was reached");
    }

    #[test]
    fn a_timeout_reads_as_a_duration() {
        assert_eq!(CheckError::Timeout(Duration::from_millis(1500)).to_string(), "no answer within 1s 500ms");
    }
}
