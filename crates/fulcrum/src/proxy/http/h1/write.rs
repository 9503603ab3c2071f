//! A head written onward from the buffer it was read into: the request line with the target a
//! server gets (or the status line as the server sent it), then every field copied as it came,
//! runs of kept fields in one copy each, but those that stop at this hop or that the proxy
//! replaces, then the fields it adds. Nothing is parsed again and no field map is built.

use super::head::{Field, RequestHead, ResponseHead};
use super::tokens;

/// Named in `Connection`, these still go on: the request needs them (`Host`), or they frame it
/// (`Content-Length`), as `headers::strip_hop_by_hop` keeps them on the path through hyper.
const NEEDED: [&[u8]; 2] = [b"host", b"content-length"];

/// Always dropped (RFC 9110 section 7.6.1, and what `headers::strip_hop_by_hop` drops):
/// `Transfer-Encoding` too, since the forwarder states the framing it sends (`add`).
const HOP_BY_HOP: [&[u8]; 7] = [b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"proxy-authorization"];

/// Which fields of a head stop at this hop: the fixed ones, those `Connection` names, and
/// `Upgrade` unless the message upgrades.
#[derive(Debug)]
pub struct HopByHop<'a> {
    named: Vec<&'a [u8]>,
    upgrade: bool,
}

impl<'a> HopByHop<'a> {
    pub fn of(buf: &'a [u8], fields: &[Field], upgrade: bool) -> HopByHop<'a> {
        let named = fields
            .iter()
            .filter(|f| f.name.of(buf).eq_ignore_ascii_case(b"connection"))
            .flat_map(|f| tokens(f.value.of(buf)))
            .filter(|n| !(NEEDED.iter().any(|k| n.eq_ignore_ascii_case(k)) || (upgrade && n.eq_ignore_ascii_case(b"upgrade"))))
            .collect();
        HopByHop { named, upgrade }
    }

    /// Whether the field named `name` stops here.
    pub fn drops(&self, name: &[u8]) -> bool {
        HOP_BY_HOP.iter().chain(self.named.iter()).any(|n| name.eq_ignore_ascii_case(n)) || (!self.upgrade && name.eq_ignore_ascii_case(b"upgrade"))
    }
}

/// Copies the fields `keep` takes, each run of neighbours in one copy (the bytes between two
/// fields are their line end, checked when the head was parsed), then writes `add`.
fn fields(buf: &[u8], fields: &[Field], keep: impl Fn(&[u8]) -> bool, add: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    // A field's end: its value's, or just past the colon for an empty value.
    let end = |f: &Field| (f.value.end as usize).max(f.name.end as usize + 1);
    let mut run: Option<(usize, usize)> = None;
    for f in fields {
        if keep(f.name.of(buf)) {
            run = Some((run.map_or(f.name.start as usize, |r| r.0), end(f)));
        } else if let Some((start, stop)) = run.take() {
            out.extend_from_slice(&buf[start..stop]);
            out.extend_from_slice(b"\r\n");
        }
    }
    if let Some((start, stop)) = run {
        out.extend_from_slice(&buf[start..stop]);
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in add {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes the request head for a server into `out`: `target` in the request line, in HTTP/1.1,
/// the fields `keep` takes, then `add`.
pub fn request(buf: &[u8], head: &RequestHead, target: &[u8], keep: impl Fn(&[u8]) -> bool, add: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    out.extend_from_slice(head.method.of(buf));
    out.push(b' ');
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    fields(buf, &head.fields, keep, add, out);
}

/// Writes the response head for a client into `out`: the status line as the server sent it, the
/// fields `keep` takes, then `add`.
pub fn response(buf: &[u8], head: &ResponseHead, keep: impl Fn(&[u8]) -> bool, add: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    out.extend_from_slice(head.status_line.of(buf));
    out.extend_from_slice(b"\r\n");
    fields(buf, &head.fields, keep, add, out);
}

#[cfg(test)]
mod tests {
    use super::super::head::{Limits, parse_request, parse_response};
    use super::*;

    const LIMITS: Limits = Limits { max_head: 16 * 1024, max_fields: 100 };

    /// The request head of `buf` as it goes on to a server: for `target`, without its
    /// hop-by-hop fields, with `add`.
    fn onward(buf: &[u8], target: &[u8], add: &[(&[u8], &[u8])]) -> String {
        let head = parse_request(buf, &LIMITS).unwrap().unwrap();
        let hop = HopByHop::of(buf, &head.fields, head.upgrade);
        let mut out = Vec::new();
        request(buf, &head, target, |n| !hop.drops(n), add, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_request_goes_on_with_only_the_hop_by_hop_fields_changed() {
        let buf = b"GET http://a.test/p?q HTTP/1.1\r\nHost: b\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nAccept: */*  \r\nUser-Agent: t\r\nKeep-Alive: 5\r\nX-Empty:\r\nTransfer-Encoding: chunked\r\n\r\n";
        let head = parse_request(buf, &LIMITS).unwrap().unwrap();
        let hop = HopByHop::of(buf, &head.fields, head.upgrade);
        let target = head.forward.map_or(&b"/"[..], |s| s.of(buf));
        let mut out = Vec::new();
        request(buf, &head, target, |n| !hop.drops(n) && !n.eq_ignore_ascii_case(b"host"), &[(b"host", b"a.test"), (b"x-forwarded-for", b"127.0.0.1")], &mut out);
        let want = "GET /p?q HTTP/1.1\r\nAccept: */*  \r\nUser-Agent: t\r\nX-Empty:\r\nhost: a.test\r\nx-forwarded-for: 127.0.0.1\r\n\r\n";
        assert_eq!(String::from_utf8_lossy(&out), want);
        let again = parse_request(&out, &LIMITS).unwrap().unwrap();
        assert_eq!(again.len, out.len());
    }

    #[test]
    fn an_upgrade_keeps_its_upgrade_field() {
        let buf = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        assert_eq!(onward(buf, b"/ws", &[(b"connection", b"upgrade")]), "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nconnection: upgrade\r\n\r\n");
        let plain = b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: x\r\n\r\n";
        assert_eq!(onward(plain, b"/", &[]), "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    }

    #[test]
    fn connection_cannot_take_away_host_or_content_length() {
        let buf = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: host, content-length\r\n\r\nok";
        assert_eq!(onward(buf, b"/", &[]), "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n");
    }

    #[test]
    fn a_response_keeps_its_status_line() {
        let buf = b"HTTP/1.1 404 Not Here\r\nContent-Length: 0\r\nConnection: close\r\nServer: s1\r\n\r\n";
        let head = parse_response(buf, &LIMITS, false).unwrap().unwrap();
        let hop = HopByHop::of(buf, &head.fields, false);
        let mut out = Vec::new();
        response(buf, &head, |n| !hop.drops(n), &[], &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "HTTP/1.1 404 Not Here\r\nContent-Length: 0\r\nServer: s1\r\n\r\n");
    }
}
