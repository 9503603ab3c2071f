//! The fleet (`[fleet]`): the etcd cluster an instance takes its services from, and its own overrides.

use super::*;

/// The fleet: where the shared services live in etcd, and what is this instance's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// etcd's client URLs, `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// The key prefix of this fleet's keys; several fleets can share one etcd.
    #[serde(default = "defaults::fleet_prefix")]
    pub prefix: String,
    /// This instance's name in the fleet (letters, digits, '-', '_', '.'); the host name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// etcd authentication: the user name, with `password_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// A PEM file of the CA that signed etcd's certificates, for `https` endpoints; the system's
    /// roots when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// How long this instance stays listed after it stops renewing its registration, 2s to 1min.
    #[serde(default = "defaults::fleet_lease", with = "duration")]
    pub lease: Duration,
    /// Per service, settings that are this instance's own (`listen` most often): merged over the
    /// service from etcd here, never written back to it.
    #[serde(default, rename = "override", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub overrides: std::collections::BTreeMap<String, toml::Table>,
}
