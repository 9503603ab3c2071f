//! What a request carries that steers its pick: the key `uri-hash` and `header-hash` hash, and
//! the server id a `cookie` names; and the cookie that keeps a client on the server it got.
//!
//! `cookie_mode = "insert"`: Fulcrum's own cookie `NAME=server-id` (HAProxy's `cookie insert`).
//! `cookie_mode = "jserv"`: the application's session cookie, `NAME=session.server-id`, as the
//! Apache JServ cluster does it: Fulcrum appends `.server-id` to the session the server sets and
//! routes on the suffix. When the named server is down the request goes to another and the cookie
//! is issued again for that one.

use hyper::Uri;
use hyper::header::{self, HeaderMap, HeaderValue};

use crate::balance::key;
use crate::config::{Algorithm, CookieMode, PoolSettings};
use crate::proxy::dispatch::Steer;

/// How a request steers the pick: the hash key of `uri-hash`/`header-hash`, the server id a
/// `cookie` names, and that cookie's value as the client sent it.
#[derive(Debug, Default)]
pub struct Affinity {
    pub hash: Option<u64>,
    pub prefer: Option<String>,
    pub cookie: Option<String>,
}

impl Affinity {
    pub fn steer(&self) -> Steer<'_> {
        Steer { hash: self.hash, prefer: self.prefer.as_deref() }
    }
}

/// What `uri-hash` hashes: the path, with the query when `hash_query` is set.
pub fn uri_key<'a>(cfg: &PoolSettings, uri: &'a Uri) -> &'a str {
    if cfg.http.hash_query { uri.path_and_query().map(|p| p.as_str()).unwrap_or("/") } else { uri.path() }
}

pub fn steer(cfg: &PoolSettings, uri: &Uri, headers: &HeaderMap) -> Affinity {
    let http = &cfg.http;
    match cfg.algorithm {
        Algorithm::UriHash => Affinity { hash: Some(key::hash_bytes(uri_key(cfg, uri).as_bytes())), ..Affinity::default() },
        Algorithm::HeaderHash => {
            let value = http.hash_header.as_deref().and_then(|h| headers.get(h));
            Affinity { hash: value.map(|v| key::hash_bytes(v.as_bytes())), ..Affinity::default() }
        }
        Algorithm::Cookie => {
            let value = cookie(headers, &http.cookie);
            let prefer = match http.cookie_mode {
                CookieMode::Insert => value.clone(),
                CookieMode::Jserv => value.as_deref().and_then(|v| v.rsplit_once('.')).map(|(_, id)| id.to_string()),
            };
            Affinity { hash: None, prefer, cookie: value }
        }
        _ => Affinity::default(),
    }
}

/// Sets or rewrites the affinity cookie on a response from server `id`.
pub fn stamp(cfg: &PoolSettings, steer: &Affinity, id: &str, headers: &mut HeaderMap) {
    if cfg.algorithm != Algorithm::Cookie {
        return;
    }
    let name = &cfg.http.cookie;
    match cfg.http.cookie_mode {
        CookieMode::Insert => {
            if steer.prefer.as_deref() != Some(id) {
                set(headers, &format!("{name}={id}; Path=/; HttpOnly"));
            }
        }
        CookieMode::Jserv => {
            let mut rewritten = false;
            let cookies: Vec<HeaderValue> = headers.get_all(header::SET_COOKIE).iter().cloned().collect();
            headers.remove(header::SET_COOKIE);
            for c in cookies {
                let text = c.to_str().unwrap_or_default();
                match text.split_once('=') {
                    Some((n, rest)) if n.trim() == name => {
                        let (value, attrs) = rest.split_once(';').map(|(v, a)| (v, format!(";{a}"))).unwrap_or((rest, String::new()));
                        let session = value.rsplit_once('.').map(|(s, _)| s).filter(|_| value.ends_with(&format!(".{id}"))).unwrap_or(value);
                        set(headers, &format!("{name}={session}.{id}{attrs}"));
                        rewritten = true;
                    }
                    _ => {
                        headers.append(header::SET_COOKIE, c);
                    }
                }
            }
            // Failed over: the session the client holds now lives on `id`.
            if !rewritten
                && steer.prefer.as_deref().is_some_and(|p| p != id)
                && let Some((session, _)) = steer.cookie.as_deref().and_then(|v| v.rsplit_once('.'))
            {
                set(headers, &format!("{name}={session}.{id}; Path=/"));
            }
        }
    }
}

