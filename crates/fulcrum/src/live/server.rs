//! Live state of one real server: its state flags and counters, kept in atomics so the data path
//! reads and bumps them without a lock. A `ServerState` is keyed by (service, configured address)
//! and outlives config generations, so a reload neither resets counters nor forgets health.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::rate::Rate;
use crate::balance::events::Subscribers;
use crate::balance::load::Measure;
use tokio_util::sync::CancellationToken;

/// What a user sees as a server's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Up,
    Down,
    /// Takes no new connections; open ones continue and checks go on.
    Drain,
    Disabled,
}

/// Identity of a server across reloads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerKey {
    pub service: String,
    pub address: String,
}

#[derive(Debug)]
pub struct ServerState {
    pub key: ServerKey,
    /// The service's balancers, told of every change of this server's state or weight.
    events: Arc<Subscribers>,
    weight: AtomicU32,
    enabled: AtomicBool,
    draining: AtomicBool,
    /// Result of active health checks (rise/fall applied).
    health_up: AtomicBool,
    /// Set by `failure_limit` consecutive connect failures; cleared by the next passing check.
    passive_down: AtomicBool,
    consecutive_failures: AtomicU32,
    /// Fired to close this server's connections (terminate on disable, removal).
    terminate: Mutex<CancellationToken>,
    last_check: Mutex<String>,
    /// Whether an active check has reported since this server appeared.
    checked: AtomicBool,
    /// How long the last active check took, in ms.
    last_check_ms: AtomicU64,
    /// Unix ms since when the server is down (0: not down), and the downtime before that.
    down_since_ms: AtomicU64,
    downtime_ms: AtomicU64,
    pub counters: Counters,
    /// Connect measurements for the load-aware algorithms.
    pub measure: Measure,
    /// HTTP: idle keep-alive connections to this server, lent one request at a time.
    pub idle: Arc<crate::proxy::http::ServerConns>,
    /// HTTP with `protocol = "h2"`: the one connection to this server that every request shares.
    pub h2: crate::proxy::http::ServerH2,
}

/// Per-server counters, as in HAProxy's stats table.
#[derive(Debug, Default)]
pub struct Counters {
    pub current: AtomicU64,
    pub max: AtomicU64,
    pub total: AtomicU64,
    /// Connections that failed to connect or timed out.
    pub connect_failures: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Unix time in ms of the last connection handed to this server.
    pub last_use_ms: AtomicU64,
    /// Times the balancer picked this server, failed connects included (HAProxy's LbTot).
    pub lb_total: AtomicU64,
    /// Connects to this server that failed and were sent to another server instead.
    pub redispatches: AtomicU64,
    /// Connections that ended on an error (reset, idle timeout) rather than a close.
    pub transfer_errors: AtomicU64,
    /// FTP: data connections forwarded (passive and active).
    pub data_transfers: AtomicU64,
    pub rate: Rate,
}

impl ServerState {
    pub fn new(key: ServerKey, events: Arc<Subscribers>, weight: u32, enabled: bool, checked: bool) -> Self {
        ServerState {
            key,
            events,
            weight: AtomicU32::new(weight),
            enabled: AtomicBool::new(enabled),
            draining: AtomicBool::new(false),
            // A checked server starts down: it takes traffic once its first check passes, so a
            // server that serves the wrong page never sees a request.
            health_up: AtomicBool::new(!checked),
            passive_down: AtomicBool::new(false),
            consecutive_failures: AtomicU32::new(0),
            terminate: Mutex::new(CancellationToken::new()),
            checked: AtomicBool::new(false),
            last_check_ms: AtomicU64::new(0),
            down_since_ms: AtomicU64::new(0),
            downtime_ms: AtomicU64::new(0),
            last_check: Mutex::new(if checked { "not checked yet".into() } else { "no check".into() }),
            counters: Counters::default(),
            measure: Measure::new(crate::config::P2c::default().decay),
            idle: Arc::default(),
            h2: Default::default(),
        }
    }

    /// Weight the balancer uses now: 0 unless enabled, up and not held down by connect failures.
    pub fn effective_weight(&self) -> u32 {
        if self.state() == State::Up { self.weight.load(Relaxed) } else { 0 }
    }

