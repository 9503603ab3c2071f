//! Failed password attempts per client address, and how long each address must wait before its
//! next attempt is even hashed. Each Argon2 check costs tens of milliseconds of CPU and 19 MiB of
//! memory, so guessing must be slowed where it comes from, before it costs anything.
//!
//! After the k-th failure in a row an address waits `BASE` x 2^(k-1), at most `CAP`; a success
//! forgets it, and so does a quiet `CAP` after its wait ended (a typo a day later is not punished
//! for last month's). While one of its attempts is being checked, an address's other attempts
//! wait too, so parallel guesses from one address cannot all slip in before the first failure.
//! The table holds at most `TRACKED` addresses, so the memory a flood of addresses can make it
//! hold is bounded (about 0.5 MiB); when it is full, the address closest to its next attempt is
//! forgotten first, since it costs least to lose.
//!
//! Time is passed in, so the rules are tested without waiting.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// The wait after a first failure: unnoticed by a person retyping, already a ceiling of a few
/// guesses a second per address for a script.
pub const BASE: Duration = Duration::from_millis(500);
/// The longest wait (reached after the 8th failure in a row).
pub const CAP: Duration = Duration::from_secs(60);
/// Most addresses remembered: each entry is under 64 bytes with the table's overhead.
pub const TRACKED: usize = 4096;

/// What a client is told to wait while one of its attempts is still being checked.
const IN_FLIGHT: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Throttle {
    entries: HashMap<Source, Entry>,
}

/// Where attempts come from: an IPv4 address, or an IPv6 /64, since one host usually holds a
/// whole /64 and could otherwise change address at every guess.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Source {
    V4(u32),
    V6(u64),
}

impl From<IpAddr> for Source {
    fn from(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V4(a) => Source::V4(a.to_bits()),
            IpAddr::V6(a) => Source::V6((a.to_bits() >> 64) as u64),
        }
    }
}

struct Entry {
    /// Failures in a row.
    failures: u32,
    /// No attempt is checked before then.
    until: Instant,
    /// An attempt is being checked now.
    checking: bool,
}

impl Throttle {
    /// Whether `client` may have an attempt checked now; if so it is marked as being checked
    /// until [`failed`](Self::failed) or [`succeeded`](Self::succeeded). Otherwise, how long it
    /// must wait.
    pub fn begin(&mut self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let key = Source::from(client);
        if let Some(e) = self.entries.get_mut(&key) {
            if e.checking {
                return Err(IN_FLIGHT);
            }
            if now < e.until {
                return Err(e.until - now);
            }
            if now >= e.until + CAP {
                e.failures = 0;
            }
            e.checking = true;
            return Ok(());
        }
        if self.entries.len() >= TRACKED {
            self.make_room(now);
        }
        self.entries.insert(key, Entry { failures: 0, until: now, checking: true });
        Ok(())
    }

    /// The attempt `begin` admitted failed: the address waits longer than last time.
    pub fn failed(&mut self, client: IpAddr, now: Instant) {
        let key = Source::from(client);
        if !self.entries.contains_key(&key) && self.entries.len() >= TRACKED {
            self.make_room(now);
        }
        let e = self.entries.entry(key).or_insert(Entry { failures: 0, until: now, checking: false });
        e.failures = e.failures.saturating_add(1);
        e.until = now + wait_after(e.failures);
        e.checking = false;
    }

    /// The attempt `begin` admitted succeeded: the address starts afresh.
    pub fn succeeded(&mut self, client: IpAddr) {
        self.entries.remove(&Source::from(client));
    }

