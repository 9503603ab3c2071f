//! Who gets each new connection, as the entries of an nftables `numgen` map: for every connection
//! the kernel draws a number below the modulus and DNATs to the server whose range holds it.
//!
//! Two draws, one per kind of algorithm that kernel mode runs. `random` and `passive-ratio` draw
//! at random (`numgen random mod 10000`, as the passive-measurement paper set its split with
//! iptables' `statistic --mode random`): each server holds a run of numbers in proportion to its
//! share, rounded by largest remainder so the runs fill the modulus exactly, and a server with a
//! share keeps at least one number. `round-robin` and `static-rr` take turns (`numgen inc mod
//! N`): number k goes to the kth server of one smooth weighted cycle (`static_rr::cycle`, the
//! order the proxy modes walk), so weights 3,1 serve a a b a, not a a a b.

use crate::balance::static_rr;

/// The numbers a random draw is taken from: a ratio moves in steps of 1/10,000, well below the
/// passive controller's smallest ratio (`passive_ratio::MIN_RATIO`, 100 numbers).
pub const MODULUS: u32 = 10_000;

/// How `numgen` draws the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// `numgen random`: each connection independently.
    Random,
    /// `numgen inc`: one after the other, wrapping at the modulus.
    Turn,
}

impl Draw {
    /// Its word in nftables.
    pub fn as_str(self) -> &'static str {
        match self {
            Draw::Random => "random",
            Draw::Turn => "inc",
        }
    }
}

/// Numbers `first..=last` go to server `server` (an index into the caller's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub first: u32,
    pub last: u32,
    pub server: usize,
}

/// A whole map: entries in order, covering `0..modulus` with no gap; none when no server is
/// usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub draw: Draw,
    pub modulus: u32,
    pub entries: Vec<Entry>,
}

impl Split {
    /// A random draw by `shares` (any scale; a share that is not a positive number gets nothing).
    pub fn random(shares: &[f64]) -> Split {
        let counts = apportion(shares, MODULUS);
        Split { draw: Draw::Random, modulus: MODULUS, entries: runs(counts.iter().enumerate().flat_map(|(i, &n)| std::iter::repeat_n(i, n as usize))) }
    }

    /// Turns by `weights`, one smooth weighted cycle long.
    pub fn rotation(weights: &[u32]) -> Split {
        let order = static_rr::cycle(weights);
        Split { draw: Draw::Turn, modulus: order.len() as u32, entries: runs(order.into_iter()) }
    }

    /// No server takes new connections.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The numbers each of `n` servers holds: its share of new connections, times the modulus.
    pub fn counts(&self, n: usize) -> Vec<u32> {
        let mut out = vec![0; n];
        for e in self.entries.iter().filter(|e| e.server < n) {
            out[e.server] += e.last - e.first + 1;
        }
        out
    }
}

/// The servers of a sequence of numbers 0, 1, 2..., with each run of one server as one entry.
fn runs(servers: impl Iterator<Item = usize>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for (k, server) in servers.enumerate() {
        let k = k as u32;
        match entries.last_mut() {
            Some(e) if e.server == server => e.last = k,
            _ => entries.push(Entry { first: k, last: k, server }),
        }
    }
    entries
}

