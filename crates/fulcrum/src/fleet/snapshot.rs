//! What the fleet keeps in etcd, as this instance last read it, and how it becomes a config.
//!
//! Under the fleet's prefix:
//! - `services/NAME`: one service, its TOML table without `name` (the key names it);
//! - `revision`: touched by every config write, so a write can compare one key to know
//!   whether anything changed since the revision it was based on;
//! - `audit/TIME-INSTANCE`: who changed what, when (JSON);
//! - `members/NAME`: each running instance, under its lease (JSON, [`Member`]);
//! - `discovery/SERVICE/ADDRESS`: a server that joined by itself, under its own lease
//!   (JSON `{"weight": N}`, or empty for weight 1);
//! - `acme/...`: ACME's account, certificates, challenges and order locks (`fleet::acme`), which
//!   are no part of the config.
//!
//! The snapshot is rebuilt from one range read and then kept by the watch's events, so a
//! service's text, its `mod_revision` and the discovered servers are always those of one etcd
//! revision.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{self, Config, Diagnostics};

/// The keys of one fleet.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// Which part of the fleet a key belongs to.
#[derive(Debug, PartialEq, Eq)]
pub enum Key<'a> {
    Service(&'a str),
    Marker,
    Member(&'a str),
    Discovered { service: &'a str, address: &'a str },
    Audit,
    Other,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys { prefix: prefix.trim_end_matches('/').to_string() }
    }
    /// Everything of this fleet: what the watch and the first read cover.
    pub fn all(&self) -> String {
        format!("{}/", self.prefix)
    }
    pub fn services(&self) -> String {
        format!("{}/services/", self.prefix)
    }
    pub fn service(&self, name: &str) -> String {
        format!("{}/services/{name}", self.prefix)
    }
    pub fn marker(&self) -> String {
        format!("{}/revision", self.prefix)
    }
    pub fn members(&self) -> String {
        format!("{}/members/", self.prefix)
    }
    pub fn member(&self, name: &str) -> String {
        format!("{}/members/{name}", self.prefix)
    }
    pub fn audit(&self, unix_ms: u128, instance: &str) -> String {
        format!("{}/audit/{unix_ms:016}-{instance}", self.prefix)
    }
    pub fn audits(&self) -> String {
        format!("{}/audit/", self.prefix)
    }
    /// ACME's state (`fleet::acme` names what is under it).
    pub fn acme(&self) -> String {
        format!("{}/acme/", self.prefix)
    }
    pub fn discovered(&self, service: &str, address: &str) -> String {
        format!("{}/discovery/{service}/{address}", self.prefix)
    }

    pub fn classify<'a>(&self, key: &'a str) -> Key<'a> {
        let Some(rest) = key.strip_prefix(&self.prefix).and_then(|r| r.strip_prefix('/')) else { return Key::Other };
        if rest == "revision" {
            return Key::Marker;
        }
        let Some((kind, name)) = rest.split_once('/') else { return Key::Other };
        match kind {
            "services" if !name.is_empty() && !name.contains('/') => Key::Service(name),
            "members" if !name.is_empty() => Key::Member(name),
            "audit" => Key::Audit,
            "discovery" => match name.split_once('/') {
                Some((service, address)) if !service.is_empty() && !address.is_empty() => Key::Discovered { service, address },
                _ => Key::Other,
            },
            _ => Key::Other,
        }
    }
}

/// One service as etcd holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub text: String,
    pub mod_revision: i64,
}

/// A running instance, as it registers itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub version: String,
    /// Where its admin API listens, if it has one (`fleet check` reads it there).
    pub admin: Option<String>,
    /// The etcd revision of the config it runs, and that config's digest.
    pub revision: i64,
    pub digest: String,
    /// Unix seconds.
    pub started: u64,
}

