//! A server's HTTP/1.1 connection on Fulcrum's own path, in plain text: the request's head is
//! written from its parts in one write, its body streamed after it, and the response read on the
//! task of the request that sent it, with `h1`'s parser and body reader. No driver task and no
//! channel per request, as hyper's client has; the response body reads the socket as the client
//! takes it, and gives the connection back to its server's idle list when it ends cleanly.
//!
//! A request body goes on streaming while the response comes (a server may answer before it has
//! read the body, or echo it as it reads), driven by whichever of the two is being waited for.
//! A connection is given back only when both ended cleanly and the server left no byte unread.
//!
//! HTTPS servers, HTTP/2 servers and upgrades (WebSocket) go through hyper (`upstream.rs`).

use std::borrow::BorrowMut;
use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Version};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::body::{BodyError, ProxyBody};
use super::h1::Refusal;
use super::h1::body::{BodyReader, Framing, Step};
use super::h1::head::{Limits, parse_response};
use super::idle::{IdleConns, Lent, Reusable, Target};
use super::upstream::SERVER_READ_BUFFER;

/// A server's response head may be at most this large and have this many fields (what hyper's
/// client allowed on this path: its read buffer, and its default field count).
const LIMITS: Limits = Limits { max_head: SERVER_READ_BUFFER, max_fields: 100 };

/// An open connection to a server.
pub struct Conn {
    io: TcpStream,
    /// Read and not yet taken: always empty between requests.
    read: BytesMut,
}

impl Conn {
    pub fn new(io: TcpStream) -> Conn {
        Conn { io, read: BytesMut::new() }
    }

    /// Whether the server closed this idle connection, or sent on it unasked (either way it
    /// cannot carry a request). Asked of the reactor first, which knows without a syscall that
    /// nothing came since the last read emptied the socket; only when something did, one
    /// `recv(MSG_PEEK)` that does not wait says what (and clears the readiness it finds empty).
    pub fn gone(&self) -> bool {
        match self.io.poll_read_ready(&mut Context::from_waker(std::task::Waker::noop())) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(())) => {
                let mut byte = [MaybeUninit::<u8>::uninit(); 1];
                match self.io.try_io(tokio::io::Interest::READABLE, || socket2::SockRef::from(&self.io).peek(&mut byte)) {
                    Err(e) => e.kind() != io::ErrorKind::WouldBlock,
                    Ok(_) => true,
                }
            }
        }
    }

    /// Reads what the server sent next into `read`, [`SERVER_READ_BUFFER`] at a time: room for
    /// a whole read is made each time (what is left of a buffer whose front went out as a body's
    /// bytes may be a few hundred bytes, and a read that small costs a syscall for little).
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.read.reserve(SERVER_READ_BUFFER);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut bytes::BufMut::limit(&mut self.read, SERVER_READ_BUFFER))
    }
}

impl Reusable for Conn {
    /// Only a connection that ended its last exchange cleanly is put back, so it is open as far
    /// as Fulcrum knows; whether the server closed it since is asked as it is taken (`gone`).
    fn is_closed(&self) -> bool {
        false
    }
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    /// The server's side: the connection broke, or what it sent is not HTTP/1.1 this path reads.
    #[error("{0}")]
    Server(String),
    /// The server closed the connection before a byte of the response: on a reused
    /// connection, the keep-alive race a replay is for.
    #[error("connection closed before message completed")]
    Closed,
    /// The client's request body failed as it went out.
    #[error("{0}")]
    Client(BodyError),
}

impl Failed {
    fn io(e: io::Error) -> Failed {
        Failed::Server(format!("connection error: {e}"))
    }
}

/// A request body on its way to the server: framed as its head said, written as it comes.
struct Upload {
    body: ProxyBody,
    chunked: bool,
    /// Framing and payload to write before more of the body is asked for.
    out: VecDeque<Bytes>,
    /// The body ended; its end is in `out`.
    ended: bool,
}

/// How a request body's writing went.
enum Uploaded {
    Done,
    /// The server's side failed (it may have answered and closed): the response is still read.
    Broken,
}

