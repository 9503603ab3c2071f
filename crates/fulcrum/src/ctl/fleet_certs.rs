//! `fulcrum certs --fleet`: the fleet's ACME certificates as etcd holds them (with the instance
//! ordering one now, while one does), what every registered instance serves, asked at its admin
//! listener as `fulcrum fleet check` asks it, and every instance that serves another ACME
//! certificate for a set of names than the one in etcd (it has not taken the newest yet, or
//! cannot read it).

use std::fmt::Write as _;

use anyhow::Context;
use etcd_client::GetOptions;
use serde::Serialize;

use super::certs::{Row, rows, table};
use super::client::{self, Target};
use crate::fleet::snapshot::{Keys, Member};
use crate::tls::acme::store::certificate_key;

/// What `--fleet` found.
#[derive(Debug, Serialize)]
pub struct FleetCerts {
    pub prefix: String,
    /// The ACME certificates in etcd, by key.
    pub stored: Vec<StoredCert>,
    pub instances: Vec<Instance>,
    /// Each instance serving another ACME certificate than etcd's for the same names, in words.
    pub differences: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct StoredCert {
    /// `certificate_key` of its names.
    pub key: String,
    pub names: Vec<String>,
    pub issuer: String,
    pub expires: String,
    pub expires_unix: i64,
    pub expires_in_seconds: u64,
    /// The instance holding its order lock now.
    pub ordering: Option<String>,
    /// Why the stored value does not read, when it does not.
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Instance {
    pub name: String,
    pub admin: Option<String>,
    /// Why it could not be asked.
    pub error: Option<String>,
    pub certificates: Vec<Row>,
}

/// Reads etcd's ACME state and registrations, then asks each instance what it serves.
pub async fn gather(settings: &crate::config::Fleet, token: Option<String>) -> anyhow::Result<FleetCerts> {
    let keys = Keys::new(&settings.prefix);
    let mut etcd = crate::fleet::connect(settings).await.with_context(|| format!("cannot connect to etcd at {}", settings.endpoints.join(",")))?;
    let now = crate::clock::since_epoch().as_secs() as i64;
    let stored = crate::fleet::acme::list(&mut etcd, &keys)
        .await?
        .into_iter()
        .map(|l| {
            let described = l.certificate.as_ref().map(|c| crate::tls::describe_pem(&c.chain_pem, &format!("etcd key acme/certificates/{}", l.key)));
            let (info, error) = match described {
                Some(Ok(info)) => (Some(info), None),
                Some(Err(e)) => (None, Some(e.to_string())),
                None => (None, None),
            };
            let not_after = info.as_ref().map_or(0, |i| i.not_after);
            StoredCert {
                key: l.key,
                names: info.as_ref().map(|i| i.names.clone()).unwrap_or_default(),
                issuer: info.as_ref().map(|i| i.issuer.clone()).unwrap_or_default(),
                expires: if info.is_some() { crate::tls::unix_to_text(not_after) } else { String::new() },
                expires_unix: not_after,
                expires_in_seconds: not_after.saturating_sub(now).max(0) as u64,
                ordering: l.ordering,
                error,
            }
        })
        .collect::<Vec<_>>();
    let read = etcd.get(keys.members(), Some(GetOptions::new().with_prefix())).await?;
    let members: Vec<Member> = read.kvs().iter().filter_map(|kv| serde_json::from_slice(kv.value()).ok()).collect();
    let mut instances = Vec::with_capacity(members.len());
    for m in members {
        let asked = match &m.admin {
            Some(admin) => ask(&Target::Listener { authority: admin.clone(), token: token.clone() }, &m.name).await,
            None => Err(anyhow::anyhow!("it has no admin listener")),
        };
        let (certificates, error) = match asked {
            Ok(rows) => (rows, None),
            Err(e) => (Vec::new(), Some(format!("{e:#}"))),
        };
        instances.push(Instance { name: m.name, admin: m.admin, error, certificates });
    }
    let differences = differences(&stored, &instances);
    Ok(FleetCerts { prefix: settings.prefix.clone(), stored, instances, differences })
}

async fn ask(target: &Target, instance: &str) -> anyhow::Result<Vec<Row>> {
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), client::request(target, "GET", "/api/stats", None))
        .await
        .map_err(|_| anyhow::anyhow!("the {target} did not answer within 5 s"))??;
    anyhow::ensure!((200..300).contains(&answer.status), "the {target} answered {}", answer.status);
    let mut rows = rows(&answer.json());
    for r in &mut rows {
        r.instance = Some(instance.to_string());
    }
    Ok(rows)
}

