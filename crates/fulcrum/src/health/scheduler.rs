//! One check task per server identity (service or pool, configured address), owned by
//! [`Checks`] and outliving generations: a reload or an edit hands each task the new
//! generation's view of its server, and the task goes on with its rise/fall streak, its last
//! result and its schedule. Only a server whose check settings changed (the pool's `[health]`,
//! its address, PROXY header, TLS or protocol) starts its checks again; a removed server's stop.
//! So an operator's unrelated edit can neither keep a failing server in rotation nor check a
//! server sooner than its interval.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::http::HttpCheck;
use super::target::{Target, check_addr};
use super::{CheckError, RiseFall};
use crate::config::{Health, HealthKind, Mode, ProxyProtocol, ServerProtocol, ServerTls};
use crate::error::Throttle;
use crate::live::{Generation, Pool, ServerEntry};

/// What a pool's checks are, the same for each of its servers (held once per pool, not once per
/// server): when any of it changes, the pool's checks start again.
#[derive(Debug, Clone, PartialEq)]
struct PoolSpec {
    health: Health,
    server_tls: Option<ServerTls>,
    protocol: ServerProtocol,
    mode: Mode,
}

impl PoolSpec {
    fn of(pool: &Pool) -> PoolSpec {
        PoolSpec { health: pool.config.health.clone(), server_tls: pool.config.server_tls.clone(), protocol: pool.config.protocol, mode: pool.config.mode }
    }
}

/// What a server's check is beside its pool's, apart from the generation it runs in: when any
/// of it changes, the check starts again (with the server's health as it stood).
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    addr: SocketAddr,
    proxy_protocol: Option<ProxyProtocol>,
    sni: Option<String>,
}

impl Spec {
    fn of(pool: &Pool, entry: &ServerEntry) -> Spec {
        let configured = pool.config.servers.iter().find(|s| s.address == entry.state.key.address);
        Spec { addr: entry.addr, proxy_protocol: entry.proxy_protocol, sni: configured.and_then(|s| s.sni.clone()) }
    }
}

/// The server as the newest generation has it.
pub(super) type View = (Arc<Pool>, Arc<ServerEntry>);

struct Running {
    spec: Spec,
    view: watch::Sender<View>,
    stop: CancellationToken,
    /// Checks asked for now (`Checks::check_now`).
    asks: Arc<Asks>,
}

/// Checks asked for now: the task runs one at its next turn and answers every asker waiting when
/// it began with its result. A few words a server where a channel of its own held a block of
/// slots; the askers are bounded by the admin API's connections.
#[derive(Default)]
struct Asks {
    waiting: Mutex<Vec<oneshot::Sender<Checked>>>,
    ready: tokio::sync::Notify,
}

