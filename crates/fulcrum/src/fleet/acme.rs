//! ACME's state for a fleet, in etcd: every instance of the fleet shares one account, one
//! certificate per set of names and the answers to pending challenges, and one instance at a
//! time orders a name, under a lock that dies with it.
//!
//! Under the fleet's prefix (beside `snapshot`'s keys, which ignore these):
//! - `acme/accounts/DIRECTORY`: the account's credentials for the CA at that directory URL
//!   (its `%` and `/` written `%25` and `%2F`), instant-acme's JSON;
//! - `acme/certificates/KEY`: a certificate and its private key (JSON `{"chain_pem", "key_pem"}`),
//!   `KEY` being `certificate_key` of its names;
//! - `acme/challenges/http-01/TOKEN` and `acme/challenges/tls-alpn-01/DOMAIN`: the answer the
//!   CA's validator is given, whichever instance it reaches;
//! - `acme/locks/KEY`: the name of the instance ordering `KEY`, under a lease of [`LOCK_TTL`].
//!
//! The lock is a put-if-absent (a transaction comparing the key's create revision with 0) under
//! a lease the holder keeps alive every third of its TTL: an instance that is killed, or loses
//! etcd, stops renewing it, etcd deletes the key when the lease runs out, and an instance waiting
//! for it (watching the key) takes it at once. Dropping the lock revokes the lease, so a finished
//! order frees the name at once.
//!
//! One task per store follows `acme/` with a watch, from the instance's start: the challenges
//! into memory, so an HTTP request or a handshake answers them without a call to etcd (an
//! instance that just put one answers it before its watch reports it; one that has not applied
//! the config with the certificate yet answers too), and every certificate saved anywhere ticks
//! [`Store::changes`] as soon as the watch reports it (milliseconds on a healthy cluster). When
//! etcd is lost the task reads everything again once it is back, and ticks once, since a
//! certificate may have landed meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::FleetError;
use super::connect;
use super::snapshot::Keys;
use crate::config;
use crate::tls::acme::store::{Challenge, Fut, Held, Store, StoreError, Stored};

/// How long an order lock outlives an instance that stopped renewing it (killed, or cut off from
/// etcd): short enough that another instance finishes a killed one's order within seconds, long
/// enough that a renewal every third of it survives a busy etcd.
pub const LOCK_TTL: Duration = Duration::from_secs(5);
/// The most pending challenges kept in memory, and the largest answer: an http-01 answer is a
/// hundred bytes, a tls-alpn-01 one a certificate and key of a few KiB, and an instance has a
/// handful pending at a time. Anything beyond is left out and said in the log.
const MOST_CHALLENGES: usize = 4096;
const LARGEST_ANSWER: usize = 64 << 10;

/// The ACME store of a fleet, over the fleet's etcd (`[fleet]`).
pub struct EtcdStore {
    shared: Arc<Shared>,
    follower: tokio::task::AbortHandle,
}

struct Shared {
    settings: config::Fleet,
    keys: AcmeKeys,
    /// This instance's name, written as the holder of the locks it takes.
    instance: String,
    /// The connection of calls; dropped after a call fails, so the next one connects again
    /// (perhaps to another member).
    client: Mutex<Option<Client>>,
    challenges: Mutex<HashMap<Challenge, Vec<u8>>>,
    changes: watch::Sender<u64>,
    /// Whether the follower's outage was said in the log (once per outage).
    lost_said: AtomicBool,
    /// Whether the fleet uses ACME (anything is under `acme/`): only then are validators
    /// answered from here (`Store::answering`).
    used: AtomicBool,
}

/// The keys under `PREFIX/acme/`.
#[derive(Debug, Clone)]
struct AcmeKeys {
    root: String,
}

