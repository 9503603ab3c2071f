//! The few FTP control-channel texts Fulcrum reads and rewrites: `PORT` and `EPRT` (RFC 959,
//! RFC 2428) from clients, `227` and `229` replies from servers. Pure functions over byte lines,
//! so every parser is tested here and none can panic on what a peer sends.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

/// The command verb of a client line, upper-cased (`b"port 1,2"` -> `"PORT"`), and its argument.
pub fn split_command(line: &[u8]) -> (String, &[u8]) {
    let end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    let verb = String::from_utf8_lossy(&line[..end]).to_ascii_uppercase();
    let arg = line.get(end + 1..).unwrap_or(&[]);
    (verb, arg)
}

/// `h1,h2,h3,h4,p1,p2` as an IPv4 socket address.
pub fn parse_host_port(text: &[u8]) -> Option<SocketAddrV4> {
    let text = std::str::from_utf8(text).ok()?.trim();
    let n: Vec<u8> = text.split(',').map(|x| x.trim().parse::<u8>()).collect::<Result<_, _>>().ok()?;
    let [a, b, c, d, p1, p2] = n.as_slice() else { return None };
    let port = u16::from(*p1) << 8 | u16::from(*p2);
    (port != 0).then(|| SocketAddrV4::new(Ipv4Addr::new(*a, *b, *c, *d), port))
}

pub fn format_host_port(addr: SocketAddrV4) -> String {
    let [a, b, c, d] = addr.ip().octets();
    format!("{a},{b},{c},{d},{},{}", addr.port() >> 8, addr.port() & 0xff)
}

/// An `EPRT` argument: `<d>1<d>addr<d>port<d>` with any delimiter `d` (RFC 2428).
#[derive(Debug, PartialEq, Eq)]
pub enum Eprt {
    Addr(SocketAddr),
    /// A protocol number other than 1 (IPv4) or 2 (IPv6): answered 522.
    UnknownFamily,
}

pub fn parse_eprt(text: &[u8]) -> Option<Eprt> {
    let text = std::str::from_utf8(text).ok()?.trim();
    let delim = text.chars().next()?;
    if !(33..=126).contains(&(delim as u32)) {
        return None;
    }
    let parts: Vec<&str> = text.split(delim).collect();
    let ["", family, addr, port, ""] = parts.as_slice() else { return None };
    let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
    let ip: IpAddr = match *family {
        "1" => IpAddr::V4(addr.parse().ok()?),
        "2" => IpAddr::V6(addr.parse().ok()?),
        _ => return Some(Eprt::UnknownFamily),
    };
    Some(Eprt::Addr(SocketAddr::new(ip, port)))
}

pub fn format_eprt(addr: SocketAddr) -> String {
    let family = if addr.is_ipv4() { 1 } else { 2 };
    format!("|{family}|{}|{}|", addr.ip(), addr.port())
}

/// The address in a `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2).` reply: the six numbers
/// after the first digit, as RFC 1123 tells clients to scan for them.
pub fn parse_227(line: &[u8]) -> Option<SocketAddrV4> {
    let rest = line.get(4..)?;
    let start = rest.iter().position(u8::is_ascii_digit)?;
    let len = rest[start..].iter().position(|b| !(b.is_ascii_digit() || *b == b',' || *b == b' ')).unwrap_or(rest.len() - start);
    parse_host_port(&rest[start..start + len])
}

pub fn format_227(addr: SocketAddrV4) -> String {
    format!("227 Entering Passive Mode ({}).", format_host_port(addr))
}

/// The port in a `229 Entering Extended Passive Mode (|||port|)` reply.
pub fn parse_229(line: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(line).ok()?;
    let open = text.find('(')?;
    let close = open + text[open..].find(')')?;
    let inner = &text[open + 1..close];
    let delim = inner.chars().next()?;
    let parts: Vec<&str> = inner.split(delim).collect();
    let ["", "", "", port, ""] = parts.as_slice() else { return None };
    port.parse().ok().filter(|&p| p != 0)
}

