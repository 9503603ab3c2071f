//! Live state of one real server: its state flags and counters, kept in atomics so the data path
//! reads and bumps them without a lock. A `ServerState` is keyed by (service, configured address)
//! and outlives config generations, so a reload neither resets counters nor forgets health.

use std::any::Any;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use serde::Serialize;

use super::agent::{AgentAnswer, AgentState};
use super::rate::Rate;
pub use carried::Carried;

mod carried;
use crate::balance::RAMP_FULL;
use crate::balance::events::Subscribers;
use crate::balance::load::Measure;
use crate::clock::{clock_ms, unix_ms};
use crate::config::Damping;
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
    /// Checks pass, but flap damping keeps it out until its penalty has decayed.
    Suppressed,
    /// Outlier detection took it out of real traffic for a while (`live::outlier`).
    Ejected,
    /// Its agent says `maint` (`live::agent`): no new connections until it says otherwise.
    Maint,
}

impl State {
    /// The state as the stats and the log say it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Up => "up",
            State::Down => "down",
            State::Drain => "drain",
            State::Disabled => "disabled",
            State::Suppressed => "suppressed",
            State::Ejected => "ejected",
            State::Maint => "maint",
        }
    }
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
    /// Unique in the process: what a kept pick (`live::why::Recent`) names its server by.
    pub serial: u64,
    /// Itself, for the timers that end a ramp or a suppression.
    me: Weak<ServerState>,
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
    /// Active checks in a row that disagree with the health state (failures of an up server,
    /// passes of a down one), toward `fall` or `rise`.
    check_streak: AtomicU32,
    /// Unix ms since when the server is down (0: not down), and the downtime before that.
    down_since_ms: AtomicU64,
    downtime_ms: AtomicU64,
    /// Slow start: its period in ms (0: off) and the [`clock_ms`](crate::clock::clock_ms) its ramp began at (0: none).
    slow_start_ms: AtomicU64,
    ramp_from: AtomicU64,
    /// Whether coming up ramps: not on the first up of a checked server the process started
    /// with (its weight is whole at once, as HAProxy's slowstart never applies at start), on
    /// every later one, and on the first after an operator disabled or drained it.
    ramps: AtomicBool,
    /// `state() == Up`, and the health signal (checks passing, no passive hold), at the last
    /// change: a ramp starts on the first's rising edge, a flap is the second's falling edge.
    was_up: AtomicBool,
    was_healthy: AtomicBool,
    /// Flap damping's settings and penalty; `suppressed` is the flag the data path reads.
    flaps: Mutex<Flaps>,
    suppressed: AtomicBool,
    pub counters: Counters,
    /// Outlier detection: streaks, the interval's counts, an ejection or a shifted share.
    pub outlier: super::outlier::Tracker,
    /// What its agent last said (`[service.health.agent]`): a state and a share of its weight.
    pub agent: super::agent::Agent,
    /// The connections and requests in flight on it, the newest [`super::inflight::SHOWN`].
    pub inflight: super::inflight::Inflight,
    /// Connect measurements for the load-aware algorithms.
    pub measure: Measure,
    /// What a data path keeps for this server across requests (HTTP: its idle keep-alive
    /// connections), made on first use ([`ServerState::kept`]). Opaque here, as `live` knows no
    /// protocol; it outlives reloads as the counters do and goes with the server.
    kept: OnceLock<Box<dyn Any + Send + Sync>>,
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
    /// HTTP mode: the server's responses by status class.
    pub responses: super::http_stats::Classes,
    /// HTTP mode: from a request's arrival to this server's response head, and to its end.
    pub first_byte: super::http_stats::Histogram,
    pub duration: super::http_stats::Histogram,
    /// Connects to this server that failed and were sent to another server instead.
    pub redispatches: AtomicU64,
    /// Connections that ended on an error (reset, idle timeout) rather than a close.
    pub transfer_errors: AtomicU64,
    /// FTP: data connections forwarded (passive and active).
    pub data_transfers: AtomicU64,
    pub rate: Rate,
}

/// A server's flap penalty as of `at` (a [`clock_ms`](crate::clock::clock_ms)), under its service's damping settings.
#[derive(Debug, Default)]
struct Flaps {
    damping: Damping,
    penalty: f64,
    at: u64,
}

