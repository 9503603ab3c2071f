//! A response head written for an HTTP/1.1 client from the response's parts, with the framing its
//! body gets, as hyper's HTTP/1.1 server writes it: the own path (`front.rs`) and hyper's answer
//! a client alike, so which of the two served a request is not something a client can see.
//!
//! The rules (RFC 9112 section 6, and hyper's choices where the RFC leaves one):
//! - the body's length, when known, is its Content-Length; a body of unknown length is chunked;
//!   an empty body is `content-length: 0`; a 204 or 304 has neither and no body at all;
//! - a response's own Content-Length is kept when the body's length is known or unknown (then
//!   it frames the body), and dropped when the body is empty; its own Transfer-Encoding is kept,
//!   with `chunked` added last when missing; Content-Lengths that differ refuse the response;
//! - `Connection`, `Transfer-Encoding` and `Trailer` values go on one line each;
//! - `connection: close` is added when the client asked to close, and a response that says
//!   close ends the connection;
//! - `date` is added when the response has none (formatted once a second).
//!
//! Only what the own path serves is covered: requests in HTTP/1.1, neither HEAD nor CONNECT.

use std::cell::RefCell;

use hyper::StatusCode;
use hyper::header::{self, HeaderValue};
use hyper::http::response::Parts;

use super::digits;

/// A response body's length as the body knows it (`None`: the body is empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    Known(u64),
    Unknown,
}

/// How the body goes after the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Exactly this many bytes (0: no body is written).
    Length(u64),
    Chunked,
}

/// What writing the head decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed {
    pub encoding: Encoding,
    /// The connection ends after this response.
    pub close: bool,
}

/// Why a response cannot be written (hyper's server closes the connection without an answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unwritable {
    #[error("a response with Content-Lengths that differ")]
    LengthsDiffer,
    #[error("a response with an invalid Content-Length")]
    BadLength,
    #[error("a response with both Content-Length and Transfer-Encoding")]
    LengthAndEncoding,
    #[error("an interim (1xx) response as a final one")]
    Interim,
}

/// Writes `parts` as a response head into `out`, for a body of `body`'s length (`None`: empty).
/// `keep_alive`: whether the client's request left the connection open.
pub fn head(parts: &mut Parts, body: Option<Length>, keep_alive: bool, out: &mut Vec<u8>) -> Result<Framed, Unwritable> {
    let status = parts.status;
    if status.is_informational() {
        return Err(Unwritable::Interim);
    }
    // 204 and 304 have no body, so no framing either (RFC 9110 sections 8.6 and 15.4.5).
    let bodiless = matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    let mut close = !keep_alive;
    if !keep_alive {
        let says_close = parts.headers.get_all(header::CONNECTION).iter().any(closes);
        if !says_close {
            parts.headers.append(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    out.reserve(32 + parts.headers.len() * 32);
    status_line(parts, out);
    let mut encoding = None;
    let mut wrote_date = false;
    for name in parts.headers.keys() {
        let mut values = parts.headers.get_all(name).iter();
        match *name {
            header::CONTENT_LENGTH => {
                if encoding.is_some() {
                    return Err(Unwritable::LengthAndEncoding);
                }
                let Some(first) = values.next() else { continue };
                match body {
                    // The body's length frames it; the field says the same (the server's own).
                    Some(Length::Known(n)) => encoding = Some(Encoding::Length(n)),
                    Some(Length::Unknown) => {
                        let n = digits(first.as_bytes()).ok_or(Unwritable::BadLength)?;
                        if values.any(|v| digits(v.as_bytes()) != Some(n)) {
                            return Err(Unwritable::LengthsDiffer);
                        }
                        encoding = Some(Encoding::Length(n));
                    }
                    // Nothing to send: the implicit length below says 0.
                    None => continue,
                }
                line(out, b"content-length", first.as_bytes());
            }
            header::TRANSFER_ENCODING => {
                if bodiless {
                    continue;
                }
                if matches!(encoding, Some(Encoding::Length(_))) {
                    return Err(Unwritable::LengthAndEncoding);
                }
                encoding = Some(Encoding::Chunked);
                out.extend_from_slice(b"transfer-encoding: ");
                if !joined(out, values).is_some_and(ends_in_chunked) {
                    out.extend_from_slice(b", chunked");
                }
                out.extend_from_slice(b"\r\n");
            }
            header::CONNECTION => {
                out.extend_from_slice(b"connection: ");
                joined(out, values.inspect(|v| close |= closes(v)));
                out.extend_from_slice(b"\r\n");
            }
            header::TRAILER => {
                if bodiless {
                    continue;
                }
                out.extend_from_slice(b"trailer: ");
                joined(out, values);
                out.extend_from_slice(b"\r\n");
            }
            _ => {
                wrote_date |= *name == header::DATE;
                for v in values {
                    line(out, name.as_str().as_bytes(), v.as_bytes());
                }
            }
        }
    }
    let encoding = match (encoding, body) {
        _ if bodiless => Encoding::Length(0),
        (Some(e), _) => e,
        (None, Some(Length::Unknown)) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            Encoding::Chunked
        }
        (None, None | Some(Length::Known(0))) => {
            out.extend_from_slice(b"content-length: 0\r\n");
            Encoding::Length(0)
        }
        (None, Some(Length::Known(n))) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
            Encoding::Length(n)
        }
    };
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Framed { encoding, close })
}

