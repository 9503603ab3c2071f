//! A request head and a response head, parsed once with `httparse` into offsets of the buffer
//! they were read into.
//!
//! Before httparse sees a head, the rules it would let through (or word differently) are checked
//! here as the framing guard checks them: a bare CR or LF anywhere (httparse takes a lone LF as a
//! line end, and a server behind Fulcrum might not), obsolete line folding, a line without a colon.
//! After it, the framing fields: Content-Length and Transfer-Encoding together, Content-Lengths
//! that differ or are not plain digits, a Transfer-Encoding line whose last coding is not chunked,
//! Transfer-Encoding in HTTP/1.0; and the target, validated as hyper validates it (`http::Uri`), so
//! that what hyper would refuse is refused here and what it would take is taken.
//!
//! Routing-level rules a head can pass and the request still not go on (`RequestHead::admit`):
//! CONNECT (Fulcrum does not tunnel), Host missing from HTTP/1.1, given twice or invalid, `*`
//! but for OPTIONS, and an authority-form target but for CONNECT, which hyper takes and Fulcrum
//! refuses (RFC 9112 section 3.2.3: that form is CONNECT's alone).

use std::mem::MaybeUninit;

use super::body::Framing;
use super::{Bad, Refusal, Span, bare_cr_or_lf, digits, tokens, trim};

/// hyper refuses a request target this long (414) whatever is configured.
const MAX_TARGET: usize = u16::MAX as usize - 1;

/// Field slots on the stack; a larger `max_headers` takes them from the heap.
const STACK_FIELDS: usize = 128;

/// The bounds of one head, from the service's `[http]` settings.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `max_head_size`: the request line (or status line) and fields with their line ends; also
    /// the bound of one message's chunk trailers together.
    pub max_head: usize,
    /// `max_headers`: fields in a head, and trailer fields in a chunked body.
    pub max_fields: usize,
}

/// The form of a request target (RFC 9112 section 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `/path?query`
    Origin,
    /// `http://host/path?query`
    Absolute,
    /// `host:port`, CONNECT's
    Authority,
    /// `*`, OPTIONS'
    Asterisk,
}

/// One header field: its name and its value without the whitespace around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: Span,
    pub value: Span,
}

/// A request head as offsets of the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, empty lines before it and the blank line after it included: the body
    /// (or the next request) starts there.
    pub len: usize,
    pub method: Span,
    /// The target as the client sent it.
    pub target: Span,
    /// The target as `http` reads it: parsed once here, to validate it as hyper would, and kept
    /// so the request the handler takes is built from it without a second parse.
    pub uri: hyper::Uri,
    pub form: Form,
    /// The target a server gets: origin-form without a fragment (hyper drops it too); `None` for
    /// an absolute-form target without a path, which goes on as `/`.
    pub forward: Option<Span>,
    /// An absolute-form target's `host[:port]` (no userinfo): it replaces Host (RFC 9112 section 3.2.2).
    pub authority: Option<Span>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub fields: Vec<Field>,
    pub framing: Framing,
    /// Whether the client may send another request on the connection after this one.
    pub keep_alive: bool,
    /// An `Upgrade` to a protocol Fulcrum passes on (anything but HTTP/2): after it, the
    /// connection is a tunnel or ends, and is never read as HTTP again.
    pub upgrade: bool,
    pub expect_continue: bool,
}

/// A response head as offsets of the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub len: usize,
    /// The status line without its CRLF, as the server sent it.
    pub status_line: Span,
    pub status: u16,
    pub minor: u8,
    pub fields: Vec<Field>,
    pub framing: Framing,
    /// Whether the server keeps the connection open after this response.
    pub keep_alive: bool,
}

