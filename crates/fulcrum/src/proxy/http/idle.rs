//! Idle keep-alive connections to one server, lent to one request at a time. Each server keeps
//! its own list in its state (what HTTP keeps there, `http::Kept`), so the connections outlive a reload the way its counters do,
//! go away with the server when it leaves the config, and no lock is shared between servers: a
//! request takes this server's short lock once to borrow and once to give back.
//!
//! With `reuse_port`, a connection goes only to requests of the worker thread that made it, whose
//! event loop drives it (`proxy::workers::current`).
//!
//! Generic over the connection, so this file knows nothing of bodies or the request path.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Idle connections kept per server at most.
const MAX_IDLE: usize = 256;

/// A connection that can tell it was closed by its peer.
pub trait Reusable {
    fn is_closed(&self) -> bool;
}

impl<B> Reusable for hyper::client::conn::http1::SendRequest<B> {
    fn is_closed(&self) -> bool {
        hyper::client::conn::http1::SendRequest::is_closed(self)
    }
}

/// Where a connection goes: the server's address and the TLS it was made with. A reload that
/// resolves the server anew, or changes the pool's `server_tls` (its CA, versions or suites),
/// must not reuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    /// `server_tls`'s identity (`Originator::identity`); `None` in plain text.
    pub tls: Option<u64>,
}

struct Idle<C> {
    conn: C,
    /// Where it was made to.
    to: Target,
    since: Instant,
    worker: Option<usize>,
}

pub struct IdleConns<C> {
    idle: Mutex<Vec<Idle<C>>>,
}

impl<C> Default for IdleConns<C> {
    fn default() -> Self {
        IdleConns { idle: Mutex::new(Vec::new()) }
    }
}

impl<C> fmt::Debug for IdleConns<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.idle.lock().map(|g| g.len()).unwrap_or(0);
        write!(f, "IdleConns({n})")
    }
}

impl<C: Reusable> IdleConns<C> {
    /// The most recently used connection to `to` that is still open and idled less than
    /// `max_idle`; older or closed ones met on the way are dropped.
    pub fn take(&self, to: Target, max_idle: Duration) -> Option<C> {
        let worker = crate::proxy::workers::current();
        let mut idle = self.idle.lock().ok()?;
        let mut at = idle.len();
        while at > 0 {
            at -= 1;
            if idle[at].worker != worker {
                continue;
            }
            let c = idle.remove(at);
            // Just given back, a connection may not be ready yet (hyper finishes the exchange on
            // its own task); the sender waits for that.
            if c.to == to && !c.conn.is_closed() && crate::clock::since(c.since) < max_idle {
                return Some(c.conn);
            }
        }
        None
    }

    fn put(&self, conn: C, to: Target) {
        if conn.is_closed() {
            tracing::debug!(server = %to.addr, "server connection closed, not reused");
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(Idle { conn, to, since: crate::clock::now(), worker: crate::proxy::workers::current() });
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.idle.lock().map(|g| g.len()).unwrap_or(0)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A connection lent out for one request; `release` gives it back for the next one.
pub struct Lent<C: Reusable> {
    conn: C,
    to: Target,
    home: Arc<IdleConns<C>>,
}

impl<C: Reusable> Lent<C> {
    pub fn new(conn: C, to: Target, home: Arc<IdleConns<C>>) -> Self {
        Lent { conn, to, home }
    }

    pub fn release(self) {
        self.home.put(self.conn, self.to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    #[derive(Clone)]
    struct Fake(Arc<AtomicBool>);

    impl Reusable for Fake {
        fn is_closed(&self) -> bool {
            self.0.load(Relaxed)
        }
    }

    fn fake() -> (Fake, Arc<AtomicBool>) {
        let closed = Arc::new(AtomicBool::new(false));
        (Fake(closed.clone()), closed)
    }

    fn plain(addr: &str) -> Target {
        Target { addr: addr.parse().unwrap(), tls: None }
    }

    #[test]
    fn a_released_connection_is_lent_again_only_to_its_own_address_and_tls() {
        let home = Arc::new(IdleConns::default());
        let (a, b) = (plain("127.0.0.1:1"), plain("127.0.0.1:2"));
        Lent::new(fake().0, a, home.clone()).release();
        assert_eq!(home.len(), 1);
        assert!(home.take(b, Duration::from_secs(60)).is_none(), "resolved anew to another address");
        assert!(home.is_empty(), "the stale connection is dropped");
        Lent::new(fake().0, a, home.clone()).release();
        assert!(home.take(a, Duration::from_secs(60)).is_some());
        // Made under one server_tls, not lent under another (or in plain text).
        let (tls1, tls2) = (Target { tls: Some(1), ..a }, Target { tls: Some(2), ..a });
        Lent::new(fake().0, tls1, home.clone()).release();
        assert!(home.take(tls2, Duration::from_secs(60)).is_none(), "server_tls changed");
        Lent::new(fake().0, tls1, home.clone()).release();
        assert!(home.take(a, Duration::from_secs(60)).is_none(), "server_tls removed");
        Lent::new(fake().0, tls1, home.clone()).release();
        assert!(home.take(tls1, Duration::from_secs(60)).is_some());
    }

    #[test]
    fn closed_or_expired_connections_are_never_lent() {
        let home = Arc::new(IdleConns::default());
        let a = plain("127.0.0.1:1");
        let (conn, closed) = fake();
        Lent::new(conn, a, home.clone()).release();
        closed.store(true, Relaxed);
        assert!(home.take(a, Duration::from_secs(60)).is_none());
        Lent::new(fake().0, a, home.clone()).release();
        assert!(home.take(a, Duration::ZERO).is_none(), "idled longer than keepalive_idle");
        let (conn, closed) = fake();
        closed.store(true, Relaxed);
        Lent::new(conn, a, home.clone()).release();
        assert!(home.is_empty(), "a closed connection is not kept");
    }

    #[test]
    fn with_reuse_port_a_connection_is_lent_only_on_the_worker_that_gave_it_back() {
        let workers = crate::proxy::workers::Workers::start(2).unwrap();
        let home = Arc::new(IdleConns::default());
        let a = plain("127.0.0.1:1");
        type Step = Box<dyn FnOnce(&Arc<IdleConns<Fake>>) -> bool + Send>;
        // Runs `f` on worker `i`'s thread and returns what it gave.
        let on = |i: usize, f: Step| {
            let (tx, rx) = std::sync::mpsc::channel();
            let home = home.clone();
            workers.handle(i).spawn(async move { tx.send(f(&home)).unwrap() });
            rx.recv().unwrap()
        };
        assert!(on(
            0,
            Box::new(move |h| {
                Lent::new(fake().0, a, h.clone()).release();
                true
            })
        ));
        assert!(!on(1, Box::new(move |h| h.take(a, Duration::from_secs(60)).is_some())), "worker 1 does not drive it");
        assert!(home.take(a, Duration::from_secs(60)).is_none(), "nor does a thread outside the workers");
        assert_eq!(home.len(), 1, "passed over, not dropped");
        assert!(on(0, Box::new(move |h| h.take(a, Duration::from_secs(60)).is_some())));
    }
}
