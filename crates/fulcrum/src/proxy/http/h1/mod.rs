//! HTTP/1.1 on Fulcrum's own path, on `httparse` (the parser hyper itself uses): what it takes to
//! read a request or a response from one buffer and decide how its body is framed, without a
//! `HeaderMap` or a second parse.
//!
//! - `head`: a request head and a response head parsed once into offsets (`Span`s) of the buffer
//!   they were read into, so a head can be written onward from that buffer with only the fields
//!   that change rewritten; every RFC 9112 MUST that the framing guard and hyper enforce on the
//!   path through hyper holds here too (bare CR or LF, obsolete folding, Content-Length with
//!   Transfer-Encoding, Content-Lengths that differ or do not parse, a Transfer-Encoding that does
//!   not end in chunked, Transfer-Encoding in HTTP/1.0, the head's size and field count, the request
//!   target's form, Host);
//! - `body`: how a body is framed (Content-Length, chunked, to the close; none for HEAD, 1xx, 204
//!   and 304) and a reader that walks any of them over bytes as they arrive;
//! - `write`: a head written onward from that buffer, fields copied as they came but those that
//!   stop at this hop or are replaced;
//! - `respond`: a response head written for a client from a response's parts, framed as hyper's
//!   server frames it;
//! - `chunked`: the streaming chunked decoder, which checks each size line and bounds chunk
//!   extensions and trailers, telling payload from framing so a forwarder can pass either on.
//!
//! Pure and synchronous: no socket here, so every corner of RFC 9112 is a unit test, and the fuzz
//! target `h1_differential` holds this reading against the guard and hyper byte for byte.

pub(crate) mod body;
pub(crate) mod chunked;
pub(crate) mod head;
pub(crate) mod respond;
pub(crate) mod write;

use super::guard::Refusal as Bad;
use head::Limits;

/// A range of the buffer a head was parsed from (offsets fit `u32`: a head is at most 1 MiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end as u32 }
    }
    /// The bytes of this span in `buf`, the buffer the head was parsed from.
    pub fn of<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start as usize..self.end as usize]
    }
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// Why a message is refused. For a request the text is the answer's body and the log's, and
/// `status` its status; a server's message that is refused is a 502 whatever the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// What the framing guard refuses, in the guard's words.
    #[error("{0}")]
    Framing(Bad),
    #[error("a head larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("more than {0} header fields")]
    TooManyFields(usize),
    #[error("malformed: {0}")]
    Malformed(&'static str),
    #[error("an HTTP version other than 1.0 and 1.1")]
    Version,
    #[error("a request target longer than {0} bytes")]
    TargetTooLong(usize),
    #[error("Transfer-Encoding in an HTTP/1.0 message")]
    EncodingInHttp10,
    #[error("chunk extensions longer than {0} bytes in one body")]
    ExtensionsTooLong(usize),
    #[error("chunk trailers larger than {0} bytes")]
    TrailersTooLarge(usize),
    #[error("more than {0} trailer fields")]
    TooManyTrailers(usize),
    #[error("an invalid trailer field")]
    BadTrailer,
    #[error("{0}")]
    Host(&'static str),
    #[error("the request target * is for OPTIONS only")]
    Asterisk,
    #[error("an authority-form request target is for CONNECT only")]
    AuthorityForm,
    #[error("CONNECT: Fulcrum does not tunnel")]
    Connect,
    #[error("the message ended before its body did")]
    Incomplete,
}

impl Refusal {
    /// The status a client gets for its request refused so.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::HeadTooLarge(_) | Refusal::TooManyFields(_) => 431,
            Refusal::TargetTooLong(_) => 414,
            Refusal::Version => 505,
            Refusal::Connect => 501,
            _ => 400,
        }
    }
}

/// A CR not followed by LF, or an LF not preceded by CR (the guard's rule).
fn bare_cr_or_lf(data: &[u8]) -> Option<Bad> {
    for i in memchr::memchr2_iter(b'\r', b'\n', data) {
        let b = data[i];
        if b == b'\r' && data.get(i + 1).is_some_and(|&n| n != b'\n') {
            return Some(Bad::BareCr);
        }
        if b == b'\n' && (i == 0 || data[i - 1] != b'\r') {
            return Some(Bad::BareLf);
        }
    }
    None
}

/// A Content-Length value: decimal digits only (no sign, no space), within `u64`.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| if b.is_ascii_digit() { n.checked_mul(10)?.checked_add(u64::from(b - b'0')) } else { None })
}

/// Trims spaces and tabs at both ends (OWS).
fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(v.len());
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |e| e + 1);
    &v[start..end]
}

/// The comma-separated tokens of a list value, trimmed, empty ones left out.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim).filter(|t| !t.is_empty())
}
