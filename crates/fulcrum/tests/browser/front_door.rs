//! A site's front door in real headless Chromium (`tests/browser/front_door.mjs`): a route's
//! redirect from plain HTTP to the HTTPS service, HSTS there, its page compressed and rendered,
//! and an error page of the site's own when no server can answer.

use crate::run_script;
use crate::support::*;

#[test]
fn chromium_follows_the_redirect_to_https_renders_the_compressed_page_and_shows_the_sites_error_page() {
    let dir = scratch("front-door-browser");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap().self_signed(&key).unwrap();
    let (pem, pem_key, page) = (dir.join("site.pem"), dir.join("site.key"), dir.join("502.html"));
    std::fs::write(&pem, cert.pem()).unwrap();
    std::fs::write(&pem_key, key.serialize_pem()).unwrap();
    std::fs::write(&page, "<!doctype html><title>Back soon</title><h1>We will be right back</h1>\n").unwrap();
    // A page worth compressing: 300 items, about 10 KB.
    let items: String = (1..=300).map(|i| format!("<li>item {i}</li>")).collect();
    let backend = Backend::start_with("b1", &["--index-text", &format!("<!doctype html><title>Catalogue</title><h1>Catalogue</h1><ul>{items}</ul>")]);
    let (secure, dead) = (free_port(), free_port());
    let f = Fulcrum::start(&format!(
        r#"[[service]]
name = "plain"
listen = "{{LISTEN}}"
mode = "http"
[[service.route]]
path_prefix = ["/"]
redirect = {{ scheme = "https", host = "127.0.0.1:{secure}", status = 301 }}
[service.health]
kind = "none"
[[service.server]]
address = "{backend}"

[[service]]
name = "secure"
listen = "127.0.0.1:{secure}"
mode = "http"
retries = 0
[service.tls]
[[service.tls.certificate]]
cert = {pem:?}
key = {pem_key:?}
[service.http]
hsts = "1h"
error_pages = {{ "502" = {page:?} }}
[service.http.compression]
[[service.route]]
path_prefix = ["/down"]
pool = "gone"
[service.health]
kind = "none"
[[service.server]]
address = "{backend}"
[[service.pool]]
name = "gone"
[service.pool.health]
kind = "none"
[[service.pool.server]]
address = "127.0.0.1:{dead}"
"#,
        backend = backend.addr,
    ));
    wait_until("the https service", std::time::Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", secure)).is_ok());
    run_script("front_door.mjs", &[("PLAIN_URL", format!("http://{}", f.listen)), ("SECURE_URL", format!("https://127.0.0.1:{secure}"))]);
}
