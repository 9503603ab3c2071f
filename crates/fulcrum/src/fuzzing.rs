//! The entry points of the fuzz targets (`fuzz/` at the repository root) and of the test that
//! replays their corpora on stable (`tests/fast/fuzz_corpora.rs`): one function per target, taking the
//! raw input, so both call the very same code and the parsers stay crate-private.
//!
//! Each function feeds peer- or user-controlled bytes to one parser the way the process does, and
//! asserts the invariants that must hold whatever the bytes are; a broken invariant panics, which
//! is how libFuzzer (and the replay test) notice it. Not an API: hidden from the docs.

mod h1_differential;
mod h1_response;

use std::sync::OnceLock;

use serde::Deserialize;

use crate::config::{self, Algorithm, Change, Config, Health, Resolve, ServerAdmin, ServiceSettings};
use crate::proxy::ftp::command::{self, Eprt};
use crate::proxy::http::guard::{Framing, Scan};

pub use h1_differential::h1_differential;
pub use h1_response::h1_response_differential;

/// The HTTP framing guard over a client stream delivered in pieces, as the socket delivers it.
///
/// The first byte says how many cuts (0 to 7) and the next that many bytes say where, so the
/// fuzzer explores partial heads, chunk-size lines and bodies split anywhere; the rest is the
/// stream. Invariants: a release is of at least one byte (zero would loop forever in the reader)
/// and never more than is pending; and, with no length limit in play, where the stream is cut
/// changes nothing: the bytes released and the refusal are those of the whole stream at once.
pub fn http_framing(data: &[u8]) {
    let Some((&cuts, rest)) = data.split_first() else { return };
    let cuts = usize::from(cuts % 8).min(rest.len());
    let (sizes, stream) = rest.split_at(cuts);
    for max_head in [64, 8192] {
        let whole = scan_in_pieces(stream, &[], max_head);
        let split = scan_in_pieces(stream, sizes, max_head);
        if max_head > stream.len() {
            // A line longer than the chunk-size line's own limit may pass whole and not in
            // pieces (it is refused as soon as it is seen too long); everything else agrees.
            let too_long = |r: &(usize, Option<String>)| r.1.as_deref() == Some("line too long");
            if !too_long(&whole) && !too_long(&split) {
                assert_eq!(whole, split, "cutting the stream at {sizes:?} changed the verdict");
            }
        }
    }
}

/// Feeds `stream` to a fresh `Framing` in pieces of the given sizes (then the rest), scanning after
/// each piece until it needs more; returns the bytes released and the refusal, if any.
fn scan_in_pieces(stream: &[u8], sizes: &[u8], max_head: usize) -> (usize, Option<String>) {
    let mut framing = Framing::new(max_head);
    let mut pending: Vec<u8> = Vec::new();
    let mut released = 0;
    let mut fed = 0;
    let pieces = sizes.iter().map(|&s| usize::from(s)).chain(std::iter::once(usize::MAX));
    for size in pieces {
        let end = fed + size.min(stream.len() - fed);
        pending.extend_from_slice(&stream[fed..end]);
        fed = end;
        loop {
            match framing.scan(&pending) {
                Scan::Release(n) => {
                    assert!(n > 0, "Release(0) with {} bytes pending: the reader would spin", pending.len());
                    assert!(n <= pending.len(), "Release({n}) with only {} bytes pending", pending.len());
                    pending.drain(..n);
                    released += n;
                }
                Scan::NeedMore => break,
                Scan::Bad(why) => return (released, Some(why.to_string())),
            }
        }
        if fed == stream.len() {
            break;
        }
    }
    assert!(released <= stream.len());
    (released, None)
}

