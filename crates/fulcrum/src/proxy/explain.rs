//! "Why this server?": what Fulcrum would do right now for a request from a given client (and
//! path, host and cookie in HTTP mode; the TLS server name in TCP mode with pass-through
//! routes), and why: the routes tried, the pool, the algorithm's
//! inputs (weights, ramps, loads, ratios, the hash key and its table slot, the affinity cookie),
//! every server skipped with its reason, and the pick. `GET /api/explain` serves it.
//!
//! The pick is the algorithm's own, as a request now would get it, but only looked at
//! (`Balancer::peek`): no rotation moves on, no control step is taken, nothing is counted and no
//! connection is made, so asking changes nothing of what requests get. A random algorithm's
//! answer is one draw of the moment.
//!
//! [`recent`] reads what the data path did instead: the last picks each pool kept
//! (`live::why`), served by `GET /api/explain/recent`.

use std::net::IpAddr;

use hyper::header::{self, HeaderMap, HeaderValue};
use serde::Serialize;

use crate::config::{Algorithm, Mode};
use crate::live::{Avoid, Pool, Service, State};

use super::http::{affinity, route};
use super::passthrough;

/// The request to explain.
#[derive(Debug, Clone, Default)]
pub struct Question {
    pub client: Option<IpAddr>,
    pub path: Option<String>,
    pub host: Option<String>,
    /// The `Cookie` header the client would send.
    pub cookie: Option<String>,
    /// The server name of the client's TLS hello: what pass-through routes (TCP mode) and
    /// `sni` conditions (HTTP mode) read.
    pub sni: Option<String>,
    /// The request's method; GET when not given.
    pub method: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Explanation {
    pub service: String,
    pub client: IpAddr,
    /// HTTP mode, and TCP mode with pass-through routes: each route in order, whether it took the
    /// request and, if not, why.
    pub routes: Vec<RouteCheck>,
    /// The pool that serves it: `default` for the service's own servers.
    pub pool: String,
    /// The pool is a shared `[[pool]]`: its servers, counts and balancer are those of every
    /// service that names it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    pub algorithm: &'static str,
    /// Hashing algorithms: what was hashed, and where it landed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<HashKey>,
    /// `cookie`: the server the client's cookie names, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<AffinityCheck>,
    pub candidates: Vec<Candidate>,
    /// `all_down = "use-all"` in force: health is ignored for this pick.
    pub panic: bool,
    pub pick: Option<String>,
    pub why: String,
}

#[derive(Debug, Serialize)]
pub struct RouteCheck {
    /// The pool it names, or `default`.
    pub pool: String,
    pub taken: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    /// What the route does to a request it takes, in the order it does it (`deny 403`,
    /// `redirect 301 https://...`, `strip_prefix /api`, `request header set x-a`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct HashKey {
    /// What was hashed, e.g. `client 127.0.0.9` or `path /a`.
    pub of: String,
    pub hash: String,
    pub slot: usize,
    /// The primary server that owns the slot (the pick walks on when it is skipped).
    pub owner: String,
}

#[derive(Debug, Serialize)]
pub struct AffinityCheck {
    pub cookie: Option<String>,
    /// The server whose id the cookie carries, when one of the pool's has it.
    pub server: Option<String>,
    pub usable: bool,
}

#[derive(Debug, Serialize)]
pub struct Candidate {
    pub address: String,
    pub backup: bool,
    pub state: State,
    /// Who put it in its state when it is not up (`agent`, `operator`, `check`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_by: Option<&'static str>,
    pub weight: u32,
    /// The weight it takes traffic by now (its agent's percentage and slow start scale it).
    pub effective_weight: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ramp_percent: Option<u32>,
    /// Connections (HTTP: requests) in flight, and its `maxconn` (0: none).
    pub active: u64,
    pub maxconn: u32,
    /// Why the pick passes it over; `None` for a server it may take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r: Option<f64>,
    pub ewma_connect_ms: f64,
}

/// Why a question cannot be explained: it does not describe a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuestionError {
    #[error("client: give the client's IP address, e.g. client=203.0.113.9")]
    NoClient,
    #[error("path {path:?} is not a request target")]
    Path { path: String },
    #[error("{name}: {value:?} is not a header value")]
    HeaderValue { name: String, value: String },
    #[error("method {method:?} is not a request method")]
    Method { method: String },
}

