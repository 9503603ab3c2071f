//! Every change a user makes while Fulcrum runs (the admin API, the dashboard) is one typed
//! `Change` applied to a copy of the running config. The result is validated like a config file
//! and applied through the same path as a reload, so what the GUI changes is always expressible
//! in the file, and `save` can write it back.

use serde::Deserialize;

use super::Algorithm;
use super::error::ChangeError;
use super::schema::{Config, Health, Route, Server, Service};

/// An administrative state of a real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerAdmin {
    Enable,
    Disable,
    Drain,
}

/// The service settings of the paper's "Server LB" tab.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSettings {
    pub listen: Option<String>,
    pub half_close: Option<bool>,
    pub terminate_on_disable: Option<bool>,
    #[serde(default, with = "opt_duration")]
    pub connect_timeout: Option<std::time::Duration>,
    pub failure_limit: Option<u32>,
    pub retries: Option<u32>,
    pub maxconn: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    ServerState {
        service: String,
        address: String,
        state: ServerAdmin,
    },
    Weight {
        service: String,
        address: String,
        weight: u32,
    },
    AddServer {
        service: String,
        server: Server,
    },
    RemoveServer {
        service: String,
        address: String,
    },
    Algorithm {
        service: String,
        algorithm: Algorithm,
    },
    Health {
        service: String,
        health: Box<Health>,
    },
    Settings {
        service: String,
        settings: ServiceSettings,
    },
    /// Start (true) or stop (false) a service's listener.
    ServiceEnabled {
        service: String,
        enabled: bool,
    },
    /// A new service (a whole rule, as the config file writes one).
    AddService(Box<Service>),
    RemoveService {
        service: String,
    },
    /// A service's rules, all of them in their order (the dashboard's Rules tab edits them whole).
    Routes {
        service: String,
        routes: Vec<Route>,
    },
    Replace(Box<Config>),
}

impl Change {
    /// What the change does, in a few words: an audit record's "what".
    pub fn summary(&self) -> String {
        match self {
            Change::ServerState { service, address, state } => format!("{state:?} server {address} of {service}").to_lowercase(),
            Change::Weight { service, address, weight } => format!("weight {weight} for server {address} of {service}"),
            Change::AddServer { service, server } => format!("add server {} to {service}", server.address),
            Change::RemoveServer { service, address } => format!("remove server {address} from {service}"),
            Change::Algorithm { service, algorithm } => format!("algorithm {algorithm:?} for {service}"),
            Change::Health { service, health } => format!("health check {:?} for {service}", health.kind),
            Change::Settings { service, .. } => format!("settings of {service}"),
            Change::ServiceEnabled { service, enabled } => format!("{} {service}", if *enabled { "start" } else { "stop" }),
            Change::Replace(c) => format!("replace the config ({})", super::services(c.services.len())),
            Change::AddService(s) => format!("add service {} on {}", s.name, s.listen),
            Change::RemoveService { service } => format!("remove service {service}"),
            Change::Routes { service, routes } => format!(
                "set the {} of {service}",
                match routes.len() {
                    1 => "1 route".to_string(),
                    n => format!("{n} routes"),
                }
            ),
        }
    }

    /// Applies the change to `config`; an error names what was not found.
    pub fn apply(self, config: &mut Config) -> Result<(), ChangeError> {
        match self {
            Change::Replace(c) => *config = *c,
            Change::AddService(s) => {
                if config.services.iter().any(|x| x.name == s.name) {
                    return Err(ChangeError::ServiceExists { service: s.name });
                }
                config.services.push(*s);
            }
            Change::RemoveService { service } => {
                service_mut(config, &service)?;
                config.services.retain(|s| s.name != service);
            }
            Change::ServerState { service, address, state } => {
                let s = server_mut(config, &service, &address)?;
                s.enabled = state != ServerAdmin::Disable;
                s.drain = state == ServerAdmin::Drain;
            }
            Change::Weight { service, address, weight } => server_mut(config, &service, &address)?.weight = weight,
            Change::AddServer { service, server } => {
                let servers = target_mut(config, &service)?.servers;
                if servers.iter().any(|x| x.address == server.address) {
                    return Err(ChangeError::ServerExists { service, address: server.address });
                }
                servers.push(server);
            }
            Change::RemoveServer { service, address } => {
                let servers = target_mut(config, &service)?.servers;
                let before = servers.len();
                servers.retain(|x| x.address != address);
                if servers.len() == before {
                    return Err(ChangeError::NothingToRemove { service, address });
                }
            }
            Change::Algorithm { service, algorithm } => *target_mut(config, &service)?.algorithm = algorithm,
            Change::Health { service, health } => *target_mut(config, &service)?.health = *health,
            Change::ServiceEnabled { service, enabled } => service_mut(config, &service)?.enabled = enabled,
            Change::Routes { service, routes } => service_mut(config, &service)?.routes = routes,
            Change::Settings { service, settings } => {
                let s = service_mut(config, &service)?;
                let ServiceSettings { listen, half_close, terminate_on_disable, connect_timeout, failure_limit, retries, maxconn } = settings;
                if let Some(v) = listen {
                    s.listen = v;
                }
                if let Some(v) = half_close {
                    s.half_close = v;
                }
                if let Some(v) = terminate_on_disable {
                    s.terminate_on_disable = v;
                }
                if let Some(v) = connect_timeout {
                    s.connect_timeout = v;
                }
                if let Some(v) = failure_limit {
                    s.failure_limit = v;
                }
                if let Some(v) = retries {
                    s.retries = v;
                }
                if let Some(v) = maxconn {
                    s.maxconn = v;
                }
            }
        }
        Ok(())
    }
}

