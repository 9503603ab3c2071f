//! One check task per server of a generation. A reload cancels the old generation's tasks and
//! starts the new one's; state lives in `ServerState`, so the hand-over loses nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{CheckError, RiseFall};
use super::http::HttpCheck;
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
    loop {
        let started = Instant::now();
        let result = match cfg.kind {
            // No active check: a passive hold ends after one interval.
            HealthKind::None => Ok("no check".to_string()),
            HealthKind::Tcp => timed(cfg.timeout, super::tcp::check(entry.addr)).await,
            HealthKind::Http => timed(cfg.timeout, http.check(entry.addr, address, cfg)).await,
            HealthKind::Ftp => timed(cfg.timeout, super::ftp::check(entry.addr)).await,
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
