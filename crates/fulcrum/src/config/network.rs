//! An IP network written `address/prefix` (`10.0.0.0/8`, `2001:db8::/32`; a bare address is one
//! host): the sources `trusted_proxies` accepts a PROXY protocol header from.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::NetworkError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (net, ip, width) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(n.to_bits()), u128::from(i.to_bits()), 32),
            (IpAddr::V6(n), IpAddr::V6(i)) => (n.to_bits(), i.to_bits(), 128),
            // A v4 client of a v6 listener arrives mapped: compare it as v4.
            (IpAddr::V4(_), IpAddr::V6(i)) => return i.to_ipv4_mapped().is_some_and(|v4| self.contains(IpAddr::V4(v4))),
            (IpAddr::V6(_), IpAddr::V4(_)) => return false,
        };
        // The bits below the prefix do not count.
        let shift = width - u32::from(self.prefix);
        shift >= 128 || net >> shift == ip >> shift
    }
}

impl FromStr for Network {
    type Err = NetworkError;
    fn from_str(s: &str) -> Result<Network, NetworkError> {
        let (addr, prefix) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.parse().map_err(|_| NetworkError::NotANetwork { text: s.to_string() })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| NetworkError::Prefix { text: s.to_string(), max })?,
        };
        Ok(Network { addr, prefix })
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_hold_what_their_prefix_says() {
        let n: Network = "10.1.0.0/16".parse().unwrap();
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.0.9".parse().unwrap()), "a mapped v4 client");
        assert!(!n.contains("2001:db8::1".parse().unwrap()));
        let host: Network = "127.0.0.1".parse().unwrap();
        assert!(host.contains("127.0.0.1".parse().unwrap()) && !host.contains("127.0.0.2".parse().unwrap()));
        let v6: Network = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()) && !v6.contains("2001:db9::1".parse().unwrap()));
        let all: Network = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "nope/8", "10.0.0.0/", "10.0.0.0/x"] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
        assert_eq!("10.1.0.0/16".parse::<Network>().unwrap().to_string(), "10.1.0.0/16");
    }
}
