//! HTTP/3 (`[service.http] http3`): aioquic's client (tests/h3/client.py) against Fulcrum's QUIC
//! listener, through to real servers over HTTP/1.1 and HTTP/2: GETs balanced, routed, denied and
//! kept to their server by cookie as over TCP; request bodies and trailers, response trailers
//! (gRPC's status); a hundred and fifty requests at once on one connection; the limits (streams,
//! field section size, maxconn); Retry under `quic_retry_above`; 0-RTT with and without
//! `quic_early_data`; the access log; `Alt-Svc` on the HTTP/1.1 and HTTP/2 answers of the same
//! service; reloads, the drain, a binary upgrade and `reuse_port` workers.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

fn client_script() -> String {
    format!("{}/tests/h3/client.py", env!("CARGO_MANIFEST_DIR"))
}

/// Runs the HTTP/3 client against `addr` (UDP) with `requests`, verifying the server's
/// certificate with `ca` for `name`, giving up after `timeout` seconds: its JSON answer, or what
/// it said on failing.
fn h3_try(addr: SocketAddr, name: &str, ca: &std::path::Path, requests: serde_json::Value, timeout: u32) -> Result<serde_json::Value, String> {
    h3_with(addr, name, ca, requests, timeout, &[])
}

/// `h3_try` with the client's `extra` arguments.
fn h3_with(addr: SocketAddr, name: &str, ca: &std::path::Path, requests: serde_json::Value, timeout: u32, extra: &[&std::ffi::OsStr]) -> Result<serde_json::Value, String> {
    let out = Command::new("python3")
        .args([client_script(), addr.ip().to_string(), addr.port().to_string(), requests.to_string()])
        .arg("--ca")
        .arg(ca)
        .args(["--server-name", name, "--timeout", &timeout.to_string()])
        .args(extra)
        .output()
        .expect("python3 with aioquic (scripts/test installs it)");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout))))
}

fn h3(addr: SocketAddr, name: &str, ca: &std::path::Path, requests: serde_json::Value) -> serde_json::Value {
    h3_try(addr, name, ca, requests, 30).unwrap_or_else(|e| panic!("HTTP/3 client failed: {e}"))
}

/// The config of a TLS service with HTTP/3 for `a.test` in front of `servers`, with `top` at
/// the top, `http_extra` in `[service.http]` and `extra` at the service's level.
fn h3_config(cert: &std::path::Path, key: &std::path::Path, top: &str, http_extra: &str, extra: &str, servers: &[SocketAddr]) -> String {
    let servers: String = servers.iter().map(|a| format!("[[service.server]]\naddress = \"{a}\"\n")).collect();
    format!(
        "{top}\n[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n{extra}\n[service.http]\n{http_extra}\n[service.health]\nkind = \"none\"\n\
         [service.tls]\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n{servers}",
        cert.display(),
        key.display()
    )
}

/// Fulcrum with `h3_config` (and `http3 = true`); the certificate doubles as its CA.
fn h3_service(dir: &std::path::Path, http_extra: &str, extra: &str, servers: &[SocketAddr]) -> (Fulcrum, std::path::PathBuf) {
    let (cert, key) = openssl_self_signed(dir, "a.test");
    let f = Fulcrum::start(&h3_config(&cert, &key, "", &format!("http3 = true\n{http_extra}"), extra, servers));
    (f, cert)
}

