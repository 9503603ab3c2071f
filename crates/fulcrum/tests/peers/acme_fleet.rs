//! ACME in a fleet. The store (`fleet::acme::EtcdStore`) against a real etcd: the per-name order
//! lock is one instance's at a time, passes on at once when released and within its lease's TTL
//! when its holder dies; a challenge put through one instance is answered by another, and a
//! certificate saved by one wakes the others, each within a second. Then three Fulcrum
//! instances on etcd and Pebble: the fleet orders once (counted in Pebble's log) and all three
//! serve the same certificate, the validator's requests answered by whichever instance they
//! reach, by http-01 and by tls-alpn-01; and killing the instance that orders, mid-order, lets
//! another finish.

use std::process::Command;
use std::time::{Duration, Instant};

use fulcrum::fleet::acme::{EtcdStore, LOCK_TTL};
use fulcrum::tls::acme::store::{Challenge, Store, Stored};

use crate::support::etcd::Etcd;
use crate::support::pebble::{Options, Pebble};
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

/// Three instances of a fleet over one etcd, each with `web` (TLS by ACME, http-01) on its own
/// port and `plain` (HTTP, answering http-01) on `plain[i]`; Pebble's validator reaches them
/// through `front`, a Fulcrum in TCP mode that sends each connection to the next instance (a
/// failed connect to the next one after it), as a virtual IP or a cloud load balancer would.
struct AcmeFleet {
    etcd: Etcd,
    pebble: Pebble,
    lbs: Vec<Option<Fulcrum>>,
    _front: Fulcrum,
    _backend: Backend,
}

const FLEET: &str = "/acme-fleet-test";

impl AcmeFleet {
    /// The fleet ordering `names` by `challenge` (`http-01` or `tls-alpn-01`), the validator
    /// reaching the instances' plain-HTTP or TLS listeners through the front.
    fn start(names: &[&str], pebble_env: &[(&str, &str)], challenge: &str) -> AcmeFleet {
        let http = challenge == "http-01";
        let etcd = Etcd::start(1);
        let front = free_port();
        let env = pebble_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let pebble = Pebble::start(Options { http_port: front, tls_port: front, env, ..Options::default() });
        let backend = Backend::start("fleet-acme");
        let (web, plain): (Vec<u16>, Vec<u16>) = (0..3).map(|_| (free_port(), free_port())).unzip();
        let names = names.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ");
        let acme =
            format!("[service.tls.acme]\ndirectory = \"{}\"\ndirectory_ca = \"{}\"\nnames = [{names}]\nchallenge = \"{challenge}\"\n", pebble.directory, pebble.wfe_ca.display());
        let services = |acme: &str| {
            format!(
                "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:443\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{b}\"\n{acme}\n\
                 [[service]]\nname = \"plain\"\nlisten = \"127.0.0.1:80\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{b}\"\n",
                b = backend.addr
            )
        };
        let import = |text: String| {
            let file = scratch("acme-fleet-import").join("services.toml");
            std::fs::write(&file, text).unwrap();
            let out =
                Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["fleet", "import"]).arg(&file).args(["--endpoints", &etcd.endpoints(), "--prefix", FLEET]).output().unwrap();
            assert!(out.status.success(), "fleet import: {}", String::from_utf8_lossy(&out.stderr));
        };
        // With http-01, the services without ACME first, so that every instance listens before
        // any orders. tls-alpn-01 is answered on the TLS listener, so the instances start with
        // ACME (one that does not listen yet is a failed connect, which the front passes on).
        import(services(if http { "" } else { &acme }));

        // No health check: an instance that does not listen (yet, or any more) is a failed connect,
        // which the front sends on to the next one.
        let mut front_config = "[[service]]\nname = \"front\"\nlisten = \"{LISTEN}\"\nmode = \"tcp\"\nalgorithm = \"round-robin\"\n[service.health]\nkind = \"none\"\n".to_string();
        for p in if http { &plain } else { &web } {
            front_config.push_str(&format!("[[service.server]]\naddress = \"127.0.0.1:{p}\"\n"));
        }
        let front = Fulcrum::start_at(format!("127.0.0.1:{front}").parse().unwrap(), &front_config);
        let lbs = (0..3)
            .map(|i| {
                Some(Fulcrum::start_at(
                    format!("127.0.0.1:{}", web[i]).parse().unwrap(),
                    &format!(
                        "[fleet]\nendpoints = {}\nprefix = \"{FLEET}\"\nname = \"lb-{}\"\nlease = \"3s\"\n\n[fleet.override.web]\nlisten = \"{{LISTEN}}\"\n\n[fleet.override.plain]\nlisten = \"127.0.0.1:{}\"\n",
                        etcd.endpoints_toml(),
                        i + 1,
                        plain[i]
                    ),
                ))
            })
            .collect();
        if http {
            // A fleet that does not use ACME leaves the challenge path to the routes: the server answers.
            let challenge = |port: u16| http_get(format!("127.0.0.1:{port}").parse().unwrap(), "/.well-known/acme-challenge/none");
            assert_eq!(challenge(plain[0]), (404, "not found".to_string()));
            // Then ACME: every instance runs it from the watch at once.
            import(services(&acme));
            // From then on every instance answers the fleet's challenges, whether or not it runs
            // the config with the certificate yet.
            wait_until("every instance answers challenges", Duration::from_secs(5), || plain.iter().all(|p| challenge(*p).1.contains("no ACME challenge pending")));
        }
        AcmeFleet { etcd, pebble, lbs, _front: front, _backend: backend }
    }

    fn live(&self) -> impl Iterator<Item = &Fulcrum> {
        self.lbs.iter().flatten()
    }

    /// Lines of Pebble's log that contain `text`.
    fn pebble_count(&self, text: &str) -> usize {
        self.pebble.log().lines().filter(|l| l.contains(text)).count()
    }

    /// `fulcrum certs --fleet` against the test's etcd.
    fn certs(&self) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["certs", "--fleet", "--endpoints", &self.etcd.endpoints(), "--prefix", FLEET]).output().unwrap();
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

