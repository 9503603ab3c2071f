//! The access log's own format (`log_format`) in text and JSON, and its lines sent to syslog
//! receivers the test holds: a UDP socket and a Unix datagram socket, read as RFC 5424 messages;
//! requests from curl over HTTP/1.1 and h2c.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use crate::http::curl_get;
use crate::support::*;

/// NGINX's `combined`, and more; written into the config as a TOML literal string.
const COMBINED: &str = r#"{client_ip} - - [{time}] "{method} {path} {version}" {status} {bytes_out} "{referer}" "{user_agent}" host={host} id={request_id} total={total_ms}"#;

fn service(backend: std::net::SocketAddr, http: &str) -> String {
    format!(
        r#"[[service]]
name = "web"
listen = "{{LISTEN}}"
mode = "http"
[service.http]
h2c = true
request_id = "X-Request-Id"
{http}
[service.health]
kind = "none"
[[service.server]]
address = "{backend}"
"#
    )
}

fn curl_with(addr: std::net::SocketAddr, path: &str, h2: bool, agent: &str) {
    let mut args = vec!["-A", agent, "-e", "https://from.test/", "-H", "X-Request-Id: req-42"];
    if h2 {
        args.push("--http2-prior-knowledge");
    }
    let (status, _) = curl_get(&format!("http://{addr}{path}"), &args);
    assert_eq!(status, 200);
}

/// Reads one RFC 5424 message from process `pid`: its priority, APP-NAME and MSGID, and its line.
fn parse_5424(message: &[u8], pid: u32) -> (String, String) {
    let text = String::from_utf8(message.to_vec()).expect("UTF-8");
    // <PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD MSG
    let mut parts = text.splitn(8, ' ');
    let head: Vec<&str> = parts.by_ref().take(7).collect();
    assert_eq!(head.len(), 7, "{text}");
    assert!(head[1].starts_with("20") && head[1].ends_with('Z'), "RFC 3339 timestamp: {text}");
    assert_eq!((head[4], head[6]), (pid.to_string().as_str(), "-"), "PROCID and no structured data: {text}");
    (format!("{} {} {}", head[0], head[3], head[5]), parts.next().unwrap_or("").to_string())
}

#[test]
fn a_log_format_shapes_the_line_in_text_and_json() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&service(b.addr, &format!("access_log = \"text\"\nlog_format = '{COMBINED}'")));
    curl_with(f.listen, "/name?text=1", false, "agent \"quoted\"");
    f.wait_log("/name?text=1");
    let line = f.log().lines().find(|l| l.contains("/name?text=1")).unwrap().to_string();
    assert!(line.contains(r#"127.0.0.1 - - ["#), "{line}");
    assert!(line.contains(r#""GET /name?text=1 HTTP/1.1" 200 2 "https://from.test/" "agent \x22quoted\x22" host=127.0.0.1 id=req-42 total="#), "{line}");

    let f = Fulcrum::start(&service(b.addr, &format!("access_log = \"json\"\nlog_format = '{COMBINED}'")));
    curl_with(f.listen, "/name?json=1", true, "curl-h2");
    f.wait_log("/name?json=1");
    let line = f.log().lines().find(|l| l.contains("/name?json=1")).unwrap().to_string();
    let json: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..].replace("\u{1b}[0m", "")).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(json["version"], "HTTP/2.0", "{json}");
    assert_eq!(json["status"], 200);
    assert_eq!(json["user_agent"], "curl-h2");
    assert_eq!(json["referer"], "https://from.test/");
    assert_eq!(json["request_id"], "req-42");
    assert!(json["total_ms"].is_number() && json.get("server").is_none(), "only the fields the format names: {json}");
}

#[test]
fn lines_reach_syslog_receivers_over_udp_and_a_unix_socket() {
    let b = Backend::start("b");
    // UDP: the receiver is a socket the test holds.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let f = Fulcrum::start(&service(
        b.addr,
        &format!(
            "log_format = \"{{method}} {{path}} {{status}} {{request_id}}\"\n[service.http.syslog]\naddress = \"{}\"\nfacility = \"local3\"\ntag = \"edge\"",
            udp.local_addr().unwrap()
        ),
    ));
    for h2 in [false, true] {
        curl_with(f.listen, &format!("/name?udp={h2}"), h2, "curl");
        let mut buf = [0u8; 9000];
        let n = udp.recv(&mut buf).expect("a syslog message over UDP");
        let (head, line) = parse_5424(&buf[..n], f.pid());
        // local3 (19) * 8 + informational (6) = 158.
        assert_eq!(head, "<158>1 edge access", "{line}");
        assert_eq!(line, format!("GET /name?udp={h2} 200 req-42"));
    }
    assert!(!f.log().contains("/name?udp"), "syslog takes the lines instead of the standard error");
    drop(f);

    // A Unix datagram socket, as /dev/log; the receiver starts after Fulcrum and is replaced
    // while it runs: the next lines reach the new one.
    let dir = scratch("syslog-unix");
    let path = dir.join("log.sock");
    let f = Fulcrum::start(&service(b.addr, &format!("access_log = \"json\"\n[service.http.syslog]\nsocket = {path:?}")));
    for round in 0..2 {
        let _ = std::fs::remove_file(&path);
        let receiver = UnixDatagram::bind(&path).unwrap();
        receiver.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let mut buf = [0u8; 9000];
        // The first line after a new receiver may go to the old socket's path before the sender
        // connects again: send until one arrives, a bounded number of times.
        let got = (0..20).find_map(|i| {
            curl_with(f.listen, &format!("/name?unix={round}-{i}"), false, "curl");
            receiver.recv(&mut buf).ok()
        });
        let n = got.unwrap_or_else(|| panic!("round {round}: no message on {}\n{}", path.display(), f.log()));
        let (head, line) = parse_5424(&buf[..n], f.pid());
        assert_eq!(head, "<134>1 fulcrum access", "{line}");
        let json: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(json["path"].as_str().unwrap().starts_with(&format!("/name?unix={round}-")), "{json}");
        assert_eq!(json["request_id"], "req-42");
    }
}
