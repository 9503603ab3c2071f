//! `least-conn`: the usable server with the fewest connections in flight per unit of weight
//! (HAProxy's `leastconn`, `lb_fwlc.c`). Ratios are compared by cross-multiplying, so no float
//! rounding decides a tie; ties rotate, so equally loaded servers are used in turn.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::{Balancer, Pick, Pool};

#[derive(Debug, Default)]
pub struct LeastConn {
    /// Where the scan starts, moved on every pick to rotate among equals.
    start: AtomicUsize,
}

impl Balancer for LeastConn {
    fn pick(&self, pick: &Pick<'_>, pool: &dyn Pool) -> Option<usize> {
        let n = pool.len();
        if n == 0 {
            return None;
        }
        let start = self.start.fetch_add(1, Relaxed) % n;
        let mut best: Option<(usize, u128, u128)> = None;
        for k in 0..n {
            let i = (start + k) % n;
            let w = pool.weight(i) as u128;
            if w == 0 || pick.avoids(i) {
                continue;
            }
            let active = pool.active(i) as u128;
            // active/w < best_active/best_w  <=>  active*best_w < best_active*w
            if best.is_none_or(|(_, ba, bw)| active * bw < ba * w) {
                best = Some((i, active, w));
            }
        }
        best.map(|(i, _, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