#[test]
fn requests_over_http3_reach_the_servers_with_bodies_trailers_and_the_access_log() {
    let dir = scratch("h3-basic");
    let (a, b) = (Backend::start("h3a"), Backend::start("h3b"));
    let (f, ca) = h3_service(&dir, "log_format = \"{method} {path} {version} {status} {bytes_in}\"", "algorithm = \"round-robin\"", &[a.addr, b.addr]);
    let out = h3(
        f.listen,
        "a.test",
        &ca,
        serde_json::json!([
            {"path": "/name", "repeat": 4},
            {"method": "POST", "path": "/upload", "body_size": 300000},
            {"method": "POST", "path": "/with-trailers", "body": "hello", "trailers": [["x-checksum", "abc"]]},
        ]),
    );
    let responses = out["responses"].as_array().unwrap();
    assert_eq!(responses.len(), 6, "{out}");
    for r in responses {
        assert_eq!(r["status"], 200, "{r}");
        assert!(r["headers"].get("alt-svc").is_none(), "no Alt-Svc over HTTP/3 itself: {r}");
    }
    let upload: serde_json::Value = serde_json::from_str(responses[4]["body"].as_str().unwrap()).unwrap();
    assert_eq!(upload["received"], 300000, "the whole body reached the server: {out}");
    let trailed: serde_json::Value = serde_json::from_str(responses[5]["body"].as_str().unwrap()).unwrap();
    assert_eq!(trailed["received"], 5, "a body with trailers: {out}");
    // The six requests went at once: round robin split them evenly, whichever took which.
    let mut names: Vec<String> = responses[..4].iter().map(|r| r["body"].as_str().unwrap().trim().to_string()).collect();
    names.extend([&upload, &trailed].iter().map(|j| j["name"].as_str().unwrap().to_string()));
    names.sort();
    assert_eq!(names, ["h3a", "h3a", "h3a", "h3b", "h3b", "h3b"], "round robin over HTTP/3: {out}");
    let tls = &f.stats()["services"][0]["tls"];
    assert!(tls["quic_handshakes"].as_u64().unwrap() >= 1, "{tls}");
    wait_until("six HTTP/3 lines in the access log", Duration::from_secs(10), || f.log().lines().filter(|l| l.contains(" HTTP/3.0 200")).count() >= 6);
    assert!(f.log().contains("POST /upload HTTP/3.0 200 300000"), "{}", f.log());
}

#[test]
fn a_hundred_and_fifty_requests_at_once_share_one_connection_within_max_streams() {
    let dir = scratch("h3-many");
    let a = Backend::start("h3many");
    let (f, ca) = h3_service(&dir, "max_streams = 40", "", &[a.addr]);
    let out = h3(f.listen, "a.test", &ca, serde_json::json!([{"path": "/bytes/20000", "repeat": 150}]));
    assert_eq!(out["server_max_streams_bidi"], 40, "the transport's stream credit is max_streams: {out}");
    let responses = out["responses"].as_array().unwrap();
    assert_eq!(responses.len(), 150);
    for r in responses {
        assert_eq!((r["status"].as_u64(), r["length"].as_u64()), (Some(200), Some(20000)), "{r}");
    }
    assert_eq!(f.stats()["services"][0]["tls"]["quic_handshakes"], 1, "one connection");
}

#[test]
fn a_field_section_over_max_head_size_is_answered_431_and_the_connection_goes_on() {
    let dir = scratch("h3-head");
    let a = Backend::start("h3head");
    let (f, ca) = h3_service(&dir, "max_head_size = 8192", "", &[a.addr]);
    let big = "v".repeat(20_000);
    let out = h3(f.listen, "a.test", &ca, serde_json::json!([{"path": "/name", "headers": [["x-big", big]]}, {"path": "/name"}]));
    let responses = out["responses"].as_array().unwrap();
    assert_eq!(responses[0]["status"], 431, "{out}");
    assert_eq!((responses[1]["status"].as_u64(), responses[1]["body"].as_str()), (Some(200), Some("h3head\n")), "{out}");
    assert_eq!(f.server_stats(&a.addr.to_string())["total"], 1, "the refused request never reached the server");
}

#[test]
fn clients_prove_their_address_with_retry_above_quic_retry_above() {
    let dir = scratch("h3-retry");
    let a = Backend::start("h3retry");
    let (f, ca) = h3_service(&dir, "quic_retry_above = 0", "", &[a.addr]);
    let out = h3(f.listen, "a.test", &ca, serde_json::json!([{"path": "/name"}]));
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    let tls = &f.stats()["services"][0]["tls"];
    assert_eq!(tls["quic_retries"], 1, "the client was sent a Retry and came back with its token: {tls}");
    assert_eq!(tls["quic_handshakes"], 1, "{tls}");
    assert_eq!(crate::tls::metric(&f, "fulcrum_quic_retries_total{service=\"web\"}"), 1);
    assert_eq!(crate::tls::metric(&f, "fulcrum_quic_handshakes_total{service=\"web\"}"), 1);
}

