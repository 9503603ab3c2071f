//! The PROXY protocol (HAProxy's proxy-protocol.txt): v1 is one text line, v2 a binary header.
//!
//! Sent: the header Fulcrum writes to a server first on each connection (`proxy_protocol = "v1" |
//! "v2"`), so the server sees the client's address and the address the client connected to, for
//! TCP over IPv4 or IPv6; when the two are of different families the IPv4 one is written as
//! IPv4-mapped IPv6. A health check's connection carries no client: it sends `local`.
//!
//! Received: with `accept_proxy`, the header a trusted proxy sends first (`parse`, `receive`). A
//! v1 line is at most 107 bytes; a v2 header's variable part is held to `MAX_V2_BODY` bytes (the
//! addresses plus room for TLVs, which are skipped), so a header costs at most 528 bytes. LOCAL
//! (v2) and UNKNOWN (v1) headers, and address families other than TCP over IP, leave the
//! connection's own peer address in place.
//!
//! A wire format with no state of its own, below the data path: the data path (`proxy`) sends
//! and receives it, the health checks send `local`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::config::ProxyProtocol;

/// v2's fixed signature.
const V2_SIGNATURE: [u8; 12] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A];

/// The header for a connection from `client` to `local` (Fulcrum's listening address).
pub fn header(version: ProxyProtocol, client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let (src, dst) = same_family(client.ip(), local.ip());
    match version {
        ProxyProtocol::V1 => {
            let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
            format!("PROXY {family} {src} {dst} {} {}\r\n", client.port(), local.port()).into_bytes()
        }
        ProxyProtocol::V2 => {
            let mut h = V2_SIGNATURE.to_vec();
            // Version 2, command PROXY.
            h.push(0x21);
            match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    // TCP over IPv4; 12 bytes of addresses and ports.
                    h.extend_from_slice(&[0x11, 0, 12]);
                    h.extend_from_slice(&s.octets());
                    h.extend_from_slice(&d.octets());
                }
                (s, d) => {
                    // TCP over IPv6; 36 bytes.
                    h.extend_from_slice(&[0x21, 0, 36]);
                    h.extend_from_slice(&v6(s).octets());
                    h.extend_from_slice(&v6(d).octets());
                }
            }
            h.extend_from_slice(&client.port().to_be_bytes());
            h.extend_from_slice(&local.port().to_be_bytes());
            h
        }
    }
}

/// The header of a connection Fulcrum opens for itself (a health check): v1's UNKNOWN, v2's
/// LOCAL command with no addresses; the server keeps the connection's own addresses.
pub fn local(version: ProxyProtocol) -> &'static [u8] {
    const V2_LOCAL: [u8; 16] = {
        let mut h = [0u8; 16];
        let mut i = 0;
        while i < V2_SIGNATURE.len() {
            h[i] = V2_SIGNATURE[i];
            i += 1;
        }
        // Version 2, command LOCAL; family UNSPEC; no address bytes.
        h[12] = 0x20;
        h
    };
    match version {
        ProxyProtocol::V1 => b"PROXY UNKNOWN\r\n",
        ProxyProtocol::V2 => &V2_LOCAL,
    }
}

/// Longest v1 line, CRLF included (the specification's own bound).
pub const MAX_V1: usize = 107;
/// Longest v2 variable part accepted: 36 bytes of IPv6 addresses and ports plus TLVs.
pub const MAX_V2_BODY: usize = 512;

/// What a received header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A proxied connection: the client's address and the one it connected to.
    Proxied { client: SocketAddr, local: SocketAddr },
    /// The proxy's own connection (v2 LOCAL, v1 UNKNOWN, a family other than TCP over IP).
    Local,
}

