//! What a health check asks besides the traffic's own address, against real servers: nginx with
//! a status page on a separate address and port, a Host-based server block and a location that
//! takes only HEAD; redis-server answering `PING` for a TCP check's `send` and `expect_text`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::limits::Redis;
use crate::support::*;

/// An nginx whose traffic port serves `/name`, answers 404 on `/health` unless the Host is
/// `health.example`, takes only HEAD on `/head-only`, and whose status port (on 127.0.0.2)
/// answers `/status` 200 while the file `up` exists, else 503.
struct Checked {
    traffic: SocketAddr,
    status: SocketAddr,
    dir: std::path::PathBuf,
    nginx: std::process::Child,
}

impl Checked {
    fn start() -> Checked {
        let dir = scratch("nginx-checked");
        let traffic: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let status: SocketAddr = format!("127.0.0.2:{}", free_port()).parse().unwrap();
        std::fs::write(dir.join("up"), "").unwrap();
        let servers = format!(
            r#"    server {{
        listen {traffic} default_server;
        server_name _;
        location = /name {{ default_type text/plain; return 200 "checked\n"; }}
        location = /head-only {{ if ($request_method != HEAD) {{ return 405; }} return 200; }}
        location / {{ return 404; }}
    }}
    server {{
        listen {traffic};
        server_name health.example;
        location = /health {{ default_type text/plain; return 200 "healthy\n"; }}
    }}
    server {{
        listen {status};
        location = /status {{ default_type text/plain; if (-f {dir}/up) {{ return 200 "up\n"; }} return 503; }}
    }}
"#,
            dir = dir.display(),
        );
        let nginx = run_nginx(&dir, &nginx_conf(&dir, &servers), traffic, "nginx with a status port");
        wait_until("the status port", Duration::from_secs(5), || std::net::TcpStream::connect(status).is_ok());
        Checked { traffic, status, dir, nginx }
    }

    fn set_up(&self, up: bool) {
        if up {
            std::fs::write(self.dir.join("up"), "").unwrap();
        } else {
            let _ = std::fs::remove_file(self.dir.join("up"));
        }
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        let _ = self.nginx.kill();
        let _ = self.nginx.wait();
    }
}

fn over(server: SocketAddr, mode: &str, health: &str) -> String {
    format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"{mode}\"\n[service.health]\ninterval = \"100ms\"\nrise = 1\nfall = 1\n{health}\n[[service.server]]\naddress = \"{server}\"\n"
    )
}

fn state(f: &Fulcrum, server: SocketAddr) -> (String, String) {
    let s = f.server_stats(&server.to_string());
    (s["state"].as_str().unwrap_or_default().to_string(), s["last_check"].as_str().unwrap_or_default().to_string())
}

fn wait_state(f: &Fulcrum, server: SocketAddr, want: &str) -> String {
    let mut last = String::new();
    let reached = testkit::wait_for(Duration::from_secs(5), || {
        let (now, check) = state(f, server);
        last = check;
        now == want
    });
    assert!(reached, "{server} not {want}: last check {last:?}");
    last
}

#[test]
fn a_check_on_its_own_address_and_port_follows_the_status_page_not_the_traffic_port() {
    let n = Checked::start();
    let f = Fulcrum::start(&over(n.traffic, "http", &format!("kind = \"http\"\npath = \"/status\"\naddress = \"127.0.0.2\"\nport = {}", n.status.port())));
    let check = wait_state(&f, n.traffic, "up");
    assert!(check.contains("GET /status answered 200"), "{check}");
    assert_eq!(http_get(f.listen, "/name"), (200, "checked\n".into()), "traffic goes to the traffic port");
    // The status page says down while the traffic port still serves: the check follows it.
    n.set_up(false);
    let check = wait_state(&f, n.traffic, "down");
    assert!(check.contains("GET /status answered 503"), "{check}");
    assert!(std::net::TcpStream::connect(n.traffic).is_ok(), "the traffic port is still open");
    n.set_up(true);
    wait_state(&f, n.traffic, "up");
}