pub fn format_229(port: u16) -> String {
    format!("229 Entering Extended Passive Mode (|||{port}|)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commands_split_case_insensitively() {
        assert_eq!(split_command(b"port 127,0,0,1,4,1"), ("PORT".to_string(), &b"127,0,0,1,4,1"[..]));
        assert_eq!(split_command(b"PASV"), ("PASV".to_string(), &b""[..]));
        assert_eq!(split_command(b""), (String::new(), &b""[..]));
    }

    #[test]
    fn port_arguments_round_trip() {
        let a = parse_host_port(b"127,0,0,12,195,80").unwrap();
        assert_eq!(a, "127.0.0.12:50000".parse().unwrap());
        assert_eq!(format_host_port(a), "127,0,0,12,195,80");
        for bad in [&b"127,0,0,1,0,0"[..], b"1,2,3,4,5", b"256,0,0,1,1,1", b"a,b,c,d,e,f", b"1,2,3,4,5,6,7", b""] {
            assert_eq!(parse_host_port(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn eprt_arguments_parse_with_any_delimiter() {
        assert_eq!(parse_eprt(b"|1|132.235.1.2|6275|"), Some(Eprt::Addr("132.235.1.2:6275".parse().unwrap())));
        assert_eq!(parse_eprt(b"!2!::1!5282!"), Some(Eprt::Addr("[::1]:5282".parse().unwrap())));
        assert_eq!(parse_eprt(b"|3|x|1|"), Some(Eprt::UnknownFamily));
        assert_eq!(parse_eprt(b"|1|::1|80|"), None);
        assert_eq!(parse_eprt(b"|1|1.2.3.4|0|"), None);
        assert_eq!(parse_eprt(b"|1|1.2.3.4|80"), None);
        assert_eq!(format_eprt("[::1]:21".parse().unwrap()), "|2|::1|21|");
    }

    #[test]
    fn passive_replies_parse_as_servers_write_them() {
        assert_eq!(parse_227(b"227 Entering Passive Mode (127,0,0,1,117,49)."), Some("127.0.0.1:30001".parse().unwrap()));
        assert_eq!(parse_227(b"227 Entering passive mode 10,0,0,5,4,1"), Some("10.0.0.5:1025".parse().unwrap()));
        assert_eq!(parse_227(b"227 =127,0,0,1,117,49"), Some("127.0.0.1:30001".parse().unwrap()));
        assert_eq!(parse_227(b"227 nothing here"), None);
        assert_eq!(parse_229(b"229 Entering Extended Passive Mode (|||30002|)"), Some(30002));
        assert_eq!(parse_229(b"229 Entering Extended Passive Mode (!!!30002!)"), Some(30002));
        assert_eq!(parse_229(b"229 (|||0|)"), None);
        assert_eq!(parse_229(b"229 no parens"), None);
        assert_eq!(format_227("127.0.0.1:30001".parse().unwrap()), "227 Entering Passive Mode (127,0,0,1,117,49).");
        assert_eq!(format_229(50001), "229 Entering Extended Passive Mode (|||50001|)");
    }

    proptest! {
        #[test]
        fn no_line_panics_a_parser(line in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = split_command(&line);
            let _ = parse_host_port(&line);
            let _ = parse_eprt(&line);
            let _ = parse_227(&line);
            let _ = parse_229(&line);
        }

        #[test]
        fn formatted_addresses_parse_back(a in any::<[u8; 4]>(), port in 1u16..) {
            let addr = SocketAddrV4::new(Ipv4Addr::from(a), port);
            prop_assert_eq!(parse_227(format_227(addr).as_bytes()), Some(addr));
            prop_assert_eq!(parse_host_port(format_host_port(addr).as_bytes()), Some(addr));
            prop_assert_eq!(parse_eprt(format_eprt(SocketAddr::V4(addr)).as_bytes()), Some(Eprt::Addr(SocketAddr::V4(addr))));
            prop_assert_eq!(parse_229(format_229(port).as_bytes()), Some(port));
        }
    }
}
