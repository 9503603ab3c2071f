//! A per-client rate table (the core of `[[service.limit]]`, issue 30; not yet read from the
//! config): requests counted per key with GCRA, the generic cell rate algorithm, in a table of
//! bounded size.
//!
//! GCRA keeps one number per key, its theoretical arrival time (TAT): a request at `now` is let
//! through when `TAT - now` is at most the burst tolerance, and moves TAT on by one emission
//! interval (the period over the rate). It is a sliding window without buckets: a client at its
//! rate is never limited, a burst of `burst` requests passes at once, and `Retry-After` is exact.
//!
//! The table is split into shards by the key's hash, each behind its own mutex held for a few
//! nanoseconds, so the threads that move traffic never wait on one lock shared by all. A shard
//! holds at most its share of `max_keys`: a new key in a full shard evicts the least recently
//! seen of a few sampled entries (Redis' approximated LRU), so a flood of distinct keys (spoofed
//! addresses) only evicts and never grows the table. Memory per key: [`BYTES_PER_KEY`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Shards of a table: enough that the traffic threads of a large machine rarely meet.
const SHARDS: usize = 64;
/// Entries looked at to pick the one a full shard evicts.
const SAMPLES: usize = 5;
/// A key's memory in a full table: its slot (key, TAT, last seen) and its index entry (key,
/// position, and the hash map's control byte and load-factor slack).
pub const BYTES_PER_KEY: usize = 32 + 40;

/// What a table counts a request by: the client's network (its address with the prefix length
/// applied, IPv4 within IPv6's space) or a hash of a header's, a cookie's or the SNI's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(u128);

impl Key {
    /// The network of `ip` with `v4_prefix` (IPv4) or `v6_prefix` (IPv6) bits kept.
    pub fn network(ip: IpAddr, v4_prefix: u8, v6_prefix: u8) -> Key {
        let (bits, prefix) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)) | 0xffff << 32, 96 + u32::from(v4_prefix.min(32))),
            IpAddr::V6(a) => (u128::from(a), u32::from(v6_prefix.min(128))),
        };
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        Key(bits & mask)
    }

    /// A value's key (a header, a cookie, a server name): its 128-bit hash.
    pub fn text(value: &[u8]) -> Key {
        Key(xxhash_rust::xxh3::xxh3_128(value))
    }

    fn shard(self) -> usize {
        // The low bits of a network key are its host bits, zero; fold the whole key.
        let folded = (self.0 as u64) ^ ((self.0 >> 64) as u64);
        (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS
    }
}

/// A limit's verdict on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let through; this many more would pass right now.
    Allowed { remaining: u64 },
    /// Over the limit: the client may try again after this long.
    Limited { retry_after: Duration },
}

/// `rate` requests per `period`, with bursts of up to `burst`.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    /// Nanoseconds between two requests at the rate (the emission interval).
    interval_ns: u64,
    /// How far ahead of `now` a key's TAT may be and still be let through.
    tolerance_ns: u64,
}

impl Rate {
    /// `rate` (at least 1) requests per `period`, `burst` (at least 1) of them at once.
    pub fn new(rate: u64, period: Duration, burst: u64) -> Rate {
        let interval_ns = (period.as_nanos() / u128::from(rate.max(1))).clamp(1, u128::from(u64::MAX)) as u64;
        Rate { interval_ns, tolerance_ns: interval_ns.saturating_mul(burst.max(1) - 1) }
    }
}

struct Slot {
    key: Key,
    /// Theoretical arrival time, in nanoseconds of the table's clock.
    tat: u64,
    last_seen: u64,
}

#[derive(Default)]
struct Shard {
    index: HashMap<Key, usize>,
    slots: Vec<Slot>,
    /// A small generator for the eviction sample (xorshift: no shared state, no syscall).
    seed: u64,
}

/// A rate table of at most about `max_keys` keys.
pub struct Table {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    rate: Rate,
}

impl Table {
    pub fn new(rate: Rate, max_keys: usize) -> Table {
        let shards = (0..SHARDS).map(|i| Mutex::new(Shard { seed: 0x2545_f491_4f6c_dd1d ^ i as u64, ..Shard::default() })).collect();
        Table { shards, per_shard: max_keys.div_ceil(SHARDS).max(1), rate }
    }