/// Explains the request `q` to `service` as the data path would decide it now.
pub fn explain(service: &Service, q: &Question) -> Result<Explanation, QuestionError> {
    let cfg = service.config();
    let client = q.client.ok_or(QuestionError::NoClient)?;
    let path = q.path.clone().unwrap_or_else(|| "/".into());
    let uri: hyper::Uri = path.parse().map_err(|_| QuestionError::Path { path: path.clone() })?;
    let mut headers = HeaderMap::new();
    for (name, value) in [(header::HOST, &q.host), (header::COOKIE, &q.cookie)] {
        if let Some(v) = value {
            headers.insert(name.clone(), HeaderValue::from_str(v).map_err(|_| QuestionError::HeaderValue { name: name.to_string(), value: v.clone() })?);
        }
    }
    let host = q.host.as_deref().map(route::strip_port);
    let method: hyper::Method = q.method.as_deref().unwrap_or("GET").parse().map_err(|_| QuestionError::Method { method: q.method.clone().unwrap_or_default() })?;
    let http = cfg.mode == Mode::Http;
    let routes: Vec<RouteCheck> = if http {
        let seen = route::Seen { method: &method, path: uri.path(), query: uri.query(), host, headers: &headers, client, sni: q.sni.as_deref(), version: hyper::Version::HTTP_11 };
        first_match(&cfg.routes, "request", |r| route::mismatch(r, &seen))
    } else if cfg.mode == Mode::Tcp {
        first_match(&cfg.routes, "connection", |r| match q.sni.as_deref() {
            None => Some("no server name in the hello (give sni=...)".into()),
            Some(n) if passthrough::serves(r, n) => None,
            Some(n) => Some(format!("server name {n} is none of sni {:?}", r.when.sni)),
        })
    } else {
        Vec::new()
    };
    let taken = routes.iter().position(|r| r.taken).and_then(|k| cfg.routes[k].pool.clone());
    let (pool, pool_name) = service.pool_for(taken.as_deref());
    let pc = &pool.config;
    let steer = if http { affinity::steer(pc, &uri, &headers) } else { affinity::Affinity::default() };
    let hash = match pc.algorithm {
        Algorithm::SourceHash => Some((format!("client {client}"), crate::balance::key::client_ip(client))),
        Algorithm::UriHash if http => steer.hash.map(|h| (format!("path {}", affinity::uri_key(pc, &uri)), h)),
        Algorithm::HeaderHash if http => match steer.hash {
            Some(h) => Some((format!("header {}", pc.http.hash_header.as_deref().unwrap_or_default()), h)),
            None => Some((format!("client {client} (no {} header)", pc.http.hash_header.as_deref().unwrap_or_default()), crate::balance::key::client_ip(client))),
        },
        _ => None,
    };
    let key = hash.as_ref().and_then(|(of, h)| {
        let (slot, owner) = pool.primary.slot(*h)?;
        Some(HashKey { of: of.clone(), hash: format!("{h:016x}"), slot, owner: pool.primary.servers.get(owner)?.state.key.address.clone() })
    });
    let busy = pool.avoid_full(&Avoid::default());
    let named = steer.prefer.as_deref().and_then(|id| pool.by_id(id, &busy));
    let affinity = (pc.algorithm == Algorithm::Cookie).then(|| AffinityCheck {
        cookie: steer.cookie.clone(),
        server: steer.prefer.as_deref().and_then(|id| pool.servers().find(|e| e.id == id)).map(|e| e.state.key.address.clone()),
        usable: named.is_some(),
    });
    let panic = pool.panicking();
    let candidates = candidates(pool, panic);
    let picked = named.clone().or_else(|| pool.peek(client, steer.hash.or(hash.as_ref().map(|(_, h)| *h)), &busy));
    let pick = picked.as_ref().map(|p| p.entry.state.key.address.clone());
    let why = match (&picked, &named, &key) {
        (None, _, _) if candidates.iter().any(|c| c.skipped.as_deref().is_some_and(|s| s.starts_with("full"))) => {
            "every usable server is at its maxconn: the request would wait in the queue".to_string()
        }
        (None, _, _) => format!("no server is usable{}", if pc.all_down.is_fail() { " (all_down = \"fail\": 503 or close)" } else { "" }),
        (Some(p), Some(_), _) => format!("the affinity cookie names {}, which is usable", p.entry.state.key.address),
        (Some(p), None, Some(k)) if k.owner == p.entry.state.key.address => format!("{} lands on slot {}, which {} owns", k.of, k.slot, k.owner),
        (Some(p), None, Some(k)) => {
            format!("{} lands on slot {}, owned by {}, which is passed over (or ramping); the table walk goes on to {}", k.of, k.slot, k.owner, p.entry.state.key.address)
        }
        (Some(p), None, None) => {
            let usable = candidates.iter().filter(|c| c.skipped.is_none()).count();
            let tier = if p.role == crate::live::Role::Backup { "no primary is usable, so a backup: " } else { "" };
            let how = match pc.algorithm {
                Algorithm::RoundRobin | Algorithm::Cookie => "its turn in the smooth weighted rotation",
                Algorithm::StaticRr => "its turn in the static weighted cycle",
                Algorithm::Random => "a weighted random draw",
                Algorithm::LeastConn => "the fewest connections in flight per unit of weight",
                Algorithm::P2cEwma => "the lower cost of two random choices (EWMA connect time x requests in flight / weight)",
                Algorithm::PassiveRatio => "its turn by the traffic ratios",
                _ => "the algorithm's choice",
            };
            let panicked = if panic { " (panic mode: health ignored)" } else { "" };
            format!("{tier}{} by {how}, among {usable} usable{panicked}", p.entry.state.key.address)
        }
    };
    let pool_name = pool_name.to_string();
    let shared = service.shared.iter().any(|p| std::sync::Arc::ptr_eq(p, pool));
    Ok(Explanation { service: cfg.name.clone(), client, routes, pool: pool_name, shared, algorithm: pc.algorithm.as_str(), key, affinity, candidates, panic, pick, why })
}

