//! The reason behind each pick the data path makes, small enough to carry with every connection
//! or request: [`Why`] is one `u64` (how the server was chosen, the hash table slot, the backup,
//! panic, queue and redispatch marks), spelt out only when something reads it — the access log's
//! `why` field (`access_log_why`) and `GET /api/explain/recent`.
//!
//! [`Recent`] keeps the last [`RECENT`] picks of a pool in a ring of fixed slots that writers
//! fill without a lock: each slot is a sequence lock made of atomics (odd while written), so a
//! pick costs a handful of atomic stores and never waits, and a reader skips a slot caught
//! mid-write. Two writers on one slot (the ring wrapped while one was slow) cannot mix their
//! fields: the second sees the odd count and drops its record.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, fence};

use crate::config::Algorithm;

/// How many picks of each pool (a service's own servers, each routed pool) are kept.
pub const RECENT: usize = 64;

/// How the pick was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The algorithm's turn, draw or comparison.
    Algorithm = 0,
    /// The server the affinity cookie names.
    Affinity = 1,
    /// The hash key's table slot, and the server that owns it.
    SlotOwner = 2,
    /// The hash key's table slot, whose owner was passed over (down, full, ramping, avoided):
    /// the table walk went on to another.
    SlotWalked = 3,
}

/// One pick's reason, packed: bits 0-7 [`How`], 8 backup, 9 panic, 10 queued, 16-23 the
/// redispatch attempt, 32-63 the table slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Why(u64);

const BACKUP: u64 = 1 << 8;
const PANIC: u64 = 1 << 9;
const QUEUED: u64 = 1 << 10;

impl Why {
    pub fn new(how: How, slot: Option<usize>, backup: bool, panic: bool, queued: bool, retried: u32) -> Why {
        let slot = slot.map_or(0, |s| s.min(u32::MAX as usize) as u64);
        let flags = if backup { BACKUP } else { 0 } | if panic { PANIC } else { 0 } | if queued { QUEUED } else { 0 };
        Why(how as u64 | flags | u64::from(retried.min(255)) << 16 | slot << 32)
    }

    pub fn how(self) -> How {
        match self.0 & 0xff {
            1 => How::Affinity,
            2 => How::SlotOwner,
            3 => How::SlotWalked,
            _ => How::Algorithm,
        }
    }

    fn slot(self) -> u64 {
        self.0 >> 32
    }

    fn retried(self) -> u64 {
        (self.0 >> 16) & 0xff
    }

    /// The compact form: the algorithm, how it chose, and the marks, e.g. `source-hash slot=4211`,
    /// `cookie affinity`, `least-conn backup retry=1`.
    pub fn describe(self, algorithm: Algorithm) -> String {
        let mut s = String::from(algorithm.as_str());
        match self.how() {
            How::Algorithm if algorithm == Algorithm::Cookie => s.push_str(" new"),
            How::Algorithm => {}
            How::Affinity => s.push_str(" affinity"),
            How::SlotOwner => s.push_str(&format!(" slot={}", self.slot())),
            How::SlotWalked => s.push_str(&format!(" slot={} walked", self.slot())),
        }
        for (flag, word) in [(BACKUP, " backup"), (PANIC, " panic"), (QUEUED, " queued")] {
            if self.0 & flag != 0 {
                s.push_str(word);
            }
        }
        if self.retried() > 0 {
            s.push_str(&format!(" retry={}", self.retried()));
        }
        s
    }
}

/// One kept pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Its place in the pool's sequence of picks: later picks have larger numbers.
    pub order: u64,
    /// Unix time in microseconds: fine enough to order the picks of different pools.
    pub at_us: u64,
    pub client: IpAddr,
    /// The picked server's [`ServerState::serial`](crate::live::ServerState::serial).
    pub server: u64,
    pub why: Why,
}

/// The last [`RECENT`] picks of a pool.
#[derive(Debug)]
pub struct Recent {
    next: AtomicU64,
    slots: Box<[Slot]>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Even when the fields are whole; odd while a writer fills them.
    seq: AtomicU64,
    order: AtomicU64,
    at_us: AtomicU64,
    client: [AtomicU64; 2],
    server: AtomicU64,
    why: AtomicU64,
}

impl Default for Recent {
    fn default() -> Self {
        Recent { next: AtomicU64::new(0), slots: (0..RECENT).map(|_| Slot::default()).collect() }
    }
}

