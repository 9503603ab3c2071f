//! Outlier detection: health read from real traffic (`[service.outlier]`), Envoy's way and the
//! passive-measurement paper's.
//!
//! Each server counts what its requests and connections met ([`Tracker`]): consecutive 5xx
//! answers and consecutive gateway errors (a failed connect, a reset, a timeout, and the 502,
//! 503 and 504 a server answers itself), and each interval's requests and errors.
//! - `mode = "eject"`: a streak past its threshold, or a success rate far below the pool's
//!   (`success_rate_stdev` standard deviations under the mean, over an interval), takes the
//!   server out for `base_ejection_time` times its ejections in a row (at most
//!   `max_ejection_time`), never more than `max_ejection_percent` of the pool at once (one
//!   always may be). It returns by itself; each interval it is not ejected forgives one
//!   ejection.
//! - `mode = "shift"`: nothing is taken out. Each interval the server with the worst error
//!   ratio above `shift_threshold` loses `shift_delta` of its share of traffic (the paper's Δ),
//!   and a server back under the threshold regains `shift_delta` of its whole share: bounded
//!   steps away and back. The share scales the server's weight as slow start's ramp does, so
//!   every weighted algorithm follows it.
//!
//! The streaks are counted on the data path with atomics; the interval's comparisons run on one
//! task for the process ([`run`]), never on a request.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tracing::{info, warn};

use super::pool::Pool;
use super::server::ServerEntry;
use crate::balance::RAMP_FULL;
use crate::clock::clock_ms;
use crate::config::{Outlier, OutlierMode};

/// What a request or connection to a server met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered with this status.
    Answered(u16),
    /// A connection was made (TCP and FTP: the whole of success).
    Connected,
    /// No answer: "connect failure", "reset" or "timeout".
    Gateway(&'static str),
}

/// A share never goes below this (thousandths): a shifted server keeps a trickle of traffic
/// to show it recovered.
const MIN_SHARE: u32 = RAMP_FULL / 20;

/// One server's outlier state, kept in its `ServerState` across reloads.
#[derive(Debug)]
pub struct Tracker {
    consecutive_5xx: AtomicU32,
    consecutive_gateway: AtomicU32,
    /// The last 5xx status, for the reason.
    last_status: AtomicU32,
    /// This interval's requests and errors (5xx and gateway errors).
    requests: AtomicU64,
    errors: AtomicU64,
    /// While ejected: until when, in `clock_ms`; 0 otherwise.
    ejected_until: AtomicU64,
    /// Ejections in a row, forgiven one per interval out.
    times: AtomicU32,
    /// `shift`: the share of its weight it takes, in thousandths.
    share: AtomicU32,
    /// Why it was ejected or shifted, for the stats, explain and the dashboard.
    reason: Mutex<String>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            consecutive_5xx: AtomicU32::new(0),
            consecutive_gateway: AtomicU32::new(0),
            last_status: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            ejected_until: AtomicU64::new(0),
            times: AtomicU32::new(0),
            share: AtomicU32::new(RAMP_FULL),
            reason: Mutex::new(String::new()),
        }
    }
}

impl Tracker {
    pub fn ejected(&self) -> bool {
        self.ejected_until.load(Relaxed) != 0
    }

    /// The share of its weight a shifted server takes, in thousandths ([`RAMP_FULL`]: all).
    pub fn share(&self) -> u32 {
        self.share.load(Relaxed)
    }

    /// While ejected: "ejected: 5 consecutive 5xx answers (the last 503), back in 30s"; while
    /// shifted: "shifted: takes 41% of its share (error ratio 35%)".
    pub fn describe(&self) -> Option<String> {
        let reason = self.reason.lock().map(|r| r.clone()).unwrap_or_default();
        let until = self.ejected_until.load(Relaxed);
        if until != 0 {
            let left = Duration::from_secs(until.saturating_sub(clock_ms()).div_ceil(1000).max(1));
            return Some(format!("ejected: {reason}, back in {}", humantime::format_duration(left)));
        }
        let share = self.share();
        (share < RAMP_FULL).then(|| format!("shifted: takes {}% of its share ({reason})", share / 10))
    }
}

