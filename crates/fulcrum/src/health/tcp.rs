//! `kind = "tcp"`: the server is up when it accepts a connection within the timeout.

use std::net::SocketAddr;

use super::CheckError;
use crate::config::ProxyProtocol;

pub async fn check(addr: SocketAddr, proxy: Option<ProxyProtocol>) -> Result<String, CheckError> {
    super::connect(addr, proxy).await.map(|_| "connect ok".into())
}
