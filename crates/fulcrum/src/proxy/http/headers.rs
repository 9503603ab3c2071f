//! Header rules of HTTP mode: a request's `Host` must be unambiguous (RFC 9112 section 3.2),
//! hop-by-hop headers stop at Fulcrum (RFC 9110 section 7.6.1) but a `Connection` option never
//! removes a field the request needs, an upgrade to HTTP/2 (`h2c`) never passes, and the
//! forwarded headers tell the server who the client is.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hyper::Version;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::Authority;

use crate::config::ForwardedHeader;

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Why a request's `Host` is refused with a 400, if it is: routing reads the first `Host` while
/// a server may read another, so two are a host-route bypass; HTTP/1.1 requires one (HTTP/1.0
/// does not); and a value that is not `host[:port]` cannot be routed or checked.
pub fn host_problem(headers: &HeaderMap, version: Version) -> Option<&'static str> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let Some(host) = hosts.next() else {
        return (version == Version::HTTP_11).then_some("an HTTP/1.1 request without Host");
    };
    if hosts.next().is_some() {
        return Some("more than one Host");
    }
    // RFC 9110 section 7.2: empty when the target has no authority.
    (!host.is_empty() && !valid_host(host.as_bytes())).then_some("an invalid Host")
}

/// The request's `Content-Length` when it has exactly one that reads as a number (hyper and the
/// framing guard refuse a request whose lengths disagree or do not parse).
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    std::str::from_utf8(value.as_bytes()).ok()?.trim().parse().ok()
}

/// `uri-host [":" port]`: an authority without userinfo, whose port (if any) is a number.
pub fn valid_host(value: &[u8]) -> bool {
    let Some(text) = std::str::from_utf8(value).ok() else { return false };
    let Ok(authority) = text.parse::<Authority>() else { return false };
    let port = text.strip_prefix(authority.host()).unwrap_or(text);
    !text.contains('@') && (port.is_empty() || port == ":" || authority.port_u16().is_some())
}

static HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// Whether an `Upgrade` value asks for a protocol Fulcrum passes on: anything but HTTP/2
/// (`h2c`, or `h2`, which is never reached by Upgrade). An upgrade to HTTP/2 would open a tunnel
/// to the server past routing and every rule, so it is taken out (RFC 9113 section 3.1 retired
/// it), and the framing guard goes on reading such a request's connection as HTTP/1.1.
pub fn asks_upgrade(value: &[u8]) -> bool {
    passed_protocols(value).next().is_some()
}

/// The protocols of an `Upgrade` value that are passed on: every one but HTTP/2.
fn passed_protocols(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(|t| t.trim_ascii()).filter(|t| !t.is_empty() && !is_http2(t))
}

fn is_http2(token: &[u8]) -> bool {
    let name = token.split(|&b| b == b'/').next().unwrap_or_default().trim_ascii();
    name.eq_ignore_ascii_case(b"h2c") || name.eq_ignore_ascii_case(b"h2")
}

/// Takes HTTP/2 out of a request's `Upgrade` (with `HTTP2-Settings`, which only goes with it)
/// and says whether an upgrade is still asked for.
pub fn take_h2c_upgrade(headers: &mut HeaderMap) -> bool {
    headers.remove(&HTTP2_SETTINGS);
    if !headers.contains_key(header::UPGRADE) {
        return false;
    }
    let kept: Vec<&[u8]> = headers.get_all(header::UPGRADE).iter().flat_map(|v| passed_protocols(v.as_bytes())).collect();
    let joined = HeaderValue::from_bytes(&kept.join(&b", "[..])).ok().filter(|v| !v.is_empty());
    headers.remove(header::UPGRADE);
    match joined {
        Some(v) => {
            headers.insert(header::UPGRADE, v);
            true
        }
        None => false,
    }
}

/// Fields a `Connection` option may name but never removes: the request needs them (`Host`),
/// or they frame it (`Content-Length`; `Transfer-Encoding` goes anyway, since the forwarded
/// message is framed anew).
fn needed(name: &HeaderName) -> bool {
    name == header::HOST || name == header::CONTENT_LENGTH
}

