//! A rate per key in this process, with GCRA, the generic cell rate algorithm.
//!
//! GCRA keeps one number per key, its theoretical arrival time (TAT): a request at `now` is let
//! through when `TAT - now` is at most the burst tolerance, and moves TAT on by one emission
//! interval (the period over the rate) per unit of cost. It is a sliding window without
//! buckets: a client at its rate is never limited, a burst of `burst` passes at once, and
//! `Retry-After` is exact.
//!
//! The table is split into shards by the key's hash, each behind its own mutex held for a few
//! nanoseconds, so the threads that move traffic never wait on one lock shared by all. A shard
//! holds at most its share of `max_keys`: a new key in a full shard evicts the least recently
//! seen of a few sampled entries (Redis' approximated LRU), so a flood of distinct keys (spoofed
//! addresses) only evicts and never grows the table. A key whose TAT is past holds no count: it
//! is the first a sample evicts, and the sweep every few seconds (`super::run`) takes it out. Memory per key: [`BYTES_PER_KEY`].

use std::time::Duration;

use super::shard::Shards;
use super::{Counter, Key, Keyed, Usage, Verdict};

/// A key's memory in a full table of the default `max_keys` (100,000: 1,563 keys a shard), as
/// `benches/limits.rs` measures it: its slot (key, TAT, last seen, the text it was made from
/// when it has one: 48 bytes) in a shard's Vec of exactly its 1,563, and its index entry (key and
/// position: 32 bytes, and the hash map's control byte) in a map of 4,096 buckets, 86 bytes a key:
/// the 2,048 its keys need, doubled once by the tombstones that evictions leave. With another
/// `max_keys`, by where its share of a shard falls between powers of two, from about 125 to 200
/// bytes a key once a flood has doubled the map (10 million: 159), and 86 to 123 before (10
/// million: 103, measured after 20 million evictions). A header's or cookie's key adds its text,
/// up to [`super::MAX_LABEL`] bytes.
pub const BYTES_PER_KEY: usize = 135;

/// `rate` per `period`, with bursts of up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Nanoseconds between two units at the rate (the emission interval).
    interval_ns: u64,
    /// How far ahead of `now` a key's TAT may be and still be let through.
    tolerance_ns: u64,
}

impl Rate {
    /// `rate` (at least 1) per `period`, `burst` (at least 1) of them at once.
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
    label: Option<Box<str>>,
}

/// A rate table of at most about `max_keys` keys.
pub struct Table {
    shards: Shards<Slot>,
    rate: Rate,
}

impl Table {
    pub fn new(rate: Rate, max_keys: usize) -> Table {
        Table { shards: Shards::new(max_keys), rate }
    }

    /// The most keys it holds.
    pub fn capacity(&self) -> usize {
        self.shards.capacity()
    }

    /// The slot of `key` in its locked shard, made when new; `None` if a thread panicked
    /// holding the lock (the caller fails open rather than refuse everyone).
    fn with<T>(&self, key: Keyed<'_>, now_ns: u64, then: impl FnOnce(&mut Slot, Rate) -> T) -> Option<T> {
        let fresh = || Slot { key: key.key, tat: now_ns, last_seen: now_ns, label: super::label(key.text) };
        // A key with no count left (its TAT past) goes first, then the least recently seen.
        self.shards.with(
            key.key,
            fresh,
            |s| (s.tat > now_ns, s.last_seen),
            |slot| {
                slot.last_seen = now_ns;
                then(slot, self.rate)
            },
        )
    }
}

impl Counter for Table {
    fn check(&self, key: Keyed<'_>, now_ns: u64, cost: u64) -> Verdict {
        self.with(key, now_ns, |slot, Rate { interval_ns, tolerance_ns }| {
            let tat = slot.tat.max(now_ns);
            let after = tat + interval_ns.saturating_mul(cost.max(1) - 1);
            let ahead = after - now_ns;
            if ahead > tolerance_ns {
                return Verdict::Limited { retry_after: Duration::from_nanos(ahead - tolerance_ns) };
            }
            slot.tat = after + interval_ns;
            Verdict::Allowed { remaining: (tolerance_ns - ahead) / interval_ns }
        })
        .unwrap_or(Verdict::Allowed { remaining: 0 })
    }

    fn charge(&self, key: Keyed<'_>, now_ns: u64, cost: u64) {
        self.with(key, now_ns, |slot, rate| {
            // Never more than a period's worth of credit behind: an idle key starts afresh.
            slot.tat = slot.tat.max(now_ns).saturating_add(rate.interval_ns.saturating_mul(cost));
        });
    }

    fn over(&self, key: Key, now_ns: u64) -> Option<Duration> {
        let shard = self.shards.of(key)?;
        let slot = shard.get(key)?;
        let ahead = slot.tat.saturating_sub(now_ns);
        (ahead > self.rate.tolerance_ns).then(|| Duration::from_nanos(ahead - self.rate.tolerance_ns))
    }

