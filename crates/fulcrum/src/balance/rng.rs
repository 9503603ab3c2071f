//! The one source of randomness of the balancing algorithms: the thread's generator in service,
//! or a seeded one so a test or a lab run replays the same picks. Kept apart so every algorithm
//! that draws (random, p2c) is seeded the same way and none grows its own generator.

use std::sync::Mutex;

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng};

#[derive(Debug, Default)]
pub struct Rng {
    /// A seeded generator behind a short lock when reproducibility is asked for; `None` uses the
    /// thread's generator, which needs no lock shared between worker threads.
    seeded: Option<Mutex<SmallRng>>,
}

impl Rng {
    pub fn seeded(seed: u64) -> Self {
        Rng { seeded: Some(Mutex::new(SmallRng::seed_from_u64(seed))) }
    }

    /// A uniform draw from `0..n`; 0 when `n` is 0, so no caller can make a pick panic.
    pub fn below(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        match &self.seeded {
            Some(rng) => rng.lock().unwrap_or_else(|p| p.into_inner()).random_range(0..n),
            None => rand::rng().random_range(0..n),
        }
    }

    /// `below` for an index.
    pub fn index(&self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_generators_with_one_seed_draw_the_same_sequence() {
        let (a, b) = (Rng::seeded(42), Rng::seeded(42));
        for n in 1..200u64 {
            assert_eq!(a.below(n), b.below(n));
        }
    }

    #[test]
    fn draws_stay_below_the_bound_and_an_empty_range_gives_zero() {
        let r = Rng::default();
        for n in 1..100u64 {
            assert!(r.below(n) < n);
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(Rng::seeded(1).index(0), 0);
    }
}
