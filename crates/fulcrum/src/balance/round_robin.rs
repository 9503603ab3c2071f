//! `round-robin`: smooth weighted round robin, as nginx does it (`ngx_http_upstream_round_robin.c`).
//!
//! Every pick adds each usable server's weight to its running score, takes the highest, and
//! subtracts the total from the winner. With weights 5,1,1 the order is a a b a c a a rather than
//! a a a a a b c, so a heavy server never gets a burst; with equal weights it is plain rotation.
//! Weights (ramped by slow start: `ServerView::share`) are read at every pick, so a server going
//! down, a weight change or a ramp's progress takes effect at once; `update` sizes the scores, so
//! a pick never allocates.
//!
//! Where every usable server has the same share (the common pool, and every pool between slow
//! starts), smooth weighted round robin is plain rotation: `update` keeps the usable servers
//! (`usable.rs`) and a pick is one cursor step over them, the same over 4 servers and over
//! 10,000, with no lock. Uneven shares take the turn above, a pass over the pool as nginx's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::usable::{DRAWS, Snapshot};
use super::{Balancer, Pick, ServerView};

/// `round-robin` in the registry (`algorithm.rs`).
pub const ROUND_ROBIN: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "round-robin",
        title: "Round robin",
        modes: super::entry::EVERY_MODE,
        hashes: false,
        description: "each server in turn, as often as its weight says (smooth weighted rotation); a server coming back starts afresh",
    },
    build: |_| Box::new(RoundRobin::default()),
};

/// `cookie`: the affinity cookie is read by the HTTP data path (`proxy::http::affinity`), which
/// sends a client to the server it names; this balancer spreads the clients without one.
pub const COOKIE: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "cookie",
        title: "Cookie affinity (HTTP)",
        modes: super::entry::HTTP,
        hashes: false,
        description: "the server the affinity cookie names while it is usable; round robin for a client without one, which then gets the cookie",
    },
    build: |_| Box::new(RoundRobin::default()),
};

#[derive(Debug, Default)]
pub struct RoundRobin {
    /// Running score per server; a short lock per pick, held for one pass over the pool.
    current: Mutex<Vec<i64>>,
    /// The usable servers, for rotation while their shares are equal.
    usable: Snapshot,
    /// The rotation's place among them.
    cursor: AtomicUsize,
}

impl RoundRobin {
    /// The first usable server from the rotation's place (moved on when `take`), while the
    /// shares are equal; `None` sends the pick to the turn. So does a pick that must avoid
    /// servers (a retry, or servers at their `maxconn`): in the rotation it would take the next
    /// server's place and skew the first attempts (a failing server would get every other one);
    /// the turn spreads such picks over the others by their scores.
    fn rotate(&self, take: bool, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        if !pick.avoid.is_empty() {
            return None;
        }
        let usable = self.usable.serving(view).filter(|u| u.equal_shares())?;
        let start = if take { self.cursor.fetch_add(1, Relaxed) } else { self.cursor.load(Relaxed) };
        (start..start + DRAWS).map(|k| usable.nth(k)).find(|&i| pick.usable(view, i))
    }
}

/// Scores for `n` servers: kept while the count is the same, started afresh when it differs.
fn sized(current: &mut Vec<i64>, n: usize) {
    if current.len() != n {
        current.clear();
        current.resize(n, 0);
    }
}

impl Balancer for RoundRobin {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.rotate(true, pick, view).or_else(|| turn(&mut self.current.lock().unwrap_or_else(|p| p.into_inner()), pick, view))
    }

    /// The rotation from where it stands, or the turn on a copy of the scores.
    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.rotate(false, pick, view).or_else(|| {
            let mut copy = self.current.lock().unwrap_or_else(|p| p.into_inner()).clone();
            turn(&mut copy, pick, view)
        })
    }

    fn update(&self, view: &dyn ServerView) {
        sized(&mut self.current.lock().unwrap_or_else(|p| p.into_inner()), view.len());
        self.usable.rebuild(view);
    }
}

/// One turn of smooth weighted round robin over `current`, the servers' running scores.
fn turn(current: &mut Vec<i64>, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
    // A no-op once `update` has run; kept so a balancer used before its first update works.
    sized(current, view.len());
    smooth_turn(current, |i| if pick.avoids(i) { 0 } else { view.share(i) as i64 })
}