fn status_line(parts: &Parts, out: &mut Vec<u8>) {
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if parts.status == StatusCode::OK && reason.is_none() {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    match reason {
        Some(r) => out.extend_from_slice(r.as_bytes()),
        // A reason must be written: many parsers expect one.
        None => out.extend_from_slice(parts.status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Writes a field's values on one line, comma-separated; the last of them.
fn joined<'a>(out: &mut Vec<u8>, values: impl Iterator<Item = &'a HeaderValue>) -> Option<&'a HeaderValue> {
    let mut last = None;
    for v in values {
        if last.is_some() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v.as_bytes());
        last = Some(v);
    }
    last
}

fn closes(v: &HeaderValue) -> bool {
    super::tokens(v.as_bytes()).any(|t| t.eq_ignore_ascii_case(b"close"))
}

fn ends_in_chunked(v: &HeaderValue) -> bool {
    super::tokens(v.as_bytes()).last().is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"))
}

/// Today's `Date` value (RFC 9110 section 6.6.1), formatted once a second per thread.
fn date(out: &mut Vec<u8>) {
    thread_local! {
        static CACHED: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
    }
    let now = crate::clock::since_epoch();
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != now.as_secs() {
            let text = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(now.as_secs()));
            if let Ok(bytes) = <[u8; 29]>::try_from(text.as_bytes()) {
                *c = (now.as_secs(), bytes);
            }
        }
        out.extend_from_slice(&c.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Response;

    fn write(status: u16, fields: &[(&str, &str)], body: Option<Length>, keep_alive: bool) -> (String, Result<Framed, Unwritable>) {
        let mut r = Response::builder().status(status);
        for (n, v) in fields {
            r = r.header(*n, *v);
        }
        let (mut parts, ()) = r.body(()).unwrap().into_parts();
        let mut out = Vec::new();
        let framed = head(&mut parts, body, keep_alive, &mut out);
        // The date changes: shown as a mark.
        let text = String::from_utf8(out).unwrap();
        let text = match text.find("date: ") {
            Some(i) if !fields.iter().any(|(n, _)| *n == "date") => format!("{}date: D{}", &text[..i], &text[i + 35..]),
            _ => text,
        };
        (text, framed)
    }

    #[test]
    fn a_known_length_is_the_content_length_and_a_date_is_added() {
        let (text, framed) = write(200, &[("content-type", "text/plain")], Some(Length::Known(5)), true);
        assert_eq!(text, "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\ndate: D\r\n\r\n");
        assert_eq!(framed, Ok(Framed { encoding: Encoding::Length(5), close: false }));
    }

    #[test]
    fn the_servers_own_length_and_date_are_kept() {
        let (text, framed) = write(404, &[("content-length", "3"), ("date", "Thu, 01 Jan 1970 00:00:00 GMT")], Some(Length::Known(3)), true);
        assert_eq!(text, "HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\ndate: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\n");
        assert_eq!(framed.unwrap().encoding, Encoding::Length(3));
    }

    #[test]
    fn an_unknown_length_is_chunked_and_an_empty_body_is_length_zero() {
        let (text, framed) = write(200, &[], Some(Length::Unknown), true);
        assert_eq!(text, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: D\r\n\r\n");
        assert_eq!(framed.unwrap().encoding, Encoding::Chunked);
        // An empty body's stale length is dropped; 0 is said instead.
        let (text, framed) = write(200, &[("content-length", "7")], None, true);
        assert_eq!(text, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\ndate: D\r\n\r\n");
        assert_eq!(framed.unwrap().encoding, Encoding::Length(0));
    }

    #[test]
    fn a_servers_transfer_coding_keeps_chunked_last() {
        let (text, framed) = write(200, &[("transfer-encoding", "gzip")], Some(Length::Unknown), true);
        assert_eq!(text, "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ndate: D\r\n\r\n");
        assert_eq!(framed.unwrap().encoding, Encoding::Chunked);
        let (text, _) = write(200, &[("transfer-encoding", "chunked")], Some(Length::Unknown), true);
        assert_eq!(text, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: D\r\n\r\n");
    }

    #[test]
    fn no_content_and_not_modified_have_no_framing() {
        for status in [204, 304] {
            let (text, framed) = write(status, &[("transfer-encoding", "chunked")], Some(Length::Unknown), true);
            assert!(!text.contains("transfer-encoding") && !text.contains("content-length"), "{text}");
            assert_eq!(framed.unwrap().encoding, Encoding::Length(0));
        }
    }

    #[test]
    fn close_is_said_when_the_client_asked_and_heeded_when_the_server_says_it() {
        let (text, framed) = write(200, &[], None, false);
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(framed.unwrap().close);
        let (text, framed) = write(200, &[("connection", "keep-alive"), ("connection", "Close")], None, true);
        assert!(text.contains("connection: keep-alive, Close\r\n"), "{text}");
        assert!(framed.unwrap().close);
    }

    #[test]
    fn lengths_that_differ_and_interim_statuses_are_not_written() {
        let (_, framed) = write(200, &[("content-length", "3"), ("content-length", "4")], Some(Length::Unknown), true);
        assert_eq!(framed, Err(Unwritable::LengthsDiffer));
        let (_, framed) = write(103, &[], None, true);
        assert_eq!(framed, Err(Unwritable::Interim));
        let (text, _) = write(599, &[], None, true);
        assert!(text.starts_with("HTTP/1.1 599 <none>\r\n"), "{text}");
    }
}
