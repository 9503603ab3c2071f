//! Per-client limits (`[[service.limit]]`): the tables that count what each client (a network, or
//! a header's, a cookie's or the SNI's value) does, and say when one goes past its limit.
//!
//! - [`gcra::Table`] counts a rate (requests, new connections, bytes, errors) per key in this
//!   process, with GCRA: exact, one number per key, sharded so no lock is shared by all threads.
//! - [`shared::Shared`] counts a rate across a fleet through Redis: local counts, synced in
//!   batches by a task of its own, so a request never waits on Redis.
//! - [`concurrent::Concurrent`] counts connections open at once per key.
//!
//! Every table holds at most about `max_keys` keys: a flood of new keys evicts, never grows it.

pub mod concurrent;
pub mod gcra;
mod shard;
pub mod shared;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

pub use concurrent::Concurrent;
pub use gcra::{Rate, Table};
pub use shared::Shared;

/// What a table counts a request by: the client's network (its address with the prefix length
/// applied, IPv4 within IPv6's space) or a hash of a header's, a cookie's or the SNI's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(u128);

/// IPv4 addresses within IPv6's space (`::ffff:0:0/96`), so one key type holds both.
const V4_MAPPED: u128 = 0xffff << 32;

impl Key {
    /// The network of `ip` with `v4_prefix` (IPv4) or `v6_prefix` (IPv6) bits kept.
    pub fn network(ip: IpAddr, v4_prefix: u8, v6_prefix: u8) -> Key {
        let (bits, prefix) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)) | V4_MAPPED, 96 + u32::from(v4_prefix.min(32))),
            IpAddr::V6(a) => (u128::from(a), u32::from(v6_prefix.min(128))),
        };
        let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        Key(bits & mask)
    }

    /// A value's key (a header, a cookie, a server name): its 128-bit hash.
    pub fn text(value: &[u8]) -> Key {
        Key(xxhash_rust::xxh3::xxh3_128(value))
    }

    /// The key as 128 bits, for a store that names it (Redis).
    pub fn bits(self) -> u128 {
        self.0
    }

    /// The network a network key stands for, as an address (IPv4 when it is one).
    pub fn address(self) -> IpAddr {
        if self.0 >> 32 == 0xffff { IpAddr::V4(Ipv4Addr::from(self.0 as u32)) } else { IpAddr::V6(Ipv6Addr::from(self.0)) }
    }

    /// Which of `shards` shards the key lives in.
    pub fn shard(self, shards: usize) -> usize {
        // The low bits of a network key are its host bits, zero; fold the whole key.
        let folded = (self.0 as u64) ^ ((self.0 >> 64) as u64);
        (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % shards
    }
}

/// A key with the text it was made from (a header's value), kept beside it when the key is new
/// so the dashboard can show it; `None` for a network key, shown as its network.
#[derive(Debug, Clone, Copy)]
pub struct Keyed<'a> {
    pub key: Key,
    pub text: Option<&'a [u8]>,
}

/// The most of a key's text a table keeps to show it.
pub const MAX_LABEL: usize = 64;

/// The text to keep for a key, cut to [`MAX_LABEL`] bytes on a character boundary.
fn label(text: Option<&[u8]>) -> Option<Box<str>> {
    let text = String::from_utf8_lossy(text?);
    let mut end = text.len().min(MAX_LABEL);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].into())
}

/// A limit's verdict on one request or connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let through; this many more would pass right now.
    Allowed { remaining: u64 },
    /// Over the limit: the client may try again after this long.
    Limited { retry_after: Duration },
}

impl Verdict {
    pub fn limited(self) -> bool {
        matches!(self, Verdict::Limited { .. })
    }
}

/// One key of a table as the dashboard and `GET /api/limits/<table>` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub key: Key,
    /// The text the key was made from (cut to [`MAX_LABEL`]); `None` for a network key.
    pub label: Option<Box<str>>,
    /// How much of its limit the key has used: 1.0 is at the limit.
    pub used: f64,
    /// While it is over its limit: how long until it may go again.
    pub retry_after: Option<Duration>,
}

