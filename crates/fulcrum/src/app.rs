//! The running process: live state, listeners, health checks and admin, and the one path every
//! config change takes (start, SIGHUP, `POST /api/reload`, the fleet's watch, a server address
//! that moved in DNS: `app::resolve`).
//!
//! In a fleet, the services come from etcd: [`Fleet`] composes them with the local file and
//! applies the result here, and an API change is written to etcd instead of applied directly.
//!
//! `apply` binds every new listen address before it swaps the generation, so a config whose port
//! is taken is refused whole and the old one keeps running; the generation is built as a diff of
//! the running one (`live`); then it stops the listeners the config dropped and hands the health
//! checks the new generation (`health::Checks`: a server's checks go on with their streak unless
//! its check changed), and the kernel-mode services' controllers too (`kernel::Kernel`: their
//! nftables tables written, and removed for a service that left).
//!
//! The admin listener reaches the process only through the [`admin::Control`] it implements.

pub mod audit;
mod error;
pub mod privilege;
mod resolve;
pub mod systemd;
/// Takes its handover socket over from the descriptor number the old process names.
#[allow(unsafe_code)]
pub mod upgrade;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::audit::{Outcome, Record, Source};
use crate::config::{self, Config};
use crate::fleet::Fleet;
use crate::live::{self, Generation, Live};
use crate::shutdown::Shutdown;
use crate::{admin, health, kernel, proxy, stats};

pub use error::{ControlError, StartError};

pub struct App {
    pub live: Arc<Live>,
    pub shutdown: Shutdown,
    /// The file `reload` re-reads; `None` for an embedded config (the demo).
    pub path: Option<PathBuf>,
    /// The accept loops of each configured listen address.
    listeners: Mutex<HashMap<SocketAddr, Listening>>,
    /// A copy of the admin listener's socket, for a new binary to take over (`upgrade`).
    admin_copy: Mutex<Option<(SocketAddr, OwnedFd)>>,
    /// Cancelled once a new binary serves, when this process stops accepting and drains.
    upgraded: CancellationToken,
    /// The health checks, one task per server identity.
    checks: health::Checks,
    /// The controllers of the kernel-mode services, one task per service, with their nftables
    /// tables.
    kernel: kernel::Kernel,
    /// The ACME orderers, one task per certificate, outliving generations.
    acme: crate::tls::acme::Manager,
    /// Serialises config changes so two reloads cannot interleave their binds and swaps.
    changing: tokio::sync::Mutex<()>,
    /// Where the admin listener ended up (tests and the demo bind port 0).
    pub admin_addr: Option<SocketAddr>,
    pub auth: admin::Auth,
    pub history: stats::history::History,
    /// The fleet this instance runs in; its services come from there.
    pub fleet: Option<Arc<Fleet>>,
    /// With `reuse_port` and more than one worker: the workers that each accept on a socket of
    /// every address. `None`: one accept loop per address on the runtime that runs the app.
    workers: Option<proxy::workers::Workers>,
    /// The admin API's control socket (`[admin] socket`), rebound when a reload moves it.
    admin_socket: std::sync::OnceLock<admin::socket::Socket<App>>,
    /// Every change, reload and save, and who made it.
    pub trail: audit::Trail,
    /// What the config file holds, as last read or saved, and the edits made since through the
    /// API: while the running config differs from it, a reload would drop them. `None` without a
    /// file to compare to (the demo's embedded config, a fleet).
    file: Mutex<Option<FileState>>,
}

/// One listen address's accept loops: how to stop them, the address bound (the same, unless the
/// config asked for port 0), and a copy of each socket, for a new binary to take over.
struct Listening {
    stop: CancellationToken,
    local: SocketAddr,
    sockets: Vec<OwnedFd>,
    /// With `http3`: what stops the QUIC listener on the same port (UDP).
    quic: Option<CancellationToken>,
}

/// The config file as the process last read or wrote it, and the edits not written to it yet.
struct FileState {
    config: Config,
    edits: Vec<String>,
}

