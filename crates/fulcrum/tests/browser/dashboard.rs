//! The dashboard in real headless Chromium (Playwright, `tests/browser/dashboard.mjs`) while
//! traffic flows through four real servers. Screenshots of every tab go to `artifacts/dashboard/`.
//! `scripts/test` installs Chromium and the script's one npm package.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn a_user_drives_the_dashboard_in_chromium() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let browser = root.join("tests/browser");
    assert!(
        browser.join("node_modules/playwright-core").exists() && Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Chromium and playwright-core: run scripts/test, which installs them"
    );
    let servers: Vec<Backend> = (1..=4).map(|i| Backend::start(&format!("b{i}"))).collect();
    let mut config = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nalgorithm = \"round-robin\"\n\n[service.health]\n{HTTP_CHECK}\n");
    for (i, b) in servers.iter().enumerate() {
        // One server with a maxconn, for the stats table's Limit cell.
        config.push_str(&format!("\n[[service.server]]\naddress = \"{}\"\n{}", b.addr, if i == 0 { "maxconn = 50\n" } else { "" }));
    }
    let f = Fulcrum::start(&config);
    f.wait_all_up();

    // Light steady traffic for as long as the browser works, and never longer than two minutes.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let addr = f.listen;
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut sent = 0u32;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                let _ = http_get_from(None, addr, "/name");
                sent += 1;
                std::thread::sleep(Duration::from_millis(25));
            }
            sent
        })
    };

    let artifacts = root.join("../../artifacts/dashboard");
    let _ = std::fs::remove_dir_all(&artifacts);
    let out = Command::new("node")
        .arg(browser.join("dashboard.mjs"))
        .env("DASHBOARD_URL", format!("http://{}/", f.admin))
        .env("CONFIG_PATH", &f.config_path)
        .env("ARTIFACTS", &artifacts)
        // For the service the browser creates (and deletes): its address and a real server.
        .env("NEW_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("NEW_SERVER", servers[1].addr.to_string())
        .output()
        .expect("node must be installed");
    stop.store(true, Ordering::Relaxed);
    let sent = traffic.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the browser test failed (screenshots in {}):\n{stdout}\n{stderr}", artifacts.display());
    assert!(stdout.contains("all checks passed"), "{stdout}");
    assert!(sent > 100, "traffic flowed during the test: {sent} requests");

    // What the browser saved is a config Fulcrum accepts, with the browser's changes in it.
    let saved = std::fs::read_to_string(&f.config_path).unwrap();
    assert!(saved.contains("algorithm = \"least-conn\"") && saved.contains("expect_text = \"TARGET b\""), "{saved}");
    let check = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", f.config_path.to_str().unwrap()]).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    for tab in ["overview", "real-servers", "real-servers-disabled", "algorithm", "keepalive", "server-lb", "stats", "graphs", "why", "config"] {
        assert!(artifacts.join(format!("{tab}.png")).exists(), "screenshot of {tab}");
    }
}

/// An ACME certificate whose CA cannot be reached, in the Certificates tab
/// (`tests/browser/certificates_acme.mjs`): its source, and the note of the self-signed one
/// that serves meanwhile.
#[test]
fn the_certificates_tab_shows_an_acme_certificate_and_why_a_self_signed_one_serves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let storage = scratch("dashboard-acme");
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"secure\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n[service.tls.acme]\ndirectory = \"https://127.0.0.1:{}/dir\"\nnames = [\"a.acme.test\"]\nstorage = \"{}\"\n",
        backend.addr,
        free_port(),
        storage.display()
    ));
    let out =
        Command::new("node").arg(root.join("tests/browser/certificates_acme.mjs")).env("DASHBOARD_URL", format!("http://{}/", f.admin)).output().expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("all checks passed"), "{stdout}\n{}\n{}", String::from_utf8_lossy(&out.stderr), f.log());
}

/// A TLS service's certificates in the Stats tab and the Certificates tab
/// (`tests/browser/certificates.mjs`).
#[test]
fn the_stats_and_certificates_tabs_show_certificates_and_mark_one_about_to_expire() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = scratch("dashboard-tls");
    let pem = |stem: &str, names: &[&str], days: i64| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(days);
        let cert = p.self_signed(&key).unwrap();
        let (c, k) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        format!("[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n", c.display(), k.display())
    };
    let backend = Backend::start("b1");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"secure\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n[service.tls]\n{}{}",
        backend.addr,
        pem("a", &["a.test", "*.wild.test"], 60),
        pem("soon", &["soon.test"], 5)
    ));
    let handshake = Command::new("openssl").args(["s_client", "-connect", &f.listen.to_string(), "-tls1_3"]).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(String::from_utf8_lossy(&handshake.stdout).contains("TLSv1.3"));
    let out = Command::new("node").arg(root.join("tests/browser/certificates.mjs")).env("DASHBOARD_URL", format!("http://{}/", f.admin)).output().expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("all checks passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}
