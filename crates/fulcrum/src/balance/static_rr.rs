//! `static-rr`: HAProxy's static weighted round robin (`lb_map.c`). The order of one cycle (a
//! smooth weighted sequence, as long as the sum of the effective weights over their common
//! divisor) is computed in `update` whenever an effective weight or a slow-start ramp changes, as HAProxy recomputes its map on every server state
//! change, and published behind an `ArcSwap`; a lock-free cursor walks it, so a pick costs an
//! atomic add and a load. A server that goes down leaves the next cycle and the others share its
//! turns by weight. Servers are skipped in place only when a connection already failed on them
//! (redispatch), or in the instant between a state change and its rebuild.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::{Balancer, Pick, ServerView};

/// `static-rr` in the registry (`algorithm.rs`).
pub const STATIC_RR: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "static-rr",
        title: "Static round robin (weights)",
        modes: super::entry::EVERY_MODE,
        hashes: false,
        description: "a fixed weighted sequence built when a weight or state changes, walked by one cursor (HAProxy's static-rr)",
    },
    build: |_| Box::new(StaticRr::default()),
};

/// One cycle and the effective weights it was computed from.
#[derive(Debug, Default)]
struct Sequence {
    weights: Vec<u32>,
    order: Vec<usize>,
}

#[derive(Debug, Default)]
pub struct StaticRr {
    sequence: ArcSwap<Sequence>,
    /// Serialises rebuilds, so the last to store read the state left by every change before it.
    rebuild: Mutex<()>,
    cursor: AtomicUsize,
}

/// A ramped weight (`ServerView::share`, thousandths) in sixteenths of a unit, as HAProxy scales
/// its weights for slow start: fine enough to ramp a weight-1 server in steps, and a cycle stays
/// short once [`reduced`] divides the common factor out. A usable server keeps at least 1.
fn sixteenths(share: u64) -> u32 {
    let full = u64::from(super::RAMP_FULL);
    if share == 0 { 0 } else { (share * 16).div_ceil(full).max(1) as u32 }
}

/// Weights divided by their greatest common divisor: the same proportions in the shortest cycle.
fn reduced(weights: &[u32]) -> Vec<u32> {
    let gcd = weights.iter().fold(0u32, |a, &b| {
        let (mut a, mut b) = (a, b);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    });
    weights.iter().map(|&w| if gcd > 1 { w / gcd } else { w }).collect()
}

/// The smooth weighted order of the shortest cycle of `weights` (0: left out): what a pick walks,
/// and the order `mode = "kernel"` writes into its `numgen inc` map (`kernel::split`).
pub fn cycle(weights: &[u32]) -> Vec<usize> {
    build(&reduced(weights))
}

/// The smooth weighted order of one full cycle.
fn build(weights: &[u32]) -> Vec<usize> {
    let total: i64 = weights.iter().map(|&w| w as i64).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = None;
        for (i, &w) in weights.iter().enumerate() {
            if w == 0 {
                continue;
            }
            current[i] += w as i64;
            if best.is_none_or(|b: usize| current[i] > current[b]) {
                best = Some(i);
            }
        }
        if let Some(b) = best {
            current[b] -= total;
            out.push(b);
        }
    }
    out
}

impl StaticRr {
    /// The first usable server of the sequence from position `start` on.
    fn walk(&self, start: usize, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        let seq = self.sequence.load();
        let len = seq.order.len();
        (0..len).map(|k| seq.order[(start + k) % len]).find(|&i| pick.usable(view, i))
    }
}

impl Balancer for StaticRr {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        if self.sequence.load().order.is_empty() {
            return None;
        }
        self.walk(self.cursor.fetch_add(1, Relaxed), pick, view)
    }

    /// The walk from the cursor, which stays where it is.
    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.walk(self.cursor.load(Relaxed), pick, view)
    }

    fn update(&self, view: &dyn ServerView) {
        let _one_at_a_time = self.rebuild.lock().unwrap_or_else(|p| p.into_inner());
        let weights: Vec<u32> = (0..view.len()).map(|i| sixteenths(view.share(i))).collect();
        if self.sequence.load().weights == weights {
            return;
        }
        self.sequence.store(Arc::new(Sequence { order: cycle(&weights), weights }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::testing::{FakePool, count_picks};
    use proptest::prelude::*;

    #[test]
    fn static_rr_cycle_is_as_long_as_the_weight_sum() {
        assert_eq!(build(&[3, 1]), vec![0, 0, 1, 0]);
        assert_eq!(build(&[0, 0]), Vec::<usize>::new());
    }

    #[test]
    fn static_rr_rebuilds_when_the_pool_changes() {
        let mut pool = FakePool::with_weights(&[1, 1]);
        let b = pool.attach(StaticRr::default());
        assert_eq!(count_picks(&*b, &pool, 10), vec![5, 5]);
        pool.set_weight(1, 3);
        assert_eq!(count_picks(&*b, &pool, 40), vec![10, 30]);
    }

    #[test]
    fn static_rr_down_server_leaves_the_cycle_and_the_rest_share_its_turns_by_weight() {
        let mut pool = FakePool::with_weights(&[1, 1, 2]);
        let b = pool.attach(StaticRr::default());
        pool.set_up(0, false);
        assert_eq!(count_picks(&*b, &pool, 30), vec![0, 10, 20]);
        pool.set_up(0, true);
        assert_eq!(count_picks(&*b, &pool, 40), vec![10, 10, 20]);
    }

    #[test]
    fn static_rr_keeps_its_cycle_when_no_effective_weight_changed() {
        let mut pool = FakePool::with_weights(&[2, 1]);
        let b = pool.attach(StaticRr::default());
        let before = b.sequence.load_full();
        b.update(&pool);
        assert!(Arc::ptr_eq(&before, &b.sequence.load_full()), "an event that changes no weight rebuilds nothing");
    }

    #[test]
    fn static_rr_empty_pool_returns_none_without_panic() {
        let mut empty = FakePool::with_weights(&[]);
        let b = empty.attach(StaticRr::default());
        assert_eq!(b.pick(&FakePool::pick(&[]), &empty), None);
        let mut one = FakePool::with_weights(&[4]);
        let b = one.attach(StaticRr::default());
        assert_eq!(b.pick(&FakePool::pick(&[0]), &one), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn static_rr_honours_weights_exactly_over_whole_cycles(weights in proptest::collection::vec(1u32..=256, 1..8)) {
            let mut pool = FakePool::with_weights(&weights);
            let b = pool.attach(StaticRr::default());
            let total: u32 = weights.iter().sum();
            let cycles = (100_000 / total).max(1);
            let counts = count_picks(&*b, &pool, (total * cycles) as usize);
            for (i, &w) in weights.iter().enumerate() {
                prop_assert_eq!(counts[i], (w * cycles) as usize);
            }
        }
    }
}
