//! What to hash, apart from how to map it (`maglev.rs`): each key extractor turns a request fact
//! into a 64-bit hash that is the same in every process and every build, so several Fulcrum
//! instances in front of one pool agree. xxh3 with fixed seeds; never std's `DefaultHasher`,
//! whose output may change between Rust releases.

use std::net::IpAddr;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seeds of the key hashes and the Maglev permutation, fixed forever: changing one moves clients.
pub const KEY_SEED: u64 = 0x6675_6c63_7275_6d31; // "fulcrum1"
pub const OFFSET_SEED: u64 = 0x6d61_676c_6576_6f66; // "maglevof"
pub const SKIP_SEED: u64 = 0x6d61_676c_6576_736b; // "maglevsk"
pub const RAMP_SEED: u64 = 0x736c_6f77_7374_7274; // "slowstrt"

/// The source-hash key: the client's address. An IPv4-mapped IPv6 address hashes as its IPv4 form,
/// so a dual-stack listener keeps a client on one server whichever way it arrives.
pub fn client_ip(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => hash_bytes(&v4.octets()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => hash_bytes(&v4.octets()),
            None => hash_bytes(&v6.octets()),
        },
    }
}

/// Whether a key is among the `ramp` thousandths of keys a slow-starting server takes: the same
/// answer for the same key in every process, and a key admitted at one ramp is admitted at every
/// higher one, so keys move to a returning server gradually and never back and forth.
pub fn admitted(hash: u64, ramp: u32) -> bool {
    ramp >= super::RAMP_FULL || xxh3_64_with_seed(&hash.to_le_bytes(), RAMP_SEED) % u64::from(super::RAMP_FULL) < u64::from(ramp)
}

pub fn hash_bytes(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, KEY_SEED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ipv6_hashes_as_ipv4() {
        let v4: IpAddr = "127.0.0.11".parse().unwrap();
        let v6: IpAddr = "::ffff:127.0.0.11".parse().unwrap();
        assert_eq!(client_ip(v4), client_ip(v6));
    }

    #[test]
    fn hashes_are_stable_across_builds() {
        // Pinned: if this changes, every deployed source-hash mapping moves.
        assert_eq!(hash_bytes(b""), xxh3_64_with_seed(b"", KEY_SEED));
        assert_ne!(client_ip("127.0.0.11".parse().unwrap()), client_ip("127.0.0.12".parse().unwrap()));
    }
}
