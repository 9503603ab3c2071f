//! `[service.tls]`: Fulcrum terminates TLS in HTTP and TCP modes, picks the certificate by SNI,
//! verifies client certificates, counts handshakes, and refuses (in `check` and on reload) a
//! certificate that does not load, whose key does not match, or that has expired. Real clients:
//! curl and `openssl s_client`. Certificates are made at test time; no key is committed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use time::OffsetDateTime;

/// A certificate and key written as PEM files.
pub(crate) struct Pem {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

fn params(names: &[&str], not_after: OffsetDateTime) -> CertificateParams {
    let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, names[0]);
    p.not_before = OffsetDateTime::now_utc() - time::Duration::days(2);
    p.not_after = not_after;
    p
}

fn write(dir: &Path, stem: &str, cert: &rcgen::Certificate, key: &KeyPair) -> Pem {
    let pem = Pem { cert: dir.join(format!("{stem}.pem")), key: dir.join(format!("{stem}.key")) };
    std::fs::write(&pem.cert, cert.pem()).unwrap();
    std::fs::write(&pem.key, key.serialize_pem()).unwrap();
    pem
}

/// A self-signed certificate for `names` (the first is its common name), valid for `days`.
pub(crate) fn self_signed(dir: &Path, stem: &str, names: &[&str], days: i64) -> Pem {
    let key = KeyPair::generate().unwrap();
    let cert = params(names, OffsetDateTime::now_utc() + time::Duration::days(days)).self_signed(&key).unwrap();
    write(dir, stem, &cert, &key)
}

fn tls_table(certs: &[&Pem], extra: &str) -> String {
    let mut s = format!("\n[service.tls]\n{extra}\n");
    for c in certs {
        s.push_str(&format!("[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n", c.cert.display(), c.key.display()));
    }
    s
}

/// curl over HTTPS to `name` (resolved to Fulcrum), trusting `ca`; (exit code, body).
pub(crate) fn curl_https(f: &Fulcrum, name: &str, path: &str, ca: &Path, extra: &[&str]) -> (i32, String) {
    let port = f.listen.port();
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert", ca.to_str().unwrap(), "--resolve", &format!("{name}:{port}:127.0.0.1")])
        .args(extra)
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).to_string())
}

/// What `openssl s_client` prints of a handshake with `args` (its stdin closed at once).
pub(crate) fn s_client(addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("openssl").args(["s_client", "-connect", &addr.to_string()]).args(args).stdin(Stdio::null()).output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

pub(crate) fn metric(f: &Fulcrum, line_start: &str) -> u64 {
    let (status, body) = curl(f.admin, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    body.lines().find(|l| l.starts_with(line_start)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or_else(|| panic!("no {line_start} in /metrics:\n{body}"))
}

#[test]
fn https_clients_get_the_certificate_of_their_name_and_the_server_hears_https() {
    let dir = scratch("tls-sni");
    let a = self_signed(&dir, "a", &["a.test", "*.wild.test"], 30);
    let b = self_signed(&dir, "b", &["b.test"], 30);
    let (server, heads) = head_keeper();
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{server}\"\n{}",
        tls_table(&[&a, &b], "")
    ));

    // Each name gets its own certificate: curl verifies it against that certificate alone.
    assert_eq!(curl_https(&f, "a.test", "/", &a.cert, &[]), (0, "ok".into()));
    assert_eq!(curl_https(&f, "b.test", "/", &b.cert, &[]), (0, "ok".into()));
    assert_eq!(curl_https(&f, "x.wild.test", "/", &a.cert, &[]), (0, "ok".into()), "a wildcard name");
    let (code, _) = curl_https(&f, "b.test", "/", &a.cert, &[]);
    assert_eq!(code, 60, "b.test is served b's certificate, which a's does not verify");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 3);
    assert!(heads.iter().all(|h| h.contains("x-forwarded-proto: https") && h.contains("x-forwarded-for: 127.0.0.1")), "{heads:?}");

    // No name: the first certificate. Both protocol versions, and ALPN http/1.1.
    let none = s_client(f.listen, &["-noservername"]);
    assert!(none.contains("CN = a.test") || none.contains("CN=a.test"), "{none}");
    let v12 = s_client(f.listen, &["-servername", "b.test", "-tls1_2", "-alpn", "http/1.1"]);
    assert!(v12.contains("CN = b.test") || v12.contains("CN=b.test"), "{v12}");
    assert!(v12.contains("TLSv1.2") && v12.contains("ALPN protocol: http/1.1"), "{v12}");
    let v13 = s_client(f.listen, &["-servername", "a.test", "-tls1_3"]);
    assert!(v13.contains("TLSv1.3"), "{v13}");

    assert!(metric(&f, "fulcrum_tls_handshakes_total{service=\"web\",version=\"1.2\"}") >= 1);
    assert!(metric(&f, "fulcrum_tls_handshakes_total{service=\"web\",version=\"1.3\"}") >= 4);
    let stats = f.stats();
    let tls = &stats["services"][0]["tls"];
    assert_eq!(tls["certificates"][0]["names"], serde_json::json!(["a.test", "*.wild.test"]), "{tls}");
    assert_eq!(tls["certificates"][1]["expiring"], false);
}