impl Recent {
    pub fn record(&self, client: IpAddr, server: u64, why: Why) {
        let order = self.next.fetch_add(1, Relaxed);
        let slot = &self.slots[(order % RECENT as u64) as usize];
        let seq = slot.seq.load(Relaxed);
        if seq & 1 == 1 || slot.seq.compare_exchange(seq, seq + 1, Relaxed, Relaxed).is_err() {
            return;
        }
        fence(Release);
        let ip = match client {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        let bits = u128::from(ip);
        slot.order.store(order + 1, Relaxed);
        slot.at_us.store(crate::clock::since_epoch().as_micros() as u64, Relaxed);
        slot.client[0].store((bits >> 64) as u64, Relaxed);
        slot.client[1].store(bits as u64, Relaxed);
        slot.server.store(server, Relaxed);
        slot.why.store(why.0, Relaxed);
        slot.seq.store(seq + 2, Release);
    }

    /// The kept picks, oldest first; at most `limit`, the latest ones.
    pub fn read(&self, limit: usize) -> Vec<Recorded> {
        let mut out: Vec<Recorded> = self.slots.iter().filter_map(Slot::read).collect();
        out.sort_by_key(|r| r.order);
        let skip = out.len().saturating_sub(limit);
        out.drain(..skip);
        out
    }
}

impl Slot {
    fn read(&self) -> Option<Recorded> {
        let before = self.seq.load(Acquire);
        if before == 0 || before & 1 == 1 {
            return None;
        }
        let order = self.order.load(Relaxed);
        let at_us = self.at_us.load(Relaxed);
        let bits = u128::from(self.client[0].load(Relaxed)) << 64 | u128::from(self.client[1].load(Relaxed));
        let server = self.server.load(Relaxed);
        let why = Why(self.why.load(Relaxed));
        fence(Acquire);
        if self.seq.load(Relaxed) != before {
            return None;
        }
        let ip = Ipv6Addr::from(bits);
        let client = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
        Some(Recorded { order: order - 1, at_us, client, server, why })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_keeps_every_part_and_reads_compactly() {
        let w = Why::new(How::SlotWalked, Some(4211), true, false, true, 2);
        assert_eq!(w.how(), How::SlotWalked);
        assert_eq!(w.describe(Algorithm::SourceHash), "source-hash slot=4211 walked backup queued retry=2");
        assert_eq!(Why::new(How::Affinity, None, false, false, false, 0).describe(Algorithm::Cookie), "cookie affinity");
        assert_eq!(Why::new(How::Algorithm, None, false, false, false, 0).describe(Algorithm::Cookie), "cookie new");
        assert_eq!(Why::new(How::Algorithm, None, false, true, false, 300).describe(Algorithm::LeastConn), "least-conn panic retry=255");
        assert_eq!(Why::new(How::SlotOwner, Some(65536), false, false, false, 0).describe(Algorithm::UriHash), "uri-hash slot=65536");
    }

    #[test]
    fn the_ring_keeps_the_latest_picks_in_order() {
        let ring = Recent::default();
        assert!(ring.read(10).is_empty());
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        for i in 0..(RECENT as u64 + 10) {
            let client = if i % 2 == 0 { IpAddr::from([127, 0, 0, (i % 250) as u8]) } else { v6 };
            ring.record(client, i, Why::new(How::Algorithm, None, false, false, false, 0));
        }
        let all = ring.read(usize::MAX);
        assert_eq!(all.len(), RECENT);
        assert_eq!(all.first().unwrap().server, 10, "the oldest ten were overwritten");
        assert_eq!(all.last().unwrap().server, RECENT as u64 + 9);
        assert!(all.windows(2).all(|w| w[0].order + 1 == w[1].order));
        assert_eq!(all.last().unwrap().client, v6);
        assert_eq!(all[all.len() - 2].client, IpAddr::from([127, 0, 0, (RECENT as u64 + 8) as u8]), "IPv4 stays IPv4");
        let last3 = ring.read(3);
        assert_eq!(last3.iter().map(|r| r.server).collect::<Vec<_>>(), [RECENT as u64 + 7, RECENT as u64 + 8, RECENT as u64 + 9]);
    }

    #[test]
    fn writers_on_many_threads_leave_only_whole_records() {
        let ring = std::sync::Arc::new(Recent::default());
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        // Every field derived from the thread, so a mixed record would show.
                        ring.record(IpAddr::from([127, 0, 1, t]), u64::from(t), Why::new(How::SlotOwner, Some(usize::from(t)), false, false, false, 0));
                        if i % 1000 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        while !threads.iter().all(|t| t.is_finished()) {
            for r in ring.read(RECENT) {
                let t = r.server as u8;
                assert_eq!(r.client, IpAddr::from([127, 0, 1, t]));
                assert_eq!(r.why, Why::new(How::SlotOwner, Some(usize::from(t)), false, false, false, 0));
            }
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(ring.read(RECENT).len(), RECENT);
    }
}
