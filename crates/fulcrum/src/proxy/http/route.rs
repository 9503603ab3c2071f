//! Matching: which route of a service takes a request. Routes are tried in config order and the
//! first whose conditions all hold (and whose `not` conditions each fail) wins; a list condition
//! holds when any entry does. What the winner does to the request is `rules`.

use std::net::IpAddr;

use hyper::header::{self, HeaderMap};
use hyper::{Method, Version};

use crate::config::{Conditions, Route};

/// What the conditions of a route read of a request.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// Without its port.
    pub host: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub client: IpAddr,
    /// The server name of the client's TLS hello.
    pub sni: Option<&'a str>,
    pub version: Version,
}

/// The first route that takes the request, with its index.
pub fn first<'r>(routes: &'r [Route], seen: &Seen<'_>) -> Option<(usize, &'r Route)> {
    routes.iter().enumerate().find(|(_, r)| takes(r, seen))
}

/// Whether `route` takes the request.
pub fn takes(route: &Route, seen: &Seen<'_>) -> bool {
    failing(&route.when, seen, false).is_none() && route.not.as_ref().is_none_or(|not| failing(not, seen, true).is_none())
}

/// Why `route` does not take the request (its first condition that fails), or `None` when it does.
pub fn mismatch(route: &Route, seen: &Seen<'_>) -> Option<String> {
    if let Some(key) = failing(&route.when, seen, false) {
        return Some(format!("{key} {} does not hold for {}", shown(&route.when, key), request_value(seen, key)));
    }
    let not = route.not.as_ref()?;
    let key = failing(not, seen, true)?;
    Some(format!("not.{key} {} holds for {}", shown(not, key), request_value(seen, key)))
}

/// The entry of `path_prefix` or `path_beg` that the path starts with (`{matched_prefix}`).
pub fn matched_prefix<'r>(c: &'r Conditions, path: &str) -> Option<&'r str> {
    let ic = c.ignore_case;
    c.path_prefix.iter().find(|p| prefix_matches(path, p, ic)).or_else(|| c.path_beg.iter().find(|p| begins(path, p, ic).is_some())).map(String::as_str)
}

