//! What a service's traffic is (TCP, HTTP, FTP) or who moves it (the kernel): a word the config,
//! the algorithms and the data path all use, so it sits below them all.

use serde::{Deserialize, Serialize};

/// How a service understands its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Tcp,
    /// HTTP/1.1: requests are read, checked and forwarded over the servers' idle keep-alive connections.
    Http,
    /// FTP: the control connection is balanced and read, data connections are opened by Fulcrum
    /// on `data_ports` and go to the same server (passive and active mode).
    Ftp,
    /// The kernel moves the traffic: nftables DNATs each new connection to the listen address to a
    /// server drawn by `numgen`, and Fulcrum only controls the draw (`kernel`). It binds nothing
    /// and never sees a byte of it.
    Kernel,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Tcp => "tcp",
            Mode::Http => "http",
            Mode::Ftp => "ftp",
            Mode::Kernel => "kernel",
        }
    }
}
