//! An edit from this instance's API, written to etcd for the whole fleet.
//!
//! The edit is applied to the config running here and validated as a file would be; each service
//! it changed is then written back as the fleet holds it (this instance's overrides restored,
//! discovered servers left out) in one transaction that also writes the `revision` marker and an
//! audit entry. The transaction holds only if neither the marker nor any written key changed after
//! the revision the running config was read at: a stale edit is refused with who changed what
//! since, never written over it. The edit then reaches this instance through the watch, like
//! every other, and the answer waits for that.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::audit::{Outcome, Record, Source};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::snapshot::{Discovered, Key, Keys, Stored};
use super::{Fleet, FleetError};
use crate::admin::Editor;
use crate::config::{self, Change, Config, Service};

/// How long an answer waits for the watch to bring the write back here.
const APPLIED_WITHIN: Duration = Duration::from_secs(5);

impl Fleet {
    /// Writes `change` to the config running here (`running`) to the fleet on behalf of `by`,
    /// and waits until it runs here.
    pub async fn change(&self, running: &Config, change: Change, by: &Editor) -> Result<String, FleetError> {
        let _one_at_a_time = self.writing.lock().await;
        let (mut client, snapshot) = {
            let state = self.state.lock().map_err(|_| FleetError::Poisoned)?;
            let Some(client) = state.client.clone() else {
                return Err(FleetError::Disconnected(state.lost.clone().unwrap_or_else(|| "not connected yet".into())));
            };
            (client, state.snapshot.clone())
        };
        // The revision first, then the config: a config newer than its revision only makes the
        // compare stricter. A sender that says what it saw is held to that.
        let applied = *self.applied.borrow();
        let based_on = by.based_on.map_or(applied, |seen| seen.min(applied));
        let before = running.clone();
        let what = change.summary();
        let mut next = before.clone();
        change.apply(&mut next)?;
        // Validated in memory against what runs (lookups only of addresses that are new).
        let running = before.clone();
        let next = tokio::task::spawn_blocking(move || config::revalidate_against(next, &running)).await?.map_err(FleetError::ChangeRefused)?;
        let overrides = self.local.lock().map_err(|_| FleetError::Poisoned)?.fleet.as_ref().map(|f| f.overrides.clone()).unwrap_or_default();

        let marker = self.keys.marker();
        let unchanged_since = |key: String| Compare::mod_revision(key, CompareOp::Less, based_on + 1);
        let mut compares = vec![unchanged_since(marker.clone())];
        let mut ops = Vec::new();
        for after in &next.services {
            let old = before.services.iter().find(|s| s.name == after.name);
            if old == Some(after) {
                continue;
            }
            let text = shared_text(after, old, snapshot.services.get(&after.name), overrides.get(&after.name), snapshot.discovered.get(&after.name))?;
            let key = self.keys.service(&after.name);
            compares.push(unchanged_since(key.clone()));
            ops.push(TxnOp::put(key, text, None));
        }
        for gone in before.services.iter().filter(|s| !next.services.iter().any(|n| n.name == s.name)) {
            let key = self.keys.service(&gone.name);
            compares.push(unchanged_since(key.clone()));
            ops.push(TxnOp::delete(key, None));
        }
        if ops.is_empty() {
            return Ok("nothing to change: the fleet's services are already so".into());
        }
        let written = ops.len();
        let mut audit = Record::now(by.who.clone(), Source::Api, what.clone(), Outcome::Applied, "written to the fleet").with_diff(config::audit::diff(
            &config::to_toml(&before),
            &config::to_toml(&next),
            ("before", "after"),
        ));
        audit.instance = Some(self.name.clone());
        audit.based_on = Some(based_on);
        audit.services = Some(written);
        ops.push(TxnOp::put(marker.clone(), self.name.clone(), None));
        ops.push(TxnOp::put(self.keys.audit(u128::from(audit.unix_ms), &self.name), serde_json::to_string(&audit).unwrap_or_default(), None));
        let response = client.txn(Txn::new().when(compares).and_then(ops)).await?;
        if !response.succeeded() {
            let current = client.get(marker, None).await?;
            let (now, by) = current.kvs().first().map_or((0, "a direct etcd write".to_string()), |kv| (kv.mod_revision(), String::from_utf8_lossy(kv.value()).into_owned()));
            return Err(FleetError::Stale { based_on, now: now.max(based_on + 1), by });
        }
        let revision = response.header().map_or(0, |h| h.revision());
        let mut applied = self.applied.subscribe();
        let here = tokio::time::timeout(APPLIED_WITHIN, applied.wait_for(|r| *r >= revision)).await;
        Ok(match here {
            Ok(Ok(_)) => format!("{what}: written to the fleet at etcd revision {revision} ({written} service key{}) and applied here", if written == 1 { "" } else { "s" }),
            _ => {
                let why = self.state.lock().ok().and_then(|s| s.refused.clone()).unwrap_or_else(|| "the watch has not brought it back yet".into());
                format!("{what}: written to the fleet at etcd revision {revision}; not applied here within {}s: {why}", APPLIED_WITHIN.as_secs())
            }
        })
    }
}