/// Whether `lb` serves Pebble's certificate (not the self-signed placeholder) for `web`.
fn issued(lb: &Fulcrum) -> bool {
    let stats = lb.stats();
    let web = stats["services"].as_array().and_then(|s| s.iter().find(|s| s["name"] == "web").cloned()).unwrap_or_default();
    let c = &web["tls"]["certificates"][0];
    c["source"] == "acme" && c["issuer"].as_str().is_some_and(|i| i.contains("Pebble")) && c["note"].is_null()
}

/// The SHA-256 fingerprint of the leaf `lb` serves for `name`, as openssl reads it off a handshake.
fn served_fingerprint(lb: &Fulcrum, name: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("openssl s_client -connect {} -servername {name} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256", lb.listen))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(text.contains("Fingerprint="), "no certificate read from {}: {text}", lb.listen);
    text
}

/// curl to `name` at `lb`, verifying the chain against `root`: its exit code.
fn curl_verified(lb: &Fulcrum, name: &str, root: &std::path::Path) -> i32 {
    let port = lb.listen.port();
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "5", "--cacert", root.to_str().unwrap(), "--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/"))
        .output()
        .unwrap();
    out.status.code().unwrap_or(-1)
}

#[test]
fn a_fleet_of_three_orders_once_and_all_three_serve_the_same_certificate() {
    let names = ["a.acme.test", "b.acme.test", "c.acme.test"];
    let fleet = AcmeFleet::start(&names, &[], "http-01");
    let lbs: Vec<&Fulcrum> = fleet.live().collect();
    wait_until("an instance serves the issued certificate", Duration::from_secs(60), || lbs.iter().any(|lb| issued(lb)));
    let first = Instant::now();
    wait_until("all three serve it", Duration::from_secs(2), || lbs.iter().all(|lb| issued(lb)));
    eprintln!("all three instances served the certificate {} ms after the first was seen serving it", first.elapsed().as_millis());

    // One order and one certificate at the CA, for the three instances.
    assert_eq!(fleet.pebble_count("Added order"), 1, "{}", fleet.pebble.log());
    assert_eq!(fleet.pebble_count("Issued certificate serial"), 1, "{}", fleet.pebble.log());
    // Every instance serves the same leaf, which verifies against Pebble's root.
    let root = fleet.pebble.root_pem();
    let prints: Vec<String> = lbs.iter().map(|lb| served_fingerprint(lb, "b.acme.test")).collect();
    assert!(prints.iter().all(|p| p == &prints[0]), "{prints:?}");
    for lb in &lbs {
        assert_eq!(curl_verified(lb, "c.acme.test", &root), 0, "{}", lb.log());
    }
    // The validator's requests went to the three instances in turn, and each answered some
    // (those that did not order, from the challenges they follow in etcd), as their access
    // logs say.
    for lb in &lbs {
        let log = lb.log();
        assert!(log.lines().any(|l| l.contains("GET /.well-known/acme-challenge/") && l.contains("\" 200 ")), "{log}");
    }
    // fulcrum certs --fleet: one certificate in etcd, three instances serving it, nothing differs.
    let (ok, out) = fleet.certs();
    eprintln!("fulcrum certs --fleet:\n{out}");
    assert!(ok, "{out}");
    assert!(out.contains("1 ACME certificate in etcd") && out.contains("a.acme.test,b.acme.test,c.acme.test: issuer") && out.contains("3 instances registered"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("lb-") && l.contains(" acme ")).count(), 3, "{out}");
}

