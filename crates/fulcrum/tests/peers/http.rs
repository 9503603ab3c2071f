//! `mode = "http"` with real clients and servers: forwarded headers at nginx, readable errors,
//! the smuggling probes refused before any server sees them, slowloris connections that do not
//! slow anyone else, limits, a WebSocket round trip, and the HAProxy paper's POST load with ab.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

fn http_service(algorithm: &str, extra: &str, health: &str, servers: &[SocketAddr], server_extra: &[&str]) -> String {
    let mut s = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nalgorithm = \"{algorithm}\"\n{extra}\n\n[service.health]\n{health}\n");
    for (i, a) in servers.iter().enumerate() {
        s.push_str(&format!("\n[[service.server]]\naddress = \"{a}\"\n{}\n", server_extra.get(i).unwrap_or(&"")));
    }
    s
}

/// A raw exchange: sends `request` bytes, returns everything read until close or 5 s of quiet.
fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

pub(crate) fn curl_get(url: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl").args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"]).args(extra).arg(url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap_or(0), body.to_string())
}

#[test]
fn forwarded_headers_reach_nginx_and_hop_by_hop_headers_do_not() {
    let n = Nginx::start("n1", "TARGET");
    let f = Fulcrum::start(&http_service("round-robin", "", HTTP_CHECK, &[n.addr], &[]));
    f.wait_all_up();
    let url = format!("http://{}/headers", f.listen);
    let (status, body) = curl_get(
        &url,
        &[
            "--interface",
            "127.0.0.23",
            "-H",
            "X-Forwarded-For: 10.9.8.7",
            "-H",
            "Keep-Alive: timeout=99",
            "-H",
            "Connection: keep-alive, X-Drop",
            "-H",
            "X-Drop: 1",
            "-H",
            "TE: trailers",
        ],
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("xff=10.9.8.7, 127.0.0.23\n"), "X-Forwarded-For appends the client: {body}");
    assert!(body.contains("proto=http\n"), "{body}");
    assert!(body.contains("forwarded=for=127.0.0.23;proto=http\n"), "{body}");
    assert!(body.contains("keep-alive=\n") && body.contains("te=\n"), "hop-by-hop headers stop at Fulcrum: {body}");
    assert!(body.contains(&format!("host={}\n", f.listen.ip())), "the client's Host goes through: {body}");
    // HTTP/1.0 may leave Host out; the server, spoken to in HTTP/1.1, gets a Host naming the
    // address the client connected to instead of a 400 for a request without one.
    let answer = raw(f.listen, b"GET /headers HTTP/1.0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.0 200") && answer.contains(&format!("host={}\n", f.listen.ip())), "{answer}");

    // Keep-alive with the client: several requests on one connection, each forwarded.
    let out = Command::new("curl").args(["-sS", "-v"]).args([&url, &url, &url]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Re-using existing connection") || err.contains("Reusing existing"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).matches("server=n1").count(), 3);
}

#[test]
fn errors_say_what_went_wrong() {
    let slow = Backend::start("slow");
    let gone = free_port();
    let f = Fulcrum::start(&http_service(
        "round-robin",
        "retries = 0\n\n[service.http]\nresponse_timeout = \"500ms\"",
        "kind = \"none\"",
        &[slow.addr, format!("127.0.0.1:{gone}").parse().unwrap()],
        &["", "enabled = false"],
    ));
    // 504: the server does not answer in time.
    let (status, body) = curl_get(&format!("http://{}/slow/2000", f.listen), &[]);
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("did not answer within 500ms"), "{body}");
    // 502: the server cannot be reached.
    let (status, _) = f.api("POST", &format!("/api/services/web/servers/{}/state", slow.addr), Some(serde_json::json!({ "state": "disable" })));
    assert_eq!(status, 200);
    let (status, _) = f.api("POST", &format!("/api/services/web/servers/127.0.0.1:{gone}/state"), Some(serde_json::json!({ "state": "enable" })));
    assert_eq!(status, 200);
    let (status, body) = curl_get(&format!("http://{}/name", f.listen), &[]);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("cannot connect to a server"), "{body}");
    // 503: no server usable.
    let (status, _) = f.api("POST", &format!("/api/services/web/servers/127.0.0.1:{gone}/state"), Some(serde_json::json!({ "state": "disable" })));
    assert_eq!(status, 200);
    let (status, body) = curl_get(&format!("http://{}/name", f.listen), &[]);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no server is available"), "{body}");
    f.wait_log("no server is available");
    f.wait_log("\"GET /slow/2000\" 504");
}