/// Why a received header is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("no PROXY protocol header")]
    NotProxy,
    #[error("malformed PROXY v1 header: {0}")]
    V1(&'static str),
    #[error("malformed PROXY v2 header: {0}")]
    V2(&'static str),
}

/// Parses a header at the start of `buf`: `Ok(None)` when `buf` is a beginning of one that needs
/// more bytes, else what it says and its length.
pub fn parse(buf: &[u8]) -> Result<Option<(Received, usize)>, HeaderError> {
    const V1_START: &[u8] = b"PROXY ";
    if buf.len() < V2_SIGNATURE.len() && V2_SIGNATURE.starts_with(buf) {
        return Ok(None);
    }
    if buf.starts_with(&V2_SIGNATURE) {
        return parse_v2(buf);
    }
    if buf.len() < V1_START.len() {
        return if V1_START.starts_with(buf) { Ok(None) } else { Err(HeaderError::NotProxy) };
    }
    if !buf.starts_with(V1_START) {
        return Err(HeaderError::NotProxy);
    }
    parse_v1(buf)
}

fn parse_v1(buf: &[u8]) -> Result<Option<(Received, usize)>, HeaderError> {
    let window = &buf[..buf.len().min(MAX_V1)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() >= MAX_V1 { Err(HeaderError::V1("no CRLF within 107 bytes")) } else { Ok(None) };
    };
    let line = std::str::from_utf8(&buf[..end]).map_err(|_| HeaderError::V1("not ASCII"))?;
    let mut words = line.split(' ');
    let (_proxy, family) = (words.next(), words.next());
    let len = end + 2;
    let received = match family {
        Some("UNKNOWN") => Received::Local,
        Some(f @ ("TCP4" | "TCP6")) => {
            let (src, dst, sport, dport) = (words.next(), words.next(), words.next(), words.next());
            if words.next().is_some() {
                return Err(HeaderError::V1("more than six fields"));
            }
            let ip = |w: Option<&str>| -> Result<IpAddr, HeaderError> {
                let w = w.ok_or(HeaderError::V1("missing an address"))?;
                if f == "TCP4" { w.parse::<Ipv4Addr>().map(IpAddr::V4) } else { w.parse::<Ipv6Addr>().map(IpAddr::V6) }
                    .map_err(|_| HeaderError::V1("an address of the wrong family"))
            };
            let port = |w: Option<&str>| -> Result<u16, HeaderError> {
                let w = w.ok_or(HeaderError::V1("missing a port"))?;
                // Decimal digits only: from_str would also take a sign.
                if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(HeaderError::V1("a port is not a number"));
                }
                w.parse().map_err(|_| HeaderError::V1("a port above 65535"))
            };
            let (src, dst) = (ip(src)?, ip(dst)?);
            Received::Proxied { client: SocketAddr::new(src, port(sport)?), local: SocketAddr::new(dst, port(dport)?) }
        }
        _ => return Err(HeaderError::V1("the protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    Ok(Some((received, len)))
}

fn parse_v2(buf: &[u8]) -> Result<Option<(Received, usize)>, HeaderError> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0F);
    if version != 2 {
        return Err(HeaderError::V2("version is not 2"));
    }
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if body > MAX_V2_BODY {
        return Err(HeaderError::V2("longer than 512 bytes"));
    }
    let len = 16 + body;
    if buf.len() < len {
        return Ok(None);
    }
    let a = &buf[16..len];
    let received = match (command, buf[13]) {
        (0, _) => Received::Local,
        (1, 0x11) if body >= 12 => {
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(a[o], a[o + 1], a[o + 2], a[o + 3]));
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            Received::Proxied { client: SocketAddr::new(ip(0), port(8)), local: SocketAddr::new(ip(4), port(10)) }
        }
        (1, 0x21) if body >= 36 => {
            let ip = |o: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&a[o..o + 16]).unwrap_or([0; 16])));
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            Received::Proxied { client: SocketAddr::new(ip(0), port(32)), local: SocketAddr::new(ip(16), port(34)) }
        }
        (1, 0x11 | 0x21) => return Err(HeaderError::V2("too short for its addresses")),
        // UNSPEC, UDP and UNIX: the specification says to keep the connection's own addresses.
        (1, 0x00 | 0x12 | 0x22 | 0x31 | 0x32) => Received::Local,
        (1, _) => return Err(HeaderError::V2("an unknown address family")),
        _ => return Err(HeaderError::V2("the command is neither LOCAL nor PROXY")),
    };
    Ok(Some((received, len)))
}

/// Why a connection's header was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error("no complete PROXY header within {0:?}")]
    Timeout(Duration),
    /// Closed before its first byte: a proxy's TCP health check or a port probe, not a refusal.
    #[error("closed before sending anything")]
    Empty,
    #[error("reading the PROXY header: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads the header a proxy sends first on `stream`, within `limit`, and nothing after it: 15
