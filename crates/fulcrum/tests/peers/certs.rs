//! `fulcrum certs` and the expiry gauge against a running instance with certificate files: the
//! listing names each certificate with its issuer, expiry and source and marks the one near its
//! end, as a table and as JSON; `/metrics` has the seconds left of each.

use std::process::Command;

use crate::support::*;
use crate::tls::self_signed;

fn certs(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("certs").args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn fulcrum_certs_lists_each_certificate_with_its_issuer_expiry_and_source_and_metrics_count_the_seconds_left() {
    let dir = scratch("certs-cli");
    let a = self_signed(&dir, "a", &["a.test", "*.wild.test"], 60);
    let soon = self_signed(&dir, "soon", &["soon.test"], 5);
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"secure\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n[service.tls]\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n",
        backend.addr,
        a.cert.display(),
        a.key.display(),
        soon.cert.display(),
        soon.key.display()
    ));
    let url = format!("http://{}", f.admin);

    let (ok, out) = certs(&["--url", &url]);
    assert!(ok, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("SERVICE") && lines[0].contains("ISSUER") && lines[0].ends_with("NEXT RENEWAL"), "{out}");
    let row = |name: &str| lines.iter().find(|l| l.contains(name)).copied().unwrap_or_else(|| panic!("no row for {name}:\n{out}"));
    let (a_row, soon_row) = (row("a.test,*.wild.test"), row("soon.test"));
    assert!(a_row.starts_with("secure") && a_row.contains(" file ") && (a_row.contains(" 59d ") || a_row.contains(" 60d ")) && !a_row.contains("expiring"), "{out}");
    assert!((soon_row.contains(" 4d (expiring)") || soon_row.contains(" 5d (expiring)")) && soon_row.ends_with(" -"), "{out}");
    // The issuer as the leaf names it (rcgen's self-signed subject).
    assert!(a_row.contains("CN=a.test"), "{out}");

    let (ok, out) = certs(&["--url", &url, "--json"]);
    assert!(ok, "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(2), "{out}");
    assert_eq!((rows[1]["service"].as_str(), rows[1]["source"].as_str(), rows[1]["expiring"].as_bool()), (Some("secure"), Some("file"), Some(true)), "{out}");
    let left = rows[1]["expires_in_seconds"].as_u64().unwrap();
    assert!((4 * 86_400..=5 * 86_400).contains(&left), "{out}");

    // The same seconds in /metrics, by names and source, beside the expiry's timestamp.
    let (status, metrics) = curl(f.admin, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    let gauge = metrics
        .lines()
        .find(|l| l.starts_with("fulcrum_tls_certificate_expiry_seconds{service=\"secure\",names=\"soon.test\",") && l.contains("source=\"file\""))
        .unwrap_or_else(|| panic!("no expiry gauge for soon.test:\n{metrics}"));
    let seconds: u64 = gauge.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((4 * 86_400..=5 * 86_400).contains(&seconds), "{gauge}");
    // As Prometheus's own text parser reads it.
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families\n\
                  f = {x.name: x for x in text_string_to_metric_families(sys.stdin.read())}\n\
                  g = f['fulcrum_tls_certificate_expiry_seconds']\n\
                  print(g.type, ' '.join(sorted(s.labels['names'] + '/' + s.labels['source'] for s in g.samples)))\n";
    assert_eq!(crate::admin_api::parsed(script, &metrics).trim(), "gauge a.test,*.wild.test/file soon.test/file");

    // An instance that cannot be reached is an error that says so.
    let (ok, out) = certs(&["--url", &format!("http://127.0.0.1:{}", free_port())]);
    assert!(!ok && out.contains("cannot connect to the admin listener"), "{out}");
}
