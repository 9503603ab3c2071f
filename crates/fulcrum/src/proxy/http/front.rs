//! A client's HTTP/1.1 connection on Fulcrum's own path, for the requests most connections carry:
//! an HTTP/1.1 request without a body, whose head is wholly in hand. Its head is parsed once
//! (`h1::head`, behind the framing guard as hyper's is), handled as every request is
//! (`Handler`), and its answer written from the response's parts (`h1::respond`) with as few
//! writes as the body allows: the head and what of the body is ready go in one. No dispatch state
//! and no buffers but the one the request was read into: once the client has been quiet for
//! `park::LINGER`, the connection parks with no buffer at all (and a busy client is never parked
//! and woken between requests).
//!
//! Everything else goes to hyper's server, which serves the connection from there until it parks
//! again: a request with a body, an upgrade, an expectation or a `TE`, HEAD and CONNECT, HTTP/1.0,
//! a head that is not all in or that the own parser refuses, the end of the stream and a framing
//! refusal (hyper and the guard answer those as they always have). The bytes read are given back
//! to the guard first, so hyper reads exactly what the client sent.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::Body;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Version};
use tokio::io::AsyncWriteExt;
use tracing::debug;

use super::body::{ClientBody, ProxyBody};
use super::guard::{ClientIo, Guarded};
use super::h1::body::Framing;
use super::h1::head::{Limits, RequestHead, parse_request};
use super::h1::respond::{self, Encoding, Length};
use super::{Handler, park};

/// What the connection does after the own path let go of it.
pub(super) enum Next {
    /// Nothing more to read now: wait for the client's next bytes with no buffer.
    Park,
    /// A request the own path does not serve is next (its bytes are back in the guard).
    Hyper,
    /// The connection is over.
    Closed,
}

/// How much of the client's checked bytes one read takes: a head larger than this goes to hyper.
const READ: usize = 8 * 1024;

/// Queued answer bytes are written once they reach this much, whether the body has more ready
/// or not: what a client that does not read makes one answer hold, besides the server's own
/// read-ahead, is this plus the frame that passed it (hyper's server holds up to its write
/// buffer, `max_head_size`, 16 KiB by default).
const WRITE_BATCH: usize = 16 * 1024;

/// Serves requests from `io` for as long as each next one is the own path's and in hand.
pub(super) async fn serve<S: ClientIo>(io: &mut Guarded<S>, handler: &std::sync::Arc<Handler>) -> Next {
    let http = &handler.service.config().http;
    let limits = Limits { max_head: http.max_head_size, max_fields: http.max_headers };
    let mut buf = BytesMut::new();
    // How long the connection stays here with its buffers once the client is quiet, so a client
    // sending request after request never pays for parking: one timer for the whole stay,
    // re-armed only when it fires.
    let linger = park::LINGER.min(http.head_timeout / 4);
    // Made when first waited on: a connection of one request never needs it.
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        if buf.is_empty() {
            buf.reserve(READ);
            let read = poll_fn(|cx| match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, &mut buf) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending => Poll::Ready(None),
            })
            .await;
            match read {
                Some(Ok(0)) if handler.verdict.refused() => return Next::Hyper,
                Some(Ok(0)) | Some(Err(_)) => return Next::Closed,
                Some(Ok(_)) => {}
                // Part of a head is held by the guard: hyper waits for the rest, within its timeout.
                None if io.buffered() => return Next::Hyper,
                None => {
                    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(linger)));
                    if quiet(io, timer.as_mut(), linger).await {
                        // An idle connection holds no buffer: the guard's goes too.
                        io.unread(Bytes::new());
                        return Next::Park;
                    }
                    continue;
                }
            }
        }
        let Some((req, keep_alive)) = take(&mut buf, &limits) else {
            io.unread(buf.freeze());
            return Next::Hyper;
        };
        let response = handler.call(req).await;
        match write(io, response, keep_alive).await {
            Ok(true) => {}
            // A shutdown before the close, as hyper's server does: measured, the two together
            // cost the kernel less than a close alone that must send the FIN itself.
            Ok(false) => {
                let _ = io.shutdown().await;
                return Next::Closed;
            }
            Err(e) => {
                debug!(client = %handler.peer, "client connection ended: {e}");
                return Next::Closed;
            }
        }
    }
}