impl RequestHead {
    pub fn method<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.method.of(buf)
    }
    /// The values of the fields named `name` (any case).
    pub fn values<'a>(&'a self, buf: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        values(&self.fields, buf, name)
    }
    /// The host the request names, with its port if any: the target's authority, else Host.
    pub fn host<'a>(&'a self, buf: &'a [u8]) -> Option<&'a [u8]> {
        self.authority.map(|a| a.of(buf)).or_else(|| self.values(buf, "host").next())
    }

    /// Whether the request may go on to a server, as Fulcrum's handler decides before routing.
    pub fn admit(&self, buf: &[u8]) -> Result<(), Refusal> {
        let method = self.method(buf);
        if method == b"CONNECT" {
            return Err(Refusal::Connect);
        }
        let mut hosts = self.values(buf, "host");
        match (hosts.next(), hosts.next()) {
            (None, _) if self.minor == 1 => return Err(Refusal::Host("an HTTP/1.1 request without Host")),
            (Some(_), Some(_)) => return Err(Refusal::Host("more than one Host")),
            // RFC 9110 section 7.2: empty when the target has no authority.
            (Some(host), None) if !host.is_empty() && !crate::proxy::http::headers::valid_host(host) => return Err(Refusal::Host("an invalid Host")),
            _ => {}
        }
        // An absolute-form target's authority becomes the Host: it must be one.
        if let Some(authority) = self.authority
            && !crate::proxy::http::headers::valid_host(authority.of(buf))
        {
            return Err(Refusal::Host("an invalid authority in the target"));
        }
        match self.form {
            Form::Asterisk if method != b"OPTIONS" => Err(Refusal::Asterisk),
            Form::Authority => Err(Refusal::AuthorityForm),
            _ => Ok(()),
        }
    }
}

impl ResponseHead {
    pub fn values<'a>(&'a self, buf: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        values(&self.fields, buf, name)
    }
}

fn values<'a>(fields: &'a [Field], buf: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields.iter().filter(move |f| f.name.of(buf).eq_ignore_ascii_case(name.as_bytes())).map(move |f| f.value.of(buf))
}

/// Where a head ends in `buf`, once it does: the empty lines before it skipped (RFC 9112 section
/// 2.2 lets a recipient skip them), the lines checked for bare CR and LF, folding and colons.
/// `Ok(None)`: more bytes are needed.
fn find_head(buf: &[u8], limits: &Limits) -> Result<Option<(usize, usize)>, Refusal> {
    let skip = buf.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
    // With the byte after them: a CR that ends them is bare unless an LF follows.
    if let Some(bad) = bare_cr_or_lf(&buf[..(skip + 1).min(buf.len())]) {
        return Err(Refusal::Framing(bad));
    }
    let rest = &buf[skip..];
    // Built once: a searcher made per call costs more than the search in a head this short.
    static BLANK_LINE: std::sync::LazyLock<memchr::memmem::Finder<'static>> = std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));
    let Some(end) = BLANK_LINE.find(rest) else {
        if let Some(bad) = bare_cr_or_lf(rest) {
            return Err(Refusal::Framing(bad));
        }
        if rest.len() > limits.max_head {
            return Err(Refusal::HeadTooLarge(limits.max_head));
        }
        return Ok(None);
    };
    let head = &rest[..end + 4];
    if head.len() > limits.max_head {
        return Err(Refusal::HeadTooLarge(limits.max_head));
    }
    if let Some(bad) = bare_cr_or_lf(&head[..end + 2]) {
        return Err(Refusal::Framing(bad));
    }
    // Each line after the first (the field lines), from after one LF to the next (or the end),
    // in one pass over the LFs.
    let fields = &head[..end];
    let mut start = None;
    for stop in memchr::memchr_iter(b'\n', fields).chain(std::iter::once(fields.len())) {
        let Some(from) = start.replace(stop + 1) else { continue };
        let line = &fields[from..stop];
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err(Refusal::Framing(Bad::Folding));
        }
        if memchr::memchr(b':', line).is_none() {
            return Err(Refusal::Framing(Bad::NoColon));
        }
    }
    Ok(Some((skip, skip + end + 4)))
}