/// The key of the first condition of `c` that does not hold (with `negated`: that holds), in a
/// fixed order, cheapest first. Allocates nothing, and looks at nothing a condition not given
/// would read: a rule costs a request only the conditions it has.
fn failing(c: &Conditions, seen: &Seen<'_>, negated: bool) -> Option<&'static str> {
    let given = c.given_bits();
    let ic = c.ignore_case;
    let path = seen.path;
    // A condition that is not given never fails, negated or not.
    macro_rules! check {
        ($key:literal, $bit:expr, $holds:expr) => {
            if given & $bit != 0 && $holds == negated {
                return Some($key);
            }
        };
    }
    check!("method", Conditions::METHOD, c.method.iter().any(|m| m.eq_ignore_ascii_case(seen.method.as_str())));
    check!("version", Conditions::VERSION, c.version.iter().any(|v| version_name(seen.version) == v));
    check!("client", Conditions::CLIENT, c.client.iter().any(|n| n.contains(seen.client)));
    check!("client_file", Conditions::CLIENT_FILE, c.client_file.as_ref().is_some_and(|f| f.set.contains(seen.client)));
    check!("sni", Conditions::SNI, seen.sni.is_some_and(|n| super::super::passthrough::names_match(&c.sni, n)));
    check!("host", Conditions::HOST, seen.host.is_some_and(|h| c.host.iter().any(|r| r.eq_ignore_ascii_case(h))));
    check!("path", Conditions::PATH, c.path.iter().any(|p| same(path.as_bytes(), p.as_bytes(), ic)));
    check!("path_prefix", Conditions::PATH_PREFIX, c.path_prefix.iter().any(|p| prefix_matches(path, p, ic)));
    check!("path_beg", Conditions::PATH_BEG, c.path_beg.iter().any(|p| begins(path, p, ic).is_some()));
    check!("path_suffix", Conditions::PATH_SUFFIX, c.path_suffix.iter().any(|s| ends(path, s, ic)));
    check!("path_regex", Conditions::PATH_REGEX, c.path_regex.iter().any(|r| r.regex().is_match(path)));
    check!("header", Conditions::HEADER, header_holds(c, seen.headers));
    check!("query", Conditions::QUERY, c.query.iter().any(|q| pair_in(seen.query.unwrap_or(""), '&', q, ic)));
    check!("cookie", Conditions::COOKIE, c.cookie.iter().any(|q| seen.headers.get_all(header::COOKIE).iter().any(|v| v.to_str().is_ok_and(|v| pair_in(v, ';', q, ic)))));
    None
}

fn header_holds(c: &Conditions, headers: &HeaderMap) -> bool {
    if c.header.is_none() {
        return true;
    }
    // A name `check` refuses is in no request.
    let Some(name) = c.header_name() else { return false };
    let mut values = headers.get_all(name).iter();
    match (&c.header_value, &c.header_regex) {
        (Some(want), _) => values.any(|v| same(v.as_bytes(), want.as_bytes(), c.ignore_case)),
        (None, Some(re)) => values.any(|v| v.to_str().is_ok_and(|v| re.regex().is_match(v))),
        (None, None) => values.next().is_some(),
    }
}

/// Whether `list` (`a=1&b` or `a=1; b=2`) holds `want`: `name` present, or `name=value` equal.
fn pair_in(list: &str, separator: char, want: &str, ignore_case: bool) -> bool {
    let (name, value) = want.split_once('=').map_or((want, None), |(n, v)| (n, Some(v)));
    list.split(separator).map(str::trim).filter(|p| !p.is_empty()).any(|pair| {
        let (n, v) = pair.split_once('=').map_or((pair, ""), |(n, v)| (n, v));
        n == name && value.is_none_or(|want| same(v.as_bytes(), want.as_bytes(), ignore_case))
    })
}

pub fn version_name(v: Version) -> &'static str {
    match v {
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        Version::HTTP_09 => "0.9",
        _ => "1.1",
    }
}

/// A condition's configured values, for explain.
fn shown(c: &Conditions, key: &str) -> String {
    let list = |v: &[String]| format!("{v:?}");
    match key {
        "method" => list(&c.method),
        "version" => list(&c.version),
        "client" => format!("{:?}", c.client.iter().map(|n| n.to_string()).collect::<Vec<_>>()),
        "client_file" => c.client_file.as_ref().map(|f| format!("{} ({} networks)", f.path, f.entries)).unwrap_or_default(),
        "sni" => list(&c.sni),
        "host" => list(&c.host),
        "path" => list(&c.path),
        "path_prefix" => list(&c.path_prefix),
        "path_beg" => list(&c.path_beg),
        "path_suffix" => list(&c.path_suffix),
        "path_regex" => format!("{:?}", c.path_regex),
        "header" => match (&c.header_value, &c.header_regex) {
            (Some(v), _) => format!("{} = {v:?}", c.header.as_deref().unwrap_or_default()),
            (None, Some(r)) => format!("{} ~ {r:?}", c.header.as_deref().unwrap_or_default()),
            (None, None) => c.header.clone().unwrap_or_default(),
        },
        "query" => list(&c.query),
        "cookie" => list(&c.cookie),
        _ => String::new(),
    }
}

/// The request's value that a condition read, for explain.
fn request_value(seen: &Seen<'_>, key: &str) -> String {
    match key {
        "method" => format!("method {}", seen.method),
        "version" => format!("HTTP/{}", version_name(seen.version)),
        "client" | "client_file" => format!("client {}", seen.client),
        "sni" => format!("server name {}", seen.sni.unwrap_or("(none)")),
        "host" => format!("host {}", seen.host.unwrap_or("(none)")),
        "query" => format!("query {:?}", seen.query.unwrap_or("")),
        "header" | "cookie" => "this request's headers".into(),
        _ => format!("path {}", seen.path),
    }
}

