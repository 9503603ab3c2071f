//! The fuzz target `h1_differential`: the same client bytes read by Fulcrum's own HTTP/1.1 path
//! (`proxy::http::h1`) and by the path through hyper (the framing guard, then hyper's HTTP/1.1
//! server, then the checks Fulcrum's handler makes before routing), which must deliver the same
//! requests to servers: the same method, target, host and body bytes, each body complete or cut
//! short alike, and the same requests refused.
//!
//! Where the guard is stricter than hyper, the path through hyper is the guard's and hyper's
//! together, as Fulcrum runs them. Where the own path is deliberately stricter still, it is
//! named here and nowhere else taken for agreement:
//! - an authority-form target (`GET a:443`) is refused but for CONNECT (RFC 9112 section 3.2.3),
//!   where hyper takes it;
//! - an absolute-form target whose authority is not a valid Host (`http://a:x/`) is refused,
//!   where the path through hyper sends on what `http` makes of it (`a`);
//! - a chunk-size line longer than 1,024 bytes is refused however it arrives; the guard refuses it
//!   only when it arrives without its line end within those bytes.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::proxy::http::guard::{self, Framing as Guard, Scan};
use crate::proxy::http::h1::Refusal;
use crate::proxy::http::h1::body::{BodyReader, Step};
use crate::proxy::http::h1::head::{self, Limits};

/// One request as a path hands it to a server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Delivered {
    method: String,
    target: String,
    host: Option<String>,
    body: Vec<u8>,
    /// The body arrived whole (a refused request's is never read: true).
    complete: bool,
    /// Refused by the handler's checks before routing (Host, target form, CONNECT).
    refused: bool,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The defaults of `[service.http]`, as both paths run with them.
fn limits() -> Limits {
    let http = crate::config::Http::default();
    Limits { max_head: http.max_head_size, max_fields: http.max_headers }
}

/// Feeds `data` to both paths and fails where they deliver differently; also feeds it to the own
/// path in pieces, which must change nothing.
pub fn h1_differential(data: &[u8]) {
    // Past hyper's first read (8 KiB) its read strategy, not its parser, decides what a head is.
    if data.len() > 8 * 1024 {
        return;
    }
    let (ours, why) = own_path(data, data.len());
    let piece = usize::from(data.first().copied().unwrap_or(0) % 7) + 1;
    assert_eq!(own_path(data, piece), (ours.clone(), why.clone()), "reading in pieces of {piece} changed what is delivered");
    let theirs = through_hyper(data);
    // A refused request goes nowhere: which host it named does not matter.
    let unnamed = |mut d: Vec<Delivered>| {
        d.iter_mut().filter(|r| r.refused).for_each(|r| r.host = None);
        d
    };
    let (ours, theirs) = (unnamed(ours), unnamed(theirs));
    if ours == theirs {
        return;
    }
    // The deliberate differences: up to the request the own path refuses, both agree.
    let last = ours.len().saturating_sub(1);
    match why {
        Some(Refusal::AuthorityForm | Refusal::Host("an invalid authority in the target"))
            if theirs.get(last).is_some_and(|t| !t.refused && t.method == ours[last].method && t.target == ours[last].target) =>
        {
            assert_eq!(ours[..last], theirs[..last], "before an authority-form target");
        }
        Some(Refusal::Framing(guard::Refusal::LineTooLong)) if theirs.len() == ours.len() => {
            assert_eq!(ours[..last], theirs[..last], "before a long chunk-size line");
        }
        _ => panic!("the own path delivers\n{ours:#?}\n(ending with {why:?}), the path through hyper\n{theirs:#?}"),
    }
}

/// Fulcrum's own path over `data` read `piece` bytes at a time: the requests delivered, and the
/// refusal that ended the connection, if one did.
fn own_path(data: &[u8], piece: usize) -> (Vec<Delivered>, Option<Refusal>) {
    let limits = limits();
    let mut seen = piece.min(data.len());
    let more = |seen: &mut usize| {
        let before = *seen;
        *seen = (*seen + piece).min(data.len());
        *seen > before
    };
    let mut at = 0;
    let mut out = Vec::new();
    loop {
        let head = loop {
            match head::parse_request(&data[at..seen], &limits) {
                Ok(Some(head)) => break head,
                Ok(None) if more(&mut seen) => {}
                Ok(None) => return (out, None),
                Err(why) => return (out, Some(why)),
            }
        };
        let buf = &data[at..];
        let mut d = Delivered {
            method: text(head.method(buf)),
            target: head.forward.map_or_else(|| "/".to_string(), |s| text(s.of(buf))),
            // The same authority as the one hyper's side names: `a:080` is `a:80` there.
            host: head.host(buf).map(|h| match (head.authority, hyper::http::uri::Authority::try_from(h)) {
                (Some(_), Ok(a)) => a.port_u16().map_or_else(|| a.host().to_string(), |p| format!("{}:{p}", a.host())),
                _ => text(h),
            }),
            body: Vec::new(),
            complete: true,
            refused: false,
        };
        if let Err(why) = head.admit(buf) {
            d.refused = true;
            out.push(d);
            return (out, Some(why));
        }
        at += head.len;
        let mut body = BodyReader::new(head.framing, &limits);
        let mut why = None;
        loop {
            match body.step(&data[at..seen]) {
                Ok(Step::Data(n)) => {
                    d.body.extend_from_slice(&data[at..at + n]);
                    at += n;
                }
                Ok(Step::Framing(n)) => at += n,
                Ok(Step::Done(n)) => {
                    at += n;
                    break;
                }
                Ok(Step::NeedMore) if more(&mut seen) => {}
                Ok(Step::NeedMore) => {
                    why = body.end_of_stream().err();
                    break;
                }
                Err(e) => {
                    why = Some(e);
                    break;
                }
            }
        }
        d.complete = why.is_none();
        out.push(d);
        if why.is_some() || !head.keep_alive || head.upgrade {
            return (out, why);
        }
    }
}