impl Upload {
    fn poll(&mut self, io: &mut TcpStream, cx: &mut Context<'_>) -> Poll<Result<Uploaded, BodyError>> {
        loop {
            while !self.out.is_empty() {
                let mut slices = [io::IoSlice::new(&[]); 4];
                let n = self.out.iter().zip(slices.iter_mut()).map(|(b, s)| *s = io::IoSlice::new(b)).count();
                match ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices[..n])) {
                    Ok(0) | Err(_) => return Poll::Ready(Ok(Uploaded::Broken)),
                    Ok(mut written) => {
                        while written > 0 {
                            let front = self.out.front_mut().expect("written bytes were queued");
                            let take = written.min(front.len());
                            front.advance(take);
                            written -= take;
                            if front.is_empty() {
                                self.out.pop_front();
                            }
                        }
                    }
                }
            }
            if self.ended {
                return Poll::Ready(Ok(Uploaded::Done));
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => {
                    self.ended = true;
                    if self.chunked {
                        // Trailers are not forwarded: the Trailer field that would name them stops at this hop.
                        self.out.push_back(Bytes::from_static(b"0\r\n\r\n"));
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(e)),
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    if data.is_empty() {
                        continue;
                    }
                    if self.chunked {
                        self.out.push_back(Bytes::from(format!("{:x}\r\n", data.len())));
                        self.out.push_back(data);
                        self.out.push_back(Bytes::from_static(b"\r\n"));
                    } else {
                        self.out.push_back(data);
                    }
                }
            }
        }
    }
}

/// Moves the request body in `slot` on, while the response is waited for or read: `Ok(false)`
/// once its writing broke (the connection then carries no other exchange). The slot is emptied
/// when the body has gone, whole or not.
fn drive<U: BorrowMut<Upload>>(slot: &mut Option<U>, io: &mut TcpStream, cx: &mut Context<'_>) -> Result<bool, BodyError> {
    let Some(up) = slot.as_mut() else { return Ok(true) };
    match up.borrow_mut().poll(io, cx) {
        Poll::Pending => Ok(true),
        Poll::Ready(went) => {
            *slot = None;
            went.map(|u| matches!(u, Uploaded::Done))
        }
    }
}

/// The request's head as the server gets it, and whether its body goes chunked: a
/// Content-Length the client sent stays (its body is that long), a body wholly in hand gets
/// one, any other body goes chunked (Transfer-Encoding was taken out with the hop-by-hop fields).
fn head(parts: &hyper::http::request::Parts, body: &ProxyBody) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut chunked = false;
    if !parts.headers.contains_key(header::CONTENT_LENGTH) && !body.is_end_stream() {
        match body.size_hint().exact() {
            Some(n) => out.extend_from_slice(format!("content-length: {n}\r\n").as_bytes()),
            None => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                chunked = true;
            }
        }
    }
    out.extend_from_slice(b"\r\n");
    (out, chunked)
}

