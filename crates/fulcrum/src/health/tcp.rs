//! `kind = "tcp"`: the server is up when it accepts a connection within the timeout; with
//! `send` it is sent a text first, and with `expect_text` its first bytes (at most
//! [`TCP_EXPECT_MAX`]) must contain that text, as HAProxy's `tcp-check send` / `expect string`.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;

use super::CheckError;
use crate::config::{Health, ProxyProtocol, TCP_EXPECT_MAX};

/// The check within `cfg.timeout`, which it keeps itself: a server that answers something else
/// and then waits is reported with what it said, not as a timeout.
pub async fn check(addr: SocketAddr, proxy: Option<ProxyProtocol>, cfg: &Health) -> Result<String, CheckError> {
    let deadline = crate::clock::timer_now() + cfg.timeout;
    let connected = async {
        let mut stream = super::connect(addr, proxy).await?;
        if let Some(send) = cfg.send.as_ref().filter(|s| !s.is_empty()) {
            stream.write_all(send.as_bytes()).await.map_err(CheckError::Send)?;
        }
        Ok(stream)
    };
    let mut stream = tokio::time::timeout_at(deadline, connected).await.map_err(|_| CheckError::Timeout(cfg.timeout))??;
    let Some(text) = &cfg.expect_text else { return Ok("connect ok".into()) };
    let mut read = Vec::new();
    let found = |got: &[u8]| super::contains(got, text.as_bytes());
    match tokio::time::timeout_at(deadline, super::read_until(&mut stream, &mut read, TCP_EXPECT_MAX, found)).await {
        Ok(Err(e)) => return Err(CheckError::Read(e)),
        Err(_) if read.is_empty() => return Err(CheckError::Timeout(cfg.timeout)),
        _ => {}
    }
    if found(&read) {
        Ok(format!("found {text:?}"))
    } else {
        let said: String = String::from_utf8_lossy(&read).chars().take(60).collect();
        Err(CheckError::TcpTextNotFound { said, text: text.clone() })
    }
}