/// Where `part` (a slice of `buf`) starts in `buf`.
fn offset(buf: &[u8], part: &[u8]) -> usize {
    let at = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    // An empty slice httparse made may point anywhere; its place does not matter.
    if at > buf.len() { 0 } else { at }
}

fn span(buf: &[u8], part: &[u8]) -> Span {
    let start = offset(buf, part);
    Span::new(start, start + if start == 0 && part.is_empty() { 0 } else { part.len() })
}

fn malformed(e: httparse::Error, limits: &Limits) -> Refusal {
    match e {
        httparse::Error::TooManyHeaders => Refusal::TooManyFields(limits.max_fields),
        httparse::Error::Version => Refusal::Version,
        httparse::Error::HeaderName => Refusal::Malformed("an invalid header name"),
        httparse::Error::HeaderValue => Refusal::Malformed("an invalid header value"),
        httparse::Error::Token => Refusal::Malformed("an invalid method or request target"),
        httparse::Error::Status => Refusal::Malformed("an invalid status"),
        httparse::Error::NewLine => Refusal::Malformed("an invalid line end"),
    }
}

/// Runs `parse` over field slots on the stack when `max_fields` fits there.
fn with_slots<'b, T>(max_fields: usize, parse: impl FnOnce(&mut [MaybeUninit<httparse::Header<'b>>]) -> T) -> T {
    if max_fields <= STACK_FIELDS {
        let mut slots = [MaybeUninit::uninit(); STACK_FIELDS];
        parse(&mut slots[..max_fields])
    } else {
        let mut slots = vec![MaybeUninit::uninit(); max_fields];
        parse(&mut slots)
    }
}

