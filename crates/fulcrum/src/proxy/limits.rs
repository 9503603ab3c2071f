//! Per-client limits on the data path (`[[service.limit]]`): what a connection or a request is
//! counted by, what happens to one past its limit, and what a refused HTTP client is told.
//!
//! Connections are checked as they are accepted (`connections`, `new-connections`, and in TCP
//! and FTP modes `bytes`), before any byte is read; requests once their route is known
//! (`requests`, `errors`, HTTP `bytes`), before their body is read. A rate limit counts a
//! request only when it lets it through, so `action = "log"` counts exactly what enforcing it
//! would refuse. What is known only afterwards (an error answered, bytes moved) is charged then
//! and holds back the key's next request or connection.
//!
//! Nothing here waits on anything but a timer: tables are in memory (a shared table syncs with
//! Redis on a task of its own), and a `delay` or `tarpit` holds only the request or connection it
//! acts on.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use hyper::HeaderMap;
use hyper::header::{self, HeaderValue};
use tracing::{info, warn};

use crate::config::{Counted, LimitAction, LimitKey};
use crate::live::Service;
use crate::live::limit::{Counter, Key, Keyed, Limiter, Verdict, now_ns};

/// A connection or request past a limit: the table that refused it and when to come back.
#[derive(Clone)]
pub struct Refused {
    pub limiter: Arc<Limiter>,
    pub retry_after: Duration,
}

/// The places a connection holds in its key's `connections` count, given back as it closes.
pub type Held = Vec<crate::live::limit::concurrent::Held>;

/// Checks a connection from `client` of `service` as it is accepted. `Ok`: serve it, holding
/// what it counts; `Err`: close it (a `tarpit` has held it first).
pub async fn admit_connection(service: &Service, client: IpAddr) -> Result<Held, Refused> {
    let mode = service.config().mode;
    let mut held = Held::new();
    for limiter in service.limits.iter().filter(|l| l.config.on_connections(mode)) {
        let key = Keyed { key: limiter.network(client), text: None };
        let verdict = match (&limiter.open, &limiter.rate) {
            (Some(open), _) => match open.open(key) {
                Ok(place) => {
                    held.extend(place);
                    Verdict::Allowed { remaining: 0 }
                }
                Err(_) => Verdict::Limited { retry_after: Duration::ZERO },
            },
            (None, Some(rate)) => ask(limiter, &**rate, key),
            (None, None) => continue,
        };
        act(limiter, verdict, &|| client.to_string(), key).await?;
    }
    Ok(held)
}

/// A rate limit's verdict on one more of `key`: a rate of requests or connections counts it;
/// bytes and errors, charged after the fact, only say whether the key is over.
fn ask(limiter: &Limiter, rate: &dyn Counter, key: Keyed<'_>) -> Verdict {
    match limiter.config.count {
        Counted::Bytes | Counted::Errors => rate.over(key.key, now_ns()).map_or(Verdict::Allowed { remaining: 0 }, |retry_after| Verdict::Limited { retry_after }),
        _ => rate.check(key, now_ns(), 1),
    }
}

/// Carries out `limiter`'s action on a `verdict` for `key`: `Ok` lets it through (at once, after
/// a delay, or only logged); `Err` refuses it (after a tarpit's hold).
async fn act(limiter: &Arc<Limiter>, verdict: Verdict, key_text: &(dyn Fn() -> String + Sync), key: Keyed<'_>) -> Result<(), Refused> {
    let counts = &limiter.counts;
    let Verdict::Limited { retry_after } = verdict else {
        counts.passed.fetch_add(1, Relaxed);
        return Ok(());
    };
    let cfg = &limiter.config;
    let refused = || Refused { limiter: limiter.clone(), retry_after };
    match (cfg.action, &limiter.rate) {
        (LimitAction::Log, _) => {
            counts.logged.fetch_add(1, Relaxed);
            if let Some(held) = counts.warned.ready() {
                info!(service = %limiter.service, table = %cfg.name, key = %key_text(), held, "over its limit of {} (action = \"log\": let through)", describe(limiter));
            }
            Ok(())
        }
        // Held until the table lets it through, asked again each time it said to come back.
        (LimitAction::Delay, Some(rate)) if retry_after <= cfg.hold => {
            let mut waited = Duration::ZERO;
            let mut wait = retry_after;
            loop {
                tokio::time::sleep(wait).await;
                waited += wait;
                match ask(limiter, &**rate, key) {
                    Verdict::Allowed { .. } => break,
                    Verdict::Limited { retry_after } if waited + retry_after <= cfg.hold => wait = retry_after.max(Duration::from_millis(1)),
                    Verdict::Limited { .. } => {
                        counts.limited.fetch_add(1, Relaxed);
                        return Err(refused());
                    }
                }
            }
            counts.delayed.fetch_add(1, Relaxed);
            Ok(())
        }
        (LimitAction::Tarpit, _) => {
            counts.limited.fetch_add(1, Relaxed);
            say_limited(limiter, key_text);
            tokio::time::sleep(cfg.hold).await;
            Err(refused())
        }
        (LimitAction::Reject | LimitAction::Delay, _) => {
            counts.limited.fetch_add(1, Relaxed);
            say_limited(limiter, key_text);
            Err(refused())
        }
    }
}