    /// Drops the entries whose wait ended a `CAP` ago; if none, the one whose wait ends first.
    /// Entries being checked stay: there are at most as many as the hashing pool admits.
    fn make_room(&mut self, now: Instant) {
        self.entries.retain(|_, e| e.checking || now < e.until + CAP);
        if self.entries.len() < TRACKED {
            return;
        }
        let soonest = self.entries.iter().filter(|(_, e)| !e.checking).min_by_key(|(_, e)| e.until).map(|(k, _)| *k);
        if let Some(k) = soonest {
            self.entries.remove(&k);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// `BASE` x 2^(failures-1), at most `CAP`.
fn wait_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BASE.saturating_mul(1 << doublings).min(CAP)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    /// Fails one attempt at `now` and returns how long the address must then wait.
    fn fail(t: &mut Throttle, client: IpAddr, now: Instant) -> Duration {
        t.begin(client, now).expect("admitted");
        t.failed(client, now);
        t.begin(client, now).expect_err("must wait after a failure")
    }

    #[test]
    fn each_failure_doubles_the_wait_up_to_the_cap() {
        let mut t = Throttle::default();
        let mut now = crate::clock::timer_now();
        let mut waits = Vec::new();
        for _ in 0..10 {
            let wait = fail(&mut t, A, now);
            waits.push(wait);
            now += wait;
        }
        let secs: Vec<f64> = waits.iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]);
    }

    #[test]
    fn an_address_waiting_is_refused_until_its_wait_ends_and_others_are_not() {
        let mut t = Throttle::default();
        let now = crate::clock::timer_now();
        fail(&mut t, A, now);
        assert_eq!(t.begin(A, now + Duration::from_millis(200)), Err(Duration::from_millis(300)));
        assert_eq!(t.begin(B, now), Ok(()), "another address is not held back");
        assert_eq!(t.begin(A, now + BASE), Ok(()));
    }

    #[test]
    fn while_an_attempt_is_checked_the_same_address_waits() {
        let mut t = Throttle::default();
        let now = crate::clock::timer_now();
        t.begin(A, now).unwrap();
        assert_eq!(t.begin(A, now), Err(IN_FLIGHT));
        t.succeeded(A);
        assert_eq!(t.begin(A, now), Ok(()));
    }

    #[test]
    fn a_success_resets_the_address() {
        let mut t = Throttle::default();
        let mut now = crate::clock::timer_now();
        for _ in 0..5 {
            now += fail(&mut t, A, now);
        }
        t.begin(A, now).unwrap();
        t.succeeded(A);
        assert_eq!(fail(&mut t, A, now), BASE, "the next failure is a first one again");
    }

    #[test]
    fn a_quiet_cap_after_the_wait_forgets_the_failures() {
        let mut t = Throttle::default();
        let mut now = crate::clock::timer_now();
        for _ in 0..5 {
            now += fail(&mut t, A, now);
        }
        assert_eq!(fail(&mut t, A, now + CAP), BASE);
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_an_entry() {
        let mut t = Throttle::default();
        let now = crate::clock::timer_now();
        fail(&mut t, "2001:db8:1:2::1".parse().unwrap(), now);
        assert!(t.begin("2001:db8:1:2:ffff::9".parse().unwrap(), now).is_err());
        assert!(t.begin("2001:db8:1:3::1".parse().unwrap(), now).is_ok());
        // An IPv4-mapped address is the IPv4 address.
        fail(&mut t, A, now);
        assert!(t.begin("::ffff:10.0.0.1".parse().unwrap(), now).is_err());
    }

    #[test]
    fn the_table_never_holds_more_than_tracked_addresses() {
        let mut t = Throttle::default();
        let now = crate::clock::timer_now();
        let flood = |i: u32| IpAddr::V4(Ipv4Addr::from_bits(0x0b00_0000 + i));
        // The address to keep has failed most, so its wait ends last.
        let mut kept = now;
        for _ in 0..6 {
            kept += fail(&mut t, A, kept);
        }
        for i in 0..(TRACKED as u32 * 2) {
            fail(&mut t, flood(i), now);
            assert!(t.len() <= TRACKED);
        }
        assert_eq!(t.len(), TRACKED);
        assert!(t.begin(A, now).is_err(), "the longest wait is the last forgotten");
        // Entries long quiet make room before any live one is dropped.
        let later = now + BASE + CAP;
        t.begin(B, later).unwrap();
        assert_eq!(t.len(), 2, "the stale flood is gone, A (still in its wait) and B remain");
    }
}