/// A server that joined by itself under `discovery/`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Discovered {
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// The fleet's keys at one etcd revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The etcd revision this snapshot is as of.
    pub revision: i64,
    /// The newest revision at which the config (services, discovered servers, the marker)
    /// changed: the revision an instance running this snapshot reports and an edit compares.
    pub config_revision: i64,
    pub services: BTreeMap<String, Stored>,
    /// Per service, per address.
    pub discovered: BTreeMap<String, BTreeMap<String, Discovered>>,
    pub members: BTreeMap<String, Member>,
    /// Members whose registration ended while this instance watched (lease expired or revoked),
    /// with when (unix seconds): shown as gone until they register again.
    pub gone: BTreeMap<String, (Member, u64)>,
    /// Keys that did not read (a member or discovery value that is not JSON): named in the log
    /// once, left out of everything else.
    pub unreadable: Vec<String>,
}

impl Snapshot {
    /// Takes one key's new value (`None`: deleted, at `mod_revision`); says whether the config
    /// changed.
    pub fn set(&mut self, keys: &Keys, key: &str, value: Option<&[u8]>, mod_revision: i64) -> bool {
        let config = self.take(keys, key, value, mod_revision);
        if config {
            self.config_revision = self.config_revision.max(mod_revision);
        }
        config
    }

    fn take(&mut self, keys: &Keys, key: &str, value: Option<&[u8]>, mod_revision: i64) -> bool {
        match keys.classify(key) {
            Key::Service(name) => {
                match value {
                    Some(v) => {
                        let text = String::from_utf8_lossy(v).into_owned();
                        self.services.insert(name.to_string(), Stored { text, mod_revision });
                    }
                    None => {
                        self.services.remove(name);
                    }
                }
                true
            }
            Key::Discovered { service, address } => {
                let servers = self.discovered.entry(service.to_string()).or_default();
                let parsed = value.map(|v| if v.iter().all(u8::is_ascii_whitespace) { Ok(Discovered { weight: 1 }) } else { serde_json::from_slice::<Discovered>(v) });
                match parsed {
                    Some(Ok(d)) => {
                        servers.insert(address.to_string(), d);
                    }
                    Some(Err(_)) => {
                        self.unreadable.push(key.to_string());
                        servers.remove(address);
                    }
                    None => {
                        servers.remove(address);
                    }
                }
                if servers.is_empty() {
                    self.discovered.remove(service);
                }
                true
            }
            Key::Member(name) => {
                match value.map(serde_json::from_slice::<Member>) {
                    Some(Ok(m)) => {
                        self.gone.remove(name);
                        self.members.insert(name.to_string(), m);
                    }
                    Some(Err(_)) => self.unreadable.push(key.to_string()),
                    None => {
                        if let Some(m) = self.members.remove(name) {
                            let now = crate::clock::since_epoch().as_secs();
                            self.gone.insert(name.to_string(), (m, now));
                        }
                    }
                }
                false
            }
            Key::Marker => true,
            Key::Audit | Key::Other => false,
        }
    }

    /// A digest of what every instance composes its services from: two instances with the same
    /// digest run the same shared config, whatever revisions their reads happened at.
    pub fn digest(&self) -> String {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for (name, s) in &self.services {
            h.update(name.as_bytes());
            h.update(&[0]);
            h.update(s.text.as_bytes());
            h.update(&[0]);
        }
        for (service, servers) in &self.discovered {
            for (address, d) in servers {
                h.update(format!("{service}\0{address}\0{}\0", d.weight).as_bytes());
            }
        }
        format!("{:016x}", h.digest())
    }

    /// This instance's config: the local file's settings, the fleet's services with this
    /// instance's overrides merged in, and the discovered servers added. Validated like a file.
    pub fn compose(&self, local: &Config) -> Result<Config, Diagnostics> {
        let overrides = local.fleet.as_ref().map(|f| &f.overrides);
        let mut services = Vec::with_capacity(self.services.len());
        for (name, stored) in &self.services {
            let key = format!("services/{name} (etcd revision {})", stored.mod_revision);
            let mut table: toml::Table = toml::from_str(&stored.text).map_err(|e| single(&key, format!("not a TOML table: {}", e.message())))?;
            if let Some(written) = table.get("name").and_then(|n| n.as_str())
                && written != name
            {
                return Err(single(&key, format!("names service {written:?}, but its key names {name:?}")));
            }
            table.insert("name".into(), name.clone().into());
            for (k, v) in overrides.and_then(|o| o.get(name)).into_iter().flatten() {
                table.insert(k.clone(), v.clone());
            }
            if let Some(found) = self.discovered.get(name) {
                let servers = table.entry("server").or_insert_with(|| toml::Value::Array(Vec::new()));
                let Some(servers) = servers.as_array_mut() else { return Err(single(&key, "server is not an array of tables".into())) };
                for (address, d) in found {
                    let mut server = toml::Table::new();
                    server.insert("address".into(), address.clone().into());
                    server.insert("weight".into(), i64::from(d.weight).into());
                    servers.push(server.into());
                }
            }
            services.push(table.try_into().map_err(|e: toml::de::Error| single(&key, e.message().to_string()))?);
        }
        let mut config = local.clone();
        config.fleet = None;
        config.services = services;
        // ACME's state is the fleet's, in etcd: no `storage` is needed.
        config::revalidate_in(&config, config::Scope::Fleet)
    }
}