impl AcmeKeys {
    fn new(keys: &Keys) -> AcmeKeys {
        AcmeKeys { root: keys.acme() }
    }
    fn account(&self, directory: &str) -> String {
        format!("{}accounts/{}", self.root, directory.replace('%', "%25").replace('/', "%2F"))
    }
    fn certificates(&self) -> String {
        format!("{}certificates/", self.root)
    }
    fn certificate(&self, key: &str) -> String {
        format!("{}certificates/{key}", self.root)
    }
    fn challenges(&self) -> String {
        format!("{}challenges/", self.root)
    }
    fn challenge(&self, challenge: &Challenge) -> String {
        match challenge {
            Challenge::Http01 { token } => format!("{}challenges/http-01/{token}", self.root),
            Challenge::TlsAlpn01 { domain } => format!("{}challenges/tls-alpn-01/{domain}", self.root),
        }
    }
    fn locks(&self) -> String {
        format!("{}locks/", self.root)
    }
    fn lock(&self, key: &str) -> String {
        format!("{}locks/{key}", self.root)
    }
    /// The challenge a key under `challenges/` stands for.
    fn challenge_of(&self, key: &str) -> Option<Challenge> {
        let rest = key.strip_prefix(&self.challenges())?;
        match rest.split_once('/')? {
            ("http-01", token) if !token.is_empty() => Some(Challenge::Http01 { token: token.to_string() }),
            ("tls-alpn-01", domain) if !domain.is_empty() => Some(Challenge::TlsAlpn01 { domain: domain.to_string() }),
            _ => None,
        }
    }
}

/// A certificate as etcd holds it.
#[derive(Serialize, Deserialize)]
struct Record {
    chain_pem: String,
    key_pem: String,
}

impl EtcdStore {
    /// The store of the fleet `settings` describes, for the instance `instance`; starts following
    /// etcd at once (on the runtime this is called on) and stops when dropped.
    pub fn start(settings: &config::Fleet, instance: &str) -> EtcdStore {
        let (changes, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            settings: settings.clone(),
            keys: AcmeKeys::new(&Keys::new(&settings.prefix)),
            instance: instance.to_string(),
            client: Mutex::new(None),
            challenges: Mutex::new(HashMap::new()),
            changes,
            lost_said: AtomicBool::new(false),
            used: AtomicBool::new(false),
        });
        let follower = tokio::spawn(Arc::clone(&shared).follow()).abort_handle();
        EtcdStore { shared, follower }
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

impl Shared {
    async fn client(&self) -> Result<Client, StoreError> {
        if let Some(c) = self.client.lock().ok().and_then(|c| c.clone()) {
            return Ok(c);
        }
        let c = connect(&self.settings).await.map_err(|e| StoreError(format!("etcd: {e}")))?;
        if let Ok(mut cached) = self.client.lock() {
            *cached = Some(c.clone());
        }
        Ok(c)
    }

    /// An etcd error as the store's, the connection forgotten.
    fn failed(&self, e: etcd_client::Error) -> StoreError {
        if let Ok(mut c) = self.client.lock() {
            *c = None;
        }
        StoreError(FleetError::from(e).to_string())
    }

