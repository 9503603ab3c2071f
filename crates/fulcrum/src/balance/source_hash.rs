//! `source-hash`: the client's IP (`key::client_ip`) mapped through a Maglev table of the usable
//! servers. The same client reaches the same server for as long as the pool is unchanged, two
//! Fulcrum processes with the same pool agree, and a server leaving moves about 1/n of clients.

use std::sync::RwLock;

use super::maglev::Maglev;
use super::{Balancer, Pick, Pool, key};

#[derive(Debug, Default)]
pub struct SourceHash {
    /// (pool epoch, table), rebuilt when a server's effective weight changes.
    table: RwLock<Option<(u64, Maglev)>>,
}

impl SourceHash {
    fn refresh(&self, pool: &dyn Pool) {
        let epoch = pool.epoch();
        if self.table.read().map(|t| t.as_ref().is_some_and(|(e, _)| *e == epoch)).unwrap_or(false) {
            return;
        }
        let servers: Vec<(&str, u32)> = (0..pool.len()).map(|i| (pool.key(i), pool.weight(i))).collect();
        let table = Maglev::build(&servers);
        if let Ok(mut t) = self.table.write() {
            *t = Some((epoch, table));
        }
    }
}

impl Balancer for SourceHash {
    fn pick(&self, pick: &Pick<'_>, pool: &dyn Pool) -> Option<usize> {
        self.refresh(pool);
        let guard = self.table.read().ok()?;
        let (_, table) = guard.as_ref()?;
        let hash = pick.hash.unwrap_or_else(|| key::client_ip(pick.client));
        table.lookup_usable(hash, |i| i < pool.len() && pool.weight(i) > 0 && !pick.avoids(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::testing::FakePool;
    use std::net::IpAddr;

    fn from(ip: &str, avoid: &'static [usize]) -> Pick<'static> {
        Pick { client: ip.parse::<IpAddr>().unwrap(), avoid, hash: None }
    }

    #[test]
    fn source_hash_keeps_a_client_on_one_server() {
        let pool = FakePool::with_weights(&[1, 1, 1, 1]);
        let sh = SourceHash::default();
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
        let pool = FakePool::with_weights(&[1, 1, 1, 1]);
        let (a, b) = (SourceHash::default(), SourceHash::default());
        for host in 0..=255u8 {
            let ip = format!("192.0.2.{host}");
            assert_eq!(a.pick(&from(&ip, &[]), &pool), b.pick(&from(&ip, &[])
                , &pool));
        }
    }

    #[test]
    fn avoided_server_is_never_picked_while_another_is_usable() {
        let pool = FakePool::with_weights(&[1, 1]);
        let sh = SourceHash::default();
        for host in 0..50u8 {
            let ip = format!("192.0.2.{host}");
            assert_eq!(sh.pick(&from(&ip, &[0]), &pool), Some(1));
        }
        assert_eq!(sh.pick(&from("192.0.2.1", &[0, 1]), &pool), None);
    }

    #[test]
    fn a_down_server_loses_its_clients_and_the_table_follows_the_epoch() {
        let mut pool = FakePool::with_weights(&[1, 1, 1]);
        let sh = SourceHash::default();
        pool.set_weight(1, 0);
        for host in 0..100u8 {
            assert_ne!(sh.pick(&from(&format!("198.51.100.{host}"), &[]), &pool), Some(1));
        }
    }
}
