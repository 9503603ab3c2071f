//! The orderers: one task per ACME certificate of the config, outliving generations (a reload
//! that keeps a certificate's settings keeps its task; one that drops or changes them stops or
//! restarts it). Each task serves what the store holds, sleeps until the renewal time
//! (`renew`), or until the store says a certificate changed (another instance of a fleet
//! renewed it), then orders under the store's lock of the names and serves the result. A failed
//! order is logged with the CA's reason, the old certificate (or the placeholder) keeps serving,
//! and the order is tried again after the backoff. Nothing a CA answers can panic the task.
//!
//! `store_for` is the one place that chooses where ACME's state lives.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime};

use instant_acme::Account;

use super::client::RetryAfter;
use super::order::{self, OrderError};
use super::renew;
use super::slot::{self, Slot};
use super::store::{Store, StoreError, Stored};
use crate::config::{Acme, Config};

/// The longest a task sleeps at once: it then looks at the wall clock again (a suspended
/// machine, a clock set forward).
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);

/// Where ACME's state lives for `acme`: the one place that chooses. In a fleet it is the
/// fleet's store in etcd (`fleet`, made by the app, since `tls` sits below `fleet`), whatever
/// `storage` says; a standalone instance keeps it in `storage` (one `DiskStore` per directory,
/// shared by the services that name it, so they share its locks and challenges).
pub fn store_for(fleet: Option<&Arc<dyn Store>>, acme: &Acme) -> Result<Arc<dyn Store>, StoreError> {
    if let Some(fleet) = fleet {
        return Ok(fleet.clone());
    }
    let dir = acme.storage.as_deref().ok_or_else(|| StoreError("[service.tls.acme] has no storage directory".into()))?;
    static DISKS: LazyLock<Mutex<HashMap<String, Arc<dyn Store>>>> = LazyLock::new(Mutex::default);
    let mut disks = DISKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(store) = disks.get(dir) {
        return Ok(store.clone());
    }
    let store: Arc<dyn Store> = Arc::new(super::disk::DiskStore::open(Path::new(dir))?);
    disks.insert(dir.to_string(), store.clone());
    Ok(store)
}

/// The running orderers, by certificate key.
#[derive(Default)]
pub struct Manager {
    tasks: Mutex<HashMap<String, (Acme, tokio::task::JoinHandle<()>)>>,
    /// In a fleet, where its state lives.
    fleet: Option<Arc<dyn Store>>,
}

impl Manager {
    /// The orderers of an instance in a fleet, whose state is the fleet's `store`. Its
    /// challenges are answered from now on (once the fleet uses ACME), before this instance
    /// runs a config with a certificate: the CA's validator may reach it first.
    pub fn in_fleet(store: Arc<dyn Store>) -> Manager {
        slot::answer_from(&store);
        Manager { tasks: Mutex::default(), fleet: Some(store) }
    }

    /// Runs an orderer for every ACME certificate of `config` (each enabled service's
    /// `[service.tls.acme]`), and stops those it no longer has. Call it within the runtime,
    /// after each config is applied.
    pub fn apply(&self, config: &Config) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let mut wanted: HashMap<String, ()> = HashMap::new();
        // A disabled service has no listener for the CA's validator: it orders once enabled.
        for service in config.services.iter().filter(|s| s.enabled) {
            let Some(acme) = service.tls.as_ref().and_then(|t| t.acme.as_ref()) else { continue };
            let names = acme.names_of(service);
            let slot = match slot::slot(&names) {
                Ok(slot) => slot,
                Err(e) => {
                    tracing::error!(service = %service.name, "ACME: {e}");
                    continue;
                }
            };
            if wanted.insert(slot.key.clone(), ()).is_some() {
                continue;
            }
            if tasks.get(&slot.key).is_some_and(|(running, task)| running == acme && !task.is_finished()) {
                continue;
            }
            let store = match store_for(self.fleet.as_ref(), acme) {
                Ok(store) => store,
                Err(e) => {
                    tracing::error!(service = %service.name, "ACME: cannot open the store: {e}");
                    slot.describe(None, Some(&e.to_string()));
                    continue;
                }
            };
            slot::answer_from(&store);
            if let Some((_, old)) = tasks.remove(&slot.key) {
                old.abort();
            }
            let task = tokio::spawn(keep(slot.clone(), acme.clone(), store, service.name.clone()));
            tasks.insert(slot.key.clone(), (acme.clone(), task));
        }
        tasks.retain(|key, (_, task)| {
            let keep = wanted.contains_key(key);
            if !keep {
                task.abort();
            }
            keep
        });
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        for (_, task) in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).values() {
            task.abort();
        }
    }
}