/// An HTTP/2 request's method, target and fields through the conversion to HTTP/1.1 that a
/// request from an HTTP/2 client gets before it goes to a server (`proxy::http::convert`).
///
/// The input's first line is the method, the second the `:path`, and each further line a field
/// `name:value`; what `http` would not take as a method, target, name or value is left out, as
/// h2 would refuse it before Fulcrum sees it. Invariants: a request that passes has no value
/// with whitespace at an end, at most one `cookie` field, holding every cookie the client sent
/// in order, and the target `*` only with OPTIONS; and the HTTP/1.1 head written from it is one
/// head to the framing guard, never a line it refuses for its shape (folding, a bare CR or LF, a
/// line without a colon).
pub fn h2_to_h1(data: &[u8]) {
    use crate::proxy::http::convert;
    use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
    let mut lines = data.split(|&b| b == b'\n');
    let (Some(method), Some(path)) = (lines.next(), lines.next()) else { return };
    let Ok(method) = hyper::Method::from_bytes(method) else { return };
    // The asterisk form has no authority to go with it.
    let built = if path == b"*" { hyper::Uri::try_from(path).ok() } else { hyper::Uri::builder().scheme("http").authority("a").path_and_query(path).build().ok() };
    let Some(uri) = built else { return };
    let mut headers = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(&line[colon + 1..])) {
            headers.append(name, value);
        }
    }
    let cookies: Vec<Vec<u8>> = headers.get_all(header::COOKIE).iter().map(|v| v.as_bytes().to_vec()).collect();
    let asterisk = convert::target_problem(&method, &uri);
    assert_eq!(asterisk.is_some(), uri.path() == "*" && method != hyper::Method::OPTIONS);
    if asterisk.is_some() || convert::h2_fields_to_h1(&mut headers).is_err() {
        return;
    }
    for (name, value) in &headers {
        let v = value.as_bytes();
        assert!(!v.starts_with(b" ") && !v.starts_with(b"\t") && !v.ends_with(b" ") && !v.ends_with(b"\t"), "{name}: {value:?} passed");
    }
    let joined: Vec<&HeaderValue> = headers.get_all(header::COOKIE).iter().collect();
    assert!(joined.len() <= 1, "{} cookie fields", joined.len());
    if let Some(one) = joined.first() {
        assert_eq!(one.as_bytes(), cookies.join(&b"; "[..]).as_slice(), "the cookies joined out of order or changed");
    }
    let mut head = format!("{method} {} HTTP/1.1\r\nhost: a\r\n", uri.path_and_query().map_or("/", |p| p.as_str())).into_bytes();
    for (name, value) in &headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    match Framing::new(head.len() + 1).scan(&head) {
        Scan::Release(n) => assert_eq!(n, head.len(), "the converted head is not one head"),
        Scan::NeedMore => panic!("the converted head is not complete"),
        Scan::Bad(why) => {
            use crate::proxy::http::guard::Refusal::*;
            assert!(!matches!(why, Folding | BareCr | BareLf | NoColon | LineTooLong), "the converted head is refused for its shape: {why}");
        }
    }
}

/// The FTP control-channel parsers over every line of the input, both ways (client commands and
/// server replies). Invariants: no panic, and whatever address or port a parser finds, the text
/// Fulcrum writes for it parses back to the same value.
pub fn ftp_control(data: &[u8]) {
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (verb, arg) = command::split_command(line);
        // The verb is text (bytes that are not UTF-8 become U+FFFD), the argument the line's own bytes.
        assert!(arg.len() < line.len() || (arg.is_empty() && line.is_empty()));
        assert!(!verb.contains(' '));
        for text in [arg, line] {
            if let Some(a) = command::parse_host_port(text) {
                assert_eq!(command::parse_host_port(command::format_host_port(a).as_bytes()), Some(a));
            }
            if let Some(Eprt::Addr(a)) = command::parse_eprt(text) {
                assert_eq!(command::parse_eprt(command::format_eprt(a).as_bytes()), Some(Eprt::Addr(a)));
            }
        }
        if let Some(a) = command::parse_227(line) {
            assert_ne!(a.port(), 0);
            assert_eq!(command::parse_227(command::format_227(a).as_bytes()), Some(a));
        }
        if let Some(p) = command::parse_229(line) {
            assert_ne!(p, 0);
            assert_eq!(command::parse_229(command::format_229(p).as_bytes()), Some(p));
        }
    }
}

/// A config file's text through parsing and validation, as `fulcrum check` reads it (host names
/// not resolved, so a run never waits on DNS). Invariants: no panic, every error can be printed,
/// and a config that passes reads back the same once written as TOML (what `save` relies on).
pub fn config_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match config::parse_with(text, "fuzz.toml", Resolve::No) {
        Ok(c) => assert_round_trip(&c),
        Err(problems) => assert!(!problems.to_string().is_empty()),
    }
}

