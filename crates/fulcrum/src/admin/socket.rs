//! The control socket (`[admin] socket`): the admin API on a Unix stream socket, for scripts and
//! `fulcrum ctl` on the same machine, with no TCP port and no token to hand around.
//!
//! Who may connect is what the socket file's permissions say (`socket_mode`, the owner, and
//! `socket_group`), as with HAProxy's stats socket or Docker's: the kernel checks them at
//! `connect(2)`, so the API asks nothing more on this socket, and names a sender by the uid the
//! kernel reports for it (`SO_PEERCRED`). It shares the TCP listener's cap of connections and its
//! idle timeout (`admin::listener`).
//!
//! The file is made at start: its directory is created when missing (owned by the `user` the
//! process switches to, so that it can still replace and remove the socket afterwards), a stale
//! socket left by a process that died is removed (anything else at that path is an error, never
//! removed), and the file is removed again when the process exits, unless another process has put
//! its own socket there meanwhile. A reload that changes the path, mode or group binds the new
//! socket first, then closes the old one.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Control;
use super::listener::Capped;
use crate::config::{Admin, Config, account};

/// Why the control socket could not be made; the running config stays as it was on a reload.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("admin socket {path}: cannot {doing}: {cause}")]
    Io { path: PathBuf, doing: &'static str, cause: std::io::Error },
    #[error("admin socket {path}: {why}")]
    Refused { path: PathBuf, why: String },
    /// The blocking task that makes the file did not finish (the runtime is shutting down).
    #[error("admin socket: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The control socket of a running process: follows the config it is given.
pub struct Socket<C> {
    control: Weak<C>,
    bound: tokio::sync::Mutex<Option<Bound>>,
}

/// A socket being served: what it was made from, and how to stop serving it.
struct Bound {
    settings: Settings,
    stop: CancellationToken,
}

/// What the socket is made from: the `[admin]` keys of the socket, and the user the process
/// runs as (the owner of what it creates).
#[derive(Debug, Clone)]
struct Settings {
    path: PathBuf,
    mode: u32,
    group: Option<String>,
    user: Option<(String, Option<String>)>,
}

impl Settings {
    fn of(config: &Config) -> Option<Settings> {
        let admin = config.admin.as_ref()?;
        let path = PathBuf::from(admin.socket.as_ref()?);
        // Validation refused a bad mode already; the default keeps a config built in memory safe.
        let mode = admin.socket_permissions().unwrap_or(0o600);
        Some(Settings { path, mode, group: admin.socket_group.clone(), user: config.user.clone().map(|u| (u, config.group.clone())) })
    }

    /// Whether `other` makes the same socket. Who the process runs as is settled at start, so a
    /// reload that names another `user` leaves the socket as it is.
    fn same_socket(&self, other: &Settings) -> bool {
        (&self.path, self.mode, &self.group) == (&other.path, other.mode, &other.group)
    }

    /// The user the process runs as, who owns what is made for it.
    fn owner(&self) -> Result<Option<account::Account>, SocketError> {
        let Some((user, group)) = &self.user else { return Ok(None) };
        account::account(user, group.as_deref()).map(Some).map_err(|why| SocketError::Refused { path: self.path.clone(), why })
    }
}

impl<C: Control> Socket<C> {
    pub fn new(control: Weak<C>) -> Socket<C> {
        Socket { control, bound: tokio::sync::Mutex::new(None) }
    }

    /// Serves the socket `config` names, binding it anew when its path, mode or group changed,
    /// and closing it when the config has none. On an error the socket served so far stays.
    pub async fn follow(&self, config: &Config) -> Result<(), SocketError> {
        let wanted = Settings::of(config);
        let mut bound = self.bound.lock().await;
        match (bound.as_ref(), wanted.as_ref()) {
            (None, None) => return Ok(()),
            (Some(b), Some(w)) if b.settings.same_socket(w) => return Ok(()),
            _ => {}
        }
        let Some(control) = self.control.upgrade() else { return Ok(()) };
        let old = bound.take();
        if let Some(settings) = wanted {
            let made = settings.clone();
            let (std_listener, file) = tokio::task::spawn_blocking(move || make(&made)).await??;
            let listener = UnixListener::from_std(std_listener).map_err(|cause| SocketError::Io { path: settings.path.clone(), doing: "serve", cause })?;
            let stop = control.stopping().child_token();
            info!(path = %settings.path.display(), mode = format!("{:04o}", settings.mode), "admin API on the control socket");
            tokio::spawn(serve(listener, control, stop.clone(), file));
            *bound = Some(Bound { settings, stop });
        }
        if let Some(old) = old {
            old.stop.cancel();
        }
        Ok(())
    }
}

/// `admin` without its socket's keys: what a reload cannot change without a restart.
pub fn without_socket(admin: &Admin) -> Admin {
    Admin { socket: None, socket_mode: None, socket_group: None, ..admin.clone() }
}

/// Serves the admin router on `listener` until `stop`; the file goes with the task.
async fn serve<C: Control>(listener: UnixListener, control: Arc<C>, stop: CancellationToken, file: Placed) {
    let _file = file;
    let service = super::router(control).into_make_service_with_connect_info::<Peer>();
    if let Err(e) = axum::serve(Capped::admin(listener), service).with_graceful_shutdown(stop.cancelled_owned()).await {
        tracing::error!("admin control socket failed: {e}");
    }
}

/// Makes the socket file as `settings` say; blocking (file system, user database).
fn make(settings: &Settings) -> Result<(std::os::unix::net::UnixListener, Placed), SocketError> {
    let path = &settings.path;
    let io = |doing| move |cause| SocketError::Io { path: path.clone(), doing, cause };
    let refused = |why: String| SocketError::Refused { path: path.clone(), why };
    let owner = settings.owner()?;
    let group = match &settings.group {
        Some(name) => Some(account::group_id(name).map_err(refused)?),
        None => owner.as_ref().map(|o| o.gid),
    };
    directory(path, owner.as_ref())?;
    // Bound under a name of its own and moved into place once its mode and owner are set, so
    // the path never has the umask's permissions.
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.new", std::process::id()));
    let fresh = path.with_file_name(name);
    remove_stale(path)?;
    remove_stale(&fresh)?;
    let listener = std::os::unix::net::UnixListener::bind(&fresh).map_err(io("bind"))?;
    let placed = (|| {
        listener.set_nonblocking(true)?;
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(settings.mode))?;
        if owner.is_some() || group.is_some() {
            std::os::unix::fs::chown(&fresh, owner.as_ref().map(|o| o.uid.as_raw()), group.map(|g| g.as_raw()))?;
        }
        std::fs::rename(&fresh, path)?;
        Placed::of(path)
    })();
    let placed = placed.map_err(|cause| {
        let _ = std::fs::remove_file(&fresh);
        SocketError::Io { path: path.clone(), doing: "set up", cause }
    })?;
    Ok((listener, placed))
}