    fn tick(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn remember(&self, challenge: Challenge, answer: &[u8]) {
        self.used.store(true, Ordering::Relaxed);
        let Ok(mut memory) = self.challenges.lock() else { return };
        if answer.len() > LARGEST_ANSWER || (memory.len() >= MOST_CHALLENGES && !memory.contains_key(&challenge)) {
            warn!("fleet: ACME challenge {challenge:?} left out ({} bytes, {} pending): beyond what an instance keeps", answer.len(), memory.len());
            return;
        }
        memory.insert(challenge, answer.to_vec());
    }

    fn forget(&self, challenge: &Challenge) {
        if let Ok(mut memory) = self.challenges.lock() {
            memory.remove(challenge);
        }
    }

    /// Follows `acme/` until the store is dropped: one session at a time, each started afresh
    /// after the last one ended, with a growing pause.
    async fn follow(self: Arc<Self>) {
        let mut pause = Duration::from_millis(250);
        loop {
            if let Err(e) = self.session(&mut pause).await {
                if !self.lost_said.swap(true, Ordering::Relaxed) {
                    warn!("fleet: ACME's state in etcd cannot be followed ({e}); retrying");
                } else {
                    debug!("fleet: ACME's state in etcd cannot be followed ({e}); retrying");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// Reads the pending challenges, then follows every change under `acme/`.
    async fn session(&self, pause: &mut Duration) -> Result<(), FleetError> {
        let mut client = connect(&self.settings).await?;
        let read = client.get(self.keys.challenges(), Some(GetOptions::new().with_prefix())).await?;
        let revision = read.header().map_or(0, |h| h.revision());
        let anything = client.get(self.keys.root.as_str(), Some(GetOptions::new().with_prefix().with_count_only())).await?;
        if anything.count() > 0 {
            self.used.store(true, Ordering::Relaxed);
        }
        if let Ok(mut memory) = self.challenges.lock() {
            memory.clear();
        }
        for kv in read.kvs() {
            if let Some(c) = self.keys.challenge_of(&String::from_utf8_lossy(kv.key())) {
                self.remember(c, kv.value());
            }
        }
        // A certificate may have landed while this instance did not follow.
        self.tick();
        let mut watch = client.watch(self.keys.root.as_str(), Some(WatchOptions::new().with_prefix().with_start_revision(revision + 1))).await?;
        if self.lost_said.swap(false, Ordering::Relaxed) {
            warn!("fleet: following ACME's state in etcd again");
        }
        *pause = Duration::from_millis(250);
        let certificates = self.keys.certificates();
        loop {
            let Some(response) = watch.message().await? else { return Err(FleetError::WatchEnded("etcd closed the watch".into())) };
            if response.canceled() {
                return Err(FleetError::WatchEnded(format!("etcd cancelled the watch: {}", response.cancel_reason())));
            }
            let mut landed = false;
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                self.used.store(true, Ordering::Relaxed);
                let key = String::from_utf8_lossy(kv.key());
                if let Some(c) = self.keys.challenge_of(&key) {
                    match event.event_type() {
                        EventType::Put => self.remember(c, kv.value()),
                        EventType::Delete => self.forget(&c),
                    }
                } else if key.starts_with(&certificates) && event.event_type() == EventType::Put {
                    landed = true;
                }
            }
            if landed {
                self.tick();
            }
        }
    }

    /// One try at the lock `name`: held now, or who holds it and as of which revision.
    async fn try_lock(&self, name: &str) -> Result<Attempt, StoreError> {
        let mut client = self.client().await?;
        let lease = client.lease_grant(LOCK_TTL.as_secs() as i64, None).await.map_err(|e| self.failed(e))?.id();
        let txn = Txn::new()
            .when([Compare::create_revision(name, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(name, self.instance.as_str(), Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get(name, None)]);
        let answer = match client.txn(txn).await {
            Ok(a) => a,
            Err(e) => {
                let _ = client.lease_revoke(lease).await;
                return Err(self.failed(e));
            }
        };
        if answer.succeeded() {
            let lost = tokio_util::sync::CancellationToken::new();
            let keeper = keep_alive(client.clone(), lease, name.to_string(), lost.clone()).await.map_err(|e| self.failed(e))?;
            return Ok(Attempt::Held(Box::new(Lock { client, lease, keeper, lost, runtime: tokio::runtime::Handle::current() })));
        }
        let _ = client.lease_revoke(lease).await;
        let revision = answer.header().map_or(0, |h| h.revision());
        let holder = answer
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                _ => None,
            })
            .unwrap_or_default();
        Ok(Attempt::Taken { revision, holder })
    }

    /// Waits until the lock `name` is released (deleted after `revision`), or a lease's TTL
    /// passes, whichever is first: the caller tries again either way.
    async fn wait_released(&self, name: &str, revision: i64) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let mut watch = client.watch(name, Some(WatchOptions::new().with_start_revision(revision + 1))).await.map_err(|e| self.failed(e))?;
        let released = async {
            loop {
                match watch.message().await {
                    Ok(Some(r)) if r.events().iter().any(|e| e.event_type() == EventType::Delete) => return true,
                    Ok(Some(r)) if !r.canceled() => {}
                    _ => return false,
                }
            }
        };
        // A watch that ended without the release (etcd closed or cancelled it) is not tried
        // again at once: the next try then waits a moment, not in a tight loop.
        if let Ok(false) = tokio::time::timeout(LOCK_TTL * 2, released).await {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }
}

enum Attempt {
    Held(Box<Lock>),
    Taken { revision: i64, holder: String },
}

/// An order lock held: its lease renewed by `keeper` until dropped, then revoked.
struct Lock {
    client: Client,
    lease: i64,
    keeper: tokio::task::AbortHandle,
    /// Cancelled by `keeper` when the lease could not be renewed.
    lost: tokio_util::sync::CancellationToken,
    runtime: tokio::runtime::Handle,
}

impl Held for Lock {
    fn lost(&self) -> tokio_util::sync::CancellationToken {
        self.lost.clone()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.keeper.abort();
        // Released at once rather than when the lease runs out, on the runtime it was taken
        // on, wherever it is dropped (once that runtime has stopped, the lease runs out).
        let (mut client, lease) = (self.client.clone(), self.lease);
        self.runtime.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), client.lease_revoke(lease)).await;
        });
    }
}

/// Renews `lease` every third of [`LOCK_TTL`] until aborted; if a renewal fails, the lock may
/// pass to another instance: says so in the log and cancels `lost`, which stops the order.
async fn keep_alive(mut client: Client, lease: i64, name: String, lost: tokio_util::sync::CancellationToken) -> Result<tokio::task::AbortHandle, etcd_client::Error> {
    let (mut keeper, mut acks) = client.lease_keep_alive(lease).await?;
    let task = tokio::spawn(async move {
        let mut renew = tokio::time::interval(LOCK_TTL / 3);
        renew.tick().await;
        loop {
            renew.tick().await;
            let renewed = tokio::time::timeout(LOCK_TTL / 3, async {
                keeper.keep_alive().await?;
                acks.message().await
            })
            .await;
            match renewed {
                Ok(Ok(Some(ack))) if ack.ttl() > 0 => {}
                _ => {
                    warn!("fleet: the ACME order lock {name} could not be renewed: this instance stops its order, which another may take over");
                    lost.cancel();
                    return;
                }
            }
        }
    });
    Ok(task.abort_handle())
}

impl Store for EtcdStore {
    fn account<'a>(&'a self, directory: &'a str) -> Fut<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let s = &self.shared;
            let mut client = s.client().await?;
            let read = client.get(s.keys.account(directory), None).await.map_err(|e| s.failed(e))?;
            Ok(read.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }

    fn save_account<'a>(&'a self, directory: &'a str, credentials: &'a [u8]) -> Fut<'a, ()> {
        Box::pin(async move {
            let s = &self.shared;
            let mut client = s.client().await?;
            client.put(s.keys.account(directory), credentials, None).await.map_err(|e| s.failed(e))?;
            Ok(())
        })
    }

    fn certificate<'a>(&'a self, key: &'a str) -> Fut<'a, Option<Stored>> {
        Box::pin(async move {
            let s = &self.shared;
            let mut client = s.client().await?;
            let read = client.get(s.keys.certificate(key), None).await.map_err(|e| s.failed(e))?;
            let Some(kv) = read.kvs().first() else { return Ok(None) };
            let record: Record = serde_json::from_slice(kv.value()).map_err(|e| StoreError(format!("etcd key {}: not a stored certificate: {e}", s.keys.certificate(key))))?;
            Ok(Some(Stored { chain_pem: record.chain_pem, key_pem: record.key_pem }))
        })
    }

    fn save_certificate<'a>(&'a self, key: &'a str, cert: &'a Stored) -> Fut<'a, ()> {
        Box::pin(async move {
            let s = &self.shared;
            let value = serde_json::to_vec(&Record { chain_pem: cert.chain_pem.clone(), key_pem: cert.key_pem.clone() }).map_err(|e| StoreError(e.to_string()))?;
            let mut client = s.client().await?;
            client.put(s.keys.certificate(key), value, None).await.map_err(|e| s.failed(e))?;
            // This instance serves it now, whether or not its watch is up.
            s.tick();
            Ok(())
        })
    }

    fn lock<'a>(&'a self, key: &'a str) -> Fut<'a, Box<dyn Held>> {
        Box::pin(async move {
            let s = &self.shared;
            let name = s.keys.lock(key);
            let mut said = false;
            loop {
                match s.try_lock(&name).await? {
                    Attempt::Held(lock) => return Ok(lock as Box<dyn Held>),
                    Attempt::Taken { revision, holder } => {
                        if !said {
                            debug!("fleet: {holder} orders {key}; waiting for its lock");
                            said = true;
                        }
                        s.wait_released(&name, revision).await?;
                    }
                }
            }
        })
    }

    fn put_challenge<'a>(&'a self, challenge: &'a Challenge, answer: &'a [u8]) -> Fut<'a, ()> {
        Box::pin(async move {
            let s = &self.shared;
            let mut client = s.client().await?;
            client.put(s.keys.challenge(challenge), answer, None).await.map_err(|e| s.failed(e))?;
            s.remember(challenge.clone(), answer);
            Ok(())
        })
    }

    /// A watch brings a put to the other instances within milliseconds on a healthy etcd; one
    /// that is starting reads the pending challenges as it connects. A second covers both with
    /// room, and an order is rare enough to spend it.
    fn settle(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn challenge(&self, challenge: &Challenge) -> Option<Vec<u8>> {
        self.shared.challenges.lock().ok()?.get(challenge).cloned()
    }

    fn remove_challenge<'a>(&'a self, challenge: &'a Challenge) -> Fut<'a, ()> {
        Box::pin(async move {
            let s = &self.shared;
            let mut client = s.client().await?;
            client.delete(s.keys.challenge(challenge), None).await.map_err(|e| s.failed(e))?;
            s.forget(challenge);
            Ok(())
        })
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    fn answering(&self) -> bool {
        self.shared.used.load(Ordering::Relaxed)
    }
}

/// A certificate of the fleet as etcd holds it, and who orders it now, for `fulcrum certs --fleet`.
#[derive(Debug, Clone)]
pub struct Listed {
    /// `certificate_key` of its names.
    pub key: String,
    pub certificate: Option<Stored>,
    /// The instance holding its order lock, while one does.
    pub ordering: Option<String>,
}

/// Every certificate and order lock under `acme/`, by key.
pub async fn list(client: &mut Client, keys: &Keys) -> Result<Vec<Listed>, FleetError> {
    let acme = AcmeKeys::new(keys);
    let mut by_key: std::collections::BTreeMap<String, Listed> = std::collections::BTreeMap::new();
    let (certificates, locks) = (acme.certificates(), acme.locks());
    for (under, is_lock) in [(&certificates, false), (&locks, true)] {
        for kv in client.get(under.as_str(), Some(GetOptions::new().with_prefix())).await?.kvs() {
            let key = String::from_utf8_lossy(kv.key()).trim_start_matches(under.as_str()).to_string();
            let listed = by_key.entry(key.clone()).or_insert_with(|| Listed { key, certificate: None, ordering: None });
            if is_lock {
                listed.ordering = Some(String::from_utf8_lossy(kv.value()).into_owned());
            } else if let Ok(r) = serde_json::from_slice::<Record>(kv.value()) {
                listed.certificate = Some(Stored { chain_pem: r.chain_pem, key_pem: r.key_pem });
            }
        }
    }
    Ok(by_key.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_acme_key_sits_under_the_prefix_and_a_challenge_reads_back_from_its_key() {
        let keys = AcmeKeys::new(&Keys::new("/fulcrum/prod/"));
        assert_eq!(keys.account("https://acme.test/dir%"), "/fulcrum/prod/acme/accounts/https:%2F%2Facme.test%2Fdir%25");
        assert_eq!(keys.certificate("a.test,b.test"), "/fulcrum/prod/acme/certificates/a.test,b.test");
        assert_eq!(keys.lock("_.a.test"), "/fulcrum/prod/acme/locks/_.a.test");
        for c in [Challenge::Http01 { token: "tok-EN_1".into() }, Challenge::TlsAlpn01 { domain: "a.test".into() }] {
            assert_eq!(keys.challenge_of(&keys.challenge(&c)), Some(c));
        }
        assert_eq!(keys.challenge_of("/fulcrum/prod/acme/challenges/dns-01/x"), None);
        assert_eq!(keys.challenge_of("/fulcrum/prod/acme/challenges/http-01/"), None);
        assert_eq!(keys.challenge_of("/fulcrum/prod/acme/certificates/a.test"), None);
        // The fleet's config snapshot leaves them all out.
        let fleet = Keys::new("/fulcrum/prod/");
        assert_eq!(fleet.classify(&keys.lock("a.test")), super::super::snapshot::Key::Other);
    }
}
