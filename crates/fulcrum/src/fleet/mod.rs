//! The fleet: several Fulcrum instances that run one config, kept in etcd.
//!
//! With `[fleet]` in its file, an instance takes its services from etcd instead ([`snapshot`]
//! names the keys): it reads them once, then follows etcd's watch, and every snapshot is
//! composed with the local file ([`Snapshot::compose`]) and sent to the app as an [`Install`]
//! on the channel [`Fleet::new`] returns, which the app applies through the same path as a
//! reload: the fleet is a config source and never calls the app. An edit made through any instance's API is written to etcd with a compare on the
//! revision it was based on (`fleet::write`) and reaches this instance, like every other, through the
//! watch. Each instance registers itself under a lease, renewed every third of it.
//!
//! ACME's state is the fleet's too ([`acme`]): the account, the certificates, the challenges
//! and a lock per name, so the fleet orders each name once and every instance serves it.
//!
//! etcd is never on the traffic's path: when it cannot be reached, the instance keeps serving the
//! last config it applied, says "disconnected since ..." in the log, the stats and the dashboard,
//! refuses edits, and reads everything again when etcd is back. There is no consensus here;
//! etcd's is the fleet's.

pub mod acme;
mod agreement;
pub mod cli;
mod connect;
mod error;
pub mod snapshot;
mod write;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions, WatchOptions};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::Config;
pub use connect::connect;
pub use error::FleetError;
use snapshot::{Keys, Member, Snapshot};
pub use write::replace_services;

/// One instance's part in the fleet.
pub struct Fleet {
    keys: Keys,
    name: String,
    lease: Duration,
    /// The local file's config: per-instance settings and `[fleet]`, no services.
    local: Mutex<Config>,
    state: Mutex<State>,
    /// The etcd revision of the config applied here; writers wait on it.
    applied: watch::Sender<i64>,
    /// One write at a time from this instance, so two API edits cannot race each other here.
    writing: tokio::sync::Mutex<()>,
    started: u64,
    /// Whether this outage's first failed connection was logged.
    unreachable_said: std::sync::atomic::AtomicBool,
    /// Where composed configs go to be applied.
    installs: mpsc::Sender<Install>,
}

/// A config the fleet composed, for the app to apply; `done` takes what applying said.
pub struct Install {
    pub config: Config,
    pub done: oneshot::Sender<Result<String, InstallError>>,
}

/// Why a composed config was not applied. The app's own error is carried whole: the fleet sits
/// below the app and does not name its types.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("the app stopped taking configs")]
    Stopped,
    #[error(transparent)]
    Refused(Box<dyn std::error::Error + Send + Sync>),
}

#[derive(Default)]
struct State {
    snapshot: Snapshot,
    /// The connection of the session in progress, for writes; `None` while disconnected.
    client: Option<Client>,
    /// This instance's registration lease in that session.
    lease: Option<i64>,
    /// When the connection was last made or lost (unix seconds).
    since: u64,
    /// Why the last connection ended or could not be made.
    lost: Option<String>,
    /// Why the newest snapshot was not applied here.
    refused: Option<String>,
    /// The digest of the snapshot applied here.
    digest: String,
}

/// The fleet as this instance sees it, for `/api/stats`, `/api/fleet` and the dashboard.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub name: String,
    pub prefix: String,
    pub connected: bool,
    /// Unix seconds of the last connection or disconnection.
    pub since: u64,
    /// The etcd revision of the config applied here (its newest change), and its digest.
    pub revision: i64,
    pub digest: String,
    /// Why etcd cannot be reached, while it cannot.
    pub lost: Option<String>,
    /// Why the newest config read from etcd does not run here.
    pub refused: Option<String>,
    pub members: Vec<MemberStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberStatus {
    #[serde(flatten)]
    pub member: Member,
    /// It runs another config than the newest one this instance has read.
    pub lagging: bool,
    /// When its registration ended (unix seconds), if it has: it stopped, or lost etcd.
    pub gone_since: Option<u64>,
}

