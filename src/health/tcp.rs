//! `kind = "tcp"`: the server is up when it accepts a connection within the timeout.

use std::net::SocketAddr;

use tokio::net::TcpStream;

pub async fn check(addr: SocketAddr) -> Result<String, String> {
    match TcpStream::connect(addr).await {
        Ok(_) => Ok("connect ok".into()),
        Err(e) => Err(format!("connect failed: {e}")),
    }
}
