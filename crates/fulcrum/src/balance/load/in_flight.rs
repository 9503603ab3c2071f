//! Connections in flight per unit of weight: HAProxy's `leastconn` measure (`lb_fwlc.c`), and
//! the part of the p2c-ewma cost that counts queued work.

use std::cmp::Ordering;

use super::{Load, ServerView};

/// Connections in flight to a server, per unit of its effective weight.
#[derive(Debug, Clone, Copy, Default)]
pub struct InFlight;

/// `count / weight`, compared by cross-multiplying so no float rounding decides a tie.
#[derive(Debug, Clone, Copy)]
pub struct PerWeight {
    pub count: u64,
    /// The ramped weight (`ServerView::share`), so a server slow start is ramping is compared
    /// against the share it may take now.
    pub weight: u64,
}

impl PartialEq for PerWeight {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for PerWeight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        // count/weight < other.count/other.weight  <=>  count*other.weight < other.count*weight
        let (a, b) = (self.count as u128 * other.weight as u128, other.count as u128 * self.weight as u128);
        Some(a.cmp(&b))
    }
}

impl Load for InFlight {
    type Metric = PerWeight;

    fn load(&self, view: &dyn ServerView, i: usize) -> PerWeight {
        PerWeight { count: view.active(i), weight: view.share(i) }
    }

    /// Nothing in flight: zero per unit of any weight.
    fn is_floor(&self, metric: &PerWeight) -> bool {
        metric.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_weight_orders_by_ratio_and_treats_equal_ratios_as_equal() {
        let w = |count, weight| PerWeight { count, weight };
        assert!(w(1, 1) < w(3, 2), "1 per weight is less than 1.5");
        assert!(w(3, 2) < w(3, 1));
        assert!(w(2, 2) == w(1, 1) && w(0, 5) == w(0, 1));
        assert!(w(u64::MAX, 1) > w(u64::MAX - 1, 1), "no overflow at the extremes");
    }
}