impl Asks {
    fn push(&self, reply: oneshot::Sender<Checked>) {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).push(reply);
        self.ready.notify_one();
    }

    fn pending(&self) -> bool {
        !self.waiting.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    fn take(&self) -> Vec<oneshot::Sender<Checked>> {
        std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The result of a check run at once (`POST .../check`), and the server's health after it.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    pub passed: bool,
    /// What `last_check` says now: `pass: ...` or `fail: ...`.
    pub result: String,
    pub took_ms: u64,
    /// The server's state after the check, whether its checks hold it up, and the checks in a
    /// row toward `rise` or `fall`.
    pub state: crate::live::State,
    pub check_up: bool,
    pub check_streak: u32,
}

/// Why a check could not be run at once.
#[derive(Debug, thiserror::Error)]
pub enum CheckNowError {
    #[error("no server {address:?} in {service:?}")]
    NoServer { service: String, address: String },
    #[error("{0:?} has no active check (kind = \"none\")")]
    NoCheck(String),
    /// Its checks stopped meanwhile (a reload replaced them, or the process is stopping).
    #[error("the server's checks stopped before answering; try again")]
    Stopped,
}

impl Running {
    /// Starts the server's check and, when its pool has one, its agent's questions (without
    /// one, what an agent said before no longer counts).
    fn start(spec: Spec, has_agent: bool, view: View) -> Running {
        if !has_agent {
            view.1.state.clear_agent();
        }
        let (tx, rx) = watch::channel(view);
        let stop = CancellationToken::new();
        if has_agent {
            tokio::spawn(super::agent::run(rx.clone(), stop.clone()));
        }
        let asks = Arc::new(Asks::default());
        tokio::spawn(run(rx, asks.clone(), stop.clone()));
        Running { spec, view: tx, stop, asks }
    }
}

/// The checks of one pool's servers, by configured address, and the pool they last saw.
struct PoolChecks {
    pool: Arc<Pool>,
    spec: PoolSpec,
    servers: HashMap<String, Running>,
}

/// The running check tasks, by pool name and server address.
#[derive(Default)]
pub struct Checks {
    pools: Mutex<HashMap<String, PoolChecks>>,
}

impl Checks {
    /// Makes the running checks those of `generation`: a pool it kept whole is not looked at; in
    /// another, a server with the same check goes on (told of its new view), one whose check
    /// changed starts again, a new one starts, and one it no longer has stops.
    pub fn follow(&self, generation: &Generation) {
        let Ok(mut pools) = self.pools.lock() else { return };
        let mut next = HashMap::with_capacity(pools.len());
        for (_, pool) in generation.pools() {
            let name = pool.config.name.clone();
            let old = match pools.remove(&name) {
                Some(kept) if Arc::ptr_eq(&kept.pool, pool) => {
                    next.insert(name, kept);
                    continue;
                }
                other => other,
            };
            let pool_spec = PoolSpec::of(pool);
            let same_pool = old.as_ref().is_some_and(|o| o.spec == pool_spec);
            let has_agent = pool_spec.health.agent.is_some();
            let mut before = old.map(|o| o.servers).unwrap_or_default();
            let mut servers = HashMap::with_capacity(before.len());
            for entry in pool.servers() {
                let address = entry.state.key.address.clone();
                let spec = Spec::of(pool, entry);
                let view = (pool.clone(), entry.clone());
                let running = match before.remove(&address) {
                    Some(r) if same_pool && r.spec == spec && !r.stop.is_cancelled() && Arc::ptr_eq(&r.view.borrow().1.state, &entry.state) => {
                        // Ignored if the task is gone (only when it was stopped).
                        let _ = r.view.send(view);
                        r
                    }
                    other => {
                        if let Some(old) = other {
                            old.stop.cancel();
                        }
                        Running::start(spec, has_agent, view)
                    }
                };
                servers.insert(address, running);
            }
            for r in before.values() {
                r.stop.cancel();
            }
            next.insert(name, PoolChecks { pool: pool.clone(), spec: pool_spec, servers });
        }
        for old in pools.values() {
            old.servers.values().for_each(|r| r.stop.cancel());
        }
        *pools = next;
    }

    /// Runs the check of the server at `address` in `pool` (a pool's name) now, as its next
    /// scheduled one would run, and answers its result; the streak counts it. Its schedule goes
    /// on from then.
    pub async fn check_now(&self, pool: &Pool, address: &str) -> Result<Checked, CheckNowError> {
        let no_server = || CheckNowError::NoServer { service: pool.config.name.clone(), address: address.to_string() };
        if pool.config.health.kind == HealthKind::None {
            return Err(CheckNowError::NoCheck(pool.config.name.clone()));
        }
        let (reply, answer) = oneshot::channel();
        {
            let Ok(pools) = self.pools.lock() else { return Err(CheckNowError::Stopped) };
            let running = pools.get(&pool.config.name).and_then(|p| p.servers.get(address)).ok_or_else(no_server)?;
            if running.stop.is_cancelled() {
                return Err(CheckNowError::Stopped);
            }
            running.asks.push(reply);
        }
        answer.await.map_err(|_| CheckNowError::Stopped)
    }

    /// Stops every check (the process is shutting down).
    pub fn stop(&self) {
        if let Ok(mut pools) = self.pools.lock() {
            for (_, p) in pools.drain() {
                p.servers.values().for_each(|r| r.stop.cancel());
            }
        }
    }
}

/// Waits until every checked server has its first result, or `limit` passes, so a server that
/// serves the wrong page never sees traffic at start-up.
pub async fn wait_first_round(generation: &Generation, limit: Duration) {
    let deadline = crate::clock::now() + limit;
    let pending = || generation.pools().map(|(_, p)| p).filter(|s| s.config.health.kind != HealthKind::None).flat_map(|s| s.servers()).any(|e| !e.state.checked());
    while pending() && crate::clock::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One server's checks, each round against the newest view of it, until `stop`; a round runs
/// early when asked (`asks`), and the askers waiting when it began get its result.
async fn run(mut view: watch::Receiver<View>, asks: Arc<Asks>, stop: CancellationToken) {
    let (pool, entry) = view.borrow_and_update().clone();
    let cfg: &Health = &pool.config.health;
    let mut machine = RiseFall::new(cfg.rise, cfg.fall, entry.state.health_up(), entry.state.checked());
    let mut http = HttpCheck::default();
    loop {
        let asked = asks.take();
        // The newest generation's pool and entry: the same check (`Spec`), its TLS client and
        // name as that generation has them.
        let (pool, entry) = view.borrow_and_update().clone();
        let cfg: &Health = &pool.config.health;
        let state = &entry.state;
        let name = &pool.config.name;
        let address = &state.key.address;
        let addr = check_addr(entry.addr, cfg);
        let target = Target { server: &entry, addr, tls: pool.server_tls.as_deref(), h2: !pool.config.protocol.is_http1() };
        let started = crate::clock::now();
        // Each check's future is boxed for the time it runs: held in the task's own state, the
        // largest of them (HTTP over TLS: the handshake and hyper's connection) made every
        // server's task that size between checks too, some 14 KiB a server.
        let result = match cfg.kind {
            // No active check: a passive hold ends after one interval.
            HealthKind::None => Ok("no check".to_string()),
            HealthKind::Tcp => Box::pin(super::tcp::check(addr, entry.proxy_protocol, cfg)).await,
            HealthKind::Http | HealthKind::Grpc => Box::pin(timed(cfg.timeout, http.check(&target, cfg))).await,
            HealthKind::Ftp => Box::pin(timed(cfg.timeout, super::ftp::check(addr, entry.proxy_protocol))).await,
        };
        let ok = result.is_ok();
        if let Some(e) = result.as_ref().err().filter(|e| e.is_local()) {
            // This host could not make the check (out of descriptors): the server was never
            // reached, so its streak and state stay as they were.
            static LOCAL: Throttle = Throttle::new();
            if let Some(held) = LOCAL.ready() {
                warn!(service = %name, server = %address, held, "check not made: {e}; this host is out of descriptors or memory, the server's state stays as it was");
            }
            state.set_last_check(format!("not made: {e} (this host)"), crate::clock::since(started));
        } else if cfg.kind != HealthKind::None {
            let text = match &result {
                Ok(t) => format!("pass: {t} in {} ms", crate::clock::since(started).as_millis()),
                Err(t) => format!("fail: {t}"),
            };
            state.set_last_check(text, crate::clock::since(started));
            let changed = machine.record(ok);
            state.set_check_streak(machine.streak());
            if let Some(up) = changed {
                state.set_health(up);
                match &result {
                    Ok(t) => info!(service = %name, server = %address, "server up: {t}"),
                    Err(t) => warn!(service = %name, server = %address, "server down: {t}"),
                }
            }
        }
        if ok && state.clear_passive() {
            info!(service = %name, server = %address, "server up: check passed after connect failures");
        }
        if !asked.is_empty() {
            let checked = Checked {
                passed: ok,
                result: state.last_check(),
                took_ms: state.last_check_ms(),
                state: state.state(),
                check_up: state.health_up(),
                check_streak: state.check_streak(),
            };
            // An asker may have gone; the check counted all the same.
            for reply in asked {
                let _ = reply.send(checked.clone());
            }
        }
        let next = tokio::time::sleep(cfg.interval);
        tokio::pin!(next);
        loop {
            tokio::select! {
                _ = &mut next => break,
                // A wake-up left by an ask this round answered already is not one.
                _ = asks.ready.notified() => if asks.pending() { break },
                _ = stop.cancelled() => {
                    // Askers still waiting learn the checks stopped.
                    drop(asks.take());
                    return;
                }
            }
        }
    }
}

pub(super) async fn timed(limit: Duration, check: impl Future<Output = Result<String, CheckError>>) -> Result<String, CheckError> {
    match tokio::time::timeout(limit, check).await {
        Ok(r) => r,
        Err(_) => Err(CheckError::Timeout(limit)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::live::Live;

    /// The first pool's first server of a one-service config over `server`, and the pool.
    fn one_server(health: &str, server: &str) -> (Arc<Pool>, Arc<ServerEntry>) {
        let text = format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nfailure_limit = 1\n[service.health]\n{health}\n[[service.server]]\naddress = \"{server}\"\n");
        let live = Live::new(crate::config::parse(&text, "t.toml").unwrap()).unwrap();
        let generation = live.current();
        let (_, pool) = generation.pools().next().unwrap();
        (pool.clone(), pool.servers().next().unwrap().clone())
    }

    fn closed_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    /// Runs `entry`'s checks as `Checks` would.
    fn start(pool: Arc<Pool>, entry: Arc<ServerEntry>) -> CancellationToken {
        let stop = CancellationToken::new();
        let (_tx, rx) = watch::channel((pool, entry));
        let asks = Arc::new(Asks::default());
        tokio::spawn(run(rx, asks, stop.clone()));
        stop
    }

    #[tokio::test]
    async fn a_servers_check_task_holds_no_check_between_checks() {
        let (pool, entry) = one_server("kind = \"http\"", "127.0.0.1:9");
        let (_tx, rx) = watch::channel((pool, entry));
        let asks = Arc::new(Asks::default());
        let task = run(rx, asks, CancellationToken::new());
        // One task per server: its state is what every server holds between checks.
        let size = std::mem::size_of_val(&task);
        assert!(size < 4096, "a check task's state is {size} bytes");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ask_runs_a_check_early_and_askers_waiting_together_share_it() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (pool, entry) = one_server("kind = \"tcp\"\ninterval = \"60s\"\ntimeout = \"1s\"", &server.local_addr().unwrap().to_string());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        tokio::spawn({
            let accepted = accepted.clone();
            async move {
                while server.accept().await.is_ok() {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        let checks = || accepted.load(std::sync::atomic::Ordering::Relaxed);
        let stop = CancellationToken::new();
        let (_tx, rx) = watch::channel((pool, entry));
        let asks = Arc::new(Asks::default());
        tokio::spawn(run(rx, asks.clone(), stop.clone()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(checks(), 1, "the first round");
        let (a, first) = oneshot::channel();
        let (b, second) = oneshot::channel();
        asks.push(a);
        asks.push(b);
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        assert!(first.passed && second.passed, "{first:?}");
        assert_eq!(checks(), 2, "one check for both askers, 55 s before its turn");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(checks(), 2, "no other check before the interval");
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn an_up_server_goes_down_after_fall_failed_checks_one_interval_apart() {
        let (pool, entry) = one_server("kind = \"tcp\"\ninterval = \"10s\"\ntimeout = \"1s\"\nfall = 3\nrise = 2", &closed_port());
        entry.state.set_last_check("pass".into(), Duration::ZERO);
        entry.state.set_health(true);
        let stop = start(pool, entry.clone());
        // Failures at about 0 s, 10 s and 20 s: still up after two, down after the third.
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(entry.state.health_up(), "down after two failures: {}", entry.state.last_check());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!entry.state.health_up(), "still up after three failures");
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_check_a_passive_hold_ends_after_one_interval() {
        let (pool, entry) = one_server("kind = \"none\"\ninterval = \"60s\"", "127.0.0.1:9");
        let stop = start(pool, entry.clone());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(entry.state.record_connect_failure(1), "one failure reaches failure_limit = 1");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(entry.state.passive_down(), "released before the interval ended");
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert!(!entry.state.passive_down(), "still held after the interval");
        stop.cancel();
    }
}