#[test]
fn smuggling_probes_get_400_and_the_server_sees_nothing() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[b.addr], &[]));
    let stats = |what: &str| -> u64 {
        let (_, body) = http_get(b.addr, "/stats");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()[what].as_u64().unwrap()
    };
    // One good request first, so the server has a pooled connection from Fulcrum.
    assert!(raw(f.listen, b"GET /name HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").contains("200 OK"));
    let before = stats("requests");
    let probes: [(&str, &[u8]); 7] = [
        ("CL and TE", b"POST /post HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("TE and CL", b"POST /post HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"),
        ("two lengths", b"POST /post HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 6\r\n\r\nhello!"),
        ("bad chunk size", b"POST /post HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\nhello\r\n0\r\n\r\n"),
        ("line folding", b"GET /name HTTP/1.1\r\nHost: a\r\nX-Long: one\r\n two\r\n\r\n"),
        ("bare CR", b"GET /name HTTP/1.1\r\nHost: a\r\nX-A: 1\rX-B: 2\r\n\r\n"),
        ("smuggled after a good one", b"GET /name HTTP/1.1\r\nHost: a\r\n\r\nPOST /post HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ];
    for (what, probe) in probes {
        let answer = raw(f.listen, probe);
        let last = answer.rfind("HTTP/1.1").map(|i| &answer[i..]).unwrap_or("");
        assert!(last.starts_with("HTTP/1.1 400"), "{what}: {answer}");
        if what == "smuggled after a good one" {
            assert!(answer.starts_with("HTTP/1.1 200"), "the good request before it is answered: {answer}");
        }
    }
    // Only the good request of the last probe arrived, plus our own /stats request.
    assert_eq!(stats("requests"), before + 2, "the server saw none of the bad requests");
    f.wait_log("request refused with 400: both Content-Length and Transfer-Encoding");
}

#[test]
fn limits_answer_431_and_414() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "\n[service.http]\nmax_headers = 20\nmax_uri_length = 100", "kind = \"none\"", &[b.addr], &[]));
    let mut many = String::from("GET /name HTTP/1.1\r\nHost: a\r\n");
    for i in 0..30 {
        many.push_str(&format!("X-H{i}: {i}\r\n"));
    }
    many.push_str("\r\n");
    assert!(raw(f.listen, many.as_bytes()).starts_with("HTTP/1.1 431"));
    let big = format!("GET /name HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "x".repeat(40_000));
    assert!(raw(f.listen, big.as_bytes()).starts_with("HTTP/1.1 431"));
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "p".repeat(200));
    assert!(raw(f.listen, long.as_bytes()).starts_with("HTTP/1.1 414"));
    assert!(raw(f.listen, b"GET /name HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").contains("200 OK"));
}

/// 1,000 connections that send their heads a byte a second do not delay a normal request by more
/// than its usual latency plus 100 ms (compared as a ratio of medians, in one bounded run).
#[test]
fn slowloris_connections_do_not_delay_other_clients() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "\n[service.http]\nhead_timeout = \"20s\"", "kind = \"none\"", &[b.addr], &[]));
    let latency = |n: usize| -> Duration {
        let mut v: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                assert!(raw(f.listen, b"GET /name HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").contains("200 OK"));
                t.elapsed()
            })
            .collect();
        v.sort();
        v[n / 2]
    };
    let usual = latency(20);
    let mut slow: Vec<TcpStream> = (0..1000).filter_map(|_| TcpStream::connect(f.listen).ok()).collect();
    assert_eq!(slow.len(), 1000);
    let head = b"GET /name HTTP/1.1\r\nHost: slow\r\n";
    let started = Instant::now();
    let mut loaded = Vec::new();
    for i in 0..4 {
        for s in slow.iter_mut() {
            let _ = s.write_all(&head[i..i + 1]);
        }
        loaded.push(latency(5));
        std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed() - Duration::from_secs(i as u64)));
    }
    loaded.sort();
    let under_attack = loaded[loaded.len() / 2];
    println!("median latency: {usual:?} usual, {under_attack:?} with 1000 slow heads");
    assert!(under_attack <= usual + Duration::from_millis(100), "{under_attack:?} vs {usual:?}");
}

