//! `kind = "ftp"`: the server is up when it greets a new connection with `220` within the timeout.
//! The check then says `QUIT`, so the server logs a clean session rather than an abort.

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::CheckError;
use crate::config::ProxyProtocol;

pub async fn check(addr: SocketAddr, proxy: Option<ProxyProtocol>) -> Result<String, CheckError> {
    let stream = super::connect(addr, proxy).await?;
    let mut reader = BufReader::new(stream);
    // A greeting may span lines ("220-..." then "220 ..."); the last line starts "220 ".
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut reader).take(1024).read_line(&mut line).await.map_err(CheckError::Greeting)?;
        if n == 0 {
            return Err(CheckError::ClosedBeforeGreeting);
        }
        let text = line.trim_end();
        if text.len() >= 4 && text.as_bytes()[3] == b'-' {
            continue;
        }
        if !text.starts_with("220") {
            return Err(CheckError::NotReady { greeting: truncate(text).into() });
        }
        let _ = reader.get_mut().write_all(b"QUIT\r\n").await;
        return Ok(format!("greeting {:?}", truncate(text)));
    }
}

fn truncate(text: &str) -> &str {
    match text.char_indices().nth(60) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}
