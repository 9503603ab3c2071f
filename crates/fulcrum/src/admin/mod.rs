//! The admin listener: the dashboard, the JSON API and `/metrics`.
//!
//! Safe by default: it listens on loopback unless authentication is configured (validation
//! refuses otherwise), every request is authenticated when authentication is configured, changes
//! are POST/PUT/DELETE only and must be JSON, and a request whose `Origin` is another site is
//! refused, so a web page in the user's browser cannot drive the balancer. Without authentication
//! the `Host` must be an address or `localhost`, which defeats DNS rebinding. Every change goes
//! through the [`Control`] handle the process gives it, validated like the config file.
//!
//! It keeps a budget of its own, apart from the traffic's: a capped number of connections,
//! closed when idle ([`listener`]), and passwords checked off the runtime's threads, a few at a time, with each
//! address slowed down by its own failures ([`auth`]). A request is first held to HTTP/1.1's
//! one `Host` (RFC 9112 3.2), before anything else is looked at.
//!
//! The same router also answers on a local control socket ([`socket`]), where the socket file's
//! permissions are the authentication, as with HAProxy's stats socket or Docker's: a request
//! that arrived there asks for no credentials, and names its sender by the uid the kernel gives.

mod api;
mod assets;
mod auth;
mod control;
pub mod listener;
pub mod socket;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use auth::Verdict;
pub use auth::{Auth, AuthError, hash_password};

/// Who sends a change, as the guard authenticated it, and the config revision the sender saw
/// (`If-Match: "REVISION"`, as `/api/stats` reports `fleet.revision`): an extension of every
/// request the guard lets through. In a fleet, the audit records `who`, and an edit based on a
/// revision older than the fleet's newest is refused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Editor {
    pub who: String,
    pub based_on: Option<i64>,
}
pub use control::{Control, Unsaved};

pub fn router<C: Control>(control: Arc<C>) -> Router {
    api::routes()
        .merge(assets::routes())
        .layer(middleware::from_fn_with_state(control.clone(), guard::<C>))
        .layer(middleware::from_fn(one_host))
        // Readiness answers a load balancer's or keepalived's probe, which carries no
        // credentials; it says 200 or 503 and nothing else.
        .route("/ready", axum::routing::get(api::ready::<C>))
        .with_state(control)
}

pub async fn serve<C: Control>(listener: tokio::net::TcpListener, control: Arc<C>) {
    let stop = control.stopping();
    let service = router(control).into_make_service_with_connect_info::<listener::Peer>();
    let listener = listener::Capped::admin(listener);
    if let Err(e) = axum::serve(listener, service).with_graceful_shutdown(async move { stop.cancelled().await }).await {
        tracing::error!("admin listener failed: {e}");
    }
}

/// An error as the API answers it: a status and `{"ok": false, "error": ...}`.
pub(crate) fn refuse(status: StatusCode, error: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "ok": false, "error": error.into() }))).into_response()
}

/// A request with two `Host` headers, or an HTTP/1.1 request with none, is malformed (RFC 9112
/// 3.2): which host it names is ambiguous, so it is answered 400 before anything reads it.
async fn one_host(req: Request, next: Next) -> Response {
    let hosts = req.headers().get_all(header::HOST).iter().count();
    if hosts > 1 {
        return refuse(StatusCode::BAD_REQUEST, "more than one Host header");
    }
    if hosts == 0 && req.version() == Version::HTTP_11 {
        return refuse(StatusCode::BAD_REQUEST, "an HTTP/1.1 request must have a Host header");
    }
    next.run(req).await
}

/// Authentication, then the cross-site checks for changing requests.
async fn guard<C: Control>(State(control): State<Arc<C>>, req: Request, next: Next) -> Response {
    // On the control socket, whoever could connect is let in: the file's permissions chose.
    let local = req.extensions().get::<ConnectInfo<socket::Peer>>().map(|c| c.0.who());
    let authorization = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    // Served without connection info (a router in a test), every client is one address.
    let client = req.extensions().get::<ConnectInfo<listener::Peer>>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.0.ip());
    let verdict = if local.is_some() { Verdict::Accepted } else { control.auth().check(authorization, client).await };
    let who = match verdict {
        Verdict::Accepted => local.clone().unwrap_or_else(|| auth::who(authorization, client)),
        Verdict::Refused => {
            let mut r = refuse(StatusCode::UNAUTHORIZED, "authentication required");
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"fulcrum\""));
            return r;
        }
        Verdict::Throttled(wait) => {
            let secs = retry_after(wait);
            return retry_later(StatusCode::TOO_MANY_REQUESTS, secs, format!("too many failed passwords from this address: the next one is checked in {secs} s"));
        }
        Verdict::Busy => return retry_later(StatusCode::SERVICE_UNAVAILABLE, 1, "too many passwords are being checked: retry in 1 s".to_string()),
    };
    // Without authentication, a web page could still reach a loopback listener through a name
    // its own DNS points at 127.0.0.1 (DNS rebinding); such a request names that host.
    if local.is_none() && !control.auth().required() && !host_is_local(req.headers()) {
        return refuse(StatusCode::MISDIRECTED_REQUEST, "the Host header must be an IP address or localhost unless authentication is configured");
    }
    let changing = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changing {
        if !same_origin(req.headers()) {
            return refuse(StatusCode::FORBIDDEN, "cross-origin request refused");
        }
        // A cross-site form cannot send JSON without a preflight, which this API never grants.
        let json = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
        if !json {
            return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, "changes must be sent as application/json");
        }
    }
    let mut req = req;
    let based_on = req.headers().get(header::IF_MATCH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().trim_start_matches("W/").trim_matches('"').parse().ok());
    req.extensions_mut().insert(Editor { who, based_on });
    next.run(req).await
}

/// Whole seconds to tell a client to wait, rounded up: `Retry-After` has no fractions.
fn retry_after(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

fn retry_later(status: StatusCode, secs: u64, error: String) -> Response {
    let mut r = refuse(status, error);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    r
}

fn host_is_local(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else { return true };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin = origin.to_str().unwrap_or("");
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
    !host.is_empty() && origin_host == host
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_addresses_and_localhost_are_local_hosts() {
        for ok in ["127.0.0.1:9090", "localhost:9090", "LOCALHOST", "[::1]:9090", "10.1.2.3"] {
            assert!(host_is_local(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in ["evil.example:9090", "127.0.0.1.nip.io", "localhost.evil.example:80"] {
            assert!(!host_is_local(&headers(&[("host", bad)])), "{bad}");
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after(Duration::from_millis(1)), 1);
        assert_eq!(retry_after(Duration::from_secs(2)), 2);
        assert_eq!(retry_after(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn an_origin_must_name_the_host_it_is_sent_to() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:9090")])));
        assert!(same_origin(&headers(&[("host", "127.0.0.1:9090"), ("origin", "http://127.0.0.1:9090")])));
        assert!(!same_origin(&headers(&[("host", "127.0.0.1:9090"), ("origin", "http://evil.example")])));
        assert!(!same_origin(&headers(&[("host", "127.0.0.1:9090"), ("origin", "null")])));
    }
}