    pub fn state(&self) -> State {
        if !self.enabled.load(Relaxed) {
            State::Disabled
        } else if self.draining.load(Relaxed) {
            State::Drain
        } else if self.health_up.load(Relaxed) && !self.passive_down.load(Relaxed) {
            State::Up
        } else {
            State::Down
        }
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }

    /// Every change of a flag that decides the state, and of the weight, goes through here: the
    /// downtime clock starts or stops, and the service's balancers hear of it last, once the new
    /// state is in place for them to read.
    fn bump(&self) {
        let now = unix_ms();
        if self.state() == State::Down {
            let _ = self.down_since_ms.compare_exchange(0, now, Relaxed, Relaxed);
        } else {
            let since = self.down_since_ms.swap(0, Relaxed);
            if since > 0 {
                self.downtime_ms.fetch_add(now.saturating_sub(since), Relaxed);
            }
        }
        self.events.notify();
    }

    /// Total time spent down (checks failing or held by connect failures), in ms up to `now`.
    pub fn downtime_ms(&self, now: u64) -> u64 {
        let since = self.down_since_ms.load(Relaxed);
        self.downtime_ms.load(Relaxed) + if since > 0 { now.saturating_sub(since) } else { 0 }
    }

    pub fn set_weight(&self, w: u32) {
        if self.weight.swap(w, Relaxed) != w {
            self.bump();
        }
    }

    /// Returns true when the flag changed.
    pub fn set_enabled(&self, on: bool) -> bool {
        let changed = self.enabled.swap(on, Relaxed) != on;
        if changed {
            self.bump();
        }
        changed
    }