/// One admin API call, as JSON: `{"service": S, "address": A, "route": {ROUTE: BODY}}` where
/// ROUTE names a change route of `admin::api` and BODY is that route's JSON body, read with the
/// same types the API reads it with. The change is applied to a copy of a valid config and the
/// result validated as the running process does. Invariants: no panic, and a change that passes
/// reads back the same once written as TOML.
pub fn admin_change(data: &[u8]) {
    let Ok(call) = serde_json::from_slice::<ApiCall>(data) else { return };
    let mut next = base_config().clone();
    if call.into_change().apply(&mut next).is_err() {
        return;
    }
    match config::parse_with(&config::to_toml(&next), "running config", Resolve::No) {
        Ok(read) => {
            assert_eq!(read, next, "a change that validates is not what was read back");
            assert_round_trip(&read);
        }
        Err(problems) => assert!(!problems.to_string().is_empty()),
    }
}

/// The address and service of an API call, and which route with which body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApiCall {
    service: String,
    #[serde(default)]
    address: String,
    route: Route,
}

/// The change routes of `admin::api` and their bodies (the same shapes and field types).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Route {
    State { state: ServerAdmin },
    Weight { weight: u32 },
    AddServer(config::Server),
    RemoveServer,
    Algorithm { algorithm: Algorithm },
    Health(Box<Health>),
    Settings(ServiceSettings),
    Start,
    Stop,
}

impl ApiCall {
    fn into_change(self) -> Change {
        let ApiCall { service, address, route } = self;
        match route {
            Route::State { state } => Change::ServerState { service, address, state },
            Route::Weight { weight } => Change::Weight { service, address, weight },
            Route::AddServer(server) => Change::AddServer { service, server },
            Route::RemoveServer => Change::RemoveServer { service, address },
            Route::Algorithm { algorithm } => Change::Algorithm { service, algorithm },
            Route::Health(health) => Change::Health { service, health },
            Route::Settings(settings) => Change::Settings { service, settings },
            Route::Start => Change::ServiceEnabled { service, enabled: true },
            Route::Stop => Change::ServiceEnabled { service, enabled: false },
        }
    }
}

/// What admin changes are applied to: one service per mode, and an HTTP service with a routed
/// pool, so `service/pool` names reach a pool.
const BASE_CONFIG: &str = r#"
[admin]
listen = "127.0.0.1:9090"

[[service]]
name = "web"
listen = "127.0.0.1:8080"
mode = "http"
algorithm = "least-conn"

[[service.server]]
address = "127.0.0.1:8081"

[[service.server]]
address = "127.0.0.1:8082"
weight = 3

[[service.pool]]
name = "static"
algorithm = "uri-hash"

[[service.pool.server]]
address = "127.0.0.1:8083"

[[service.route]]
pool = "static"
path_prefix = ["/static"]

[[service]]
name = "ftp"
listen = "127.0.0.1:2121"
mode = "ftp"
data_ports = "50000-50099"

[[service.server]]
address = "127.0.0.1:2122"

[[service]]
name = "tcp"
listen = "127.0.0.1:9000"

[[service.server]]
address = "127.0.0.1:9001"
backup = true

[[service.server]]
address = "127.0.0.1:9002"
"#;

fn base_config() -> &'static Config {
    static BASE: OnceLock<Config> = OnceLock::new();
    BASE.get_or_init(|| config::parse_with(BASE_CONFIG, "base", Resolve::No).unwrap_or_else(|e| panic!("the base config of admin_change is invalid: {e}")))
}

fn assert_round_trip(c: &Config) {
    let text = config::to_toml(c);
    match config::parse_with(&text, "written", Resolve::No) {
        Ok(again) => assert_eq!(&again, c, "a valid config reads back differently once written:\n{text}"),
        Err(problems) => panic!("a valid config is refused once written:\n{problems}\n{text}"),
    }
}

