//! HTTP/3 in real headless Chromium (`tests/browser/http3.mjs`): a page and a resource it fetches
//! come over QUIC from a service with `http3`, and Fulcrum logs them as HTTP/3.

use std::path::Path;
use std::process::Command;

use crate::run_script;
use crate::support::*;

/// The base64 SHA-256 of the certificate's public key (SubjectPublicKeyInfo), which Chromium's
/// `--ignore-certificate-errors-spki-list` takes.
fn spki_hash(cert: &Path) -> String {
    let script = format!("openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64", cert.display());
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn chromium_loads_a_page_and_its_resources_over_http3() {
    let dir = scratch("http3-browser");
    let (cert, key) = openssl_self_signed(&dir, "quic.test");
    let backend = Backend::start_with("q1", &["--index-text", "<!doctype html><title>QUIC</title><h1>Over QUIC</h1>"]);
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"site\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nhttp3 = true\nlog_format = \"{{method}} {{path}} {{version}} {{status}}\"\n[service.health]\nkind = \"none\"\n\
         [service.tls]\n[[service.tls.certificate]]\ncert = {cert:?}\nkey = {key:?}\n[[service.server]]\naddress = \"{}\"\n",
        backend.addr
    ));
    run_script("http3.mjs", &[("SITE_HOST", "quic.test".to_string()), ("SITE_PORT", f.listen.port().to_string()), ("SPKI", spki_hash(&cert))]);
    let tls = &f.stats()["services"][0]["tls"];
    assert!(tls["quic_handshakes"].as_u64().unwrap() >= 1, "{tls}");
    wait_until("HTTP/3 lines in the access log", std::time::Duration::from_secs(10), || f.log().lines().filter(|l| l.contains(" HTTP/3.0 200")).count() >= 2);
}
