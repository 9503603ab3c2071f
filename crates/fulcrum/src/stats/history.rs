//! Traffic history for the dashboard's graphs: per server, connections and bytes in each 10 s
//! interval, in a ring of the last 24 hours. Nothing touches the disk; a restart starts a new
//! history. Memory is bounded and taken as the history fills, an hour of points at a time: a
//! point is held in 24 bytes, so a server's ring holds 8.4 KiB after an hour and 202.5 KiB once
//! it holds the whole 24 hours (8,640 points), never more (the ring's capacity grows exactly to
//! that, not to the next power of two).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Serialize;

use crate::clock::unix_ms;
use crate::live::{Generation, ServerKey};

pub const INTERVAL: Duration = Duration::from_secs(10);
/// 24 hours of 10 s points.
pub const POINTS: usize = 24 * 3600 / 10;
/// The ring grows by an hour of points at a time: 24 moves of its points over a day, and at most
/// an hour's worth (8.4 KiB) held and not yet used.
const GROWTH: usize = 3600 / 10;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Point {
    /// Unix time in seconds at the end of the interval.
    pub t: u64,
    pub connections: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A point as the ring holds it: 24 bytes, not [`Point`]'s 32. Its time fits 32 bits until
/// 2106, and a server takes fewer than 2^32 connections in 10 s (more would be counted as that).
#[derive(Debug, Clone, Copy)]
struct Held {
    t: u32,
    connections: u32,
    bytes_in: u64,
    bytes_out: u64,
}

impl Held {
    fn point(self) -> Point {
        Point { t: u64::from(self.t), connections: u64::from(self.connections), bytes_in: self.bytes_in, bytes_out: self.bytes_out }
    }
}

#[derive(Default)]
struct Series {
    /// Counter totals at the last sample, to take differences from.
    last: (u64, u64, u64),
    points: VecDeque<Held>,
}

impl Series {
    /// Adds the newest point, dropping the oldest once 24 hours are held; the ring grows by
    /// [`GROWTH`] points when full, up to [`POINTS`] exactly.
    fn push(&mut self, point: Held) {
        if self.points.len() >= POINTS {
            self.points.pop_front();
        }
        if self.points.len() == self.points.capacity() {
            self.points.reserve_exact(GROWTH.min(POINTS - self.points.len()).max(1));
        }
        self.points.push_back(point);
    }
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
        let t = u32::try_from(unix_ms() / 1000).unwrap_or(u32::MAX);
        let mut live = HashSet::new();
        for (_, pool) in generation.pools() {
            for entry in pool.servers() {
                let c = &entry.state.counters;
                let now = (c.total.load(Relaxed), c.bytes_in.load(Relaxed), c.bytes_out.load(Relaxed));
                let key = &entry.state.key;
                live.insert(key);
                // A new series starts from zero: its first point holds what the server did since it appeared.
                let s = match series.get_mut(key) {
                    Some(s) => s,
                    None => series.entry(key.clone()).or_default(),
                };
                let connections = u32::try_from(now.0.saturating_sub(s.last.0)).unwrap_or(u32::MAX);
                s.push(Held { t, connections, bytes_in: now.1.saturating_sub(s.last.1), bytes_out: now.2.saturating_sub(s.last.2) });
                s.last = now;
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
            .map(|(k, s)| ServerHistory { service: k.service.clone(), server: k.address.clone(), points: s.points.iter().map(|p| p.point()).filter(|p| p.t > since).collect() })
            .collect();
        out.sort_by(|a, b| (&a.service, &a.server).cmp(&(&b.service, &b.server)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(t: u32) -> Held {
        Held { t, connections: 1, bytes_in: 2, bytes_out: 3 }
    }

    #[test]
    fn a_series_takes_memory_as_it_fills_and_never_more_than_24_hours() {
        let mut s = Series::default();
        s.push(held(0));
        assert_eq!(s.points.capacity(), GROWTH, "a new series holds an hour of points, not a day");
        for t in 1..(POINTS as u32 + 500) {
            s.push(held(t));
            assert!(s.points.capacity() <= POINTS, "capacity {} past {POINTS} at point {t}", s.points.capacity());
        }
        assert_eq!(s.points.len(), POINTS);
        assert_eq!(s.points.capacity(), POINTS, "the full ring is exactly 24 hours");
        assert_eq!(s.points.front().map(|p| p.t), Some(500), "the oldest points were dropped");
        assert_eq!(std::mem::size_of::<Held>(), 24);
    }

    #[test]
    fn a_held_point_reads_back_as_it_was_recorded() {
        let p = Held { t: 1_800_000_000, connections: 7, bytes_in: 1 << 40, bytes_out: 5 }.point();
        assert_eq!((p.t, p.connections, p.bytes_in, p.bytes_out), (1_800_000_000, 7, 1 << 40, 5));
    }
}
