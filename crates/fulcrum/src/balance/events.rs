//! How balancers hear that a server went up, down or changed weight, as HAProxy's `lb_ops`
//! (`set_server_status_up/down`, `update_server_eweight`) and Pingora's `LoadBalancer::update`
//! tell theirs. Server state changes in one place (`runtime::ServerState::bump`), which notifies
//! its service's [`Subscribers`]; every live group of servers of that service has subscribed its
//! balancer, which rebuilds what it precomputes there (`Balancer::update`), so a pick only reads.
//!
//! Subscribers are held by `Weak` reference: when a config generation is dropped its balancers go
//! with it, with no unsubscribing and no reference cycle through the per-service state.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

/// Hears every change of a server's state or weight in one service.
pub trait Listener: Send + Sync {
    /// Called after the change, on the task that made it: a health check, the admin API, or a
    /// connect failure on the data path, so it must be quick when nothing it precomputed changed.
    fn server_changed(&self);
}

/// The listeners of one service, kept across config generations with the service's state.
#[derive(Default)]
pub struct Subscribers {
    live: Mutex<Vec<Weak<dyn Listener>>>,
}

impl Subscribers {
    pub fn subscribe<L: Listener + 'static>(&self, listener: &Arc<L>) {
        let weak: Weak<dyn Listener> = Arc::downgrade(listener) as Weak<dyn Listener>;
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        // Dropped generations are pruned here too, so a service that is reloaded often and whose
        // servers never change state does not collect dead entries.
        live.retain(|l| l.strong_count() > 0);
        live.push(weak);
    }

    /// Tells every live listener that a server changed.
    pub fn notify(&self) {
        let listeners: Vec<Arc<dyn Listener>> = {
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|l| l.strong_count() > 0);
            live.iter().filter_map(Weak::upgrade).collect()
        };
        // Called outside the lock: a table rebuild must not hold up a generation that subscribes,
        // nor another server's change.
        for l in listeners {
            l.server_changed();
        }
    }

    /// Listeners still alive.
    pub fn len(&self) -> usize {
        self.live.lock().map(|l| l.iter().filter(|l| l.strong_count() > 0).count()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Subscribers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscribers").field("live", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Listener for Counting {
        fn server_changed(&self) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    #[test]
    fn every_live_listener_hears_each_change() {
        let hub = Subscribers::default();
        let (a, b) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
        hub.subscribe(&a);
        hub.subscribe(&b);
        hub.notify();
        hub.notify();
        assert_eq!((a.0.load(Relaxed), b.0.load(Relaxed)), (2, 2));
    }

    #[test]
    fn a_dropped_generations_listener_is_forgotten() {
        let hub = Subscribers::default();
        let kept = Arc::new(Counting::default());
        hub.subscribe(&kept);
        {
            let gone = Arc::new(Counting::default());
            hub.subscribe(&gone);
            assert_eq!(hub.len(), 2);
        }
        hub.notify();
        assert_eq!(hub.len(), 1);
        assert_eq!(kept.0.load(Relaxed), 1);
    }
}
