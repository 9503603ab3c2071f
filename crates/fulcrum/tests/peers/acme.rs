//! `[service.tls.acme]` against Pebble, the ACME test server of Let's Encrypt
//! (`support::pebble`): a certificate issued by tls-alpn-01 on the TLS listener itself and by
//! http-01 on a plain-HTTP sibling, each verified by curl against Pebble's root; a short-lived
//! certificate renewed under traffic with no failed request; a CA that refuses leaving the
//! current certificate (or the self-signed placeholder, which `/ready`, the stats and the log
//! own up to) serving, with the CA's reason in the log.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::support::pebble::{Options, Pebble};
use crate::support::*;

const NAME: &str = "a.acme.test";

fn addr(port: u16) -> SocketAddr {
    format!("127.0.0.1:{port}").parse().unwrap()
}

/// The TLS service with ACME on `{LISTEN}`, over `backend`, with `extra` lines in its acme table.
fn acme_service(pebble: &Pebble, storage: &Path, backend: SocketAddr, extra: &str) -> String {
    format!(
        r#"
[[service]]
name = "web"
listen = "{{LISTEN}}"
mode = "http"

[service.tls.acme]
directory = "{}"
directory_ca = "{}"
names = ["{NAME}"]
contact = ["ops@acme.test"]
storage = "{}"
{extra}

[[service.server]]
address = "{backend}"
"#,
        pebble.directory,
        pebble.wfe_ca.display(),
        storage.display()
    )
}

/// curl over HTTPS to `NAME` at `port`, trusting `root`: (exit code, body).
fn curl_verified(port: u16, root: &Path) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "--cacert", root.to_str().unwrap(), "--resolve", &format!("{NAME}:{port}:127.0.0.1")])
        .arg(format!("https://{NAME}:{port}/"))
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The certificate the service's stats show: (source, issuer, not_after, note).
fn certificate(f: &Fulcrum) -> (String, String, i64, Option<String>) {
    let stats = f.stats();
    let c = &stats["services"][0]["tls"]["certificates"][0];
    (c["source"].as_str().unwrap_or("").into(), c["issuer"].as_str().unwrap_or("").into(), c["expires_unix"].as_i64().unwrap_or(0), c["note"].as_str().map(String::from))
}

fn ready(f: &Fulcrum) -> (u16, String) {
    curl(f.admin, "GET", "/ready", &[], None)
}

fn wait_issued(f: &Fulcrum, limit: Duration) {
    wait_until("the ACME certificate is issued and served", limit, || {
        let (source, issuer, _, note) = certificate(f);
        source == "acme" && issuer.contains("Pebble") && note.is_none()
    });
}

fn storage() -> std::path::PathBuf {
    let dir = scratch("acme-storage");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn tls_alpn_01_issues_on_the_tls_listener_and_curl_verifies_the_chain() {
    let tls_port = free_port();
    let pebble = Pebble::start(Options { http_port: free_port(), tls_port, ..Options::default() });
    let backend = Backend::start("acme-alpn");
    let dir = storage();
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &dir, backend.addr, ""));
    wait_issued(&f, Duration::from_secs(30));
    let root = pebble.root_pem();
    let (code, body) = curl_verified(tls_port, &root);
    assert_eq!(code, 0, "curl verifies the chain against Pebble's root; log:\n{}\npebble:\n{}", f.log(), pebble.log());
    assert!(body.contains("acme-alpn"), "{body}");
    assert_eq!(ready(&f).0, 200, "ready once issued");
    let stats = f.stats();
    let next = &stats["services"][0]["tls"]["certificates"][0]["next_renewal"];
    assert!(next.as_str().is_some_and(|t| t.starts_with("20")), "next_renewal: {next}");
    let log = f.log();
    assert!(log.contains("no certificate issued yet for a.acme.test"), "{log}");
    assert!(log.contains("ACME: serving the certificate for a.acme.test"), "{log}");
    // The state on disk: the directory 0700, every file 0600.
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(files.iter().any(|p| p.ends_with("a.acme.test.crt")) && files.iter().any(|p| p.ends_with("a.acme.test.key")), "{files:?}");
    assert!(files.iter().any(|p| p.file_name().unwrap().to_string_lossy().starts_with("account-")), "{files:?}");
    for p in &files {
        assert_eq!(std::fs::metadata(p).unwrap().permissions().mode() & 0o777, 0o600, "{}", p.display());
    }
    // A restart serves the stored certificate without ordering again.
    drop(f);
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &dir, backend.addr, ""));
    wait_issued(&f, Duration::from_secs(10));
    assert_eq!(curl_verified(tls_port, &root).0, 0);
    assert!(!f.log().contains("no certificate issued yet"), "{}", f.log());
}