#[test]
fn a_websocket_echo_goes_through() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let server_addr = websocket_echo();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[server_addr], &[]));
        let (mut ws, response) = tokio_tungstenite::connect_async(format!("ws://{}/echo", f.listen)).await.unwrap();
        assert_eq!(response.status(), 101);
        for i in 0..10 {
            ws.send(Message::text(format!("hello {i}"))).await.unwrap();
            let back = ws.next().await.unwrap().unwrap();
            assert_eq!(back.into_text().unwrap().as_str(), format!("hello {i}"));
        }
        let big = vec![7u8; 1 << 20];
        ws.send(Message::binary(big.clone())).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap().into_data().to_vec(), big);
        ws.close(None).await.unwrap();
    });
}

/// The HAProxy paper's load test: 10,000 POST requests from 100 concurrent clients through
/// round robin, static-rr (weights 3:1:1:1) and least-conn over four nginx servers.
#[test]
fn ten_thousand_posts_with_ab_and_no_errors() {
    let servers = four_servers();
    let addrs: Vec<SocketAddr> = servers.iter().map(|n| n.addr).collect();
    let body = scratch("ab").join("post.txt");
    std::fs::write(&body, "field=value&other=".to_string() + &"x".repeat(512)).unwrap();
    for (algorithm, weights) in [("round-robin", ["", "", "", ""]), ("static-rr", ["weight = 3", "", "", ""]), ("least-conn", ["", "", "", ""])] {
        let f = Fulcrum::start(&http_service(algorithm, "\n[service.http]\naccess_log = \"off\"", HTTP_CHECK, &addrs, &weights));
        f.wait_all_up();
        let out = Command::new("ab")
            .args(["-q", "-n", "10000", "-c", "100", "-k", "-s", "30", "-T", "application/x-www-form-urlencoded", "-p"])
            .arg(&body)
            .arg(format!("http://{}/post", f.listen))
            .output()
            .expect("ab must be installed (scripts/test installs apache2-utils)");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{report}{}", String::from_utf8_lossy(&out.stderr));
        let field = |name: &str| report.lines().find(|l| l.starts_with(name)).map(|l| l[name.len()..].trim().to_string()).unwrap_or_default();
        assert_eq!(field("Complete requests:"), "10000", "{report}");
        assert_eq!(field("Failed requests:"), "0", "{report}");
        assert_eq!(field("Non-2xx responses:"), "", "{report}");
        let totals: Vec<u64> = f.stats()["services"][0]["servers"].as_array().unwrap().iter().map(|v| v["total"].as_u64().unwrap()).collect();
        println!("{algorithm}: {} requests/s, per server {totals:?}", field("Requests per second:"));
        assert_eq!(totals.iter().sum::<u64>(), 10000, "{totals:?}");
        match algorithm {
            "round-robin" => assert!(totals.iter().all(|&t| t == 2500), "{totals:?}"),
            "static-rr" => {
                assert!((4995..=5005).contains(&totals[0]), "weight 3 of 6: {totals:?}");
                assert!(totals[1..].iter().all(|t| (1660..=1672).contains(t)), "weight 1 of 6: {totals:?}");
            }
            _ => assert!(totals.iter().all(|&t| t > 0), "{totals:?}"),
        }
    }
}