#[test]
fn tls_in_tcp_mode_sends_the_decrypted_bytes_on_and_counts_a_plain_client_as_a_failure() {
    let dir = scratch("tls-tcp");
    let a = self_signed(&dir, "a", &["a.test"], 30);
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"tcp\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n{}",
        backend.addr,
        tls_table(&[&a], "handshake_timeout = \"2s\"")
    ));
    for _ in 0..3 {
        assert_eq!(curl_https(&f, "a.test", "/name", &a.cert, &[]), (0, "b1\n".into()));
    }
    // A 2 MB download through the session.
    let (code, size) = curl_https(&f, "a.test", "/bytes/2000000", &a.cert, &["-o", "/dev/null", "-w", "%{size_download}"]);
    assert_eq!((code, size.as_str()), (0, "2000000"));
    // Plain HTTP to a TLS port is a failed handshake, counted by reason.
    let mut plain = std::net::TcpStream::connect(f.listen).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain.write_all(b"GET /name HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "a plain request got an HTTP answer");
    wait_until("the failure counted", Duration::from_secs(5), || metric(&f, "fulcrum_tls_handshake_failures_total{service=\"web\",reason=\"protocol\"}") >= 1);
    // A client that says nothing is closed after handshake_timeout.
    let mut silent = std::net::TcpStream::connect(f.listen).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(silent.read(&mut b).unwrap_or(0), 0);
    assert!(metric(&f, "fulcrum_tls_handshake_failures_total{service=\"web\",reason=\"timeout\"}") >= 1);
}

/// A CA (`{stem}-ca`) and a client certificate it issued (`{stem}-client`).
pub(crate) fn ca_and_client(dir: &Path, stem: &str) -> (Pem, Pem) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = params(&["Test CA"], OffsetDateTime::now_utc() + time::Duration::days(30));
    ca_params.distinguished_name.push(DnType::OrganizationName, stem);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let ca = write(dir, &format!("{stem}-ca"), &ca_cert, &ca_key);
    let issuer = Issuer::new(ca_params, ca_key);
    let client_key = KeyPair::generate().unwrap();
    let client_cert = params(&["client"], OffsetDateTime::now_utc() + time::Duration::days(30)).signed_by(&client_key, &issuer).unwrap();
    (ca, write(dir, &format!("{stem}-client"), &client_cert, &client_key))
}

#[test]
fn client_certificates_are_required_when_a_client_ca_is_set() {
    let dir = scratch("tls-mtls");
    let a = self_signed(&dir, "a", &["a.test"], 30);
    let (ca, client) = ca_and_client(&dir, "t");
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n{}",
        backend.addr,
        tls_table(&[&a], &format!("client_ca = \"{}\"", ca.cert.display()))
    ));
    let with = curl_https(&f, "a.test", "/name", &a.cert, &["--cert", client.cert.to_str().unwrap(), "--key", client.key.to_str().unwrap()]);
    assert_eq!(with, (0, "b1\n".into()));
    let (code, _) = curl_https(&f, "a.test", "/name", &a.cert, &[]);
    assert_ne!(code, 0, "no client certificate, no answer");
    wait_until("the refusal counted", Duration::from_secs(5), || metric(&f, "fulcrum_tls_handshake_failures_total{service=\"web\",reason=\"client_certificate\"}") >= 1);
}