#[test]
fn grpc_over_http3_gets_its_status_in_the_trailers() {
    let dir = scratch("h3-grpc");
    let port = free_port();
    let server = Command::new("python3")
        .args([format!("{}/tests/grpc/server.py", env!("CARGO_MANIFEST_DIR")), "g3".into(), port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("python3 with grpcio");
    let _server = KillOnDrop(server);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_until("the gRPC server", Duration::from_secs(20), || std::net::TcpStream::connect(addr).is_ok());
    let (f, ca) = h3_service(&dir, "", "protocol = \"h2\"", &[addr]);
    let grpc = |method: &str| serde_json::json!({"method": "POST", "path": format!("/fulcrum.Echo/{method}"), "headers": [["content-type", "application/grpc"], ["te", "trailers"]], "body": "\u{0}\u{0}\u{0}\u{0}\u{0}"});
    let out = h3(f.listen, "a.test", &ca, serde_json::json!([grpc("Name"), grpc("Fail")]));
    let (ok, failed) = (&out["responses"][0], &out["responses"][1]);
    assert_eq!(ok["status"], 200, "{out}");
    assert!(ok["body"].as_str().unwrap().ends_with("g3"), "{ok}");
    assert_eq!(ok["trailers"]["grpc-status"], "0", "{ok}");
    // A call that fails at once is answered trailers-only: the status in the one field section.
    assert_eq!(failed["headers"]["grpc-status"], "5", "NOT_FOUND: {failed}");
    assert!(failed["headers"]["grpc-message"].as_str().unwrap().contains("nothing here on g3"), "{failed}");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn http1_and_http2_answers_announce_http3_with_alt_svc() {
    let dir = scratch("h3-altsvc");
    let a = Backend::start("h3alt");
    let (f, ca) = h3_service(&dir, "alt_svc_max_age = \"1h\"", "", &[a.addr]);
    let port = f.listen.port();
    for version in ["--http1.1", "--http2"] {
        let out = Command::new("curl")
            .args(["-sS", "-D", "-", "-o", "/dev/null", version, "--cacert"])
            .arg(&ca)
            .args(["--resolve", &format!("a.test:{port}:127.0.0.1"), &format!("https://a.test:{port}/name")])
            .output()
            .unwrap();
        let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(head.contains(&format!("alt-svc: h3=\":{port}\"; ma=3600")), "{version}: {head}");
    }
    // The same service without http3 announces nothing.
    let plain = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[service.tls]\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n[[service.server]]\naddress = \"{}\"\n",
        ca.display(),
        dir.join("a.test.key").display(),
        a.addr
    ));
    let out = Command::new("curl").args(["-sSk", "-D", "-", "-o", "/dev/null", &format!("https://127.0.0.1:{}/name", plain.listen.port())]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).to_lowercase().contains("alt-svc"), "no http3, no Alt-Svc");
}

#[test]
fn check_refuses_http3_without_tls_or_with_client_certificates() {
    let dir = scratch("h3-check");
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let (ok, said) = check_config(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nmode = \"http\"\n[service.http]\nhttp3 = true\n[[service.server]]\naddress = \"127.0.0.1:80\"\n",
        &dir,
    );
    assert!(!ok && said.contains("http3 runs over QUIC"), "{said}");
    let (ok, said) = check_config(
        &format!(
            "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nmode = \"http\"\n[service.http]\nhttp3 = true\nquic_retry_above = 1000000\n[service.tls]\nclient_ca = \"{}\"\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n[[service.server]]\naddress = \"127.0.0.1:80\"\n",
            cert.display(),
            cert.display(),
            key.display()
        ),
        &dir,
    );
    assert!(!ok && said.contains("client certificates") && said.contains("quic_retry_above"), "{said}");
}

