//! The "least loaded of all" rule over any [`Load`]: scan every usable server and take the one
//! with the lowest metric (HAProxy's `leastconn` with `load::InFlight`). Ties rotate: the scan
//! starts one server further on every pick, so equally loaded servers are used in turn.
//!
//! The scan stops at the first server no other can beat (`Load::is_floor`: nothing in flight),
//! which is the one the whole scan would have chosen. So while a pool has more servers than
//! connections in flight (a large pool), a pick reads a few servers, not all of them; a pool
//! whose every server is busy is still read whole.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::load::Load;
use super::{Balancer, Pick, ServerView};

#[derive(Debug, Default)]
pub struct Least<L> {
    load: L,
    /// Where the scan starts, moved on every pick to rotate among equals.
    start: AtomicUsize,
}

impl<L: Load> Balancer for Least<L> {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.scan(self.start.fetch_add(1, Relaxed), pick, view)
    }

    /// The scan from where the next pick starts, which stays there.
    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.scan(self.start.load(Relaxed), pick, view)
    }
}

impl<L: Load> Least<L> {
    /// The least loaded usable server, the scan starting at `start` (mod the servers): the
    /// first of equals wins.
    fn scan(&self, start: usize, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        let n = view.len();
        if n == 0 {
            return None;
        }
        let start = start % n;
        let mut best: Option<(usize, L::Metric)> = None;
        for k in 0..n {
            let i = (start + k) % n;
            if !pick.usable(view, i) {
                continue;
            }
            let metric = self.load.load(view, i);
            if self.load.is_floor(&metric) {
                return Some(i);
            }
            if best.as_ref().is_none_or(|(_, b)| metric < *b) {
                best = Some((i, metric));
            }
        }
        best.map(|(i, _)| i)
    }
}
