//! Config errors that are not about a place in a file: a `Change` naming something the running
//! config does not have, a server address that does not resolve, a port range that does not parse.
//! Problems in a file are `Diagnostics`, which carry line and column.
//!
//! Each message already includes its cause's text, so causes are kept as fields and not also
//! returned as `source()`: a printer of error chains would otherwise repeat them.

/// Why a `Change` could not be applied to the running config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("no service {service:?}")]
    NoService { service: String },
    #[error("service {service:?} has no pool {pool:?}")]
    NoPool { service: String, pool: String },
    /// A change to one server named a server the service does not have.
    #[error("service {service:?} has no server {address:?}")]
    NoServer { service: String, address: String },
    /// A removal named a server the service does not have.
    #[error("service {service} has no server {address}")]
    NothingToRemove { service: String, address: String },
    #[error("service {service} already has server {address}")]
    ServerExists { service: String, address: String },
    #[error("there is a service {service:?} already")]
    ServiceExists { service: String },
}

/// Why a server's `host:port` is not an address to connect to.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("server address {address:?} has no port")]
    NoPort { address: String },
    #[error("server address {address:?} has no host")]
    NoHost { address: String },
    #[error("server address {address:?} has no valid port")]
    BadPort { address: String },
    #[error("host name in {address:?} resolves to no address")]
    NoAddress { address: String },
    #[error("cannot resolve {address:?}: {cause}")]
    Resolve { address: String, cause: std::io::Error },
}

/// Why a `data_ports` value is not a port range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRangeError {
    #[error("invalid port range {text:?} (write \"FIRST-LAST\", e.g. \"50000-50999\")")]
    Malformed { text: String },
    #[error("port range {text:?} is empty or starts at 0")]
    Empty { text: String },
}

/// Why a text is not an IP network (`forwarded_except`, `trusted_proxies` and the like).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    #[error("{text:?} is not an IP network (address/prefix, e.g. \"10.0.0.0/8\")")]
    NotANetwork { text: String },
    #[error("{text:?}: the prefix length must be 0 to {max}")]
    Prefix { text: String, max: u8 },
}