impl Flaps {
    /// The penalty decayed to `now`: halved every half-life.
    fn penalty(&self, now: u64) -> f64 {
        let half_life = self.damping.half_life.as_millis().max(1) as f64;
        self.penalty * 0.5f64.powf(now.saturating_sub(self.at) as f64 / half_life)
    }

    /// How long until the penalty decays below `reuse`.
    fn back_in(&self, now: u64) -> Duration {
        let p = self.penalty(now);
        let reuse = f64::from(self.damping.reuse.max(1));
        if p < reuse { Duration::ZERO } else { Duration::from_millis((self.damping.half_life.as_millis() as f64 * (p / reuse).log2()).ceil() as u64 + 1) }
    }
}

/// What flap damping says of a server now, for stats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DampingNow {
    pub penalty: f64,
    /// While suppressed: the time left until it may return.
    pub back_in: Option<Duration>,
}

impl DampingNow {
    /// While suppressed: "flapping (penalty P, back in ~T)", as the log, stats and explain say it.
    pub fn suppression(&self) -> Option<String> {
        self.back_in.map(|left| flapping(self.penalty, left))
    }
}

fn flapping(penalty: f64, back_in: Duration) -> String {
    format!("flapping (penalty {penalty:.0}, back in ~{})", humantime::format_duration(Duration::from_secs(back_in.as_secs().max(1))))
}

/// Runs `then` on the server after `delay`, if the runtime is there and the server still is.
fn after(me: &Weak<ServerState>, delay: Duration, then: impl FnOnce(&ServerState) + Send + 'static) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    let me = me.clone();
    rt.spawn(async move {
        tokio::time::sleep(delay).await;
        if let Some(s) = me.upgrade() {
            then(&s);
        }
    });
}

impl ServerState {
    pub fn new(key: ServerKey, events: Arc<Subscribers>, weight: u32, enabled: bool, checked: bool) -> Arc<Self> {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        Arc::new_cyclic(|me| ServerState {
            key,
            serial: SERIAL.fetch_add(1, Relaxed),
            me: me.clone(),
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
            check_streak: AtomicU32::new(0),
            down_since_ms: AtomicU64::new(0),
            downtime_ms: AtomicU64::new(0),
            slow_start_ms: AtomicU64::new(0),
            ramp_from: AtomicU64::new(0),
            ramps: AtomicBool::new(!checked),
            was_up: AtomicBool::new(enabled && !checked),
            was_healthy: AtomicBool::new(!checked),
            flaps: Mutex::new(Flaps::default()),
            suppressed: AtomicBool::new(false),
            last_check: Mutex::new(if checked { "not checked yet".into() } else { "no check".into() }),
            counters: Counters::default(),
            outlier: super::outlier::Tracker::default(),
            agent: super::agent::Agent::default(),
            inflight: super::inflight::Inflight::default(),
            measure: Measure::new(crate::config::P2c::default().decay),
            kept: OnceLock::new(),
        })
    }