/// The HAProxy paper's content switching, from `examples/haproxy-paper-routing.toml` with the
/// addresses of four nginx servers: static directories and extensions to `static`, the rest to
/// `app`; each pool checked and counted on its own.
#[test]
fn the_haproxy_papers_routing_rules_send_each_path_to_its_pool() {
    let s1 = Nginx::start("static1", "TARGET");
    let s2 = Nginx::start("static2", "TARGET");
    let a1 = Nginx::start("app1", "TARGET");
    let a2 = Nginx::start("app2", "TARGET");
    let example = include_str!("../../../../examples/haproxy-paper-routing.toml");
    let config = example.split("[admin]").next().unwrap().to_string()
        + &example[example.find("[[service]]").unwrap()..]
            .replace("0.0.0.0:8080", "{LISTEN}")
            .replace("127.0.0.1:8101", &s1.addr.to_string())
            .replace("127.0.0.1:8102", &s2.addr.to_string())
            .replace("127.0.0.1:8201", &a1.addr.to_string())
            .replace("127.0.0.1:8202", &a2.addr.to_string());
    let f = Fulcrum::start(&config);
    f.wait_all_up();
    // HAProxy itself, with the paper's frontend and backends over the same servers.
    let dir = scratch("haproxy-paper");
    let haproxy_at: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = format!(
        "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
         frontend main\n  bind {haproxy_at}\n\
         \x20 acl url_static path_beg -i /static /images /javascript /stylesheets\n\
         \x20 acl url_static path_end -i .jpg .gif .png .css .js\n\
         \x20 use_backend static if url_static\n  default_backend app\n\
         backend static\n  balance roundrobin\n  server static1 {}\n  server static2 {}\n\
         backend app\n  balance roundrobin\n  server app1 {}\n  server app2 {}\n",
        s1.addr, s2.addr, a1.addr, a2.addr
    );
    std::fs::write(dir.join("haproxy.cfg"), cfg).unwrap();
    let mut haproxy = Command::new("haproxy")
        .args(["-db", "-f", dir.join("haproxy.cfg").to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("haproxy must be installed (scripts/test installs it)");
    wait_until("haproxy", Duration::from_secs(10), || std::net::TcpStream::connect(haproxy_at).is_ok());
    let served_by = |via: SocketAddr, path: &str| -> String {
        let out = Command::new("curl").args(["-s", "-o", "/dev/null", "-D", "-"]).arg(format!("http://{via}{path}")).output().unwrap();
        let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        head.lines().find_map(|l| l.strip_prefix("x-served-by: ")).unwrap_or("none").trim().to_string()
    };
    let pool = |who: String| who.trim_end_matches(char::is_numeric).to_string();
    // HAProxy's path_beg and path_end with -i: /staticfoo and /images.html are static too, and
    // case does not count.
    let paths = [
        ("/static/site.html", "static"),
        ("/images/logo", "static"),
        ("/javascript/app", "static"),
        ("/stylesheets/main", "static"),
        ("/shop/photo.jpg", "static"),
        ("/a.gif", "static"),
        ("/b.png", "static"),
        ("/c.css", "static"),
        ("/d.js", "static"),
        ("/static", "static"),
        ("/staticfoo", "static"),
        ("/images.html", "static"),
        ("/STATIC/x", "static"),
        ("/Photo.JPG", "static"),
        ("/", "app"),
        ("/index.html", "app"),
        ("/cart", "app"),
        ("/app.jsx", "app"),
        ("/css/x", "app"),
    ];
    for (path, want) in paths {
        let (ours, theirs) = (pool(served_by(f.listen, path)), pool(served_by(haproxy_at, path)));
        assert_eq!((ours.as_str(), theirs.as_str()), (want, want), "{path}: Fulcrum sent it to {ours}, HAProxy to {theirs}");
    }
    let _ = haproxy.kill();
    let _ = haproxy.wait();
    let served_by = |path: &str| served_by(f.listen, path);
    let stats = f.stats();
    let names: Vec<&str> = stats["services"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["www", "www/static", "www/app"]);
    let total = |i: usize| -> u64 { stats["services"][i]["servers"].as_array().unwrap().iter().map(|v| v["total"].as_u64().unwrap()).sum() };
    assert_eq!((total(1), total(2)), (14, 5), "requests per pool");
    f.wait_log(" www static ");
    // A pool's servers are changed through the API under the pool's name.
    let (status, answer) = f.api("POST", &format!("/api/services/www%2Fstatic/servers/{}/state", s1.addr), Some(serde_json::json!({ "state": "disable" })));
    assert_eq!(status, 200, "{answer}");
    for _ in 0..4 {
        assert_eq!(served_by("/x.css"), "static2");
    }
}

/// The `cookie` algorithm with curl's cookie jar: 100 requests on the server the first one got;
/// when that server stops, the next request goes to another and the cookie names the new one.
#[test]
fn a_cookie_keeps_a_client_on_its_server_and_fails_over() {
    let mut servers = four_servers();
    let addrs: Vec<SocketAddr> = servers.iter().map(|n| n.addr).collect();
    let ids = ["id=\"a\"", "id=\"b\"", "id=\"c\"", "id=\"d\""];
    let f = Fulcrum::start(&http_service("cookie", "", HTTP_CHECK, &addrs, &ids));
    f.wait_all_up();
    let jar = scratch("cookies").join("jar.txt");
    let get = |path: &str| -> String {
        let out = Command::new("curl").args(["-s", "-b"]).arg(&jar).arg("-c").arg(&jar).arg(format!("http://{}{path}", f.listen)).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    };
    let first = get("/name");
    let names: std::collections::BTreeSet<String> = (0..100).map(|_| get("/name")).collect();
    assert_eq!(names.len(), 1, "one server for the whole session: {names:?}");
    assert!(names.contains(&first));
    let jar_text = std::fs::read_to_string(&jar).unwrap();
    let held = servers.iter().position(|n| n.name == first).unwrap();
    assert!(jar_text.contains(&format!("SERVERID\t{}", ["a", "b", "c", "d"][held])), "{jar_text}");
    // Other clients are spread: a fresh client each time lands round robin.
    let fresh: std::collections::BTreeSet<String> = (0..8).map(|_| http_get(f.listen, "/name").1).collect();
    assert_eq!(fresh.len(), 4, "{fresh:?}");

    servers[held].stop();
    wait_until("the stopped server down", Duration::from_secs(10), || f.server_stats(&addrs[held].to_string())["state"] == "down");
    let after = get("/name");
    assert_ne!(after, first, "failed over");
    let jar_text = std::fs::read_to_string(&jar).unwrap();
    let now = servers.iter().position(|n| n.name == after).unwrap();
    assert!(jar_text.contains(&format!("SERVERID\t{}", ["a", "b", "c", "d"][now])), "the cookie is issued again: {jar_text}");
    let names: std::collections::BTreeSet<String> = (0..20).map(|_| get("/name")).collect();
    assert_eq!(names.into_iter().collect::<Vec<_>>(), vec![after], "and it sticks to the new server");
}

/// JServ style: the application's session cookie gets `.server-id`, and requests follow it.
#[test]
fn a_jserv_session_cookie_is_honoured() {
    let servers = four_servers();
    let addrs: Vec<SocketAddr> = servers.iter().map(|n| n.addr).collect();
    let ids = ["id=\"n1\"", "id=\"n2\"", "id=\"n3\"", "id=\"n4\""];
    let f = Fulcrum::start(&http_service("cookie", "\n[service.http]\ncookie = \"JSESSIONID\"\ncookie_mode = \"jserv\"", HTTP_CHECK, &addrs, &ids));
    f.wait_all_up();
    let head = |cookie: Option<&str>| -> String {
        let mut c = Command::new("curl");
        c.args(["-s", "-o", "/dev/null", "-D", "-"]);
        if let Some(v) = cookie {
            c.args(["-H", &format!("Cookie: JSESSIONID={v}")]);
        }
        String::from_utf8_lossy(&c.arg(format!("http://{}/session", f.listen)).output().unwrap().stdout).to_lowercase()
    };
    let h = head(None);
    let served = h.lines().find_map(|l| l.strip_prefix("x-served-by: ")).unwrap().trim().to_string();
    let i = servers.iter().position(|n| n.name == served).unwrap();
    assert!(h.contains(&format!("set-cookie: jsessionid=sess-{served}.n{}", i + 1)), "the session names its server: {h}");
    // A client holding a session for n3 reaches the third server every time.
    for _ in 0..20 {
        let h = head(Some("sess-x.n3"));
        assert!(h.contains(&format!("x-served-by: {}", servers[2].name)), "{h}");
    }
}

/// `uri-hash`: one path, one server; different paths spread.
#[test]
fn uri_hash_keeps_a_path_on_one_server() {
    let servers = four_servers();
    let addrs: Vec<SocketAddr> = servers.iter().map(|n| n.addr).collect();
    let f = Fulcrum::start(&http_service("uri-hash", "", HTTP_CHECK, &addrs, &[]));
    f.wait_all_up();
    let served_by = |path: &str| -> String {
        let out = Command::new("curl").args(["-s", "-o", "/dev/null", "-D", "-"]).arg(format!("http://{}{path}", f.listen)).output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_lowercase().lines().find_map(|l| l.strip_prefix("x-served-by: ").map(|s| s.trim().to_string())).unwrap_or_default()
    };
    let mut spread = std::collections::BTreeSet::new();
    for p in 0..40 {
        let path = format!("/page{p}.html?session={p}");
        let first = served_by(&path);
        assert_eq!(served_by(&format!("/page{p}.html?other=1")), first, "the query is not hashed by default");
        spread.insert(first);
    }
    assert_eq!(spread.len(), 4, "{spread:?}");
}

/// `maxconn` per server with a queue: requests beyond it wait and all succeed; when they wait
/// longer than `queue_timeout` they get 503 saying so.
#[test]
fn maxconn_queues_requests_and_the_queue_times_out() {
    let b1 = Backend::start("b1");
    let b2 = Backend::start("b2");
    let f = Fulcrum::start(&http_service("round-robin", "\n[service.http]\nqueue_timeout = \"3s\"", "kind = \"none\"", &[b1.addr, b2.addr], &["maxconn = 2", "maxconn = 2"]));
    let run = |n: usize, path: &'static str| -> Vec<u16> {
        let listen = f.listen;
        let threads: Vec<_> = (0..n).map(|_| std::thread::spawn(move || curl_get(&format!("http://{listen}{path}"), &[]).0)).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    };
    // 12 requests of 300 ms, 4 at a time: all wait their turn and succeed.
    let codes = run(12, "/slow/300");
    assert!(codes.iter().all(|&c| c == 200), "{codes:?}");
    let stats = f.stats();
    let service = &stats["services"][0];
    assert!(service["queue_max"].as_u64().unwrap() >= 4, "requests queued: {service}");
    for v in service["servers"].as_array().unwrap() {
        assert!(v["max"].as_u64().unwrap() <= 2, "maxconn held: {v}");
    }
    // 8 requests of 5 s: four run, four wait 3 s and get 503.
    let codes = run(8, "/slow/5000");
    assert_eq!(codes.iter().filter(|&&c| c == 503).count(), 4, "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 4, "{codes:?}");
    f.wait_log("(queue timeout)");
}

/// A server that answers the first request on each connection and then, like a server whose
/// keep-alive timer just fired, closes the connection when the next request arrives. A GET on
/// the reused connection is sent again on a new one; a POST with a body is not (502).
#[test]
fn an_idempotent_request_is_retried_when_a_reused_connection_was_closed() {
    use std::io::BufRead;
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                // Request 1: read the head (and a body of Content-Length bytes), answer.
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                // Request 2: read its first line, then close without an answer.
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
            });
        }
    });
    let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[addr], &[]));
    for i in 0..5 {
        let (status, body) = curl_get(&format!("http://{}/get{i}", f.listen), &[]);
        assert_eq!((status, body.as_str()), (200, "ok"), "GET {i}");
    }
    // Each GET after the first found its pooled connection closed as it was sent, and was sent again.
    let s = f.server_stats(&addr.to_string());
    assert!(s["transfer_errors"].as_u64().unwrap() >= 4, "the closed reused connections were seen: {s}");
    // A POST with a body is not sent twice: on the pooled connection the server closes, the
    // client learns the server broke the connection; the next POST gets a fresh connection.
    let (status, body) = curl_get(&format!("http://{}/post", f.listen), &["-d", "x=1"]);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("the server broke the connection"), "{body}");
    let (status, body) = curl_get(&format!("http://{}/post", f.listen), &["-d", "x=2"]);
    assert_eq!((status, body.as_str()), (200, "ok"));
}

