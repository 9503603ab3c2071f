//! Per-client limits as the API, the dashboard and `/metrics` show them: what each table did,
//! how many keys it holds, and (`GET /api/limits/<table>`) the keys closest to their limit.

use std::sync::atomic::Ordering::Relaxed;

use serde::Serialize;

use crate::live::limit::Limiter;
use crate::live::limit::shared::SyncStatus;

#[derive(Debug, Serialize)]
pub struct LimitStats {
    pub name: String,
    pub service: String,
    /// The index of the route it belongs to, when it is a route's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<usize>,
    pub count: &'static str,
    pub key: String,
    pub limit: u64,
    pub period_ms: u64,
    pub action: crate::config::LimitAction,
    pub store: crate::config::LimitStore,
    /// Keys held now, and the most it holds.
    pub keys: usize,
    pub max_keys: usize,
    pub passed: u64,
    pub limited: u64,
    pub delayed: u64,
    /// Over the limit but let through (`action = "log"`).
    pub logged: u64,
    /// A shared table's last sync with Redis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
    /// The keys closest to their limit (`GET /api/limits` and `/api/limits/<table>` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top: Option<Vec<KeyUse>>,
}

/// One key of a table: its network or text, how much of its limit it has used (1.0: all; a
/// `connections` key: its open connections over the limit), and while it is over, when it may
/// go again.
#[derive(Debug, Serialize)]
pub struct KeyUse {
    pub key: String,
    pub used: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// What `limiter` did, with its `top` keys closest to the limit when asked for.
pub fn limit_stats(limiter: &Limiter, top: Option<usize>) -> LimitStats {
    let c = &limiter.config;
    let n = &limiter.counts;
    LimitStats {
        name: c.name.clone(),
        service: limiter.service.clone(),
        route: limiter.route,
        count: c.count.as_str(),
        key: c.key.to_string(),
        limit: c.limit,
        period_ms: c.period.as_millis() as u64,
        action: c.action,
        store: c.store,
        keys: limiter.keys(),
        max_keys: c.max_keys,
        passed: n.passed.load(Relaxed),
        limited: n.limited.load(Relaxed),
        delayed: n.delayed.load(Relaxed),
        logged: n.logged.load(Relaxed),
        sync: limiter.shared.as_ref().map(|s| s.status()),
        top: top.map(|k| {
            limiter
                .top(k)
                .iter()
                .map(|u| KeyUse { key: limiter.show(u), used: (u.used * 1000.0).round() / 1000.0, retry_after_ms: u.retry_after.map(|d| d.as_millis() as u64) })
                .collect()
        }),
    }
}

/// The Limit cell of a service's session rate: its first per-client rate on new connections or
/// requests, as "50/s per client".
pub fn session_limit(service: &crate::live::Service) -> Option<String> {
    use crate::config::Counted;
    let l = service.limits.iter().find(|l| matches!(l.config.count, Counted::NewConnections | Counted::Requests))?;
    let c = &l.config;
    let per = if c.period == std::time::Duration::from_secs(1) { "s".to_string() } else { humantime::format_duration(c.period).to_string() };
    Some(format!("{}/{per} per {}", c.limit, c.key))
}