fn set(headers: &mut HeaderMap, cookie: &str) {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        headers.append(header::SET_COOKIE, v);
    }
}

/// The value of cookie `name` in the request's Cookie headers.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim_matches('"').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(extra: &str) -> PoolSettings {
        let text = format!(
            "[[service]]\nname = \"w\"\nlisten = \"127.0.0.1:1\"\nmode = \"http\"\nalgorithm = \"cookie\"\n[service.http]\n{extra}\n[[service.server]]\naddress = \"127.0.0.1:2\"\n"
        );
        crate::config::parse_with(&text, "t", crate::config::Resolve::No).unwrap().services.remove(0).own_pool()
    }

    fn set_cookies(h: &HeaderMap) -> Vec<String> {
        h.get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect()
    }

    #[test]
    fn insert_mode_names_the_server_once() {
        let cfg = service("");
        let mut req = HeaderMap::new();
        req.insert(header::COOKIE, "a=1; SERVERID=s2; b=2".parse().unwrap());
        let steer = steer(&cfg, &"/".parse().unwrap(), &req);
        assert_eq!(steer.prefer.as_deref(), Some("s2"));
        let mut resp = HeaderMap::new();
        stamp(&cfg, &steer, "s2", &mut resp);
        assert!(set_cookies(&resp).is_empty(), "the client already has it");
        stamp(&cfg, &steer, "s3", &mut resp);
        assert_eq!(set_cookies(&resp), ["SERVERID=s3; Path=/; HttpOnly"], "failed over: issued again");
    }

    #[test]
    fn jserv_mode_appends_the_server_id_to_the_session() {
        let cfg = service("cookie = \"JSESSIONID\"\ncookie_mode = \"jserv\"");
        let mut resp = HeaderMap::new();
        resp.append(header::SET_COOKIE, "JSESSIONID=abc123; Path=/app".parse().unwrap());
        resp.append(header::SET_COOKIE, "other=1".parse().unwrap());
        stamp(&cfg, &Affinity::default(), "n1", &mut resp);
        assert_eq!(set_cookies(&resp), ["JSESSIONID=abc123.n1; Path=/app", "other=1"]);

        let mut req = HeaderMap::new();
        req.insert(header::COOKIE, "JSESSIONID=abc123.n1".parse().unwrap());
        let s = steer(&cfg, &"/".parse().unwrap(), &req);
        assert_eq!(s.prefer.as_deref(), Some("n1"));
        let mut resp = HeaderMap::new();
        stamp(&cfg, &s, "n2", &mut resp);
        assert_eq!(set_cookies(&resp), ["JSESSIONID=abc123.n2; Path=/"], "failed over: the session moves to n2");
    }

    #[test]
    fn uri_hash_keys_on_the_path_and_optionally_the_query() {
        let mut cfg = service("");
        cfg.algorithm = Algorithm::UriHash;
        let h = HeaderMap::new();
        let a = steer(&cfg, &"/x?1".parse().unwrap(), &h).hash;
        assert_eq!(a, steer(&cfg, &"/x?2".parse().unwrap(), &h).hash);
        cfg.http.hash_query = true;
        assert_ne!(steer(&cfg, &"/x?1".parse().unwrap(), &h).hash, steer(&cfg, &"/x?2".parse().unwrap(), &h).hash);
    }
}