/// The access log as JSON: one line per request with every field the issue names.
#[test]
fn the_json_access_log_has_a_line_per_request() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "\n[service.http]\naccess_log = \"json\"", "kind = \"none\"", &[b.addr], &[]));
    let (status, _) = curl_get(&format!("http://{}/post?x=1", f.listen), &["-d", "0123456789", "--interface", "127.0.0.31"]);
    assert_eq!(status, 200);
    f.wait_log("\"path\":\"/post?x=1\"");
    let line = f.log().lines().find(|l| l.contains("\"path\":\"/post?x=1\"")).unwrap().to_string();
    let json: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..].replace("\u{1b}[0m", "")).unwrap_or_else(|e| panic!("{e}: {line}"));
    for key in ["time", "client", "service", "pool", "server", "method", "path", "status", "bytes_in", "bytes_out", "queue_ms", "connect_ms", "response_ms"] {
        assert!(json.get(key).is_some(), "{key} missing in {json}");
    }
    assert_eq!(json["status"], 200);
    assert_eq!(json["bytes_in"], 10);
    assert_eq!(json["method"], "POST");
    assert!(json["client"].as_str().unwrap().starts_with("127.0.0.31:"), "{json}");
    assert_eq!(json["server"], b.addr.to_string());
}

/// Sends `request`, half-closes unless `keep_open`, and reads until the connection closes: the
/// text and whether it closed (rather than went quiet for 5 s).
fn exchange(addr: SocketAddr, request: &[u8], keep_open: bool) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    if !keep_open {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut out = Vec::new();
    let closed = s.read_to_end(&mut out).is_ok();
    (String::from_utf8_lossy(&out).to_string(), closed)
}

