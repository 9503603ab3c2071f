//! Connections open at once per key (`count = "connections"`).
//!
//! A key is in the table only while it has a connection open: the guard that its connection
//! holds takes it out when the last one closes, so the table never holds more keys than there
//! are connections (the process's `maxconn` bounds it), and `max_keys` caps it below that. A new
//! key in a full table is let through uncounted rather than refused: the cap protects Fulcrum's
//! memory, not the servers, and a table full of open connections means `maxconn` is the limit
//! that holds them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::shard::SHARDS;
use super::{Key, Keyed, Usage};

struct Entry {
    open: u64,
    label: Option<Box<str>>,
}

/// Open connections per key, at most `max` each.
pub struct Concurrent {
    shards: Box<[Mutex<HashMap<Key, Entry>>]>,
    per_shard: usize,
    max: u64,
    /// Connections let through uncounted because the table was full.
    pub uncounted: AtomicU64,
}

/// One counted connection: its key's count goes down when it is dropped.
pub struct Held {
    table: Arc<Concurrent>,
    key: Key,
}

impl Concurrent {
    pub fn new(max: u64, max_keys: usize) -> Concurrent {
        Concurrent { shards: (0..SHARDS).map(|_| Mutex::default()).collect(), per_shard: max_keys.div_ceil(SHARDS).max(1), max, uncounted: AtomicU64::new(0) }
    }

    /// Counts a connection of `key`, or `None` when the key has `max` open already. `Ok(None)`:
    /// let through uncounted (a full table, or a poisoned lock).
    pub fn open(self: &Arc<Self>, key: Keyed<'_>) -> Result<Option<Held>, u64> {
        let Ok(mut shard) = self.shards[key.key.shard(SHARDS)].lock() else { return Ok(None) };
        let full = shard.len() >= self.per_shard;
        let entry = match shard.get_mut(&key.key) {
            Some(e) => e,
            None if full => {
                self.uncounted.fetch_add(1, Relaxed);
                return Ok(None);
            }
            None => shard.entry(key.key).or_insert(Entry { open: 0, label: super::label(key.text) }),
        };
        if entry.open >= self.max {
            return Err(entry.open);
        }
        entry.open += 1;
        Ok(Some(Held { table: self.clone(), key: key.key }))
    }

    /// The keys with the most connections open, the most first.
    pub fn top(&self, n: usize) -> Vec<Usage> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            let Ok(shard) = shard.lock() else { continue };
            all.extend(shard.iter().map(|(k, e)| Usage { key: *k, label: e.label.clone(), used: e.open as f64 / self.max.max(1) as f64, retry_after: None }));
            if all.len() > 4 * n {
                all = super::highest(all, n);
            }
        }
        super::highest(all, n)
    }

    /// Open connections of `key`.
    pub fn open_of(&self, key: Key) -> u64 {
        self.shards[key.shard(SHARDS)].lock().ok().and_then(|s| s.get(&key).map(|e| e.open)).unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |s| s.len())).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Ok(mut shard) = self.table.shards[self.key.shard(SHARDS)].lock() else { return };
        if let Some(e) = shard.get_mut(&self.key) {
            e.open = e.open.saturating_sub(1);
            if e.open == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_max_and_leaves_with_its_last_connection() {
        let t = Arc::new(Concurrent::new(2, 1000));
        let a = Keyed { key: Key::network("127.0.0.2".parse().unwrap(), 32, 64), text: None };
        let first = t.open(a).unwrap().unwrap();
        let second = t.open(a).unwrap().unwrap();
        assert_eq!(t.open(a).err(), Some(2));
        let b = Keyed { key: Key::network("127.0.0.3".parse().unwrap(), 32, 64), text: None };
        let other = t.open(b).unwrap();
        assert!(other.is_some(), "another key is not touched");
        assert_eq!(t.top(1)[0].key, a.key);
        drop(first);
        assert_eq!(t.open_of(a.key), 1);
        drop(second);
        drop(other);
        assert!(t.is_empty(), "no key stays without a connection");
    }
}