/// The PROXY protocol header parser (`accept_proxy`) over any bytes a trusted proxy's
/// connection could start with. Invariants: a header found is 15 to 528 bytes and within the
/// input; every shorter beginning of it asks for more (so `receive`, which reads it in pieces,
/// stops exactly at its end); and a header Fulcrum sends, for addresses taken from the input,
/// reads back as those addresses.
pub fn proxy_header(data: &[u8]) {
    use crate::proxy_header::{MAX_V2_BODY, Received, header, parse};
    if let Ok(Some((_, len))) = parse(data) {
        assert!((15..=16 + MAX_V2_BODY).contains(&len) && len <= data.len(), "a header of {len} bytes in {}", data.len());
        for cut in 0..len {
            assert_eq!(parse(&data[..cut]), Ok(None), "the first {cut} bytes of a {len}-byte header");
        }
    }
    if data.len() >= 37 {
        let v6 = |b: &[u8]| std::net::Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or([0; 16]));
        let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        let v4 = data[0] & 1 == 0;
        let ip = |b: &[u8]| if v4 { std::net::IpAddr::from([b[0], b[1], b[2], b[3]]) } else { std::net::IpAddr::V6(v6(b)) };
        let client = std::net::SocketAddr::new(ip(&data[1..17]), port(&data[33..35]));
        let local = std::net::SocketAddr::new(ip(&data[17..33]), port(&data[35..37]));
        for version in [config::ProxyProtocol::V1, config::ProxyProtocol::V2] {
            let h = header(version, client, local);
            assert_eq!(parse(&h), Ok(Some((Received::Proxied { client, local }, h.len()))), "{version:?} {client} {local}");
        }
    }
}

/// TLS pass-through's ClientHello reader (`[[service.route]] sni`) over any bytes a client can
/// send first. Invariants: nothing past `MAX_HELLO` is taken; the same bytes arriving in two
/// pieces (cut where the input's first byte says) give the same answer as all at once; and a
/// server name read routes without a panic.
pub fn client_hello(data: &[u8]) {
    use crate::proxy::passthrough::{MAX_HELLO, feed, route, server_name};
    let whole = server_name(data);
    if data.len() > MAX_HELLO {
        assert!(whole.is_err(), "{} bytes taken", data.len());
        return;
    }
    if let (Ok(Some(name)), Some(&first)) = (&whole, data.first()) {
        let cut = usize::from(first) % data.len();
        let mut acceptor = rustls::server::Acceptor::default();
        if matches!(feed(&mut acceptor, &data[..cut], 0), Ok(None)) {
            let late = feed(&mut acceptor, data, cut);
            assert_eq!(late.ok().flatten().as_ref(), Some(name), "the hello cut at {cut}");
        }
        let sni = vec!["*.example.com".to_string(), "example.com".to_string()];
        let routes = [config::Route { pool: Some("a".into()), when: config::Conditions { sni, ..Default::default() }, ..Default::default() }];
        let _ = route(&routes, name.as_deref());
    }
}

/// The gRPC health check's reading of a server's answer (`kind = "grpc"`), over any bytes a
/// server can send. Invariants: bytes after the first message frame change nothing, and the
/// check's own request, read back as a message, has no status field (its one field, the
/// service name, is skipped whole: the length the request writes is the length read).
pub fn grpc_health(data: &[u8]) {
    use crate::health::grpc::{frame, serving_status};
    let status = serving_status(data);
    if let Ok(status) = status {
        let mut longer = data.to_vec();
        longer.extend_from_slice(&[0x08, 0x05, 0xff]);
        assert_eq!(serving_status(&longer), Ok(status), "bytes after the frame changed the status");
    }
    let service = String::from_utf8_lossy(data);
    assert_eq!(serving_status(&frame(&service)), Ok(0), "the request for {service:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_config_of_admin_changes_is_valid() {
        assert_eq!(base_config().services.len(), 3);
    }

    #[test]
    fn api_calls_read_as_the_api_reads_their_bodies() {
        admin_change(br#"{"service": "web", "address": "127.0.0.1:8082", "route": {"weight": {"weight": 7}}}"#);
        admin_change(br#"{"service": "web/static", "route": {"add_server": {"address": "127.0.0.1:8084"}}}"#);
        let call: ApiCall = serde_json::from_slice(br#"{"service": "ftp", "route": "stop"}"#).unwrap();
        assert_eq!(call.into_change(), Change::ServiceEnabled { service: "ftp".into(), enabled: false });
    }

    #[test]
    fn framing_is_checked_in_pieces_and_whole() {
        http_framing(b"\x03\x05\x01\x10POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(scan_in_pieces(b"GET / HTTP/1.1\r\n\r\n", &[3, 3], 8192), (18, None));
    }
}
