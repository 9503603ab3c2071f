//! A WebSocket in real headless Chromium (`tests/browser/websocket.mjs`) over HTTP/2: the
//! browser opens it on the connection its page came on, as an extended CONNECT (RFC 8441), and
//! Fulcrum takes it to an HTTP/1.1 WebSocket server.

use crate::run_script;
use crate::support::*;

#[test]
fn chromium_opens_its_websocket_over_the_pages_http2_connection() {
    let dir = scratch("websocket-browser");
    let (pem, pem_key) = openssl_self_signed(&dir, "localhost");
    let backend = Backend::start_with("b1", &["--index-text", "<!doctype html><title>Chat</title><h1>Chat</h1>"]);
    let echo = websocket_echo();
    let f = Fulcrum::start(&format!(
        r#"[[service]]
name = "site"
listen = "{{LISTEN}}"
mode = "http"
[service.tls]
[[service.tls.certificate]]
cert = {pem:?}
key = {pem_key:?}
[service.http]
access_log = "text"
[[service.route]]
path_prefix = ["/ws/"]
pool = "chat"
[service.health]
kind = "none"
[[service.server]]
address = "{backend}"
[[service.pool]]
name = "chat"
[service.pool.health]
kind = "none"
[[service.pool.server]]
address = "{echo}"
"#,
        backend = backend.addr,
    ));
    run_script("websocket.mjs", &[("SECURE_URL", format!("https://localhost:{}", f.listen.port()))]);
    f.wait_log("/ws/chat");
    let line = f.log().lines().find(|l| l.contains("/ws/chat")).unwrap().to_string();
    // Over HTTP/1.1 a WebSocket opens with a GET; CONNECT is HTTP/2's extended one.
    assert!(line.contains("\"CONNECT /ws/chat\" 200"), "the WebSocket came as an HTTP/2 extended CONNECT: {line}");
}
