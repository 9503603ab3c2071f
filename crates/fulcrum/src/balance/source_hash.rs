//! `source-hash` (and `uri-hash`, `header-hash`, which hash another key): the key mapped through a
//! Maglev table (`maglev.rs`) of the configured servers with their configured weights. The same
//! client reaches the same server for as long as the configured set is unchanged, and two Fulcrum
//! processes with the same servers agree.
//!
//! A server that slow start ramps takes a growing share of its keys ([`key::admitted`]), the
//! rest staying where they were while it was away.
//!
//! A server that goes down, is disabled or drains is skipped at lookup: its keys go to the next
//! server of their slot walk, and the table is not rebuilt, so no other server's keys move on a
//! health flip and the server gets exactly its keys back when it returns. Only a change of the
//! configured set or of a configured weight rebuilds the table, in `update`, off the data path's
//! pick; the table is published behind an `ArcSwap` so a pick only loads it.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::maglev::Maglev;
use super::{Balancer, Pick, ServerView, key};

/// `source-hash` in the registry (`algorithm.rs`).
pub const SOURCE_HASH: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "source-hash",
        title: "Source IP hash",
        modes: super::entry::PROXIED,
        hashes: true,
        description: "the client's address hashed onto a Maglev table: a client keeps its server, and a server leaving moves only its own clients",
    },
    build: |_| Box::new(SourceHash::default()),
};

/// `uri-hash`: the HTTP data path puts the path's hash in [`super::Pick::hash`].
pub const URI_HASH: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "uri-hash",
        title: "URI hash (HTTP)",
        modes: super::entry::HTTP,
        hashes: true,
        description: "the request's path (and query, with hash_query) hashed onto a Maglev table: a path keeps its server, for caches",
    },
    build: |_| Box::new(SourceHash::default()),
};

/// `header-hash`: the HTTP data path puts the header value's hash in [`super::Pick::hash`].
pub const HEADER_HASH: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "header-hash",
        title: "Header hash (HTTP)",
        modes: super::entry::HTTP,
        hashes: true,
        description: "the value of the hash_header request header hashed onto a Maglev table; the client's address without it",
    },
    build: |_| Box::new(SourceHash::default()),
};

/// A Maglev table and the configured (key, weight) list it was built over.
#[derive(Debug, Default)]
struct Table {
    servers: Vec<(String, u32)>,
    maglev: Maglev,
}

impl Table {
    fn built_over(&self, view: &dyn ServerView) -> bool {
        self.servers.len() == view.len() && self.servers.iter().enumerate().all(|(i, (k, w))| *w == view.weight(i) && k == view.key(i))
    }
}

#[derive(Debug, Default)]
pub struct SourceHash {
    table: ArcSwap<Table>,
    /// Serialises rebuilds, so the last to store read the configuration left by every change.
    rebuild: Mutex<()>,
}