fn say_limited(limiter: &Limiter, key_text: &(dyn Fn() -> String + Sync)) {
    if let Some(held) = limiter.counts.warned.ready() {
        warn!(service = %limiter.service, table = %limiter.config.name, key = %key_text(), held, "refused: over its limit of {}", describe(limiter));
    }
}

/// A limit as the log says it: "50 requests per 1s".
pub fn describe(limiter: &Limiter) -> String {
    let c = &limiter.config;
    match c.count {
        Counted::Connections => format!("{} connections at once", c.limit),
        count => format!("{} {} per {}", c.limit, count.as_str(), humantime::format_duration(c.period)),
    }
}

/// The limits on one HTTP request and the key it has under each, made once the route is known.
pub struct Request {
    keys: Vec<KeyedLimit>,
}

/// A limit on a request, the request's key under it, and the text the key was made from.
type KeyedLimit = (Arc<Limiter>, Key, Option<Box<[u8]>>);

impl Request {
    /// `None` when no limit of the service or of the route `route` counts requests.
    pub fn new(service: &Service, route: Option<usize>, client: IpAddr, headers: &HeaderMap, sni: Option<&str>) -> Option<Request> {
        let route = route.and_then(|k| service.route_limits.get(k)).map_or(&[][..], |r| &r[..]);
        let mode = service.config().mode;
        let all = service.limits.iter().filter(|l| !l.config.on_connections(mode)).chain(route);
        let keys: Vec<_> = all
            .map(|l| {
                let text: Option<Box<[u8]>> = match &l.config.key {
                    LimitKey::Client => None,
                    LimitKey::Header(name) => headers.get(name.as_str()).map(|v| v.as_bytes().into()),
                    LimitKey::Cookie(name) => super::http::affinity::cookie(headers, name).map(|v| v.into_bytes().into()),
                    LimitKey::Sni => sni.map(|s| s.as_bytes().into()),
                };
                let key = text.as_deref().map_or_else(|| l.network(client), Key::text);
                (l.clone(), key, text)
            })
            .collect();
        (!keys.is_empty()).then_some(Request { keys })
    }

    /// Checks the request against each limit in turn; the first that refuses it says why.
    pub async fn admit(&self, client: IpAddr) -> Result<(), Refused> {
        for (limiter, key, text) in &self.keys {
            let Some(rate) = &limiter.rate else { continue };
            let keyed = Keyed { key: *key, text: text.as_deref() };
            let shown = || text.as_deref().map_or_else(|| client.to_string(), |t| String::from_utf8_lossy(t).into_owned());
            act(limiter, ask(limiter, &**rate, keyed), &shown, keyed).await?;
        }
        Ok(())
    }

    /// Charges what the answer showed: an error status to `errors` limits.
    pub fn answered(&self, status: u16) {
        if status >= 400 {
            self.charge(Counted::Errors, 1);
        }
    }

    /// Charges `cost` to every limit that counts `what`.
    pub fn charge(&self, what: Counted, cost: u64) {
        for (limiter, key, text) in self.keys.iter().filter(|(l, ..)| l.config.count == what) {
            if let Some(rate) = &limiter.rate {
                rate.charge(Keyed { key: *key, text: text.as_deref() }, now_ns(), cost);
            }
        }
    }

    /// Whether any limit counts bytes (then the response body charges them as it ends).
    pub fn counts_bytes(&self) -> bool {
        self.keys.iter().any(|(l, ..)| l.config.count == Counted::Bytes)
    }
}

/// Charges the bytes a TCP or FTP connection moved to its service's `bytes` limits.
pub fn connection_moved(service: &Service, client: IpAddr, bytes: u64) {
    let mode = service.config().mode;
    for limiter in service.limits.iter().filter(|l| l.config.count == Counted::Bytes && l.config.on_connections(mode)) {
        if let Some(rate) = &limiter.rate {
            rate.charge(Keyed { key: limiter.network(client), text: None }, now_ns(), bytes);
        }
    }
}

/// The headers of a 429: `Retry-After` in whole seconds (at least 1), and the limit as the IETF
/// RateLimit fields say it (`RateLimit-Policy: "name";q=50;w=1`, `RateLimit: "name";r=0;t=1`).
pub fn refusal_headers(refused: &Refused, headers: &mut HeaderMap) {
    let c = &refused.limiter.config;
    let after = refused.retry_after.as_secs() + u64::from(refused.retry_after.subsec_nanos() > 0);
    let after = after.max(1);
    let window = c.period.as_secs().max(1);
    headers.insert(header::RETRY_AFTER, HeaderValue::from(after));
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\";q={};w={window}", c.name, c.limit)) {
        headers.insert("ratelimit-policy", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\";r=0;t={after}", c.name)) {
        headers.insert("ratelimit", v);
    }
}