/// What the task knows of the certificate it serves.
struct Current {
    chain: String,
    not_before: i64,
    not_after: i64,
    /// ARI's suggested window, as last asked.
    window: Option<(i64, i64)>,
    /// When to ask ARI again (Unix time).
    ari_next: i64,
    leaf: Vec<u8>,
}

/// Keeps `slot` served with a valid certificate, for ever.
async fn keep(slot: Arc<Slot>, acme: Acme, store: Arc<dyn Store>, service: String) {
    let names = slot.names.join(", ");
    let jitter: f64 = rand::random();
    let retry_after = RetryAfter::default();
    let mut changes = store.changes();
    let mut account: Option<Account> = None;
    let mut fresh_account = false;
    let mut failures = 0u32;
    let mut current: Option<Current> = None;
    let mut told_placeholder = false;
    loop {
        changes.mark_unchanged();
        // What the store holds: ours, or what another instance renewed.
        match store.certificate(&slot.key).await {
            Ok(Some(stored)) if current.as_ref().is_none_or(|c| c.chain != stored.chain_pem) => match read(&stored) {
                Some(c) if c.not_after > unix(crate::clock::wall()) => match slot.serve(&stored, None) {
                    Ok(()) => {
                        tracing::info!(service = %service, names = %names, "ACME: serving the certificate for {names}, expires at {}", crate::tls::unix_to_text(c.not_after));
                        current = Some(c);
                    }
                    Err(e) => tracing::warn!(service = %service, "ACME: the stored certificate for {names} cannot serve: {e}"),
                },
                _ => {}
            },
            Ok(_) => {}
            Err(e) => tracing::warn!(service = %service, "ACME: cannot read the store: {e}"),
        }
        if current.is_none() && !told_placeholder {
            tracing::warn!(service = %service, names = %names, "ACME: no certificate issued yet for {names}: serving a self-signed one until the CA issues it");
            told_placeholder = true;
        }
        let now = unix(crate::clock::wall());
        // The account, for ARI, when a stored certificate serves and none was loaded yet (a
        // restart): tried at most as often as ARI is asked, and a failure only waits.
        if account.is_none() && current.as_ref().is_some_and(|c| now >= c.ari_next) {
            account = order::account(&acme, &*store, &retry_after, false).await.ok();
        }
        let (due, next_ask) = match &mut current {
            Some(c) => due(c, jitter, account.as_ref()).await,
            None => (now, None),
        };
        if due > now {
            slot.describe(Some(due), None);
            let until = next_ask.map_or(due, |ask| ask.min(due));
            sleep_until(until, &mut changes).await;
            continue;
        }
        let outcome = renew_now(&slot, &acme, &*store, (&mut account, &mut fresh_account), &retry_after, current.as_ref()).await;
        match outcome {
            Ok(true) => {
                failures = 0;
                // Read and served at the top of the loop, as any stored certificate.
                continue;
            }
            Ok(false) => continue,
            Err(e) => {
                failures += 1;
                let wait = renew::backoff(failures, retry_after.take(crate::clock::wall()), e.rate_limited);
                let old = if current.is_some() { "the current certificate keeps serving" } else { "the self-signed one keeps serving" };
                tracing::warn!(service = %service, names = %names, "ACME: the order for {names} failed: {}; {old}; trying again in {}", e.reason, humantime::format_duration(wait));
                slot.describe(Some(now + wait.as_secs() as i64), Some(&e.reason));
                sleep_until(now + wait.as_secs() as i64, &mut changes).await;
            }
        }
    }
}