impl Balancer for SourceHash {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        // With no server usable the slot walk would visit the whole table on every pick (as
        // while every primary is down and backups take the traffic); one pass over the servers
        // answers first.
        if !(0..view.len()).any(|i| pick.usable(view, i)) {
            return None;
        }
        let hash = pick.hash.unwrap_or_else(|| key::client_ip(pick.client));
        // A server slow start ramps takes only its share of the keys whose slot it owns: the
        // others walk on to the server they had while it was away.
        let taken = |i: usize| pick.usable(view, i) && key::admitted(hash, view.ramp(i));
        let table = self.table.load();
        // Every usable server ramping and none admitting the key: the ramp yields.
        table.maglev.lookup_usable(hash, taken).or_else(|| table.maglev.lookup_usable(hash, |i| pick.usable(view, i)))
    }

    /// A hash's pick moves nothing: the same as `pick`.
    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.pick(pick, view)
    }

    fn update(&self, view: &dyn ServerView) {
        let _one_at_a_time = self.rebuild.lock().unwrap_or_else(|p| p.into_inner());
        if self.table.load().built_over(view) {
            return;
        }
        let servers: Vec<(String, u32)> = (0..view.len()).map(|i| (view.key(i).to_string(), view.weight(i))).collect();
        let refs: Vec<(&str, u32)> = servers.iter().map(|(k, w)| (k.as_str(), *w)).collect();
        let maglev = Maglev::build(&refs);
        self.table.store(Arc::new(Table { servers, maglev }));
    }

    fn slot(&self, hash: u64) -> Option<(usize, usize)> {
        self.table.load().maglev.slot(hash)
    }

    fn table_digest(&self) -> Option<u64> {
        let table = self.table.load();
        Some(table.maglev.digest(&table.servers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::testing::FakePool;
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn from(ip: &str, avoid: &'static [usize]) -> Pick<'static> {
        Pick { client: ip.parse::<IpAddr>().unwrap(), avoid, hash: None }
    }

    #[test]
    fn source_hash_keeps_a_client_on_one_server() {
        let mut pool = FakePool::with_weights(&[1, 1, 1, 1]);
        let sh = pool.attach(SourceHash::default());
        for host in 11..=20 {
            let ip = format!("127.0.0.{host}");
            let first = sh.pick(&from(&ip, &[]), &pool);
            for _ in 0..20 {
                assert_eq!(sh.pick(&from(&ip, &[]), &pool), first);
            }
        }
    }

    #[test]
    fn two_instances_pick_the_same_server_for_the_same_client() {
        let mut pool = FakePool::with_weights(&[1, 1, 1, 1]);
        let (a, b) = (pool.attach(SourceHash::default()), pool.attach(SourceHash::default()));
        for host in 0..=255u8 {
            let ip = format!("192.0.2.{host}");
            assert_eq!(a.pick(&from(&ip, &[]), &pool), b.pick(&from(&ip, &[]), &pool));
        }
    }

    #[test]
    fn avoided_server_is_never_picked_while_another_is_usable() {
        let mut pool = FakePool::with_weights(&[1, 1]);
        let sh = pool.attach(SourceHash::default());
        for host in 0..50u8 {
            let ip = format!("192.0.2.{host}");
            assert_eq!(sh.pick(&from(&ip, &[0]), &pool), Some(1));
        }
        assert_eq!(sh.pick(&from("192.0.2.1", &[0, 1]), &pool), None);
    }

    #[test]
    fn a_down_server_loses_its_clients_to_the_next_server_of_their_walk() {
        let mut pool = FakePool::with_weights(&[1, 1, 1]);
        let sh = pool.attach(SourceHash::default());
        pool.set_up(1, false);
        for host in 0..100u8 {
            assert_ne!(sh.pick(&from(&format!("198.51.100.{host}"), &[]), &pool), Some(1));
        }
    }

    #[test]
    fn maglev_table_is_rebuilt_only_when_the_configured_set_changes() {
        let mut pool = FakePool::with_weights(&[1, 1, 1]);
        let sh = pool.attach(SourceHash::default());
        let built = sh.table.load_full();
        pool.set_up(2, false);
        pool.set_up(2, true);
        assert!(Arc::ptr_eq(&built, &sh.table.load_full()), "a health flip rebuilds nothing");
        pool.set_weight(2, 3);
        assert!(!Arc::ptr_eq(&built, &sh.table.load_full()), "a configured weight change rebuilds");
        assert_eq!(sh.table.load().servers[2].1, 3);
    }

    #[test]
    fn no_server_usable_returns_none_without_walking_the_table() {
        let mut pool = FakePool::with_weights(&[1, 1]);
        let sh = pool.attach(SourceHash::default());
        pool.set_up(0, false);
        pool.set_up(1, false);
        assert_eq!(sh.pick(&from("192.0.2.1", &[]), &pool), None);
        pool.set_up(1, true);
        assert_eq!(sh.pick(&from("192.0.2.1", &[]), &pool), Some(1));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn maglev_health_flip_moves_no_other_servers_keys(n in 2usize..=10, down_pick in any::<usize>(), hashes in proptest::collection::vec(any::<u64>(), 2000)) {
            let mut pool = FakePool::with_weights(&vec![1; n]);
            let sh = pool.attach(SourceHash::default());
            let down = down_pick % n;
            let client = "192.0.2.1".parse::<IpAddr>().unwrap();
            let picks = |pool: &FakePool| -> Vec<Option<usize>> {
                hashes.iter().map(|&h| sh.pick(&Pick { client, avoid: &[], hash: Some(h) }, pool)).collect()
            };
            let before = picks(&pool);
            pool.set_up(down, false);
            let during = picks(&pool);
            for (was, now) in before.iter().zip(&during) {
                prop_assert!(now.is_some() && *now != Some(down));
                if *was != Some(down) {
                    prop_assert_eq!(now, was, "a key of another server moved");
                }
            }
            pool.set_up(down, true);
            prop_assert_eq!(picks(&pool), before, "the returning server gets exactly its keys back");
        }
    }
}
