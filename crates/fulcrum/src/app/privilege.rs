//! Running as an unprivileged user (`user`, `group`, `keep_capabilities`, `allow_root`).
//!
//! Started as root, `fulcrum run` binds what needs root (ports below 1024, the control socket in a
//! root-owned directory), then switches for good to `user`: supplementary groups, group, user,
//! in that order (a process that dropped its uid first could no longer drop its groups), and
//! checks that root cannot be taken back. glibc applies each of these to every thread of the
//! process, so the switch is whole even with the runtime's threads running.
//!
//! Capabilities are per thread in Linux, and a thread starts with its creator's. So to keep
//! CAP_NET_BIND_SERVICE (a reload binding a new port below 1024), the switch is made on the main
//! thread before the runtime starts any (`Plan::early`): the thread keeps its permitted set across
//! the change of uid (PR_SET_KEEPCAPS), narrows it to that one capability, effective, and every
//! thread started afterwards has it (the allocator's background threads, started before, lose
//! every capability as their uid changes; they bind nothing). Holding it, the process needs nothing else of root's to
//! start. Without it the switch comes after the start, and the kernel clears every capability of
//! every thread as its uid leaves 0.
//!
//! As root without `user`, `fulcrum run` refuses to start unless `allow_root = true`: every flaw
//! would be root's. Users and groups are looked up here, before anything starts, never on the
//! traffic's threads (`config::account`).
#![allow(unsafe_code)]

use std::net::SocketAddr;

use nix::unistd::{Uid, getegid, geteuid, getgid, getuid, setgid, setgroups, setuid};
use tracing::{info, warn};

use crate::config::account::{self, Account};
use crate::config::{Capability, Config};

/// Why the process will not start as configured.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error(
        "refusing to run as root: set user = \"NAME\" (and group) to switch to an unprivileged user once the listeners are bound, or allow_root = true to run as root deliberately"
    )]
    Root,
    #[error("{0}")]
    Lookup(String),
    #[error("cannot switch to user {user}: started as uid {uid}, not root")]
    NotRoot { user: String, uid: u32 },
    #[error("cannot switch to user {user}: {doing} failed: {cause}")]
    Switch { user: String, doing: &'static str, cause: nix::Error },
    #[error("switched to user {user}, but root could be taken back; stopping")]
    Regained { user: String },
}

/// The switch a config asks for, its names resolved.
#[derive(Debug, Clone)]
pub struct Plan {
    account: Account,
    keep_bind: bool,
}

/// What `config` asks of a process started as `euid`: `None` to stay as it is, or the switch to
/// make; an error for root without `user` or `allow_root`.
pub fn plan(config: &Config) -> Result<Option<Plan>, PrivilegeError> {
    plan_for(config, geteuid())
}

fn plan_for(config: &Config, euid: Uid) -> Result<Option<Plan>, PrivilegeError> {
    let Some(user) = &config.user else {
        return if euid.is_root() && !config.allow_root { Err(PrivilegeError::Root) } else { Ok(None) };
    };
    let account = account::account(user, config.group.as_deref()).map_err(PrivilegeError::Lookup)?;
    if !euid.is_root() {
        // Already that user (a service manager switched): nothing to do.
        return if euid == account.uid { Ok(None) } else { Err(PrivilegeError::NotRoot { user: user.clone(), uid: euid.as_raw() }) };
    }
    Ok(Some(Plan { account, keep_bind: config.keep_capabilities.contains(&Capability::NetBindService) }))
}

impl Plan {
    /// Whether the switch is made before the runtime starts (to keep a capability every thread
    /// must have), not after the listeners are bound.
    pub fn early(&self) -> bool {
        self.keep_bind
    }

    /// The user switched to.
    pub fn account(&self) -> &Account {
        &self.account
    }

