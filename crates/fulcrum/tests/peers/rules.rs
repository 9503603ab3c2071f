//! Routes as rules, with nginx echoing what it got and curl as the client, over HTTP/1.1 and
//! HTTP/2 (h2c): conditions on method, path, query, cookie and client address, negated with
//! `not`; deny, redirect (followed by curl -L), header rewrites with variables, path and query
//! rewrites, response headers, the request id, and what explain says a route does.

use std::net::SocketAddr;
use std::process::Command;

use crate::support::*;

const ROUTES: &str = r#"
[service.http]
h2c = true
request_id = "X-Request-Id"

[[service.route]]
path_prefix = ["/admin"]
not = { client = ["127.0.0.5/32"] }
deny = 403

[[service.route]]
path_prefix = ["/old"]
redirect = { scheme = "https", host = "new.example.com", status = 301 }

[[service.route]]
path = ["/hop"]
redirect = { path = "/api/echo/landed", status = 307 }

[[service.route]]
path_prefix = ["/api"]
method = ["GET", "POST"]
strip_prefix = "/api"
request_headers = { delete = ["x-drop"], set = { "x-set" = "{client_ip} {matched_prefix} {request_id}" }, add = { "x-added" = "a" } }
response_headers = { set = { "strict-transport-security" = "max-age=60", "x-server" = "{server}" }, delete = ["x-served-by"] }

[[service.route]]
path_regex = ['^/u/\d+$']
rewrite_path = { pattern = '^/u/(\d+)$', with = "/echo/users/$1" }
set_query = "v=2"

[[service.route]]
query = ["beta"]
cookie = ["tier=gold"]
path_prefix = ["/echo"]
response_headers = { add = { "x-beta" = "yes" } }
"#;

