//! When a TCP connection of `fast_path = "adaptive"` moves into the sockmap and back out: the
//! pure decisions and their thresholds. `tcp::forward` feeds `Turns` what each poll moved and
//! hands the connection over once it says so; `sockmap::forward` asks `Bulk` at each look at
//! the program's counters.
//!
//! Why these numbers. Linking a pair into the sockhash and taking it out again costs some 40
//! system calls; `bench/results/2026-11-26-performance.md` prices the difference: a connection
//! carried by the sockmap from its start cost the whole machine 2.802 s per 10k new connections
//! against 1.860 with splice (94 µs more each), while each keep-alive request then cost 0.439 s
//! per 10k against 0.518 (7.9 µs less each). Linking pays for itself after about 12 exchanges, so
//! a connection moves once it has made 16 small exchanges (32 direction turns): a connection that
//! carries one request, or a handful, never touches a map, and a long-lived one pays the link
//! once and saves on every later exchange (no more than twice the best choice made in hindsight,
//! as with renting skis until their price is reached). Turns rather than time: a connection
//! that waited T milliseconds has shown nothing about what it carries next.
//!
//! A connection leaves the sockmap when it carries bulk: the kernel's redirect through its work
//! queue moves about half of what splice does, so at 1 MiB or more in one direction within a
//! look, at 4 MiB/s or faster, it is handed back. Looks come every `LOOK_FIRST` while bytes move
//! and back off to `LOOK_MAX` while none do, so a crowd of idle promoted connections costs a
//! look (two map reads) every few seconds each.

use std::time::Duration;

/// Direction turns (bytes on the other side than the last ones, the first bytes included) after
/// which a connection of small exchanges moves into the sockmap: 16 requests and their answers.
pub const PROMOTE_TURNS: u32 = 32;

/// Bytes in one direction within one look that mark a promoted connection as bulk...
pub const BULK_BYTES: u64 = 1 << 20;
/// ... when they also came at this rate or faster (bytes per second).
pub const BULK_RATE: u64 = 4 << 20;

/// Looks at a promoted connection's counters: every `LOOK_FIRST` while bytes move, doubling up
/// to `LOOK_MAX` while none do.
pub const LOOK_FIRST: Duration = Duration::from_millis(250);
pub const LOOK_MAX: Duration = Duration::from_secs(4);

/// What a connection on the splice path has shown of its shape so far. `tcp::forward` calls
/// `observe` with `bulk` set whenever a direction splices, so a connection that has once carried
/// a full buffer is never promoted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Turns {
    /// The side whose bytes moved last: 0 none yet, 1 client to server, 2 server to client.
    last: u8,
    /// Changes of side, the first move included: a request and its answer are two.
    count: u32,
}

impl Turns {
    /// One poll's movement: whether bytes moved client to server and server to client, and
    /// whether a read filled the copy buffer (the connection carries bulk: it starts over).
    pub fn observe(&mut self, up: bool, down: bool, bulk: bool) {
        if bulk {
            *self = Turns::default();
            return;
        }
        let side = match (up, down) {
            (true, false) => 1,
            (false, true) => 2,
            // Nothing moved, or both ways at once (not an exchange): no turn.
            _ => return,
        };
        if side != self.last {
            self.count = self.count.saturating_add(1);
            self.last = side;
        }
    }

    /// Whether the connection has made enough small exchanges to move into the sockmap.
    pub fn promote(&self, after: u32) -> bool {
        after > 0 && self.count >= after
    }
}

/// Whether a promoted connection that moved `bytes` in one direction during a look of
/// `elapsed` carries bulk and should leave the sockmap.
pub fn bulk(bytes: u64, elapsed: Duration) -> bool {
    let ms = elapsed.as_millis().max(1) as u64;
    bytes >= BULK_BYTES && bytes.saturating_mul(1000) / ms >= BULK_RATE
}

/// The wait before the next look: short while bytes move, doubling while none do.
pub fn next_look(previous: Duration, moved: bool) -> Duration {
    if moved { LOOK_FIRST } else { (previous * 2).min(LOOK_MAX) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_response_exchanges_promote_after_the_turns() {
        let mut t = Turns::default();
        for i in 0..PROMOTE_TURNS / 2 {
            assert!(!t.promote(PROMOTE_TURNS), "promoted after {i} exchanges");
            t.observe(true, false, false);
            t.observe(false, true, false);
            // Reads that find the same side again are no turn.
            t.observe(false, true, false);
            t.observe(false, false, false);
        }
        assert!(t.promote(PROMOTE_TURNS));
        assert!(!t.promote(0), "0 means never");
    }

    #[test]
    fn a_short_connection_never_promotes() {
        let mut t = Turns::default();
        t.observe(true, false, false);
        t.observe(false, true, false);
        assert!(!t.promote(PROMOTE_TURNS));
    }

    #[test]
    fn one_way_streams_and_simultaneous_moves_are_no_turns() {
        let mut t = Turns::default();
        for _ in 0..1000 {
            t.observe(true, false, false);
            t.observe(true, true, false);
        }
        assert!(t.promote(1) && !t.promote(2), "only the first move counts");
    }

    #[test]
    fn a_full_buffer_starts_the_count_over() {
        let mut t = Turns::default();
        for _ in 0..PROMOTE_TURNS {
            t.observe(true, false, false);
            t.observe(false, true, false);
        }
        t.observe(false, true, true);
        assert!(!t.promote(PROMOTE_TURNS));
        t.observe(true, false, false);
        t.observe(false, true, false);
        assert!(t.promote(2) && !t.promote(3), "counted again from nothing");
    }

    #[test]
    fn bulk_needs_both_the_amount_and_the_rate() {
        let look = LOOK_FIRST;
        assert!(bulk(BULK_BYTES, look), "1 MiB in 250 ms is 4 MiB/s");
        assert!(!bulk(BULK_BYTES - 1, look));
        assert!(!bulk(BULK_BYTES, Duration::from_secs(1)), "1 MiB in a second is 1 MiB/s");
        assert!(bulk(64 << 20, Duration::from_secs(4)));
        assert!(!bulk(0, Duration::ZERO));
    }

    #[test]
    fn looks_back_off_while_idle_and_come_back_when_bytes_move() {
        let mut d = LOOK_FIRST;
        for _ in 0..10 {
            d = next_look(d, false);
        }
        assert_eq!(d, LOOK_MAX);
        assert_eq!(next_look(d, true), LOOK_FIRST);
    }
}
