//! The request-smuggling defence: an IO wrapper between the client socket and hyper that follows
//! the HTTP/1.1 framing itself and holds back each request head (and each chunk-size line) until
//! it has checked it. A head with both Content-Length and Transfer-Encoding, Content-Lengths that
//! differ, a Transfer-Encoding other than chunked, obsolete line folding, a bare CR or LF, or an
//! invalid chunk size never reaches hyper, so it never reaches a server: hyper sees the stream end
//! there, and the client gets one 400 with the reason. Who writes it depends on where the
//! violation is: in a head, hyper never saw that request, so the guard writes the 400 once hyper
//! has finished what came before; in a body, hyper's request handler is running and answers it
//! (it reads the verdict), so the guard writes nothing and a client never gets two answers.
//!
//! A CONNECT head is released to hyper (whose handler refuses it: Fulcrum does not tunnel) and
//! nothing after it is read: those bytes are neither HTTP nor forwarded.
//!
//! hyper alone would accept some of these (it drops Content-Length when Transfer-Encoding is
//! present, which is safe for us but still forwards a request a strict server would refuse), and
//! a second, independent reading of the framing is what keeps front and back in agreement.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::park::Activity;

/// Where the framing reader is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Head,
    /// `n` more body bytes.
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    Trailers,
    /// After an upgrade: no longer HTTP, passed through unread.
    Opaque,
    /// After a CONNECT head: nothing more is read from the client.
    End,
}

/// What a scan of the unreleased bytes decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// This many bytes from the front are checked and may go to hyper.
    Release(usize),
    NeedMore,
    Bad(Refusal),
}

/// Why a request was refused with a 400; the text is the 400's body and the log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndEncoding,
    #[error("Content-Length given twice with different values")]
    LengthsDiffer,
    #[error("invalid Content-Length {value:?}")]
    BadLength { value: String },
    #[error("a Transfer-Encoding that does not end in chunked")]
    NotChunked,
    #[error("invalid chunk size line {line:?}")]
    BadChunkSize { line: String },
    #[error("chunk data not followed by CRLF")]
    ChunkNotEnded,
    #[error("obsolete line folding")]
    Folding,
    #[error("obsolete line folding in a trailer")]
    TrailerFolding,
    #[error("a header line without a colon")]
    NoColon,
    #[error("bare CR")]
    BareCr,
    #[error("bare LF")]
    BareLf,
    #[error("line too long")]
    LineTooLong,
}

/// The framing state machine; pure, so it is tested without sockets.
#[derive(Debug)]
pub struct Framing {
    at: At,
    max_head: usize,
}

impl Framing {
    pub fn new(max_head: usize) -> Self {
        Framing { at: At::Head, max_head }
    }

    /// Whether a CONNECT head ended what is read from the client (nothing more is released).
    pub fn ended(&self) -> bool {
        self.at == At::End
    }

    /// Decides about the front of `pending` (the bytes not yet released).
    pub fn scan(&mut self, pending: &[u8]) -> Scan {
        if pending.is_empty() {
            return Scan::NeedMore;
        }
        match self.at {
            At::Opaque => Scan::Release(pending.len()),
            At::End => Scan::NeedMore,
            At::Body(n) | At::ChunkData(n) => {
                let take = n.min(pending.len() as u64);
                let left = n - take;
                self.at = match (self.at, left) {
                    (At::Body(_), 0) => At::Head,
                    (At::Body(_), l) => At::Body(l),
                    (_, 0) => At::ChunkEnd,
                    (_, l) => At::ChunkData(l),
                };
                Scan::Release(take as usize)
            }
            At::ChunkEnd => {
                if pending.len() < 2 {
                    return if pending[0] == b'\r' { Scan::NeedMore } else { Scan::Bad(Refusal::ChunkNotEnded) };
                }
                if &pending[..2] != b"\r\n" {
                    return Scan::Bad(Refusal::ChunkNotEnded);
                }
                self.at = At::ChunkSize;
                Scan::Release(2)
            }
            At::ChunkSize => match line(pending, 1024) {
                Line::More => Scan::NeedMore,
                Line::Bad(why) => Scan::Bad(why),
                Line::Done(text, len) => match chunk_size(text) {
                    Some(0) => {
                        self.at = At::Trailers;
                        Scan::Release(len)
                    }
                    Some(n) => {
                        self.at = At::ChunkData(n);
                        Scan::Release(len)
                    }
                    None => Scan::Bad(Refusal::BadChunkSize { line: String::from_utf8_lossy(text).into() }),
                },
            },
            At::Trailers => match line(pending, self.max_head) {
                Line::More => Scan::NeedMore,
                Line::Bad(why) => Scan::Bad(why),
                Line::Done(text, len) => {
                    if text.is_empty() {
                        self.at = At::Head;
                    } else if text[0] == b' ' || text[0] == b'\t' {
                        return Scan::Bad(Refusal::TrailerFolding);
                    }
                    Scan::Release(len)
                }
            },
            At::Head => self.head(pending),
        }
    }