fn same(a: &[u8], b: &[u8], ignore_case: bool) -> bool {
    if ignore_case { a.eq_ignore_ascii_case(b) } else { a == b }
}

/// The rest of `path` after `text`, when it starts with it (HAProxy's `path_beg`).
pub fn begins<'a>(path: &'a str, text: &str, ignore_case: bool) -> Option<&'a str> {
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

/// A host name without its port (`[::1]:8080` gives `::1`).
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

    /// A GET of `target` (path and query) from 192.0.2.7 over HTTP/1.1, with `headers`.
    fn seen<'a>(target: &'a str, host: Option<&'a str>, headers: &'a HeaderMap) -> Seen<'a> {
        let (path, query) = target.split_once('?').map_or((target, None), |(p, q)| (p, Some(q)));
        Seen { method: &Method::GET, path, query, host, headers, client: "192.0.2.7".parse().unwrap(), sni: None, version: Version::HTTP_11 }
    }

    fn matches(r: &Route, target: &str, host: Option<&str>, h: &HeaderMap) -> bool {
        takes(r, &seen(target, host, h))
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
        let re = route("header = \"user-agent\"\nheader_regex = \"(?i)bot\"");
        let mut ua = HeaderMap::new();
        ua.insert("user-agent", "GoodBot/1.0".parse().unwrap());
        assert!(matches(&re, "/", None, &ua) && !matches(&re, "/", None, &h));
    }

    #[test]
    fn method_query_cookie_client_version_and_exact_path() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; session=XYZ".parse().unwrap());
        let s = seen("/login?next=%2F&debug", Some("example.com"), &h);
        assert!(takes(&route("method = [\"get\", \"HEAD\"]"), &s));
        assert!(!takes(&route("method = [\"POST\"]"), &s));
        assert!(takes(&route("query = [\"debug\"]"), &s) && takes(&route("query = [\"next=%2F\"]"), &s));
        assert!(!takes(&route("query = [\"next=/\"]"), &s) && !takes(&route("query = [\"debu\"]"), &s));
        assert!(takes(&route("cookie = [\"session=xyz\"]\nignore_case = true"), &s) && !takes(&route("cookie = [\"session=xyz\"]"), &s));
        assert!(takes(&route("cookie = [\"a\"]"), &s) && !takes(&route("cookie = [\"b\"]"), &s));
        assert!(takes(&route("client = [\"192.0.2.0/24\", \"2001:db8::/32\"]"), &s) && !takes(&route("client = [\"10.0.0.0/8\"]"), &s));
        assert!(takes(&route("version = [\"1.1\"]"), &s) && !takes(&route("version = [\"2\"]"), &s));
        assert!(takes(&route("path = [\"/login\"]"), &s) && !takes(&route("path = [\"/log\"]"), &s));
        assert!(takes(&route("path_regex = [\"^/log(in|out)$\"]"), &s) && !takes(&route("path_regex = [\"^/x\"]"), &s));
    }

    #[test]
    fn not_fails_a_route_when_any_of_its_conditions_holds() {
        let h = HeaderMap::new();
        let admin = route("path_prefix = [\"/admin\"]\nnot = { client = [\"10.0.0.0/8\"] }");
        let s = seen("/admin/x", None, &h);
        assert!(takes(&admin, &s), "192.0.2.7 is not in 10/8");
        let inside = Seen { client: "10.1.2.3".parse().unwrap(), ..s };
        assert!(!takes(&admin, &inside));
        assert_eq!(mismatch(&admin, &inside).unwrap(), "not.client [\"10.0.0.0/8\"] holds for client 10.1.2.3");
        assert_eq!(mismatch(&admin, &seen("/x", None, &h)).unwrap(), "path_prefix [\"/admin\"] does not hold for path /x");
        assert_eq!(matched_prefix(&admin.when, "/admin/x"), Some("/admin"));
    }
}