/// One request with curl: status, response headers (lower-case names) and body.
fn fetch(addr: SocketAddr, h2: bool, source: &str, path: &str, extra: &[&str]) -> (u16, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "-D", "-", "--interface", source]);
    if h2 {
        cmd.arg("--http2-prior-knowledge");
    }
    let out = cmd.args(extra).arg(format!("http://{addr}{path}")).output().expect("curl must be installed (scripts/test installs it)");
    assert!(out.status.success(), "curl {path}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    // With -L every hop's head is printed: the last head is the final answer's.
    let (heads, body) = text.rsplit_once("\n\n").unwrap_or((&text, ""));
    let head = heads.rsplit("\n\n").next().unwrap_or(heads);
    let status = head.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

#[test]
fn routes_deny_redirect_and_rewrite_over_http1_and_http2() {
    let echo = Nginx::start("echo", "TARGET");
    let f = Fulcrum::start(
        &service_over("round-robin", "mode = \"http\"", "kind = \"none\"", &[(echo.addr, "")]).replace("\n\n[service.health]", &format!("\n{ROUTES}\n[service.health]")),
    );
    for h2 in [false, true] {
        let get = |source: &str, path: &str, extra: &[&str]| fetch(f.listen, h2, source, path, extra);
        let version = if h2 { "h2c" } else { "HTTP/1.1" };

        // deny, unless the client is 127.0.0.5 (not = { client }): then no route takes it.
        let (status, _, body) = get("127.0.0.1", "/admin/x", &[]);
        assert_eq!(status, 403, "{version}: {body}");
        assert!(body.contains("denied by route 0"), "{body}");
        assert_eq!(get("127.0.0.5", "/admin/x", &[]).0, 404, "{version}: the allowed client reaches nginx, which has no /admin");

        // A redirect to https on another host keeps the path and query.
        let (status, head, _) = get("127.0.0.1", "/old/page?a=1", &[]);
        assert_eq!((status, header(&head, "location")), (301, Some("https://new.example.com/old/page?a=1")), "{version}: {head}");

        // A redirect that keeps the scheme keeps the port, to a rewritten API call: curl -L
        // follows it over HTTP/1.1. Over h2c it is followed by hand: curl 7.88 fails any -L
        // with --http2-prior-knowledge ("Error in the HTTP2 framing layer", nginx's too).
        let (status, head, _) = get("127.0.0.1", "/hop", &[]);
        let location = format!("http://{}/api/echo/landed", f.listen);
        assert_eq!((status, header(&head, "location")), (307, Some(location.as_str())), "{version}: {head}");
        let (status, head, body) = if h2 { get("127.0.0.1", "/api/echo/landed", &[]) } else { get("127.0.0.1", "/hop", &["-L"]) };
        assert_eq!(status, 200, "{version}: {head}{body}");
        assert!(body.contains("uri=/echo/landed\n"), "{version}: {body}");

        // strip_prefix and header rewrites: the server sees the rewritten request; the client
        // gets the response headers, and the request id the server saw.
        let (status, head, body) = get("127.0.0.1", "/api/echo/users?x=1", &["-H", "x-drop: gone"]);
        assert_eq!(status, 200, "{version}: {head}{body}");
        assert!(body.contains("uri=/echo/users?x=1\n") && body.contains("x-added=a\n") && body.contains("x-drop=\n"), "{version}: {body}");
        let id = header(&head, "x-request-id").unwrap_or_else(|| panic!("{version}: no request id in {head}"));
        assert_eq!(id.len(), 36, "a UUID: {id}");
        assert!(body.contains(&format!("request-id={id}\n")), "{version}: the server got the same id: {body}");
        assert!(body.contains(&format!("x-set=127.0.0.1 /api {id}\n")), "{version}: {body}");
        assert_eq!(header(&head, "strict-transport-security"), Some("max-age=60"), "{head}");
        assert_eq!(header(&head, "x-server"), Some(echo.addr.to_string().as_str()), "{head}");
        assert_eq!(header(&head, "x-served-by"), None, "deleted: {head}");
        // The client's own id is kept.
        let (_, head, body) = get("127.0.0.1", "/api/echo/mine", &["-H", "X-Request-Id: abc-123"]);
        assert_eq!(header(&head, "x-request-id"), Some("abc-123"));
        assert!(body.contains("request-id=abc-123\n"), "{body}");
        // A method the route does not take goes on unrewritten.
        let (_, _, body) = get("127.0.0.1", "/api/echo/x", &["-X", "DELETE"]);
        assert!(!body.contains("uri=/echo/x"), "{version}: {body}");

        // rewrite_path with a capture, and set_query.
        let (status, _, body) = get("127.0.0.1", "/u/42", &[]);
        assert_eq!(status, 200, "{version}: {body}");
        assert!(body.contains("uri=/echo/users/42?v=2\n"), "{version}: {body}");

        // query and cookie conditions, and-ed.
        let (_, head, _) = get("127.0.0.1", "/echo/a?beta", &["-H", "Cookie: a=1; tier=gold"]);
        assert_eq!(header(&head, "x-beta"), Some("yes"), "{version}: {head}");
        let (_, head, _) = get("127.0.0.1", "/echo/a?beta", &["-H", "Cookie: tier=silver"]);
        assert_eq!(header(&head, "x-beta"), None, "{version}: {head}");
    }

    // Explain names the route that takes a request and what it would do.
    let (status, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.9&path=/api/echo/x&method=POST", None);
    assert_eq!(status, 200, "{e}");
    let taken = e["routes"].as_array().unwrap().iter().find(|r| r["taken"] == true).unwrap_or_else(|| panic!("{e}"));
    let actions: Vec<&str> = taken["actions"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(actions.first(), Some(&"request header delete x-drop"), "{e}");
    assert!(actions.contains(&"strip_prefix /api") && actions.contains(&"pool default") && actions.contains(&"response header delete x-served-by"), "{e}");
    let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.9&path=/admin", None);
    assert_eq!(e["routes"][0]["actions"], serde_json::json!(["deny 403"]), "{e}");
    let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.5&path=/admin", None);
    assert_eq!(e["routes"][0]["why_not"], "not.client [\"127.0.0.5/32\"] holds for client 127.0.0.5", "{e}");
}

#[test]
fn check_points_at_the_rule_that_cannot_work() {
    let dir = scratch("rules-check");
    let base = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:2\"\n[[service.route]]\n";
    for (route, want) in [
        ("path_prefx = [\"/a\"]\ndeny = 403", "unknown key `path_prefx`"),
        ("path = [\"/a\"]\ndeny = 200", "deny = 200 is not an error status"),
        ("path = [\"/a\"]\nredirect = { status = 200 }", "redirect status 200 is not a redirect"),
        ("path_regex = [\"(\"]\ndeny = 403", "is not a regex"),
        ("path = [\"/a\"]\nrequest_headers = { set = { \"x\" = \"{nope}\" } }", "no variable {nope}"),
        ("path = [\"/a\"]\nrequest_headers = { set = { \"content-length\" = \"1\" } }", "frames the message"),
        ("path = [\"/a\"]\ndeny = 403\npool = \"p\"", "sends nothing to a server"),
        ("deny = 403", "a route with nothing to match"),
        ("path = [\"/a\"]\nsni = [\"a.example.com\"]", "no [service.tls]"),
    ] {
        let (ok, out) = check_config(&format!("{base}{route}\n"), &dir);
        assert!(!ok && out.contains(want), "{route}: {out}");
        assert!(!out.contains("panicked"), "{out}");
    }
    let (ok, out) = check_config(&format!("{base}path_prefix = [\"/api\"]\nstrip_prefix = \"/api\"\nresponse_headers = {{ set = {{ \"x-a\" = \"{{client_ip}}\" }} }}\n"), &dir);
    assert!(ok, "{out}");
}

/// A route's `client_file`: an allow list of 100,000 networks in a file, read with the config and
/// again on reload; a client outside it is denied, one inside reaches the server.
#[test]
fn a_client_file_of_a_hundred_thousand_networks_allows_and_a_reload_reads_it_again() {
    let echo = Nginx::start("listed", "TARGET");
    let dir = scratch("client-file");
    let list = dir.join("allow.txt");
    // 99,999 networks in 10.0.0.0/8 (none of them loopback), and 127.0.0.5.
    let mut text = String::from("# the office and its partners\n");
    for i in 0..99_999u32 {
        text.push_str(&format!("10.{}.{}.0/24\n", i / 256 % 256, i % 256));
    }
    text.push_str("127.0.0.5/32\n");
    std::fs::write(&list, &text).unwrap();
    let route = format!("\n[[service.route]]\npath_prefix = [\"/admin\"]\nnot = {{ client_file = {list:?} }}\ndeny = 403\n");
    let config = service_over("round-robin", "mode = \"http\"", "kind = \"none\"", &[(echo.addr, "")]).replace("\n\n[service.health]", &format!("\n{route}\n[service.health]"));
    let f = Fulcrum::start(&config);
    let status = |source: &str| fetch(f.listen, false, source, "/admin/x", &[]).0;
    assert_eq!(status("127.0.0.1"), 403, "not in the list");
    assert_eq!(status("127.0.0.5"), 404, "in the list: nginx has no /admin");
    let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.1&path=/admin", None);
    assert_eq!(e["routes"][0]["actions"], serde_json::json!(["deny 403"]), "{e}");
    let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.5&path=/admin", None);
    assert!(e["routes"][0]["why_not"].as_str().unwrap().contains("(100000 networks) holds for client 127.0.0.5"), "{e}");
    // The file changes and the config is reloaded: the whole of loopback is in now.
    text.push_str("127.0.0.0/8\n");
    std::fs::write(&list, &text).unwrap();
    let (code, body) = f.api("POST", "/api/reload", None);
    assert_eq!(code, 200, "{body}");
    wait_until("the new list in force", std::time::Duration::from_secs(5), || status("127.0.0.1") == 404);
    // check names a bad line.
    std::fs::write(dir.join("bad.txt"), "10.0.0.0/8\n10.0.0.0/99\n").unwrap();
    let (ok, out) = check_config(&config.replace(&format!("{list:?}"), &format!("{:?}", dir.join("bad.txt"))).replace("{LISTEN}", "127.0.0.1:1"), &dir);
    assert!(!ok && out.contains("line 2"), "{out}");
}

/// `trusted_forwarders`: behind a proxy Fulcrum trusts, a route's `client` reads the client that
/// proxy names in `X-Forwarded-For`; anyone else's header is ignored.
#[test]
fn a_trusted_proxys_forwarded_for_is_the_client_routes_see() {
    let echo = Nginx::start("xff", "TARGET");
    let route = "\n[service.http]\ntrusted_forwarders = [\"127.0.0.1/32\"]\n\n[[service.route]]\npath_prefix = [\"/office\"]\nnot = { client = [\"192.0.2.0/24\"] }\ndeny = 403\n";
    let f = Fulcrum::start(
        &service_over("round-robin", "mode = \"http\"", "kind = \"none\"", &[(echo.addr, "")]).replace("\n\n[service.health]", &format!("\n{route}\n[service.health]")),
    );
    let status = |source: &str, xff: Option<&str>| {
        let header = xff.map(|x| format!("X-Forwarded-For: {x}"));
        let extra: Vec<&str> = header.iter().flat_map(|h| ["-H", h.as_str()]).collect();
        fetch(f.listen, false, source, "/office/x", &extra).0
    };
    assert_eq!(status("127.0.0.1", None), 403, "the proxy itself is not in the office");
    assert_eq!(status("127.0.0.1", Some("192.0.2.9")), 404, "the office client it names: nginx has no /office");
    assert_eq!(status("127.0.0.1", Some("192.0.2.9, 127.0.0.1")), 404, "a trusted hop to its right is skipped");
    assert_eq!(status("127.0.0.1", Some("192.0.2.9, 198.51.100.7")), 403, "the rightmost untrusted hop counts");
    assert_eq!(status("127.0.0.7", Some("192.0.2.9")), 403, "an untrusted peer cannot claim the office");
}