fn fields_of(buf: &[u8], headers: &[httparse::Header<'_>]) -> Vec<Field> {
    headers.iter().map(|h| Field { name: span(buf, h.name.as_bytes()), value: span(buf, h.value) }).collect()
}

/// What the Content-Length and Transfer-Encoding fields say, checked.
struct Lengths {
    length: Option<u64>,
    /// Some: Transfer-Encoding is present; true: every line of it ends in chunked.
    chunked: Option<bool>,
}

/// Reads the framing fields as the guard does; `lists`: a Content-Length may be a list of one
/// value repeated (`5, 5`), which hyper's client takes from servers; a request's may not.
fn lengths(fields: &[Field], buf: &[u8], lists: bool) -> Result<Lengths, Refusal> {
    let mut length: Option<u64> = None;
    let mut chunked = None;
    // hyper reads only the last Transfer-Encoding line, and only an ASCII one, as chunked.
    let mut last_ascii = true;
    for f in fields {
        let name = f.name.of(buf);
        let value = f.value.of(buf);
        if name.eq_ignore_ascii_case(b"content-length") {
            let mut one = |v: &[u8]| -> Result<(), Refusal> {
                let n = digits(v).ok_or_else(|| Refusal::Framing(Bad::BadLength { value: String::from_utf8_lossy(value).into() }))?;
                if length.is_some_and(|m| m != n) {
                    return Err(Refusal::Framing(Bad::LengthsDiffer));
                }
                length = Some(n);
                Ok(())
            };
            if lists {
                value.split(|&b| b == b',').try_for_each(|v| one(trim(v)))?;
            } else {
                one(trim(value))?;
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().map(trim).unwrap_or_default();
            chunked = Some(chunked.unwrap_or(true) && last.eq_ignore_ascii_case(b"chunked"));
            last_ascii = value.is_ascii();
        }
    }
    Ok(Lengths { length, chunked: chunked.map(|c| c && last_ascii) })
}

/// Whether `Connection` lines leave the connection open after this message (hyper's reading:
/// `close` anywhere wins; HTTP/1.0 stays open only when asked with `keep-alive`).
fn keep_alive(fields: &[Field], buf: &[u8], minor: u8) -> bool {
    let mut open = minor == 1;
    // A value with obs-text names no option, as hyper reads it.
    for v in values(fields, buf, "connection").filter(|v| v.is_ascii()) {
        if tokens(v).any(|t| t.eq_ignore_ascii_case(b"close")) {
            return false;
        }
        open |= tokens(v).any(|t| t.eq_ignore_ascii_case(b"keep-alive"));
    }
    open
}

/// Parses the request head at the front of `buf`. `Ok(None)`: the head is not complete yet.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, Refusal> {
    let Some((start, end)) = find_head(buf, limits)? else { return Ok(None) };
    let head = &buf[start..end];
    let (method, target, minor, fields) = with_slots(limits.max_fields, |slots| {
        let mut req = httparse::Request::new(&mut []);
        match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, head, slots) {
            Ok(httparse::Status::Complete(_)) => {}
            // find_head saw the blank line, so httparse does too.
            Ok(httparse::Status::Partial) => return Err(Refusal::Malformed("an incomplete head")),
            Err(e) => return Err(malformed(e, limits)),
        }
        let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
            return Err(Refusal::Malformed("an incomplete request line"));
        };
        Ok((span(buf, method.as_bytes()), span(buf, target.as_bytes()), minor, fields_of(buf, req.headers)))
    })?;
    let raw = target.of(buf);
    if raw.len() > MAX_TARGET {
        return Err(Refusal::TargetTooLong(MAX_TARGET));
    }
    // Validated as hyper validates it, so both paths take the same targets.
    let uri = hyper::Uri::try_from(raw).map_err(|_| Refusal::Malformed("an invalid request target"))?;
    let (form, forward, authority) = if uri.scheme().is_some() {
        let whole = uri.authority().map_or("", |a| a.as_str());
        let after = raw.windows(3).position(|w| w == b"://").map_or(0, |i| i + 3);
        let host_start = after + whole.rfind('@').map_or(0, |i| i + 1);
        // An empty port (`a.test:`) is no port, as `http` reads it.
        let host_end = after + whole.len() - usize::from(whole.ends_with(':'));
        let authority = Span::new(target.start as usize + host_start, target.start as usize + host_end);
        let pq = uri.path_and_query().map(|p| p.as_str()).filter(|p| !p.is_empty() && raw[after + whole.len()..].starts_with(p.as_bytes()));
        let forward = pq.map(|p| Span::new(target.start as usize + after + whole.len(), target.start as usize + after + whole.len() + p.len()));
        (Form::Absolute, forward, Some(authority))
    } else if uri.authority().is_some() {
        (Form::Authority, Some(target), None)
    } else if raw == b"*" {
        (Form::Asterisk, Some(target), None)
    } else {
        let pq = uri.path_and_query().map_or(0, |p| p.as_str().len());
        (Form::Origin, Some(Span::new(target.start as usize, target.start as usize + pq)), None)
    };
    let Lengths { length, chunked } = lengths(&fields, buf, false)?;
    match (length, chunked) {
        (Some(_), Some(_)) => return Err(Refusal::Framing(Bad::LengthAndEncoding)),
        (_, Some(false)) => return Err(Refusal::Framing(Bad::NotChunked)),
        (_, Some(true)) if minor == 0 => return Err(Refusal::EncodingInHttp10),
        _ => {}
    }
    let framing = match (length, chunked) {
        (_, Some(_)) => Framing::Chunked,
        (Some(n), _) if n > 0 => Framing::Length(n),
        _ => Framing::Empty,
    };
    let upgrade = values(&fields, buf, "upgrade").any(crate::proxy::http::headers::asks_upgrade);
    let expect_continue = values(&fields, buf, "expect").last().is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"));
    let keep_alive = keep_alive(&fields, buf, minor);
    Ok(Some(RequestHead { len: end, method, target, uri, form, forward, authority, minor, fields, framing, keep_alive, upgrade, expect_continue }))
}

