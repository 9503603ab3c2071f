//! The Maglev lookup table (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016, section 3.4): each server fills the table's slots in the order of its own
//! permutation, taking turns, so every server owns about M/N slots and removing one server moves
//! little more than its own slots. The permutation depends only on the server's key, so two
//! processes with the same pool build the same table.
//!
//! Weights follow Envoy's `maglev_lb.cc`: in each round a server takes a turn only while its slot
//! count lags its weight share.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::key::{OFFSET_SEED, SKIP_SEED};

/// Table size: prime (so every skip generates a full permutation) and far above 100 x the
/// number of servers, which the paper gives for a spread within about 1% of even.
pub const TABLE_SIZE: usize = 65537;

/// The empty table (no server) maps nothing.
#[derive(Debug, Clone, Default)]
pub struct Maglev {
    table: Vec<u32>,
}

impl Maglev {
    /// Builds the table over `(key, weight)`; servers of weight 0 get no slot.
    pub fn build(servers: &[(&str, u32)]) -> Maglev {
        Self::with_size(servers, TABLE_SIZE)
    }

    fn with_size(servers: &[(&str, u32)], m: usize) -> Maglev {
        let live: Vec<(usize, u64, u64, f64)> = servers
            .iter()
            .enumerate()
            .filter(|(_, (_, w))| *w > 0)
            .map(|(i, (key, w))| {
                let offset = xxh3_64_with_seed(key.as_bytes(), OFFSET_SEED) % m as u64;
                let skip = xxh3_64_with_seed(key.as_bytes(), SKIP_SEED) % (m as u64 - 1) + 1;
                (i, offset, skip, *w as f64)
            })
            .collect();
        if live.is_empty() {
            return Maglev { table: Vec::new() };
        }
        let max_weight = live.iter().map(|s| s.3).fold(0.0, f64::max);
        let mut table = vec![u32::MAX; m];
        let mut next = vec![0u64; live.len()];
        let mut taken = vec![0f64; live.len()];
        let mut filled = 0;
        let mut round = 0f64;
        while filled < m {
            round += 1.0;
            for (k, &(index, offset, skip, weight)) in live.iter().enumerate() {
                // A lighter server skips this round while it is ahead of its weight share.
                if taken[k] >= round * weight / max_weight {
                    continue;
                }
                taken[k] += 1.0;
                loop {
                    let slot = ((offset + next[k] * skip) % m as u64) as usize;
                    next[k] += 1;
                    if table[slot] == u32::MAX {
                        table[slot] = index as u32;
                        filled += 1;
                        break;
                    }
                }
                if filled == m {
                    break;
                }
            }
        }
        Maglev { table }
    }

    pub fn lookup(&self, hash: u64) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        Some(self.table[(hash % self.table.len() as u64) as usize] as usize)
    }

    /// The slot a hash lands on and the server that owns it, for `/api/explain`.
    pub fn slot(&self, hash: u64) -> Option<(usize, usize)> {
        let m = self.table.len();
        (m > 0).then(|| {
            let slot = (hash % m as u64) as usize;
            (slot, self.table[slot] as usize)
        })
    }

    /// Like `lookup`, but walks forward from the hashed slot to the first server `usable` accepts
    /// (redispatch): the walk is deterministic, so a retried client lands on the same fallback.
    pub fn lookup_usable(&self, hash: u64, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let m = self.table.len();
        if m == 0 {
            return None;
        }
        let start = (hash % m as u64) as usize;
        (0..m).map(|k| self.table[(start + k) % m] as usize).find(|&i| usable(i))
    }

    /// A digest of the table with each slot named by its server's key, so it does not depend on
    /// the order the servers are listed in.
    pub fn digest(&self, keys: &[(String, u32)]) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for &i in &self.table {
            h.update(keys.get(i as usize).map_or("", |(k, _)| k.as_str()).as_bytes());
            h.update(&[0]);
        }
        h.digest()
    }

    /// Slots per server index, for spread checks.
    pub fn slots(&self, servers: usize) -> Vec<usize> {
        let mut out = vec![0; servers];
        for &i in &self.table {
            if let Some(c) = out.get_mut(i as usize) {
                *c += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::key::client_ip;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    #[test]
    fn maglev_equal_weights_spread_within_2_percent() {
        let k = keys(7);
        let servers: Vec<(&str, u32)> = k.iter().map(|s| (s.as_str(), 1)).collect();
        let slots = Maglev::build(&servers).slots(7);
        let even = TABLE_SIZE as f64 / 7.0;
        for s in slots {
            assert!((s as f64 - even).abs() / even < 0.02, "{s} vs {even}");
        }
    }

    #[test]
    fn maglev_weights_3_to_1_give_3_to_1_slots() {
        let slots = Maglev::build(&[("a:1", 3), ("b:1", 1)]).slots(2);
        let share = slots[0] as f64 / TABLE_SIZE as f64;
        assert!((share - 0.75).abs() < 0.01, "{share}");
    }

    #[test]
    fn maglev_two_instances_agree() {
        let k = keys(5);
        let servers: Vec<(&str, u32)> = k.iter().map(|s| (s.as_str(), 1)).collect();
        let (a, b) = (Maglev::build(&servers), Maglev::build(&servers));
        for h in 0..10_000u64 {
            assert_eq!(a.lookup(h * 7919), b.lookup(h * 7919));
        }
    }

    #[test]
    fn maglev_empty_or_all_zero_returns_none_without_panic() {
        assert_eq!(Maglev::build(&[]).lookup(5), None);
        assert_eq!(Maglev::build(&[("a:1", 0)]).lookup_usable(5, |_| true), None);
        assert_eq!(Maglev::build(&[("a:1", 1)]).lookup_usable(5, |_| false), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(9))]
        #[test]
        fn maglev_table_rebuild_keeps_most_keys_stable(n in 2usize..=10, gone_pick in any::<usize>()) {
            let k = keys(n);
            let gone = gone_pick % n;
            let before: Vec<(&str, u32)> = k.iter().map(|s| (s.as_str(), 1)).collect();
            let after: Vec<(&str, u32)> = k.iter().enumerate().map(|(i, s)| (s.as_str(), if i == gone { 0 } else { 1 })).collect();
            let (a, b) = (Maglev::build(&before), Maglev::build(&after));
            let clients = 10_000u32;
            let mut moved = 0;
            for c in 0..clients {
                let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + c));
                let h = client_ip(ip);
                let (x, y) = (a.lookup(h).unwrap(), b.lookup(h).unwrap());
                prop_assert_ne!(y, gone);
                if x != y {
                    moved += 1;
                }
            }
            let limit = clients as f64 * (1.0 / n as f64 + 0.02);
            prop_assert!((moved as f64) <= limit, "moved {} of {} with n = {}, limit {}", moved, clients, n, limit);
        }
    }
}