/// Removes the hop-by-hop headers, those `Connection` names included. An upgrade keeps its
/// `Connection: upgrade` and `Upgrade`, which the next hop needs.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .filter(|n| !(needed(n) || (upgrade && n == header::UPGRADE)))
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in [&KEEP_ALIVE, &PROXY_CONNECTION, &header::TE, &header::TRAILER, &header::TRANSFER_ENCODING, &header::PROXY_AUTHORIZATION] {
        headers.remove(n);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
}

/// A client's own values of the forwarded headers, made once per connection: requests on a
/// kept-alive connection then add them without formatting an address each time.
#[derive(Debug, Clone)]
pub struct ClientNode {
    client: IpAddr,
    /// Named in `X-Forwarded-For` and `Forwarded`: not a client of `forwarded_except`.
    named: bool,
    x_forwarded_for: HeaderValue,
    forwarded: HeaderValue,
    /// `http`, or `https` for a client whose TLS Fulcrum terminated.
    proto: HeaderValue,
    /// The address the client connected to.
    local: Option<SocketAddr>,
    /// The server name of the client's TLS hello.
    sni: Option<Arc<str>>,
}

impl ClientNode {
    /// Leaves the client out of `X-Forwarded-For` and `Forwarded` when `except` holds it.
    pub fn unless_in(mut self, except: &[crate::config::Network]) -> ClientNode {
        self.named = !except.iter().any(|n| n.contains(self.client));
        self
    }

    /// With the server name of the client's TLS hello.
    pub fn with_sni(mut self, sni: Option<Arc<str>>) -> ClientNode {
        self.sni = sni;
        self
    }

    pub fn sni(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.is_https() { "https" } else { "http" }
    }

    /// Whether the client's requests came over TLS Fulcrum terminated.
    pub fn is_https(&self) -> bool {
        self.proto == "https"
    }

    /// The Host of a request that names none, which an HTTP/1.0 client may send: RFC 9112
    /// section 3.3 makes its target's authority the address the client connected to, and an
    /// HTTP/1.1 request, as servers are sent, must carry a Host (section 3.2).
    pub fn host(&self) -> Option<HeaderValue> {
        self.local.and_then(|a| HeaderValue::from_str(&a.to_string()).ok())
    }

    /// A client of `scheme` (`http` or `https`) that connected to `local`.
    pub fn with_scheme(client: IpAddr, local: Option<SocketAddr>, scheme: &'static str) -> ClientNode {
        let addr = client.to_string();
        // RFC 7239: an IPv6 address is quoted and bracketed.
        let node = match client {
            IpAddr::V4(_) => addr.clone(),
            IpAddr::V6(_) => format!("\"[{addr}]\""),
        };
        // An address always makes a valid value; "unknown" is RFC 7239's word for the impossible.
        ClientNode {
            client,
            named: true,
            x_forwarded_for: HeaderValue::from_str(&addr).unwrap_or(HeaderValue::from_static("unknown")),
            forwarded: HeaderValue::from_str(&format!("for={node};proto={scheme}")).unwrap_or(HeaderValue::from_static("for=unknown")),
            proto: HeaderValue::from_static(scheme),
            local,
            sni: None,
        }
    }
}

/// The client a request is from: `peer`, or, when `peer` is one of the `trusted` proxies, the
/// rightmost address of its `X-Forwarded-For` fields that is not one of them (the addresses to
/// its right were written by proxies Fulcrum trusts; the one it stops at is the first that no
/// trusted proxy vouches for). An entry that is not an address ends the walk at the last trusted
/// hop.
pub fn effective_client(peer: IpAddr, headers: &HeaderMap, trusted: &[crate::config::Network]) -> IpAddr {
    if trusted.is_empty() || !trusted.iter().any(|n| n.contains(peer)) {
        return peer;
    }
    let mut client = peer;
    let fields: Vec<&str> = headers.get_all(&X_FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()).collect();
    for hop in fields.iter().rev().flat_map(|f| f.rsplit(',')) {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else { break };
        client = ip;
        if !trusted.iter().any(|n| n.contains(ip)) {
            break;
        }
    }
    client
}

