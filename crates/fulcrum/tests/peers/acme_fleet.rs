//! ACME's fleet store (`fleet::acme::EtcdStore`) against a real etcd: the per-name order lock is
//! one instance's at a time, passes on at once when released and within its lease's TTL when its
//! holder dies; a challenge put through one instance is answered by another, and a certificate
//! saved by one wakes the others, each within a second.

use std::time::{Duration, Instant};

use fulcrum::fleet::acme::{EtcdStore, LOCK_TTL};
use fulcrum::tls::acme::store::{Challenge, Store, Stored};

use crate::support::etcd::Etcd;
use crate::support::*;

const PREFIX: &str = "/acme-test";

fn settings(etcd: &Etcd) -> fulcrum::config::Fleet {
    let text = format!("[fleet]\nendpoints = {}\nprefix = \"{PREFIX}\"\n", etcd.endpoints_toml());
    fulcrum::config::parse_with(&text, "test", fulcrum::config::Resolve::No).unwrap().fleet.unwrap()
}

/// Runs `f` on `rt` for at most `limit`: `None` when it did not end in time.
fn within<T>(rt: &tokio::runtime::Runtime, limit: Duration, f: impl std::future::Future<Output = T>) -> Option<T> {
    rt.block_on(async { tokio::time::timeout(limit, f).await.ok() })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn the_order_lock_is_one_instance_s_at_a_time_and_outlives_a_dead_holder_by_its_ttl_at_most() {
    let etcd = Etcd::start(1);
    let settings = settings(&etcd);
    let rt = runtime();
    let (a, b) = rt.block_on(async { (EtcdStore::start(&settings, "lb-a"), EtcdStore::start(&settings, "lb-b")) });

    // lb-a holds it: lb-b waits, and etcd names lb-a as the holder.
    let held = rt.block_on(a.lock("a.test")).unwrap();
    assert_eq!(etcd.ctl(&["get", &format!("{PREFIX}/acme/locks/a.test"), "--print-value-only"]).trim(), "lb-a");
    let waited = within(&rt, LOCK_TTL + Duration::from_secs(2), b.lock("a.test"));
    assert!(waited.is_none(), "lb-b took a lock lb-a holds (and renews)");
    // Another name is not held up by it.
    let other = within(&rt, Duration::from_secs(5), b.lock("b.test")).expect("another name's lock is free").unwrap();
    drop(other);

    // Released: lb-b takes it at once, long before the TTL would have run out.
    let taken = {
        let waiting = rt.spawn(async move {
            let lock = b.lock("a.test").await;
            (b, lock)
        });
        std::thread::sleep(Duration::from_millis(300));
        let released = Instant::now();
        drop(held);
        let (b, lock) = rt.block_on(waiting).unwrap();
        let after = released.elapsed();
        assert!(after < Duration::from_secs(2), "lb-b took the released lock {after:?} after its release");
        (b, lock.unwrap())
    };
    let (b, held_by_b) = taken;
    drop(held_by_b);

    // A holder that dies (its runtime gone, the lock never dropped, so never revoked): etcd
    // ends its lease within the TTL and lb-b takes the name over.
    let dying = runtime();
    let c = dying.block_on(async { EtcdStore::start(&settings, "lb-c") });
    let held_by_c = dying.block_on(c.lock("c.test")).unwrap();
    std::mem::forget(held_by_c);
    drop(dying);
    let died = Instant::now();
    let lock = within(&rt, LOCK_TTL * 3, b.lock("c.test")).expect("lb-b takes a dead holder's lock within its TTL").unwrap();
    let after = died.elapsed();
    eprintln!("lb-b took the lock of a dead holder {} ms after it died (TTL {} s)", after.as_millis(), LOCK_TTL.as_secs());
    assert!(after <= LOCK_TTL + Duration::from_secs(2), "{after:?}");
    assert_eq!(etcd.ctl(&["get", &format!("{PREFIX}/acme/locks/c.test"), "--print-value-only"]).trim(), "lb-b");
    drop(lock);
    drop(c);
    drop(a);
}

#[test]
fn a_challenge_put_through_one_instance_is_answered_by_another_and_a_saved_certificate_wakes_it() {
    let etcd = Etcd::start(1);
    let settings = settings(&etcd);
    let rt = runtime();
    let (a, b) = rt.block_on(async { (EtcdStore::start(&settings, "lb-a"), EtcdStore::start(&settings, "lb-b")) });

    let http = Challenge::Http01 { token: "tok_EN-1".into() };
    let alpn = Challenge::TlsAlpn01 { domain: "a.test".into() };
    let mut changes = b.changes();
    // Both follow etcd: a first challenge through lb-a reaches lb-b.
    let probe = Challenge::Http01 { token: "probe".into() };
    rt.block_on(a.put_challenge(&probe, b"probe")).unwrap();
    wait_until("lb-b follows etcd", Duration::from_secs(10), || b.challenge(&probe).is_some());
    // Its first read ticked its changes (a certificate may have landed before it followed).
    changes.borrow_and_update();

    let put = Instant::now();
    rt.block_on(a.put_challenge(&http, b"tok_EN-1.thumbprint")).unwrap();
    rt.block_on(a.put_challenge(&alpn, b"chain and key")).unwrap();
    assert_eq!(a.challenge(&http).as_deref(), Some(&b"tok_EN-1.thumbprint"[..]), "the instance that put it answers at once");
    wait_until("lb-b answers both challenges", Duration::from_secs(1), || b.challenge(&http).is_some() && b.challenge(&alpn).is_some());
    eprintln!("lb-b answered lb-a's challenges {} ms after they were put", put.elapsed().as_millis());
    assert_eq!(b.challenge(&alpn).as_deref(), Some(&b"chain and key"[..]));
    rt.block_on(a.remove_challenge(&http)).unwrap();
    wait_until("lb-b forgets the removed challenge", Duration::from_secs(1), || b.challenge(&http).is_none());
    assert!(b.challenge(&alpn).is_some());

    // A certificate saved by lb-a ticks lb-b's changes within a second, and reads back whole.
    assert!(!changes.has_changed().unwrap(), "nothing but a certificate ticks");
    let cert = Stored { chain_pem: "-----BEGIN CERTIFICATE-----\n...\n".into(), key_pem: "-----BEGIN PRIVATE KEY-----\n...\n".into() };
    let key = fulcrum::tls::acme::store::certificate_key(&["B.test".into(), "a.test".into()]);
    assert_eq!(key, "a.test,b.test");
    let saved = Instant::now();
    rt.block_on(a.save_certificate(&key, &cert)).unwrap();
    within(&rt, Duration::from_secs(1), changes.changed()).expect("lb-b's changes tick within a second").unwrap();
    eprintln!("lb-b heard of lb-a's certificate {} ms after it was saved", saved.elapsed().as_millis());
    assert_eq!(rt.block_on(b.certificate(&key)).unwrap(), Some(cert));
    assert_eq!(rt.block_on(b.certificate("none.test")).unwrap(), None);

    // One account for the fleet: saved by one, read by the other.
    let directory = "https://127.0.0.1:14000/dir";
    assert_eq!(rt.block_on(b.account(directory)).unwrap(), None);
    rt.block_on(a.save_account(directory, br#"{"id":"x"}"#)).unwrap();
    assert_eq!(rt.block_on(b.account(directory)).unwrap().as_deref(), Some(&br#"{"id":"x"}"#[..]));

    // A store that starts later reads what is pending.
    let c = rt.block_on(async { EtcdStore::start(&settings, "lb-c") });
    wait_until("lb-c reads the pending challenge", Duration::from_secs(5), || c.challenge(&alpn).is_some());
    assert!(c.challenge(&http).is_none());
}