#[test]
fn http_01_is_answered_by_the_plain_http_sibling() {
    let (tls_port, http_port) = (free_port(), free_port());
    let pebble = Pebble::start(Options { http_port, tls_port, ..Options::default() });
    let backend = Backend::start("acme-http");
    let dir = storage();
    let plain = format!(
        r#"
[[service]]
name = "plain"
listen = "127.0.0.1:{http_port}"
mode = "http"

[service.http]
redirect_https = true

[[service.server]]
address = "{}"
"#,
        backend.addr
    );
    let config = acme_service(&pebble, &dir, backend.addr, "challenge = \"http-01\"") + &plain;
    let f = Fulcrum::start_at(addr(tls_port), &config);
    wait_issued(&f, Duration::from_secs(30));
    let (code, body) = curl_verified(tls_port, &pebble.root_pem());
    assert_eq!(code, 0, "log:\n{}\npebble:\n{}", f.log(), pebble.log());
    assert!(body.contains("acme-http"), "{body}");
    // Answered before redirect_https; an unknown token is 404 from Fulcrum, not a redirect;
    // other paths are redirected as before.
    let (status, _) = http_get(addr(http_port), "/.well-known/acme-challenge/unknown-token");
    assert_eq!(status, 404);
    let (status, body) = http_get(addr(http_port), "/");
    assert_eq!(status, 308, "{body}");
}

#[test]
fn a_short_lived_certificate_renews_under_traffic_with_no_failed_request() {
    let tls_port = free_port();
    // 30 s of validity: renewed after 20 s at the latest.
    let pebble = Pebble::start(Options { http_port: free_port(), tls_port, validity: Some(30), ..Options::default() });
    let backend = Backend::start("acme-renew");
    let dir = storage();
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &dir, backend.addr, ""));
    wait_issued(&f, Duration::from_secs(30));
    let root = pebble.root_pem();
    let (_, _, first_expiry, _) = certificate(&f);
    let (ok, failed, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let traffic = {
        let (ok, failed, stop, root) = (ok.clone(), failed.clone(), stop.clone(), root.clone());
        std::thread::spawn(move || {
            let began = Instant::now();
            while !stop.load(Relaxed) && began.elapsed() < Duration::from_secs(90) {
                let (code, body) = curl_verified(tls_port, &root);
                if code == 0 && body.contains("acme-renew") {
                    ok.fetch_add(1, Relaxed)
                } else {
                    failed.fetch_add(1, Relaxed)
                };
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    wait_until("a renewed certificate serves", Duration::from_secs(45), || certificate(&f).2 > first_expiry);
    // Some more requests on the renewed certificate.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Relaxed);
    traffic.join().unwrap();
    assert!(ok.load(Relaxed) > 20, "requests made: {}", ok.load(Relaxed));
    assert_eq!(failed.load(Relaxed), 0, "failed requests across the renewal; log:\n{}", f.log());
    let (_, _, _, note) = certificate(&f);
    assert_eq!(note, None);
}

#[test]
fn a_ca_that_refuses_leaves_the_placeholder_serving_and_ready_says_why() {
    let tls_port = free_port();
    // Every nonce refused: no order can go through.
    let env = vec![("PEBBLE_WFE_NONCEREJECT".to_string(), "100".to_string())];
    let pebble = Pebble::start(Options { http_port: free_port(), tls_port, env, ..Options::default() });
    let backend = Backend::start("acme-refused");
    let dir = storage();
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &dir, backend.addr, ""));
    wait_until("the order fails", Duration::from_secs(30), || f.log().contains("ACME: the order for a.acme.test failed"));
    let log = f.log();
    assert!(log.contains("badNonce") || log.contains("nonce"), "the CA's reason is in the log:\n{log}");
    assert!(log.contains("the self-signed one keeps serving"), "{log}");
    let (status, body) = ready(&f);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("service web") && body.contains("self-signed"), "{body}");
    let (source, _, _, note) = certificate(&f);
    assert_eq!(source, "acme");
    assert!(note.as_deref().is_some_and(|n| n.starts_with("self-signed") && n.contains("last error")), "{note:?}");
    // The placeholder still serves TLS (curl without verification reaches the backend).
    let out =
        Command::new("curl").args(["-sk", "--max-time", "5", "--resolve", &format!("{NAME}:{tls_port}:127.0.0.1")]).arg(format!("https://{NAME}:{tls_port}/")).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("acme-refused"));
}