    /// Counts a request of `key` at `now_ns` (any monotonic clock in nanoseconds, the same for
    /// every call) and says whether it is let through.
    pub fn check(&self, key: Key, now_ns: u64) -> Verdict {
        let Ok(mut shard) = self.shards[key.shard()].lock() else {
            // A thread panicked holding the lock: fail open rather than refuse everyone.
            return Verdict::Allowed { remaining: 0 };
        };
        let Rate { interval_ns, tolerance_ns } = self.rate;
        let slot = match shard.index.get(&key) {
            Some(&i) => i,
            None => shard.insert(key, now_ns, self.per_shard),
        };
        let slot = &mut shard.slots[slot];
        slot.last_seen = now_ns;
        let tat = slot.tat.max(now_ns);
        let ahead = tat - now_ns;
        if ahead > tolerance_ns {
            return Verdict::Limited { retry_after: Duration::from_nanos(ahead - tolerance_ns) };
        }
        slot.tat = tat + interval_ns;
        Verdict::Allowed { remaining: (tolerance_ns - ahead) / interval_ns }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |s| s.slots.len())).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Shard {
    /// A slot for `key`, evicting the least recently seen of a sample when the shard is full.
    fn insert(&mut self, key: Key, now_ns: u64, capacity: usize) -> usize {
        let fresh = Slot { key, tat: now_ns, last_seen: now_ns };
        if self.slots.len() < capacity {
            self.slots.push(fresh);
            self.index.insert(key, self.slots.len() - 1);
            return self.slots.len() - 1;
        }
        let n = self.slots.len();
        let sample: [usize; SAMPLES] = std::array::from_fn(|_| self.next() as usize % n);
        let victim = sample.into_iter().min_by_key(|&i| self.slots[i].last_seen).unwrap_or(0);
        self.index.remove(&self.slots[victim].key);
        self.slots[victim] = fresh;
        self.index.insert(key, victim);
        victim
    }

    fn next(&mut self) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_client_at_its_rate_passes_and_a_faster_one_is_told_when_to_come_back() {
        let t = Table::new(Rate::new(10, Duration::from_secs(1), 1), 1000);
        let k = Key::network("127.0.0.9".parse().unwrap(), 32, 64);
        // One every 100 ms: never limited.
        for i in 0..50 {
            assert!(matches!(t.check(k, i * SECOND / 10), Verdict::Allowed { .. }), "request {i}");
        }
        // Two at once: the second waits the rest of the interval.
        let now = 50 * SECOND / 10;
        assert!(matches!(t.check(k, now), Verdict::Allowed { .. }));
        assert_eq!(t.check(k, now), Verdict::Limited { retry_after: Duration::from_millis(100) });
    }

    #[test]
    fn a_burst_passes_at_once_then_the_rate_holds_over_a_second() {
        let t = Table::new(Rate::new(50, Duration::from_secs(1), 10), 1000);
        let k = Key::text(b"session-1");
        let burst = (0..100).filter(|_| matches!(t.check(k, 0), Verdict::Allowed { .. })).count();
        assert_eq!(burst, 10);
        // Then one request every millisecond for a second: 50 pass, as the rate says.
        let passed = (1..=1000).filter(|ms| matches!(t.check(k, ms * SECOND / 1000), Verdict::Allowed { .. })).count();
        assert!((49..=51).contains(&passed), "{passed}");
    }

    #[test]
    fn keys_are_apart_and_networks_share_one() {
        let t = Table::new(Rate::new(1, Duration::from_secs(60), 1), 1000);
        let a = Key::network("192.0.2.10".parse().unwrap(), 24, 64);
        let b = Key::network("192.0.2.200".parse().unwrap(), 24, 64);
        let c = Key::network("198.51.100.1".parse().unwrap(), 24, 64);
        assert_eq!(a, b, "one /24");
        assert!(matches!(t.check(a, 0), Verdict::Allowed { .. }));
        assert!(matches!(t.check(b, 0), Verdict::Limited { .. }));
        assert!(matches!(t.check(c, 0), Verdict::Allowed { .. }), "another network is not touched");
        let v6 = Key::network("2001:db8::1".parse().unwrap(), 32, 64);
        assert_eq!(v6, Key::network("2001:db8::ffff".parse().unwrap(), 32, 64));
        assert_ne!(v6, Key::network("2001:db8:0:1::1".parse().unwrap(), 32, 64));
    }

    #[test]
    fn a_flood_of_distinct_keys_only_evicts() {
        let max = 10_000;
        let t = Table::new(Rate::new(1, Duration::from_secs(1), 1), max);
        for i in 0..1_000_000u32 {
            t.check(Key::text(&i.to_le_bytes()), u64::from(i));
        }
        let held = t.len();
        assert!(held <= max.div_ceil(SHARDS) * SHARDS && held > max / 2, "{held}");
        // A key seen a moment ago survives the next flood more often than not: the sample
        // evicts the least recently seen.
        let kept = Key::text(b"regular");
        t.check(kept, 2_000_000);
        for i in 0..100u32 {
            t.check(Key::text(&(2_000_000 + i).to_le_bytes()), 2_000_001 + u64::from(i));
        }
        assert!(matches!(t.check(kept, 2_000_200), Verdict::Limited { .. }), "its count is still there");
    }
}
