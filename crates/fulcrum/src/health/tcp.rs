//! `kind = "tcp"`: the server is up when it accepts a connection within the timeout.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use super::CheckError;

pub async fn check(addr: SocketAddr) -> Result<String, CheckError> {
    match TcpStream::connect(addr).await {
        Ok(_) => Ok("connect ok".into()),
        Err(e) => Err(CheckError::Connect(e)),
    }
}