    fn head(&mut self, pending: &[u8]) -> Scan {
        // Tolerate the empty lines RFC 9112 lets a server skip before a request line.
        let skip = pending.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
        if let Some(bad) = bare_cr_or_lf(&pending[..skip]) {
            return Scan::Bad(bad);
        }
        let rest = &pending[skip..];
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
            if let Some(bad) = bare_cr_or_lf(rest) {
                return Scan::Bad(bad);
            }
            // Too large: hyper answers 431 for it; nothing after it is read as HTTP.
            if rest.len() > self.max_head {
                self.at = At::Opaque;
                return Scan::Release(pending.len());
            }
            return Scan::NeedMore;
        };
        let head = &rest[..end + 2];
        if let Some(bad) = bare_cr_or_lf(head) {
            return Scan::Bad(bad);
        }
        let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        let request_line = lines.next().unwrap_or_default();
        let connect = request_line.len() >= 8 && request_line[..8].eq_ignore_ascii_case(b"CONNECT ");
        let mut length: Option<u64> = None;
        let mut chunked = None;
        let mut upgrade = false;
        for l in lines.filter(|l| !l.is_empty()) {
            if l[0] == b' ' || l[0] == b'\t' {
                return Scan::Bad(Refusal::Folding);
            }
            let Some(colon) = l.iter().position(|&b| b == b':') else { return Scan::Bad(Refusal::NoColon) };
            let name = &l[..colon];
            let value = trim(&l[colon + 1..]);
            if name.eq_ignore_ascii_case(b"content-length") {
                let Some(n) = std::str::from_utf8(value).ok().filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())).and_then(|v| v.parse().ok()) else {
                    return Scan::Bad(Refusal::BadLength { value: String::from_utf8_lossy(value).into() });
                };
                if length.is_some_and(|m| m != n) {
                    return Scan::Bad(Refusal::LengthsDiffer);
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                let last = value.rsplit(|&b| b == b',').next().map(trim).unwrap_or_default();
                chunked = Some(chunked.unwrap_or(true) && last.eq_ignore_ascii_case(b"chunked"));
            } else if name.eq_ignore_ascii_case(b"upgrade") {
                // An upgrade to HTTP/2 is taken out of the request: the connection stays HTTP/1.1.
                upgrade |= super::headers::asks_upgrade(value);
            }
        }
        match (length, chunked) {
            (Some(_), Some(_)) => return Scan::Bad(Refusal::LengthAndEncoding),
            (_, Some(false)) => return Scan::Bad(Refusal::NotChunked),
            _ => {}
        }
        self.at = if connect {
            At::End
        } else if chunked == Some(true) {
            At::ChunkSize
        } else if upgrade {
            At::Opaque
        } else {
            match length {
                Some(n) if n > 0 => At::Body(n),
                _ => At::Head,
            }
        };
        Scan::Release(skip + end + 4)
    }
}

enum Line<'a> {
    Done(&'a [u8], usize),
    More,
    Bad(Refusal),
}

/// One CRLF-terminated line at the front of `data`, and its length with the CRLF.
fn line(data: &[u8], max: usize) -> Line<'_> {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && data[i - 1] == b'\r' => {
            let text = &data[..i - 1];
            if text.contains(&b'\r') { Line::Bad(Refusal::BareCr) } else { Line::Done(text, i + 1) }
        }
        Some(_) => Line::Bad(Refusal::BareLf),
        None if data.len() > max => Line::Bad(Refusal::LineTooLong),
        None => Line::More,
    }
}

fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|&b| b == b';').next()?;
    let digits = trim(digits);
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(v.len());
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |e| e + 1);
    &v[start..end]
}

/// A CR not followed by LF, or an LF not preceded by CR.
fn bare_cr_or_lf(data: &[u8]) -> Option<Refusal> {
    for (i, &b) in data.iter().enumerate() {
        if b == b'\r' && data.get(i + 1).is_some_and(|&n| n != b'\n') {
            return Some(Refusal::BareCr);
        }
        if b == b'\n' && (i == 0 || data[i - 1] != b'\r') {
            return Some(Refusal::BareLf);
        }
    }
    None
}

/// The verdict shared between the wrapper, the request handler and the connection loop.
#[derive(Debug, Default, Clone)]
pub struct Verdict(Arc<VerdictCell>);

#[derive(Debug, Default)]
struct VerdictCell {
    /// Set with `why`: the guard asks at every read, and a flag costs no lock.
    refused: AtomicBool,
    why: Mutex<Option<(Refusal, bool)>>,
}

impl Verdict {
    /// Whether a request was refused.
    pub fn refused(&self) -> bool {
        self.0.refused.load(Relaxed)
    }
    /// The refusal as the client and the log read it, once there is one.
    pub fn get(&self) -> Option<String> {
        self.text(|_| true)
    }
    /// The refusal, if the guard wrote its 400 (it was in a head, so no handler did).
    pub fn answered_by_guard(&self) -> Option<String> {
        self.text(|by_guard| by_guard)
    }
    /// The refusal's text when `which` takes it (told whether the guard answered it); the lock
    /// only once the flag says there is one.
    fn text(&self, which: impl Fn(bool) -> bool) -> Option<String> {
        if !self.refused() {
            return None;
        }
        self.0.why.lock().ok().and_then(|g| g.as_ref().filter(|(_, by_guard)| which(*by_guard)).map(|(why, _)| why.to_string()))
    }
    fn set(&self, why: Refusal, by_guard: bool) {
        if let Ok(mut g) = self.0.why.lock() {
            g.get_or_insert((why, by_guard));
            self.0.refused.store(true, Relaxed);
        }
    }
}

/// A client connection as HTTP mode reads it: a plain socket, or a TLS session over one.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The scheme its requests came over, for the forwarded headers.
    const SCHEME: &'static str;
    /// Whether hyper may be freed while the client is quiet (`park`): a TLS session keeps its
    /// state in the stream whatever hyper holds, and may hold decrypted bytes its socket no
    /// longer shows as readable, so it is served by one hyper connection to its end.
    const PARKS: bool;
    /// HTTP/3's side of the in-memory HTTP/2 connection (`h3::bridge`): its requests are HTTP/3.
    const H3: bool = false;
    /// Ready when a read may find bytes: the socket's readiness, so that an idle plain client
    /// needs no buffer; always ready for a TLS session.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Writes what it can of `bytes` without waiting, as a connection is dropped.
    fn write_now(&self, bytes: &[u8]);
    /// The address the client connected to.
    fn local_addr(&self) -> Option<std::net::SocketAddr>;
    /// The client chose HTTP/2 by ALPN.
    fn chose_h2(&self) -> bool {
        false
    }
    /// The server name the client sent in its TLS handshake (SNI).
    fn server_name(&self) -> Option<&str> {
        None
    }
}

impl ClientIo for TcpStream {
    const SCHEME: &'static str = "http";
    const PARKS: bool = true;
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }
    fn write_now(&self, bytes: &[u8]) {
        let _ = self.try_write(bytes);
    }
    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        TcpStream::local_addr(self).ok()
    }
}

impl ClientIo for tokio_rustls::server::TlsStream<TcpStream> {
    const SCHEME: &'static str = "https";
    const PARKS: bool = false;
    fn poll_read_ready(&self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    /// A TLS record cannot be written without waiting on the session; the 400 is written on
    /// shutdown, which hyper does on every path but a dropped connection.
    fn write_now(&self, _: &[u8]) {}
    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.get_ref().0.local_addr().ok()
    }
    fn chose_h2(&self) -> bool {
        self.get_ref().1.alpn_protocol() == Some(b"h2")
    }
    fn server_name(&self) -> Option<&str> {
        self.get_ref().1.server_name()
    }
}