/// bytes (no header is shorter), then the rest of a v2 header by its length, or a v1 line byte by
/// byte up to its CRLF.
pub async fn receive(stream: &mut TcpStream, limit: Duration) -> Result<Received, ReceiveError> {
    let read = async {
        let mut buf = [0u8; 16 + MAX_V2_BODY];
        let mut have = stream.read(&mut buf[..15]).await?;
        if have == 0 {
            return Err(ReceiveError::Empty);
        }
        stream.read_exact(&mut buf[have..15]).await?;
        have = 15;
        loop {
            match parse(&buf[..have])? {
                Some((received, len)) if len == have => return Ok(received),
                Some(_) => return Err(HeaderError::NotProxy.into()),
                None => {}
            }
            // What a v2 header still needs, else one byte of a v1 line.
            let want = if buf.starts_with(&V2_SIGNATURE) && have >= 16 { 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]])) } else { have + 1 };
            stream.read_exact(&mut buf[have..want]).await?;
            have = want;
        }
    };
    tokio::time::timeout(limit, read).await.map_err(|_| ReceiveError::Timeout(limit))?
}

fn v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Both addresses in one family: as they are when they share it, else both IPv6.
fn same_family(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    match (a, b) {
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => (a, b),
        _ => (IpAddr::V6(v6(a)), IpAddr::V6(v6(b))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_is_one_line_per_the_specification() {
        let h = header(ProxyProtocol::V1, "192.0.2.1:56324".parse().unwrap(), "198.51.100.7:443".parse().unwrap());
        assert_eq!(h, b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n");
        let h = header(ProxyProtocol::V1, "[2001:db8::1]:1000".parse().unwrap(), "127.0.0.1:80".parse().unwrap());
        assert_eq!(String::from_utf8(h).unwrap(), "PROXY TCP6 2001:db8::1 ::ffff:127.0.0.1 1000 80\r\n");
    }

    #[test]
    fn what_is_sent_is_read_back() {
        for version in [ProxyProtocol::V1, ProxyProtocol::V2] {
            for (client, local) in [("192.0.2.1:56324", "198.51.100.7:443"), ("[2001:db8::1]:1", "[::1]:2")] {
                let (client, local): (SocketAddr, SocketAddr) = (client.parse().unwrap(), local.parse().unwrap());
                let h = header(version, client, local);
                assert_eq!(parse(&h), Ok(Some((Received::Proxied { client, local }, h.len()))), "{version:?}");
                for cut in 0..h.len() {
                    assert_eq!(parse(&h[..cut]), Ok(None), "{version:?} cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn bad_headers_are_refused_with_a_reason() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(HeaderError::NotProxy));
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Ok(Some((Received::Local, 15))));
        assert!(matches!(parse(b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n"), Err(HeaderError::V1(_))));
        assert!(matches!(parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n"), Err(HeaderError::V1(_))));
        assert!(matches!(parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 70000\r\n"), Err(HeaderError::V1(_))));
        assert!(matches!(parse(&[b"PROXY TCP4 ".as_slice(), &[b'1'; 100]].concat()), Err(HeaderError::V1(_))));
        let mut v2 = V2_SIGNATURE.to_vec();
        v2.extend_from_slice(&[0x21, 0x11, 0x02, 0x01]);
        assert_eq!(parse(&v2), Err(HeaderError::V2("longer than 512 bytes")));
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(parse(&local), Ok(Some((Received::Local, 16))));
    }

    #[test]
    fn a_checks_header_says_it_carries_no_client() {
        for version in [ProxyProtocol::V1, ProxyProtocol::V2] {
            let h = local(version);
            assert_eq!(parse(h), Ok(Some((Received::Local, h.len()))), "{version:?}");
        }
        assert_eq!(local(ProxyProtocol::V2)[12..], [0x20, 0, 0, 0]);
    }

    #[test]
    fn v2_carries_family_length_addresses_and_ports() {
        let h = header(ProxyProtocol::V2, "192.0.2.1:56324".parse().unwrap(), "198.51.100.7:443".parse().unwrap());
        assert_eq!(&h[..12], &V2_SIGNATURE);
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..24], &[192, 0, 2, 1, 198, 51, 100, 7]);
        assert_eq!(&h[24..], &[0xDC, 0x04, 0x01, 0xBB]);
        let h = header(ProxyProtocol::V2, "[2001:db8::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap());
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
    }
}
