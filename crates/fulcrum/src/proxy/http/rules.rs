//! What a route does to a request it took (`route` decides which takes it): refuse it, redirect
//! it, rewrite its headers, path and query on the way to the server, and the response's headers
//! on the way back.
//!
//! A template's variables come from the request (the client's address, host, path, SNI) and may
//! hold bytes no header may: each value loses its control characters before it is written, so a
//! rewrite can never end a header line or start a new one. A rewritten target that is not a valid
//! origin-form target is refused with 500 and never sent.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::header::{HeaderMap, HeaderValue};
use hyper::http::uri::PathAndQuery;
use hyper::{StatusCode, Uri};

use crate::config::{HeaderActions, Piece, Redirect, Route, Template, Variable};

/// What a template's variables read: the request as the client sent it. Made only for a route
/// that has a template or a rewrite to fill in.
#[derive(Debug, Clone)]
pub struct Context {
    pub client: SocketAddr,
    pub request_id: Option<String>,
    pub sni: Option<Arc<str>>,
    pub host: Option<String>,
    /// The host as the request named it, with its port if any.
    pub authority: Option<String>,
    pub path: String,
    pub query: Option<String>,
    pub matched_prefix: Option<String>,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The server that answered (response headers only).
    pub server: Option<SocketAddr>,
}

/// A template filled in, as a header value: every variable's control characters are left out.
pub fn fill(t: &Template, v: &Context) -> HeaderValue {
    if let Some(value) = t.literal_value() {
        // Made when the config was read (no control character).
        return value.clone();
    }
    let mut out = String::with_capacity(t.as_str().len() + 32);
    for piece in &t.pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Var(var) => push_value(&mut out, *var, v),
        }
    }
    // Whatever is left is visible ASCII, tabs, spaces and UTF-8, which a header value may carry;
    // the text becomes the value without a copy.
    HeaderValue::from_maybe_shared(bytes::Bytes::from(out)).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Writes a variable's value into `out`, without its control characters (the numbers and
/// addresses have none).
fn push_value(out: &mut String, var: Variable, v: &Context) {
    use std::fmt::Write;
    let _ = match var {
        Variable::ClientIp => write!(out, "{}", v.client.ip()),
        Variable::ClientPort => write!(out, "{}", v.client.port()),
        Variable::Server => v.server.map_or(Ok(()), |s| write!(out, "{s}")),
        Variable::Scheme => {
            out.push_str(v.scheme);
            Ok(())
        }
        text => {
            let value = match text {
                Variable::RequestId => v.request_id.as_deref(),
                Variable::Sni => v.sni.as_deref(),
                Variable::Host => v.host.as_deref(),
                Variable::Path => Some(v.path.as_str()),
                Variable::Query => v.query.as_deref(),
                _ => v.matched_prefix.as_deref(),
            };
            push_clean(out, value.unwrap_or_default());
            Ok(())
        }
    };
}

fn push_clean(out: &mut String, value: &str) {
    out.extend(value.chars().filter(|c| !c.is_control()));
}

/// Applies `actions` to `headers`: delete, then set, then add. Names were checked with the config.
pub fn apply(actions: &HeaderActions, headers: &mut HeaderMap, v: &Context) {
    let parsed = &actions.parsed;
    for name in &parsed.delete {
        headers.remove(name);
    }
    for (name, t) in &parsed.set {
        headers.insert(name.clone(), fill(t, v));
    }
    for (name, t) in &parsed.add {
        headers.append(name.clone(), fill(t, v));
    }
}

/// The route's redirect: its status and `Location`.
pub fn redirect(r: &Redirect, v: &Context) -> (StatusCode, HeaderValue) {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::FOUND);
    if let Some(location) = &r.location {
        return (status, fill(location, v));
    }
    let scheme = r.scheme.as_deref().unwrap_or(v.scheme);
    // The request's port stays with its scheme: a redirect to another scheme goes to that
    // scheme's default port.
    let own = if scheme == v.scheme { v.authority.as_deref().or(v.host.as_deref()) } else { v.host.as_deref() };
    let host = r.host.as_deref().or(own).unwrap_or("localhost");
    let mut location = format!("{scheme}://{host}");
    if let Some(prefix) = &r.prefix {
        location.push_str(prefix.trim_end_matches('/'));
    }
    location.push_str(r.path.as_deref().unwrap_or(&v.path));
    if let Some(q) = v.query.as_deref().filter(|q| !r.drop_query && !q.is_empty()) {
        location.push('?');
        location.push_str(q);
    }
    let mut clean = String::with_capacity(location.len());
    push_clean(&mut clean, &location);
    (status, HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("/")))
}

/// Why a rewrite was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route {route}: the rewritten target {target:?} is not a valid request target")]
pub struct RewriteError {
    pub route: usize,
    pub target: String,
}