/// Creates the directory of the socket `config` names when it is missing, owned by its `user`:
/// what `fulcrum run` does before it switches to that user early (`app::privilege`), since
/// creating it may take root. Blocking.
pub fn prepare_directory(config: &Config) -> Result<(), SocketError> {
    let Some(settings) = Settings::of(config) else { return Ok(()) };
    directory(&settings.path, settings.owner()?.as_ref())
}

/// Creates the directory of `path` when missing, given to `owner`, so that the process can still
/// replace and remove the socket once it runs as that user.
fn directory(path: &Path, owner: Option<&account::Account>) -> Result<(), SocketError> {
    let io = |doing| move |cause| SocketError::Io { path: path.to_path_buf(), doing, cause };
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).ok_or_else(|| SocketError::Refused { path: path.to_path_buf(), why: "has no directory".into() })?;
    if parent.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(parent).map_err(io("create its directory"))?;
    // Others need to pass through to reach the socket; the socket's own mode guards it.
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).map_err(io("set its directory's permissions"))?;
    if let Some(o) = owner {
        std::os::unix::fs::chown(parent, Some(o.uid.as_raw()), Some(o.gid.as_raw())).map_err(io("give its directory to the user"))?;
    }
    Ok(())
}

/// Removes what a process that died left at `path`, if it is a socket; anything else is refused.
fn remove_stale(path: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(cause) => Err(SocketError::Io { path: path.to_path_buf(), doing: "look at what is there", cause }),
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path).map_err(|cause| SocketError::Io { path: path.to_path_buf(), doing: "remove the stale socket", cause }),
        Ok(_) => Err(SocketError::Refused { path: path.to_path_buf(), why: "exists and is not a socket; remove it or choose another path".into() }),
    }
}

/// The socket file this process made, removed when dropped if it is still that file (a process
/// started since, such as the next one of an upgrade, may have replaced it with its own).
struct Placed {
    path: PathBuf,
    identity: (u64, u64),
}

impl Placed {
    fn of(path: &Path) -> std::io::Result<Placed> {
        let m = std::fs::symlink_metadata(path)?;
        Ok(Placed { path: path.to_path_buf(), identity: (m.dev(), m.ino()) })
    }
}

impl Drop for Placed {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        if ours && let Err(e) = std::fs::remove_file(&self.path) {
            warn!(path = %self.path.display(), "cannot remove the admin control socket: {e}");
        }
    }
}

/// Who is at the other end of a control socket connection, as the kernel says.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    uid: Option<u32>,
}

impl Peer {
    /// The sender's name in the audit: `uid:N@socket`.
    pub fn who(&self) -> String {
        match self.uid {
            Some(uid) => format!("uid:{uid}@socket"),
            None => "socket".into(),
        }
    }
}

impl Connected<IncomingStream<'_, Capped<UnixListener>>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Capped<UnixListener>>) -> Peer {
        Peer { uid: stream.io().inner().peer_cred().ok().map(|c| c.uid()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(path: &Path) -> Settings {
        Settings { path: path.to_path_buf(), mode: 0o660, group: None, user: None }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fulcrum-socket-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_socket_is_made_in_a_new_directory_with_its_mode_and_removed_when_dropped() {
        let dir = scratch("made");
        let path = dir.join("sub/admin.sock");
        let (listener, placed) = make(&settings(&path)).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o660);
        std::os::unix::net::UnixStream::connect(&path).expect("a client connects");
        drop(listener);
        drop(placed);
        assert!(!path.exists(), "removed at the end");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_regular_file_is_refused_and_kept() {
        let dir = scratch("stale");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("admin.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let (_listener, placed) = make(&settings(&path)).expect("a stale socket is removed");
        // A newer socket at the path is not ours to remove.
        std::fs::remove_file(&path).unwrap();
        let _newer = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(placed);
        assert!(path.exists(), "the newer socket stays");
        let file = dir.join("plain");
        std::fs::write(&file, "keep me").unwrap();
        let err = make(&settings(&file)).err().expect("refused").to_string();
        assert!(err.contains("exists and is not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