/// What a rate table does: [`Table`] in this process, [`Shared`] across a fleet.
pub trait Counter: Send + Sync {
    /// Counts `cost` of `key` at `now_ns` if it is let through, and says whether it is.
    fn check(&self, key: Keyed<'_>, now_ns: u64, cost: u64) -> Verdict;
    /// Counts `cost` of `key` whatever its state: what is known only after the fact (bytes
    /// moved, an error answered), which limits the key's next request.
    fn charge(&self, key: Keyed<'_>, now_ns: u64, cost: u64);
    /// Whether `key` is over its limit now, counting nothing: how long until it is not.
    fn over(&self, key: Key, now_ns: u64) -> Option<Duration>;
    /// The `n` keys closest to (or past) their limit, the closest first.
    fn top(&self, now_ns: u64, n: usize) -> Vec<Usage>;
    /// Forgets `key`; `true` when it was there.
    fn clear(&self, key: Key) -> bool;
    /// Forgets the keys with nothing counted any more at `now_ns`; how many went.
    fn expire(&self, now_ns: u64) -> usize;
    /// Keys held now.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One `[[service.limit]]` as it runs: its config, its table and what it did.
pub struct Limiter {
    pub config: crate::config::Limit,
    /// The service it belongs to, and its route's index when it is a route's.
    pub service: String,
    pub route: Option<usize>,
    /// Rates: requests, new connections, bytes, errors.
    pub rate: Option<std::sync::Arc<dyn Counter>>,
    /// `connections`.
    pub open: Option<std::sync::Arc<Concurrent>>,
    /// The fleet's table, for its sync status (`store = "redis"`).
    pub shared: Option<std::sync::Arc<Shared>>,
    pub counts: Counts,
}

/// What a limit did, since it was made (a reload keeps an unchanged limit).
#[derive(Default)]
pub struct Counts {
    /// Let through under the limit.
    pub passed: std::sync::atomic::AtomicU64,
    /// Refused (reject, tarpit, or a delay that would have been too long).
    pub limited: std::sync::atomic::AtomicU64,
    /// Held until under the limit, then let through (`delay`).
    pub delayed: std::sync::atomic::AtomicU64,
    /// Past the limit but let through: `action = "log"`, the dry run.
    pub logged: std::sync::atomic::AtomicU64,
    /// Said in the log at most once a second.
    pub warned: crate::error::Throttle,
}

impl Limiter {
    /// A limit's table, empty; a shared one starts syncing with Redis.
    pub fn new(config: &crate::config::Limit, service: &str, route: Option<usize>) -> Limiter {
        use crate::config::{Counted, FailMode, LimitStore};
        let c = config;
        let (mut rate, mut open, mut shared) = (None, None, None);
        match (c.count, c.store) {
            (Counted::Connections, _) => open = Some(std::sync::Arc::new(Concurrent::new(c.limit, c.max_keys))),
            (_, LimitStore::Redis) => {
                let table = Shared::new(&c.name, c.limit, c.period, c.max_keys, c.fail == FailMode::Closed);
                table.start(c.redis.as_deref().unwrap_or_default(), c.sync_interval);
                rate = Some(table.clone() as std::sync::Arc<dyn Counter>);
                shared = Some(table);
            }
            (_, LimitStore::Local) => rate = Some(std::sync::Arc::new(Table::new(Rate::new(c.limit, c.period, c.burst() + 1), c.max_keys))),
        }
        Limiter { config: c.clone(), service: service.into(), route, rate, open, shared, counts: Counts::default() }
    }

    /// The key of `ip` under this limit's prefixes.
    pub fn network(&self, ip: IpAddr) -> Key {
        Key::network(ip, self.config.ipv4_prefix, self.config.ipv6_prefix)
    }

    /// How a key is shown: its text, else its network with this limit's prefix.
    pub fn show(&self, usage: &Usage) -> String {
        match &usage.label {
            Some(text) => text.to_string(),
            None => {
                let ip = usage.key.address();
                let prefix = if ip.is_ipv4() { self.config.ipv4_prefix } else { self.config.ipv6_prefix };
                if prefix == if ip.is_ipv4() { 32 } else { 128 } { ip.to_string() } else { format!("{ip}/{prefix}") }
            }
        }
    }

    /// The key an operator names (`DELETE /api/limits/<table>/<key>`): an address or network of
    /// a `client` key, else the text.
    pub fn parse_key(&self, text: &str) -> Key {
        let address = text.split_once('/').map_or(text, |(a, _)| a);
        match (self.config.key == crate::config::LimitKey::Client, address.parse::<IpAddr>()) {
            (true, Ok(ip)) => self.network(ip),
            _ => Key::text(text.as_bytes()),
        }
    }

    /// Keys held now.
    pub fn keys(&self) -> usize {
        self.rate.as_ref().map_or(0, |r| r.len()) + self.open.as_ref().map_or(0, |o| o.len())
    }

    /// The `n` keys closest to their limit.
    pub fn top(&self, n: usize) -> Vec<Usage> {
        match (&self.rate, &self.open) {
            (Some(rate), _) => rate.top(now_ns(), n),
            (None, Some(open)) => open.top(n),
            (None, None) => Vec::new(),
        }
    }

    /// Forgets a key; `true` when it was there.
    pub fn clear(&self, key: Key) -> bool {
        self.rate.as_ref().is_some_and(|r| r.clear(key))
    }
}

/// Every rate table's expired keys leave, every few seconds, for as long as `live` runs: a
/// table shrinks back after a flood instead of holding its high-water mark until new keys evict.
pub async fn run(live: std::sync::Weak<super::Live>) {
    let mut tick = tokio::time::interval(EXPIRE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(live) = live.upgrade() else { return };
        let tables: Vec<_> = live.current().limits().filter_map(|l| l.rate.clone()).collect();
        drop(live);
        // The walk locks each shard in turn, briefly: off the traffic's threads.
        let swept = tokio::task::spawn_blocking(move || tables.iter().map(|t| t.expire(now_ns())).sum::<usize>()).await;
        if let Ok(n @ 1..) = swept {
            tracing::debug!("{n} expired keys left the limits' tables");
        }
    }
}

/// How often expired keys are swept out.
const EXPIRE_EVERY: Duration = Duration::from_secs(10);

/// Picks the `n` highest of `all` by use, highest first.
pub(crate) fn highest(mut all: Vec<Usage>, n: usize) -> Vec<Usage> {
    all.sort_by(|a, b| b.used.total_cmp(&a.used));
    all.truncate(n);
    all
}

/// Nanoseconds on the process's monotonic clock: what every table counts time in.
pub fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(crate::clock::now);
    // Never 0, so a fresh key's TAT of 0 is always in the past.
    crate::clock::since(start).as_nanos() as u64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_apart_and_networks_share_one() {
        let a = Key::network("192.0.2.10".parse().unwrap(), 24, 64);
        let b = Key::network("192.0.2.200".parse().unwrap(), 24, 64);
        assert_eq!(a, b, "one /24");
        assert_eq!(a.address(), "192.0.2.0".parse::<IpAddr>().unwrap());
        assert_ne!(a, Key::network("198.51.100.1".parse().unwrap(), 24, 64));
        let v6 = Key::network("2001:db8::1".parse().unwrap(), 32, 64);
        assert_eq!(v6, Key::network("2001:db8::ffff".parse().unwrap(), 32, 64));
        assert_ne!(v6, Key::network("2001:db8:0:1::1".parse().unwrap(), 32, 64));
        assert_eq!(v6.address(), "2001:db8::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn a_label_is_cut_on_a_character_boundary() {
        let long = "é".repeat(40);
        let cut = label(Some(long.as_bytes())).unwrap();
        assert!(cut.len() <= MAX_LABEL && cut.chars().all(|c| c == 'é'), "{cut}");
        assert_eq!(label(None), None);
    }
}