/// Waits for the client's next bytes; true if none came within `linger`.
async fn quiet<S: ClientIo>(io: &Guarded<S>, mut timer: Pin<&mut tokio::time::Sleep>, linger: Duration) -> bool {
    let since = crate::clock::timer_now();
    poll_fn(|cx| {
        if io.socket().poll_read_ready(cx).is_ready() {
            return Poll::Ready(false);
        }
        park::poll_lingered(timer.as_mut(), since, linger, cx).map(|()| true)
    })
    .await
}

/// The request at the front of `buf`, taken off it, if the own path serves it; with whether the
/// client leaves the connection open after it.
fn take(buf: &mut BytesMut, limits: &Limits) -> Option<(Request<ClientBody>, bool)> {
    let head = parse_request(buf, limits).ok()??;
    if !ours(&head, buf) {
        return None;
    }
    let head_bytes = buf.split_to(head.len).freeze();
    let keep_alive = head.keep_alive;
    match request(head, &head_bytes) {
        Some(req) => Some((req, keep_alive)),
        None => {
            // What hyper's reading of the head makes of it is hyper's to say: put it back.
            let mut back = BytesMut::with_capacity(head_bytes.len() + buf.len());
            back.extend_from_slice(&head_bytes);
            back.extend_from_slice(buf);
            *buf = back;
            None
        }
    }
}

/// Whether the own path serves this request: HTTP/1.1 with no body, nothing that needs more of
/// the connection than one answer (an upgrade, `Expect`), no `TE` (trailers are hyper's to
/// send), and a method whose answer is framed as any other (not HEAD or CONNECT).
fn ours(head: &RequestHead, buf: &[u8]) -> bool {
    let method = head.method(buf);
    head.minor == 1
        && head.framing == Framing::Empty
        && !head.upgrade
        && !head.expect_continue
        && method != b"HEAD"
        && method != b"CONNECT"
        && !head.fields.iter().any(|f| {
            let name = f.name.of(buf);
            name.eq_ignore_ascii_case(b"upgrade") || name.eq_ignore_ascii_case(b"expect") || name.eq_ignore_ascii_case(b"te")
        })
}

/// The request as the handler takes it: its target as `parse_request` read it, its values shared
/// with `bytes` (no copy).
fn request(head: RequestHead, bytes: &Bytes) -> Option<Request<ClientBody>> {
    let slice = |s: super::h1::Span| bytes.slice(s.start as usize..s.end as usize);
    let mut req = Request::new(ClientBody::Empty);
    *req.method_mut() = Method::from_bytes(head.method(bytes)).ok()?;
    *req.uri_mut() = head.uri;
    *req.version_mut() = Version::HTTP_11;
    let headers = req.headers_mut();
    headers.reserve(head.fields.len());
    for f in &head.fields {
        let name = HeaderName::from_bytes(f.name.of(bytes)).ok()?;
        let value = HeaderValue::from_maybe_shared(slice(f.value)).ok()?;
        headers.append(name, value);
    }
    Some(req)
}