fn service_mut<'a>(config: &'a mut Config, name: &str) -> Result<&'a mut Service, ChangeError> {
    config.services.iter_mut().find(|s| s.name == name).ok_or_else(|| ChangeError::NoService { service: name.into() })
}

/// What a change to servers, algorithm or health edits: a service's own, one of its pools' when
/// the name is `service/pool` (the name the pool runs and shows under), or a shared pool's
/// (`[[pool]]`) by its name, which no service has.
struct Target<'a> {
    servers: &'a mut Vec<Server>,
    algorithm: &'a mut Algorithm,
    health: &'a mut Health,
}

fn target_mut<'a>(config: &'a mut Config, name: &str) -> Result<Target<'a>, ChangeError> {
    match name.split_once('/') {
        None if !config.services.iter().any(|s| s.name == name) && config.shared(name).is_some() => {
            let p = config.pools.iter_mut().find(|p| p.name == name).ok_or_else(|| ChangeError::NoService { service: name.into() })?;
            Ok(Target { servers: &mut p.servers, algorithm: &mut p.algorithm, health: &mut p.health })
        }
        None => {
            let s = service_mut(config, name)?;
            Ok(Target { servers: &mut s.servers, algorithm: &mut s.algorithm, health: &mut s.health })
        }
        Some((service, pool)) => {
            let p = service_mut(config, service)?.pools.iter_mut().find(|p| p.name == pool).ok_or_else(|| ChangeError::NoPool { service: service.into(), pool: pool.into() })?;
            Ok(Target { servers: &mut p.servers, algorithm: &mut p.algorithm, health: &mut p.health })
        }
    }
}

fn server_mut<'a>(config: &'a mut Config, service: &str, address: &str) -> Result<&'a mut Server, ChangeError> {
    target_mut(config, service)?.servers.iter_mut().find(|s| s.address == address).ok_or_else(|| ChangeError::NoServer { service: service.into(), address: address.into() })
}

/// Optional durations as humans write them.
mod opt_duration {
    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::time::Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(t) => humantime::parse_duration(&t).map(Some).map_err(|e| D::Error::custom(format!("invalid duration {t:?}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        crate::config::parse_with("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n", "t", crate::config::Resolve::No)
            .unwrap()
    }

    #[test]
    fn a_service_is_added_once_and_removed_by_name() {
        let mut c = config();
        let mut new = c.services[0].clone();
        new.name = "api".into();
        new.listen = "127.0.0.1:2000".into();
        Change::AddService(Box::new(new.clone())).apply(&mut c).unwrap();
        assert_eq!(c.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["web", "api"]);
        let again = Change::AddService(Box::new(new)).apply(&mut c).unwrap_err();
        assert_eq!(again.to_string(), "there is a service \"api\" already");
        Change::RemoveService { service: "web".into() }.apply(&mut c).unwrap();
        assert_eq!(c.services.len(), 1);
        assert!(matches!(Change::RemoveService { service: "web".into() }.apply(&mut c), Err(ChangeError::NoService { .. })));
    }

    #[test]
    fn drain_keeps_the_server_enabled_and_disable_clears_drain() {
        let mut c = config();
        Change::ServerState { service: "web".into(), address: "127.0.0.1:1001".into(), state: ServerAdmin::Drain }.apply(&mut c).unwrap();
        assert!(c.services[0].servers[0].enabled && c.services[0].servers[0].drain);
        Change::ServerState { service: "web".into(), address: "127.0.0.1:1001".into(), state: ServerAdmin::Disable }.apply(&mut c).unwrap();
        assert!(!c.services[0].servers[0].enabled && !c.services[0].servers[0].drain);
    }

    #[test]
    fn a_change_out_of_range_is_refused_with_the_range_when_revalidated() {
        let refused = |change: Change| {
            let mut c = config();
            change.apply(&mut c).unwrap();
            crate::config::revalidate(&c).unwrap_err().to_string()
        };
        let e = refused(Change::Weight { service: "web".into(), address: "127.0.0.1:1001".into(), weight: 4_294_967_295 });
        assert!(e.contains("weight = 4294967295 is out of range: use 1 to 256"), "{e}");
        let settings = ServiceSettings { retries: Some(1000), connect_timeout: Some(std::time::Duration::from_secs(10_000_000_000)), ..ServiceSettings::default() };
        let e = refused(Change::Settings { service: "web".into(), settings });
        assert!(e.contains("retries = 1000 is out of range: use 0 to 100"), "{e}");
        assert!(e.contains("connect_timeout = 316years"), "{e}");
        let health = Health { interval: std::time::Duration::from_secs(u64::MAX), rise: 0, ..Health::default() };
        let e = refused(Change::Health { service: "web".into(), health: Box::new(health) });
        assert!(e.contains("rise = 0 is out of range: use 1 to 1000") && e.contains("is out of range: use 10ms to 1day"), "{e}");
    }

    #[test]
    fn unknown_names_are_errors_not_panics() {
        let mut c = config();
        let e = Change::Weight { service: "nope".into(), address: "x".into(), weight: 2 }.apply(&mut c).unwrap_err().to_string();
        assert!(e.contains("no service"));
        let e = Change::RemoveServer { service: "web".into(), address: "127.0.0.1:9".into() }.apply(&mut c).unwrap_err().to_string();
        assert!(e.contains("no server"));
    }
}