impl Fleet {
    /// The fleet of the local file `local`, and the configs it composes for the app to apply,
    /// one at a time; `None` without `[fleet]`.
    pub fn new(local: &Config) -> Option<(Arc<Fleet>, mpsc::Receiver<Install>)> {
        let settings = local.fleet.as_ref()?;
        let name = settings.name.clone().unwrap_or_else(host_name);
        let (applied, _) = watch::channel(0);
        let (installs, receiver) = mpsc::channel(1);
        let fleet = Arc::new(Fleet {
            keys: Keys::new(&settings.prefix),
            name,
            lease: settings.lease,
            local: Mutex::new(local.clone()),
            state: Mutex::default(),
            applied,
            writing: tokio::sync::Mutex::new(()),
            started: unix_now(),
            unreachable_said: Default::default(),
            installs,
        });
        Some((fleet, receiver))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn status(&self) -> Status {
        let prefix = self.local.lock().ok().and_then(|l| l.fleet.as_ref().map(|f| f.prefix.clone())).unwrap_or_default();
        let Ok(state) = self.state.lock() else {
            return Status {
                name: self.name.clone(),
                prefix,
                connected: false,
                since: 0,
                revision: 0,
                digest: String::new(),
                lost: None,
                refused: Some("state poisoned".into()),
                members: Vec::new(),
            };
        };
        let newest = state.snapshot.digest();
        let live = state.snapshot.members.values().map(|m| MemberStatus { member: m.clone(), lagging: m.digest != newest, gone_since: None });
        let gone = state.snapshot.gone.values().map(|(m, at)| MemberStatus { member: m.clone(), lagging: false, gone_since: Some(*at) });
        let mut members: Vec<MemberStatus> = live.chain(gone).collect();
        members.sort_by(|a, b| a.member.name.cmp(&b.member.name));
        Status {
            name: self.name.clone(),
            prefix,
            connected: state.client.is_some(),
            since: state.since,
            revision: *self.applied.borrow(),
            digest: state.digest.clone(),
            lost: state.lost.clone(),
            refused: state.refused.clone(),
            members,
        }
    }

    /// Takes a re-read local file (SIGHUP, `POST /api/reload`) and applies it with the fleet's
    /// services as last read.
    pub async fn reload(&self, local: Config) -> Result<String, FleetError> {
        let Some(next) = &local.fleet else { return Err(FleetError::LeavesFleet) };
        {
            let mut l = self.local.lock().map_err(|_| FleetError::Poisoned)?;
            let now = l.fleet.as_ref().ok_or(FleetError::NotAFleet)?;
            if (&now.endpoints, &now.prefix, &now.name, &now.user, &now.password_file, &now.ca, now.lease)
                != (&next.endpoints, &next.prefix, &next.name, &next.user, &next.password_file, &next.ca, next.lease)
            {
                warn!("fleet: a change of [fleet] other than its overrides takes effect at the next restart");
            }
            *l = local;
        }
        self.install().await
    }

    /// Composes the snapshot with the local file and has the app apply it; a snapshot that does
    /// not compose is refused whole and the running config stays.
    async fn install(&self) -> Result<String, FleetError> {
        let (snapshot, local) = {
            let state = self.state.lock().map_err(|_| FleetError::Poisoned)?;
            let local = self.local.lock().map_err(|_| FleetError::Poisoned)?;
            (state.snapshot.clone(), local.clone())
        };
        let revision = snapshot.config_revision;
        let composed = tokio::task::spawn_blocking(move || snapshot.compose(&local).map(|c| (c, snapshot.digest()))).await?;
        let result = match composed {
            Ok((config, digest)) => match self.apply(config).await {
                Ok(message) => {
                    if let Ok(mut state) = self.state.lock() {
                        state.digest = digest;
                        state.refused = None;
                    }
                    self.applied.send_replace(revision);
                    Ok(message)
                }
                Err(error) => Err(FleetError::Apply { revision, error }),
            },
            Err(d) => Err(FleetError::Refused { revision, diagnostics: d }),
        };
        if let Err(e) = &result {
            error!("{e}");
            if let Ok(mut state) = self.state.lock() {
                state.refused = Some(e.to_string());
            }
        }
        result
    }

    /// Sends `config` to the app and waits for what applying it said.
    async fn apply(&self, config: Config) -> Result<String, InstallError> {
        let (done, said) = oneshot::channel();
        self.installs.send(Install { config, done }).await.map_err(|_| InstallError::Stopped)?;
        said.await.map_err(|_| InstallError::Stopped)?
    }

    /// Follows etcd until `stopping`: one session at a time, each started afresh (read
    /// everything, then watch) after the last one ended, with a growing pause. `admin` is where
    /// this instance's admin API listens, for its registration.
    pub async fn run(self: Arc<Self>, admin: Option<std::net::SocketAddr>, stopping: CancellationToken) {
        let mut pause = Duration::from_millis(250);
        loop {
            let ended = tokio::select! {
                ended = self.session(admin) => ended,
                () = stopping.cancelled() => {
                    self.leave().await;
                    return;
                }
            };
            if let Err(e) = ended {
                let revision = *self.applied.borrow();
                let fresh = self.state.lock().map(|mut s| {
                    s.lease = None;
                    let was = s.client.take().is_some();
                    if was {
                        s.since = unix_now();
                    }
                    s.lost = Some(e.to_string());
                    was
                });
                // Said once per outage; each retry after that only at debug level.
                if fresh.unwrap_or(false) {
                    pause = Duration::from_millis(250);
                    warn!("fleet: disconnected from etcd ({e}); serving the config of revision {revision} until it is back");
                } else if !self.unreachable_said.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    warn!("fleet: cannot reach etcd ({e}); serving revision {revision}, retrying");
                } else {
                    tracing::debug!("fleet: cannot reach etcd ({e}); retrying in {}", humantime::format_duration(pause));
                }
                tokio::select! {
                    () = tokio::time::sleep(jittered(pause)) => {}
                    () = stopping.cancelled() => return,
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }

    /// One connection to etcd: read the fleet, apply it, register, then follow the watch and
    /// renew the lease until either fails.
    async fn session(&self, admin: Option<std::net::SocketAddr>) -> Result<(), FleetError> {
        let settings = self.local.lock().map_err(|_| FleetError::Poisoned)?.fleet.clone().ok_or(FleetError::NotAFleet)?;
        let mut client = connect(&settings).await?;
        let read = client.get(self.keys.all(), Some(GetOptions::new().with_prefix())).await?;
        let revision = read.header().map_or(0, |h| h.revision());
        let mut snapshot = Snapshot { revision, ..Snapshot::default() };
        for kv in read.kvs() {
            snapshot.set(&self.keys, &String::from_utf8_lossy(kv.key()), Some(kv.value()), kv.mod_revision());
        }
        self.note_unreadable(&mut snapshot);
        let changed = self.state.lock().map(|s| s.snapshot.services != snapshot.services || s.snapshot.discovered != snapshot.discovered).unwrap_or(true);
        if let Ok(mut state) = self.state.lock() {
            state.snapshot = snapshot;
        }
        if changed || *self.applied.borrow() == 0 {
            let _ = self.install().await;
        } else {
            // Nothing changed while away: what runs is the newest.
            self.applied.send_replace(self.state.lock().map_or(0, |s| s.snapshot.config_revision));
        }
        let lease = client.lease_grant(self.lease.as_secs().max(1) as i64, None).await?.id();
        let (mut keeper, mut acks) = client.lease_keep_alive(lease).await?;
        self.register(&mut client, lease, admin).await?;
        if let Ok(mut state) = self.state.lock() {
            state.client = Some(client.clone());
            state.lease = Some(lease);
            state.since = unix_now();
            state.lost = None;
        }
        self.unreachable_said.store(false, std::sync::atomic::Ordering::Relaxed);
        info!(instance = %self.name, revision, "fleet: connected to etcd");
        let mut watch = client.watch(self.keys.all(), Some(WatchOptions::new().with_prefix().with_start_revision(revision + 1))).await?;
        let mut renew = tokio::time::interval(self.lease / 3);
        renew.tick().await;
        loop {
            tokio::select! {
                message = watch.message() => {
                    let Some(response) = message? else { return Err(FleetError::WatchEnded("etcd closed the watch".into())) };
                    if response.canceled() {
                        return Err(FleetError::WatchEnded(format!("etcd cancelled the watch: {}", response.cancel_reason())));
                    }
                    let mut changed = false;
                    if let Ok(mut state) = self.state.lock() {
                        for event in response.events() {
                            let Some(kv) = event.kv() else { continue };
                            let value = (event.event_type() == etcd_client::EventType::Put).then(|| kv.value());
                            changed |= state.snapshot.set(&self.keys, &String::from_utf8_lossy(kv.key()), value, kv.mod_revision());
                        }
                        if let Some(h) = response.header() {
                            state.snapshot.revision = h.revision();
                        }
                        let mut snapshot = std::mem::take(&mut state.snapshot);
                        self.note_unreadable(&mut snapshot);
                        state.snapshot = snapshot;
                    }
                    if changed {
                        let _ = self.install().await;
                        self.register(&mut client, lease, admin).await?;
                    }
                }
                _ = renew.tick() => {
                    let renewed = tokio::time::timeout(self.lease / 3, async {
                        keeper.keep_alive().await?;
                        acks.message().await
                    }).await;
                    match renewed {
                        Ok(Ok(Some(ack))) if ack.ttl() > 0 => {}
                        Ok(Ok(Some(_))) => return Err(FleetError::LeaseExpired),
                        Ok(Ok(None)) => return Err(FleetError::WatchEnded("etcd closed the lease's stream".into())),
                        Ok(Err(e)) => return Err(e.into()),
                        Err(_) => return Err(FleetError::Timeout),
                    }
                }
            }
        }
    }

    /// Ends this instance's registration at once on a clean stop, so the others list it as gone
    /// now rather than when its lease runs out.
    async fn leave(&self) {
        let Some((mut client, lease)) = self.state.lock().ok().and_then(|s| Some((s.client.clone()?, s.lease?))) else { return };
        if tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await.is_ok() {
            info!(instance = %self.name, "fleet: left (registration revoked)");
        }
    }

    /// Writes this instance's registration under its lease: what it runs, and where its admin is.
    async fn register(&self, client: &mut Client, lease: i64, admin: Option<std::net::SocketAddr>) -> Result<(), FleetError> {
        let digest = self.state.lock().map(|s| s.digest.clone()).unwrap_or_default();
        let member = Member {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            admin: admin.map(|a| a.to_string()),
            revision: *self.applied.borrow(),
            digest,
            started: self.started,
        };
        let value = serde_json::to_vec(&member).map_err(|e| FleetError::WatchEnded(e.to_string()))?;
        client.put(self.keys.member(&self.name), value, Some(PutOptions::new().with_lease(lease))).await?;
        Ok(())
    }

    fn note_unreadable(&self, snapshot: &mut Snapshot) {
        for key in snapshot.unreadable.drain(..) {
            warn!("fleet: key {key} is not readable JSON and is left out");
        }
    }
}

fn unix_now() -> u64 {
    crate::clock::since_epoch().as_secs()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "fulcrum".into())
}

/// `pause` give or take a quarter, so instances that lost etcd together do not all retry in the
/// same instant when it returns.
fn jittered(pause: Duration) -> Duration {
    use rand::Rng as _;
    pause.mul_f64(rand::rng().random_range(0.75..1.25))
}