/// The request target after the route's path and query rewrites, or `None` when it has none.
pub fn rewrite_target(route: &Route, index: usize, uri: &Uri) -> Result<Option<Uri>, RewriteError> {
    if route.strip_prefix.is_none() && route.replace_prefix.is_none() && route.rewrite_path.is_none() && route.set_query.is_none() {
        return Ok(None);
    }
    let mut path = uri.path().to_string();
    if let Some(prefix) = route.strip_prefix.as_deref().map(|p| p.trim_end_matches('/'))
        && let Some(rest) = path.strip_prefix(prefix)
        && (rest.is_empty() || rest.starts_with('/'))
    {
        path = if rest.is_empty() { "/".to_string() } else { rest.to_string() };
    }
    if let Some(r) = &route.replace_prefix
        && let Some(rest) = path.strip_prefix(r.from.as_str())
    {
        path = format!("{}{rest}", r.to);
    }
    if let Some(r) = &route.rewrite_path {
        path = r.pattern.regex().replace(&path, r.with.as_str()).into_owned();
    }
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let query = match &route.set_query {
        Some(q) => Some(q.as_str()),
        None => uri.query(),
    };
    let target = match query.filter(|q| !q.is_empty()) {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    // The http crate refuses what a request line cannot carry (spaces, control characters).
    let bad = || RewriteError { route: index, target: target.clone() };
    let pq: PathAndQuery = target.parse().map_err(|_| bad())?;
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).map(Some).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(toml_text: &str) -> Route {
        toml::from_str(toml_text).unwrap()
    }

    fn vars(path: &str, query: Option<&str>) -> Context {
        Context {
            client: "192.0.2.7:5555".parse().unwrap(),
            request_id: Some("id-1".into()),
            sni: None,
            host: Some("example.com".into()),
            authority: Some("example.com:8080".into()),
            path: path.into(),
            query: query.map(String::from),
            matched_prefix: Some("/api".into()),
            scheme: "http",
            server: None,
        }
    }

    #[test]
    fn templates_fill_in_and_drop_what_could_end_a_line() {
        let t: Template = "{client_ip}:{client_port} {request_id} {matched_prefix}".parse().unwrap();
        assert_eq!(fill(&t, &vars("/", None)), "192.0.2.7:5555 id-1 /api");
        let host: Template = "h={host}".parse().unwrap();
        let v = Context { host: Some("evil\r\nX-Injected: 1".into()), ..vars("/", None) };
        assert_eq!(fill(&host, &v), "h=evilX-Injected: 1");
    }

    #[test]
    fn header_actions_delete_then_set_then_add() {
        let r = route("[request_headers]\ndelete = [\"x-drop\"]\nset = { \"x-one\" = \"1\", \"x-drop\" = \"back\" }\nadd = { \"x-one\" = \"2\" }");
        let mut h = HeaderMap::new();
        h.insert("x-drop", "old".parse().unwrap());
        h.insert("x-one", "0".parse().unwrap());
        apply(r.request_headers.as_ref().unwrap(), &mut h, &vars("/", None));
        assert_eq!(h.get_all("x-one").iter().collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(h.get("x-drop").unwrap(), "back");
    }

    #[test]
    fn redirects_keep_or_drop_the_query() {
        let r = route("redirect = { scheme = \"https\", status = 301 }").redirect.unwrap();
        assert_eq!(redirect(&r, &vars("/a", Some("q=1"))), (StatusCode::MOVED_PERMANENTLY, HeaderValue::from_static("https://example.com/a?q=1")));
        let r = route("redirect = { host = \"new.example.com\", prefix = \"/v2/\", drop_query = true }").redirect.unwrap();
        assert_eq!(redirect(&r, &vars("/a", Some("q=1"))), (StatusCode::FOUND, HeaderValue::from_static("http://new.example.com/v2/a")));
        let r = route("redirect = { path = \"/b\" }").redirect.unwrap();
        assert_eq!(redirect(&r, &vars("/a", None)).1, "http://example.com:8080/b", "the same scheme keeps the port");
        let r = route("redirect = { location = \"https://{host}/moved{path}\", status = 308 }").redirect.unwrap();
        assert_eq!(redirect(&r, &vars("/a", None)).1, "https://example.com/moved/a");
    }

    #[test]
    fn path_rewrites_and_what_they_may_not_produce() {
        let uri: Uri = "/api/users?x=1".parse().unwrap();
        let t = |toml_text: &str| rewrite_target(&route(toml_text), 0, &uri).unwrap().map(|u| u.to_string());
        assert_eq!(t("strip_prefix = \"/api\""), Some("/users?x=1".into()));
        assert_eq!(t("strip_prefix = \"/api/users\""), Some("/?x=1".into()));
        assert_eq!(t("strip_prefix = \"/ap\""), Some("/api/users?x=1".into()), "whole segments only");
        assert_eq!(t("replace_prefix = { from = \"/api\", to = \"/v2\" }\nset_query = \"\""), Some("/v2/users".into()));
        assert_eq!(t("rewrite_path = { pattern = \"^/api/(\\\\w+)$\", with = \"/svc/$1/list\" }"), Some("/svc/users/list?x=1".into()));
        assert_eq!(t("pool = \"p\""), None);
        let bad = rewrite_target(&route("set_query = \"a b\""), 3, &uri).unwrap_err();
        assert_eq!(bad.route, 3);
        let bad = rewrite_target(&route("rewrite_path = { pattern = \"users\", with = \"u\\r\\nx\" }"), 0, &uri);
        assert!(bad.is_err(), "{bad:?}");
    }
}
