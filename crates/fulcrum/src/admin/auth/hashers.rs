//! Where password hashes are computed: never on the runtime's worker threads, which move the
//! proxied traffic, but on tokio's blocking threads, at most `hashers()` at a time and with at
//! most `WAITING` more checks queued. A check beyond that is refused at once, without hashing, so
//! a flood of passwords costs at most one or two cores' worth of Argon2 (19 MiB each) and never
//! an unbounded queue.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Checks that may wait for a hashing thread; each waits at most this many hashes (about 20 ms
/// each in a release build).
pub const WAITING: usize = 8;

/// Hashes computed at once: one on a machine of two cores or fewer, so the traffic keeps a core,
/// two at most elsewhere.
pub fn hashers() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cores <= 2 { 1 } else { 2 }
}

/// The bounded set of password-hashing threads and the checks waiting for one.
pub struct Hashers {
    /// Checks admitted: hashing or waiting to.
    admitted: Arc<Semaphore>,
    /// Checks hashing.
    hashing: Arc<Semaphore>,
}

impl Default for Hashers {
    fn default() -> Hashers {
        Hashers::new(hashers(), WAITING)
    }
}

/// A place among the hashers, taken without waiting; dropping it gives it back.
pub struct Place {
    admitted: OwnedSemaphorePermit,
    hashing: Arc<Semaphore>,
}

impl Hashers {
    pub fn new(hashers: usize, waiting: usize) -> Hashers {
        Hashers { admitted: Arc::new(Semaphore::new(hashers + waiting)), hashing: Arc::new(Semaphore::new(hashers)) }
    }

    /// A place for one check, or `None` when as many are hashing and waiting as allowed.
    pub fn enter(&self) -> Option<Place> {
        let admitted = self.admitted.clone().try_acquire_owned().ok()?;
        Some(Place { admitted, hashing: self.hashing.clone() })
    }
}

impl Place {
    /// Runs `hash` on a blocking thread once a hashing place is free. `None` if it panicked.
    pub async fn run<T: Send + 'static>(self, hash: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        // The semaphores are never closed.
        let hashing = self.hashing.acquire_owned().await.ok()?;
        let admitted = self.admitted;
        // The permits go with the hash: if the request is dropped meanwhile, the hash still
        // runs to its end and still counts.
        let task = tokio::task::spawn_blocking(move || {
            let _held = (admitted, hashing);
            hash()
        });
        match task.await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!("admin password check failed: {e}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_places_than_hashers_and_waiters() {
        let hashers = Hashers::new(1, 2);
        let places: Vec<Place> = (0..3).map(|_| hashers.enter().expect("a place")).collect();
        assert!(hashers.enter().is_none(), "the fourth check is refused at once");
        drop(places);
        assert!(hashers.enter().is_some());
    }

    #[tokio::test]
    async fn hashes_run_off_the_runtime_thread_one_at_a_time() {
        let hashers = Hashers::new(1, 4);
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let runtime_thread = std::thread::current().id();
        let checks = (0..4).map(|_| {
            let place = hashers.enter().unwrap();
            let running = running.clone();
            place.run(move || {
                let at_once = running.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
                running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                (at_once, std::thread::current().id())
            })
        });
        for got in futures_util::future::join_all(checks).await {
            let (at_once, thread) = got.unwrap();
            assert_eq!(at_once, 1);
            assert_ne!(thread, runtime_thread);
        }
    }
}