    fn top(&self, now_ns: u64, n: usize) -> Vec<Usage> {
        let Rate { interval_ns, tolerance_ns } = self.rate;
        let full = (tolerance_ns + interval_ns) as f64;
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let Ok(shard) = shard.lock() else { continue };
            for slot in shard.iter().filter(|s| s.tat > now_ns) {
                let ahead = slot.tat - now_ns;
                all.push(Usage {
                    key: slot.key,
                    label: slot.label.clone(),
                    used: ahead as f64 / full,
                    retry_after: (ahead > tolerance_ns).then(|| Duration::from_nanos(ahead - tolerance_ns)),
                });
            }
            // Bounded work per shard: keep only the highest as we go.
            if all.len() > 4 * n {
                all = super::highest(all, n);
            }
        }
        super::highest(all, n)
    }

    fn clear(&self, key: Key) -> bool {
        self.shards.remove(key)
    }

    fn expire(&self, now_ns: u64) -> usize {
        // A key whose TAT is past holds no count: a new one starts the same.
        self.shards.sweep(|s| s.tat <= now_ns)
    }

    fn len(&self) -> usize {
        self.shards.len()
    }
}

impl super::shard::Slot for Slot {
    fn key(&self) -> Key {
        self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn k(key: Key) -> Keyed<'static> {
        Keyed { key, text: None }
    }

    #[test]
    fn a_client_at_its_rate_passes_and_a_faster_one_is_told_when_to_come_back() {
        let t = Table::new(Rate::new(10, Duration::from_secs(1), 1), 1000);
        let key = k(Key::network("127.0.0.9".parse().unwrap(), 32, 64));
        // One every 100 ms: never limited.
        for i in 0..50 {
            assert!(!t.check(key, i * SECOND / 10, 1).limited(), "request {i}");
        }
        // Two at once: the second waits the rest of the interval.
        let now = 50 * SECOND / 10;
        assert!(!t.check(key, now, 1).limited());
        assert_eq!(t.check(key, now, 1), Verdict::Limited { retry_after: Duration::from_millis(100) });
        assert_eq!(t.over(key.key, now), Some(Duration::from_millis(100)));
    }

    #[test]
    fn a_burst_passes_at_once_then_the_rate_holds_over_a_second() {
        let t = Table::new(Rate::new(50, Duration::from_secs(1), 10), 1000);
        let key = Keyed { key: Key::text(b"session-1"), text: Some(b"session-1") };
        let burst = (0..100).filter(|_| !t.check(key, 1, 1).limited()).count();
        assert_eq!(burst, 10);
        // Then one request every millisecond for a second: 50 pass, as the rate says.
        let passed = (1..=1000).filter(|ms| !t.check(key, ms * SECOND / 1000, 1).limited()).count();
        assert!((49..=51).contains(&passed), "{passed}");
        let top = t.top(SECOND, 5);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].label.as_deref(), Some("session-1"));
        assert!(top[0].used > 0.8, "{top:?}");
    }

    #[test]
    fn what_is_charged_after_the_fact_holds_the_next_request() {
        // 1,000 bytes a second, a second's worth at once.
        let t = Table::new(Rate::new(1000, Duration::from_secs(1), 1001), 1000);
        let key = k(Key::text(b"c"));
        assert!(t.over(key.key, 1).is_none());
        t.charge(key, 1, 3000);
        // Three seconds' worth: over for the two past its tolerance.
        let left = t.over(key.key, 1).unwrap();
        assert!(left > Duration::from_millis(1990) && left <= Duration::from_secs(2), "{left:?}");
        assert!(t.over(key.key, 2 * SECOND + 2).is_none());
        assert!(t.clear(key.key) && !t.clear(key.key));
        assert_eq!(t.len(), 0);
        // Keys with nothing left counted leave by themselves.
        t.charge(key, 1, 1500);
        t.charge(k(Key::text(b"d")), 1, 10);
        assert_eq!(t.expire(SECOND), 1, "d's 10 ms ran out, c's 1.5 s did not");
        assert_eq!(t.expire(2 * SECOND), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn the_closest_to_their_limit_come_first() {
        let t = Table::new(Rate::new(10, Duration::from_secs(1), 10), 1000);
        for (i, n) in [(1u8, 2), (2, 9), (3, 5)] {
            let key = k(Key::network(std::net::IpAddr::from([10, 0, 0, i]), 32, 64));
            (0..n).for_each(|_| {
                t.check(key, 1, 1);
            });
        }
        let order: Vec<_> = t.top(1, 2).into_iter().map(|u| u.key.address().to_string()).collect();
        assert_eq!(order, ["10.0.0.2", "10.0.0.3"]);
    }

    #[test]
    fn a_flood_of_distinct_keys_only_evicts() {
        let max = 10_000;
        let t = Table::new(Rate::new(1, Duration::from_secs(1), 1), max);
        for i in 0..1_000_000u32 {
            t.check(k(Key::text(&i.to_le_bytes())), u64::from(i), 1);
        }
        let held = t.len();
        assert!(held <= t.capacity() && held > max / 2, "{held}");
        // A key seen a moment ago survives the next flood: the sample evicts keys with no count
        // left first, then the least recently seen.
        let kept = k(Key::text(b"regular"));
        t.check(kept, 2_000_000, 1);
        for i in 0..100u32 {
            t.check(k(Key::text(&(2_000_000 + i).to_le_bytes())), 2_000_001 + u64::from(i), 1);
        }
        assert!(t.check(kept, 2_000_200, 1).limited(), "its count is still there");
    }
}
