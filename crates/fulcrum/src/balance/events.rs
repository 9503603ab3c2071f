//! How balancers hear that a server went up, down or changed weight, as HAProxy's `lb_ops`
//! (`set_server_status_up/down`, `update_server_eweight`) and Pingora's `LoadBalancer::update`
//! tell theirs. Server state changes in one place (`runtime::ServerState::bump`), which notifies
//! its service's [`Subscribers`]; every live group of servers of that service has subscribed its
//! balancer, which rebuilds what it precomputes there (`Balancer::update`), so a pick only reads.
//!
//! Subscribers are held by `Weak` reference: when a config generation is dropped its balancers go
//! with it, with no unsubscribing and no reference cycle through the per-service state.
//!
//! Once the app runs ([`start_updates`]), every `update` runs on one thread of its own, never on
//! the task that changed a server (a health check, the admin API, or a connection whose connect
//! failed): that task only marks its service as pending and, if it was not already, queues it.
//! A burst of changes to one service is one update, which reads the servers as they are then.
//! Before that (unit tests, `check`), updates run where the change was made.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering::AcqRel};
use std::sync::{Arc, Mutex, OnceLock, Weak, mpsc};

/// Hears every change of a server's state or weight in one service.
pub trait Listener: Send + Sync {
    /// Called after the change: on the update thread once the app runs, so a rebuild never holds
    /// up traffic; it must still be quick when nothing it precomputed changed.
    fn server_changed(&self);
}

/// The listeners of one service, kept across config generations with the service's state.
#[derive(Default)]
pub struct Subscribers {
    live: Mutex<Vec<Weak<dyn Listener>>>,
    /// Queued for the update thread and not yet told.
    pending: AtomicBool,
}

/// The update thread's queue, once it runs.
static UPDATES: OnceLock<mpsc::Sender<Arc<Subscribers>>> = OnceLock::new();

/// Starts the thread that runs every balancer update from now on; once per process (the apps of
/// one process share it).
pub fn start_updates() -> std::io::Result<()> {
    // Held while starting, so two apps starting at once start one thread.
    static STARTING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if UPDATES.get().is_some() {
        return Ok(());
    }
    let (queue, queued) = mpsc::channel::<Arc<Subscribers>>();
    std::thread::Builder::new().name("fulcrum-updates".into()).spawn(move || serve(queued))?;
    let _ = UPDATES.set(queue);
    Ok(())
}

/// The update thread: tells each queued service's listeners, until the queue closes.
fn serve(queued: mpsc::Receiver<Arc<Subscribers>>) {
    for hub in queued {
        // Cleared before telling: a change made while the listeners run queues it again.
        hub.pending.swap(false, AcqRel);
        hub.tell();
    }
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

    /// Tells every live listener that a server changed: on the update thread once it runs,
    /// else here.
    pub fn notify(self: &Arc<Self>) {
        match UPDATES.get() {
            Some(queue) => self.queue_on(queue),
            None => self.tell(),
        }
    }

    /// Queues this service for the update thread behind `queue`, unless it is queued already.
    fn queue_on(self: &Arc<Self>, queue: &mpsc::Sender<Arc<Subscribers>>) {
        if !self.pending.swap(true, AcqRel) && queue.send(self.clone()).is_err() {
            // The thread is gone (it never ends while the process runs): tell here.
            self.pending.swap(false, AcqRel);
            self.tell();
        }
    }

    fn tell(&self) {
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
        let hub = Arc::new(Subscribers::default());
        let (a, b) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
        hub.subscribe(&a);
        hub.subscribe(&b);
        hub.notify();
        hub.notify();
        assert_eq!((a.0.load(Relaxed), b.0.load(Relaxed)), (2, 2));
    }

    #[test]
    fn queued_changes_are_told_on_the_update_thread_and_a_burst_is_one_update() {
        #[derive(Default)]
        struct Where(Mutex<Vec<String>>);
        impl Listener for Where {
            fn server_changed(&self) {
                let me = std::thread::current().name().unwrap_or_default().to_string();
                self.0.lock().unwrap().push(me);
            }
        }
        let hub = Arc::new(Subscribers::default());
        let heard = Arc::new(Where::default());
        hub.subscribe(&heard);
        let (queue, queued) = mpsc::channel();
        // A burst before the thread runs: queued once.
        for _ in 0..5 {
            hub.queue_on(&queue);
        }
        let thread = std::thread::Builder::new().name("test-updates".into()).spawn(move || serve(queued)).unwrap();
        let told = || heard.0.lock().unwrap().clone();
        let deadline = crate::clock::now() + std::time::Duration::from_secs(10);
        while told().is_empty() {
            assert!(crate::clock::now() < deadline, "the update thread told no one");
            std::thread::yield_now();
        }
        // Served: the next change is queued again.
        while hub.pending.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::yield_now();
        }
        hub.queue_on(&queue);
        drop(queue);
        thread.join().unwrap();
        assert_eq!(told(), ["test-updates", "test-updates"], "one update for the burst, one for the change after, both on the update thread");
    }

    #[test]
    fn a_dropped_generations_listener_is_forgotten() {
        let hub = Arc::new(Subscribers::default());
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
