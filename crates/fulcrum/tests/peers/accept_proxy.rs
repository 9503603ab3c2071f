//! `accept_proxy`: HAProxy in front of Fulcrum sends PROXY v2 and v1 headers; Fulcrum takes the
//! client address from them (nginx behind it sees it in X-Forwarded-For), only from
//! `trusted_proxies`, and refuses a trusted connection without a header.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// HAProxy in TCP mode on two ports, sending `send-proxy-v2` and `send-proxy` (v1) to `to`,
/// from 127.0.0.2.
fn haproxy(to: SocketAddr) -> (Haproxy, SocketAddr, SocketAddr) {
    let dir = scratch("haproxy");
    let (v2, v1): (SocketAddr, SocketAddr) = (format!("127.0.0.1:{}", free_port()).parse().unwrap(), format!("127.0.0.1:{}", free_port()).parse().unwrap());
    let cfg = format!(
        "global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
         listen v2\n  bind {v2}\n  server f {to} send-proxy-v2 source 127.0.0.2\n\
         listen v1\n  bind {v1}\n  server f {to} send-proxy source 127.0.0.2\n"
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy must be installed (scripts/test installs it)");
    wait_until("haproxy", Duration::from_secs(10), || std::net::TcpStream::connect(v2).is_ok() && std::net::TcpStream::connect(v1).is_ok());
    (Haproxy(child), v2, v1)
}

#[test]
fn haproxys_headers_name_the_client_and_only_trusted_proxies_may_send_them() {
    let nginx = Nginx::start("n1", "TARGET");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\naccept_proxy = true\ntrusted_proxies = [\"127.0.0.2/32\"]\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n",
        nginx.addr
    ));
    let (_haproxy, v2, v1) = haproxy(f.listen);
    for (via, last) in [(v2, 7u8), (v1, 8), (v2, 9)] {
        let source: IpAddr = format!("127.0.0.{last}").parse().unwrap();
        let (status, body) = http_get_from(Some(source), via, "/headers").unwrap();
        assert_eq!(status, 200, "via {via}: {body}");
        assert!(body.contains(&format!("xff={source}\n")), "via {via} from {source}: {body}");
    }
    // 127.0.0.1 is not a trusted proxy: closed without an answer, and counted.
    let mut direct = std::net::TcpStream::connect(f.listen).unwrap();
    direct.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = direct.write_all(b"GET /headers HTTP/1.0\r\n\r\n");
    let mut answer = Vec::new();
    let _ = direct.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    f.wait_log("not in trusted_proxies");
}

#[test]
fn a_trusted_connection_without_a_header_is_refused() {
    let nginx = Nginx::start("n2", "TARGET");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"tcp\"\naccept_proxy = true\ntrusted_proxies = [\"127.0.0.0/8\"]\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n",
        nginx.addr
    ));
    // A connection closed before its first byte (a TCP health check) is not a refusal: it takes
    // no place in the once-a-second warning, so the next one is logged.
    drop(std::net::TcpStream::connect(f.listen).unwrap());
    let mut plain = std::net::TcpStream::connect(f.listen).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain.write_all(b"GET /name HTTP/1.0\r\nHost: a\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    f.wait_log("no PROXY protocol header");
    // With a v1 header the same request goes through, and the server is nginx.
    let mut proxied = std::net::TcpStream::connect(f.listen).unwrap();
    proxied.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    proxied.write_all(b"PROXY TCP4 203.0.113.5 127.0.0.1 4000 80\r\nGET /name HTTP/1.0\r\nHost: a\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = proxied.read_to_end(&mut answer);
    assert!(answer.ends_with(b"n2\n"), "{}", String::from_utf8_lossy(&answer));
}
