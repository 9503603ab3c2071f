//! Why the process could not start, and why a config change (reload, API change, save) was
//! refused. A refused change leaves the running config as it was, and every message says so
//! where a user could think otherwise.
//!
//! Each message already includes its cause's text, so causes are kept as fields and not also
//! returned as `source()`: a printer of error chains (the CLI's) would otherwise repeat them.

use std::net::{AddrParseError, SocketAddr};
use std::path::PathBuf;

use tokio::task::JoinError;

use super::privilege::bind_hint;
use crate::admin::AuthError;
use crate::admin::socket::SocketError;
use crate::config::{ChangeError, Diagnostics};
use crate::live::BuildError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("admin listen address {listen}: {cause}")]
    AdminAddress { listen: String, cause: AddrParseError },
    #[error("cannot listen on admin address {address}: {cause}")]
    AdminBind { address: SocketAddr, cause: std::io::Error },
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    AdminSocket(#[from] SocketError),
    #[error("service {service}: cannot listen on {address}: {cause}{}", bind_hint(address, cause))]
    Bind { service: String, address: SocketAddr, cause: std::io::Error },
    #[error(transparent)]
    Kernel(#[from] crate::kernel::KernelError),
    #[error("cannot start the worker threads of reuse_port: {0}")]
    Workers(std::io::Error),
    /// Building the first generation did not finish (it panicked, or the runtime is shutting down).
    #[error(transparent)]
    Task(#[from] JoinError),
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("this instance runs an embedded config; nothing to reload")]
    NothingToReload,
    #[error("this instance runs an embedded config; there is no file to save to")]
    NoFileToSave,
    /// The config file (or a whole config sent to the API) has errors.
    #[error("config refused, the running config stays:\n{0}")]
    Refused(Diagnostics),
    /// A change made the running config invalid.
    #[error("change refused, the running config stays:\n{0}")]
    ChangeRefused(Diagnostics),
    /// A change named a service, pool or server the running config does not have.
    #[error(transparent)]
    Change(#[from] ChangeError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("service {service}: cannot listen on {address}: {cause}{}; the running config stays", bind_hint(address, cause))]
    Bind { service: String, address: SocketAddr, cause: std::io::Error },
    #[error("{0}; the running config stays")]
    AdminSocket(#[from] SocketError),
    #[error("cannot save the config: {cause}")]
    Save { file: PathBuf, cause: std::io::Error },
    #[error("listener table poisoned")]
    Poisoned,
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetError),
    #[error("the reloaded file has [fleet]: joining a fleet takes a restart; the running config stays")]
    JoinsFleet,
    #[error("a fleet's services live in etcd, not in this file: `fulcrum fleet export` writes them to one")]
    FleetSave,
    #[error(transparent)]
    Upgrade(#[from] super::upgrade::UpgradeError),
    /// Blocking work (reading, validating, building) did not finish (it panicked, or the runtime
    /// is shutting down).
    #[error(transparent)]
    Task(#[from] JoinError),
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn a_refused_bind_names_service_and_address_and_says_the_config_stays() {
        let cause = || io::Error::from(io::ErrorKind::AddrInUse);
        let e = ControlError::Bind { service: "web".into(), address: SocketAddr::from(([127, 0, 0, 1], 80)), cause: cause() };
        assert_eq!(e.to_string(), format!("service web: cannot listen on 127.0.0.1:80: {}; the running config stays", cause()));
    }

    #[test]
    fn wrapped_errors_read_as_their_own() {
        let change = ChangeError::NoService { service: "nope".into() };
        assert_eq!(ControlError::from(change.clone()).to_string(), change.to_string());
        assert_eq!(ControlError::Refused(Diagnostics::default()).to_string(), "config refused, the running config stays:\n");
    }
}