/// Writes `response` to the client; whether the connection stays open after it.
async fn write<S: ClientIo>(io: &mut Guarded<S>, response: Response<ProxyBody>, keep_alive: bool) -> io::Result<bool> {
    let (mut parts, mut body) = response.into_parts();
    let length = (!body.is_end_stream()).then(|| body.size_hint().exact().map_or(Length::Unknown, Length::Known));
    let mut head = Vec::with_capacity(256);
    let framed = match respond::head(&mut parts, length, keep_alive, &mut head) {
        Ok(framed) => framed,
        Err(why) => {
            debug!("not answering the client: {why}");
            return Ok(false);
        }
    };
    drop(parts);
    let mut out = Out::default();
    out.push(Bytes::from(head));
    let chunked = framed.encoding == Encoding::Chunked;
    let mut left = match framed.encoding {
        Encoding::Length(n) => Some(n),
        Encoding::Chunked => None,
    };
    let mut whole = true;
    let mut ended = length.is_none() || left == Some(0);
    while !ended {
        // What the body has ready joins the queue; what is queued goes out when it waits.
        let polled = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(Some(frame)),
            Poll::Pending if out.len == 0 => Poll::Pending,
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        match polled {
            None => out.write(io).await?,
            Some(None) => {
                // A body shorter than its length leaves the client waiting: end the connection.
                whole = left.is_none_or(|n| n == 0);
                ended = true;
            }
            Some(Some(Err(e))) => {
                debug!("response body failed on its way to the client: {e}");
                return Ok(false);
            }
            Some(Some(Ok(frame))) => {
                // Trailers are not sent: the own path takes no request that asked for them.
                let Ok(mut data) = frame.into_data() else { continue };
                if data.is_empty() {
                    continue;
                }
                match left.as_mut() {
                    Some(n) => {
                        if data.len() as u64 > *n {
                            // More than the length said: what is over is not sent.
                            data.truncate(*n as usize);
                            whole = false;
                        }
                        *n -= data.len() as u64;
                        out.push(data);
                    }
                    None => {
                        out.push(Bytes::from(format!("{:X}\r\n", data.len())));
                        out.push(data);
                        out.push(Bytes::from_static(b"\r\n"));
                    }
                }
                ended = !whole || left == Some(0) || body.is_end_stream();
                if out.len >= WRITE_BATCH {
                    out.write(io).await?;
                }
            }
        }
    }
    // A body that said it ended short of its length leaves the client waiting for the rest: the
    // connection ends with it.
    whole &= left.is_none_or(|n| n == 0);
    if chunked && whole {
        out.push(Bytes::from_static(b"0\r\n\r\n"));
    }
    out.write(io).await?;
    io.flush().await?;
    Ok(whole && !framed.close)
}

/// Answer bytes queued for one vectored write.
#[derive(Default)]
struct Out {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl Out {
    fn push(&mut self, b: Bytes) {
        self.len += b.len();
        self.parts.push_back(b);
    }

    async fn write<S: ClientIo>(&mut self, io: &mut Guarded<S>) -> io::Result<()> {
        while self.len > 0 {
            let n = {
                let mut slices = [IoSlice::new(&[]); 16];
                let mut k = 0;
                for (slot, b) in slices.iter_mut().zip(&self.parts) {
                    *slot = IoSlice::new(b);
                    k += 1;
                }
                io.write_vectored(&slices[..k]).await?
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.len -= n;
            let mut n = n;
            while n > 0 {
                let Some(front) = self.parts.front_mut() else { break };
                if front.len() <= n {
                    n -= front.len();
                    self.parts.pop_front();
                } else {
                    front.advance(n);
                    n = 0;
                }
            }
        }
        Ok(())
    }
}

/// The own writer against hyper's server: the same response, for a client that keeps its
/// connection or closes it, must reach the client as the same bytes (the date aside).
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use bytes::Bytes;
    use hyper::body::Frame;
    use hyper::{HeaderMap, Response};
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::super::body::{ClientFault, ProxyBody};
    use super::super::guard::Guarded;
    use super::super::park::Activity;

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        Empty,
        Text(&'static str),
        /// Two frames and trailers: a body of unknown length.
        Streamed,
    }

    fn body(kind: Kind) -> ProxyBody {
        match kind {
            Kind::Empty => ProxyBody::Empty,
            Kind::Text(t) => ProxyBody::text(t),
            Kind::Streamed => {
                let mut trailers = HeaderMap::new();
                trailers.insert("x-sum", "1".parse().unwrap());
                let ahead = VecDeque::from([Frame::data(Bytes::from_static(b"hello ")), Frame::data(Bytes::from_static(b"world")), Frame::trailers(trailers)]);
                ProxyBody::Request { ahead, rest: None, bytes: Arc::default(), fault: ClientFault::default(), limit: 0, sent: 0 }
            }
        }
    }