fn status_lines(answer: &str) -> usize {
    answer.lines().filter(|l| l.starts_with("HTTP/1.")).count()
}

/// Asserts one response with `status` and a closed connection; returns the answer.
fn one_answer(addr: SocketAddr, what: &str, request: &[u8], status: u16) -> String {
    // Kept open: Fulcrum must close it itself, without waiting for the client to leave.
    let (answer, closed) = exchange(addr, request, true);
    assert_eq!(status_lines(&answer), 1, "{what}: exactly one response: {answer}");
    assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{what}: {answer}");
    assert!(closed, "{what}: the connection is closed after the answer: {answer}");
    answer
}

/// A `fulcrum backend`'s own count of the connections and requests it has served (the stats
/// request itself included).
fn served(b: &Backend) -> (u64, u64) {
    let (_, body) = http_get(b.addr, "/stats");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    (v["connections"].as_u64().unwrap(), v["requests"].as_u64().unwrap())
}

/// Asserts that nothing was counted against the server at `addr`.
fn nothing_held_against(f: &Fulcrum, addr: SocketAddr) {
    let s = f.server_stats(&addr.to_string());
    assert_eq!(s["transfer_errors"], 0, "{s}");
    assert_eq!(s["connect_failures"], 0, "{s}");
    assert_eq!(s["state"], "up", "{s}");
}