#[test]
fn killing_the_ordering_instance_mid_order_lets_another_finish_it() {
    // The validator waits up to 10 s before each of five validations, so the order is still
    // open when its instance is killed.
    let names = ["a.acme.test", "b.acme.test", "c.acme.test", "d.acme.test", "e.acme.test"];
    let mut fleet = AcmeFleet::start(&names, &[("PEBBLE_VA_NOSLEEP", "0"), ("PEBBLE_VA_SLEEPTIME", "10")], "http-01");
    wait_until("an order at the CA", Duration::from_secs(30), || fleet.pebble_count("Added order") >= 1);
    let key = fulcrum::tls::acme::store::certificate_key(&names.map(String::from));
    let holder = fleet.etcd.ctl(&["get", &format!("{FLEET}/acme/locks/{key}"), "--print-value-only"]).trim().to_string();
    let index: usize = holder.strip_prefix("lb-").and_then(|n| n.parse::<usize>().ok()).unwrap_or_else(|| panic!("the lock's holder: {holder:?}")) - 1;
    assert_eq!(fleet.pebble_count("Issued certificate serial"), 0, "the order was not done yet: {}", fleet.pebble.log());
    // fulcrum certs --fleet names the instance ordering, and every instance serving the
    // self-signed placeholder meanwhile, with its note.
    let (_, out) = fleet.certs();
    assert!(out.contains(&format!("{key}: none issued yet; {holder} orders it now")), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("  note: self-signed")).count(), 3, "{out}");
    let killed = Instant::now();
    if let Some(lb) = &fleet.lbs[index] {
        lb.signal(9);
    }
    fleet.lbs[index] = None;

    // Another instance takes the lock once the dead one's lease runs out, orders, and both
    // live instances serve the one certificate issued.
    let lbs: Vec<&Fulcrum> = fleet.live().collect();
    wait_until("the live instances serve a certificate", Duration::from_secs(120), || lbs.iter().all(|lb| issued(lb)));
    eprintln!("{holder} killed mid-order; the other two served a certificate {} s later", killed.elapsed().as_secs());
    assert_eq!(fleet.pebble_count("Issued certificate serial"), 1, "{}", fleet.pebble.log());
    assert!(fleet.pebble_count("Added order") >= 2, "{}", fleet.pebble.log());
    let prints: Vec<String> = lbs.iter().map(|lb| served_fingerprint(lb, "a.acme.test")).collect();
    assert_eq!(prints[0], prints[1]);
    let new_holder = fleet.etcd.ctl(&["get", &format!("{FLEET}/acme/locks/{key}"), "--print-value-only"]);
    assert!(new_holder.trim().is_empty(), "the lock is released once the order is done: {new_holder}");
}

/// An instance that cannot renew its order lock (etcd gone) stops its order, since another
/// instance may take the name over once the lease runs out: the CA issues nothing to it.
#[test]
fn an_instance_that_loses_its_order_lock_stops_its_order() {
    let names = ["a.acme.test", "b.acme.test", "c.acme.test"];
    let mut fleet = AcmeFleet::start(&names, &[("PEBBLE_VA_NOSLEEP", "0"), ("PEBBLE_VA_SLEEPTIME", "4")], "http-01");
    wait_until("an order at the CA", Duration::from_secs(30), || fleet.pebble_count("Added order") >= 1);
    let key = fulcrum::tls::acme::store::certificate_key(&names.map(String::from));
    let holder = fleet.etcd.ctl(&["get", &format!("{FLEET}/acme/locks/{key}"), "--print-value-only"]).trim().to_string();
    let index: usize = holder.strip_prefix("lb-").and_then(|n| n.parse::<usize>().ok()).unwrap_or_else(|| panic!("the lock's holder: {holder:?}")) - 1;
    fleet.etcd.stop_member(0);
    let lb = fleet.lbs[index].as_ref().unwrap();
    lb.wait_log("this instance stops its order");
    // The validations the CA was sleeping on end meanwhile; the order is never finalised.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(fleet.pebble_count("Issued certificate serial"), 0, "{}", fleet.pebble.log());
    assert!(lb.log().contains("the order lock was lost"), "{}", lb.log());
}

#[test]
fn with_tls_alpn_01_a_fleet_of_three_orders_once_and_all_three_serve_the_same_certificate() {
    let names = ["a.acme.test", "b.acme.test"];
    let fleet = AcmeFleet::start(&names, &[], "tls-alpn-01");
    let lbs: Vec<&Fulcrum> = fleet.live().collect();
    wait_until("all three serve the issued certificate", Duration::from_secs(60), || lbs.iter().all(|lb| issued(lb)));
    assert_eq!(fleet.pebble_count("Added order"), 1, "{}", fleet.pebble.log());
    assert_eq!(fleet.pebble_count("Issued certificate serial"), 1, "{}", fleet.pebble.log());
    let root = fleet.pebble.root_pem();
    let prints: Vec<String> = lbs.iter().map(|lb| served_fingerprint(lb, "a.acme.test")).collect();
    assert!(prints.iter().all(|p| p == &prints[0]), "{prints:?}");
    for lb in &lbs {
        assert_eq!(curl_verified(lb, "b.acme.test", &root), 0, "{}", lb.log());
    }
}