/// Each route in order as the data path tries them: the first that `mismatch` has no reason
/// against takes the `what` (request or connection), and every later one is passed over for it.
fn first_match(routes: &[crate::config::Route], what: &str, mismatch: impl Fn(&crate::config::Route) -> Option<String>) -> Vec<RouteCheck> {
    let mut taken = false;
    routes
        .iter()
        .map(|r| {
            let why_not = if taken { Some(format!("an earlier route took the {what}")) } else { mismatch(r) };
            taken |= why_not.is_none();
            let actions = if why_not.is_none() { actions(r) } else { Vec::new() };
            RouteCheck { pool: r.pool.clone().unwrap_or_else(|| "default".into()), taken: why_not.is_none(), why_not, actions }
        })
        .collect()
}

/// What `r` does to a request it takes, in order.
fn actions(r: &crate::config::Route) -> Vec<String> {
    let mut out = Vec::new();
    // Limits are counted before anything else the route does.
    for l in &r.limits {
        let per = if l.count == crate::config::Counted::Connections { "at once".to_string() } else { format!("per {}", humantime::format_duration(l.period)) };
        out.push(format!("limit {}: {} {} {per} by {} ({})", l.name, l.limit, l.count.as_str(), l.key, l.action.as_str()));
    }
    if let Some(status) = r.deny {
        out.push(format!("deny {status}"));
    }
    if r.allow {
        out.push("allow".into());
    }
    if let Some(d) = &r.redirect {
        let target = match &d.location {
            Some(l) => l.as_str().to_string(),
            None => format!(
                "{}://{}{}{}{}",
                d.scheme.as_deref().unwrap_or("{scheme}"),
                d.host.as_deref().unwrap_or("{host}"),
                d.prefix.as_deref().unwrap_or(""),
                d.path.as_deref().unwrap_or("{path}"),
                if d.drop_query { "" } else { "?{query}" }
            ),
        };
        out.push(format!("redirect {} {target}", d.status));
    }
    let headers = |out: &mut Vec<String>, side: &str, a: &crate::config::HeaderActions| {
        out.extend(a.delete.iter().map(|n| format!("{side} header delete {n}")));
        out.extend(a.set.iter().map(|(n, t)| format!("{side} header set {n}: {}", t.as_str())));
        out.extend(a.add.iter().map(|(n, t)| format!("{side} header add {n}: {}", t.as_str())));
    };
    if let Some(a) = &r.request_headers {
        headers(&mut out, "request", a);
    }
    if let Some(p) = &r.strip_prefix {
        out.push(format!("strip_prefix {p}"));
    }
    if let Some(p) = &r.replace_prefix {
        out.push(format!("replace_prefix {} with {}", p.from, p.to));
    }
    if let Some(p) = &r.rewrite_path {
        out.push(format!("rewrite_path {:?} with {}", p.pattern.as_str(), p.with));
    }
    if let Some(q) = &r.set_query {
        out.push(format!("set_query {q:?}"));
    }
    if r.deny.is_none() && r.redirect.is_none() {
        out.push(format!("pool {}", r.pool.as_deref().unwrap_or("default")));
    }
    if let Some(a) = &r.response_headers {
        headers(&mut out, "response", a);
    }
    match r.compress {
        Some(true) => out.push("compress".into()),
        Some(false) => out.push("compress off".into()),
        None => {}
    }
    out
}

