//! The PROXY protocol header Fulcrum sends a server first on each connection
//! (`proxy_protocol = "v1" | "v2"`), so the server sees the client's address and the address the
//! client connected to. HAProxy's specification (proxy-protocol.txt): v1 is one text line, v2 a
//! binary header; both for TCP over IPv4 or IPv6. When the two addresses are of different
//! families the IPv4 one is written as IPv4-mapped IPv6.

use std::net::{IpAddr, SocketAddr};

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