/// The id of a request (`[service.http] request_id`): the client's when it is 1 to 128 visible
/// ASCII characters, so a log line or a server never gets more; otherwise a new UUIDv7, whose
/// time order sorts the log.
pub fn request_id(sent: Option<&HeaderValue>) -> HeaderValue {
    match sent {
        Some(v) if (1..=128).contains(&v.len()) && v.as_bytes().iter().all(u8::is_ascii_graphic) => v.clone(),
        _ => HeaderValue::from_str(&uuid::Uuid::now_v7().to_string()).unwrap_or(HeaderValue::from_static("-")),
    }
}

/// Adds the configured forwarded headers for `client`, appending to what earlier proxies wrote.
pub fn add_forwarded(headers: &mut HeaderMap, client: &ClientNode, which: &[ForwardedHeader]) {
    for h in which {
        match h {
            ForwardedHeader::XForwardedFor if client.named => append_list(headers, &X_FORWARDED_FOR, &client.x_forwarded_for),
            ForwardedHeader::XForwardedProto => {
                headers.insert(&X_FORWARDED_PROTO, client.proto.clone());
            }
            ForwardedHeader::Forwarded if client.named => append_list(headers, &header::FORWARDED, &client.forwarded),
            ForwardedHeader::XForwardedFor | ForwardedHeader::Forwarded => {}
        }
    }
}