fn single(file: &str, message: String) -> Diagnostics {
    Diagnostics::single(config::Diagnostic { file: file.into(), line: 0, column: 0, message, hint: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Config {
        let text = "[fleet]\nendpoints = [\"http://127.0.0.1:2379\"]\n[fleet.override.web]\nlisten = \"127.0.0.1:18080\"\n";
        config::parse_with(text, "local", config::Resolve::No).unwrap()
    }

    #[test]
    fn keys_are_told_apart_by_their_place_under_the_prefix() {
        let k = Keys::new("/fulcrum/prod/");
        assert_eq!(k.service("web"), "/fulcrum/prod/services/web");
        assert_eq!(k.classify("/fulcrum/prod/services/web"), Key::Service("web"));
        assert_eq!(k.classify("/fulcrum/prod/revision"), Key::Marker);
        assert_eq!(k.classify("/fulcrum/prod/discovery/web/10.0.0.1:80"), Key::Discovered { service: "web", address: "10.0.0.1:80" });
        assert_eq!(k.classify("/fulcrum/prod/members/lb-1"), Key::Member("lb-1"));
        assert_eq!(k.classify("/fulcrum/prodx/services/web"), Key::Other);
        assert_eq!(k.classify("/fulcrum/prod/services/a/b"), Key::Other);
    }

    #[test]
    fn overrides_and_discovered_servers_are_merged_and_the_digest_ignores_overrides() {
        let k = Keys::new("/f");
        let mut s = Snapshot::default();
        let web = "listen = \"0.0.0.0:80\"\nalgorithm = \"least-conn\"\n[[server]]\naddress = \"127.0.0.1:9001\"\n";
        assert!(s.set(&k, "/f/services/web", Some(web.as_bytes()), 5));
        assert!(s.set(&k, "/f/discovery/web/127.0.0.1:9002", Some(br#"{"weight": 3}"#), 6));
        assert!(!s.set(&k, "/f/members/lb-1", Some(b"not json"), 7));
        assert_eq!(s.unreadable, ["/f/members/lb-1"]);
        let c = s.compose(&local()).unwrap();
        let web = &c.services[0];
        assert_eq!((web.name.as_str(), web.listen.as_str()), ("web", "127.0.0.1:18080"));
        assert_eq!(web.servers.iter().map(|s| (s.address.as_str(), s.weight)).collect::<Vec<_>>(), [("127.0.0.1:9001", 1), ("127.0.0.1:9002", 3)]);
        assert!(c.fleet.is_none());

        let digest = s.digest();
        assert!(s.set(&k, "/f/discovery/web/127.0.0.1:9002", None, 8));
        assert_ne!(s.digest(), digest);
        assert!(s.discovered.is_empty());
    }

    #[test]
    fn a_service_that_does_not_read_is_refused_naming_its_key() {
        let k = Keys::new("/f");
        let mut s = Snapshot::default();
        s.set(&k, "/f/services/web", Some(b"listen = "), 9);
        let e = s.compose(&local()).unwrap_err().to_string();
        assert!(e.contains("services/web (etcd revision 9)") && e.contains("not a TOML table"), "{e}");
        s.set(&k, "/f/services/web", Some(b"name = \"api\"\nlisten = \"127.0.0.1:1\"\n"), 10);
        let e = s.compose(&local()).unwrap_err().to_string();
        assert!(e.contains("names service \"api\", but its key names \"web\""), "{e}");
    }
}