/// One turn of smooth weighted round robin (nginx's) over the servers' running scores
/// `current`: each server in rotation (`weight(i)` above zero) gains its weight, the highest
/// score is chosen and set back by the sum of the weights, so over a cycle each server is
/// chosen as often as its weight says, and evenly spread. A server out of rotation starts
/// afresh when it returns.
fn smooth_turn(current: &mut [i64], weight: impl Fn(usize) -> i64) -> Option<usize> {
    let mut total = 0;
    let mut best: Option<usize> = None;
    for i in 0..current.len() {
        let w = weight(i);
        if w <= 0 {
            current[i] = 0;
            continue;
        }
        current[i] += w;
        total += w;
        if best.is_none_or(|b| current[i] > current[b]) {
            best = Some(i);
        }
    }
    let b = best?;
    current[b] -= total;
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::testing::{FakePool, count_picks};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn round_robin_honours_weights_within_one_pick_over_100k(weights in proptest::collection::vec(1u32..=256, 1..8)) {
            let pool = FakePool::with_weights(&weights);
            let counts = count_picks(&RoundRobin::default(), &pool, 100_000);
            let total: u32 = weights.iter().sum();
            for (i, &w) in weights.iter().enumerate() {
                let want = 100_000.0 * w as f64 / total as f64;
                prop_assert!((counts[i] as f64 - want).abs() <= 1.0, "server {} got {} want {}", i, counts[i], want);
            }
        }
    }

    #[test]
    fn round_robin_gives_each_of_four_servers_100_of_400_picks() {
        let pool = FakePool::with_weights(&[1, 1, 1, 1]);
        let counts = count_picks(&RoundRobin::default(), &pool, 400);
        assert_eq!(counts, vec![100, 100, 100, 100]);
    }

    #[test]
    fn round_robin_is_smooth_for_uneven_weights() {
        let pool = FakePool::with_weights(&[5, 1, 1]);
        let rr = RoundRobin::default();
        let order: Vec<usize> = (0..7).map(|_| rr.pick(&FakePool::pick(&[]), &pool).unwrap()).collect();
        assert_eq!(order, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn round_robin_empty_pool_returns_none_without_panic() {
        let rr = RoundRobin::default();
        assert_eq!(rr.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[])), None);
        assert_eq!(rr.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[0, 0])), None);
    }

    #[test]
    fn avoided_server_is_never_picked_while_another_is_usable() {
        let pool = FakePool::with_weights(&[1, 1, 1]);
        let rr = RoundRobin::default();
        for _ in 0..30 {
            assert_ne!(rr.pick(&FakePool::pick(&[1]), &pool), Some(1));
        }
        assert_eq!(rr.pick(&FakePool::pick(&[0, 2]), &pool), Some(1));
        assert_eq!(rr.pick(&FakePool::pick(&[0, 1, 2]), &pool), None);
    }

    #[test]
    fn told_of_equal_servers_it_rotates_and_skips_one_down_before_its_update() {
        let mut pool = FakePool::with_weights(&[3, 3, 3, 3]);
        let rr = pool.attach(RoundRobin::default());
        let order: Vec<usize> = (0..8).map(|_| rr.pick(&FakePool::pick(&[]), &pool).unwrap()).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        pool.set_up(1, false);
        assert_eq!(count_picks(&*rr, &pool, 300), vec![100, 0, 100, 100]);
        let mut stale = pool.untold();
        stale.set_up(2, false);
        let counts = count_picks(&*rr, &stale, 300);
        assert_eq!((counts[1], counts[2], counts[0] + counts[3]), (0, 0, 300), "{counts:?}");
        // A retry avoiding the server that failed it takes no place in the rotation.
        let first: Vec<usize> = (0..6)
            .map(|_| {
                let i = rr.pick(&FakePool::pick(&[]), &pool).unwrap();
                rr.pick(&FakePool::pick(&[i]), &pool).unwrap();
                i
            })
            .collect();
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 0, 2, 2, 3, 3], "first attempts still rotate: {first:?}");
        // Uneven again: the smooth turn.
        pool.set_weight(0, 6);
        let order: Vec<usize> = (0..4).map(|_| rr.pick(&FakePool::pick(&[]), &pool).unwrap()).collect();
        assert_eq!(order.iter().filter(|&&i| i == 0).count(), 2, "{order:?}");
    }

    #[test]
    fn a_down_server_gets_nothing_and_its_share_is_spread() {
        let mut pool = FakePool::with_weights(&[1, 1, 1, 1]);
        pool.set_up(2, false);
        let counts = count_picks(&RoundRobin::default(), &pool, 300);
        assert_eq!(counts, vec![100, 100, 0, 100]);
    }
}