#[test]
fn a_drain_sends_goaway_and_lets_the_requests_in_flight_finish() {
    let dir = scratch("h3-drain");
    let a = Backend::start("h3drain");
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let mut f = Fulcrum::start(&h3_config(&cert, &key, "shutdown_grace = \"10s\"", "http3 = true", "", &[a.addr]));
    let (listen, ca) = (f.listen, cert.clone());
    let slow = std::thread::spawn(move || h3(listen, "a.test", &ca, serde_json::json!([{"path": "/slow/2000", "repeat": 3}])));
    wait_until("three requests in flight", Duration::from_secs(10), || f.server_stats(&a.addr.to_string())["current"].as_u64() == Some(3));
    f.signal(libc_sig::TERM);
    let out = slow.join().unwrap();
    for r in out["responses"].as_array().unwrap() {
        assert_eq!((r["status"].as_u64(), r["body"].as_str()), (Some(200), Some("h3drain\n")), "answered whole during the drain: {out}");
    }
    assert!(f.wait_exit(Duration::from_secs(15)).is_some(), "the process exits once its QUIC connections are done");
    assert!(f.log().contains("HTTP/3 stopped listening"), "{}", f.log());
}

#[test]
fn a_reload_turns_http3_off_and_on_and_changes_its_limits() {
    let dir = scratch("h3-reload");
    let a = Backend::start("h3reload");
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let f = Fulcrum::start(&h3_config(&cert, &key, "", "http3 = true", "", &[a.addr]));
    let get = serde_json::json!([{"path": "/name"}]);
    assert_eq!(h3(f.listen, "a.test", &cert, get.clone())["responses"][0]["status"], 200);
    let config = |http: &str| h3_config(&cert, &key, "", http, "", &[a.addr]);
    f.reload(&config(""));
    wait_until("the QUIC listener stopped", Duration::from_secs(10), || f.log().contains("HTTP/3 stopped listening"));
    assert!(h3_try(f.listen, "a.test", &cert, get.clone(), 3).is_err(), "no HTTP/3 once http3 is off");
    f.reload(&config("http3 = true"));
    wait_until("the QUIC listener back", Duration::from_secs(10), || f.log().matches("HTTP/3 listening").count() == 2);
    assert_eq!(h3(f.listen, "a.test", &cert, get.clone())["responses"][0]["status"], 200);
    // A limit changed alone (the certificates kept) reaches the next QUIC connections.
    f.reload(&config("http3 = true\nmax_streams = 7"));
    wait_until("max_streams 7 over QUIC", Duration::from_secs(10), || h3(f.listen, "a.test", &cert, get.clone())["server_max_streams_bidi"] == 7);
}

#[test]
fn a_client_over_maxconn_is_refused_while_the_first_is_served() {
    let dir = scratch("h3-maxconn");
    let a = Backend::start("h3max");
    let (f, ca) = h3_service(&dir, "", "maxconn = 1", &[a.addr]);
    let (listen, first_ca) = (f.listen, ca.clone());
    let first = std::thread::spawn(move || h3(listen, "a.test", &first_ca, serde_json::json!([{"path": "/slow/3000"}])));
    wait_until("the first client's request in flight", Duration::from_secs(10), || f.server_stats(&a.addr.to_string())["current"].as_u64() == Some(1));
    assert!(h3_try(f.listen, "a.test", &ca, serde_json::json!([{"path": "/name"}]), 3).is_err(), "a second QUIC connection past maxconn is refused");
    assert!(f.stats()["services"][0]["tls"]["quic_refused"].as_u64().unwrap() >= 1);
    assert_eq!(first.join().unwrap()["responses"][0]["status"], 200, "the first client is served to the end");
}

#[test]
fn with_reuse_port_workers_every_quic_connection_is_served_whole() {
    let dir = scratch("h3-workers");
    let a = Backend::start("h3workers");
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let f = Fulcrum::start(&h3_config(&cert, &key, "workers = 2\nreuse_port = true", "http3 = true", "", &[a.addr]));
    // Connections from several client ports: the one QUIC endpoint routes each one's packets to
    // it by connection ID, whichever worker serves the TCP side.
    for round in 0..3 {
        let out = h3(f.listen, "a.test", &cert, serde_json::json!([{"path": "/bytes/20000", "repeat": 20}]));
        for r in out["responses"].as_array().unwrap() {
            assert_eq!((r["status"].as_u64(), r["length"].as_u64()), (Some(200), Some(20_000)), "round {round}: {r}");
        }
    }
    assert_eq!(f.stats()["services"][0]["tls"]["quic_handshakes"], 3);
    assert_eq!(f.log().matches("HTTP/3 listening").count(), 1, "one QUIC endpoint for the address");
}

