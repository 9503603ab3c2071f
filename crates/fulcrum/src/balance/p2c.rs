//! The power-of-two-choices rule over any [`Load`] (Mitzenmacher, "The Power of Two Choices in
//! Randomized Load Balancing"; tower's `balance/p2c`): draw two distinct usable servers at random
//! and take the less loaded. Two random choices avoid the herd that "always the least loaded"
//! causes when many balancers act on the same stale information.
//!
//! A pick draws two distinct servers by index from the usable ones `update` saw (`usable.rs`),
//! so it costs the same over 4 servers and over 10,000. Without that snapshot (before the first
//! update), or when draws keep missing (servers avoided or changed since), it counts the usable
//! servers, draws two distinct ranks among them, and finds them in a second pass; neither way
//! allocates.

use super::load::Load;
use super::rng::Rng;
use super::usable::{DRAWS, Snapshot};
use super::{Balancer, Pick, ServerView};

#[derive(Debug, Default)]
pub struct P2c<L> {
    load: L,
    rng: Rng,
    usable: Snapshot,
}

impl<L: Default> P2c<L> {
    pub fn seeded(seed: u64) -> Self {
        P2c { load: L::default(), rng: Rng::seeded(seed), usable: Snapshot::default() }
    }
}

impl<L: Load> Balancer for P2c<L> {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.choose(&self.rng, pick, view)
    }

    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.choose(&Rng::default(), pick, view)
    }

    fn update(&self, view: &dyn ServerView) {
        self.usable.rebuild(view);
    }
}

impl<L: Load> P2c<L> {
    /// The less loaded of two distinct usable servers drawn with `rng`: from the snapshot, where
    /// both drawn may be used now (so each pair of usable servers is as likely as by the pass),
    /// else by the pass.
    fn choose(&self, rng: &Rng, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        if let Some(usable) = self.usable.serving(view).filter(|u| u.len() >= 2) {
            let n = usable.len();
            for _ in 0..DRAWS {
                let a = rng.index(n);
                let (x, y) = (usable.nth(a), usable.nth(a + 1 + rng.index(n - 1)));
                if pick.usable(view, x) && pick.usable(view, y) {
                    return Some(self.better(view, x, y));
                }
            }
        }
        self.pass(rng, pick, view)
    }

    /// `y` when it is less loaded than `x`, else `x`.
    fn better(&self, view: &dyn ServerView, x: usize, y: usize) -> usize {
        if self.load.load(view, y) < self.load.load(view, x) { y } else { x }
    }

    /// [`P2c::choose`] by ranks found in two passes over the view.
    fn pass(&self, rng: &Rng, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        let usable = |i: usize| pick.usable(view, i);
        let n = (0..view.len()).filter(|&i| usable(i)).count();
        if n < 2 {
            return (0..view.len()).find(|&i| usable(i));
        }
        let a = rng.index(n);
        // A second rank drawn from the other n - 1, so the two choices are distinct.
        let b = (a + 1 + rng.index(n - 1)) % n;
        let (mut first, mut second) = (None, None);
        for (rank, i) in (0..view.len()).filter(|&i| usable(i)).enumerate() {
            if rank == a {
                first = Some(i);
            }
            if rank == b {
                second = Some(i);
            }
        }
        match (first, second) {
            (Some(x), Some(y)) => Some(self.better(view, x, y)),
            // A server left between the two passes: take the one still found.
            (x, y) => x.or(y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::load::InFlight;
    use crate::balance::testing::FakePool;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn p2c_over_connections_never_picks_the_busiest_server(n in 2usize..10, seed in any::<u64>()) {
            // The rule runs over any load: with connections in flight as the metric, the busiest
            // server loses every comparison it is drawn into.
            let mut pool = FakePool::with_weights(&vec![1; n]);
            for i in 0..n { pool.set_active(i, i as u64); }
            let b = if seed % 2 == 0 { pool.attach(P2c::<InFlight>::seeded(seed)) } else { std::sync::Arc::new(P2c::<InFlight>::seeded(seed)) };
            for _ in 0..200 {
                let i = b.pick(&FakePool::pick(&[]), &pool).unwrap();
                prop_assert!(i < n - 1);
            }
        }
    }

    #[test]
    fn p2c_skips_avoided_and_down_servers_and_returns_none_without_one() {
        let mut pool = FakePool::with_weights(&[1, 1, 1, 1]);
        pool.set_up(0, false);
        let b = P2c::<InFlight>::seeded(9);
        for _ in 0..200 {
            let i = b.pick(&FakePool::pick(&[2]), &pool).unwrap();
            assert!(i == 1 || i == 3, "{i}");
        }
        assert_eq!(b.pick(&FakePool::pick(&[1, 2, 3]), &pool), None);
    }

    #[test]
    fn p2c_told_of_its_servers_draws_every_usable_one_and_no_other() {
        let mut pool = FakePool::with_weights(&[1; 6]);
        let b = pool.attach(P2c::<InFlight>::seeded(4));
        pool.set_up(5, false);
        // Server 4 down behind the balancer's back: the snapshot still holds it.
        let mut stale = pool.untold();
        stale.set_up(4, false);
        let mut seen = [0usize; 6];
        for _ in 0..2000 {
            seen[b.pick(&FakePool::pick(&[0]), &stale).unwrap()] += 1;
        }
        assert_eq!((seen[0], seen[4], seen[5]), (0, 0, 0), "avoided, down untold, down: {seen:?}");
        assert!(seen[1..4].iter().all(|&c| c > 400), "the usable ones share the picks: {seen:?}");
    }
}
