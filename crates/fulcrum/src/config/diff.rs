//! What an edit or reload changes: `diff(old, new)` names the services it adds, removes and
//! changes, within a changed service the pools whose settings or servers changed, and the shared
//! pools (`[[pool]]`) added, removed or changed. The live
//! state rebuilds only what it names (`live::build`), so everything else keeps its balancer state
//! (round-robin cursor, Maglev table), its resolved addresses and its certificates, and the
//! health checks of servers it does not touch go on with their streaks.

use std::collections::{HashMap, HashSet};

use super::{Config, Service};

/// A config change, by service name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Services whose config differs in any way, with what differs.
    pub changed: Vec<ServiceDiff>,
    /// Shared pools (`[[pool]]`) added, removed or changed, by name.
    pub pools: Vec<String>,
    /// Whether anything outside `[[service]]` and `[[pool]]` changed (`maxconn`, `dns`, `admin`, ...).
    pub global: bool,
}

/// What differs in one service.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServiceDiff {
    pub name: String,
    /// The service's own settings or servers (its default pool).
    pub own: bool,
    /// Routed pools added, removed or changed, by name.
    pub pools: Vec<String>,
}

impl Diff {
    /// Whether the configs are the same.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty() && self.pools.is_empty() && !self.global
    }

    /// One line for the log and the API's answer: `1 service changed (web), 1 added`.
    pub fn describe(&self) -> String {
        if self.is_empty() {
            return "nothing changed".into();
        }
        let mut parts = Vec::new();
        if !self.changed.is_empty() {
            let what: Vec<String> = self.changed.iter().map(|c| c.name.clone()).collect();
            parts.push(format!("{} changed ({})", super::services(self.changed.len()), what.join(", ")));
        }
        if !self.added.is_empty() {
            parts.push(format!("{} added", super::services(self.added.len())));
        }
        if !self.removed.is_empty() {
            parts.push(format!("{} removed", super::services(self.removed.len())));
        }
        if !self.pools.is_empty() {
            let n = self.pools.len();
            parts.push(format!("{n} shared pool{} changed ({})", if n == 1 { "" } else { "s" }, self.pools.join(", ")));
        }
        if self.global {
            parts.push("global settings changed".into());
        }
        parts.join(", ")
    }
}

/// What differs between `old` and `new`.
pub fn diff(old: &Config, new: &Config) -> Diff {
    let mut d = Diff::default();
    let before: HashMap<&str, &Service> = old.services.iter().map(|s| (s.name.as_str(), s)).collect();
    let after: HashSet<&str> = new.services.iter().map(|s| s.name.as_str()).collect();
    for s in &new.services {
        match before.get(s.name.as_str()) {
            None => d.added.push(s.name.clone()),
            Some(o) if *o != s => d.changed.push(service_diff(o, s)),
            Some(_) => {}
        }
    }
    d.removed = old.services.iter().filter(|o| !after.contains(o.name.as_str())).map(|o| o.name.clone()).collect();
    d.pools = new.pools.iter().filter(|p| old.shared(&p.name) != Some(p)).map(|p| p.name.clone()).collect();
    d.pools.extend(old.pools.iter().filter(|o| new.shared(&o.name).is_none()).map(|o| o.name.clone()));
    d.global = old.settings() != new.settings();
    d
}

impl Config {
    /// The config without its services and shared pools: the process's own settings, cloned
    /// alone rather than with the thousands of services a large config has (every edit compares
    /// them, and the audit writes them out when they changed).
    pub fn settings(&self) -> Config {
        // Every field named, so a new one is not left out of the comparison.
        let Config { workers, reuse_port, shutdown_grace, resolve_interval, maxconn, user, group, keep_capabilities, allow_root, admin, dns, audit, fleet, pools: _, services: _ } =
            self;
        Config {
            workers: *workers,
            reuse_port: *reuse_port,
            shutdown_grace: *shutdown_grace,
            resolve_interval: *resolve_interval,
            maxconn: *maxconn,
            user: user.clone(),
            group: group.clone(),
            keep_capabilities: keep_capabilities.clone(),
            allow_root: *allow_root,
            admin: admin.clone(),
            dns: dns.clone(),
            audit: audit.clone(),
            fleet: fleet.clone(),
            pools: Vec::new(),
            services: Vec::new(),
        }
    }
}

fn service_diff(old: &Service, new: &Service) -> ServiceDiff {
    let mut pools: Vec<String> = new.pools.iter().filter(|p| old.pools.iter().find(|o| o.name == p.name) != Some(p)).map(|p| p.name.clone()).collect();
    pools.extend(old.pools.iter().filter(|o| !new.pools.iter().any(|p| p.name == o.name)).map(|o| o.name.clone()));
    let own = Service { pools: Vec::new(), ..old.clone() } != Service { pools: Vec::new(), ..new.clone() };
    ServiceDiff { name: new.name.clone(), own, pools }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        super::super::parse(text, "t.toml").unwrap()
    }

    const BASE: &str = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n\
                        [[service.pool]]\nname = \"api\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n\
                        [[service.route]]\npool = \"api\"\npath_prefix = [\"/api\"]\n\
                        [[service]]\nname = \"b\"\nlisten = \"127.0.0.1:2000\"\n[[service.server]]\naddress = \"127.0.0.1:2001\"\n";

    #[test]
    fn the_same_config_differs_in_nothing() {
        let d = diff(&config(BASE), &config(BASE));
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(d.describe(), "nothing changed");
    }

    #[test]
    fn a_weight_names_its_service_and_nothing_else() {
        let edited = BASE.replace("address = \"127.0.0.1:2001\"\n", "address = \"127.0.0.1:2001\"\nweight = 3\n");
        let d = diff(&config(BASE), &config(&edited));
        assert_eq!(d.changed, vec![ServiceDiff { name: "b".into(), own: true, pools: vec![] }]);
        assert!(d.added.is_empty() && d.removed.is_empty() && !d.global);
        assert_eq!(d.describe(), "1 service changed (b)");
    }

    #[test]
    fn a_routed_pools_server_names_that_pool_only() {
        let edited = BASE.replace("address = \"127.0.0.1:1002\"\n", "address = \"127.0.0.1:1002\"\nweight = 2\n");
        let d = diff(&config(BASE), &config(&edited));
        assert_eq!(d.changed, vec![ServiceDiff { name: "a".into(), own: false, pools: vec!["api".into()] }]);
    }

    #[test]
    fn a_shared_pools_server_names_that_pool_and_no_service() {
        let shared = "[[pool]]\nname = \"back\"\n[[pool.server]]\naddress = \"127.0.0.1:3001\"\n";
        let base = format!("{shared}{}", BASE.replace("name = \"b\"\n", "name = \"b\"\ndefault_pool = \"back\"\n"));
        let edited = base.replace("address = \"127.0.0.1:3001\"\n", "address = \"127.0.0.1:3001\"\nweight = 2\n");
        let d = diff(&config(&base), &config(&edited));
        assert!(d.changed.is_empty() && !d.global, "{d:?}");
        assert_eq!(d.pools, vec!["back".to_string()]);
        assert_eq!(d.describe(), "1 shared pool changed (back)");
    }

    #[test]
    fn services_added_and_removed_and_global_settings_are_named() {
        let edited = format!("maxconn = 10\n{}", BASE.replace("name = \"b\"", "name = \"c\""));
        let d = diff(&config(BASE), &config(&edited));
        assert_eq!((d.added, d.removed, d.global), (vec!["c".to_string()], vec!["b".to_string()], true));
    }
}
