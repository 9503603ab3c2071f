//! `p2c-ewma`: power of two choices over peak-EWMA latency, as Finagle and Linkerd balance (see
//! tower's `balance/p2c` and `load/peak_ewma.rs`): the p2c rule (`p2c.rs`) over the cost
//! `load::PeakEwmaCost` = EWMA latency x (connections in flight + 1) / weight. Two random choices
//! avoid the herd that "always the least loaded" causes when many balancers share stale
//! information, and the peak EWMA reacts at once to a slow server and forgets it slowly.
//!
//! In tcp mode the latency is the connect time (`load::Measure`), which is where a server with an
//! overflowing accept queue shows its trouble.

use super::load::PeakEwmaCost;
use super::p2c::P2c;

/// `p2c-ewma` in the registry (`algorithm.rs`).
pub const P2C_EWMA: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "p2c-ewma",
        title: "Power of two choices, peak EWMA",
        modes: super::entry::PROXIED,
        hashes: false,
        description: "the less loaded of two servers drawn at random, load being the peak EWMA of connect time times connections in flight",
    },
    build: |_| Box::new(P2cEwma::default()),
};

pub type P2cEwma = P2c<PeakEwmaCost>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::Balancer;
    use crate::balance::testing::FakePool;
    use proptest::prelude::*;

    #[test]
    fn p2c_never_picks_the_slowest_of_three_when_two_are_compared_against_it() {
        let mut pool = FakePool::with_weights(&[1, 1, 1]);
        pool.set_ewma(0, 100.0);
        pool.set_ewma(1, 120.0);
        pool.set_ewma(2, 1_000_000.0);
        let b = P2cEwma::seeded(3);
        for _ in 0..1000 {
            assert_ne!(b.pick(&FakePool::pick(&[]), &pool), Some(2));
        }
    }

    #[test]
    fn p2c_weighs_latency_by_connections_in_flight() {
        let mut pool = FakePool::with_weights(&[1, 1]);
        pool.set_ewma(0, 100.0);
        pool.set_ewma(1, 150.0);
        pool.set_active(0, 5);
        let b = P2cEwma::seeded(1);
        assert_eq!(b.pick(&FakePool::pick(&[]), &pool), Some(1));
    }

    #[test]
    fn p2c_empty_pool_returns_none_without_panic() {
        let b = P2cEwma::seeded(1);
        assert_eq!(b.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[])), None);
        assert_eq!(b.pick(&FakePool::pick(&[0]), &FakePool::with_weights(&[1])), None);
        assert_eq!(b.pick(&FakePool::pick(&[0]), &FakePool::with_weights(&[1, 1])), Some(1));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn p2c_compares_two_distinct_servers(n in 2usize..10, seed in any::<u64>()) {
            // With one server far cheaper than the rest, it wins every pick it is drawn into and
            // no pick returns a server that lost its comparison: the two draws are distinct.
            let mut pool = FakePool::with_weights(&vec![1; n]);
            for i in 0..n { pool.set_ewma(i, 1000.0 + i as f64); }
            let b = P2cEwma::seeded(seed);
            for _ in 0..200 {
                let i = b.pick(&FakePool::pick(&[]), &pool).unwrap();
                prop_assert!(i < n - 1, "the most expensive server can never win a comparison");
            }
        }
    }
}
