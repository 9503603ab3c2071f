//! TLS pass-through with SNI routing (TCP mode with `[[service.route]] sni`): the client's
//! ClientHello is read, not answered, for the server name it asks for; the route that names it
//! picks the pool, and the hello's bytes go to the chosen server ahead of the rest of the
//! connection, so the server runs the handshake with its own certificate (HAProxy's
//! `req.ssl_sni`).
//!
//! rustls's `Acceptor` parses the hello (across records, as a client may split it), so no TLS
//! parser of our own sees client bytes. What a client can make Fulcrum hold here is bounded: at
//! most `MAX_HELLO` bytes, for at most `HELLO_TIMEOUT`, then the bytes go on and the buffer is
//! freed.

use std::time::Duration;

use rustls::server::Acceptor;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::config::Route;

/// The most bytes read while waiting for a complete ClientHello: a full TLS record (a hello with
/// post-quantum key shares is under 2 KiB).
pub const MAX_HELLO: usize = 16 * 1024;

/// Longest wait for a complete ClientHello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A client's ClientHello: the bytes read (to send on) and the server name it asks for.
#[derive(Debug)]
pub struct Hello {
    pub bytes: Vec<u8>,
    pub server_name: Option<String>,
}

/// Why a connection's hello was not read.
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
    /// Closed before its first byte: a TCP health check or a port probe, not a refusal.
    #[error("closed before sending anything")]
    Empty,
    #[error("not a TLS ClientHello: {0}")]
    NotTls(rustls::Error),
    #[error("closed in the middle of its ClientHello")]
    Closed,
    #[error("no complete ClientHello within {MAX_HELLO} bytes")]
    TooLong,
    #[error("no complete ClientHello within {0:?}")]
    Timeout(Duration),
    #[error("reading the ClientHello: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads `stream` until a whole ClientHello is in, within `limit`.
pub async fn read_hello(stream: &mut TcpStream, limit: Duration) -> Result<Hello, HelloError> {
    tokio::time::timeout(limit, read(stream)).await.map_err(|_| HelloError::Timeout(limit))?
}

async fn read(stream: &mut TcpStream) -> Result<Hello, HelloError> {
    let mut acceptor = Acceptor::default();
    let mut bytes = Vec::with_capacity(2048);
    loop {
        let room = MAX_HELLO - bytes.len();
        if room == 0 {
            return Err(HelloError::TooLong);
        }
        let before = bytes.len();
        let n = (&mut *stream).take(room as u64).read_buf(&mut bytes).await?;
        if n == 0 {
            return Err(if before == 0 { HelloError::Empty } else { HelloError::Closed });
        }
        if let Some(hello) = feed(&mut acceptor, &bytes, before)? {
            return Ok(Hello { bytes, server_name: hello });
        }
    }
}

/// Feeds `bytes[from..]` to `acceptor`: the server name once the hello is complete (`None`
/// inside when it names none), `None` while more is needed.
pub fn feed(acceptor: &mut Acceptor, bytes: &[u8], from: usize) -> Result<Option<Option<String>>, HelloError> {
    let mut fresh = &bytes[from..];
    while !fresh.is_empty() {
        // Takes what its buffer has room for; a hello that overflows it is too long.
        if acceptor.read_tls(&mut fresh).map_err(|_| HelloError::TooLong)? == 0 {
            return Err(HelloError::TooLong);
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => Ok(Some(accepted.client_hello().server_name().map(str::to_ascii_lowercase))),
        Ok(None) => Ok(None),
        Err((e, _alert)) => Err(HelloError::NotTls(e)),
    }
}

/// The server name in `bytes` when they hold a whole ClientHello: what the fuzz target drives.
pub fn server_name(bytes: &[u8]) -> Result<Option<Option<String>>, HelloError> {
    if bytes.len() > MAX_HELLO {
        return Err(HelloError::TooLong);
    }
    feed(&mut Acceptor::default(), bytes, 0)
}

/// The first route whose `sni` holds `name` (see [`serves`]). A hello without a name matches no
/// route.
pub fn route<'a>(routes: &'a [Route], name: Option<&str>) -> Option<&'a str> {
    let name = name?;
    routes.iter().find(|r| serves(r, name)).and_then(|r| r.pool.as_deref())
}

/// Whether `route`'s `sni` holds `name`.
pub fn serves(route: &Route, name: &str) -> bool {
    names_match(&route.when.sni, name)
}

/// Whether `name` is among `names`: equal ignoring case, or `*.parent` with `name` one label
/// under `parent`.
pub fn names_match(names: &[String], name: &str) -> bool {
    let parent = name.split_once('.').map(|(_, p)| p);
    names.iter().any(|want| match want.strip_prefix("*.") {
        Some(wild) => parent.is_some_and(|p| p.eq_ignore_ascii_case(wild)),
        None => want.eq_ignore_ascii_case(name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes() -> Vec<Route> {
        toml::from_str::<toml::Table>(
            "[[route]]\npool = \"api\"\nsni = [\"API.example.com\"]\n[[route]]\npool = \"wild\"\nsni = [\"*.example.com\"]\n[[route]]\npool = \"other\"\nsni = [\"example.com\"]\n",
        )
        .unwrap()["route"]
            .clone()
            .try_into()
            .unwrap()
    }

    #[test]
    fn an_exact_name_wins_in_route_order_and_a_wildcard_covers_one_label() {
        let r = routes();
        assert_eq!(route(&r, Some("api.example.com")), Some("api"));
        assert_eq!(route(&r, Some("www.EXAMPLE.com")), Some("wild"));
        assert_eq!(route(&r, Some("example.com")), Some("other"));
        assert_eq!(route(&r, Some("a.b.example.com")), None);
        assert_eq!(route(&r, Some("example.org")), None);
        assert_eq!(route(&r, None), None);
    }

    /// A ClientHello as rustls's own client writes it, for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let roots = rustls::RootCertStore::empty();
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut client = rustls::ClientConnection::new(std::sync::Arc::new(config), name.to_string().try_into().unwrap()).unwrap();
        let mut out = Vec::new();
        client.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn the_server_name_is_read_from_a_whole_hello_and_more_is_asked_for_a_part() {
        let hello = client_hello("Shop.Example.com");
        assert_eq!(server_name(&hello).unwrap(), Some(Some("shop.example.com".into())));
        assert_eq!(server_name(&hello[..hello.len() / 2]).unwrap(), None);
        // The same hello arriving in pieces.
        let mut acceptor = Acceptor::default();
        let cut = 7;
        assert_eq!(feed(&mut acceptor, &hello[..cut], 0).unwrap(), None);
        assert_eq!(feed(&mut acceptor, &hello, cut).unwrap(), Some(Some("shop.example.com".into())));
    }

    #[test]
    fn bytes_that_are_not_tls_are_refused() {
        assert!(matches!(server_name(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), Err(HelloError::NotTls(_))));
    }
}
