//! The fuzz target `h1_response_differential`: the same server bytes read, over real loopback
//! connections, by Fulcrum's own HTTP/1.1 client path (`proxy::http::origin`, as a request to a
//! plain-text server is sent) and by hyper's HTTP/1.1 client built as Fulcrum builds it for the
//! servers it still reaches through hyper. Both must give the client the same status and body
//! bytes, each body complete or cut short alike, or both refuse the response (a 502).
//!
//! The first byte says the request (its lowest bit: HEAD, else GET); the rest is what the server
//! sends, after which it closes. Where the own path is deliberately stricter, because it checks
//! what it forwards as the framing guard checks a client's bytes, it is named here and nowhere
//! else taken for agreement: it refuses a response whose head hyper reads leniently (a bare LF
//! or CR, an obsolete line folding, Content-Length beside Transfer-Encoding, a Content-Length hyper
//! leaves unread because Transfer-Encoding is there or the request was HEAD, Content-Lengths that
//! differ on an answer to HEAD, Transfer-Encoding in HTTP/1.0), and a body
//! whose chunks hyper reads leniently ([`STRICTER`]).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::proxy::http::body::ProxyBody;
use crate::proxy::http::origin;
use crate::proxy::http::upstream::SERVER_READ_BUFFER;

/// What a client of the proxy would get: the status, the body's bytes, and whether it ended
/// whole; or the refusal (a 502).
type Got = Result<(u16, Vec<u8>, bool), String>;

/// Refusals of the own path where hyper reads on: the deliberate differences.
const STRICTER: &[&str] = &[
    "bare LF",
    "bare CR",
    "obsolete line folding",
    "Content-Length and Transfer-Encoding",
    "invalid Content-Length",
    "Content-Length given twice",
    "Transfer-Encoding in an HTTP/1.0",
    "chunk",
];

pub fn h1_response_differential(data: &[u8]) {
    let Some((ours, theirs)) = both(data) else { return };
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) if a == b => {}
        (Err(_), Err(_)) => {}
        (Err(why), Ok(_)) if STRICTER.iter().any(|s| why.contains(s)) => {}
        _ => panic!("the own path gives {ours:?}, hyper's client {theirs:?}"),
    }
}

/// What the own path and hyper's client make of `data`.
fn both(data: &[u8]) -> Option<(Got, Got)> {
    let (&first, stream) = data.split_first()?;
    // Past hyper's first reads its read strategy, not its parser, decides what a head is.
    if stream.len() > 8 * 1024 {
        return None;
    }
    let method = if first & 1 == 1 { Method::HEAD } else { Method::GET };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    Some(rt.block_on(async {
        let ours = within(own(serve(stream).await, method.clone())).await;
        let theirs = within(through_hyper(serve(stream).await, method)).await;
        (ours, theirs)
    }))
}

async fn within(read: impl Future<Output = Got>) -> Got {
    tokio::time::timeout(Duration::from_secs(10), read).await.unwrap_or_else(|_| Err("no end within 10 s".into()))
}

/// A loopback connection to a server that reads the request, sends `data` and closes.
async fn serve(data: &[u8]) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback listener");
    let client = TcpStream::connect(listener.local_addr().expect("its address")).await.expect("a loopback connection");
    let (mut server, _) = listener.accept().await.expect("the connection");
    let data = data.to_vec();
    tokio::spawn(async move {
        let mut request = [0u8; 1024];
        let _ = server.read(&mut request).await;
        let _ = server.write_all(&data).await;
        let _ = server.shutdown().await;
        // Held open for reading until the client closes: no reset under what it still reads.
        let _ = server.read_to_end(&mut Vec::new()).await;
    });
    client
}

fn request<B>(method: Method, body: B) -> Request<B> {
    let mut req = Request::new(body);
    *req.method_mut() = method;
    req.headers_mut().insert(hyper::header::HOST, hyper::header::HeaderValue::from_static("a.test"));
    req
}

/// Collects a response body as a client of the proxy would get it.
async fn collect<B: hyper::body::Body<Data = Bytes> + Unpin>(status: u16, mut body: B) -> Got {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => bytes.extend_from_slice(f.data_ref().map_or(&[][..], |d| &d[..])),
            Err(_) => return Ok((status, bytes, false)),
        }
    }
    Ok((status, bytes, true))
}

async fn own(stream: TcpStream, method: Method) -> Got {
    match origin::send(origin::Conn::new(stream), request(method, ProxyBody::Empty), None).await {
        Ok(response) => collect(response.status().as_u16(), response.into_body()).await,
        Err((why, _)) => Err(why.to_string()),
    }
}

async fn through_hyper(stream: TcpStream, method: Method) -> Got {
    let mut builder = hyper::client::conn::http1::Builder::new();
    builder.max_buf_size(SERVER_READ_BUFFER);
    let (mut sender, conn) = builder.handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    match sender.send_request(request(method, http_body_util::Empty::<Bytes>::new())).await {
        Ok(response) => collect(response.status().as_u16(), response.into_body()).await,
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn got(data: &[u8]) -> Got {
        let (ours, theirs) = both(data).unwrap();
        h1_response_differential(data);
        assert!(ours.is_err() || ours == theirs, "{ours:?} {theirs:?}");
        ours
    }

    #[test]
    fn both_clients_read_each_framing_alike() {
        assert_eq!(got(b"\0HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"), Ok((200, b"hello".to_vec(), true)));
        assert_eq!(got(b"\0HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello"), Ok((200, b"hello".to_vec(), false)));
        assert_eq!(got(b"\0HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n1\r\n!\r\n0\r\nT: 1\r\n\r\n"), Ok((200, b"hello!".to_vec(), true)));
        assert_eq!(got(b"\0HTTP/1.0 200 OK\r\n\r\nall of it"), Ok((200, b"all of it".to_vec(), true)));
        assert_eq!(got(b"\x01HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), Ok((200, vec![], true)));
        assert_eq!(got(b"\0HTTP/1.1 204 No Content\r\n\r\n"), Ok((204, vec![], true)));
        // Interim responses are passed over.
        assert_eq!(
            got(b"\0HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
            Ok((200, b"ok".to_vec(), true))
        );
    }

    #[test]
    fn the_own_path_refuses_what_it_would_forward_ambiguously() {
        for (data, why) in [
            (&b"\0HTTP/1.1 200 OK\nContent-Length: 2\n\nok"[..], "bare LF"),
            (b"\0HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Content-Length and Transfer-Encoding"),
            (b"\0HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "Content-Length"),
            (b"\0", "closed"),
        ] {
            let refused = got(data).expect_err(why);
            assert!(refused.contains(why), "{refused}");
        }
    }
}
