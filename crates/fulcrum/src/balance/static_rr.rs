//! `static-rr`: HAProxy's static weighted round robin (`lb_map.c`). The order is computed once per
//! pool change (a smooth weighted sequence, as long as the sum of the weights) and a lock-free
//! cursor walks it, so a pick costs an atomic add and a read lock. Servers that go down are
//! skipped in place rather than the sequence being rebuilt mid-cycle.

use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use super::{Balancer, Pick, Pool};

#[derive(Debug, Default)]
pub struct StaticRr {
    /// (pool epoch, sequence of server indices).
    sequence: RwLock<(u64, Vec<usize>)>,
    cursor: AtomicUsize,
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
    fn refresh(&self, pool: &dyn Pool) {
        let epoch = pool.epoch();
        let fresh = self.sequence.read().map(|s| s.0 == epoch && !s.1.is_empty()).unwrap_or(false);
        if fresh {
            return;
        }
        let weights: Vec<u32> = (0..pool.len()).map(|i| pool.weight(i)).collect();
        if let Ok(mut s) = self.sequence.write() {
            *s = (epoch, build(&weights));
        }
    }
}

impl Balancer for StaticRr {
    fn pick(&self, pick: &Pick<'_>, pool: &dyn Pool) -> Option<usize> {
        self.refresh(pool);
        let seq = self.sequence.read().ok()?;
        let len = seq.1.len();
        if len == 0 {
            return None;
        }
        let start = self.cursor.fetch_add(1, Relaxed);
        (0..len)
            .map(|k| seq.1[(start + k) % len])
            .find(|&i| i < pool.len() && pool.weight(i) > 0 && !pick.avoids(i))
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
        let b = StaticRr::default();
        assert_eq!(count_picks(&b, &pool, 10), vec![5, 5]);
        pool.set_weight(1, 3);
        assert_eq!(count_picks(&b, &pool, 40), vec![10, 30]);
    }

    #[test]
    fn static_rr_empty_pool_returns_none_without_panic() {
        let b = StaticRr::default();
        assert_eq!(b.pick(&FakePool::pick(&[]), &FakePool::with_weights(&[])), None);
        assert_eq!(b.pick(&FakePool::pick(&[0]), &FakePool::with_weights(&[4])), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn static_rr_honours_weights_exactly_over_whole_cycles(weights in proptest::collection::vec(1u32..=256, 1..8)) {
            let pool = FakePool::with_weights(&weights);
            let total: u32 = weights.iter().sum();
            let cycles = (100_000 / total).max(1);
            let counts = count_picks(&StaticRr::default(), &pool, (total * cycles) as usize);
            for (i, &w) in weights.iter().enumerate() {
                prop_assert_eq!(counts[i], (w * cycles) as usize);
            }
        }
    }
}