    /// Switches to the user for good.
    pub fn switch(&self) -> Result<(), PrivilegeError> {
        let Account { name, uid, gid } = &self.account;
        let failed = |doing| move |cause| PrivilegeError::Switch { user: name.clone(), doing, cause };
        if self.keep_bind {
            nix::sys::prctl::set_keepcaps(true).map_err(failed("keeping capabilities (PR_SET_KEEPCAPS)"))?;
        }
        setgroups(&[*gid]).map_err(failed("setgroups"))?;
        setgid(*gid).map_err(failed("setgid"))?;
        setuid(*uid).map_err(failed("setuid"))?;
        if self.keep_bind {
            keep_only_bind().map_err(failed("keeping CAP_NET_BIND_SERVICE (capset)"))?;
            nix::sys::prctl::set_keepcaps(false).map_err(failed("PR_SET_KEEPCAPS"))?;
        }
        // As OpenSSH does: a switch that root can undo is no switch.
        if (getuid(), geteuid(), getgid(), getegid()) != (*uid, *uid, *gid, *gid) || setuid(Uid::from_raw(0)).is_ok() {
            return Err(PrivilegeError::Regained { user: name.clone() });
        }
        let kept = if self.keep_bind { ", keeping CAP_NET_BIND_SERVICE" } else { "" };
        info!(user = %name, uid = uid.as_raw(), gid = gid.as_raw(), "running as an unprivileged user{kept}");
        Ok(())
    }
}

/// Narrows the calling thread's capabilities to CAP_NET_BIND_SERVICE, permitted and effective,
/// none inheritable. nix has no capset(2), and libc has only the system call.
fn keep_only_bind() -> nix::Result<()> {
    /// `struct __user_cap_header_struct` (linux/capability.h).
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    /// `struct __user_cap_data_struct`: one per 32 capabilities.
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const NET_BIND_SERVICE: u32 = 1 << 10;
    let header = Header { version: VERSION_3, pid: 0 };
    let data = [Data { effective: NET_BIND_SERVICE, permitted: NET_BIND_SERVICE, inheritable: 0 }, Data { effective: 0, permitted: 0, inheritable: 0 }];
    // SAFETY: both pointers are to live values of the layouts capset(2) reads for version 3
    // (a header and two data structs), which it only reads.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if rc == 0 { Ok(()) } else { Err(nix::Error::last()) }
}

/// A hint for a listener that could not be bound: a port below 1024 refused to a process that
/// is not root needs `keep_capabilities`.
pub fn bind_hint(address: &SocketAddr, cause: &std::io::Error) -> &'static str {
    if address.port() < 1024 && cause.kind() == std::io::ErrorKind::PermissionDenied {
        " (ports below 1024 need root's CAP_NET_BIND_SERVICE: keep it with keep_capabilities = [\"net_bind_service\"])"
    } else {
        ""
    }
}

/// Warns of changes a reload cannot make: who the process runs as is settled at start.
pub fn warn_changes(running: &Config, next: &Config) {
    let who = |c: &Config| (c.user.clone(), c.group.clone(), c.keep_capabilities.clone(), c.allow_root);
    if who(running) != who(next) {
        warn!("user, group, keep_capabilities and allow_root changes take effect at the next restart");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn root_without_user_is_refused_unless_allowed_and_others_are_left_alone() {
        let root = Uid::from_raw(0);
        assert!(matches!(plan_for(&config(""), root), Err(PrivilegeError::Root)));
        assert!(PrivilegeError::Root.to_string().contains("allow_root = true"));
        assert!(plan_for(&config("allow_root = true"), root).unwrap().is_none());
        assert!(plan_for(&config(""), Uid::from_raw(1000)).unwrap().is_none());
    }

    #[test]
    fn a_user_is_switched_to_from_root_only() {
        let plan = plan_for(&config("user = \"root\"\nkeep_capabilities = [\"net_bind_service\"]"), Uid::from_raw(0)).unwrap().unwrap();
        assert!(plan.early());
        assert_eq!(plan.account().uid.as_raw(), 0);
        let err = plan_for(&config("user = \"root\""), Uid::from_raw(1000)).unwrap_err().to_string();
        assert!(err.contains("not root"), "{err}");
        let err = plan_for(&config("user = \"no-such-user-fulcrum\""), Uid::from_raw(0)).unwrap_err().to_string();
        assert!(err.contains("no user named"), "{err}");
    }

    #[test]
    fn a_low_port_refused_for_permission_names_the_capability() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(bind_hint(&"0.0.0.0:80".parse().unwrap(), &denied).contains("keep_capabilities"));
        assert_eq!(bind_hint(&"0.0.0.0:8080".parse().unwrap(), &denied), "");
        assert_eq!(bind_hint(&"0.0.0.0:80".parse().unwrap(), &std::io::Error::from(std::io::ErrorKind::AddrInUse)), "");
    }
}