/// Orders under the store's lock: `Ok(true)` when a certificate was issued and stored,
/// `Ok(false)` when, once the lock held, the store already had a fresh one (another instance).
async fn renew_now(
    slot: &Slot,
    acme: &Acme,
    store: &dyn Store,
    (account, fresh_account): (&mut Option<Account>, &mut bool),
    retry_after: &RetryAfter,
    current: Option<&Current>,
) -> Result<bool, OrderError> {
    let held = store.lock(&slot.key).await?;
    let lost = held.lost();
    if let Some(stored) = store.certificate(&slot.key).await?
        && current.is_none_or(|c| c.chain != stored.chain_pem)
        && read(&stored).is_some_and(|c| c.not_after > unix(crate::clock::wall()))
    {
        return Ok(false);
    }
    let acct = match account {
        Some(a) => a.clone(),
        None => account.insert(order::account(acme, store, retry_after, *fresh_account).await?).clone(),
    };
    *fresh_account = false;
    // Stopped if the lock is lost meanwhile: another instance may be ordering the name by then.
    let ordered = tokio::select! {
        ordered = order::order(&acct, acme, &slot.names, store) => ordered,
        () = lost.cancelled() => Err(OrderError::new("the order lock was lost (its lease could not be renewed): the order stopped, another instance may finish it")),
    };
    let stored = ordered.inspect_err(|e| {
        if e.account_unknown {
            *account = None;
            *fresh_account = true;
        }
    })?;
    if let Err(e) = slot.serve(&stored, None) {
        return Err(OrderError::new(format!("the CA's certificate cannot serve: {e}")));
    }
    store.save_certificate(&slot.key, &stored).await?;
    Ok(true)
}

/// When `c` is due for renewal, and when to ask the CA's renewal information again. ARI is
/// asked (when the account is known and the CA offers it) only once `c.ari_next` has come, as
/// the CA's `Retry-After` set it; between two asks its window is kept in `c`.
async fn due(c: &mut Current, jitter: f64, account: Option<&Account>) -> (i64, Option<i64>) {
    let now = unix(crate::clock::wall());
    if let Some(account) = account
        && now >= c.ari_next
    {
        // Asked again in an hour when the CA does not answer or has no ARI.
        c.ari_next = now + 3600;
        let der = rustls_pki_types::CertificateDer::from(c.leaf.clone());
        if let Ok(id) = instant_acme::CertificateIdentifier::try_from(&der)
            && let Ok((info, ask)) = account.renewal_info(&id).await
        {
            let w = info.suggested_window;
            c.window = Some((w.start.unix_timestamp(), w.end.unix_timestamp()));
            c.ari_next = now + ask.clamp(Duration::from_secs(60), Duration::from_secs(86_400)).as_secs() as i64;
        }
    }
    (renew::renewal_time(c.not_before, c.not_after, jitter, c.window), account.map(|_| c.ari_next))
}

/// The leaf's validity, `None` when the chain does not parse.
fn read(stored: &Stored) -> Option<Current> {
    use rustls_pki_types::pem::PemObject;
    let leaf = rustls_pki_types::CertificateDer::pem_slice_iter(stored.chain_pem.as_bytes()).next()?.ok()?;
    let (_, x509) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let v = x509.validity();
    Some(Current { chain: stored.chain_pem.clone(), not_before: v.not_before.timestamp(), not_after: v.not_after.timestamp(), leaf: leaf.to_vec(), window: None, ari_next: 0 })
}

/// Sleeps until the Unix time `at` (at most `LONGEST_SLEEP`), or until the store changes.
async fn sleep_until(at: i64, changes: &mut tokio::sync::watch::Receiver<u64>) {
    let left = Duration::from_secs((at - unix(crate::clock::wall())).max(0) as u64).min(LONGEST_SLEEP);
    tokio::select! {
        _ = tokio::time::sleep(left) => {}
        r = changes.changed() => {
            if r.is_err() {
                // The store is gone: only the timer wakes us now.
                tokio::time::sleep(left).await;
            }
        }
    }
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() as i64
}
