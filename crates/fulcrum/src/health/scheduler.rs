//! One check task per server of a generation. A reload cancels the old generation's tasks and
//! starts the new one's; state lives in `ServerState`, so the hand-over loses nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{CheckError, RiseFall};
use super::http::{HttpCheck, Target};
use crate::config::{Health, HealthKind};
use crate::live::{Generation, Pool, ServerEntry};

/// Starts the checks of every server in `generation`; they stop when `stop` fires.
pub fn spawn(generation: &Generation, stop: &CancellationToken) {
    for (_, pool) in generation.pools() {
        for entry in pool.servers() {
            tokio::spawn(run(pool.clone(), entry.clone(), stop.clone()));
        }
    }
}

/// Waits until every checked server has its first result, or `limit` passes, so a server that
/// serves the wrong page never sees traffic at start-up.
pub async fn wait_first_round(generation: &Generation, limit: Duration) {
    let deadline = Instant::now() + limit;
    let pending = || {
        generation
            .pools()
            .map(|(_, p)| p)
            .filter(|s| s.config.health.kind != HealthKind::None)
            .flat_map(|s| s.servers())
            .any(|e| !e.state.checked())
    };
    while pending() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn run(pool: Arc<Pool>, entry: Arc<ServerEntry>, stop: CancellationToken) {
    let cfg: &Health = &pool.config.health;
    let state = &entry.state;
    let name = &pool.config.name;
    let address = &state.key.address;
    let mut machine = RiseFall::new(cfg.rise, cfg.fall, state.health_up(), state.checked());
    let mut http = HttpCheck::default();
    let target = Target { server: &entry, tls: pool.server_tls.as_deref(), h2: !pool.config.protocol.is_http1() };
    loop {
        let started = Instant::now();
        let result = match cfg.kind {
            // No active check: a passive hold ends after one interval.
            HealthKind::None => Ok("no check".to_string()),
            HealthKind::Tcp => timed(cfg.timeout, super::tcp::check(entry.addr, entry.proxy_protocol)).await,
            HealthKind::Http | HealthKind::Grpc => timed(cfg.timeout, http.check(&target, cfg)).await,
            HealthKind::Ftp => timed(cfg.timeout, super::ftp::check(entry.addr, entry.proxy_protocol)).await,
        };
        let ok = result.is_ok();
        if cfg.kind != HealthKind::None {
            let text = match &result {
                Ok(t) => format!("pass: {t} in {} ms", started.elapsed().as_millis()),
                Err(t) => format!("fail: {t}"),
            };
            state.set_last_check(text, started.elapsed());
            if let Some(up) = machine.record(ok) {
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
        tokio::select! {
            _ = tokio::time::sleep(cfg.interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

async fn timed(limit: Duration, check: impl Future<Output = Result<String, CheckError>>) -> Result<String, CheckError> {
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

    #[tokio::test(start_paused = true)]
    async fn an_up_server_goes_down_after_fall_failed_checks_one_interval_apart() {
        let (pool, entry) = one_server("kind = \"tcp\"\ninterval = \"10s\"\ntimeout = \"1s\"\nfall = 3\nrise = 2", &closed_port());
        entry.state.set_last_check("pass".into(), Duration::ZERO);
        entry.state.set_health(true);
        let stop = CancellationToken::new();
        tokio::spawn(run(pool, entry.clone(), stop.clone()));
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
        let stop = CancellationToken::new();
        tokio::spawn(run(pool, entry.clone(), stop.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(entry.state.record_connect_failure(1), "one failure reaches failure_limit = 1");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(entry.state.passive_down(), "released before the interval ended");
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert!(!entry.state.passive_down(), "still held after the interval");
        stop.cancel();
    }
}
