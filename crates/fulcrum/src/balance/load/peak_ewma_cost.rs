//! The p2c-ewma cost, as Finagle and Linkerd compute it (tower's `load/peak_ewma.rs`): the peak
//! EWMA of the connect time times the connections in flight plus the one about to be sent, per
//! unit of weight. A slow server and a busy one both cost more, and the peak EWMA reacts at once
//! to trouble and forgets it slowly.

use super::{Load, ServerView};

#[derive(Debug, Clone, Copy, Default)]
pub struct PeakEwmaCost;

impl Load for PeakEwmaCost {
    type Metric = f64;

    /// A server never measured costs as much as a 1 µs connect, so it is tried and measured.
    fn load(&self, view: &dyn ServerView, i: usize) -> f64 {
        let latency = view.sample(i).ewma_us.max(1.0);
        latency * (view.active(i) as f64 + 1.0) / (view.share(i).max(1) as f64 / f64::from(crate::balance::RAMP_FULL))
    }
}