    pub fn set_draining(&self, on: bool) {
        if self.draining.swap(on, Relaxed) != on {
            self.bump();
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Records the outcome of a health-check transition (not of every sample).
    pub fn set_health(&self, up: bool) {
        if self.health_up.swap(up, Relaxed) != up {
            self.bump();
        }
    }

    pub fn health_up(&self) -> bool {
        self.health_up.load(Relaxed)
    }

    /// A passing check ends a passive hold; returns true when one was ended.
    pub fn clear_passive(&self) -> bool {
        self.consecutive_failures.store(0, Relaxed);
        let was = self.passive_down.swap(false, Relaxed);
        if was {
            self.bump();
        }
        was
    }

    pub fn passive_down(&self) -> bool {
        self.passive_down.load(Relaxed)
    }

    /// Records the text and duration of the last active check's result.
    pub fn set_last_check(&self, text: String, took: std::time::Duration) {
        if let Ok(mut g) = self.last_check.lock() {
            *g = text;
        }
        self.last_check_ms.store(took.as_millis() as u64, Relaxed);
        self.checked.store(true, Relaxed);
    }

    pub fn checked(&self) -> bool {
        self.checked.load(Relaxed)
    }

    pub fn last_check_ms(&self) -> u64 {
        self.last_check_ms.load(Relaxed)
    }

    pub fn last_check(&self) -> String {
        self.last_check.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Counts a failed connect; returns true when it reaches `limit` and holds the server down.
    pub fn record_connect_failure(&self, limit: u32) -> bool {
        self.counters.connect_failures.fetch_add(1, Relaxed);
        let n = self.consecutive_failures.fetch_add(1, Relaxed) + 1;
        if limit > 0 && n >= limit && !self.passive_down.swap(true, Relaxed) {
            self.bump();
            return true;
        }
        false
    }

    /// Counts a TLS handshake to the server that failed (`server_tls`) as a failed connect,
    /// logging when it holds the server down.
    pub fn record_tls_failure(&self, service: &str, limit: u32, reason: &dyn std::fmt::Display) {
        if self.record_connect_failure(limit) {
            tracing::warn!(service = %service, server = %self.key.address, %reason, "server down: {limit} consecutive connect failures (failure_limit)");
        }
    }

    pub fn record_connect_success(&self) {
        if self.consecutive_failures.load(Relaxed) != 0 {
            self.consecutive_failures.store(0, Relaxed);
        }
    }

    /// A token that fires when this server's connections must close.
    pub fn terminate_token(&self) -> CancellationToken {
        self.terminate.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Closes every connection to this server now; later connections get a fresh token.
    pub fn terminate_connections(&self) {
        if let Ok(mut g) = self.terminate.lock() {
            g.cancel();
            *g = CancellationToken::new();
        }
    }

    /// Takes one of this server's `limit` places (0: no limit) in one atomic step, or `None`
    /// when all are taken: checking `current` and adding to it later would let requests that
    /// pick the server at the same moment overshoot its maxconn. The place counts in `current`
    /// at once; `ConnGuard::opened` counts the connection once it is made.
    pub fn try_reserve(self: &Arc<Self>, limit: u32) -> Option<ConnGuard> {
        let c = &self.counters;
        let mut now = c.current.load(Relaxed);
        loop {
            if limit > 0 && now >= u64::from(limit) {
                return None;
            }
            match c.current.compare_exchange_weak(now, now + 1, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        c.max.fetch_max(now + 1, Relaxed);
        Some(ConnGuard(self.clone()))
    }
}

/// A place on this server, held for the life of one proxied connection or request.
pub struct ConnGuard(Arc<ServerState>);

impl ConnGuard {
    /// Counts the connection as made: total, last use, session rate.
    pub fn opened(&self) {
        let c = &self.0.counters;
        c.total.fetch_add(1, Relaxed);
        let now = unix_ms();
        c.last_use_ms.store(now, Relaxed);
        c.rate.tick(now / 1000);
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.counters.current.fetch_sub(1, Relaxed);
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// One server of one generation: live state plus the address resolved when the generation was built.
#[derive(Debug)]
pub struct ServerEntry {
    pub addr: SocketAddr,
    pub state: Arc<ServerState>,
    /// The id the `cookie` algorithm names this server by.
    pub id: String,
    /// Connections (HTTP: requests) in flight this server takes at most (0: no limit); more
    /// wait in the service's queue.
    pub maxconn: u32,
    /// The PROXY header this server is sent first: its own setting, its pool's or its service's.
    pub proxy_protocol: Option<crate::config::ProxyProtocol>,
    /// With `server_tls`: the server's own SNI name, which takes precedence over the pool's.
    pub sni: Option<rustls_pki_types::ServerName<'static>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_go_past_the_limit_under_contention() {
        let key = ServerKey { service: "web".into(), address: "127.0.0.1:1".into() };
        let state = Arc::new(ServerState::new(key, Arc::default(), 1, true, false));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let state = state.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        if let Some(g) = state.try_reserve(3) {
                            g.opened();
                            std::hint::black_box(&g);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let c = &state.counters;
        assert!(c.max.load(Relaxed) <= 3 && c.max.load(Relaxed) >= 1, "max {}", c.max.load(Relaxed));
        assert_eq!(c.current.load(Relaxed), 0, "every place given back");
        assert!(c.total.load(Relaxed) > 0);
        let held: Vec<_> = (0..3).filter_map(|_| state.try_reserve(3)).collect();
        assert_eq!(held.len(), 3);
        assert!(state.try_reserve(3).is_none() && state.try_reserve(0).is_some());
    }

    #[test]
    fn every_change_of_state_or_weight_tells_the_services_balancers_once() {
        use crate::balance::events::{Listener, Subscribers};

        #[derive(Default)]
        struct Heard(AtomicU64);
        impl Listener for Heard {
            fn server_changed(&self) {
                self.0.fetch_add(1, Relaxed);
            }
        }

        let events = Arc::new(Subscribers::default());
        let heard = Arc::new(Heard::default());
        events.subscribe(&heard);
        let key = ServerKey { service: "web".into(), address: "127.0.0.1:1".into() };
        let state = ServerState::new(key, events, 1, true, true);
        state.set_health(true);
        state.set_health(true);
        state.set_weight(3);
        state.set_weight(3);
        state.set_draining(true);
        state.set_enabled(false);
        assert_eq!(heard.0.load(Relaxed), 4, "a setter that changes nothing tells nothing");
        assert!(!state.record_connect_failure(2));
        assert!(state.record_connect_failure(2));
        assert!(state.clear_passive());
        assert_eq!(heard.0.load(Relaxed), 6, "a passive hold and its end are changes too");
    }
}
