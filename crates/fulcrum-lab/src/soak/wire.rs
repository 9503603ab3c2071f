//! The soak's clients at the byte level: HTTP/1.1 and FTP written by hand over plain sockets,
//! because the soak needs what a library hides: a receive buffer a few KiB small, a body read or
//! written a few KiB at a time, the same connection kept across requests in TCP mode (where it
//! stays on one real server), and the name of the server from its reply (`X-Served-By`, or the
//! FTP banner `vsftpd NAME`). Every body is checked byte for byte against the real servers'
//! pattern, so a proxy that corrupts or truncates data fails the soak.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

/// Byte `i` of every body the soak sends or receives: `fulcrum backend`'s pattern, and the FTP
/// files are written with it too.
pub fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

/// Pacing of a slow client: `chunk` bytes, then a pause of `gap`.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub chunk: usize,
    pub gap: Duration,
}

/// A connection to Fulcrum; `rcvbuf` shrinks the kernel's receive buffer (a slow reader).
pub async fn connect(addr: SocketAddr, rcvbuf: Option<u32>) -> anyhow::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(n) = rcvbuf {
        socket.set_recv_buffer_size(n)?;
    }
    let stream = socket.connect(addr).await.with_context(|| format!("connect to {addr}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One HTTP request: `GET /bytes/{size}` or, with `upload`, a POST of `size` pattern bytes.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub upload: bool,
    pub size: u64,
    pub keep_alive: bool,
    /// Writes the upload, or reads the response body, at this pace.
    pub pace: Option<Pace>,
}

/// What came back, checked.
#[derive(Debug)]
pub struct Response {
    /// `X-Served-By`.
    pub server: Option<String>,
    /// The server asked to close (or the request did).
    pub close: bool,
}

/// An HTTP/1.1 client connection: the stream and the bytes read past the last response.
pub struct Http {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Http {
    pub fn new(stream: TcpStream) -> Http {
        Http { stream, buf: Vec::new() }
    }

    /// Sends `req` and reads its whole response. An error names what was wrong; `server` is
    /// filled as soon as the head named it, so a failure in the body can still be attributed.
    pub async fn exchange(&mut self, req: Request, server: &mut Option<String>) -> anyhow::Result<Response> {
        let connection = if req.keep_alive { "keep-alive" } else { "close" };
        let head = if req.upload {
            format!("POST /upload HTTP/1.1\r\nHost: soak\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n", req.size)
        } else {
            format!("GET /bytes/{} HTTP/1.1\r\nHost: soak\r\nConnection: {connection}\r\n\r\n", req.size)
        };
        self.stream.write_all(head.as_bytes()).await.context("writing the request head")?;
        if req.upload {
            self.send_body(req.size, req.pace).await.context("writing the request body")?;
        }
        let head = self.read_head().await?;
        let (status, headers) = parse_head(&head)?;
        let header = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        *server = header("x-served-by").map(str::to_string);
        let close = !req.keep_alive || header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let chunked = header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let length = header("content-length").map(|v| v.trim().parse::<u64>()).transpose().context("bad Content-Length")?;
        let body = if chunked {
            self.read_chunked(req.pace).await?
        } else if let Some(n) = length {
            self.read_exact_body(n, req.pace, status == 200 && !req.upload).await?
        } else {
            bail!("status {status}: a response without Content-Length or chunked framing");
        };
        if status != 200 {
            bail!("status {status}: {}", String::from_utf8_lossy(&body).trim());
        }
        if server.is_none() {
            bail!("a 200 without X-Served-By: not from a real server");
        }
        if req.upload {
            // The real server answers {"name": ..., "received": N}.
            let v: serde_json::Value = serde_json::from_slice(&body).context("the upload's answer is not JSON")?;
            if v["received"].as_u64() != Some(req.size) {
                bail!("uploaded {} bytes, the server received {}", req.size, v["received"]);
            }
        }
        Ok(Response { server: server.clone(), close })
    }

    async fn send_body(&mut self, size: u64, pace: Option<Pace>) -> std::io::Result<()> {
        let chunk = pace.map(|p| p.chunk).unwrap_or(64 << 10);
        let mut sent = 0u64;
        let mut block = Vec::with_capacity(chunk);
        while sent < size {
            let n = (size - sent).min(chunk as u64);
            block.clear();
            block.extend((sent..sent + n).map(pattern));
            self.stream.write_all(&block).await?;
            sent += n;
            if let Some(p) = pace {
                tokio::time::sleep(p.gap).await;
            }
        }
        Ok(())
    }

    async fn fill(&mut self, max: usize) -> anyhow::Result<()> {
        let mut tmp = vec![0u8; max];
        let n = self.stream.read(&mut tmp).await.context("reading the response")?;
        if n == 0 {
            bail!("the connection closed before the response ended");
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(())
    }

    async fn read_head(&mut self) -> anyhow::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let rest = self.buf.split_off(end + 4);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            if self.buf.len() > 64 << 10 {
                bail!("a response head over 64 KiB");
            }
            self.fill(16 << 10).await?;
        }
    }

    /// `n` bytes of body; with `check`, each must be the pattern's. Paced reads take at most
    /// `chunk` bytes from the socket per `gap`, so the kernel's small buffer fills and the
    /// sender has to wait.
    async fn read_exact_body(&mut self, n: u64, pace: Option<Pace>, check: bool) -> anyhow::Result<Vec<u8>> {
        let mut got = 0u64;
        let mut kept = Vec::new();
        loop {
            let take = (self.buf.len() as u64).min(n - got) as usize;
            if check {
                if let Some(i) = self.buf[..take].iter().enumerate().position(|(k, b)| *b != pattern(got + k as u64)) {
                    bail!("body byte {} differs from the real server's pattern", got + i as u64);
                }
            } else {
                kept.extend_from_slice(&self.buf[..take]);
            }
            self.buf.drain(..take);
            got += take as u64;
            if got == n {
                return Ok(kept);
            }
            match pace {
                Some(p) => {
                    tokio::time::sleep(p.gap).await;
                    self.fill(p.chunk).await
                }
                None => self.fill(64 << 10).await,
            }
            .with_context(|| format!("after {got} of {n} body bytes"))?;
        }
    }

    async fn read_chunked(&mut self, pace: Option<Pace>) -> anyhow::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line().await?;
            let size = u64::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).with_context(|| format!("bad chunk size {line:?}"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(body);
            }
            body.extend(self.read_exact_body(size, pace, false).await?);
            self.read_line().await?;
        }
    }

    async fn read_line(&mut self) -> anyhow::Result<String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            self.fill(16 << 10).await?;
        }
    }
}