#[test]
fn a_malformed_chunked_body_gets_one_400_and_never_reaches_a_server() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[b.addr], &[]));
    let before = served(&b);
    let head = "POST /post HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (what, body) in [
        ("chunk size g", "g\r\nhello\r\n0\r\n\r\n"),
        ("chunk size 0x5", "0x5\r\nhello\r\n0\r\n\r\n"),
        ("chunk size past 64 bits", "ffffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
        ("bare LF after the chunk size", "5\nhello\r\n0\r\n\r\n"),
        ("chunk data longer than its size", "3\r\nhello\r\n0\r\n\r\n"),
    ] {
        one_answer(f.listen, what, format!("{head}{body}").as_bytes(), 400);
    }
    assert_eq!(served(&b), (before.0 + 1, before.1 + 1), "the server saw no connection and no request but our own /stats");
    nothing_held_against(&f, b.addr);
    assert_eq!(f.server_stats(&b.addr.to_string())["total"], 0);
    f.wait_log("the client is at fault: chunk data not followed by CRLF");
}

#[test]
fn a_request_body_failing_as_it_streams_is_the_clients_fault() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[b.addr], &[]));
    // Past the read-ahead, so the server is contacted before the bad chunk arrives.
    let big = "x".repeat(100 * 1024);
    let late_bad_chunk = format!("POST /post HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\ng\r\n", big.len());
    let answer = one_answer(f.listen, "a bad chunk after 100 KiB", late_bad_chunk.as_bytes(), 400);
    assert!(answer.contains("invalid chunk size"), "{answer}");
    // The client leaves (half-closes) half way through a Content-Length body.
    let cut = format!("POST /post HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{big}", 2 * big.len());
    let (answer, closed) = exchange(f.listen, cut.as_bytes(), false);
    assert!(closed && status_lines(&answer) <= 1, "{answer}");
    assert!(!answer.contains("502"), "the server is not blamed: {answer}");
    f.wait_log("the client is at fault: the client's request body failed");
    nothing_held_against(&f, b.addr);
    // The server is still used: a good POST after them goes through.
    let ok = format!("POST /post HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{big}", big.len());
    let (answer, _) = exchange(f.listen, ok.as_bytes(), true);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"received\":102400"), "{answer}");
}