    /// What the data path of type `T` keeps for this server, made on first use. `None` only if
    /// another type was kept first, which one data path per server never does.
    pub fn kept<T: Default + Send + Sync + 'static>(&self) -> Option<&T> {
        self.kept.get_or_init(|| Box::new(T::default())).downcast_ref()
    }

    /// Takes a generation's slow start and damping settings. `joined` says the server was added
    /// to a running process: it ramps from its first up (or from now, if it is up already).
    pub fn configure(&self, slow_start: Duration, damping: &Damping, joined: bool) {
        self.slow_start_ms.store(slow_start.as_millis() as u64, Relaxed);
        if let Ok(mut f) = self.flaps.lock() {
            f.damping = damping.clone();
        }
        if joined && !self.ramps.swap(true, Relaxed) && self.state() == State::Up {
            self.begin_ramp();
        }
    }

    /// Weight the balancer uses now: 0 unless enabled, up and not held down by connect failures
    /// or flap damping; its agent's percentage scales it.
    pub fn effective_weight(&self) -> u32 {
        if self.state() == State::Up { self.agent.weighted(self.weight.load(Relaxed)) } else { 0 }
    }

    /// The operator's word comes first (an agent cannot bring back a server disabled or drained
    /// by hand), then the agent's `maint` and `drain` (0% drains too), then health: its check,
    /// connect failures, and its agent's `down`.
    pub fn state(&self) -> State {
        let agent = self.agent.state();
        if !self.enabled.load(Relaxed) {
            State::Disabled
        } else if self.draining.load(Relaxed) {
            State::Drain
        } else if agent == AgentState::Maint {
            State::Maint
        } else if agent == AgentState::Drain || self.agent.percent() == 0 {
            State::Drain
        } else if !self.health_up.load(Relaxed) || self.passive_down.load(Relaxed) || agent == AgentState::Down {
            State::Down
        } else if self.suppressed.load(Relaxed) {
            State::Suppressed
        } else if self.outlier.ejected() {
            State::Ejected
        } else {
            State::Up
        }
    }

    /// Whether `all_down = "use-all"` may send it traffic while no server of its pool is usable:
    /// enabled, not drained (by its operator or its agent) nor in maint, whatever its checks say.
    pub fn in_rotation(&self) -> bool {
        !matches!(self.state(), State::Disabled | State::Drain | State::Maint)
    }

    /// Who put the server in its state when it is not up: `operator`, `check`, `failure_limit`,
    /// `agent`, `damping` or `outlier`.
    pub fn state_by(&self) -> Option<&'static str> {
        Some(match self.state() {
            State::Up => return None,
            State::Disabled => "operator",
            State::Drain if self.draining.load(Relaxed) => "operator",
            State::Drain | State::Maint => "agent",
            State::Down if !self.health_up.load(Relaxed) => "check",
            State::Down if self.passive_down.load(Relaxed) => "failure_limit",
            State::Down => "agent",
            State::Suppressed => "damping",
            State::Ejected => "outlier",
        })
    }

    /// Takes its agent's answer (`line` as it came); returns whether it changed the server's
    /// state or weight, which the balancers then hear.
    pub fn set_agent(&self, answer: AgentAnswer, line: &str) -> bool {
        let changed = self.agent.apply(answer, line);
        if changed {
            self.bump();
        }
        changed
    }

    /// Its agent could not be asked or not understood; true on the first failure in a row.
    pub fn agent_failed(&self, why: String) -> bool {
        self.agent.failed(why)
    }

    /// Its pool has no agent any more: the agent's word no longer counts.
    pub fn clear_agent(&self) {
        if self.agent.clear() {
            self.bump();
        }
    }

    /// The share of its weight the server takes now, in thousandths ([`RAMP_FULL`]: all).
    /// Outlier detection's `shift` scales it by the server's share.
    pub fn ramp(&self) -> u32 {
        let from = self.ramp_from.load(Relaxed);
        let ramp = if from == 0 { RAMP_FULL } else { self.ramp_at(from, clock_ms()) };
        match self.outlier.share() {
            RAMP_FULL => ramp,
            share => (u64::from(ramp) * u64::from(share) / u64::from(RAMP_FULL)).max(1) as u32,
        }
    }

    /// Outlier detection ejected it, brought it back or shifted its share: the balancers hear.
    pub(super) fn outlier_changed(&self) {
        self.bump();
    }

    /// Runs `then` on the server after `delay` (an ejection's end), if it is still there.
    pub(super) fn after_delay(&self, delay: Duration, then: impl FnOnce(&ServerState) + Send + 'static) {
        after(&self.me, delay, then);
    }

    /// The weight it takes traffic by now (0 unless up; scaled by the ramp while slow start runs)
    /// and, while a ramp runs, the percentage of its weight reached: for stats and explanations.
    pub fn ramped_weight(&self) -> (f64, Option<u32>) {
        let (weight, ramp) = (self.effective_weight(), self.ramp());
        (f64::from(weight) * f64::from(ramp) / f64::from(RAMP_FULL), (ramp < RAMP_FULL && weight > 0).then_some(ramp / 10))
    }

    /// The ramp at `now` of one that began at `from`: linear from 1% to all over the period.
    fn ramp_at(&self, from: u64, now: u64) -> u32 {
        let period = self.slow_start_ms.load(Relaxed);
        let elapsed = now.saturating_sub(from);
        if period == 0 || elapsed >= period {
            return RAMP_FULL;
        }
        ((elapsed * u64::from(RAMP_FULL) / period) as u32).max(RAMP_FULL / 100)
    }

    /// Starts a ramp now, and a timer that tells the balancers as it goes (those that build a
    /// table from the weights rebuild it) and ends it.
    fn begin_ramp(&self) {
        self.resume_ramp(clock_ms());
    }

    /// A ramp that began at `from` (a ramp carried from the previous process began before this
    /// one started), and its timer.
    fn resume_ramp(&self, from: u64) {
        let period = self.slow_start_ms.load(Relaxed);
        if period == 0 {
            return;
        }
        self.ramp_from.store(from, Relaxed);
        // Twenty steps, none shorter than 100ms.
        let step = Duration::from_millis((period / 20).max(100));
        fn tick(s: &ServerState, from: u64, step: Duration) {
            if s.ramp_from.load(Relaxed) != from {
                return; // another ramp began, or the server left
            }
            if s.ramp_at(from, clock_ms()) >= RAMP_FULL {
                let _ = s.ramp_from.compare_exchange(from, 0, Relaxed, Relaxed);
            } else {
                after(&s.me, step, move |s| tick(s, from, step));
            }
            s.events.notify();
        }
        after(&self.me, step, move |s| tick(s, from, step));
    }

    /// A flap: the penalty grows, and past `suppress` the server is kept out until it decays
    /// below `reuse`.
    fn flap(&self) {
        let now = clock_ms();
        let Ok(mut f) = self.flaps.lock() else { return };
        if f.damping.suppress == 0 {
            return;
        }
        f.penalty = f.penalty(now) + Damping::PENALTY;
        f.at = now;
        if f.penalty > f64::from(f.damping.suppress) && !self.suppressed.swap(true, Relaxed) {
            let back_in = f.back_in(now);
            tracing::warn!(service = %self.key.service, server = %self.key.address, "suppressed: {}", flapping(f.penalty, back_in));
            after(&self.me, back_in, ServerState::reconsider);
        }
    }

    /// Ends a suppression once the penalty is below `reuse`; otherwise waits for the rest.
    fn reconsider(&self) {
        let now = clock_ms();
        let left = match self.flaps.lock() {
            Ok(f) => f.back_in(now),
            Err(_) => Duration::ZERO,
        };
        if !left.is_zero() {
            after(&self.me, left, ServerState::reconsider);
            return;
        }
        if self.suppressed.swap(false, Relaxed) {
            let penalty = self.damping().penalty;
            tracing::info!(service = %self.key.service, server = %self.key.address, "no longer suppressed: flap penalty {penalty:.0} is below reuse");
            self.bump();
        }
    }

    /// Flap damping's penalty now, and the time left while suppressed.
    pub fn damping(&self) -> DampingNow {
        let now = clock_ms();
        match self.flaps.lock() {
            Ok(f) => DampingNow { penalty: f.penalty(now), back_in: self.suppressed.load(Relaxed).then(|| f.back_in(now)) },
            Err(_) => DampingNow { penalty: 0.0, back_in: None },
        }
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }

    /// Every change of a flag that decides the state, and of the weight, goes through here: the
    /// downtime clock starts or stops, and the service's balancers hear of it last, once the new
    /// state is in place for them to read.
    fn bump(&self) {
        let healthy = self.health_up.load(Relaxed) && !self.passive_down.load(Relaxed);
        if self.was_healthy.swap(healthy, Relaxed) && !healthy && self.enabled.load(Relaxed) {
            self.flap();
        }
        let up = self.state() == State::Up;
        if up && !self.was_up.swap(true, Relaxed) {
            if self.ramps.swap(true, Relaxed) {
                self.begin_ramp();
            }
        } else if !up {
            self.was_up.store(false, Relaxed);
            self.ramp_from.store(0, Relaxed);
        }
        let now = unix_ms();
        if matches!(self.state(), State::Down | State::Suppressed) {
            let _ = self.down_since_ms.compare_exchange(0, now, Relaxed, Relaxed);
        } else {
            let since = self.down_since_ms.swap(0, Relaxed);
            if since > 0 {
                self.downtime_ms.fetch_add(now.saturating_sub(since), Relaxed);
            }
        }
        self.events.notify();
    }

    /// Total time spent down (checks failing, held by connect failures or suppressed), in ms up
    /// to `now`.
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
            self.ramps.store(true, Relaxed);
            self.bump();
        }
        changed
    }

    pub fn set_draining(&self, on: bool) {
        if self.draining.swap(on, Relaxed) != on {
            self.ramps.store(true, Relaxed);
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

    pub fn set_check_streak(&self, streak: u32) {
        self.check_streak.store(streak, Relaxed);
    }

    /// Active checks in a row toward `fall` (an up server) or `rise` (a down one).
    pub fn check_streak(&self) -> u32 {
        self.check_streak.load(Relaxed)
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
        let state = ServerState::new(key, Arc::default(), 1, true, false);
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