impl App {
    /// Starts everything `config` describes: first health round, listeners, admin.
    pub async fn start(config: Config, path: Option<PathBuf>, shutdown: Shutdown) -> Result<Arc<App>, StartError> {
        Self::start_inheriting(config, path, shutdown, None).await
    }

    /// `start`, taking over the sockets and the servers' state a previous process handed this one
    /// (`upgrade`): an inherited listening socket is used instead of binding its address.
    pub async fn start_inheriting(config: Config, path: Option<PathBuf>, shutdown: Shutdown, mut inherited: Option<upgrade::Inherited>) -> Result<Arc<App>, StartError> {
        let admin_cfg = config.admin.clone();
        let trail = audit::Trail::default();
        trail.configure(config.audit.as_ref());
        let file = (path.is_some() && config.fleet.is_none()).then(|| FileState { config: config.clone(), edits: Vec::new() });
        let (fleet, installs) = Fleet::new(&config).unzip();
        let pools = config.services.iter().flat_map(|s| &s.pools).chain(&config.pools);
        let first_round = config.services.iter().map(|s| s.health.timeout).chain(pools.map(|p| p.health.timeout)).max().unwrap_or_default();
        // The sockmap program loads here, once, on a blocking thread with the first generation.
        let live = Arc::new(
            tokio::task::spawn_blocking(move || {
                proxy::sockmap::prepare(&config);
                Live::new(config)
            })
            .await??,
        );
        let admin_listener = match admin_cfg.as_ref().and_then(|a| a.tcp_listen()) {
            Some(listen) => {
                let addr: SocketAddr = listen.parse().map_err(|cause| StartError::AdminAddress { listen, cause })?;
                let l = match inherited.as_mut().and_then(|i| i.admin(addr)) {
                    Some(l) => l.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(l)),
                    None => tokio::net::TcpListener::bind(addr).await,
                };
                let l = l.map_err(|cause| StartError::AdminBind { address: addr, cause })?;
                let bound = l.local_addr().map_err(|cause| StartError::AdminBind { address: addr, cause })?;
                let copy = socket2::SockRef::from(&l).try_clone().map_err(|cause| StartError::AdminBind { address: addr, cause })?;
                Some((l, bound, (addr, OwnedFd::from(copy))))
            }
            None => None,
        };
        let admin_addr = admin_listener.as_ref().map(|(_, addr, _)| *addr);
        let (admin_listener, admin_copy) = admin_listener.map(|(l, bound, copy)| ((l, bound), copy)).unzip();
        let auth = match &admin_cfg {
            Some(a) => admin::Auth::from_config(a)?,
            None => admin::Auth::default(),
        };
        // Started last of what can fail before the app exists, so a refused start leaves no threads.
        let config = &live.current().config;
        let workers = match config.sockets_per_address() {
            1 => None,
            threads => Some(proxy::workers::Workers::start(threads).map_err(StartError::Workers)?),
        };
        let app = Arc::new(App {
            live: live.clone(),
            shutdown: shutdown.clone(),
            path,
            listeners: Mutex::default(),
            admin_copy: Mutex::new(admin_copy),
            upgraded: CancellationToken::new(),
            checks: health::Checks::default(),
            kernel: kernel::Kernel::default(),
            acme: acme_manager(fleet.as_deref(), config.fleet.as_ref()),
            changing: tokio::sync::Mutex::new(()),
            admin_addr,
            auth,
            history: stats::history::History::default(),
            fleet: fleet.clone(),
            workers,
            trail,
            file: Mutex::new(file),
            admin_socket: std::sync::OnceLock::new(),
        });
        // From here, balancer updates run on their own thread, off the tasks that change servers.
        if let Err(e) = crate::balance::events::start_updates() {
            warn!("cannot start the balancer update thread ({e}); updates run where servers change");
        }
        tokio::spawn(record_history(Arc::downgrade(&app)));
        tokio::spawn(crate::live::outlier::run(Arc::downgrade(&app.live)));
        tokio::spawn(crate::live::limit::run(Arc::downgrade(&app.live)));
        tokio::spawn(resolve::run(Arc::downgrade(&app)));
        let generation = live.current();
        if let Some(i) = &inherited {
            let restored = i.restore(&generation);
            info!(from = i.from_pid, "upgrade: took over the state of {restored} servers");
        }
        app.checks.follow(&generation);
        app.acme.apply(&generation.config);
        health::wait_first_round(&generation, first_round + Duration::from_millis(200)).await;
        let mut bound = Vec::new();
        for s in generation.services.iter().filter(|s| s.config().binds()) {
            let taken = inherited.as_mut().and_then(|i| i.listener(s.listen)).filter(|l| l.len() == app.sockets_per_address());
            let l = match taken {
                Some(l) => l,
                None => {
                    proxy::listener::bind(s.listen, app.sockets_per_address()).map_err(|cause| StartError::Bind { service: s.config().name.clone(), address: s.listen, cause })?
                }
            };
            bound.push((s.listen, l));
        }
        app.start_listeners(bound);
        if let Some((listener, addr)) = admin_listener {
            info!(%addr, "admin API listening");
            tokio::spawn(admin::serve(listener, app.clone()));
        }
        let socket = app.admin_socket.get_or_init(|| admin::socket::Socket::new(Arc::downgrade(&app)));
        socket.follow(&app.live.current().config).await?;
        // Last of what can fail, so a refused start leaves no table behind.
        app.kernel.start(&app.live).await?;
        if let Some(note) = kernel::forwarding(&generation.config) {
            warn!("{note}");
        }
        if let (Some(fleet), Some(installs)) = (fleet, installs) {
            tokio::spawn(apply_installs(Arc::downgrade(&app), installs));
            tokio::spawn(fleet.run(admin_addr, shutdown.stopping().clone()));
        }
        let what = match &app.path {
            Some(p) => format!("start with {}", p.display()),
            None => "start with the embedded config".to_string(),
        };
        app.trail.record(Record::now("fulcrum", Source::File, what, Outcome::Applied, config::services(generation.config.services.len())));
        Ok(app)
    }

    /// The edits made through the API that the config file does not have yet: what they were, and
    /// the file's config against the running one as a diff. `None` when the two are the same, or
    /// there is no file.
    pub fn unsaved(&self) -> Option<admin::Unsaved> {
        let mut file = self.file.lock().ok()?;
        let file = file.as_mut()?;
        let running = self.live.current();
        if running.config == file.config {
            file.edits.clear();
            return None;
        }
        let diff = config::audit::diff(&config::to_toml(&file.config), &config::to_toml(&running.config), ("file", "running"));
        Some(admin::Unsaved { edits: file.edits.clone(), diff })
    }

    /// After a reload or a save: the file and the running config are one again.
    fn file_is(&self, config: Config) {
        if let Ok(mut file) = self.file.lock()
            && let Some(file) = file.as_mut()
        {
            *file = FileState { config, edits: Vec::new() };
        }
    }

    /// Records a change made by `who` through `source`, with the diff from `before` to what runs now.
    fn audit(&self, who: &str, source: Source, what: String, before: &Config, result: &Result<String, ControlError>) {
        let after = self.live.current();
        // Only what changed is written out and diffed, so a record costs what the change does.
        let diff = if result.is_err() { String::new() } else { config::audit::diff_configs(before, &after.config, ("before", "after")) };
        self.trail.record(Record::of(who, source, what, result).with_diff(diff));
    }

    /// The edits made through the API that the config file does not have yet, as many as were
    /// made (at least one when the running config differs from the file); `None` when it has
    /// them all. Cheaper than [`App::unsaved`]: nothing is written out.
    fn unsaved_edits(&self) -> Option<usize> {
        let file = self.file.lock().ok()?;
        let file = file.as_ref()?;
        (self.live.current().config != file.config).then(|| file.edits.len().max(1))
    }

    /// `reload` on behalf of `who`, recorded in the audit trail; edits not saved are dropped, and
    /// a reload by signal (which cannot be refused back to its sender) says how many.
    pub async fn reload_by(&self, who: &str, source: Source) -> Result<String, ControlError> {
        if source == Source::Signal
            && let Some(n) = self.unsaved_edits()
        {
            warn!("SIGHUP: discarding {n} unsaved edit{} made through the API (Save writes them to the file first)", if n == 1 { "" } else { "s" });
        }
        // The generation that ran, not a copy of its config.
        let before = self.live.current();
        let result = self.reload().await;
        self.audit(who, source, "reload".to_string(), &before.config, &result);
        result
    }

    /// Starts the binary at this process's path on its config file and hands it the listening
    /// sockets and the servers' state (`upgrade`); once it serves, this process stops accepting
    /// and drains. Recorded in the audit trail; edits not saved are dropped, as by a reload.
    pub async fn upgrade_by(&self, who: &str, source: Source) -> Result<String, ControlError> {
        let result = self.upgrade().await;
        self.trail.record(Record::of(who, source, "upgrade", &result));
        result
    }

    async fn upgrade(&self) -> Result<String, ControlError> {
        if self.path.is_none() {
            return Err(upgrade::UpgradeError::NoFile.into());
        }
        // No reload binds or drops a listener while the sockets are handed over, and one upgrade
        // waits for the other, which may have handed them over already.
        let _one_at_a_time = self.changing.lock().await;
        if self.upgraded.is_cancelled() {
            return Err(upgrade::UpgradeError::Busy.into());
        }
        let sockets: Vec<(SocketAddr, Vec<OwnedFd>)> = match self.listeners.lock() {
            Ok(l) => l.iter().map(|(addr, l)| (*addr, l.sockets.iter().filter_map(|fd| fd.try_clone().ok()).collect())).collect(),
            Err(_) => return Err(ControlError::Poisoned),
        };
        let admin = self.admin_copy.lock().ok().and_then(|a| a.as_ref().and_then(|(addr, fd)| fd.try_clone().ok().map(|fd| (*addr, fd))));
        let generation = self.live.current();
        info!("upgrade: starting the new binary and handing it {} listen addresses", sockets.len());
        let handed = tokio::task::spawn_blocking(move || upgrade::hand_over(&sockets, admin, &generation)).await.map_err(upgrade::UpgradeError::from).and_then(|r| r);
        match handed {
            Ok(pid) => {
                self.upgraded.cancel();
                let grace = self.live.current().config.shutdown_grace;
                let message =
                    format!("upgraded: process {pid} serves now; this one ({}) stops accepting and drains for up to {}", std::process::id(), humantime::format_duration(grace));
                info!("{message}");
                Ok(message)
            }
            Err(e) => {
                error!("upgrade refused: {e}");
                Err(e.into())
            }
        }
    }

    /// `save` on behalf of `who`, recorded in the audit trail.
    pub async fn save_by(&self, who: &str) -> Result<String, ControlError> {
        let written = self.unsaved().map(|u| u.diff).unwrap_or_default();
        let result = self.save().await;
        let what = match &self.path {
            Some(p) => format!("save to {}", p.display()),
            None => "save".to_string(),
        };
        let record = Record::of(who, Source::Api, what, &result);
        self.trail.record(if result.is_ok() { record.with_diff(written) } else { record });
        result
    }

    /// Re-reads the config file and applies it; on any error the running config stays.
    pub async fn reload(&self) -> Result<String, ControlError> {
        let Some(path) = self.path.clone() else { return Err(ControlError::NothingToReload) };
        let running = self.live.current();
        let loaded = tokio::task::spawn_blocking(move || config::load_against(&path, Some(&running.config))).await?;
        match (loaded, &self.fleet) {
            (Ok(l), None) if l.config.fleet.is_some() => Err(ControlError::JoinsFleet),
            (Ok(l), None) => {
                let read = l.config.clone();
                let applied = self.apply(l.config).await;
                if applied.is_ok() {
                    self.file_is(read);
                }
                applied
            }
            (Ok(l), Some(fleet)) => Ok(fleet.reload(l.config).await?),
            (Err(d), _) => Err(ControlError::Refused(d)),
        }
    }

    /// Applies one change to the running config, validated as a file would be; in a fleet, it is
    /// written to etcd on behalf of `by` and applied from there.
    pub async fn change(&self, change: config::Change, by: admin::Editor) -> Result<String, ControlError> {
        let what = change.summary();
        let before = self.live.current();
        let result = self.change_unrecorded(change, &by).await;
        if result.is_ok()
            && let Ok(mut file) = self.file.lock()
            && let Some(file) = file.as_mut()
        {
            file.edits.push(format!("{what} (by {})", by.who));
        }
        self.audit(&by.who, Source::Api, what, &before.config, &result);
        result
    }

    async fn change_unrecorded(&self, change: config::Change, by: &admin::Editor) -> Result<String, ControlError> {
        if let Some(fleet) = &self.fleet {
            return Ok(fleet.change(&self.live.current().config, change, by).await?);
        }
        let _one_at_a_time = self.changing.lock().await;
        let mut next = self.live.current().config.clone();
        change.apply(&mut next)?;
        let running = self.live.current();
        let next = tokio::task::spawn_blocking(move || config::revalidate_against(next, &running.config)).await?.map_err(ControlError::ChangeRefused)?;
        self.apply_locked(next, live::Refresh::default()).await
    }

    /// Writes the running config to its file, keeping the previous file as `FILE.bak`.
    pub async fn save(&self) -> Result<String, ControlError> {
        let Some(path) = self.path.clone() else { return Err(ControlError::NoFileToSave) };
        if self.fleet.is_some() {
            return Err(ControlError::FleetSave);
        }
        let _one_at_a_time = self.changing.lock().await;
        let text = format!("# Written by fulcrum from its running config.\n\n{}", config::to_toml(&self.live.current().config));
        let saved = tokio::task::spawn_blocking(move || {
            let backup = path.with_extension("toml.bak");
            let write = || -> std::io::Result<()> {
                if path.exists() {
                    std::fs::copy(&path, &backup)?;
                }
                let tmp = path.with_extension("toml.tmp");
                std::fs::write(&tmp, text)?;
                std::fs::rename(&tmp, &path)
            };
            match write() {
                Ok(()) => Ok(format!("saved to {} (previous file kept as {})", path.display(), backup.display())),
                Err(cause) => Err(ControlError::Save { file: path, cause }),
            }
        })
        .await?;
        if saved.is_ok() {
            self.file_is(self.live.current().config.clone());
        }
        saved
    }

    /// Applies a validated config: bind new addresses, swap, stop dropped listeners, restart checks.
    pub async fn apply(&self, config: Config) -> Result<String, ControlError> {
        self.apply_refreshing(config, live::Refresh::default()).await
    }

    /// `apply`, looking up again the server names and SRV records `refresh` names although the
    /// config names them as before (their addresses moved in DNS).
    pub async fn apply_refreshing(&self, config: Config, refresh: live::Refresh) -> Result<String, ControlError> {
        let _one_at_a_time = self.changing.lock().await;
        self.apply_locked(config, refresh).await
    }

    async fn apply_locked(&self, config: Config, refresh: live::Refresh) -> Result<String, ControlError> {
        // A reload may add the first sockmap service; loading is once per process, off the
        // runtime's threads.
        if proxy::sockmap::needs_prepare(&config) {
            let wanted = config.clone();
            let _ = tokio::task::spawn_blocking(move || proxy::sockmap::prepare(&wanted)).await;
        }
        let running = self.live.current();
        if config.admin.as_ref().map(admin::socket::without_socket) != running.config.admin.as_ref().map(admin::socket::without_socket) {
            warn!("admin listener changes take effect at the next restart");
        }
        privilege::warn_changes(&running.config, &config);
        if (config.workers, config.reuse_port) != (running.config.workers, running.config.reuse_port) {
            warn!("workers and reuse_port changes take effect at the next restart");
        }
        drop(running);
        // The control socket moves first, so a path it cannot take refuses the config whole.
        if let Some(socket) = self.admin_socket.get() {
            socket.follow(&config).await?;
        }
        let wanted: Vec<(String, SocketAddr)> = config.services.iter().filter(|s| s.binds()).filter_map(|s| s.listen.parse().ok().map(|a| (s.name.clone(), a))).collect();
        let mut bound = Vec::new();
        {
            let listeners = self.listeners.lock().map_err(|_| ControlError::Poisoned)?;
            for (name, addr) in &wanted {
                if !listeners.contains_key(addr) {
                    let l = proxy::listener::bind(*addr, self.sockets_per_address()).map_err(|cause| ControlError::Bind { service: name.clone(), address: *addr, cause })?;
                    bound.push((*addr, l));
                }
            }
        }
        let live = self.live.clone();
        let applied = tokio::task::spawn_blocking(move || live.apply_refreshing(config, &refresh)).await??;
        for key in &applied.terminated {
            info!(service = %key.service, server = %key.address, "closed the connections of a disabled or removed server (terminate_on_disable)");
        }
        let added = bound.len();
        self.start_listeners(bound);
        let mut removed = 0;
        if let Ok(mut listeners) = self.listeners.lock() {
            // A set: a scan of `wanted` for each listener is quadratic in the services.
            let wanted: std::collections::HashSet<SocketAddr> = wanted.iter().map(|(_, a)| *a).collect();
            listeners.retain(|addr, l| {
                let keep = wanted.contains(addr);
                if !keep {
                    l.stop.cancel();
                    removed += 1;
                }
                keep
            });
        }
        self.follow_quic();
        let generation = self.live.current();
        self.checks.follow(&generation);
        // A table that cannot be written is said in the log and tried again every slot: the
        // generation runs already.
        for failed in self.kernel.follow(&self.live).await {
            error!("{failed}");
        }
        self.acme.apply(&generation.config);
        self.trail.configure(generation.config.audit.as_ref());
        let servers: usize = generation.pools().map(|(_, p)| p.servers().count()).sum();
        let msg = format!(
            "config applied: {}, {servers} servers, {added} listeners added, {removed} removed; {}",
            config::services(generation.config.services.len()),
            applied.diff.describe()
        );
        info!("{msg}");
        Ok(msg)
    }

    /// Listening sockets per address: one per worker with `reuse_port`, else one.
    fn sockets_per_address(&self) -> usize {
        self.workers.as_ref().map_or(1, |w| w.count())
    }

    /// Starts an accept loop on each socket: the `i`th socket of an address on the `i`th worker
    /// with `reuse_port`, else on the runtime that runs the app.
    fn start_listeners(&self, bound: Vec<(SocketAddr, Vec<std::net::TcpListener>)>) {
        let Ok(mut listeners) = self.listeners.lock() else { return };
        for (addr, sockets) in bound {
            let stop = CancellationToken::new();
            let local = sockets.first().and_then(|l| l.local_addr().ok()).unwrap_or(addr);
            let copies = sockets.iter().filter_map(|l| l.try_clone().ok().map(OwnedFd::from)).collect();
            listeners.insert(addr, Listening { stop: stop.clone(), local, sockets: copies, quic: None });
            for (i, l) in sockets.into_iter().enumerate() {
                let accept = proxy::listener::serve(l, addr, self.live.clone(), stop.clone(), self.shutdown.clone());
                // Detached: `stop` ends the loop.
                drop(match &self.workers {
                    Some(w) => w.handle(i).spawn(accept),
                    None => tokio::spawn(accept),
                });
            }
        }
        drop(listeners);
        self.follow_quic();
    }

    /// Starts a QUIC listener (HTTP/3) beside each TCP listener whose service has `http3`, on
    /// the same port over UDP, and stops those whose service no longer has it. One endpoint per
    /// address on the app's runtime, workers or not (`proxy::http::h3`). A UDP port that cannot
    /// be bound yet (the process this one upgrades still drains on it) is tried again each
    /// second; the TCP listener serves meanwhile.
    fn follow_quic(&self) {
        let generation = self.live.current();
        let Ok(mut listeners) = self.listeners.lock() else { return };
        for (addr, l) in listeners.iter_mut() {
            let wants = generation.service_at(*addr).is_some_and(|s| s.config().enabled && s.config().http.http3 && s.tls.is_some());
            match (&l.quic, wants) {
                (None, true) => {
                    let stop = l.stop.child_token();
                    l.quic = Some(stop.clone());
                    let udp = SocketAddr::new(addr.ip(), l.local.port());
                    tokio::spawn(proxy::http::h3::serve(udp, *addr, self.live.clone(), stop, self.shutdown.clone()));
                }
                (Some(stop), false) => {
                    stop.cancel();
                    l.quic = None;
                }
                _ => {}
            }
        }
    }

    /// The address the listener of `listen` (as configured) is bound to: where a config that
    /// asked for port 0 (the fast tests) can be reached.
    pub fn local_addr(&self, listen: SocketAddr) -> Option<SocketAddr> {
        self.listeners.lock().ok()?.get(&listen).map(|l| l.local)
    }

    /// Serves until SIGTERM or SIGINT (reloading on SIGHUP), then drains.
    pub async fn run_until_signal(self: Arc<Self>, signals: Signals) -> std::io::Result<()> {
        let Signals { mut hup, mut term, mut int, mut usr2 } = signals;
        // Without a watchdog the tick is a day long and says nothing.
        let watchdog = systemd::watchdog_interval();
        let mut alive = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(86_400)));
        alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = alive.tick() => if watchdog.is_some() {
                    systemd::watchdog();
                },
                _ = hup.recv() => {
                    info!("SIGHUP: reloading {}", self.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
                    systemd::reloading();
                    match self.reload_by("signal", Source::Signal).await {
                        Ok(done) => systemd::ready(&done),
                        Err(e) => {
                            error!("reload refused: {e}");
                            systemd::ready(&format!("reload refused, the running config stays: {e}"));
                        }
                    }
                }
                _ = usr2.recv() => {
                    if let Some(n) = self.unsaved_edits() {
                        warn!("SIGUSR2: the new binary reads the config file; {n} unsaved edit{} made through the API {} not in it", if n == 1 { "" } else { "s" }, if n == 1 { "is" } else { "are" });
                    }
                    // The outcome is logged and recorded either way.
                    let _ = self.upgrade_by("signal", Source::Signal).await;
                }
                _ = self.upgraded.cancelled() => break,
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        self.stop().await;
        Ok(())
    }

    /// Stops accepting, drains connections up to the grace period, and stops health checks.
    pub async fn stop(&self) {
        let grace = self.live.current().config.shutdown_grace;
        // After an upgrade the new process is the service's main process for systemd: this one
        // leaves without a word.
        if !self.upgraded.is_cancelled() {
            systemd::stopping();
        }
        info!("shutting down: draining connections for up to {}", humantime::format_duration(grace));
        // The copies kept for an upgrade close with the accept loops: a socket still open would
        // take connections into its backlog that nobody accepts.
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.drain().for_each(|(_, l)| l.stop.cancel());
        }
        if let Ok(mut admin) = self.admin_copy.lock() {
            admin.take();
        }
        self.checks.stop();
        // Connections the kernel placed go on through conntrack; new ones are no longer DNATed.
        self.kernel.stop(!self.upgraded.is_cancelled()).await;
        let left = self.shutdown.drain(grace).await;
        if left > 0 {
            warn!("closed {left} connections still open after the grace period");
        }
        info!("stopped");
    }
}