/// `total` split in proportion to `shares` by largest remainder: the counts sum to `total`
/// whenever a share is positive, and each positive share gets at least 1 while `total` allows.
fn apportion(shares: &[f64], total: u32) -> Vec<u32> {
    let shares: Vec<f64> = shares.iter().map(|&s| if s.is_finite() && s > 0.0 { s } else { 0.0 }).collect();
    let sum: f64 = shares.iter().sum();
    let mut counts = vec![0u32; shares.len()];
    if sum <= 0.0 {
        return counts;
    }
    let quotas: Vec<f64> = shares.iter().map(|s| s / sum * f64::from(total)).collect();
    for (c, q) in counts.iter_mut().zip(&quotas) {
        *c = q.floor() as u32;
    }
    let mut by_remainder: Vec<usize> = (0..shares.len()).filter(|&i| shares[i] > 0.0).collect();
    by_remainder.sort_by(|&a, &b| (quotas[b] - quotas[b].floor()).total_cmp(&(quotas[a] - quotas[a].floor())).then(a.cmp(&b)));
    let mut given: u32 = counts.iter().sum();
    for &i in by_remainder.iter().cycle().take(total.saturating_sub(given) as usize) {
        counts[i] += 1;
    }
    given = counts.iter().sum();
    // A share too small for a whole number still gets one, taken from the largest count.
    for &i in by_remainder.iter().rev() {
        if counts[i] == 0 && given >= total {
            let Some(largest) = (0..counts.len()).max_by_key(|&j| (counts[j], std::cmp::Reverse(j))).filter(|&j| counts[j] > 1) else { break };
            counts[largest] -= 1;
            counts[i] = 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn covers(split: &Split) -> bool {
        let mut next = 0;
        for e in &split.entries {
            if e.first != next || e.last < e.first {
                return false;
            }
            next = e.last + 1;
        }
        next == split.modulus
    }

    #[test]
    fn random_ranges_follow_the_ratios_and_fill_the_modulus() {
        let split = Split::random(&[0.5, 0.3, 0.2]);
        assert_eq!(split.entries, vec![Entry { first: 0, last: 4999, server: 0 }, Entry { first: 5000, last: 7999, server: 1 }, Entry { first: 8000, last: 9999, server: 2 },]);
        assert_eq!(split.draw, Draw::Random);
    }

    #[test]
    fn thirds_round_by_largest_remainder_to_exactly_the_modulus() {
        let split = Split::random(&[1.0, 1.0, 1.0]);
        assert_eq!(split.counts(3), vec![3334, 3333, 3333]);
        assert!(covers(&split));
    }

    #[test]
    fn a_server_without_a_share_holds_no_number_and_none_at_all_is_an_empty_map() {
        let split = Split::random(&[2.0, 0.0, f64::NAN, 1.0]);
        assert_eq!(split.counts(4), vec![6667, 0, 0, 3333]);
        assert!(Split::random(&[0.0, 0.0]).is_empty());
        assert!(Split::random(&[]).is_empty());
        assert!(Split::rotation(&[0, 0]).is_empty());
    }

    #[test]
    fn a_tiny_share_keeps_one_number() {
        let split = Split::random(&[1.0, 1e-9]);
        assert_eq!(split.counts(2), vec![9999, 1]);
        assert!(covers(&split));
    }

    #[test]
    fn rotation_is_the_smooth_weighted_cycle_with_runs_merged() {
        let split = Split::rotation(&[3, 1]);
        assert_eq!((split.draw, split.modulus), (Draw::Turn, 4));
        assert_eq!(split.entries, vec![Entry { first: 0, last: 1, server: 0 }, Entry { first: 2, last: 2, server: 1 }, Entry { first: 3, last: 3, server: 0 }]);
        let even = Split::rotation(&[2, 2, 2]);
        assert_eq!(even.modulus, 3, "the common divisor is taken out");
        assert_eq!(even.counts(3), vec![1, 1, 1]);
    }

    proptest! {
        #[test]
        fn any_shares_fill_the_modulus_in_order_with_no_gap(shares in proptest::collection::vec(0.0f64..100.0, 0..40)) {
            let split = Split::random(&shares);
            let positive = shares.iter().filter(|&&s| s > 0.0).count();
            prop_assert_eq!(split.is_empty(), positive == 0);
            if positive > 0 {
                prop_assert!(covers(&split));
                let counts = split.counts(shares.len());
                prop_assert_eq!(counts.iter().sum::<u32>(), MODULUS);
                let sum: f64 = shares.iter().sum();
                let quota = |s: f64| s / sum * f64::from(MODULUS);
                // Each share below one number is given one, taken from the largest count.
                let tiny = shares.iter().filter(|&&s| s > 0.0 && quota(s) < 1.0).count() as f64;
                for (c, s) in counts.iter().zip(&shares) {
                    prop_assert_eq!(*c > 0, *s > 0.0);
                    prop_assert!((f64::from(*c) - quota(*s)).abs() <= 1.0 + tiny + 1e-9, "{} for share {}", c, s);
                }
            }
        }

        #[test]
        fn any_weights_rotate_in_proportion(weights in proptest::collection::vec(0u32..=256, 1..12)) {
            let split = Split::rotation(&weights);
            let total: u32 = weights.iter().sum();
            prop_assert_eq!(split.is_empty(), total == 0);
            if total > 0 {
                prop_assert!(covers(&split));
                let counts = split.counts(weights.len());
                for (c, w) in counts.iter().zip(&weights) {
                    prop_assert_eq!(u64::from(*c) * u64::from(total), u64::from(*w) * u64::from(split.modulus));
                }
            }
        }
    }
}
