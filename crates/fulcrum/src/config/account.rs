//! Users and groups by name, from the system's user database (`/etc/passwd`, `/etc/group` or
//! whatever NSS is set up to ask): what `user`, `group` and `[admin] socket_group` name. A look-up
//! may read files or ask a directory server, so it runs where the config is read (`fulcrum
//! check`, the start, a reload's blocking thread), never on the traffic's threads.

use nix::unistd::{Gid, Group, Uid, User};

/// A user as the process switches to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: Uid,
    /// The user's own group, or the `group` the config names.
    pub gid: Gid,
}

/// The user named `name`, with `group` (a name) or else the user's own group.
pub fn account(name: &str, group: Option<&str>) -> Result<Account, String> {
    let user = match User::from_name(name) {
        Ok(Some(user)) => user,
        Ok(None) => return Err(format!("no user named {name:?} on this system")),
        Err(e) => return Err(format!("cannot look up user {name:?}: {e}")),
    };
    let gid = match group {
        Some(group) => group_id(group)?,
        None => user.gid,
    };
    Ok(Account { name: user.name, uid: user.uid, gid })
}

/// The id of the group named `name`.
pub fn group_id(name: &str) -> Result<Gid, String> {
    match Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid),
        Ok(None) => Err(format!("no group named {name:?} on this system")),
        Err(e) => Err(format!("cannot look up group {name:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_with_its_own_group_and_a_made_up_name_is_not() {
        let root = account("root", None).unwrap();
        assert_eq!((root.uid.as_raw(), root.gid.as_raw()), (0, 0));
        assert_eq!(account("root", Some("root")).unwrap().gid.as_raw(), 0);
        let missing = account("no-such-user-fulcrum", None).unwrap_err();
        assert!(missing.contains("no user named \"no-such-user-fulcrum\""), "{missing}");
        let missing = account("root", Some("no-such-group-fulcrum")).unwrap_err();
        assert!(missing.contains("no group named"), "{missing}");
    }
}