    fn response(status: u16, fields: &[(&'static str, &'static str)], kind: Kind) -> Response<ProxyBody> {
        let mut r = Response::new(body(kind));
        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        for (n, v) in fields {
            r.headers_mut().append(*n, v.parse().unwrap());
        }
        r
    }

    /// What a client reads of `make()`'s response from one server or the other, its request
    /// asking to close or not, and its date masked.
    async fn read(own: bool, close: bool, make: impl Fn() -> Response<ProxyBody> + Send + Sync + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let request = if close { "GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n" } else { "GET / HTTP/1.1\r\nhost: a\r\n\r\n" };
        client.write_all(request.as_bytes()).await.unwrap();
        // Half-closed after the request: either server answers it and closes.
        client.shutdown().await.unwrap();
        let make = Arc::new(make);
        let served = tokio::spawn(async move {
            if own {
                let (mut io, _) = Guarded::new(server, 16 * 1024, Arc::new(Activity::default()));
                let mut head = [0u8; 256];
                let n = tokio::io::AsyncReadExt::read(&mut io, &mut head).await.unwrap();
                assert_eq!(n, request.len());
                let _ = super::write(&mut io, make(), !close).await;
            } else {
                let http = crate::config::Http::default();
                let svc = hyper::service::service_fn(move |_| {
                    let r = make();
                    async move { Ok::<_, std::convert::Infallible>(r) }
                });
                let _ = super::super::server_builder(&http, std::time::Duration::from_secs(5)).serve_connection(TokioIo::new(server), svc).await;
            }
        });
        let mut got = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), client.read_to_end(&mut got)).await;
        served.abort();
        let text = String::from_utf8_lossy(&got).into_owned();
        match text.find("date: ") {
            Some(i) if text[i..].starts_with("date: Thu, 01 Jan 1970") => text,
            Some(i) => format!("{}date: D{}", &text[..i], &text[i + 35..]),
            None => text,
        }
    }

    #[tokio::test]
    async fn the_own_writer_answers_as_hyper_does() {
        let fields: &[&[(&str, &str)]] = &[
            &[],
            &[("content-type", "text/plain"), ("x-a", "1"), ("x-a", "2")],
            &[("content-length", "5")],
            &[("content-length", "11")],
            &[("transfer-encoding", "chunked")],
            &[("transfer-encoding", "gzip")],
            &[("connection", "close")],
            &[("connection", "keep-alive")],
            &[("date", "Thu, 01 Jan 1970 00:00:00 GMT")],
            &[("trailer", "x-sum")],
        ];
        let mut compared = 0;
        for status in [200, 204, 304, 404, 502, 599] {
            for f in fields {
                for kind in [Kind::Empty, Kind::Text("hello"), Kind::Text(""), Kind::Streamed] {
                    // A length that is not the body's is the handler's mistake, never made: hyper
                    // asserts on it in debug builds.
                    let length = f.iter().find(|(n, _)| *n == "content-length").map(|(_, v)| *v);
                    let fits = match (length, kind) {
                        (Some(l), Kind::Text(t)) => l == t.len().to_string(),
                        (Some(_), Kind::Streamed) => false,
                        _ => true,
                    };
                    if !fits {
                        continue;
                    }
                    for close in [false, true] {
                        let owned: Vec<(&'static str, &'static str)> = f.to_vec();
                        let make = move || response(status, &owned, kind);
                        let mut theirs = read(false, close, make.clone()).await;
                        if f.contains(&("transfer-encoding", "gzip")) {
                            // hyper's slip: the `, chunked` it owes the Transfer-Encoding line goes
                            // on the next line it joins as well (here the `connection: close` it
                            // adds). The own writer adds it to Transfer-Encoding alone.
                            theirs = theirs.replace("connection: close, chunked\r\n", "connection: close\r\n");
                        }
                        let ours = read(true, close, make).await;
                        assert_eq!(ours, theirs, "status {status}, fields {f:?}, body {kind:?}, close {close}");
                        assert!(ours.starts_with(&format!("HTTP/1.1 {status} ")), "{ours}");
                        compared += 1;
                    }
                }
            }
        }
        assert!(compared > 300, "{compared}");
    }
}