/// Every ACME certificate an instance serves whose expiry is not that of etcd's for its names.
fn differences(stored: &[StoredCert], instances: &[Instance]) -> Vec<String> {
    let mut out = Vec::new();
    for i in instances {
        for r in i.certificates.iter().filter(|r| r.source == "acme" && r.note.is_none()) {
            let key = certificate_key(&r.names);
            let Some(s) = stored.iter().find(|s| s.key == key && s.error.is_none()) else { continue };
            if s.expires_unix != r.expires_unix {
                out.push(format!("{} serves for {} a certificate that expires {}; etcd holds one that expires {}", i.name, r.names.join(","), r.expires, s.expires));
            }
        }
    }
    out
}

/// The fleet's certificates for a person: etcd's, then every instance's, then what differs.
pub fn show(seen: &FleetCerts) -> String {
    let mut out = String::new();
    let n = seen.stored.len();
    let _ = writeln!(out, "fleet {}: {n} ACME certificate{} in etcd", seen.prefix, if n == 1 { "" } else { "s" });
    for s in &seen.stored {
        let state = match (&s.error, s.expires.is_empty()) {
            (Some(e), _) => format!("does not read: {e}"),
            (None, true) => "none issued yet".to_string(),
            (None, false) => format!("issuer {}, not after {} ({} days left)", s.issuer, s.expires, s.expires_in_seconds / 86_400),
        };
        let ordering = s.ordering.as_ref().map(|o| format!("; {o} orders it now")).unwrap_or_default();
        let _ = writeln!(out, "  {}: {state}{ordering}", s.key);
    }
    let rows: Vec<Row> = seen.instances.iter().flat_map(|i| i.certificates.iter().cloned()).collect();
    let _ = writeln!(out, "{} instance{} registered", seen.instances.len(), if seen.instances.len() == 1 { "" } else { "s" });
    out.push_str(&table(&rows));
    for i in &seen.instances {
        if let Some(e) = &i.error {
            let _ = writeln!(out, "{} cannot be asked: {e}", i.name);
        }
    }
    for d in &seen.differences {
        let _ = writeln!(out, "{d}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(instance: &str, names: &[&str], expires_unix: i64) -> Row {
        Row {
            instance: Some(instance.into()),
            names: names.iter().map(|n| n.to_string()).collect(),
            source: "acme".into(),
            expires: format!("at {expires_unix}"),
            expires_unix,
            ..Row::default()
        }
    }

    #[test]
    fn an_instance_serving_another_acme_certificate_than_etcd_s_is_named() {
        let stored = [StoredCert {
            key: "a.test,b.test".into(),
            names: vec!["a.test".into(), "b.test".into()],
            issuer: "CN=CA".into(),
            expires: "at 200".into(),
            expires_unix: 200,
            expires_in_seconds: 0,
            ordering: None,
            error: None,
        }];
        let instance = |name: &str, expires: i64| Instance { name: name.into(), admin: None, error: None, certificates: vec![row(name, &["b.test", "a.test"], expires)] };
        let found = differences(&stored, &[instance("lb-1", 200), instance("lb-2", 100)]);
        assert_eq!(found, ["lb-2 serves for b.test,a.test a certificate that expires at 100; etcd holds one that expires at 200"]);
    }
}
