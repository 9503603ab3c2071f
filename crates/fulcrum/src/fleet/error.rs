//! Why the fleet could not do what was asked: reach etcd, apply what it holds, or write an edit.

use crate::config::{ChangeError, Diagnostics};

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("etcd: {}", brief(.0))]
    Etcd(#[from] etcd_client::Error),
    #[error("{endpoint}: {cause}")]
    Member { endpoint: String, cause: String },
    #[error("etcd did not answer in time")]
    Timeout,
    #[error("this instance's registration lease expired")]
    LeaseExpired,
    #[error("{0}")]
    WatchEnded(String),
    #[error("cannot read {file}: {cause}")]
    File { file: String, cause: std::io::Error },
    #[error("the fleet's config at etcd revision {revision} is refused, the running config stays:\n{diagnostics}")]
    Refused { revision: i64, diagnostics: Diagnostics },
    #[error("the fleet's config at etcd revision {revision} could not be applied, the running config stays: {error}")]
    Apply { revision: i64, error: super::InstallError },
    #[error("change refused, the fleet's config stays:\n{0}")]
    ChangeRefused(Diagnostics),
    #[error(transparent)]
    Change(#[from] ChangeError),
    #[error("not connected to etcd ({0}): edits cannot be written now; the running config stays")]
    Disconnected(String),
    #[error(
        "refused: the fleet's config changed at etcd revision {now} (by {by}), after revision {based_on} this edit was based on; the running config stays. Look at the new config and make the edit again"
    )]
    Stale { based_on: i64, now: i64, by: String },
    #[error("{key} of service {service:?} is this instance's own ([fleet.override.{service}] in its file); change it there")]
    Overridden { service: String, key: String },
    #[error("server {address} of service {service:?} joined by itself (etcd key discovery/{service}/{address}); change that key")]
    Discovered { service: String, address: String },
    #[error("cannot write service {service:?} as TOML: {cause}")]
    Encode { service: String, cause: String },
    #[error("the reloaded file has no [fleet]: leaving the fleet takes a restart; the running config stays")]
    LeavesFleet,
    #[error("the config has no [fleet]")]
    NotAFleet,
    #[error("fleet state poisoned")]
    Poisoned,
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// An etcd error in a line: gRPC's status in words and etcd's message, not the transport's
/// nested debug output.
fn brief(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(status) => format!("{} ({})", status.message(), status.code().description().to_lowercase()),
        other => other.to_string(),
    }
}
