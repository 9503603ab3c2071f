//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>) on a service with
//! `[service.http.tracing]`: each request's `traceparent` is read, a span id of Fulcrum's own
//! is made, and the server gets a `traceparent` naming that span as its parent, so the
//! server's spans join the client's trace under Fulcrum's.
//!
//! A `traceparent` that is missing or unusable (not one header, not lowercase hex, a wrong
//! length, version `ff`, an all-zero trace or parent id) starts a new trace, and its
//! `tracestate` is dropped with it (its entries speak of the trace that was not taken). A later
//! version is read as version 00 is, as the specification asks. `tracestate` is otherwise
//! passed on as it came.
//!
//! Sampling is parent-based: a request whose `traceparent` says sampled is traced, one whose
//! `traceparent` says not sampled is not, and one that starts a trace is traced at the
//! service's `sample` ratio (`live::tracer::Tracer::samples`). A request that is not traced
//! costs the parse, two random numbers at most, and the header written; no span is kept.
//! Without `[service.http.tracing]` nothing here runs and the headers pass untouched, as
//! Envoy and NGINX's OpenTelemetry module do.

use std::net::IpAddr;
use std::sync::Arc;

use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use crate::live::tracer::{MAX_TRACE_STATE, Span, Tracer};

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// An incoming `traceparent`, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

/// A traced request's span, open until its record is dropped (`access::Record`).
pub struct Traced {
    pub tracer: Arc<Tracer>,
    pub span: Span,
}

/// The longest method and path a span keeps, in bytes: with `MAX_TRACE_STATE`, what bounds a
/// queued span (about 1.5 KiB at most, some 300 bytes for a usual request).
const MAX_METHOD: usize = 32;
const MAX_PATH: usize = 512;

/// Reads the request's trace context, decides whether it is traced, and puts the `traceparent`
/// for the server in its headers. `Some` when the request is traced: its span, opened now.
pub fn begin<B>(tracer: &Arc<Tracer>, req: &mut hyper::Request<B>, client: IpAddr) -> Option<Box<Traced>> {
    let headers = req.headers_mut();
    let parent = read(headers);
    let trace_id = match &parent {
        Some(p) => p.trace_id,
        None => {
            // Its entries belong to the trace that was not taken.
            headers.remove(TRACESTATE);
            new_id()
        }
    };
    let sampled = match &parent {
        Some(p) => p.sampled,
        None => tracer.samples(&trace_id),
    };
    let span_id = new_id();
    headers.insert(TRACEPARENT, write(&trace_id, &span_id, sampled));
    if !sampled {
        return None;
    }
    let mut states = req.headers().get_all(TRACESTATE).iter();
    let trace_state = match (states.next(), states.next()) {
        (Some(one), None) if one.len() <= MAX_TRACE_STATE => one.to_str().ok().map(String::from),
        _ => None,
    };
    let span = Span {
        trace_id,
        span_id,
        parent_span_id: parent.map(|p| p.span_id),
        trace_state,
        start: crate::clock::wall(),
        end: std::time::SystemTime::UNIX_EPOCH,
        method: clip(req.method().as_str(), MAX_METHOD),
        path: clip(req.uri().path(), MAX_PATH),
        version: match req.version() {
            hyper::Version::HTTP_10 => "1.0",
            hyper::Version::HTTP_2 => "2",
            hyper::Version::HTTP_3 => "3",
            _ => "1.1",
        },
        client,
        status: 0,
        server: None,
        pool: String::new(),
        why: None,
        queue: Default::default(),
        connect: Default::default(),
        response: Default::default(),
    };
    Some(Box::new(Traced { tracer: tracer.clone(), span }))
}