/// Sends `req` on `conn` and reads the response's head; its body reads on from the connection,
/// which it gives back to `home` when it ends cleanly. On failure the request comes back when
/// not a byte of it was written, so it can be sent elsewhere unchanged.
pub async fn send(mut conn: Conn, req: Request<ProxyBody>, home: Option<(Target, Arc<IdleConns<Conn>>)>) -> Result<Response<ResponseBody>, (Failed, Option<Request<ProxyBody>>)> {
    let (parts, body) = req.into_parts();
    let to_head = parts.method == Method::HEAD;
    let (bytes, chunked) = head(&parts, &body);
    // The head in one write; a failure before any of it went leaves the request unsent.
    let mut written = 0;
    while written < bytes.len() {
        match conn.io.write(&bytes[written..]).await {
            Ok(0) | Err(_) if written == 0 => return Err((Failed::Closed, Some(Request::from_parts(parts, body)))),
            Ok(0) => return Err((Failed::Closed, None)),
            Ok(n) => written += n,
            Err(e) => return Err((Failed::io(e), None)),
        }
    }
    drop(bytes);
    let mut upload = Some(Upload { body, chunked, out: VecDeque::new(), ended: false });
    let mut reusable = true;
    let head = std::future::poll_fn(|cx| {
        match drive(&mut upload, &mut conn.io, cx) {
            Ok(fit) => reusable &= fit,
            Err(e) => return Poll::Ready(Err(Failed::Client(e))),
        }
        loop {
            match parse_response(&conn.read, &LIMITS, to_head) {
                Err(refused) => return Poll::Ready(Err(Failed::Server(format!("a response Fulcrum does not forward: {refused}")))),
                // An interim response (100 Continue, 103 Early Hints) is not forwarded: the
                // client's own 100 Continue is its connection's to send.
                Ok(Some(head)) if (100..200).contains(&head.status) && head.status != 101 => conn.read.advance(head.len),
                Ok(Some(head)) => return Poll::Ready(Ok(head)),
                Ok(None) => match ready!(conn.poll_fill(cx)) {
                    Ok(0) if conn.read.is_empty() => return Poll::Ready(Err(Failed::Closed)),
                    Ok(0) => return Poll::Ready(Err(Failed::Server(Refusal::Incomplete.to_string()))),
                    Ok(_) => {}
                    Err(e) => return Poll::Ready(Err(Failed::io(e))),
                },
            }
        }
    })
    .await;
    let head = head.map_err(|f| (f, None))?;
    let mut response = Response::new(());
    *response.status_mut() = hyper::StatusCode::from_u16(head.status).map_err(|_| (Failed::Server(format!("a status {} out of range", head.status)), None))?;
    *response.version_mut() = if head.minor == 0 { Version::HTTP_10 } else { Version::HTTP_11 };
    let fields = response.headers_mut();
    fields.reserve(head.fields.len());
    for f in &head.fields {
        let name = HeaderName::from_bytes(f.name.of(&conn.read));
        let value = HeaderValue::from_bytes(f.value.of(&conn.read));
        let (Ok(name), Ok(value)) = (name, value) else { return Err((Failed::Server("a response field Fulcrum cannot forward".into()), None)) };
        fields.append(name, value);
    }
    conn.read.advance(head.len);
    let keep_alive = reusable && head.keep_alive && head.status != 101;
    let left = match head.framing {
        Framing::Length(n) => Some(n),
        Framing::Empty => Some(0),
        _ => None,
    };
    let body = ResponseBody { conn: Some(conn), reader: BodyReader::new(head.framing, &LIMITS), upload: upload.map(Box::new), keep_alive, left, home };
    Ok(response.map(|()| body))
}

/// A response body being read from its connection.
pub struct ResponseBody {
    /// `None` once the body ended (the connection given back or closed).
    conn: Option<Conn>,
    reader: BodyReader,
    /// The request body, while it is still going out (boxed: a request body may be a response's,
    /// and most requests' bodies have gone out before their response's head came).
    upload: Option<Box<Upload>>,
    /// Whether the connection may carry another exchange once this body ends.
    keep_alive: bool,
    /// Payload bytes still to come, when the head said how many.
    left: Option<u64>,
    home: Option<(Target, Arc<IdleConns<Conn>>)>,
}

impl ResponseBody {
    /// The body ended: the connection goes back to its server's idle list if the exchange
    /// ended cleanly on both sides and nothing more was sent, else it is closed.
    fn end(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if self.keep_alive
            && self.upload.is_none()
            && conn.read.is_empty()
            && let Some((to, home)) = self.home.take()
        {
            let mut conn = conn;
            // An idle connection holds no buffer.
            conn.read = BytesMut::new();
            Lent::new(conn, to, home).release();
        }
    }

