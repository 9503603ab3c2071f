//! `reuse_port = true`: worker threads that each run an event loop of their own, with a listening
//! socket of their own on every listen address (SO_REUSEPORT).
//!
//! Without it, one accept loop per address spawns every connection on tokio's shared pool, where
//! idle workers steal tasks from busy ones. With it, the kernel hands each new connection to one
//! of the sockets by a hash of its addresses, and the connection lives on the worker that
//! accepted it from its first byte to its last: no accept loop is shared, no task moves between
//! threads, and each worker's timers and readiness are its own (NGINX's `reuseport`). The main
//! thread keeps the admin API, health checks and the fleet.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// The worker threads; dropped, they stop, and so does every connection they carry.
pub struct Workers {
    handles: Vec<Handle>,
    stop: CancellationToken,
}

impl Workers {
    /// Starts `n` threads, each a single-threaded runtime waiting for listeners.
    pub fn start(n: usize) -> io::Result<Workers> {
        let stop = CancellationToken::new();
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            handles.push(rt.handle().clone());
            let stop = stop.clone();
            std::thread::Builder::new().name(format!("worker-{i}")).spawn(move || {
                WORKER.set(Some(i));
                rt.block_on(stop.cancelled())
            })?;
        }
        SOCKETS.store(n.max(1), Relaxed);
        Ok(Workers { handles, stop })
    }

    /// How many threads there are: each address gets a listening socket per thread.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// The worker that runs the `i`th socket of an address.
    pub fn handle(&self, i: usize) -> &Handle {
        &self.handles[i % self.handles.len()]
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.cancel();
        SOCKETS.store(1, Relaxed);
    }
}

static SOCKETS: AtomicUsize = AtomicUsize::new(1);

/// Listening sockets each address has: what the stats count as the accept backlog's room.
pub fn sockets_per_address() -> usize {
    SOCKETS.load(Relaxed)
}

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The worker this thread is, with `reuse_port`; `None` on any other thread. An idle server
/// connection is lent only to requests of the worker that drives it (`http::idle`), as each
/// NGINX worker keeps its own: another worker's would wake that worker's thread for every read.
pub fn current() -> Option<usize> {
    WORKER.get()
}