/// `text`, cut to at most `max` bytes on a character boundary.
fn clip(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The request's one usable `traceparent`, if it has one.
pub fn read(headers: &HeaderMap) -> Option<Parent> {
    let mut all = headers.get_all(TRACEPARENT).iter();
    let (Some(value), None) = (all.next(), all.next()) else { return None };
    parse(value.as_bytes())
}

/// `version-traceid-parentid-flags`, lowercase hex. Version 00 is exactly 55 bytes; a later
/// version may go on after a `-` (W3C Trace Context, "Versioning of traceparent").
fn parse(v: &[u8]) -> Option<Parent> {
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex::<1>(&v[..2])?[0];
    match version {
        0xff => return None,
        0 if v.len() != 55 => return None,
        _ if v.len() > 55 && v[55] != b'-' => return None,
        _ => {}
    }
    let trace_id = hex::<16>(&v[3..35])?;
    let span_id = hex::<8>(&v[36..52])?;
    let flags = hex::<1>(&v[53..55])?[0];
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent { trace_id, span_id, sampled: flags & 1 == 1 })
}

/// `N` bytes from `2N` lowercase hex digits.
fn hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The version 00 `traceparent` of a span.
fn write(trace_id: &[u8; 16], span_id: &[u8; 8], sampled: bool) -> HeaderValue {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    let mut at = 3;
    for (bytes, dash) in [(&trace_id[..], b'-'), (&span_id[..], b'-')] {
        for b in bytes {
            out[at] = DIGITS[usize::from(b >> 4)];
            out[at + 1] = DIGITS[usize::from(b & 15)];
            at += 2;
        }
        out[at] = dash;
        at += 1;
    }
    out[53..].copy_from_slice(if sampled { b"01" } else { b"00" });
    // Hex digits and dashes only: always a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static("00-00000000000000000000000000000000-0000000000000000-00"))
}

/// A random id that is not all zeros (which Trace Context reserves for "invalid").
fn new_id<const N: usize>() -> [u8; N] {
    loop {
        let id: [u8; N] = rand::random();
        if id != [0; N] {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_gives_its_trace_parent_and_sampled_flag() {
        let p = parse(VALID.as_bytes()).unwrap();
        assert_eq!(p.trace_id[..2], [0x4b, 0xf9]);
        assert_eq!(p.span_id[7], 0xb7);
        assert!(p.sampled);
        assert!(!parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap().sampled);
        // A later version is read as 00, with what follows a dash left alone.
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later").is_some());
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_some());
    }

    #[test]
    fn a_malformed_traceparent_is_refused_without_panic() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "é0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn two_traceparent_headers_are_no_usable_context() {
        let mut h = HeaderMap::new();
        h.append(TRACEPARENT, HeaderValue::from_static(VALID));
        assert!(read(&h).is_some());
        h.append(TRACEPARENT, HeaderValue::from_static(VALID));
        assert_eq!(read(&h), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic_and_a_parsed_context_writes_back_the_same(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)) {
            if let Some(p) = parse(&bytes) {
                proptest::prop_assert_eq!(parse(write(&p.trace_id, &p.span_id, p.sampled).as_bytes()), Some(p));
            }
        }

        #[test]
        fn a_valid_context_parses_whatever_its_ids(trace in proptest::prelude::any::<[u8; 16]>(), span in proptest::prelude::any::<[u8; 8]>(), sampled: bool) {
            let parsed = parse(write(&trace, &span, sampled).as_bytes());
            let valid = trace != [0; 16] && span != [0; 8];
            proptest::prop_assert_eq!(parsed, valid.then_some(Parent { trace_id: trace, span_id: span, sampled }));
        }
    }

    #[test]
    fn a_clipped_text_ends_on_a_character() {
        assert_eq!(clip("/é", 2), "/");
        assert_eq!(clip("/é", 3), "/é");
        assert_eq!(clip("GET", 32), "GET");
    }

    #[test]
    fn a_written_traceparent_reads_back() {
        let (trace, span) = (new_id::<16>(), new_id::<8>());
        let v = write(&trace, &span, true);
        assert_eq!(parse(v.as_bytes()), Some(Parent { trace_id: trace, span_id: span, sampled: true }));
        assert!(v.to_str().unwrap().ends_with("-01") && v.len() == 55);
        assert!(!parse(write(&trace, &span, false).as_bytes()).unwrap().sampled);
    }
}