/// Counts what a request or connection to `entry`, a server of `pool`, met, and ejects it when
/// a streak passes its threshold.
pub fn observe(pool: &Pool, entry: &ServerEntry, outcome: Outcome) {
    let Some(cfg) = &pool.config.outlier else { return };
    let t = &entry.state.outlier;
    let (five, gateway) = match outcome {
        Outcome::Answered(status) => (status >= 500, matches!(status, 502..=504)),
        Outcome::Connected => {
            t.consecutive_gateway.store(0, Relaxed);
            return;
        }
        Outcome::Gateway(_) => (false, true),
    };
    t.requests.fetch_add(1, Relaxed);
    if five || gateway {
        t.errors.fetch_add(1, Relaxed);
    }
    let streak = |counter: &AtomicU32, hit: bool| {
        if hit {
            counter.fetch_add(1, Relaxed) + 1
        } else {
            if counter.load(Relaxed) != 0 {
                counter.store(0, Relaxed);
            }
            0
        }
    };
    let n5 = streak(&t.consecutive_5xx, five);
    let ng = streak(&t.consecutive_gateway, gateway);
    if let Outcome::Answered(status) = outcome
        && five
    {
        t.last_status.store(u32::from(status), Relaxed);
    }
    if cfg.mode != OutlierMode::Eject || t.ejected() {
        return;
    }
    let reason = if cfg.consecutive_5xx > 0 && n5 >= cfg.consecutive_5xx {
        format!("{n5} consecutive 5xx answers (the last {})", t.last_status.load(Relaxed))
    } else if cfg.consecutive_gateway_errors > 0 && ng >= cfg.consecutive_gateway_errors {
        match outcome {
            Outcome::Gateway(what) => format!("{ng} consecutive gateway errors (the last a {what})"),
            _ => format!("{ng} consecutive gateway errors (the last a {} answer)", t.last_status.load(Relaxed)),
        }
    } else {
        return;
    };
    eject(pool, entry, cfg, reason);
}

/// Takes `entry` out for its ejection time, unless the pool has its most ejected already.
fn eject(pool: &Pool, entry: &ServerEntry, cfg: &Outlier, reason: String) {
    let t = &entry.state.outlier;
    let servers = pool.servers().count();
    let ejected = pool.servers().filter(|e| e.state.outlier.ejected()).count();
    let most = (servers * cfg.max_ejection_percent as usize / 100).max(1);
    if ejected >= most {
        static HELD: crate::error::Throttle = crate::error::Throttle::new();
        if let Some(held) = HELD.ready() {
            warn!(service = %pool.config.name, server = %entry.state.key.address, held, "not ejected ({reason}): {ejected} of {servers} servers are out already (max_ejection_percent)");
        }
        return;
    }
    let times = t.times.load(Relaxed) + 1;
    let lasts = cfg.base_ejection_time.saturating_mul(times).min(cfg.max_ejection_time);
    let until = clock_ms() + lasts.as_millis() as u64;
    // Only one thread ejects it: the one that sets the time.
    if t.ejected_until.compare_exchange(0, until, Relaxed, Relaxed).is_err() {
        return;
    }
    t.times.store(times, Relaxed);
    t.consecutive_5xx.store(0, Relaxed);
    t.consecutive_gateway.store(0, Relaxed);
    if let Ok(mut r) = t.reason.lock() {
        r.clone_from(&reason);
    }
    warn!(service = %pool.config.name, server = %entry.state.key.address, "server ejected: {reason}, back in {}", humantime::format_duration(lasts));
    entry.state.outlier_changed();
    entry.state.after_delay(lasts, move |s| {
        if s.outlier.ejected_until.swap(0, Relaxed) != 0 {
            info!(service = %s.key.service, server = %s.key.address, "server back from ejection");
            s.outlier_changed();
        }
    });
}