/// Every server of `pool` with what the pick sees of it, and the reason it passes it over.
fn candidates(pool: &Pool, panic: bool) -> Vec<Candidate> {
    let primary_usable = pool.primary.servers.iter().any(|e| e.state.effective_weight() > 0);
    let tiers = [(&pool.primary, false), (&pool.backup, true)];
    tiers
        .into_iter()
        .flat_map(|(tier, backup)| tier.servers.iter().enumerate().map(move |(i, e)| (tier, backup, i, e)))
        .map(|(tier, backup, i, e)| {
            let st = &e.state;
            let active = st.counters.current.load(std::sync::atomic::Ordering::Relaxed);
            let (effective_weight, ramp_percent) = st.ramped_weight();
            let metrics = tier.metrics(i).unwrap_or_default();
            let skipped = match st.state() {
                State::Disabled => Some("disabled".to_string()),
                State::Drain if st.state_by() == Some("agent") => Some(format!("draining: its agent said {:?}", agent_said(st))),
                State::Drain => Some("draining: no new connections".to_string()),
                State::Maint => Some(format!("maint: its agent said {:?}", agent_said(st))),
                _ if panic => None,
                State::Down if st.passive_down() => Some("down: held by failure_limit connect failures until a check passes".to_string()),
                State::Down if st.state_by() == Some("agent") => Some(format!("down: its agent said {:?}", agent_said(st))),
                State::Down => Some(format!("down: {}", st.last_check())),
                State::Suppressed => Some(format!("suppressed: {}", st.damping().suppression().unwrap_or_else(|| "flapping".into()))),
                State::Ejected => Some(st.outlier.describe().unwrap_or_else(|| "ejected".into())),
                State::Up if e.maxconn > 0 && active >= u64::from(e.maxconn) => Some(format!("full: {active} of maxconn {}", e.maxconn)),
                State::Up if backup && primary_usable => Some("a backup: used only while no primary is usable".to_string()),
                State::Up => None,
            };
            Candidate {
                address: st.key.address.clone(),
                backup,
                state: st.state(),
                state_by: st.state_by(),
                weight: st.weight(),
                effective_weight,
                ramp_percent,
                active,
                maxconn: e.maxconn,
                skipped,
                ratio: metrics.ratio,
                r: metrics.r.filter(|r| r.is_finite()),
                ewma_connect_ms: st.measure.sample().ewma_us / 1000.0,
            }
        })
        .collect()
}

/// The last answer of a server's agent.
fn agent_said(st: &crate::live::ServerState) -> String {
    st.agent.view().map(|v| v.last).unwrap_or_default()
}

/// One pick the data path made, as `GET /api/explain/recent` shows it.
#[derive(Debug, Serialize)]
pub struct RecentPick {
    pub time: String,
    pub client: IpAddr,
    pub pool: String,
    /// The server, or `(removed)` when it has left the config since.
    pub server: String,
    pub why: String,
}

/// The last picks of `service`'s pools, oldest first; at most `limit`, the latest ones. A shared
/// pool's are those of every service that uses it.
pub fn recent(service: &Service, limit: usize) -> Vec<RecentPick> {
    let own = service.config().pools.iter().zip(&service.pools).map(|(c, p)| (p, c.name.as_str()));
    let pools = std::iter::once((&service.pool, "default")).chain(own).chain(service.shared.iter().map(|p| (p, p.config.name.as_str())));
    let mut picks: Vec<(u64, u64, RecentPick)> = pools
        .flat_map(|(pool, name)| {
            pool.state.recent.read(limit).into_iter().map(move |r| {
                let server = pool.servers().find(|e| e.state.serial == r.server).map_or_else(|| "(removed)".to_string(), |e| e.state.key.address.clone());
                let time = humantime::format_rfc3339_micros(std::time::UNIX_EPOCH + std::time::Duration::from_micros(r.at_us)).to_string();
                (r.at_us, r.order, RecentPick { time, client: r.client, pool: name.to_string(), server, why: r.why.describe(pool.config.algorithm) })
            })
        })
        .collect();
    picks.sort_by_key(|(at, order, _)| (*at, *order));
    let skip = picks.len().saturating_sub(limit);
    picks.into_iter().skip(skip).map(|(_, _, p)| p).collect()
}