#[test]
fn a_check_sends_its_host_and_method() {
    let n = Checked::start();
    // Without a Host of its own the check is the default server's, which has no /health.
    let f = Fulcrum::start(&over(n.traffic, "http", "kind = \"http\"\npath = \"/health\"\nexpect_text = \"healthy\""));
    let check = wait_state(&f, n.traffic, "down");
    assert!(check.contains("GET /health answered 404"), "{check}");
    f.reload(&over(n.traffic, "http", "kind = \"http\"\npath = \"/health\"\nexpect_text = \"healthy\"\nhost = \"health.example\""));
    let check = wait_state(&f, n.traffic, "up");
    assert!(check.contains("GET /health answered 200"), "{check}");
    drop(f);
    let f = Fulcrum::start(&over(n.traffic, "http", "kind = \"http\"\npath = \"/head-only\""));
    let check = wait_state(&f, n.traffic, "down");
    assert!(check.contains("GET /head-only answered 405"), "{check}");
    f.reload(&over(n.traffic, "http", "kind = \"http\"\npath = \"/head-only\"\nmethod = \"HEAD\""));
    let check = wait_state(&f, n.traffic, "up");
    assert!(check.contains("HEAD /head-only answered 200"), "{check}");
}

#[test]
fn a_tcp_check_sends_a_text_and_expects_one_in_the_answer() {
    let redis = Redis::start();
    let server: SocketAddr = format!("127.0.0.1:{}", redis.port).parse().unwrap();
    let f = Fulcrum::start(&over(server, "tcp", "kind = \"tcp\"\nsend = \"PING\\r\\n\"\nexpect_text = \"+PONG\""));
    let check = wait_state(&f, server, "up");
    assert!(check.contains("found \"+PONG\""), "{check}");
    // Redis answers an unknown command with an error, not the text expected.
    f.reload(&over(server, "tcp", "kind = \"tcp\"\nsend = \"PONG\\r\\n\"\nexpect_text = \"+PONG\""));
    let check = wait_state(&f, server, "down");
    assert!(check.contains("the answer \"-ERR unknown command") && check.contains("does not contain \"+PONG\""), "{check}");
}

#[test]
fn check_refuses_options_of_another_kind_and_out_of_range_ports() {
    let dir = scratch("check-options");
    let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let cases = [
        ("kind = \"tcp\"\nmethod = \"HEAD\"", "method is for kind = \"http\""),
        ("kind = \"http\"\nmethod = \"get\"", "is not an HTTP method"),
        ("kind = \"http\"\nhost = \"a b\"", "cannot be a Host header"),
        ("kind = \"http\"\nsend = \"x\"", "send is for kind = \"tcp\""),
        ("kind = \"http\"\nmethod = \"HEAD\"\nexpect_text = \"x\"", "HEAD has no body"),
        ("kind = \"tcp\"\nport = 70000", "port = 70000 is out of range: use 1 to 65535"),
        ("kind = \"tcp\"\n[service.health.agent]\nport = 0", "port = 0 is out of range: use 1 to 65535"),
        ("kind = \"tcp\"\n[service.health.agent]\nport = 1\ninterval = \"1ms\"", "interval = 1ms is out of range"),
    ];
    for (health, said) in cases {
        let text = over(server, "http", health).replace("{LISTEN}", "127.0.0.1:1");
        let (ok, out) = check_config(&text, &dir);
        assert!(!ok && out.contains(said), "{health}: {out}");
    }
    let (ok, out) =
        check_config(&over(server, "http", "kind = \"http\"\nmethod = \"OPTIONS\"\nhost = \"a.example\"\nport = 8080\naddress = \"::1\"").replace("{LISTEN}", "127.0.0.1:1"), &dir);
    assert!(ok, "{out}");
}