/// The client connection as hyper sees it: checked bytes only. When a violation is found, hyper
/// sees the end of the stream, and the 400 is written before the connection is shut down.
pub struct Guarded<S: ClientIo> {
    inner: S,
    framing: Framing,
    pending: BytesMut,
    /// Bytes at the front of `pending` already checked.
    ready: usize,
    verdict: Verdict,
    /// The 400 still to write, once a violation is found.
    reply: Option<bytes::Bytes>,
    /// Told when hyper waits for a next request and when it writes and flushes (`park`).
    activity: Arc<Activity>,
}

impl<S: ClientIo> Guarded<S> {
    pub fn new(inner: S, max_head: usize, activity: Arc<Activity>) -> (Guarded<S>, Verdict) {
        let verdict = Verdict::default();
        let g = Guarded { inner, framing: Framing::new(max_head), pending: BytesMut::new(), ready: 0, verdict: verdict.clone(), reply: None, activity };
        (g, verdict)
    }

    /// The client connection, to wait on while no hyper connection exists.
    pub fn socket(&self) -> &S {
        &self.inner
    }

    /// Whether bytes the client sent are held here already (the next hyper connection must
    /// start without waiting for the socket).
    pub fn buffered(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes read from the client before the guard was made (the opening an `h2c` service reads
    /// to tell HTTP/2 from HTTP/1.1): they are checked as if just read.
    pub fn read_first(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Takes back bytes hyper was given and did not use (its read buffer when it was taken
    /// apart), to give them to the next hyper connection first; they were checked already.
    /// Then frees what an idle connection need not hold.
    pub fn unread(&mut self, bytes: bytes::Bytes) {
        if !bytes.is_empty() {
            let mut front = BytesMut::with_capacity(bytes.len() + self.pending.len());
            front.extend_from_slice(&bytes);
            front.extend_from_slice(&self.pending);
            self.pending = front;
            self.ready += bytes.len();
        } else if self.pending.is_empty() {
            self.pending = BytesMut::new();
        }
    }

    fn fail(&mut self, why: Refusal) {
        tracing::debug!("refusing a request: {why}");
        let in_head = self.framing.at == At::Head;
        self.verdict.set(why.clone(), in_head);
        if !in_head {
            // Inside a body: hyper's handler for this request is running and answers the 400.
            return;
        }
        let body = format!("400 Bad Request: {why}\n");
        self.reply = Some(bytes::Bytes::from(format!("HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())));
    }

    /// Writes the pending 400, if any.
    fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(reply) = self.reply.as_mut() {
            if reply.is_empty() {
                self.reply = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, reply))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            reply.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: ClientIo> AsyncRead for Guarded<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready > 0 {
                let n = this.ready.min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if this.framing.at == At::End || this.verdict.refused() {
                return Poll::Ready(Ok(()));
            }
            match this.framing.scan(&this.pending) {
                Scan::Release(n) => this.ready = n,
                Scan::Bad(why) => this.fail(why),
                Scan::NeedMore => {
                    // Readiness first, then a buffer: an idle client costs none.
                    if this.pending.is_empty() && this.inner.poll_read_ready(cx).is_pending() {
                        this.activity.waiting(this.framing.at == At::Head);
                        return Poll::Pending;
                    }
                    if this.pending.capacity() - this.pending.len() < 4096 {
                        this.pending.reserve(16 * 1024);
                    }
                    let n = match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.pending) {
                        Poll::Ready(r) => r?,
                        Poll::Pending => {
                            this.activity.waiting(this.pending.is_empty() && this.framing.at == At::Head);
                            return Poll::Pending;
                        }
                    };
                    this.activity.waiting(false);
                    if n == 0 {
                        // End of stream: what is left is incomplete; hyper judges it.
                        this.ready = this.pending.len();
                        if this.ready == 0 {
                            return Poll::Ready(Ok(()));
                        }
                        this.framing.at = At::Opaque;
                        continue;
                    }
                }
            }
        }
    }
}

impl<S: ClientIo> AsyncWrite for Guarded<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.activity.wrote();
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes its IO only once its own write buffer is empty.
        self.activity.flushed();
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_reply(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        self.activity.wrote();
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: ClientIo> Drop for Guarded<S> {
    fn drop(&mut self) {
        // hyper may drop the connection without shutting it down: send the 400 if the socket
        // takes it now (it is small, so it does unless the client stopped reading).
        if let Some(reply) = self.reply.take() {
            self.inner.write_now(&reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans a whole stream; returns the released total or the violation.
    fn run(stream: &[u8]) -> Result<usize, Refusal> {
        let mut f = Framing::new(16 * 1024);
        let mut at = 0;
        loop {
            match f.scan(&stream[at..]) {
                Scan::Release(n) => at += n,
                Scan::NeedMore => return Ok(at),
                Scan::Bad(why) => return Err(why),
            }
        }
    }

    #[test]
    fn well_framed_requests_pass_whole() {
        let s = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloPOST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET /z HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(run(s), Ok(s.len()));
    }

    #[test]
    fn a_head_is_held_until_it_is_complete() {
        let mut f = Framing::new(16 * 1024);
        assert_eq!(f.scan(b"GET / HTTP/1.1\r\nHost: a\r\n"), Scan::NeedMore);
        assert_eq!(f.scan(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Scan::Release(27));
    }

    #[test]
    fn every_smuggling_probe_is_refused() {
        let probes: [(&[u8], &str); 9] = [
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nhello", "different values"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", "invalid chunk size"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX0\r\n\r\n", "not followed by CRLF"),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  folded\r\n\r\n", "obsolete line folding"),
            (b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", "bare CR"),
            (b"GET / HTTP/1.1\nHost: a\n\n", "bare LF"),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", "does not end in chunked"),
        ];
        for (probe, why) in probes {
            let got = run(probe).expect_err(&String::from_utf8_lossy(probe)).to_string();
            assert!(got.contains(why), "{got:?} should say {why:?}");
        }
    }

    #[test]
    fn a_second_request_after_a_body_is_checked_too() {
        let s = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n";
        assert!(run(s).unwrap_err().to_string().contains("folding"));
    }

    #[test]
    fn an_upgraded_stream_is_passed_through_unread() {
        let s = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello\r\rbinary";
        assert_eq!(run(s), Ok(s.len()));
    }

    #[test]
    fn an_upgrade_to_h2c_leaves_the_connection_checked() {
        let s = b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n";
        assert_eq!(run(s), Err(Refusal::Folding));
    }

    #[test]
    fn bad_chunk_size_lines_are_refused() {
        for line in ["g", "0x5", "ffffffffffffffffff", "-1", ""] {
            let s = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{line}\r\nhello\r\n0\r\n\r\n");
            let got = run(s.as_bytes()).expect_err(line);
            assert!(matches!(got, Refusal::BadChunkSize { .. }), "{line:?}: {got}");
        }
        let bare_lf = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n";
        assert_eq!(run(bare_lf), Err(Refusal::BareLf));
        let overlong = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n";
        assert_eq!(run(overlong), Err(Refusal::ChunkNotEnded));
    }

    #[test]
    fn nothing_after_a_connect_head_is_released() {
        let head = b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n";
        let mut s = head.to_vec();
        s.extend_from_slice(b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n\x16\x03\x01");
        assert_eq!(run(&s), Ok(head.len()));
    }

    /// Everything the client gets from a `Guarded` fed `request`, once hyper's side has read
    /// to the end and shut down.
    async fn client_receives(request: &[u8]) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(request).await.unwrap();
        let (mut guarded, verdict) = Guarded::new(server, 16 * 1024, Default::default());
        let mut seen = Vec::new();
        guarded.read_to_end(&mut seen).await.unwrap();
        assert!(verdict.get().is_some(), "the request is refused");
        guarded.shutdown().await.unwrap();
        drop(guarded);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_refused_head_gets_the_guards_one_400() {
        let got = client_receives(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nhello").await;
        let text = String::from_utf8_lossy(&got);
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
        assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    }

    #[tokio::test]
    async fn a_refused_body_is_left_to_the_handler_to_answer() {
        // The handler of this request is running and answers the 400 itself.
        let got = client_receives(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\ng\r\nhello\r\n0\r\n\r\n").await;
        assert_eq!(String::from_utf8_lossy(&got), "");
    }

    proptest::proptest! {
        #[test]
        fn no_stream_panics_the_scanner(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = run(&data);
        }
    }
}