#[test]
fn host_must_be_one_and_present_in_http_1_1() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[b.addr], &[]));
    let before = served(&b);
    one_answer(f.listen, "two Host", b"GET /name HTTP/1.1\r\nHost: public\r\nHost: internal\r\n\r\n", 400);
    one_answer(f.listen, "HTTP/1.1 without Host", b"GET /name HTTP/1.1\r\nX-A: 1\r\n\r\n", 400);
    one_answer(f.listen, "an invalid Host", b"GET /name HTTP/1.1\r\nHost: a b\r\n\r\n", 400);
    assert_eq!(served(&b), (before.0 + 1, before.1 + 1), "the server saw none of them");
    nothing_held_against(&f, b.addr);
    f.wait_log("the client is at fault: more than one Host");
    // HTTP/1.0 may leave Host out.
    let (answer, _) = exchange(f.listen, b"GET /name HTTP/1.0\r\n\r\n", true);
    assert!(answer.starts_with("HTTP/1.0 200") && answer.ends_with("\r\n\r\nb\n"), "{answer}");
}

#[test]
fn connection_options_keep_host_and_an_absolute_target_names_the_host() {
    let n = Nginx::start("n1", "TARGET");
    let f = Fulcrum::start(&http_service("round-robin", "", "kind = \"none\"", &[n.addr], &[]));
    let (answer, _) = exchange(f.listen, b"GET /headers HTTP/1.1\r\nHost: a.example\r\nConnection: close, Host\r\n\r\n", true);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\nhost=a.example\n"), "Host survives a Connection option: {answer}");
    let (answer, _) = exchange(f.listen, b"GET http://user@b.example:8080/headers HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n", true);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\nhost=b.example\n"), "the target's host replaces Host: {answer}");
}

#[test]
fn connect_gets_501_and_nothing_after_it_is_read() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service("round-robin", "\n[service.http]\naccess_log = \"text\"", "kind = \"none\"", &[b.addr], &[]));
    let before = served(&b);
    let answer = one_answer(f.listen, "CONNECT", format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\nGET /name HTTP/1.1\r\nHost: a\r\n\r\n", b.addr).as_bytes(), 501);
    assert!(!answer.contains("\r\n\r\nb"), "the bytes after CONNECT are not a request: {answer}");
    assert_eq!(served(&b), (before.0 + 1, before.1 + 1), "the server saw nothing");
    assert_eq!(f.server_stats(&b.addr.to_string())["total"], 0);
    f.wait_log(&format!("\"CONNECT {}\" 501", b.addr));
}
