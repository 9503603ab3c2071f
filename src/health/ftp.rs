//! `kind = "ftp"`: the server is up when it greets a new connection with `220` within the timeout.
//! The check then says `QUIT`, so the server logs a clean session rather than an abort.

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub async fn check(addr: SocketAddr) -> Result<String, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| format!("connect failed: {e}"))?;
    let mut reader = BufReader::new(stream);
    // A greeting may span lines ("220-..." then "220 ..."); the last line starts "220 ".
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut reader).take(1024).read_line(&mut line).await.map_err(|e| format!("reading the greeting: {e}"))?;
        if n == 0 {
            return Err("closed before greeting".into());
        }
        let text = line.trim_end();
        if text.len() >= 4 && text.as_bytes()[3] == b'-' {
            continue;
        }
        if !text.starts_with("220") {
            return Err(format!("greeting {:?} is not 220", truncate(text)));
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
