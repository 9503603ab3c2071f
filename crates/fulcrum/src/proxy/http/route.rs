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

pub fn matches(route: &Route, path: &str, host: Option<&str>, headers: &HeaderMap) -> bool {
    (route.path_prefix.is_empty() || route.path_prefix.iter().any(|p| prefix_matches(path, p)))
        && (route.path_suffix.is_empty() || route.path_suffix.iter().any(|s| path.ends_with(s.as_str())))
        && (route.host.is_empty() || host.is_some_and(|h| route.host.iter().any(|r| r.eq_ignore_ascii_case(h))))
        && route.header.as_ref().is_none_or(|name| {
            let mut values = headers.get_all(name.as_str()).iter();
            match &route.header_value {
                None => values.next().is_some(),
                Some(want) => values.any(|v| v.as_bytes() == want.as_bytes()),
            }
        })
}

/// `/static` takes `/static`, `/static/x` and `/static?q`, not `/staticfoo`; `/static/` takes
/// what starts with it.
fn prefix_matches(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

fn strip_port(host: &str) -> &str {
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
