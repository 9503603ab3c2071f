//! Error pages: a file per status for Fulcrum's own answers (a route's deny, no server to
//! answer), a route's own before the service's, a server's error replaced with
//! `intercept_errors`, the type from the file's name, over HTTP/1.1 and h2c; a changed file is
//! read again on reload.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// curl's status, `Content-Type` and body.
fn fetch(addr: SocketAddr, h2: bool, path: &str) -> (u16, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "-w", "\n%{http_code} %{content_type}"]);
    if h2 {
        cmd.arg("--http2-prior-knowledge");
    }
    let out = cmd.arg(format!("http://{addr}{path}")).output().expect("curl must be installed (scripts/test installs it)");
    assert!(out.status.success(), "curl {path}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (status, content_type) = tail.split_once(' ').unwrap_or((tail, ""));
    (status.parse().unwrap_or(0), content_type.to_string(), body.trim_end().to_string())
}

#[test]
fn fulcrums_answers_and_intercepted_server_errors_get_the_pages() {
    let echo = Nginx::start("pages", "TARGET");
    let dir = scratch("error-pages");
    let (down, denied, missing) = (dir.join("502.html"), dir.join("403.json"), dir.join("404.txt"));
    std::fs::write(&down, "<h1>We will be right back</h1>\n").unwrap();
    std::fs::write(&denied, "{\"error\":\"denied\"}\n").unwrap();
    std::fs::write(&missing, "nothing here\n").unwrap();
    let dead = free_port();
    let config = format!(
        r#"[[service]]
name = "web"
listen = "{{LISTEN}}"
mode = "http"
retries = 0

[service.http]
h2c = true
intercept_errors = true
error_pages = {{ "502" = {down:?}, "404" = {missing:?}, "403" = {down:?}, "414" = {missing:?} }}

[service.health]
kind = "none"

[[service.server]]
address = "{echo}"

[[service.pool]]
name = "dead"
[service.pool.health]
kind = "none"
[[service.pool.server]]
address = "127.0.0.1:{dead}"

[[service.route]]
path_prefix = ["/closed"]
deny = 403
error_pages = {{ "403" = {denied:?} }}

[[service.route]]
path_prefix = ["/dead"]
pool = "dead"
"#,
        echo = echo.addr,
    );
    let f = Fulcrum::start(&config);
    for h2 in [false, true] {
        let version = if h2 { "h2c" } else { "HTTP/1.1" };
        // A route's own page comes before the service's for the same status.
        assert_eq!(fetch(f.listen, h2, "/closed/x"), (403, "application/json".into(), "{\"error\":\"denied\"}".into()), "{version}");
        // No server to answer: Fulcrum's 502, with the service's page.
        assert_eq!(fetch(f.listen, h2, "/dead/x"), (502, "text/html; charset=utf-8".into(), "<h1>We will be right back</h1>".into()), "{version}");
        // nginx's own 404, intercepted.
        assert_eq!(fetch(f.listen, h2, "/no-such-file"), (404, "text/plain; charset=utf-8".into(), "nothing here".into()), "{version}");
        // A refusal made before any route is read (a target over max_uri_length) gets its page too.
        let long = format!("/{}", "a".repeat(9000));
        assert_eq!(fetch(f.listen, h2, &long), (414, "text/plain; charset=utf-8".into(), "nothing here".into()), "{version}");
        // What has no page is the server's, untouched.
        let (status, _, body) = fetch(f.listen, h2, "/name");
        assert_eq!((status, body.as_str()), (200, "pages"), "{version}");
    }
    // The file changes, the config does not: a reload reads the page again.
    std::fs::write(&down, "<h1>Maintenance until noon</h1>\n").unwrap();
    let (status, body) = f.api("POST", "/api/reload", None);
    assert_eq!(status, 200, "{body}");
    wait_until("the new page served", Duration::from_secs(5), || fetch(f.listen, false, "/dead/x").2 == "<h1>Maintenance until noon</h1>");
    // A page that cannot be read is refused by check, with the file named.
    let (ok, out) = check_config(&config.replace(&format!("{missing:?}"), "\"/nonexistent/404.txt\"").replace("{LISTEN}", "127.0.0.1:1"), &dir);
    assert!(!ok && out.contains("error page /nonexistent/404.txt"), "{out}");
}