/// The signals a running process answers, taken over before it starts: a SIGHUP (a `systemctl
/// reload`, an operator's `kill -HUP`) that arrives while the listeners are being bound would
/// otherwise end the process, as its default action does, instead of waiting to be handled.
pub struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    /// A binary upgrade (`upgrade`), as NGINX takes USR2.
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; call on the runtime, before `App::start`.
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

impl admin::Control for App {
    type Error = ControlError;

    fn current(&self) -> Arc<Generation> {
        self.live.current()
    }
    fn history(&self) -> &stats::history::History {
        &self.history
    }
    fn auth(&self) -> &admin::Auth {
        &self.auth
    }
    fn file(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    fn stopping(&self) -> CancellationToken {
        self.shutdown.stopping().clone()
    }
    fn ready(&self) -> bool {
        // A draining instance says so at once, so a VRRP peer takes the address while the
        // connections in flight finish here.
        if self.shutdown.stopping().is_cancelled() {
            return false;
        }
        let listening = self.listeners.lock().is_ok_and(|l| !l.is_empty()) || self.kernel.serving();
        listening && !self.live.current().config.services.is_empty()
    }
    fn fleet(&self) -> Option<crate::fleet::Status> {
        self.fleet.as_ref().map(|f| f.status())
    }
    fn unsaved(&self) -> Option<admin::Unsaved> {
        App::unsaved(self)
    }
    fn audit(&self) -> Vec<Record> {
        self.trail.recent()
    }
    fn change(&self, change: config::Change, by: admin::Editor) -> impl Future<Output = Result<String, ControlError>> + Send {
        App::change(self, change, by)
    }
    async fn reload(&self, by: admin::Editor) -> Result<String, ControlError> {
        self.reload_by(&by.who, Source::Api).await
    }
    async fn save(&self, by: admin::Editor) -> Result<String, ControlError> {
        self.save_by(&by.who).await
    }
    async fn upgrade(&self, by: admin::Editor) -> Result<String, ControlError> {
        self.upgrade_by(&by.who, Source::Api).await
    }
    async fn check_now(&self, service: &str, address: &str) -> Result<health::Checked, health::CheckNowError> {
        let generation = self.live.current();
        let pool = generation.server(service, address).map(|(p, _)| p.clone());
        let pool = pool.ok_or_else(|| health::CheckNowError::NoServer { service: service.to_string(), address: address.to_string() })?;
        self.checks.check_now(&pool, address).await
    }
}

/// The ACME orderers: in a fleet, over the fleet's store in etcd, followed from the start, so
/// the instances order each name once, answer each other's challenges and all serve the result
/// (`fleet::acme`); else over each certificate's `storage`.
fn acme_manager(fleet: Option<&Fleet>, settings: Option<&crate::config::Fleet>) -> crate::tls::acme::Manager {
    match (fleet, settings) {
        (Some(fleet), Some(settings)) => crate::tls::acme::Manager::in_fleet(Arc::new(crate::fleet::acme::EtcdStore::start(settings, fleet.name()))),
        _ => crate::tls::acme::Manager::default(),
    }
}

/// Applies the configs the fleet composes, one at a time, while the app lives; each answer goes
/// back to the fleet, which records it as applied or refused.
async fn apply_installs(app: std::sync::Weak<App>, mut installs: tokio::sync::mpsc::Receiver<crate::fleet::Install>) {
    while let Some(install) = installs.recv().await {
        let Some(app) = app.upgrade() else { return };
        let before = app.live.current().config.clone();
        let applied = app.apply(install.config).await;
        app.audit("fleet", Source::Fleet, "apply the fleet's config".to_string(), &before, &applied);
        let said = applied.map_err(|e| crate::fleet::InstallError::Refused(Box::new(e)));
        let _ = install.done.send(said);
    }
}

/// Samples the traffic history every interval for as long as the app lives.
async fn record_history(app: std::sync::Weak<App>) {
    let mut tick = tokio::time::interval(stats::history::INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else { return };
        if app.shutdown.stopping().is_cancelled() {
            return;
        }
        app.history.sample(&app.live.current());
    }
}