/// One HTTP request over `openssl s_client` to `addr` as `name`, with `args` (a session to
/// resume, a client certificate): what it printed, which says `Reused` or `New`, and the answer.
pub(crate) fn s_client_request(addr: SocketAddr, name: &str, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-servername", name, "-ign_eof"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Connection: close, so the server's close ends s_client, after the session tickets came.
    child.stdin.take().unwrap().write_all(format!("GET /name HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A session resumes only on the service that issued it, under the certificates and client CA
/// it was issued under: one from a service without `client_ca` (the same certificate, another
/// port) gets a full handshake on a `client_ca` one, which then wants a certificate (the class
/// of nginx CVE-2025-23419); a session of CA1's client does not survive a reload to CA2. Within
/// one service a session still resumes, with or without client certificates. TLS 1.3 and 1.2.
#[test]
fn a_tls_session_resumes_only_where_it_was_issued() {
    let dir = scratch("tls-resume");
    let cert = self_signed(&dir, "site", &["public.test", "internal.test"], 30);
    let (ca1, client1) = ca_and_client(&dir, "one");
    let (ca2, _) = ca_and_client(&dir, "two");
    let backend = Backend::start("protected");
    let internal_port = free_port();
    let internal: SocketAddr = format!("127.0.0.1:{internal_port}").parse().unwrap();
    let config = |ca: &Pem| {
        let server = format!("[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n", backend.addr);
        format!(
            "[[service]]\nname = \"public\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n{server}{}\n[[service]]\nname = \"internal\"\nlisten = \"{internal}\"\nmode = \"http\"\n{server}{}",
            tls_table(&[&cert], ""),
            tls_table(&[&cert], &format!("client_ca = \"{}\"", ca.cert.display()))
        )
    };
    let f = Fulcrum::start(&config(&ca1));
    let with_cert = ["-cert", client1.cert.to_str().unwrap(), "-key", client1.key.to_str().unwrap()];
    for version in ["-tls1_3", "-tls1_2"] {
        let session = dir.join(format!("public{version}.pem"));
        let first = s_client_request(f.listen, "public.test", &[version, "-sess_out", session.to_str().unwrap()]);
        assert!(first.contains("HTTP/1.1 200") && first.contains("protected"), "{version}: public serves\n{first}");
        // Within the service it resumes.
        let again = s_client_request(f.listen, "public.test", &[version, "-sess_in", session.to_str().unwrap()]);
        assert!(again.contains("Reused") && again.contains("HTTP/1.1 200"), "{version}: public resumes its own session\n{again}");
        // On the client_ca service: no resumption, a full handshake that wants a certificate.
        let crossed = s_client_request(internal, "internal.test", &[version, "-sess_in", session.to_str().unwrap()]);
        assert!(!crossed.contains("Reused"), "{version}: public's session resumed on internal\n{crossed}");
        assert!(!crossed.contains("HTTP/1.1 200") && !crossed.contains("protected"), "{version}: a request reached internal's servers with no certificate\n{crossed}");

        // internal's own sessions resume for its clients.
        let own = dir.join(format!("internal{version}.pem"));
        let first = s_client_request(internal, "internal.test", &[&[version, "-sess_out", own.to_str().unwrap()][..], &with_cert].concat());
        assert!(first.contains("HTTP/1.1 200"), "{version}: CA1's client is served\n{first}");
        let again = s_client_request(internal, "internal.test", &[version, "-sess_in", own.to_str().unwrap()]);
        assert!(again.contains("Reused") && again.contains("HTTP/1.1 200"), "{version}: internal resumes its client's session\n{again}");
    }
    wait_until("refusals counted", Duration::from_secs(5), || metric(&f, "fulcrum_tls_handshake_failures_total{service=\"internal\",reason=\"client_certificate\"}") >= 2);

    // client_ca changes from CA1 to CA2: CA1's client is refused in full, and its session does
    // not resume either.
    let own = dir.join("before-reload.pem");
    let first = s_client_request(internal, "internal.test", &[&["-sess_out", own.to_str().unwrap()][..], &with_cert].concat());
    assert!(first.contains("HTTP/1.1 200"), "{first}");
    f.reload(&config(&ca2));
    wait_until("CA2 in force", Duration::from_secs(10), || !s_client_request(internal, "internal.test", &with_cert).contains("HTTP/1.1 200"));
    for version in ["-tls1_3", "-tls1_2"] {
        let old = s_client_request(internal, "internal.test", &[version, "-sess_in", own.to_str().unwrap()]);
        assert!(!old.contains("Reused") && !old.contains("HTTP/1.1 200"), "{version}: CA1's session resumed under CA2\n{old}");
    }
    // The reload did not touch public's context: its sessions still resume.
    let session = dir.join("public-tls1_3.pem");
    let kept = s_client_request(f.listen, "public.test", &["-sess_in", session.to_str().unwrap()]);
    assert!(kept.contains("Reused") && kept.contains("HTTP/1.1 200"), "public's session survives an unrelated reload\n{kept}");
}

/// `strict_sni_host`: a request whose Host is not a name of the certificate its handshake chose
/// gets 421 Misdirected Request (domain fronting); on by default with `client_ca`, off without.
#[test]
fn a_host_outside_the_certificate_of_the_handshake_is_misdirected_when_strict() {
    let dir = scratch("tls-strict-sni");
    let a = self_signed(&dir, "a", &["a.test", "*.a.test"], 30);
    let b = self_signed(&dir, "b", &["b.test"], 30);
    let (ca, client) = ca_and_client(&dir, "sni");
    let backend = Backend::start("b1");
    let service = |name: &str, listen: &str, extra: &str| {
        format!(
            "[[service]]\nname = \"{name}\"\nlisten = \"{listen}\"\nmode = \"http\"\n[service.http]\nhttp2 = true\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n{}",
            backend.addr,
            tls_table(&[&a, &b], extra)
        )
    };
    let mtls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let strict: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let f = Fulcrum::start(
        &[
            service("open", "{LISTEN}", ""),
            service("mtls", &mtls.to_string(), &format!("client_ca = \"{}\"", ca.cert.display())),
            service("strict", &strict.to_string(), "strict_sni_host = true"),
        ]
        .join("\n"),
    );
    let cert_args = ["--cert", client.cert.to_str().unwrap(), "--key", client.key.to_str().unwrap()];
    let ask = |addr: SocketAddr, sni: &str, host: &str, http2: bool, extra: &[&str]| {
        let ca = if sni.ends_with("a.test") { &a.cert } else { &b.cert };
        let out = Command::new("curl")
            .args(["-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca.to_str().unwrap()])
            .args(["--resolve", &format!("{sni}:{}:127.0.0.1", addr.port()), "-H", &format!("Host: {host}")])
            .arg(if http2 { "--http2" } else { "--http1.1" })
            .args(extra)
            .arg(format!("https://{sni}:{}/name", addr.port()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    for http2 in [false, true] {
        // Off without client_ca: the Host routes, whatever the handshake's name.
        assert_eq!(ask(f.listen, "a.test", "b.test", http2, &[]), "200", "http2: {http2}");
        // On with client_ca: fronting is refused, a matching name (or a wildcard's) is served.
        assert_eq!(ask(mtls, "a.test", "b.test", http2, &cert_args), "421", "http2: {http2}");
        assert_eq!(ask(mtls, "a.test", "x.a.test", http2, &cert_args), "200", "http2: {http2}");
        assert_eq!(ask(mtls, "b.test", "B.test:443", http2, &cert_args), "200", "http2: {http2}");
        assert_eq!(ask(strict, "b.test", "a.test", http2, &[]), "421", "http2: {http2}");
        assert_eq!(ask(strict, "a.test", "a.test", http2, &[]), "200", "http2: {http2}");
    }
    f.wait_log("strict_sni_host");
    // Only HTTP mode reads a Host: check refuses it elsewhere.
    let tcp = service("tcp", "127.0.0.1:1", "strict_sni_host = true").replace("mode = \"http\"\n[service.http]\nhttp2 = true", "mode = \"tcp\"");
    let (ok, out) = check_config(&tcp, &dir);
    assert!(!ok && out.contains("strict_sni_host"), "{out}");
}

/// Fulcrum picks the cipher suite in its own order among those the client offers: AES-128-GCM
/// for OpenSSL, whose own order puts AES-256-GCM first, in TLS 1.3 and 1.2; a client that
/// offers only ChaCha20-Poly1305 gets it.
#[test]
fn the_cipher_suite_is_the_servers_choice_among_the_clients() {
    let dir = scratch("tls-suites");
    let a = self_signed(&dir, "a", &["a.test"], 30);
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n{}",
        backend.addr,
        tls_table(&[&a], "")
    ));
    for (args, suite) in [
        (&[][..], "TLS_AES_128_GCM_SHA256"),
        (&["-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"][..], "TLS_CHACHA20_POLY1305_SHA256"),
        (&["-tls1_2"][..], "ECDHE-ECDSA-AES128-GCM-SHA256"),
    ] {
        let out = s_client(f.listen, &[&["-servername", "a.test"][..], args].concat());
        assert!(out.contains(&format!("Cipher is {suite}")), "{args:?}: expected {suite}\n{out}");
    }
}

#[test]
fn a_certificate_that_does_not_load_is_refused_by_check_by_reload_and_by_the_api_and_the_old_one_serves_on() {
    let dir = scratch("tls-refuse");
    let a = self_signed(&dir, "a", &["a.test"], 30);
    let b = self_signed(&dir, "b", &["b.test"], 30);
    let old = {
        let key = KeyPair::generate().unwrap();
        let mut p = params(&["old.test"], OffsetDateTime::now_utc() - time::Duration::days(1));
        p.not_before = OffsetDateTime::now_utc() - time::Duration::days(30);
        write(&dir, "old", &p.self_signed(&key).unwrap(), &key)
    };
    let soon = self_signed(&dir, "soon", &["soon.test"], 5);
    let mismatched = Pem { cert: a.cert.clone(), key: b.key.clone() };
    let missing = Pem { cert: dir.join("missing.pem"), key: a.key.clone() };
    let backend = Backend::start("b1");
    let config = |certs: &[&Pem]| {
        format!(
            "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n{}",
            backend.addr,
            tls_table(certs, "")
        )
    };
    let concrete = |certs: &[&Pem]| config(certs).replace("{LISTEN}", "127.0.0.1:1");
    assert!(check_config(&concrete(&[&a]), &dir).0);
    for (certs, file, reason) in [
        (&[&missing][..], missing.cert.display().to_string(), "cannot read the certificate"),
        (&[&a, &mismatched][..], b.key.display().to_string(), "does not match"),
        (&[&old][..], old.cert.display().to_string(), "expired"),
    ] {
        let (ok, out) = check_config(&concrete(certs), &dir);
        assert!(!ok && out.contains(&file) && out.contains(reason), "expected a refusal naming {file} ({reason}):\n{out}");
    }

    let f = Fulcrum::start(&config(&[&a]));
    assert_eq!(curl_https(&f, "a.test", "/name", &a.cert, &[]), (0, "b1\n".into()));
    // A connection made before the reloads is served after them.
    let mut kept = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect", &f.listen.to_string(), "-servername", "a.test"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to = kept.stdin.take().unwrap();
    let mut from = BufReader::new(kept.stdout.take().unwrap());
    let mut ask = |n: usize| {
        to.write_all(b"GET /name HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "request {n} on the kept connection: {line:?}");
        let mut length = 0;
        loop {
            line.clear();
            from.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; length];
        from.read_exact(&mut body).unwrap();
        assert_eq!(body, b"b1\n");
    };
    ask(1);

    f.reload(&config(&[&a, &mismatched]));
    f.wait_log("does not match");
    assert_eq!(curl_https(&f, "a.test", "/name", &a.cert, &[]), (0, "b1\n".into()), "the old certificate serves on");
    // A good change takes effect for new connections; the kept one goes on.
    f.reload(&config(&[&b, &soon]));
    wait_until("b's certificate served", Duration::from_secs(5), || curl_https(&f, "b.test", "/name", &b.cert, &[]) == (0, "b1\n".into()));
    ask(2);
    // A certificate within 14 days of its end is a warning, in the log and the stats.
    f.wait_log("TLS certificate expires in");
    let stats = f.stats();
    assert_eq!(stats["services"][0]["tls"]["certificates"][1]["expiring"], true, "{stats}");

    // A renewal in place (new files at the same paths, as certbot writes them), applied from
    // the API: a key that does not match is refused with the file and the reason, and the
    // certificate in use serves on; a good pair is served to new connections next.
    std::fs::write(&b.key, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let (status, answer) = f.api("POST", "/api/reload", None);
    let text = answer.to_string();
    assert!(status == 422 && text.contains("does not match") && text.contains(&b.key.display().to_string()), "{status} {text}");
    assert_eq!(curl_https(&f, "b.test", "/name", &b.cert, &[]), (0, "b1\n".into()), "the certificate in use serves on");
    let old_b = std::fs::read(&b.cert).unwrap();
    let renewed = self_signed(&dir, "b", &["b.test"], 90);
    assert_ne!(std::fs::read(&renewed.cert).unwrap(), old_b);
    let (status, answer) = f.api("POST", "/api/reload", None);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(curl_https(&f, "b.test", "/name", &renewed.cert, &[]), (0, "b1\n".into()), "the renewed certificate is served");
    ask(3);
    drop(to);
    let _ = kept.kill();
    let _ = kept.wait();
}

#[test]
fn the_https_example_passes_check_with_its_certificate_made() {
    let dir = scratch("tls-example");
    self_signed(&dir, "site", &["www.example.test", "*.example.test"], 90);
    std::fs::copy(format!("{}/../../examples/https.toml", env!("CARGO_MANIFEST_DIR")), dir.join("https.toml")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", "https.toml"]).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// `examples/front-door.toml` passes `check` as written, and run on this machine's ports and
/// servers does what it says: plain HTTP to HTTPS, HSTS and security headers without the server's
/// banner, /admin refused outside the office, /api to its pool without the prefix, request ids.
#[test]
fn the_front_door_example_redirects_secures_and_routes() {
    let dir = scratch("front-door");
    let site = self_signed(&dir, "site", &["www.example.test", "*.example.test"], 90);
    let examples = format!("{}/../../examples", env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(dir.join("pages")).unwrap();
    std::fs::copy(format!("{examples}/pages/503.html"), dir.join("pages/503.html")).unwrap();
    let example = std::fs::read_to_string(format!("{examples}/front-door.toml")).unwrap();
    std::fs::write(dir.join("front-door.toml"), &example).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", "front-door.toml"]).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    let [web1, web2, api1, api2] = ["web1", "web2", "api1", "api2"].map(Backend::start);
    let plain = free_port();
    let config = example[example.find("[[service]]").unwrap()..]
        .replace("0.0.0.0:80\"", &format!("127.0.0.1:{plain}\""))
        .replace("0.0.0.0:443", "{LISTEN}")
        .replace("127.0.0.1:8081", &web1.addr.to_string())
        .replace("127.0.0.1:8082", &web2.addr.to_string())
        .replace("127.0.0.1:8091", &api1.addr.to_string())
        .replace("127.0.0.1:8092", &api2.addr.to_string())
        .replace("\"site.pem\"", &format!("{:?}", site.cert))
        .replace("\"site.key\"", &format!("{:?}", site.key))
        .replace("\"pages/503.html\"", &format!("{:?}", dir.join("pages/503.html")));
    let f = Fulcrum::start(&config);
    f.wait_all_up();
    let redirect = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "-H", "Host: www.example.test"])
        .arg(format!("http://127.0.0.1:{plain}/shop?item=3"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&redirect.stdout), "308 https://www.example.test/shop?item=3");
    let (code, page) = curl_https(&f, "www.example.test", "/name", &site.cert, &["-D", "-"]);
    let head = page.to_ascii_lowercase();
    assert_eq!(code, 0, "{page}");
    assert!(head.contains("strict-transport-security: max-age=31536000") && head.contains("x-frame-options: deny"), "{page}");
    assert!(head.contains("x-request-id: ") && !head.contains("\nserver:"), "{page}");
    assert!(page.ends_with("web1\n") || page.ends_with("web2\n"), "{page}");
    // A 20 kB page: compressed with the coding curl's list and the site prefer.
    let (code, head) = curl_https(&f, "www.example.test", "/site/home-20000.html", &site.cert, &["--compressed", "-D", "-", "-o", "/dev/null"]);
    assert_eq!(code, 0, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-encoding: zstd"), "{head}");
    let (_, api) = curl_https(&f, "www.example.test", "/api/name", &site.cert, &[]);
    assert!(api == "api1\n" || api == "api2\n", "/api/name is /name to the api pool: {api}");
    let (_, admin) = curl_https(&f, "www.example.test", "/admin/", &site.cert, &["-o", "/dev/null", "-w", "%{http_code}"]);
    assert_eq!(admin, "403", "loopback is not the office");
}

#[test]
fn a_plain_service_redirects_to_https_and_the_tls_one_sends_hsts() {
    let dir = scratch("tls-redirect");
    let a = self_signed(&dir, "a", &["a.test"], 30);
    let backend = Backend::start("b1");
    let server = format!("[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n", backend.addr);
    let plain = Fulcrum::start(&format!("[[service]]\nname = \"plain\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nredirect_https = true\n{server}"));
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "-H", "Host: a.test:8080", &format!("http://{}/path?q=1", plain.listen)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "308 https://a.test/path?q=1");

    let secure =
        Fulcrum::start(&format!("[[service]]\nname = \"secure\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nhsts = \"365d\"\n{server}{}", tls_table(&[&a], "")));
    let (code, head) = curl_https(&secure, "a.test", "/name", &a.cert, &["-D", "-", "-o", "/dev/null"]);
    assert_eq!(code, 0);
    assert!(head.to_ascii_lowercase().contains("strict-transport-security: max-age=31536000"), "{head}");
}

/// TLS pass-through with SNI routing: nginx servers terminate TLS with their own certificates;
/// Fulcrum reads only the ClientHello's server name to pick the pool. A plain client is closed
/// and counted; the default pool takes a hello without a routed name.
#[test]
fn tls_passes_through_to_the_pool_its_server_name_routes_to() {
    let dir = scratch("tls-passthrough");
    let api_cert = self_signed(&dir, "api", &["api.test"], 30);
    let shop_cert = self_signed(&dir, "shop", &["shop.test", "www.shop.test"], 30);
    let api = Nginx::start_https("api", &api_cert.cert, &api_cert.key);
    let shop = Nginx::start_https("shop", &shop_cert.cert, &shop_cert.key);
    let fallback = Nginx::start_https("fallback", &shop_cert.cert, &shop_cert.key);
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"edge\"\nlisten = \"{{LISTEN}}\"\nmode = \"tcp\"\n[service.health]\nkind = \"tcp\"\ninterval = \"200ms\"\n[[service.server]]\naddress = \"{}\"\n\
         [[service.pool]]\nname = \"api\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.pool]]\nname = \"shop\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.route]]\npool = \"api\"\nsni = [\"API.test\"]\n[[service.route]]\npool = \"shop\"\nsni = [\"shop.test\", \"*.shop.test\"]\n",
        fallback.addr, api.addr, shop.addr
    ));
    f.wait_all_up();

    // Each name reaches its own server, which shows its own certificate: curl verifies it with
    // that certificate alone.
    assert_eq!(curl_https(&f, "api.test", "/name", &api_cert.cert, &[]), (0, "api\n".into()));
    assert_eq!(curl_https(&f, "shop.test", "/name", &shop_cert.cert, &[]), (0, "shop\n".into()));
    assert_eq!(curl_https(&f, "www.shop.test", "/name", &shop_cert.cert, &[]), (0, "shop\n".into()), "a wildcard route");
    let other = s_client(f.listen, &["-servername", "other.test"]);
    assert!(other.contains("CN = shop.test") || other.contains("CN=shop.test"), "no route: the service's own server answers\n{other}");
    let none = s_client(f.listen, &["-noservername", "-tls1_2"]);
    assert!(none.contains("TLSv1.2"), "a hello without a name goes to the default pool\n{none}");
    let served = |s: &serde_json::Value, addr: SocketAddr| {
        s["services"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["servers"].as_array().unwrap())
            .find(|x| x["address"] == addr.to_string())
            .map(|x| x["total"].as_u64().unwrap())
            .unwrap()
    };
    let stats = f.stats();
    assert_eq!((served(&stats, api.addr), served(&stats, shop.addr), served(&stats, fallback.addr)), (1, 2, 2), "{stats}");

    // Plain bytes are no ClientHello: closed, logged, and no server sees them.
    let mut plain = std::net::TcpStream::connect(f.listen).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    plain.write_all(b"GET /name HTTP/1.1\r\nHost: api.test\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    f.wait_log("not a TLS ClientHello");
    // A connection closed before its first byte (a health check) is not counted as refused.
    drop(std::net::TcpStream::connect(f.listen).unwrap());
    wait_until("refusal counted", Duration::from_secs(5), || f.stats()["services"][0]["refused"] == 1);
    let stats = f.stats();
    assert_eq!((served(&stats, api.addr), served(&stats, shop.addr), served(&stats, fallback.addr)), (1, 2, 2), "{stats}");
}

/// `proxy_protocol` on a pass-through pool and on one server: each nginx listener that takes the
/// PROXY protocol learns the client's address before the client's own handshake, the pool's
/// setting in v2 and the server's in v1; the service's own server, with neither, gets none.
/// Their TCP checks send a header with no client, which nginx takes.
#[test]
fn passed_through_tls_carries_the_client_address_to_the_pools_and_servers_that_ask() {
    let dir = scratch("tls-passthrough-pp");
    let cert = self_signed(&dir, "pp", &["v2.test", "v1.test", "plain.test"], 30);
    let v2 = Nginx::start_https_with_proxy_protocol("v2", &cert.cert, &cert.key);
    let v1 = Nginx::start_https_with_proxy_protocol("v1", &cert.cert, &cert.key);
    let plain = Nginx::start_https("plain", &cert.cert, &cert.key);
    // nginx logs an empty connection, such as the harness's one probe of its port, as a broken
    // header; a TCP check that sent no header would add one each interval.
    let broken = |n: &Nginx| n.error_log().matches("broken header").count();
    // Waited for, then counted: on a busy machine the log line can come late, and the checks
    // below must add none to what the harness left.
    wait_until("nginx logged the probe", Duration::from_secs(20), || broken(&v2) >= 1 && broken(&v1) >= 1);
    let probes = [broken(&v2), broken(&v1)];
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"edge\"\nlisten = \"{{LISTEN}}\"\nmode = \"tcp\"\n[service.health]\nkind = \"tcp\"\ninterval = \"200ms\"\n[[service.server]]\naddress = \"{}\"\n\
         [[service.pool]]\nname = \"v2\"\nproxy_protocol = \"v2\"\n[service.pool.health]\nkind = \"tcp\"\ninterval = \"200ms\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.pool]]\nname = \"v1\"\n[service.pool.health]\nkind = \"tcp\"\ninterval = \"200ms\"\n[[service.pool.server]]\naddress = \"{}\"\nproxy_protocol = \"v1\"\n\
         [[service.route]]\npool = \"v2\"\nsni = [\"v2.test\"]\n[[service.route]]\npool = \"v1\"\nsni = [\"v1.test\"]\n",
        plain.addr, v2.addr, v1.addr
    ));
    f.wait_all_up();
    for (name, source) in [("v2.test", "127.0.0.41"), ("v1.test", "127.0.0.42")] {
        let (code, body) = curl_https(&f, name, "/client", &cert.cert, &["--interface", source]);
        assert_eq!(code, 0, "{name}: curl failed\n{}", f.log());
        assert_eq!(body.rsplit_once(':').map(|(addr, _)| addr), Some(source), "{name}: nginx saw {body}");
    }
    assert_eq!(curl_https(&f, "plain.test", "/name", &cert.cert, &["--interface", "127.0.0.43"]), (0, "plain\n".into()));
    // Five more checks of each.
    std::thread::sleep(Duration::from_secs(1));
    for (server, probes) in [(&v2, probes[0]), (&v1, probes[1])] {
        assert_eq!(broken(server), probes, "{}: {}", server.name, server.error_log());
    }
}

/// HTTP/2 from clients: by ALPN over TLS and with prior knowledge (h2c) on a plain service;
/// each stream is a request forwarded to the servers in HTTP/1.1, with the forwarded headers;
/// h2load's streams all get answers; a service with `http2 = false` offers only HTTP/1.1.
#[test]
fn http2_clients_are_served_over_tls_and_h2c_and_servers_hear_http_1_1() {
    let dir = scratch("tls-h2");
    let cert = self_signed(&dir, "web", &["web.test"], 30);
    let (keeper, heads) = head_keeper();
    let nginx = Nginx::start("n1", "TARGET");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nmax_streams = 8\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{keeper}\"\n{}",
        tls_table(&[&cert], "")
    ));
    let (code, body) = curl_https(&f, "web.test", "/a", &cert.cert, &["--http2", "-w", "\n%{http_version}"]);
    assert_eq!((code, body.as_str()), (0, "ok\n2"), "curl got HTTP/2 by ALPN");
    let head = heads.lock().unwrap().last().cloned().unwrap();
    assert!(head.starts_with("get /a http/1.1\r\n") && head.contains("host: web.test:") && head.contains("x-forwarded-proto: https"), "{head}");
    let v11 = s_client(f.listen, &["-servername", "web.test", "-alpn", "h2,http/1.1"]);
    assert!(v11.contains("ALPN protocol: h2"), "{v11}");

    // h2c on a plain service, and h2load's concurrent streams over one connection each.
    let plain = Fulcrum::start(&format!(
        "[[service]]\nname = \"plain\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nh2c = true\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n",
        nginx.addr
    ));
    let out =
        Command::new("curl").args(["-s", "--max-time", "10", "--http2-prior-knowledge", "-w", "\n%{http_version}"]).arg(format!("http://{}/name", plain.listen)).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n1\n\n2");
    let (status, body) = curl(plain.listen, "GET", "/name", &[], None);
    assert_eq!((status, body.as_str()), (200, "n1\n"), "HTTP/1.1 clients still served on an h2c service");
    let out = Command::new("h2load").args(["-n", "400", "-c", "4", "-m", "16", "-t", "1"]).arg(format!("http://{}/name", plain.listen)).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("400 succeeded") && report.contains("400 2xx"), "{report}");

    // http2 = false: ALPN offers HTTP/1.1 only.
    let one = Fulcrum::start(&format!(
        "[[service]]\nname = \"one\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nhttp2 = false\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n{}",
        nginx.addr,
        tls_table(&[&cert], "")
    ));
    let (code, body) = curl_https(&one, "web.test", "/name", &cert.cert, &["--http2", "-w", "\n%{http_version}"]);
    assert_eq!((code, body.as_str()), (0, "n1\n\n1.1"));
}

/// `server_tls`: Fulcrum speaks TLS to nginx HTTPS servers and verifies them against the CA
/// file (the servers' self-signed certificates here), in HTTP and TCP modes; a server whose
/// certificate does not verify is a connect failure, answered 502 with the reason.
#[test]
fn server_tls_verifies_the_servers_and_carries_http_and_tcp_to_them() {
    let dir = scratch("tls-origin");
    let good = self_signed(&dir, "origin", &["origin.test", "127.0.0.1"], 30);
    let other = self_signed(&dir, "other", &["origin.test"], 30);
    let server = Nginx::start_https("s1", &good.cert, &good.key);
    let config = |mode: &str, ca: &Path, sni: &str| {
        format!(
            "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"{mode}\"\n[service.server_tls]\nca = \"{}\"\n{sni}\n[service.health]\nkind = \"tcp\"\n[[service.server]]\naddress = \"{}\"\n",
            ca.display(),
            server.addr
        )
    };
    // HTTP mode, SNI and verification by the configured name.
    let http = Fulcrum::start(&config("http", &good.cert, "sni = \"origin.test\""));
    assert_eq!(http_get(http.listen, "/name"), (200, "s1\n".into()));
    // TCP mode, verified as the IP address of the server's address.
    let tcp = Fulcrum::start(&config("tcp", &good.cert, ""));
    assert_eq!(http_get(tcp.listen, "/name"), (200, "s1\n".into()));
    // A CA that did not sign the server's certificate: no request reaches it.
    let wrong = Fulcrum::start(&config("http", &other.cert, "sni = \"origin.test\""));
    let (status, body) = http_get(wrong.listen, "/name");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("TLS") && body.contains("certificate"), "{body}");
    assert!(wrong.server_stats(&server.addr.to_string())["connect_failures"].as_u64().unwrap() >= 1);

    // No ca: the system's roots, here the test CA given as SSL_CERT_FILE (as an operator
    // would point at a bundle of their own); with none to be found, check names what it tried.
    let system = config("http", &good.cert, "sni = \"origin.test\"").replace(&format!("ca = \"{}\"\n", good.cert.display()), "");
    let ssl_cert_file = format!("SSL_CERT_FILE={}", good.cert.display());
    let by_system = Fulcrum::start_under(&["env", &ssl_cert_file], &system);
    assert_eq!(http_get(by_system.listen, "/name"), (200, "s1\n".into()));
    let path = dir.join("system.toml");
    std::fs::write(&path, &system).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", path.to_str().unwrap()]).env("SSL_CERT_FILE", dir.join("none.pem")).env_remove("SSL_CERT_DIR").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains("the system's CA certificates"), "{text}");

    // check refuses what cannot work, naming the file or the key.
    let bad_ca = dir.join("not-a-ca.pem");
    std::fs::write(&bad_ca, "not pem").unwrap();
    let (ok, out) = check_config(&config("http", &bad_ca, ""), &dir);
    assert!(!ok && out.contains("not-a-ca.pem"), "{out}");

    // HTTP health checks go in TLS too: verified, they pass; with the wrong CA, the server is
    // down for the reason.
    let checked =
        |ca: &Path| config("http", ca, "sni = \"origin.test\"").replace("kind = \"tcp\"", "kind = \"http\"\ninterval = \"100ms\"\npath = \"/name\"\nexpect_text = \"s1\"");
    let http = Fulcrum::start(&checked(&good.cert));
    http.wait_all_up();
    let last = http.server_stats(&server.addr.to_string())["last_check"].as_str().unwrap().to_string();
    assert!(last.starts_with("pass: GET /name answered 200"), "{last}");
    assert_eq!(http_get(http.listen, "/name"), (200, "s1\n".into()));
    let wrong = Fulcrum::start(&checked(&other.cert));
    let server_state = || wrong.server_stats(&server.addr.to_string());
    wait_until("the check's TLS failure", Duration::from_secs(5), || server_state()["last_check"].as_str().unwrap().starts_with("fail: TLS"));
    let state = server_state();
    assert!(state["last_check"].as_str().unwrap().contains("certificate"), "{state}");
    assert_eq!(state["check_up"], false, "{state}");

    // A server's own sni: a second server whose certificate names only second.test, beside s1
    // verified as its IP address; the checks and the requests reach both.
    let second_cert = self_signed(&dir, "second", &["second.test"], 30);
    let second = Nginx::start_https("s2", &second_cert.cert, &second_cert.key);
    let both = dir.join("both.pem");
    std::fs::write(&both, std::fs::read_to_string(&good.cert).unwrap() + &std::fs::read_to_string(&second_cert.cert).unwrap()).unwrap();
    let pair = checked(&both).replace("sni = \"origin.test\"", "").replace("expect_text = \"s1\"", "")
        + &format!("[[service.server]]\naddress = \"{}\"\nsni = \"second.test\"\n", second.addr);
    let f = Fulcrum::start(&pair);
    f.wait_all_up();
    let names = tally(f.listen, 4);
    assert_eq!((names.get("s1"), names.get("s2")), (Some(&2), Some(&2)), "{names:?}");
    let (ok, out) = check_config(&pair.replace(&format!("[service.server_tls]\nca = \"{}\"\n", both.display()), ""), &dir);
    assert!(!ok && out.contains("its pool has no server_tls"), "{out}");
}
