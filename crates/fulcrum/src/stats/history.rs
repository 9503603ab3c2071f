//! Traffic history for the dashboard's graphs: per server, connections and bytes in each 10 s
//! interval, in a fixed ring of the last 24 hours. Memory is bounded (8,640 points of 24 bytes per
//! server, about 200 KiB) and nothing touches the disk; a restart starts a new history.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Serialize;

use crate::clock::unix_ms;
use crate::live::{Generation, ServerKey};

pub const INTERVAL: Duration = Duration::from_secs(10);
/// 24 hours of 10 s points.
pub const POINTS: usize = 24 * 3600 / 10;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Point {
    /// Unix time in seconds at the end of the interval.
    pub t: u64,
    pub connections: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

#[derive(Default)]
struct Series {
    /// Counter totals at the last sample, to take differences from.
    last: (u64, u64, u64),
    points: VecDeque<Point>,
}

#[derive(Default)]
pub struct History {
    series: Mutex<HashMap<ServerKey, Series>>,
}

#[derive(Debug, Serialize)]
pub struct ServerHistory {
    pub service: String,
    pub server: String,
    pub points: Vec<Point>,
}

impl History {
    /// Records one interval for every server of `generation`; forgets servers that left.
    pub fn sample(&self, generation: &Generation) {
        let Ok(mut series) = self.series.lock() else { return };
        let t = unix_ms() / 1000;
        let mut live = Vec::new();
        for (_, pool) in generation.pools() {
            for entry in pool.servers() {
                let c = &entry.state.counters;
                let now = (c.total.load(Relaxed), c.bytes_in.load(Relaxed), c.bytes_out.load(Relaxed));
                let key = entry.state.key.clone();
                live.push(key.clone());
                // A new series starts from zero: its first point holds what the server did since it appeared.
                let s = series.entry(key).or_default();
                s.points.push_back(Point { t, connections: now.0.saturating_sub(s.last.0), bytes_in: now.1.saturating_sub(s.last.1), bytes_out: now.2.saturating_sub(s.last.2) });
                s.last = now;
                while s.points.len() > POINTS {
                    s.points.pop_front();
                }
            }
        }
        series.retain(|k, _| live.contains(k));
    }

    /// Every server's points, or one service's, newest last; `since` keeps points after a time.
    pub fn get(&self, service: Option<&str>, since: u64) -> Vec<ServerHistory> {
        let Ok(series) = self.series.lock() else { return Vec::new() };
        let mut out: Vec<ServerHistory> = series
            .iter()
            .filter(|(k, _)| service.is_none_or(|s| s == k.service))
            .map(|(k, s)| ServerHistory { service: k.service.clone(), server: k.address.clone(), points: s.points.iter().filter(|p| p.t > since).copied().collect() })
            .collect();
        out.sort_by(|a, b| (&a.service, &a.server).cmp(&(&b.service, &b.server)));
        out
    }
}
