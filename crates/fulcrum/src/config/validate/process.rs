//! Checks of how the process runs: the user and group it switches to, what it keeps of root's
//! privileges, and the admin's control socket (its path, permissions and group). Names are looked
//! up in the system's user database (`config::account`), so `fulcrum check` finds a missing user
//! before a start does.

use super::super::account;
use super::super::schema::{Admin, Config};
use super::{Report, Seg};

/// A Unix socket's path fits in `sockaddr_un.sun_path`, 108 bytes with the final NUL.
const MOST_SOCKET_PATH: usize = 107;

pub(super) fn validate_user(config: &Config, report: &mut Report<'_>) {
    match &config.user {
        Some(user) => {
            if let Err(e) = account::account(user, None) {
                report.error(&[Seg::Key("user")], e, "create the user (useradd --system fulcrum) or name one that exists");
            }
        }
        None if config.group.is_some() => report.error(&[Seg::Key("group")], "group is set without user".into(), "set user too: the group is switched to with it"),
        None if !config.keep_capabilities.is_empty() => {
            report.error(&[Seg::Key("keep_capabilities")], "keep_capabilities is set without user".into(), "set user: capabilities are kept across the switch to it")
        }
        None => {}
    }
    if let Some(Err(e)) = config.group.as_deref().map(account::group_id) {
        report.error(&[Seg::Key("group")], e, "create the group (groupadd --system NAME) or name one that exists");
    }
}

pub(super) fn validate_socket(admin: &Admin, report: &mut Report<'_>) {
    let at = |key| [Seg::Key("admin"), Seg::Key(key)];
    let Some(path) = &admin.socket else {
        for (key, set) in [("socket_mode", admin.socket_mode.is_some()), ("socket_group", admin.socket_group.is_some())] {
            if set {
                report.error(&at(key), format!("{key} is set without socket"), "set socket to the path of the control socket");
            }
        }
        return;
    };
    if !path.starts_with('/') {
        report.error(&at("socket"), format!("admin socket {path:?} is not an absolute path"), "write the whole path, e.g. \"/run/fulcrum/admin.sock\"");
    } else if path.len() > MOST_SOCKET_PATH || path.ends_with('/') {
        report.error(&at("socket"), format!("admin socket {path:?} is not a file path of at most {MOST_SOCKET_PATH} bytes"), "Unix socket paths are short: put it under /run");
    }
    if let Err(e) = admin.socket_permissions() {
        report.error(&at("socket_mode"), e, "write the permission bits in octal, e.g. \"0660\" for the owner and the group");
    }
    if let Some(Err(e)) = admin.socket_group.as_deref().map(account::group_id) {
        report.error(&at("socket_group"), e, "name a group that exists (groupadd --system NAME)");
    }
}