#[test]
fn after_an_upgrade_the_new_process_serves_http3_once_the_old_lets_the_port_go() {
    let dir = scratch("h3-upgrade");
    let a = Backend::start("h3up");
    let exe = dir.join("fulcrum");
    crate::upgrade::replace_binary(&exe);
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let f = Fulcrum::start_exe(&exe, &h3_config(&cert, &key, "shutdown_grace = \"5s\"", "http3 = true", "", &[a.addr]));
    let get = serde_json::json!([{"path": "/name"}]);
    assert_eq!(h3(f.listen, "a.test", &cert, get.clone())["responses"][0]["body"], "h3up\n");
    let old = crate::upgrade::pid(&f);
    crate::upgrade::replace_binary(&exe);
    let (status, answer) = f.api("POST", "/api/upgrade", None);
    assert_eq!(status, 200, "{answer}");
    wait_until("the new process answers the admin API", Duration::from_secs(20), || crate::upgrade::pid(&f) != old);
    let new = crate::upgrade::pid(&f);
    // The old process had no QUIC connection left: it lets the port go at once, and the new one
    // binds it at its next try.
    let mut served = None;
    wait_until("HTTP/3 served by the new process", Duration::from_secs(20), || {
        served = h3_try(f.listen, "a.test", &cert, get.clone(), 2).ok();
        served.is_some()
    });
    assert_eq!(served.unwrap()["responses"][0]["status"], 200);
    assert_eq!(f.stats()["services"][0]["tls"]["quic_handshakes"], 1, "the new process's own count: {new}");
    // The last process is no child of this test's: end it here.
    Command::new("kill").args(["-KILL", &new.to_string()]).status().unwrap();
}

#[test]
fn with_quic_early_data_safe_requests_go_in_0rtt_and_others_wait_for_the_handshake() {
    let dir = scratch("h3-0rtt");
    let (server, kept) = head_keeper();
    let (f, ca) = h3_service(&dir, "quic_early_data = true", "", &[server]);
    let ticket = dir.join("ticket");
    let with_ticket = [std::ffi::OsStr::new("--ticket"), ticket.as_os_str()];
    let first = h3_with(f.listen, "a.test", &ca, serde_json::json!([{"path": "/first"}]), 20, &with_ticket).unwrap();
    assert_eq!(first["responses"][0]["status"], 200, "{first}");
    assert!(ticket.exists(), "the server sent a session ticket");
    let early = [with_ticket[0], with_ticket[1], std::ffi::OsStr::new("--early")];
    // A copy of the ticket, to play the client's first flight again below.
    let replayed = dir.join("ticket-copy");
    std::fs::copy(&ticket, &replayed).unwrap();
    let out = h3_with(f.listen, "a.test", &ca, serde_json::json!([{"path": "/early-get"}, {"method": "POST", "path": "/early-post"}]), 20, &early).unwrap();
    assert_eq!((out["session_resumed"].as_bool(), out["early_data_accepted"].as_bool()), (Some(true), Some(true)), "{out}");
    for r in out["responses"].as_array().unwrap() {
        assert_eq!(r["status"], 200, "both answered: {out}");
    }
    let head = |path: &str| {
        let heads = kept.lock().unwrap().clone();
        heads.iter().find(|h| h.contains(path)).cloned().unwrap_or_else(|| panic!("no {path} in {heads:?}"))
    };
    assert!(head("get /early-get ").contains("early-data: 1"), "a GET in early data is marked so (RFC 8470)");
    assert!(!head("post /early-post ").contains("early-data"), "a POST waited for the handshake");
    // The same ticket again: its session was taken out as it resumed, so no early data.
    let again = [std::ffi::OsStr::new("--ticket"), replayed.as_os_str(), std::ffi::OsStr::new("--early")];
    let out = h3_with(f.listen, "a.test", &ca, serde_json::json!([{"path": "/replayed"}]), 20, &again).unwrap();
    assert_eq!(out["early_data_accepted"], false, "a ticket is good for one 0-RTT connection: {out}");
    assert_eq!(out["responses"][0]["status"], 200, "{out}");
    assert!(!head("get /replayed ").contains("early-data"));
}