/// Parses the response head at the front of `buf`, the answer to a request whose method was
/// HEAD if `to_head`. `Ok(None)`: the head is not complete yet. A refusal is the server's fault.
///
/// Stricter than RFC 9112 lets a recipient be, because Fulcrum forwards from this very buffer:
/// a bare LF or CR, folding, and Content-Length with Transfer-Encoding (section 6.3 says to treat
/// that as an error, or to drop the length) are refused rather than passed on to clients.
pub fn parse_response(buf: &[u8], limits: &Limits, to_head: bool) -> Result<Option<ResponseHead>, Refusal> {
    let Some((start, end)) = find_head(buf, limits)? else { return Ok(None) };
    let head = &buf[start..end];
    let (status, minor, fields) = with_slots(limits.max_fields, |slots| {
        let mut res = httparse::Response::new(&mut []);
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, head, slots) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err(Refusal::Malformed("an incomplete head")),
            Err(e) => return Err(malformed(e, limits)),
        }
        let (Some(status), Some(minor)) = (res.code, res.version) else { return Err(Refusal::Malformed("an incomplete status line")) };
        Ok((status, minor, fields_of(buf, res.headers)))
    })?;
    let Lengths { length, chunked } = lengths(&fields, buf, true)?;
    if chunked.is_some() && length.is_some() {
        return Err(Refusal::Framing(Bad::LengthAndEncoding));
    }
    if chunked.is_some() && minor == 0 {
        return Err(Refusal::EncodingInHttp10);
    }
    let framing = Framing::of_response(status, to_head, length, chunked);
    let keep_alive = keep_alive(&fields, buf, minor) && framing != Framing::UntilClose;
    let line_end = head.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
    let status_line = Span::new(start, start + line_end);
    Ok(Some(ResponseHead { len: end, status_line, status, minor, fields, framing, keep_alive }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_head: 16 * 1024, max_fields: 100 };

    fn req(s: &[u8]) -> Result<Option<RequestHead>, Refusal> {
        parse_request(s, &LIMITS)
    }

    fn refused(s: &[u8]) -> Refusal {
        req(s).expect_err(&String::from_utf8_lossy(s))
    }

    #[test]
    fn a_request_head_is_offsets_of_its_buffer() {
        let s = b"\r\nPOST /a/b?c=d HTTP/1.1\r\nHost: x.test\r\nContent-Length:  5 \r\nX-Empty:\r\n\r\nhello";
        let h = req(s).unwrap().unwrap();
        assert_eq!(h.len, s.len() - 5);
        assert_eq!(h.method(s), b"POST");
        assert_eq!(h.target.of(s), b"/a/b?c=d");
        assert_eq!(h.forward.unwrap().of(s), b"/a/b?c=d");
        assert_eq!(h.form, Form::Origin);
        assert_eq!(h.minor, 1);
        assert_eq!(h.fields.len(), 3);
        assert_eq!(h.values(s, "content-length").next(), Some(&b"5"[..]));
        assert_eq!(h.values(s, "x-empty").next(), Some(&b""[..]));
        assert_eq!(h.framing, Framing::Length(5));
        assert!(h.keep_alive);
        assert_eq!(h.admit(s), Ok(()));
    }

    #[test]
    fn a_head_is_not_parsed_before_its_blank_line() {
        assert_eq!(req(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        assert_eq!(req(b"GET / HTTP/1.1\r\nHost: a\r\n\r"), Ok(None));
        assert!(req(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap().is_some());
    }

    #[test]
    fn every_smuggling_probe_the_guard_refuses_is_refused() {
        let probes: [(&[u8], Bad); 10] = [
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", Bad::LengthAndEncoding),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", Bad::LengthAndEncoding),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n", Bad::LengthsDiffer),
            (b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n  folded\r\n\r\n", Bad::Folding),
            (b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", Bad::BareCr),
            (b"GET / HTTP/1.1\nHost: a\n\n", Bad::BareLf),
            (b"\r\n\rGET / HTTP/1.1\r\nHost: a\r\n\r\n", Bad::BareCr),
            (b"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", Bad::BareLf),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", Bad::NotChunked),
            (b"GET / HTTP/1.1\r\nHost a\r\n\r\n", Bad::NoColon),
        ];
        for (probe, why) in probes {
            assert_eq!(refused(probe), Refusal::Framing(why), "{}", String::from_utf8_lossy(probe));
        }
    }

    #[test]
    fn content_length_is_plain_digits_and_one_value() {
        for bad in ["-1", "+5", "5, 5", "0x5", "", "5 5", "18446744073709551616"] {
            let s = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {bad}\r\n\r\n");
            assert!(matches!(refused(s.as_bytes()), Refusal::Framing(Bad::BadLength { .. })), "{bad:?}");
        }
        let same = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(req(same).unwrap().unwrap().framing, Framing::Length(5));
    }

    #[test]
    fn transfer_encoding_must_end_in_chunked_on_every_line_and_not_in_http_1_0() {
        let ok = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n";
        assert_eq!(req(ok).unwrap().unwrap().framing, Framing::Chunked);
        let obs_text = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x\x99, chunked\r\n\r\n";
        assert_eq!(refused(obs_text), Refusal::Framing(Bad::NotChunked));
        let obs_text_first = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x\x99, chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(req(obs_text_first).unwrap().unwrap().framing, Framing::Chunked);
        let split = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(refused(split), Refusal::Framing(Bad::NotChunked));
        assert_eq!(refused(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), Refusal::EncodingInHttp10);
    }

    #[test]
    fn limits_on_the_head_answer_431() {
        let limits = Limits { max_head: 64, max_fields: 2 };
        let long = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "y".repeat(64));
        assert_eq!(parse_request(long.as_bytes(), &limits).unwrap_err().status(), 431);
        // Not yet complete but already too long: refused without waiting for the rest.
        assert_eq!(parse_request(&long.as_bytes()[..70], &limits).unwrap_err(), Refusal::HeadTooLarge(64));
        let many = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(parse_request(many, &limits), Err(Refusal::TooManyFields(2)));
        let wide = Limits { max_head: 1 << 20, max_fields: 1000 };
        let fields: String = (0..300).map(|i| format!("X-{i}: v\r\n")).collect();
        let s = format!("GET / HTTP/1.1\r\nHost: a\r\n{fields}\r\n");
        assert_eq!(parse_request(s.as_bytes(), &wide).unwrap().unwrap().fields.len(), 301);
    }

    #[test]
    fn bad_request_lines_are_refused() {
        for s in [
            &b"GET  / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/2.0\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET /\x7f HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1 \r\n\r\n",
            b"GET /a\"b{ HTTP/1.1 x\r\n\r\n",
        ] {
            assert!(req(s).is_err(), "{}", String::from_utf8_lossy(s));
        }
        assert_eq!(refused(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n").status(), 505);
        assert_eq!(refused(b"GET / HTTP/1.1\r\nHo st: a\r\n\r\n"), Refusal::Malformed("an invalid header name"));
        assert_eq!(refused(b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"), Refusal::Malformed("an invalid header name"));
        assert_eq!(refused(b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n"), Refusal::Malformed("an invalid header value"));
    }

    #[test]
    fn request_target_forms() {
        let s = b"GET http://user@a.test:8080/p?q#frag HTTP/1.1\r\nHost: other\r\n\r\n";
        let h = req(s).unwrap().unwrap();
        assert_eq!(h.form, Form::Absolute);
        assert_eq!(h.forward.unwrap().of(s), b"/p?q");
        assert_eq!(h.authority.unwrap().of(s), b"a.test:8080");
        assert_eq!(h.host(s), Some(&b"a.test:8080"[..]));
        let empty_port = b"GET http://a.test:/x HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert_eq!(req(empty_port).unwrap().unwrap().host(empty_port), Some(&b"a.test"[..]));
        let bare = b"GET http://a.test HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let h = req(bare).unwrap().unwrap();
        assert_eq!((h.forward, h.authority.unwrap().of(bare)), (None, &b"a.test"[..]));
        let odd_port = b"GET http://a.test:x/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert_eq!(req(odd_port).unwrap().unwrap().admit(odd_port), Err(Refusal::Host("an invalid authority in the target")));
        let frag = b"GET /p#f HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(req(frag).unwrap().unwrap().forward.unwrap().of(frag), b"/p");
        let star = b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = req(star).unwrap().unwrap();
        assert_eq!((h.form, h.admit(star)), (Form::Asterisk, Ok(())));
        let star = b"GET * HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(req(star).unwrap().unwrap().admit(star), Err(Refusal::Asterisk));
        let connect = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n";
        let h = req(connect).unwrap().unwrap();
        assert_eq!((h.form, h.admit(connect)), (Form::Authority, Err(Refusal::Connect)));
        let get = b"GET a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert_eq!(req(get).unwrap().unwrap().admit(get), Err(Refusal::AuthorityForm));
        assert!(req(b"GET \xff HTTP/1.1\r\nHost: a\r\n\r\n").is_err());
    }

    #[test]
    fn host_rules() {
        let admit = |s: &[u8]| req(s).unwrap().unwrap().admit(s);
        assert_eq!(admit(b"GET / HTTP/1.1\r\n\r\n"), Err(Refusal::Host("an HTTP/1.1 request without Host")));
        assert_eq!(admit(b"GET / HTTP/1.0\r\n\r\n"), Ok(()));
        assert_eq!(admit(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"), Err(Refusal::Host("more than one Host")));
        assert_eq!(admit(b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"), Err(Refusal::Host("an invalid Host")));
        assert_eq!(admit(b"GET / HTTP/1.1\r\nHost: a:x\r\n\r\n"), Err(Refusal::Host("an invalid Host")));
        assert_eq!(admit(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), Ok(()));
        assert_eq!(admit(b"GET / HTTP/1.1\r\nHost:\r\n\r\n"), Ok(()));
    }

    #[test]
    fn connection_persistence_follows_version_and_connection() {
        let ka = |s: &[u8]| req(s).unwrap().unwrap().keep_alive;
        assert!(ka(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
        assert!(ka(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
        assert!(!ka(b"GET / HTTP/1.0\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn upgrades_and_expectations_are_seen() {
        let s = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nExpect: 100-Continue\r\n\r\n";
        let h = req(s).unwrap().unwrap();
        assert!(h.upgrade && h.expect_continue);
        let h2c = b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n\r\n";
        assert!(!req(h2c).unwrap().unwrap().upgrade);
    }

    fn res(s: &[u8], to_head: bool) -> Result<Option<ResponseHead>, Refusal> {
        parse_response(s, &LIMITS, to_head)
    }

    #[test]
    fn response_bodies_are_framed_as_rfc_9112_section_6_3_says() {
        let framing = |s: &[u8], to_head| res(s, to_head).unwrap().unwrap().framing;
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", false), Framing::Length(3));
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true), Framing::Empty);
        assert_eq!(framing(b"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n", false), Framing::Empty);
        assert_eq!(framing(b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", false), Framing::Empty);
        assert_eq!(framing(b"HTTP/1.1 100 Continue\r\n\r\n", false), Framing::Empty);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false), Framing::Chunked);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false), Framing::UntilClose);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\n\r\n", false), Framing::UntilClose);
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", false), Framing::Length(7));
        assert_eq!(framing(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false), Framing::Empty);
    }

    #[test]
    fn ambiguous_responses_are_refused() {
        for s in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\nContent-Length: 3\n\n",
            b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
        ] {
            assert!(res(s, false).is_err(), "{}", String::from_utf8_lossy(s));
        }
    }

    #[test]
    fn a_response_keeps_its_connection_only_when_framed_and_not_closed() {
        let ka = |s: &[u8]| res(s, false).unwrap().unwrap().keep_alive;
        assert!(ka(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(!ka(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(!ka(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
        assert!(!ka(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        let h = res(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
        assert_eq!((h.status, h.minor), (404, 1));
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_panic_the_head_parsers(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse_request(&data, &LIMITS);
            let _ = parse_response(&data, &LIMITS, false);
        }
    }
}