/// Replaces the fleet's services with `services` in one transaction, with an audit entry naming
/// `who` and `what`; returns the etcd revision written. etcd refuses a put and a delete of one key
/// in a transaction, so the services to drop are read and deleted one by one, and a compare makes
/// the read and the write one: a service written in between fails the import, which can be run
/// again.
pub async fn replace_services(client: &mut Client, keys: &Keys, services: &[Service], who: &str, what: &str) -> Result<i64, FleetError> {
    let read = client.get(keys.services(), Some(GetOptions::new().with_prefix().with_keys_only())).await?;
    let based_on = read.header().map_or(0, |h| h.revision());
    let mut ops = Vec::new();
    for kv in read.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        if let Key::Service(name) = keys.classify(&key)
            && !services.iter().any(|s| s.name == name)
        {
            ops.push(TxnOp::delete(kv.key(), None));
        }
    }
    for s in services {
        let mut table = toml::Table::try_from(s).map_err(|e| FleetError::Encode { service: s.name.clone(), cause: e.to_string() })?;
        table.remove("name");
        let text = toml::to_string_pretty(&table).map_err(|e| FleetError::Encode { service: s.name.clone(), cause: e.to_string() })?;
        ops.push(TxnOp::put(keys.service(&s.name), text, None));
    }
    let mut audit = Record::now(who, Source::File, what, Outcome::Applied, format!("{} imported", crate::config::services(services.len())));
    audit.instance = Some("fulcrum fleet import".into());
    audit.services = Some(services.len());
    ops.push(TxnOp::put(keys.marker(), "fulcrum fleet import", None));
    ops.push(TxnOp::put(keys.audit(u128::from(audit.unix_ms), "import"), serde_json::to_string(&audit).unwrap_or_default(), None));
    let unchanged = Compare::mod_revision(keys.services(), CompareOp::Less, based_on + 1).with_prefix();
    let response = client.txn(Txn::new().when([unchanged]).and_then(ops)).await?;
    if !response.succeeded() {
        return Err(FleetError::Stale { based_on, now: based_on + 1, by: "another writer, while the services were being replaced".into() });
    }
    Ok(response.header().map_or(0, |h| h.revision()))
}

/// A service as the fleet holds it: as edited here, without this instance's overrides and
/// without the servers that joined by themselves, which are not this edit's to write.
fn shared_text(
    after: &Service,
    before: Option<&Service>,
    stored: Option<&Stored>,
    overrides: Option<&toml::Table>,
    discovered: Option<&BTreeMap<String, Discovered>>,
) -> Result<String, FleetError> {
    let encode = |s: &Service| toml::Table::try_from(s).map_err(|e| FleetError::Encode { service: after.name.clone(), cause: e.to_string() });
    let mut table = encode(after)?;
    table.remove("name");
    if let (Some(overrides), Some(stored)) = (overrides, stored) {
        let before = before.map(encode).transpose()?;
        let shared: toml::Table = toml::from_str(&stored.text).unwrap_or_default();
        for key in overrides.keys() {
            if before.as_ref().and_then(|b| b.get(key)) != table.get(key) {
                return Err(FleetError::Overridden { service: after.name.clone(), key: key.clone() });
            }
            match shared.get(key) {
                Some(v) => table.insert(key.clone(), v.clone()),
                None => table.remove(key),
            };
        }
    }
    if let Some(found) = discovered {
        for address in found.keys() {
            let now = after.servers.iter().find(|s| &s.address == address);
            let was = before.and_then(|b| b.servers.iter().find(|s| &s.address == address));
            if now != was {
                return Err(FleetError::Discovered { service: after.name.clone(), address: address.clone() });
            }
        }
        if let Some(servers) = table.get_mut("server").and_then(|s| s.as_array_mut()) {
            servers.retain(|s| s.get("address").and_then(|a| a.as_str()).is_none_or(|a| !found.contains_key(a)));
        }
    }
    toml::to_string_pretty(&table).map_err(|e| FleetError::Encode { service: after.name.clone(), cause: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Resolve, parse_with};

    fn service(text: &str) -> Service {
        parse_with(text, "t", Resolve::No).unwrap().services.remove(0)
    }

    const WEB: &str =
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\n[[service.server]]\naddress = \"127.0.0.1:9001\"\n[[service.server]]\naddress = \"127.0.0.1:9002\"\n";

    #[test]
    fn an_override_is_written_back_as_the_fleet_has_it_and_cannot_be_edited_through_the_fleet() {
        let before = service(WEB);
        let stored = Stored { text: "listen = \"0.0.0.0:80\"\n[[server]]\naddress = \"127.0.0.1:9001\"\n".into(), mod_revision: 3 };
        let overrides: toml::Table = toml::from_str("listen = \"127.0.0.1:18080\"").unwrap();
        let mut after = before.clone();
        after.servers[0].weight = 4;
        let text = shared_text(&after, Some(&before), Some(&stored), Some(&overrides), None).unwrap();
        assert!(text.contains("listen = \"0.0.0.0:80\"") && !text.contains("name ="), "{text}");
        assert!(text.contains("weight = 4"), "{text}");

        after.listen = "127.0.0.1:18081".into();
        let e = shared_text(&after, Some(&before), Some(&stored), Some(&overrides), None).unwrap_err().to_string();
        assert!(e.contains("listen of service \"web\" is this instance's own"), "{e}");
    }

    #[test]
    fn discovered_servers_are_left_out_and_cannot_be_edited_through_the_fleet() {
        let before = service(WEB);
        let found = BTreeMap::from([("127.0.0.1:9002".to_string(), Discovered { weight: 1 })]);
        let mut after = before.clone();
        after.algorithm = config::Algorithm::LeastConn;
        let text = shared_text(&after, Some(&before), None, None, Some(&found)).unwrap();
        assert!(text.contains("127.0.0.1:9001") && !text.contains("127.0.0.1:9002"), "{text}");
        after.servers[1].weight = 9;
        let e = shared_text(&after, Some(&before), None, None, Some(&found)).unwrap_err().to_string();
        assert!(e.contains("joined by itself"), "{e}");
    }
}