/// One interval of a pool: the success-rate test (`eject`) or the shift of traffic (`shift`),
/// and the interval's counts started afresh.
pub fn sweep(pool: &Pool) {
    let Some(cfg) = &pool.config.outlier else { return };
    let counts: Vec<(&std::sync::Arc<ServerEntry>, u64, u64)> =
        pool.servers().map(|e| (e, e.state.outlier.requests.swap(0, Relaxed), e.state.outlier.errors.swap(0, Relaxed))).collect();
    for (e, ..) in &counts {
        let t = &e.state.outlier;
        if !t.ejected() && t.times.load(Relaxed) > 0 {
            t.times.fetch_sub(1, Relaxed);
        }
    }
    let enough = |&&(e, requests, _): &&(&std::sync::Arc<ServerEntry>, u64, u64)| requests >= cfg.success_rate_min_requests && e.state.in_rotation();
    match cfg.mode {
        OutlierMode::Eject if cfg.success_rate_stdev > 0.0 => {
            let rated: Vec<_> = counts.iter().filter(enough).filter(|(e, ..)| !e.state.outlier.ejected()).collect();
            if rated.len() < cfg.success_rate_min_hosts as usize {
                return;
            }
            let rates: Vec<f64> = rated.iter().map(|(_, r, e)| 1.0 - *e as f64 / *r as f64).collect();
            let mean = rates.iter().sum::<f64>() / rates.len() as f64;
            let stdev = (rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64).sqrt();
            let floor = mean - cfg.success_rate_stdev * stdev;
            for ((e, ..), rate) in rated.iter().zip(&rates) {
                if *rate < floor {
                    let reason =
                        format!("success rate {:.0}% against the pool's {:.0}% (more than {} standard deviations below)", rate * 100.0, mean * 100.0, cfg.success_rate_stdev);
                    eject(pool, e, cfg, reason);
                }
            }
        }
        OutlierMode::Eject => {}
        OutlierMode::Shift => shift(pool, cfg, &counts),
    }
}

/// `shift`: the worst server above the threshold loses Δ of its share; those back under it
/// regain Δ of their whole.
fn shift(pool: &Pool, cfg: &Outlier, counts: &[(&std::sync::Arc<ServerEntry>, u64, u64)]) {
    let ratio = |requests: u64, errors: u64| if requests == 0 { 0.0 } else { errors as f64 / requests as f64 };
    let worst = counts
        .iter()
        .filter(|(e, requests, _)| *requests >= cfg.success_rate_min_requests && e.state.in_rotation())
        .map(|(e, r, x)| (e, ratio(*r, *x)))
        .filter(|(_, r)| *r > cfg.shift_threshold)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    for (e, requests, errors) in counts {
        let t = &e.state.outlier;
        let share = t.share();
        let r = ratio(*requests, *errors);
        let next = if worst.is_some_and(|(w, _)| std::ptr::eq(&***w, &***e)) {
            if let Ok(mut reason) = t.reason.lock() {
                *reason = format!("error ratio {:.0}% over the last {}", r * 100.0, humantime::format_duration(cfg.interval));
            }
            let lost = (f64::from(share) * cfg.shift_delta).round() as u32;
            share.saturating_sub(lost.max(1)).max(MIN_SHARE)
        } else if share < RAMP_FULL && r <= cfg.shift_threshold {
            share.saturating_add((f64::from(RAMP_FULL) * cfg.shift_delta).round() as u32).min(RAMP_FULL)
        } else {
            share
        };
        if next != share {
            t.share.store(next, Relaxed);
            if next < share {
                warn!(service = %pool.config.name, server = %e.state.key.address, "traffic shifted away: takes {}% of its share (error ratio {:.0}%)", next / 10, r * 100.0);
            } else if next == RAMP_FULL {
                info!(service = %pool.config.name, server = %e.state.key.address, "traffic shifted back: takes all of its share again");
            }
            e.state.outlier_changed();
        }
    }
}

/// Runs every pool's interval for as long as `live` does, on one task.
pub async fn run(live: std::sync::Weak<super::Live>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(live) = live.upgrade() else { return };
        let generation = live.current();
        let now = clock_ms();
        for (_, pool) in generation.pools() {
            let Some(cfg) = &pool.config.outlier else { continue };
            let last = &pool.state.outlier_swept;
            let at = last.load(Relaxed);
            if at == 0 {
                last.store(now, Relaxed);
            } else if now.saturating_sub(at) >= cfg.interval.as_millis() as u64 {
                last.store(now, Relaxed);
                sweep(pool);
            }
        }
    }
}
