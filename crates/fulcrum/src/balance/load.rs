//! Load: how busy a server is, apart from the rule that compares servers by it. As in tower's
//! `tower/src/load/mod.rs`, a [`Load`] turns what is known of a server into a metric that orders
//! servers (lower is better), and a rule (`least.rs`: the least of all; `p2c.rs`: the better of
//! two random ones) runs over any metric. `least-conn` and `p2c-ewma` read the same measure of
//! connections in flight; p2c-ewma weighs it by the peak-EWMA connect time.
//!
//! What the data path records per server (`Measure`, `Sample`, `PeakEwma`) lives in `measure.rs`.

use super::ServerView;

mod in_flight;
mod measure;
mod peak_ewma_cost;

pub use in_flight::{InFlight, PerWeight};
pub use measure::{Measure, PeakEwma, Sample};
pub use peak_ewma_cost::PeakEwmaCost;

/// A measure of how loaded server `i` of a view is now; a lower metric is a better choice.
/// `load` is called on the data path for usable servers only, so it must not allocate or lock
/// for long.
pub trait Load: Send + Sync {
    type Metric: PartialOrd;

    fn load(&self, view: &dyn ServerView, i: usize) -> Self::Metric;

    /// Whether no server can be less loaded than one at `metric`, so a scan for the least may
    /// stop at it (the first of equals wins anyway).
    fn is_floor(&self, _metric: &Self::Metric) -> bool {
        false
    }
}