fn parse_head(head: &[u8]) -> anyhow::Result<(u16, Vec<(String, String)>)> {
    let text = std::str::from_utf8(head).context("a response head that is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).with_context(|| format!("bad status line {status_line:?}"))?;
    let headers = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    Ok((status, headers))
}

/// One anonymous FTP session through Fulcrum: log in, then for each of `files` (name, size) an
/// EPSV data connection and a RETR whose bytes are checked, then QUIT. `server` is set from the
/// banner as soon as it arrives.
pub async fn ftp_session(vip: SocketAddr, files: &[(String, u64)], server: &mut Option<String>) -> anyhow::Result<()> {
    let stream = connect(vip, None).await?;
    let (read, mut write) = stream.into_split();
    let mut control = BufReader::new(read);
    let banner = reply(&mut control, 220).await.context("greeting")?;
    *server = banner.strip_prefix("vsftpd ").map(|s| s.trim().to_string());
    // vsftpd lets an anonymous user in at USER (230) when it asks no password, else at PASS.
    write.write_all(b"USER anonymous\r\n").await?;
    if reply_any(&mut control, &[230, 331]).await.context("USER anonymous")? == 331 {
        write.write_all(b"PASS soak@\r\n").await?;
        reply(&mut control, 230).await.context("PASS")?;
    }
    write.write_all(b"TYPE I\r\n").await?;
    reply(&mut control, 200).await.context("TYPE I")?;
    for (name, size) in files {
        write.write_all(b"EPSV\r\n").await?;
        let epsv = reply(&mut control, 229).await.context("EPSV")?;
        // "Entering Extended Passive Mode (|||PORT|)"
        let port: u16 = epsv.split('|').nth(3).and_then(|p| p.parse().ok()).with_context(|| format!("bad EPSV reply {epsv:?}"))?;
        let mut data = connect(SocketAddr::new(vip.ip(), port), None).await.context("data connection")?;
        write.write_all(format!("RETR pub/{name}\r\n").as_bytes()).await?;
        reply(&mut control, 150).await.with_context(|| format!("RETR {name}"))?;
        let mut got = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = data.read(&mut buf).await.with_context(|| format!("data of {name}"))?;
            if n == 0 {
                break;
            }
            if let Some(i) = buf[..n].iter().enumerate().position(|(k, b)| *b != pattern(got + k as u64)) {
                bail!("{name}: byte {} differs from the file", got + i as u64);
            }
            got += n as u64;
        }
        if got != *size {
            bail!("{name}: {got} bytes arrived, the file has {size}");
        }
        reply(&mut control, 226).await.with_context(|| format!("end of {name}"))?;
    }
    write.write_all(b"QUIT\r\n").await?;
    reply(&mut control, 221).await.context("QUIT")?;
    Ok(())
}

/// Reads one (possibly multi-line) FTP reply and requires `code`; returns the text of its last line.
async fn reply(control: &mut Control, code: u16) -> anyhow::Result<String> {
    let (_, text) = read_reply(control, &[code]).await?;
    Ok(text)
}

/// Reads one reply whose code is one of `codes`; returns the code.
async fn reply_any(control: &mut Control, codes: &[u16]) -> anyhow::Result<u16> {
    Ok(read_reply(control, codes).await?.0)
}

type Control = BufReader<tokio::net::tcp::OwnedReadHalf>;

async fn read_reply(control: &mut Control, codes: &[u16]) -> anyhow::Result<(u16, String)> {
    loop {
        let mut line = String::new();
        if control.read_line(&mut line).await? == 0 {
            bail!("the control connection closed (wanted {codes:?})");
        }
        let line = line.trim_end();
        // The last line of a reply is "NNN text"; "NNN-text" and other lines continue it.
        if line.len() >= 4
            && line.as_bytes()[3] == b' '
            && let Ok(code) = line[..3].parse::<u16>()
        {
            if !codes.contains(&code) {
                bail!("wanted {codes:?}, got {line:?}");
            }
            return Ok((code, line[4..].to_string()));
        }
    }
}