#[test]
fn a_stopped_ca_leaves_the_current_certificate_serving_and_the_log_says_why() {
    let tls_port = free_port();
    let mut pebble = Pebble::start(Options { http_port: free_port(), tls_port, validity: Some(40), ..Options::default() });
    let backend = Backend::start("acme-stopped");
    let dir = storage();
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &dir, backend.addr, ""));
    wait_issued(&f, Duration::from_secs(30));
    let root = pebble.root_pem();
    let (_, _, expiry, _) = certificate(&f);
    pebble.stop();
    // Renewal comes at two thirds of the 40 s: it fails, with the reason, before expiry.
    wait_until("the renewal fails", Duration::from_secs(35), || f.log().contains("ACME: the order for a.acme.test failed"));
    let log = f.log();
    assert!(log.contains("the current certificate keeps serving"), "{log}");
    let (code, _) = curl_verified(tls_port, &root);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!(now < expiry, "the failure came before expiry");
    assert_eq!(code, 0, "the old certificate still serves");
    let (_, _, still, note) = certificate(&f);
    assert_eq!(still, expiry);
    assert!(note.as_deref().is_some_and(|n| n.contains("renewal failed")), "{note:?}");
    // Still ready: a certificate is served.
    assert_eq!(ready(&f).0, 200);
}

#[test]
fn a_ca_that_requires_external_account_binding_issues_with_it_and_says_why_without() {
    let tls_port = free_port();
    let (kid, key) = ("kid-1".to_string(), "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W".to_string());
    let pebble = Pebble::start(Options { http_port: free_port(), tls_port, eab: Some((kid.clone(), key.clone())), ..Options::default() });
    let backend = Backend::start("acme-eab");
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &storage(), backend.addr, ""));
    wait_until("the account is refused", Duration::from_secs(20), || f.log().contains("ACME: the order for a.acme.test failed"));
    assert!(f.log().contains("externalAccountRequired"), "the CA's reason:\n{}", f.log());
    drop(f);
    let eab = format!("[service.tls.acme.eab]\nkid = \"{kid}\"\nhmac_key = \"{key}\"");
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &storage(), backend.addr, &eab));
    wait_issued(&f, Duration::from_secs(30));
    assert_eq!(curl_verified(tls_port, &pebble.root_pem()).0, 0, "{}", f.log());
}

#[test]
fn a_reload_that_adds_acme_orders_and_serves_without_a_restart() {
    let tls_port = free_port();
    let pebble = Pebble::start(Options { http_port: free_port(), tls_port, ..Options::default() });
    let backend = Backend::start("acme-reload");
    let plain = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n\n[[service.server]]\naddress = \"{}\"\n", backend.addr);
    let f = Fulcrum::start_at(addr(tls_port), &plain);
    assert_eq!(http_get(addr(tls_port), "/").0, 200);
    f.reload(&acme_service(&pebble, &storage(), backend.addr, ""));
    wait_issued(&f, Duration::from_secs(30));
    let (code, body) = curl_verified(tls_port, &pebble.root_pem());
    assert_eq!(code, 0, "{}", f.log());
    assert!(body.contains("acme-reload"), "{body}");
}

#[test]
fn key_type_rsa_2048_serves_an_rsa_certificate() {
    let tls_port = free_port();
    let pebble = Pebble::start(Options { http_port: free_port(), tls_port, ..Options::default() });
    let backend = Backend::start("acme-rsa");
    let f = Fulcrum::start_at(addr(tls_port), &acme_service(&pebble, &storage(), backend.addr, "key_type = \"rsa-2048\""));
    wait_issued(&f, Duration::from_secs(60));
    assert_eq!(curl_verified(tls_port, &pebble.root_pem()).0, 0, "{}", f.log());
    let served = Command::new("sh")
        .args(["-c", &format!("openssl s_client -connect 127.0.0.1:{tls_port} -servername {NAME} </dev/null 2>/dev/null | openssl x509 -noout -text")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&served.stdout);
    assert!(text.contains("rsaEncryption") && text.contains("2048 bit"), "{text}");
}
