//! Routing: which pool of a service serves a request. Routes are tried in config order and the
//! first whose conditions all hold wins (a list condition holds when any entry does); a request
//! no route takes goes to `default_pool`, or to the service's own servers.

use std::sync::Arc;

use hyper::header::{self, HeaderMap};

use crate::config::Route;
use crate::live::{Pool, Service};

/// The pool for a request, and its name for the log.
pub fn choose<'a>(service: &'a Service, path: &str, headers: &HeaderMap, authority: Option<&str>) -> (&'a Arc<Pool>, &'a str) {
    let cfg = service.config();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).or(authority).map(strip_port);
    service.pool_for(cfg.routes.iter().find(|r| matches(r, path, host, headers)).map(|r| r.pool.as_str()))
}

/// Why `route` does not take the request (the first condition that fails), or `None` when it does.
pub fn mismatch(route: &Route, path: &str, host: Option<&str>, headers: &HeaderMap) -> Option<String> {
    let ic = route.ignore_case;
    if !route.path_prefix.is_empty() && !route.path_prefix.iter().any(|p| prefix_matches(path, p, ic)) {
        return Some(format!("path {path} is under none of path_prefix {:?}", route.path_prefix));
    }
    if !route.path_beg.is_empty() && !route.path_beg.iter().any(|p| begins(path, p, ic).is_some()) {
        return Some(format!("path {path} begins with none of path_beg {:?}", route.path_beg));
    }
    if !route.path_suffix.is_empty() && !route.path_suffix.iter().any(|s| ends(path, s, ic)) {
        return Some(format!("path {path} ends with none of path_suffix {:?}", route.path_suffix));
    }
    if !route.host.is_empty() && !host.is_some_and(|h| route.host.iter().any(|r| r.eq_ignore_ascii_case(h))) {
        return Some(format!("host {} is none of {:?}", host.unwrap_or("(none)"), route.host));
    }
    if !matches(route, path, host, headers) {
        let name = route.header.as_deref().unwrap_or_default();
        return Some(match &route.header_value {
            Some(v) => format!("header {name} is not {v:?}"),
            None => format!("no header {name}"),
        });
    }
    None
}

pub fn matches(route: &Route, path: &str, host: Option<&str>, headers: &HeaderMap) -> bool {
    let ic = route.ignore_case;
    (route.path_prefix.is_empty() || route.path_prefix.iter().any(|p| prefix_matches(path, p, ic)))
        && (route.path_beg.is_empty() || route.path_beg.iter().any(|p| begins(path, p, ic).is_some()))
        && (route.path_suffix.is_empty() || route.path_suffix.iter().any(|s| ends(path, s, ic)))
        && (route.host.is_empty() || host.is_some_and(|h| route.host.iter().any(|r| r.eq_ignore_ascii_case(h))))
        && route.header.as_ref().is_none_or(|name| {
            let mut values = headers.get_all(name.as_str()).iter();
            match &route.header_value {
                None => values.next().is_some(),
                Some(want) => values.any(|v| same(v.as_bytes(), want.as_bytes(), ic)),
            }
        })
}

fn same(a: &[u8], b: &[u8], ignore_case: bool) -> bool {
    if ignore_case { a.eq_ignore_ascii_case(b) } else { a == b }
}

/// The rest of `path` after `text`, when it starts with it (HAProxy's `path_beg`).
fn begins<'a>(path: &'a str, text: &str, ignore_case: bool) -> Option<&'a str> {
    let head = path.get(..text.len())?;
    same(head.as_bytes(), text.as_bytes(), ignore_case).then(|| &path[text.len()..])
}

fn ends(path: &str, text: &str, ignore_case: bool) -> bool {
    path.len() >= text.len() && path.is_char_boundary(path.len() - text.len()) && same(&path.as_bytes()[path.len() - text.len()..], text.as_bytes(), ignore_case)
}

/// `/static` takes `/static`, `/static/x` and `/static?q`, not `/staticfoo`; `/static/` takes
/// what starts with it.
fn prefix_matches(path: &str, prefix: &str, ignore_case: bool) -> bool {
    match begins(path, prefix, ignore_case) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

pub fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map(|(h, _)| &h[1..]).unwrap_or(host);
    }
    host.rsplit_once(':').filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit())).map(|(h, _)| h).unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(toml_text: &str) -> Route {
        toml::from_str(&format!("pool = \"p\"\n{toml_text}")).unwrap()
    }

    #[test]
    fn the_haproxy_papers_static_rules() {
        let by_dir = route("path_prefix = [\"/static\", \"/images\", \"/javascript\", \"/stylesheets\"]");
        let by_ext = route("path_suffix = [\".jpg\", \".gif\", \".png\", \".css\", \".js\"]");
        let h = HeaderMap::new();
        for (path, dir, ext) in [
            ("/static/a.html", true, false),
            ("/images", true, false),
            ("/imagesfoo", false, false),
            ("/app/logo.png", false, true),
            ("/javascript/app.js", true, true),
            ("/index.html", false, false),
            ("/cart", false, false),
        ] {
            assert_eq!(matches(&by_dir, path, None, &h), dir, "{path}");
            assert_eq!(matches(&by_ext, path, None, &h), ext, "{path}");
        }
    }

    #[test]
    fn path_beg_is_haproxys_and_ignore_case_is_its_dash_i() {
        let h = HeaderMap::new();
        let beg = route("path_beg = [\"/static\"]");
        assert!(matches(&beg, "/staticfoo", None, &h) && matches(&beg, "/static/a", None, &h) && !matches(&beg, "/Static/a", None, &h));
        let prefix = route("path_prefix = [\"/static\"]");
        assert!(!matches(&prefix, "/staticfoo", None, &h), "path_prefix keeps whole segments");
        let ic = route("path_prefix = [\"/static\"]\npath_suffix = [\".JPG\"]\nignore_case = true");
        assert!(matches(&ic, "/STATIC/a.jpg", None, &h) && !matches(&ic, "/STATICfoo/a.jpg", None, &h));
        assert!(!matches(&route("path_suffix = [\".JPG\"]"), "/a.jpg", None, &h));
        let mut v = HeaderMap::new();
        v.insert("x-beta", "YES".parse().unwrap());
        assert!(matches(&route("header = \"x-beta\"\nheader_value = \"yes\"\nignore_case = true"), "/", None, &v));
        assert!(!matches(&route("header = \"x-beta\"\nheader_value = \"yes\""), "/", None, &v));
        assert!(!matches(&route("path_beg = [\"/é\"]"), "/\u{e8}x", None, &h), "no panic inside a character");
        assert!(!ends("/\u{e9}", "\u{a9}", false));
    }

    #[test]
    fn host_and_header_conditions() {
        let r = route("host = [\"api.example.com\"]\nheader = \"x-beta\"\nheader_value = \"1\"");
        let mut h = HeaderMap::new();
        assert!(!matches(&r, "/", Some("api.example.com"), &h));
        h.insert("x-beta", "1".parse().unwrap());
        assert!(matches(&r, "/", Some("API.example.com"), &h));
        assert!(!matches(&r, "/", Some("www.example.com"), &h));
        assert_eq!(strip_port("api.example.com:8080"), "api.example.com");
        assert_eq!(strip_port("[::1]:8080"), "::1");
    }
}
