//! WebSocket over HTTP/2 (RFC 8441): an HTTP/2 client opens a WebSocket with an extended
//! CONNECT (`:method CONNECT`, `:protocol websocket`), which Fulcrum announces it takes
//! (`SETTINGS_ENABLE_CONNECT_PROTOCOL`), and the stream carries the WebSocket's frames. Servers
//! are spoken to in HTTP/1.1, so the request goes on as the HTTP/1.1 opening handshake (RFC 6455
//! section 4.1): `GET` with `Upgrade: websocket`, `Connection: upgrade` and a
//! `Sec-WebSocket-Key` Fulcrum makes (an HTTP/2 client sends none). The server's 101 is checked
//! as a WebSocket client must check it (its `Sec-WebSocket-Accept` answers that key, or the
//! handshake fails: a 502), and goes back to the client as the 200 that opens the tunnel; from
//! then on the frames pass both ways untouched, as after an HTTP/1.1 upgrade.
//!
//! Any other `:protocol` is refused with 501, as a plain CONNECT is: Fulcrum does not tunnel.
//! Pure, apart from the key's randomness.

use base64::Engine as _;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};

/// RFC 6455 section 1.3: appended to the key before it is hashed into the accept value.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

static SEC_WEBSOCKET_KEY: HeaderName = HeaderName::from_static("sec-websocket-key");
static SEC_WEBSOCKET_ACCEPT: HeaderName = HeaderName::from_static("sec-websocket-accept");

/// What an HTTP/2 CONNECT asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connect {
    /// An extended CONNECT for a WebSocket.
    WebSocket,
    /// A plain CONNECT (a tunnel to an authority) or an extended one for another protocol
    /// (named): refused.
    Other(Option<String>),
}

/// What `method` with the `:protocol` of `protocol` asks for, when it is a CONNECT.
pub fn connect(method: &Method, protocol: Option<&hyper::ext::Protocol>) -> Option<Connect> {
    if method != Method::CONNECT {
        return None;
    }
    Some(match protocol.map(|p| p.as_str()) {
        Some(p) if p.eq_ignore_ascii_case("websocket") => Connect::WebSocket,
        other => Connect::Other(other.map(|p| p.chars().take(64).collect())),
    })
}

/// Makes an extended CONNECT the HTTP/1.1 opening handshake: `GET`, `Upgrade: websocket`,
/// `Connection: upgrade` and a new `Sec-WebSocket-Key` from `nonce` (16 random bytes). The
/// client's own `Sec-WebSocket-Version`, `-Protocol` and `-Extensions` go on as they are.
/// The `Sec-WebSocket-Accept` the server must answer goes with the request as `Expected`.
pub fn to_upgrade<B>(req: &mut Request<B>, nonce: [u8; 16]) {
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    *req.method_mut() = Method::GET;
    req.extensions_mut().remove::<hyper::ext::Protocol>();
    let headers = req.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    // A client's key over HTTP/2 means nothing (RFC 8441 section 5): this one is Fulcrum's.
    headers.insert(SEC_WEBSOCKET_KEY.clone(), HeaderValue::try_from(key.as_str()).expect("base64 is a valid header value"));
    req.extensions_mut().insert(Expected(accept_of(&key)));
}

/// The `Sec-WebSocket-Accept` a server must answer an HTTP/2 client's WebSocket with: a request
/// extension, from `to_upgrade` to the check of the 101.
#[derive(Debug, Clone)]
pub struct Expected(pub String);

/// 16 random bytes for a key.
pub fn nonce() -> [u8; 16] {
    rand::random()
}

/// The `Sec-WebSocket-Accept` for `key`: base64 of the SHA-1 of the key and the GUID.
fn accept_of(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, format!("{key}{GUID}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// Why a 101 cannot open an HTTP/2 client's WebSocket: a 502.
pub const WRONG_ACCEPT: &str = "the server's 101 does not answer the WebSocket key (Sec-WebSocket-Accept)";

/// Whether a 101's fields answer the key whose accept value is `expected`: when not, the server
/// did not take the handshake as a WebSocket one, and the 101 must not open the stream.
pub fn answers(headers: &HeaderMap, expected: &str) -> bool {
    headers.get(&SEC_WEBSOCKET_ACCEPT).map(HeaderValue::as_bytes) == Some(expected.as_bytes())
}

/// Makes a server's 101 (checked by `answers`) the 200 that opens an HTTP/2 client's stream,
/// without the HTTP/1.1 upgrade's fields.
pub fn to_h2_answer(status: &mut StatusCode, headers: &mut HeaderMap) {
    *status = StatusCode::OK;
    for name in [&header::UPGRADE, &header::CONNECTION, &SEC_WEBSOCKET_ACCEPT] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_websocket_extended_connect_is_taken() {
        let ws = hyper::ext::Protocol::from_static("websocket");
        let other = hyper::ext::Protocol::from_static("connect-udp");
        assert_eq!(connect(&Method::GET, Some(&ws)), None);
        assert_eq!(connect(&Method::CONNECT, Some(&ws)), Some(Connect::WebSocket));
        assert_eq!(connect(&Method::CONNECT, Some(&hyper::ext::Protocol::from_static("WebSocket"))), Some(Connect::WebSocket));
        assert_eq!(connect(&Method::CONNECT, Some(&other)), Some(Connect::Other(Some("connect-udp".into()))));
        assert_eq!(connect(&Method::CONNECT, None), Some(Connect::Other(None)));
    }

    #[test]
    fn the_accept_value_is_rfc_6455s() {
        // RFC 6455 section 1.3's example.
        assert_eq!(accept_of("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn a_connect_becomes_the_opening_handshake_and_its_101_a_200() {
        let mut req = Request::builder().method(Method::CONNECT).header("sec-websocket-version", "13").header("sec-websocket-protocol", "chat").body(()).unwrap();
        req.extensions_mut().insert(hyper::ext::Protocol::from_static("websocket"));
        to_upgrade(&mut req, *b"the sample nonce");
        let expected = req.extensions().get::<Expected>().unwrap().0.clone();
        assert_eq!(req.method(), Method::GET);
        assert!(req.extensions().get::<hyper::ext::Protocol>().is_none());
        let headers = req.headers();
        assert_eq!(headers[&SEC_WEBSOCKET_KEY], "dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(expected, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!((&headers[header::UPGRADE], &headers[header::CONNECTION]), (&HeaderValue::from_static("websocket"), &HeaderValue::from_static("upgrade")));
        assert_eq!(headers["sec-websocket-protocol"], "chat");

        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert("sec-websocket-protocol", HeaderValue::from_static("chat"));
        assert!(!answers(&h, &expected));
        h.insert(SEC_WEBSOCKET_ACCEPT.clone(), HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAAAAAAA="));
        assert!(!answers(&h, &expected));
        h.insert(SEC_WEBSOCKET_ACCEPT.clone(), HeaderValue::from_static("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        assert!(answers(&h, &expected));
        let mut status = StatusCode::SWITCHING_PROTOCOLS;
        to_h2_answer(&mut status, &mut h);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["sec-websocket-protocol"], "chat");
    }
}
