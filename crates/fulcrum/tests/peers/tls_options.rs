//! TLS options of `[service.tls]` and `server_tls`: the versions and cipher suites a service
//! allows (`min_version`, `max_version`, `cipher_suites`), client certificates per name (a
//! certificate's own `client_ca` or `client_auth = "none"`), and session resumption (TLS 1.3
//! tickets, TLS 1.2 session IDs and tickets). Real clients: `openssl s_client` and curl.

use std::net::SocketAddr;
use std::path::Path;

use crate::support::*;
use crate::tls::{Pem, ca_and_client, curl_https, metric, s_client, s_client_request, self_signed};

/// A `[service.tls]` table with `extra` keys, then one certificate table per `(pem, keys)`.
fn tls_table(extra: &str, certs: &[(&Pem, &str)]) -> String {
    let mut s = format!("\n[service.tls]\n{extra}\n");
    for (c, keys) in certs {
        s.push_str(&format!("[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n{keys}\n", c.cert.display(), c.key.display()));
    }
    s
}

/// An HTTP service `name` on `listen` in front of `server`, with `tls` (a `tls_table`).
fn service(name: &str, listen: &str, server: SocketAddr, tls: &str) -> String {
    format!("[[service]]\nname = \"{name}\"\nlisten = \"{listen}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{server}\"\n{tls}\n")
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The suite a handshake of `s_client` settled on, or `None` when it failed.
fn suite_of(out: &str) -> Option<String> {
    let suite = out.lines().find_map(|l| l.split_once("Cipher is ").map(|(_, s)| s.trim().to_string()))?;
    (suite != "(NONE)" && !out.contains("alert")).then_some(suite)
}

/// `check` of `config` (its `{LISTEN}` made concrete) fails with every part of `expected`.
fn refused(config: &str, dir: &Path, expected: &[&str]) {
    let (ok, out) = check_config(&config.replace("{LISTEN}", "127.0.0.1:1"), dir);
    assert!(!ok && expected.iter().all(|e| out.contains(e)), "expected a refusal with {expected:?}:\n{out}");
}

/// A service allows only the versions and suites it sets, picking in the order given: OpenSSL
/// offers every suite, and gets the first of the list; a client that offers only others, or
/// only a version outside the range, fails its handshake. `server_tls` offers the servers only
/// its own, and a reload that changes it reuses no connection kept from before. `check` refuses
/// what cannot serve, listing what would.
#[test]
fn only_the_versions_and_cipher_suites_set_are_negotiated() {
    let dir = scratch("tls-policy");
    let cert = self_signed(&dir, "a", &["a.test"], 30);
    let backend = Backend::start("b1");
    let (inner, tls12, outer12) = (local(free_port()), local(free_port()), local(free_port()));
    let only13 = tls_table("min_version = \"1.3\"\ncipher_suites = [\"TLS_AES_256_GCM_SHA384\", \"TLS13_CHACHA20_POLY1305_SHA256\"]", &[(&cert, "")]);
    let only12 = tls_table("max_version = \"1.2\"\ncipher_suites = [\"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\"]", &[(&cert, "")]);
    // Services that speak to the 1.3-only one in TLS, with a server_tls policy of their own.
    let outer = |name: &str, listen: &str, server_tls: &str| {
        format!(
            "[[service]]\nname = \"{name}\"\nlisten = \"{listen}\"\nmode = \"http\"\n[service.server_tls]\nca = \"{}\"\nsni = \"a.test\"\n{server_tls}\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{inner}\"\n",
            cert.cert.display()
        )
    };
    let config = |server_tls: &str| {
        [
            service("only13", &inner.to_string(), backend.addr, &only13),
            service("only12", &tls12.to_string(), backend.addr, &only12),
            outer("outer", "{LISTEN}", server_tls),
            outer("outer12", &outer12.to_string(), "max_version = \"1.2\""),
        ]
        .join("\n")
    };
    let f = Fulcrum::start(&config("min_version = \"1.3\""));
    let hello = |addr: SocketAddr, args: &[&str]| suite_of(&s_client(addr, &[&["-servername", "a.test"][..], args].concat()));

    assert_eq!(hello(inner, &["-tls1_3"]).as_deref(), Some("TLS_AES_256_GCM_SHA384"), "the first of the list, not the default order's first");
    assert_eq!(hello(inner, &["-tls1_3", "-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"]).as_deref(), Some("TLS_CHACHA20_POLY1305_SHA256"));
    assert_eq!(hello(inner, &["-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"]), None, "a suite outside the list");
    assert_eq!(hello(inner, &["-tls1_2"]), None, "TLS 1.2 below min_version");

    assert_eq!(hello(tls12, &["-tls1_2"]).as_deref(), Some("ECDHE-ECDSA-AES256-GCM-SHA384"));
    assert_eq!(hello(tls12, &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"]), None, "a suite outside the list");
    assert_eq!(hello(tls12, &["-tls1_3"]), None, "TLS 1.3 above max_version");
    assert!(metric(&f, "fulcrum_tls_handshake_failures_total{service=\"only13\",reason=\"protocol\"}") >= 2);

    // server_tls: min_version 1.3 reaches the 1.3-only service; max_version 1.2 cannot.
    let before = metric(&f, "fulcrum_tls_handshakes_total{service=\"only13\",version=\"1.3\"}");
    assert_eq!(http_get(f.listen, "/name"), (200, "b1\n".into()));
    assert_eq!(metric(&f, "fulcrum_tls_handshakes_total{service=\"only13\",version=\"1.3\"}"), before + 1);
    let (status, body) = http_get(outer12, "/name");
    assert_eq!(status, 502, "server_tls at 1.2 only reached a 1.3-only service: {body}");
    // A reload that changes server_tls reuses no connection kept from before it: outer's
    // kept-alive TLS 1.3 connection to only13 is not lent once it may speak only 1.2.
    f.reload(&config("max_version = \"1.2\""));
    f.wait_log("1 service changed (outer)");
    let (status, body) = http_get(f.listen, "/name");
    assert_eq!(status, 502, "a connection made under the old server_tls was reused: {body}");

    // check: unknown names (listing the valid ones), versions in the wrong order, a list that
    // leaves an allowed version no suite, a version that is not one, on both sides.
    let with = |tls_keys: &str| service("s", "{LISTEN}", backend.addr, &tls_table(tls_keys, &[(&cert, "")]));
    refused(
        &with("cipher_suites = [\"TLS_RSA_WITH_RC4_128_SHA\"]"),
        &dir,
        &["cipher_suites", "TLS_RSA_WITH_RC4_128_SHA", "TLS13_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
    );
    refused(&with("min_version = \"1.3\"\nmax_version = \"1.2\""), &dir, &["min_version 1.3 is above max_version 1.2"]);
    refused(&with("cipher_suites = [\"TLS13_AES_128_GCM_SHA256\"]"), &dir, &["leaves TLS 1.2", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]);
    refused(&with("max_version = \"1.1\""), &dir, &["unknown variant `1.1`, expected `1.2` or `1.3`"]);
    refused(&config("cipher_suites = [\"TLS_AES_128_CCM_SHA256\"]"), &dir, &["server_tls", "TLS_AES_128_CCM_SHA256"]);
    assert!(
        check_config(
            &with("min_version = \"1.2\"\nmax_version = \"1.3\"\ncipher_suites = [\"TLS_AES_128_GCM_SHA256\", \"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]")
                .replace("{LISTEN}", "127.0.0.1:1"),
            &dir
        )
        .0
    );
}

/// Client certificates per name: `a.test` requires certificates of CA X (its own `client_ca`),
/// `b.test` none (`client_auth = "none"`), `c.test` those of the service's CA Y. Each name
/// takes only its own clients; a session issued under one name never resumes under another
/// (TLS 1.3 tickets, TLS 1.2 tickets and session IDs), so a session of `b.test` offered for
/// `a.test` gets a full handshake that wants X's certificate; fronting from `b.test` to
/// `a.test`'s host is refused by `strict_sni_host`, on by default.
#[test]
fn each_name_requires_the_client_certificates_of_its_own_ca() {
    let dir = scratch("tls-per-name-ca");
    let a = self_signed(&dir, "a", &["a.test"], 30);
    let b = self_signed(&dir, "b", &["b.test"], 30);
    let c = self_signed(&dir, "c", &["c.test"], 30);
    let (ca_x, client_x) = ca_and_client(&dir, "x");
    let (ca_y, client_y) = ca_and_client(&dir, "y");
    let backend = Backend::start("b1");
    let tls =
        tls_table(&format!("client_ca = \"{}\"", ca_y.cert.display()), &[(&a, &format!("client_ca = \"{}\"", ca_x.cert.display())), (&b, "client_auth = \"none\""), (&c, "")]);
    let f = Fulcrum::start(&service("web", "{LISTEN}", backend.addr, &tls));
    let as_x = ["--cert", client_x.cert.to_str().unwrap(), "--key", client_x.key.to_str().unwrap()];
    let as_y = ["--cert", client_y.cert.to_str().unwrap(), "--key", client_y.key.to_str().unwrap()];
    let served = |name: &str, ca: &Pem, who: &[&str]| curl_https(&f, name, "/name", &ca.cert, who) == (0, "b1\n".into());
    assert!(served("a.test", &a, &as_x), "a.test takes X's client");
    assert!(!served("a.test", &a, &as_y), "a.test refuses Y's client");
    assert!(!served("a.test", &a, &[]), "a.test refuses a client without a certificate");
    assert!(served("b.test", &b, &[]), "b.test asks for nothing");
    assert!(served("c.test", &c, &as_y), "c.test takes the service's CA's client");
    assert!(!served("c.test", &c, &as_x), "c.test refuses X's client");
    wait_until("refusals counted", std::time::Duration::from_secs(5), || metric(&f, "fulcrum_tls_handshake_failures_total{service=\"web\",reason=\"client_certificate\"}") >= 3);

    // Fronting: a handshake as b.test (no certificate) asking for a.test's host.
    let (code, status) = curl_https(&f, "b.test", "/name", &b.cert, &["-H", "Host: a.test", "-o", "/dev/null", "-w", "%{http_code}"]);
    assert_eq!((code, status.as_str()), (0, "421"));

    let x_cert = ["-cert", client_x.cert.to_str().unwrap(), "-key", client_x.key.to_str().unwrap()];
    for (how, args) in [("TLS 1.3 ticket", &["-tls1_3"][..]), ("TLS 1.2 ticket", &["-tls1_2"][..]), ("TLS 1.2 session ID", &["-tls1_2", "-no_ticket"][..])] {
        let session = |stem: &str| dir.join(format!("{stem}-{}.pem", how.replace(' ', "-")));
        // b.test's session resumes on b.test...
        let b_session = session("b");
        let first = s_client_request(f.listen, "b.test", &[args, &["-sess_out", b_session.to_str().unwrap()]].concat());
        assert!(first.contains("HTTP/1.1 200"), "{how}: b.test serves\n{first}");
        let again = s_client_request(f.listen, "b.test", &[args, &["-sess_in", b_session.to_str().unwrap()]].concat());
        assert!(again.contains("Reused") && again.contains("HTTP/1.1 200"), "{how}: b.test resumes its own session\n{again}");
        // ... and not on a.test: a full handshake that wants X's certificate.
        let crossed = s_client_request(f.listen, "a.test", &[args, &["-sess_in", b_session.to_str().unwrap()]].concat());
        assert!(!crossed.contains("Reused"), "{how}: b.test's session resumed on a.test\n{crossed}");
        assert!(!crossed.contains("HTTP/1.1 200"), "{how}: a request reached a.test with no certificate\n{crossed}");

        // a.test's own session, made with X's certificate, resumes there and not on c.test.
        let a_session = session("a");
        let first = s_client_request(f.listen, "a.test", &[args, &["-sess_out", a_session.to_str().unwrap()], &x_cert].concat());
        assert!(first.contains("HTTP/1.1 200"), "{how}: a.test serves X's client\n{first}");
        let again = s_client_request(f.listen, "a.test", &[args, &["-sess_in", a_session.to_str().unwrap()]].concat());
        assert!(again.contains("Reused") && again.contains("HTTP/1.1 200"), "{how}: a.test resumes X's client's session\n{again}");
        let crossed = s_client_request(f.listen, "c.test", &[args, &["-sess_in", a_session.to_str().unwrap()]].concat());
        assert!(!crossed.contains("Reused") && !crossed.contains("HTTP/1.1 200"), "{how}: X's session passed on c.test, which wants Y's\n{crossed}");
    }

    // check: client_auth that says nothing true, and names that ask differently where a client
    // could pick the one that asks least.
    let config = |extra: &str, certs: &[(&Pem, &str)]| service("web", "{LISTEN}", backend.addr, &tls_table(extra, certs));
    refused(&config("", &[(&a, "client_auth = \"required\"")]), &dir, &["client_auth = \"required\" with no client_ca"]);
    let own = format!("client_ca = \"{}\"", ca_x.cert.display());
    refused(&config("", &[(&a, &format!("{own}\nclient_auth = \"none\""))]), &dir, &["client_auth = \"none\" beside"]);
    refused(&config("strict_sni_host = false", &[(&a, &own), (&b, "")]), &dir, &["strict_sni_host = false while the certificates ask for different client certificates"]);
    refused(&config("", &[(&a, &own), (&b, "")]).replace("mode = \"http\"", "mode = \"tcp\""), &dir, &["in mode = \"tcp\" every name reaches the same servers"]);
    refused(&config("", &[(&a, "client_auth = \"optional\"")]), &dir, &["unknown variant `optional`, expected `required` or `none`"]);
    assert!(check_config(&config("", &[(&a, &own), (&b, "")]).replace("{LISTEN}", "127.0.0.1:1"), &dir).0);
}

/// Sessions resume on a service without `client_ca`: `-reconnect` (five reconnections) with
/// TLS 1.2 session IDs and tickets, and a TLS 1.3 ticket saved and offered again.
#[test]
fn sessions_resume_by_ticket_and_by_session_id() {
    let dir = scratch("tls-resumption");
    let cert = self_signed(&dir, "a", &["a.test"], 30);
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&service("web", "{LISTEN}", backend.addr, &tls_table("", &[(&cert, "")])));
    for (how, args) in [("TLS 1.2 ticket", &["-tls1_2"][..]), ("TLS 1.2 session ID", &["-tls1_2", "-no_ticket"][..])] {
        let out = s_client(f.listen, &[&["-servername", "a.test", "-reconnect"][..], args].concat());
        let reused = out.lines().filter(|l| l.starts_with("Reused,")).count();
        assert_eq!(reused, 5, "{how}: every reconnection resumes\n{out}");
    }
    let ticket = dir.join("tls13.pem");
    let first = s_client_request(f.listen, "a.test", &["-tls1_3", "-sess_out", ticket.to_str().unwrap()]);
    assert!(first.contains("New,") && first.contains("HTTP/1.1 200"), "{first}");
    for n in 0..3 {
        let again = s_client_request(f.listen, "a.test", &["-tls1_3", "-sess_in", ticket.to_str().unwrap()]);
        assert!(again.contains("Reused,") && again.contains("HTTP/1.1 200"), "resumption {n}\n{again}");
    }
}