fn append_list(headers: &mut HeaderMap, name: &HeaderName, value: &HeaderValue) {
    let joined = match headers.get(name).and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.is_empty() => HeaderValue::from_str(&format!("{prev}, {}", value.to_str().unwrap_or(""))).ok(),
        _ => Some(value.clone()),
    };
    if let Some(v) = joined {
        headers.insert(name, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_named_by_connection_go() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "close, X-Secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TE, "trailers".parse().unwrap());
        h.insert(header::HOST, "a".parse().unwrap());
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key(header::HOST));
    }

    #[test]
    fn a_connection_option_never_removes_host_or_length() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "close, Host, Content-Length, X-Drop".parse().unwrap());
        h.insert(header::HOST, "a".parse().unwrap());
        h.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        h.insert("x-drop", "1".parse().unwrap());
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.get(header::HOST).unwrap(), "a");
        assert_eq!(h.get(header::CONTENT_LENGTH).unwrap(), "5");
        assert!(!h.contains_key("x-drop") && !h.contains_key(header::CONNECTION), "{h:?}");
    }

    #[test]
    fn host_must_be_single_valid_and_present_in_http_1_1() {
        let with = |hosts: &[&str]| {
            let mut h = HeaderMap::new();
            for v in hosts {
                h.append(header::HOST, v.parse().unwrap());
            }
            h
        };
        assert_eq!(host_problem(&with(&["a"]), Version::HTTP_11), None);
        assert_eq!(host_problem(&with(&["a.example:8080"]), Version::HTTP_11), None);
        assert_eq!(host_problem(&with(&["[::1]:80"]), Version::HTTP_11), None);
        assert_eq!(host_problem(&with(&[""]), Version::HTTP_11), None);
        assert_eq!(host_problem(&with(&[]), Version::HTTP_10), None, "HTTP/1.0 may leave Host out");
        assert_eq!(host_problem(&with(&[]), Version::HTTP_11), Some("an HTTP/1.1 request without Host"));
        assert_eq!(host_problem(&with(&["a", "b"]), Version::HTTP_11), Some("more than one Host"));
        assert_eq!(host_problem(&with(&["a", "a"]), Version::HTTP_10), Some("more than one Host"));
        for bad in ["a b", "a/b", "user@a", "a:port"] {
            assert_eq!(host_problem(&with(&[bad]), Version::HTTP_11), Some("an invalid Host"), "{bad}");
        }
    }

    #[test]
    fn an_upgrade_keeps_what_the_next_hop_needs() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "Upgrade".parse().unwrap());
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h.get(header::UPGRADE).unwrap(), "websocket");
        assert_eq!(h.get(header::CONNECTION).unwrap(), "upgrade");
    }

    #[test]
    fn an_upgrade_to_http2_never_passes() {
        let upgrade = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::UPGRADE, v.parse().unwrap());
            }
            h.insert("http2-settings", "AAMAAABkAAQAAP__".parse().unwrap());
            let asked = take_h2c_upgrade(&mut h);
            assert!(!h.contains_key("http2-settings"));
            (asked, h.get(header::UPGRADE).map(|v| v.to_str().unwrap().to_string()))
        };
        assert_eq!(upgrade(&["h2c"]), (false, None));
        assert_eq!(upgrade(&["H2C, h2"]), (false, None));
        assert_eq!(upgrade(&["websocket"]), (true, Some("websocket".into())));
        assert_eq!(upgrade(&["h2c, websocket"]), (true, Some("websocket".into())));
        assert_eq!(upgrade(&["h2c", "foo/2"]), (true, Some("foo/2".into())));
        assert_eq!(upgrade(&[]), (false, None));
        assert!(!asks_upgrade(b" h2c ,"));
        assert!(asks_upgrade(b"h2c, websocket"));
        assert!(!asks_upgrade(b""));
    }

    #[test]
    fn forwarded_headers_append_to_earlier_proxies() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        add_forwarded(
            &mut h,
            &ClientNode::with_scheme("127.0.0.11".parse().unwrap(), None, "http"),
            &[ForwardedHeader::XForwardedFor, ForwardedHeader::XForwardedProto, ForwardedHeader::Forwarded],
        );
        assert_eq!(h.get("x-forwarded-for").unwrap(), "10.0.0.1, 127.0.0.11");
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "http");
        assert_eq!(h.get("forwarded").unwrap(), "for=127.0.0.11;proto=http");
        let mut h = HeaderMap::new();
        add_forwarded(&mut h, &ClientNode::with_scheme("::1".parse().unwrap(), None, "http"), &[ForwardedHeader::Forwarded]);
        assert_eq!(h.get("forwarded").unwrap(), "for=\"[::1]\";proto=http");
        let mut h = HeaderMap::new();
        add_forwarded(&mut h, &ClientNode::with_scheme("127.0.0.12".parse().unwrap(), None, "https"), &[ForwardedHeader::XForwardedProto, ForwardedHeader::Forwarded]);
        assert_eq!(h.get("x-forwarded-proto").unwrap(), "https");
        assert_eq!(h.get("forwarded").unwrap(), "for=127.0.0.12;proto=https");
        let all = [ForwardedHeader::XForwardedFor, ForwardedHeader::XForwardedProto, ForwardedHeader::Forwarded];
        let local: Vec<crate::config::Network> = vec!["127.0.0.0/8".parse().unwrap()];
        let mut quiet = HeaderMap::new();
        add_forwarded(&mut quiet, &ClientNode::with_scheme("127.0.0.13".parse().unwrap(), None, "http").unless_in(&local), &all);
        assert!(!quiet.contains_key(&X_FORWARDED_FOR) && !quiet.contains_key(header::FORWARDED) && quiet[&X_FORWARDED_PROTO] == "http", "forwarded_except: {quiet:?}");
        let mut named = HeaderMap::new();
        add_forwarded(&mut named, &ClientNode::with_scheme("192.0.2.1".parse().unwrap(), None, "http").unless_in(&local), &all);
        assert_eq!(named[&X_FORWARDED_FOR], "192.0.2.1");
    }

    #[test]
    fn a_trusted_proxy_names_the_client_and_no_one_else_does() {
        let trusted: Vec<crate::config::Network> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut h = HeaderMap::new();
        h.append(&X_FORWARDED_FOR, "198.51.100.1, 192.0.2.9".parse().unwrap());
        h.append(&X_FORWARDED_FOR, "10.1.1.1".parse().unwrap());
        assert_eq!(effective_client(ip("10.0.0.2"), &h, &trusted), ip("192.0.2.9"), "the rightmost hop no trusted proxy is");
        assert_eq!(effective_client(ip("203.0.113.5"), &h, &trusted), ip("203.0.113.5"), "an untrusted peer's header is ignored");
        assert_eq!(effective_client(ip("10.0.0.2"), &HeaderMap::new(), &trusted), ip("10.0.0.2"));
        let mut bad = HeaderMap::new();
        bad.insert(&X_FORWARDED_FOR, "192.0.2.9, unknown, 10.2.2.2".parse().unwrap());
        assert_eq!(effective_client(ip("10.0.0.2"), &bad, &trusted), ip("10.2.2.2"), "the walk stops at what is not an address");
        assert_eq!(effective_client(ip("10.0.0.2"), &h, &[]), ip("10.0.0.2"));
    }
}