    fn broken(&mut self, why: String) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.conn = None;
        Poll::Ready(Some(Err(BodyError::Server(why))))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(conn) = this.conn.as_mut() else { return Poll::Ready(None) };
        match drive(&mut this.upload, &mut conn.io, cx) {
            Ok(fit) => this.keep_alive &= fit,
            Err(e) => {
                this.conn = None;
                return Poll::Ready(Some(Err(e)));
            }
        }
        loop {
            match this.reader.step(&conn.read) {
                Err(refused) => return this.broken(format!("a response body Fulcrum does not forward: {refused}")),
                Ok(Step::Data(n)) => {
                    if let Some(left) = this.left.as_mut() {
                        *left -= n as u64;
                    }
                    return Poll::Ready(Some(Ok(Frame::data(conn.read.split_to(n).freeze()))));
                }
                Ok(Step::Framing(n)) => conn.read.advance(n),
                Ok(Step::Done(n)) => {
                    conn.read.advance(n);
                    if this.upload.is_none() {
                        this.end();
                    } else {
                        // The server answered before the request body was all sent: the
                        // connection is not reused, and the rest is not sent.
                        this.conn = None;
                    }
                    return Poll::Ready(None);
                }
                Ok(Step::NeedMore) => match ready!(conn.poll_fill(cx)) {
                    Ok(0) => {
                        return match this.reader.end_of_stream() {
                            Ok(()) => {
                                this.conn = None;
                                Poll::Ready(None)
                            }
                            Err(refused) => this.broken(refused.to_string()),
                        };
                    }
                    Ok(_) => {}
                    Err(e) => return this.broken(format!("connection error: {e}")),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() || self.left == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::new(),
        }
    }
}

impl Drop for ResponseBody {
    /// A body with nothing to read (HEAD, 204, 304, a length of 0) may never be polled: its
    /// connection is as good as after any other.
    fn drop(&mut self) {
        let Some(conn) = self.conn.as_mut().filter(|_| self.left == Some(0)) else { return };
        // What a request body still had to send is sent before the connection is reused: at
        // once, or the connection is closed with the body.
        let sent = drive(&mut self.upload, &mut conn.io, &mut Context::from_waker(std::task::Waker::noop()));
        if matches!(sent, Ok(true)) && self.upload.is_none() && self.reader.step(&[]).is_ok_and(|s| s == Step::Done(0)) {
            self.end();
        }
    }
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").field("left", &self.left).field("keep_alive", &self.keep_alive).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::HeaderMap;

    fn parts(method: Method, headers: &[(&str, &str)]) -> hyper::http::request::Parts {
        let mut req = Request::builder().method(method).uri("/a?b=c");
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_head_is_written_once_with_the_framing_its_body_needs() {
        let (get, chunked) = head(&parts(Method::GET, &[("host", "a.test")]), &ProxyBody::Empty);
        assert_eq!(get, b"GET /a?b=c HTTP/1.1\r\nhost: a.test\r\n\r\n");
        assert!(!chunked);
        let (post, chunked) = head(&parts(Method::POST, &[("host", "a.test")]), &ProxyBody::text("hello"));
        assert_eq!(post, b"POST /a?b=c HTTP/1.1\r\nhost: a.test\r\ncontent-length: 5\r\n\r\n");
        assert!(!chunked);
        // The client's own length stays and is not written twice.
        let (put, _) = head(&parts(Method::PUT, &[("content-length", "5")]), &ProxyBody::text("hello"));
        assert_eq!(put, b"PUT /a?b=c HTTP/1.1\r\ncontent-length: 5\r\n\r\n");
    }

    #[test]
    fn a_body_of_unknown_length_goes_chunked() {
        let body = ProxyBody::Request {
            ahead: VecDeque::from([Frame::data(Bytes::from_static(b"x"))]),
            rest: None,
            bytes: Default::default(),
            fault: Default::default(),
            limit: 0,
            sent: 0,
        };
        // With trailers in hand, the length is not known from the frames alone.
        let mut with_trailers = body;
        if let ProxyBody::Request { ahead, .. } = &mut with_trailers {
            ahead.push_back(Frame::trailers(HeaderMap::new()));
        }
        let (bytes, chunked) = head(&parts(Method::POST, &[]), &with_trailers);
        assert!(chunked);
        assert!(bytes.ends_with(b"transfer-encoding: chunked\r\n\r\n"));
    }
}