/// What the framing guard passes to hyper of `data`, as `Guarded` does: up to a refusal, or
/// everything when the stream ends (hyper judges an incomplete rest), but nothing after CONNECT.
fn guard_passes(data: &[u8]) -> &[u8] {
    let mut guard = Guard::new(limits().max_head);
    let mut at = 0;
    loop {
        match guard.scan(&data[at..]) {
            Scan::Release(n) => at += n,
            Scan::NeedMore if guard.ended() => return &data[..at],
            Scan::NeedMore => return data,
            Scan::Bad(_) => return &data[..at],
        }
    }
}

/// The path through hyper: the guard, hyper's HTTP/1.1 server as Fulcrum builds it, and a
/// handler that makes Fulcrum's checks, reads each body, and ends the connection where
/// Fulcrum's would (a refusal, an upgrade).
fn through_hyper(data: &[u8]) -> Vec<Delivered> {
    let passed = guard_passes(data).to_vec();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("a runtime");
    rt.block_on(async move {
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let log = log.clone();
            async move {
                let d = handle(req).await;
                let close = d.refused || !d.complete;
                log.lock().expect("the log").push(d.clone());
                let mut res = Response::new(http_body_util::Empty::<bytes::Bytes>::new());
                if close || d.upgrade {
                    res.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(res)
            }
        });
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let http = crate::config::Http::default();
        let conn = crate::proxy::http::server_builder(&http, Duration::from_secs(30)).serve_connection(TokioIo::new(server), service);
        let feed = async move {
            let _ = client.write_all(&passed).await;
            let _ = client.shutdown().await;
            let mut answers = Vec::new();
            let _ = client.read_to_end(&mut answers).await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(300), async { tokio::join!(conn, feed) }).await;
    });
    seen.lock().expect("the log").iter().map(|h| h.delivered.clone()).collect()
}

/// A request as the handler saw it, and whether it asked to upgrade.
#[derive(Clone)]
struct Handled {
    delivered: Delivered,
    upgrade: bool,
}

impl std::ops::Deref for Handled {
    type Target = Delivered;
    fn deref(&self) -> &Delivered {
        &self.delivered
    }
}

async fn handle(req: Request<Incoming>) -> Handled {
    use crate::proxy::http::{convert, headers};
    let uri = req.uri();
    // What Fulcrum sends on: origin-form, and an absolute target's authority as the host.
    let (target, host) = if uri.scheme().is_some() {
        let host = uri.authority().map(|a| match a.port() {
            Some(port) => format!("{}:{port}", a.host()),
            None => a.host().to_string(),
        });
        (uri.path_and_query().map_or("/", |p| p.as_str()).to_string(), host)
    } else {
        let target = uri.path_and_query().map(|p| p.as_str().to_string()).or_else(|| uri.authority().map(|a| a.as_str().to_string())).unwrap_or_default();
        (target, req.headers().get(hyper::header::HOST).map(|h| text(h.as_bytes())))
    };
    let refused = req.method() == hyper::Method::CONNECT || headers::host_problem(req.headers(), req.version()).is_some() || convert::target_problem(req.method(), uri).is_some();
    let upgrade = req.headers().get_all(hyper::header::UPGRADE).iter().any(|v| headers::asks_upgrade(v.as_bytes()));
    let mut d = Delivered { method: req.method().to_string(), target, host, body: Vec::new(), complete: true, refused };
    if !refused {
        let mut body = req.into_body();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Some(data) = frame.data_ref() {
                        d.body.extend_from_slice(data);
                    }
                }
                Err(_) => {
                    d.complete = false;
                    break;
                }
            }
        }
    }
    Handled { delivered: d, upgrade }
}
