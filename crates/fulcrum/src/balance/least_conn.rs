//! `least-conn`: the usable server with the fewest connections in flight per unit of weight
//! (HAProxy's `leastconn`, `lb_fwlc.c`): the "least of all" rule (`least.rs`) over the in-flight
//! measure (`load::InFlight`), which compares ratios exactly and rotates among ties.

use super::least::Least;
use super::load::InFlight;

/// `least-conn` in the registry (`algorithm.rs`).
pub const LEAST_CONN: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "least-conn",
        title: "Least connection",
        modes: super::entry::PROXIED,
        hashes: false,
        description: "the server with the fewest connections in flight per unit of weight; equals in turn",
    },
    build: |_| Box::new(LeastConn::default()),
};

pub type LeastConn = Least<InFlight>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::Balancer;
    use crate::balance::testing::FakePool;

    #[test]
    fn least_conn_prefers_fewest_active_per_weight() {
        let mut pool = FakePool::with_weights(&[1, 1, 2]);
        pool.set_active(0, 3);
        pool.set_active(1, 1);
        pool.set_active(2, 3); // 1.5 per weight
        let lc = LeastConn::default();
        for _ in 0..5 {
            assert_eq!(lc.pick(&FakePool::pick(&[]), &pool), Some(1));
        }
        assert_eq!(lc.pick(&FakePool::pick(&[1]), &pool), Some(2));
    }

    #[test]
    fn least_conn_rotates_among_equally_loaded_servers() {
        let pool = FakePool::with_weights(&[1, 1, 1]);
        let lc = LeastConn::default();
        let mut seen: Vec<usize> = (0..3).map(|_| lc.pick(&FakePool::pick(&[]), &pool).unwrap()).collect();
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn least_conn_empty_pool_returns_none_without_panic() {
        let lc = LeastConn::default();
        assert_eq!(lc.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[])), None);
        assert_eq!(lc.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[0])), None);
    }
}
