//! Stride scheduling (Waldspurger and Weihl, "Stride Scheduling: Deterministic Proportional-Share
//! Resource Management", 1995): each server has a pass that advances by its stride, 1 / its
//! share, whenever it is picked, and the pick is the server with the least pass. After any number
//! of picks each server has had its share of them within two picks (Sainte-Lague's divisor
//! sequence, which half a stride's start makes it), evenly spread (shares 2:1:1 give
//! a b c a a b c a, not a a b c a a). The passes sit in a binary heap, so a pick
//! costs O(log n): the same, in practice, over 4 servers and over 10,000, where a smooth weighted
//! turn (`round_robin::smooth_turn`) reads every server.
//!
//! `passive-ratio` spreads its picks by its traffic ratios this way. The queue is started afresh
//! ([`Strides::restart`]) whenever the ratios move, which is at most once per control slot.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A server and its pass; ordered so the heap's top is the least pass (ties: the lower index).
#[derive(Debug, Clone, Copy)]
struct Due {
    pass: f64,
    server: usize,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` is a max-heap.
        other.pass.total_cmp(&self.pass).then_with(|| other.server.cmp(&self.server))
    }
}

/// The servers with a share, by pass.
#[derive(Debug, Clone, Default)]
pub struct Strides {
    queue: BinaryHeap<Due>,
    /// Servers taken off the top for one pick (unusable for it) and put back after: kept to
    /// reuse its allocation.
    aside: Vec<Due>,
}

impl Strides {
    /// A fresh queue over `shares` (by server index; 0 or less: not queued). Each starts half a
    /// stride in, so servers of equal share alternate from the first pick.
    pub fn restart(&mut self, shares: &[f64]) {
        let due = shares.iter().enumerate().filter(|(_, s)| **s > 0.0).map(|(server, s)| Due { pass: 0.5 / s, server });
        let mut queue = std::mem::take(&mut self.queue).into_vec();
        queue.clear();
        queue.extend(due);
        self.queue = BinaryHeap::from(queue);
    }

    /// The queued server of least pass that `usable` allows, its pass advanced by 1 / `share`
    /// of it (a share that is not positive advances it by one stride of the smallest share, so
    /// a pick never stalls). Servers passed over keep their pass. `None` when no queued server
    /// is usable.
    pub fn take(&mut self, usable: impl Fn(usize) -> bool, share: impl Fn(usize) -> f64) -> Option<usize> {
        let mut chosen = None;
        while let Some(top) = self.queue.pop() {
            if usable(top.server) {
                chosen = Some(top);
                break;
            }
            self.aside.push(top);
        }
        self.queue.extend(self.aside.drain(..));
        let mut due = chosen?;
        let s = share(due.server);
        due.pass += if s > 0.0 { 1.0 / s } else { 1.0 / super::passive_ratio::MIN_RATIO };
        self.queue.push(due);
        Some(due.server)
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(shares: &[f64], n: usize) -> Vec<usize> {
        let mut s = Strides::default();
        s.restart(shares);
        (0..n).map(|_| s.take(|_| true, |i| shares[i]).unwrap()).collect()
    }

    #[test]
    fn equal_shares_rotate_and_uneven_ones_interleave() {
        assert_eq!(run(&[1.0, 1.0, 1.0], 6), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(run(&[0.5, 0.25, 0.25], 8), vec![0, 1, 2, 0, 0, 1, 2, 0]);
        assert_eq!(run(&[1.0, 0.0, 1.0], 4), vec![0, 2, 0, 2], "no share, no pick");
    }

    #[test]
    fn a_server_passed_over_keeps_its_place() {
        let mut s = Strides::default();
        s.restart(&[1.0, 1.0, 1.0]);
        assert_eq!(s.take(|i| i != 0, |_| 1.0), Some(1));
        assert_eq!(s.take(|_| true, |_| 1.0), Some(0), "its turn was not spent");
        assert_eq!(s.take(|_| false, |_| 1.0), None);
        assert_eq!(s.take(|_| true, |_| 1.0), Some(2), "nothing moved by a pick that found none");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn every_prefix_of_picks_follows_the_shares_within_two(shares in proptest::collection::vec(1u32..=50, 1..12)) {
            let shares: Vec<f64> = shares.iter().map(|&s| f64::from(s)).collect();
            let total: f64 = shares.iter().sum();
            let mut counts = vec![0usize; shares.len()];
            for (k, i) in run(&shares, 2000).into_iter().enumerate() {
                counts[i] += 1;
                for (j, &c) in counts.iter().enumerate() {
                    let want = (k + 1) as f64 * shares[j] / total;
                    prop_assert!((c as f64 - want).abs() <= 2.0, "after {} picks server {} has {} want {:.2}", k + 1, j, c, want);
                }
            }
        }
    }
}
