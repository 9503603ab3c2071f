//! A table's shards ([`Shards`]), each behind its own mutex held for a few nanoseconds, so the
//! threads that move traffic never wait on one lock shared by all; and one shard ([`Shard`]): its
//! keys' slots in a `Vec`, found through a hash index, at most `capacity` of them. A new key in a full shard takes the place of one of a few sampled slots,
//! the one its table ranks first (Redis' approximated LRU: the least recently seen, a key with
//! nothing counted before any other), so a flood of new keys only evicts and never grows it.
//! Both rate tables, the local one (`gcra`) and the fleet's (`shared`), keep their keys so.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

use super::Key;

/// Shards of a table: enough that the traffic threads of a large machine rarely meet.
pub const SHARDS: usize = 64;

/// Slots looked at to pick the one a full shard gives a new key.
const SAMPLES: usize = 5;

/// What a shard holds per key.
pub trait Slot {
    fn key(&self) -> Key;
}

/// A table's [`SHARDS`] shards, each holding at most its share of the table's keys.
pub struct Shards<S> {
    shards: Box<[Mutex<Shard<S>>]>,
    per_shard: usize,
}

impl<S: Slot> Shards<S> {
    /// Shards for about `max_keys` keys.
    pub fn new(max_keys: usize) -> Self {
        Shards { shards: (0..SHARDS).map(|i| Mutex::new(Shard::new(i))).collect(), per_shard: max_keys.div_ceil(SHARDS).max(1) }
    }

    /// The most keys they hold.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// The locked shard `key` lives in; `None` if a thread panicked holding it (the caller fails
    /// open rather than refuse everyone).
    pub fn of(&self, key: Key) -> Option<MutexGuard<'_, Shard<S>>> {
        self.shards[key.shard(SHARDS)].lock().ok()
    }

    /// `then` on the slot of `key`, made by `fresh` when new (see [`Shard::place`]).
    pub fn with<R: Ord, T>(&self, key: Key, fresh: impl FnOnce() -> S, rank: impl Fn(&S) -> R, then: impl FnOnce(&mut S) -> T) -> Option<T> {
        let mut shard = self.of(key)?;
        Some(then(shard.place(key, self.per_shard, fresh, rank)))
    }

    /// Every shard's lock, in order (a poisoned one is passed over by its caller).
    pub fn iter(&self) -> impl Iterator<Item = &Mutex<Shard<S>>> {
        self.shards.iter()
    }

    /// Forgets `key`; `true` when it was there.
    pub fn remove(&self, key: Key) -> bool {
        self.of(key).is_some_and(|mut s| s.remove(key))
    }

    /// Forgets every slot `gone` says, shard by shard; how many went.
    pub fn sweep(&self, gone: impl Fn(&S) -> bool) -> usize {
        self.iter().filter_map(|s| s.lock().ok()).map(|mut s| s.sweep(&gone)).sum()
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.iter().map(|s| s.lock().map_or(0, |s| s.len())).sum()
    }
}

pub struct Shard<S> {
    index: HashMap<Key, usize, BuildHasherDefault<KeyHasher>>,
    slots: Vec<S>,
    /// A small generator for the eviction sample (xorshift: no shared state, no syscall).
    seed: u64,
}

impl<S: Slot> Shard<S> {
    /// The `n`th shard of a table (its generator's seed differs from the others').
    pub fn new(n: usize) -> Self {
        Shard { index: HashMap::default(), slots: Vec::new(), seed: 0x2545_f491_4f6c_dd1d ^ n as u64 }
    }

    /// The slot of `key`, made by `fresh` when it is new: in a full shard (`capacity` slots), in
    /// place of the sampled slot that `rank` puts first.
    pub fn place<R: Ord>(&mut self, key: Key, capacity: usize, fresh: impl FnOnce() -> S, rank: impl Fn(&S) -> R) -> &mut S {
        if let Some(&i) = self.index.get(&key) {
            return &mut self.slots[i];
        }
        let i = if self.slots.len() < capacity {
            if self.slots.len() == self.slots.capacity() {
                // Grown by doubling, but never past what the shard may hold.
                let next = (self.slots.capacity() * 2).max(4).min(capacity);
                self.slots.reserve_exact(next - self.slots.len());
            }
            self.slots.push(fresh());
            self.slots.len() - 1
        } else {
            let n = self.slots.len();
            let sample: [usize; SAMPLES] = std::array::from_fn(|_| self.next() as usize % n);
            let victim = sample.into_iter().min_by_key(|&i| rank(&self.slots[i])).unwrap_or(0);
            self.index.remove(&self.slots[victim].key());
            self.slots[victim] = fresh();
            victim
        };
        self.index.insert(key, i);
        &mut self.slots[i]
    }

    pub fn get(&self, key: Key) -> Option<&S> {
        self.index.get(&key).map(|&i| &self.slots[i])
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut S> {
        self.index.get(&key).map(|&i| &mut self.slots[i])
    }

    /// Forgets `key`; `true` when it was there.
    pub fn remove(&mut self, key: Key) -> bool {
        let Some(i) = self.index.remove(&key) else { return false };
        self.slots.swap_remove(i);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(moved.key(), i);
        }
        true
    }

    /// Forgets every slot `gone` says; how many went.
    pub fn sweep(&mut self, gone: impl Fn(&S) -> bool) -> usize {
        let before = self.slots.len();
        let mut i = 0;
        while i < self.slots.len() {
            if gone(&self.slots[i]) {
                let key = self.slots[i].key();
                self.remove(key);
            } else {
                i += 1;
            }
        }
        before - self.slots.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &S> {
        self.slots.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut S> {
        self.slots.iter_mut()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    fn next(&mut self) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed
    }
}

/// The index's hasher. A key is a hash already (xxh3 of a value) or an address whose low bits are
/// zero: MurmurHash3's 64-bit finalizer over its folded halves spreads it well enough, where
/// SipHash, the map's default, would be most of a lookup's CPU. (It must not be `Key::shard`'s
/// multiply: the keys of one shard share those bits, and would share buckets.)
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let mut h = self.0 ^ n;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        self.0 = h;
    }

    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64 ^ (n >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
