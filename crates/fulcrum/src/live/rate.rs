//! Session rate as HAProxy's stats show it: sessions started in the last whole second, and the
//! most ever seen in one second. One atomic word on the data path (the second and its count packed
//! together), so counting a session is a single compare-and-swap in the common case.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct Rate {
    /// Current second (high 32 bits) and sessions counted in it (low 32 bits).
    now: AtomicU64,
    /// Count of the second before `now`'s, when it was the one just before.
    previous: AtomicU64,
    max: AtomicU64,
}

fn pack(second: u64, count: u64) -> u64 {
    (second << 32) | (count & 0xffff_ffff)
}

fn unpack(word: u64) -> (u64, u64) {
    (word >> 32, word & 0xffff_ffff)
}

impl Rate {
    /// Counts one session started at unix second `second`.
    pub fn tick(&self, second: u64) {
        let mut old = self.now.load(Relaxed);
        loop {
            let (s, c) = unpack(old);
            let new = if s == second { pack(s, c + 1) } else { pack(second, 1) };
            match self.now.compare_exchange_weak(old, new, Relaxed, Relaxed) {
                Ok(_) => {
                    if s != second {
                        // The second `s` is complete: it is the newest full second we know.
                        self.previous.store(if s + 1 == second { c } else { 0 }, Relaxed);
                        self.max.fetch_max(c, Relaxed);
                    } else {
                        self.max.fetch_max(c + 1, Relaxed);
                    }
                    return;
                }
                Err(actual) => old = actual,
            }
        }
    }

    /// Sessions in the last whole second before `second`.
    pub fn current(&self, second: u64) -> u64 {
        let (s, c) = unpack(self.now.load(Relaxed));
        if s == second {
            self.previous.load(Relaxed)
        } else if s + 1 == second {
            c
        } else {
            0
        }
    }

    pub fn max(&self) -> u64 {
        self.max.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_last_whole_second_and_keeps_the_peak() {
        let r = Rate::default();
        for _ in 0..5 {
            r.tick(100);
        }
        assert_eq!(r.current(100), 0, "second 100 is not over yet");
        assert_eq!(r.current(101), 5);
        r.tick(101);
        r.tick(101);
        assert_eq!(r.current(101), 5);
        assert_eq!(r.current(102), 2);
        assert_eq!(r.current(103), 0, "nothing in second 102");
        r.tick(110);
        assert_eq!(r.current(110), 0, "seconds 102..109 were empty");
        assert_eq!(r.max(), 5);
    }
}
