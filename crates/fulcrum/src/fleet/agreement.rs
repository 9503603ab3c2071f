//! `fulcrum fleet check`: whether every registered instance balances the same way.
//!
//! Each instance's admin API is asked for its stats; per instance, the config revision and
//! digest it runs, and per service its algorithm, the digest of its lookup table (hashing
//! algorithms) and the servers it sees up. For each of these, the value most instances report is
//! taken as the fleet's, and every instance that reports another is named with both values.
//! Beside agreement, what an instance runs degraded: a limit shared through Redis that cannot
//! reach it (the instance goes on with its own counts, or refuses with `fail = "closed"`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::snapshot::Member;

/// What one instance says of itself, as far as agreement goes.
#[derive(Debug, Default)]
pub struct Seen {
    pub name: String,
    /// Property -> value, e.g. "service web: up servers" -> "127.0.0.1:9001, 127.0.0.1:9002".
    pub facts: BTreeMap<String, String>,
    /// What it runs degraded, e.g. "limit per-client: Redis cannot be reached (...)".
    pub warnings: Vec<String>,
}

/// Reads what `member` runs from its admin API.
pub async fn ask(member: &Member, authorization: Option<&str>) -> anyhow::Result<Seen> {
    let admin = member.admin.as_deref().context("it has no admin listener")?;
    let stats = get_json(admin, "/api/stats", authorization).await?;
    let mut facts = BTreeMap::new();
    facts.insert("config revision".to_string(), stats["fleet"]["revision"].to_string());
    facts.insert("config digest".to_string(), stats["fleet"]["digest"].as_str().unwrap_or_default().to_string());
    for service in stats["services"].as_array().into_iter().flatten() {
        let name = service["name"].as_str().unwrap_or_default();
        facts.insert(format!("service {name}: algorithm"), service["algorithm"].as_str().unwrap_or_default().to_string());
        facts.insert(format!("service {name}: table digest"), service["table_digest"].as_str().unwrap_or("none").to_string());
        let up: BTreeSet<&str> = service["servers"].as_array().into_iter().flatten().filter(|s| s["state"] == "up").filter_map(|s| s["address"].as_str()).collect();
        facts.insert(format!("service {name}: up servers"), up.into_iter().collect::<Vec<_>>().join(", "));
    }
    let mut warnings = Vec::new();
    for limit in stats["limits"].as_array().into_iter().flatten() {
        let sync = &limit["sync"];
        if sync.is_object() && sync["connected"] == false {
            let name = limit["name"].as_str().unwrap_or_default();
            let error = sync["error"].as_str().unwrap_or("no answer");
            warnings.push(format!("limit {name}: Redis cannot be reached ({error}); it goes on with this instance's own counts unless fail = \"closed\""));
        }
    }
    Ok(Seen { name: member.name.clone(), facts, warnings })
}

/// Every disagreement: for each property, the instances whose value is not the one most report.
pub fn disagreements(seen: &[Seen]) -> Vec<String> {
    let properties: BTreeSet<&String> = seen.iter().flat_map(|s| s.facts.keys()).collect();
    let mut out = Vec::new();
    for property in properties {
        let mut by_value: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for s in seen {
            by_value.entry(s.facts.get(property).map_or("(no such service)", String::as_str)).or_default().push(&s.name);
        }
        if by_value.len() < 2 {
            continue;
        }
        // The most reported value is the fleet's; a tie goes to the value the first instance
        // (by name) reports, so the output is stable.
        let (common, holders) =
            by_value.iter().max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.1.first().cmp(&a.1.first()))).map(|(v, h)| (*v, h.clone())).unwrap_or_default();
        for (value, names) in &by_value {
            if *value == common {
                continue;
            }
            for name in names {
                out.push(format!("{name} differs in {property}: {value:?}, where {} {} {common:?}", holders.join(", "), if holders.len() == 1 { "has" } else { "have" }));
            }
        }
    }
    out
}

/// One GET to an admin API, its body as JSON.
async fn get_json(admin: &str, path: &str, authorization: Option<&str>) -> anyhow::Result<serde_json::Value> {
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(admin).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut request = hyper::Request::get(path).header(hyper::header::HOST, admin);
        if let Some(a) = authorization {
            request = request.header(hyper::header::AUTHORIZATION, a);
        }
        let response = sender.send_request(request.body(Empty::<Bytes>::new())?).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(status.is_success(), "{path} answered {status}: {}", String::from_utf8_lossy(&body));
        Ok::<_, anyhow::Error>(serde_json::from_slice(&body)?)
    };
    tokio::time::timeout(Duration::from_secs(5), exchange).await.with_context(|| format!("{admin} did not answer within 5 s"))?.with_context(|| format!("asking {admin}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, facts: &[(&str, &str)]) -> Seen {
        Seen { name: name.into(), facts: facts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), warnings: Vec::new() }
    }

    #[test]
    fn the_instance_in_the_minority_is_named_with_both_values() {
        let all = [
            seen("lb-1", &[("service web: up servers", "a, b"), ("config digest", "x")]),
            seen("lb-2", &[("service web: up servers", "a, b"), ("config digest", "x")]),
            seen("lb-3", &[("service web: up servers", "a"), ("config digest", "x")]),
        ];
        assert_eq!(disagreements(&all), [r#"lb-3 differs in service web: up servers: "a", where lb-1, lb-2 have "a, b""#]);
        assert!(disagreements(&all[..2]).is_empty());
    }

    #[test]
    fn a_service_one_instance_lacks_is_a_disagreement() {
        let all = [seen("lb-1", &[("service web: algorithm", "source-hash")]), seen("lb-2", &[])];
        assert_eq!(disagreements(&all), [r#"lb-2 differs in service web: algorithm: "(no such service)", where lb-1 has "source-hash""#]);
    }
}
