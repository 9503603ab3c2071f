//! The config file: schema, defaults, and validation that points at the line a user must fix.
//!
//! Loading is two passes. Serde checks types and unknown keys (toml gives those errors a span);
//! `validate` then checks what types cannot say (duplicate listen addresses, empty pools, numbers
//! outside their ranges in `range`, host names that do not resolve) and locates each problem
//! through the parsed document's spans, so every error names file, line and column.

pub mod account;
pub mod audit;
mod change;
mod diagnostic;
mod diff;
mod error;
mod network;
pub mod range;
mod schema;
mod validate;

use std::path::{Path, PathBuf};

pub use crate::balance::{About, Algorithm};
pub use change::{Change, ServerAdmin, ServiceSettings};
pub use diagnostic::{Diagnostic, Diagnostics};
pub use diff::{Diff, ServiceDiff, diff};
pub use error::{AddressError, ChangeError, NetworkError, PortRangeError};
pub use network::{Network, NetworkFile, NetworkSet};
pub use schema::*;
pub use validate::{resolve_address, resolve_server, validate, validate_against};

/// A parsed, validated config and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub path: Option<PathBuf>,
}

/// Where a config's services run: on this instance alone, or in a fleet (composed from etcd,
/// or a file `fulcrum fleet import` writes there). Validation differs in one thing: a fleet
/// keeps ACME's state in etcd, so `[service.tls.acme]` needs no `storage` there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Instance,
    Fleet,
}

/// Reads, parses and validates a config file.
pub fn load(path: &Path) -> Result<Loaded, Diagnostics> {
    load_against(path, None)
}

/// `load`, for a file of services that run in `scope`.
pub fn load_in(path: &Path, scope: Scope) -> Result<Loaded, Diagnostics> {
    read_in(path, None, scope)
}

/// `load`, for a file that is to replace `running` (a reload): see `parse_against`.
pub fn load_against(path: &Path, running: Option<&Config>) -> Result<Loaded, Diagnostics> {
    read_in(path, running, Scope::Instance)
}

fn read_in(path: &Path, running: Option<&Config>, scope: Scope) -> Result<Loaded, Diagnostics> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics::single(Diagnostic {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read the config file: {e}"),
            hint: Some("check the path and its permissions".into()),
        })
    })?;
    let config = parse_in(&text, &path.display().to_string(), Resolve::Yes, running, scope)?;
    Ok(Loaded { config, path: Some(path.to_path_buf()) })
}

/// Parses and validates config text; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Config, Diagnostics> {
    parse_with(text, file, Resolve::Yes)
}

/// Whether validation resolves server host names (tests of the parser alone skip it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    Yes,
    No,
}

pub fn parse_with(text: &str, file: &str, resolve: Resolve) -> Result<Config, Diagnostics> {
    parse_against(text, file, resolve, None)
}

/// Parses and validates config text that is to replace `running`: host names the running config
/// has and certificates it loaded are not looked up again here (`validate_against`).
pub fn parse_against(text: &str, file: &str, resolve: Resolve, running: Option<&Config>) -> Result<Config, Diagnostics> {
    parse_in(text, file, resolve, running, Scope::Instance)
}

fn parse_in(text: &str, file: &str, resolve: Resolve, running: Option<&Config>, scope: Scope) -> Result<Config, Diagnostics> {
    let config: Config = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map(|s| diagnostic::line_col(text, s.start)).unwrap_or((0, 0));
        let message = e.message().to_string();
        let hint = diagnostic::hint_for_parse_error(&message);
        Diagnostics::single(Diagnostic { file: file.into(), line, column, message, hint })
    })?;
    let problems = validate::validate_in(&config, text, file, resolve, running, scope);
    if problems.is_empty() { Ok(config) } else { Err(problems) }
}

/// Re-validates a config built in memory (by a `Change`) exactly as a file would be, by writing
/// it as TOML and reading it back; returns the config as read. A config that cannot be written
/// (a number TOML cannot hold) is refused: read back, the placeholder text would be an empty config.
pub fn revalidate(config: &Config) -> Result<Config, Diagnostics> {
    revalidate_in(config, Scope::Instance)
}

/// `revalidate`, for a config whose services run in `scope` (a fleet's, composed from etcd).
pub fn revalidate_in(config: &Config, scope: Scope) -> Result<Config, Diagnostics> {
    let text = toml::to_string_pretty(config).map_err(|e| {
        Diagnostics::single(Diagnostic {
            file: "running config".into(),
            line: 0,
            column: 0,
            message: format!("cannot write the config as TOML: {e}"),
            hint: Some("a number is larger than TOML can hold; see the ranges in the config reference".into()),
        })
    })?;
    parse_in(&text, "running config", Resolve::Yes, None, scope)
}

/// Validates a config built in memory by a change to `running` (an API edit), as a file would
/// be but without writing it as TOML and reading it back, which costs more than the rest of an
/// edit together in a config of thousands of servers: the ranges that validation checks keep
/// every number within what TOML holds, so `save` writes what runs. Its messages name the key
/// (no line: there is no file); what `running` has already is not looked up again
/// (`parse_against`).
pub fn revalidate_against(config: Config, running: &Config) -> Result<Config, Diagnostics> {
    let problems = validate_against(&config, "", "running config", Resolve::Yes, Some(running));
    if problems.is_empty() { Ok(config) } else { Err(problems) }
}

/// "1 service", "2 services": how messages count a config's services.
pub fn services(n: usize) -> String {
    format!("{n} service{}", if n == 1 { "" } else { "s" })
}

/// The config as TOML, as `save` writes it.
pub fn to_toml(config: &Config) -> String {
    toml::to_string_pretty(config).unwrap_or_else(|e| format!("# cannot write config: {e}\n"))
}

#[cfg(test)]
mod tests;
