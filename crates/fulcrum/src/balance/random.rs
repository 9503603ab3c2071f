//! `random`: weighted random choice, each pick independent. The Java TCP load balancer paper's
//! "Random" algorithm, with weights; useful as the baseline the others are compared against.
//! A pick draws a point below the sum of the shares `update` saw and finds its server by binary
//! search (`usable.rs`), so it costs the same over 4 servers and over 10,000.

use super::rng::Rng;
use super::usable::Snapshot;
use super::{Balancer, Pick, ServerView};

/// `random` in the registry (`algorithm.rs`).
pub const RANDOM: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "random",
        title: "Random",
        modes: super::entry::EVERY_MODE,
        hashes: false,
        description: "a server drawn at random in proportion to its weight",
    },
    build: |_| Box::new(Random::default()),
};

#[derive(Debug, Default)]
pub struct Random {
    rng: Rng,
    usable: Snapshot,
}

impl Random {
    pub fn seeded(seed: u64) -> Self {
        Random { rng: Rng::seeded(seed), usable: Snapshot::default() }
    }

    /// A draw from the snapshot by share; one miss after another (servers avoided, or changed
    /// since the update) ends in a pass over the view. Both draw each usable server in
    /// proportion to its share, so the mixture does too.
    fn draw(&self, rng: &Rng, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.usable.draw(pick, view, |u| u.at(rng.below(u.total()))).or_else(|| pass(rng, pick, view))
    }
}

impl Balancer for Random {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.draw(&self.rng, pick, view)
    }

    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.draw(&Rng::default(), pick, view)
    }

    fn update(&self, view: &dyn ServerView) {
        self.usable.rebuild(view);
    }
}

/// A usable server drawn with `rng` in proportion to its share, by a pass over the view.
fn pass(rng: &Rng, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
    let usable = |i: usize| if pick.avoids(i) { 0 } else { view.share(i) };
    let total: u64 = (0..view.len()).map(usable).sum();
    if total == 0 {
        return None;
    }
    let mut point = rng.below(total);
    for i in 0..view.len() {
        let w = usable(i);
        if point < w {
            return Some(i);
        }
        point -= w;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::testing::{FakePool, count_picks};
    use proptest::prelude::*;

    #[test]
    fn random_empty_pool_returns_none_without_panic() {
        let r = Random::seeded(1);
        assert_eq!(r.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[])), None);
        assert_eq!(r.pick(&FakePool::pick(&[0, 1]), &FakePool::with_weights(&[1, 1])), None);
    }

    #[test]
    fn avoided_server_is_never_picked_while_another_is_usable() {
        let r = Random::seeded(7);
        let pool = FakePool::with_weights(&[1, 1, 1]);
        for _ in 0..1000 {
            assert_ne!(r.pick(&FakePool::pick(&[2]), &pool), Some(2));
        }
    }

    #[test]
    fn a_server_down_since_the_last_update_is_never_drawn() {
        let mut pool = FakePool::with_weights(&[1, 1, 1]);
        let r = pool.attach(Random::seeded(3));
        // Changed behind the balancer's back: its snapshot still holds server 0.
        let mut stale = pool.untold();
        stale.set_up(0, false);
        for _ in 0..1000 {
            assert_ne!(r.pick(&FakePool::pick(&[]), &stale), Some(0));
        }
        assert_eq!(r.pick(&FakePool::pick(&[1, 2]), &stale), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn random_honours_weights_within_2_percent_over_100k_picks(weights in proptest::collection::vec(1u32..=16, 2..6), seed in any::<u64>(), told in any::<bool>()) {
            // Told of its servers (a snapshot drawn by binary search) or not (a pass each pick).
            let mut pool = FakePool::with_weights(&weights);
            let r = if told { pool.attach(Random::seeded(seed)) } else { std::sync::Arc::new(Random::seeded(seed)) };
            let counts = count_picks(&*r, &pool, 100_000);
            let total: u32 = weights.iter().sum();
            for (i, &w) in weights.iter().enumerate() {
                let share = counts[i] as f64 / 100_000.0;
                let want = w as f64 / total as f64;
                prop_assert!((share - want).abs() < 0.02, "server {} share {} want {}", i, share, want);
            }
        }
    }
}