#[test]
fn without_quic_early_data_a_resuming_client_gets_no_0rtt() {
    let dir = scratch("h3-no-0rtt");
    let a = Backend::start("h3no0rtt");
    let (f, ca) = h3_service(&dir, "", "", &[a.addr]);
    let ticket = dir.join("ticket");
    let with_ticket = [std::ffi::OsStr::new("--ticket"), ticket.as_os_str(), std::ffi::OsStr::new("--early")];
    for round in 0..2 {
        let out = h3_with(f.listen, "a.test", &ca, serde_json::json!([{"method": "POST", "path": "/", "body": "x"}]), 20, &with_ticket).unwrap();
        assert_eq!((out["responses"][0]["status"].as_u64(), out["early_data_accepted"].as_bool()), (Some(200), Some(false)), "round {round}: {out}");
    }
}

#[test]
fn routes_rules_and_cookie_affinity_work_the_same_over_http3() {
    let dir = scratch("h3-routes");
    let (a, b, api) = (Backend::start("h3ra"), Backend::start("h3rb"), Backend::start("h3api"));
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let config = h3_config(&cert, &key, "", "http3 = true", "algorithm = \"cookie\"", &[]).replace(
        "[service.tls]",
        &format!(
            "[[service.server]]\naddress = \"{}\"\nid = \"a\"\n[[service.server]]\naddress = \"{}\"\nid = \"b\"\n\
         [[service.pool]]\nname = \"api\"\n[service.pool.health]\nkind = \"none\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.route]]\npool = \"api\"\nheader = \"x-pool\"\nheader_value = \"api\"\nresponse_headers = {{ set = {{ \"x-route\" = \"api\" }} }}\n\
         [[service.route]]\npath_prefix = [\"/private\"]\ndeny = 403\n[service.tls]",
            a.addr, b.addr, api.addr
        ),
    );
    let f = Fulcrum::start(&config);
    let out = h3(f.listen, "a.test", &cert, serde_json::json!([{"path": "/name", "headers": [["x-pool", "api"]]}, {"path": "/private/x"}, {"path": "/name"}]));
    let (routed, denied, fresh) = (&out["responses"][0], &out["responses"][1], &out["responses"][2]);
    assert_eq!((routed["body"].as_str(), routed["headers"]["x-route"].as_str()), (Some("h3api\n"), Some("api")), "the route's pool and its response header: {out}");
    assert_eq!(denied["status"], 403, "the route's deny: {out}");
    let cookie = fresh["headers"]["set-cookie"].as_str().unwrap_or_else(|| panic!("an affinity cookie: {out}")).split(';').next().unwrap().to_string();
    let server = fresh["body"].as_str().unwrap().to_string();
    let again = h3(f.listen, "a.test", &cert, serde_json::json!([{"path": "/name", "headers": [["cookie", cookie]], "repeat": 6}]));
    for r in again["responses"].as_array().unwrap() {
        assert_eq!(r["body"].as_str(), Some(server.as_str()), "one server for the session: {again}");
    }
}

#[test]
fn a_per_client_connection_limit_counts_quic_connections() {
    let dir = scratch("h3-limit");
    let a = Backend::start("h3limit");
    let (cert, key) = openssl_self_signed(&dir, "a.test");
    let config = h3_config(&cert, &key, "", "http3 = true", "", &[a.addr]) + "[[service.limit]]\nname = \"open\"\ncount = \"connections\"\nlimit = 1\n";
    let f = Fulcrum::start(&config);
    let (listen, first_ca) = (f.listen, cert.clone());
    let first = std::thread::spawn(move || h3(listen, "a.test", &first_ca, serde_json::json!([{"path": "/slow/3000"}])));
    wait_until("the first connection counted", Duration::from_secs(10), || f.stats()["limits"][0]["keys"] == 1);
    assert!(h3_try(f.listen, "a.test", &cert, serde_json::json!([{"path": "/name"}]), 3).is_err(), "a second connection from the same address is refused");
    assert_eq!(first.join().unwrap()["responses"][0]["status"], 200);
    wait_until("the place freed", Duration::from_secs(10), || f.stats()["limits"][0]["keys"] == 0);
    assert_eq!(h3(f.listen, "a.test", &cert, serde_json::json!([{"path": "/name"}]))["responses"][0]["status"], 200);
}
