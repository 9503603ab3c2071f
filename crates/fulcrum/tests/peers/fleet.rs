//! The fleet against a real three-member etcd cluster: three Fulcrum instances that take their
//! services from it, an edit through one that reaches the others, a stale edit refused, members
//! lost one by one and all at once, catching up, and a server that joins under its own lease.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::etcd::{Etcd, Tls};
use crate::support::*;

const PREFIX: &str = "/fleet-test";

/// `fulcrum fleet ARGS` against the test's etcd: whether it succeeded, and what it printed.
fn try_fleet_cli(etcd: &Etcd, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("fleet").args(args).args(["--endpoints", &etcd.endpoints(), "--prefix", PREFIX]).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn fleet_cli(etcd: &Etcd, args: &[&str]) -> String {
    let (ok, out) = try_fleet_cli(etcd, args);
    assert!(ok, "fulcrum fleet {args:?}: {out}");
    out
}

fn import(etcd: &Etcd, servers: &[SocketAddr]) -> String {
    import_with(etcd, "round-robin", servers)
}

fn import_with(etcd: &Etcd, algorithm: &str, servers: &[SocketAddr]) -> String {
    let dir = scratch("fleet-import");
    let mut text = format!(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:80\"\nmode = \"http\"\nalgorithm = \"{algorithm}\"\n[service.health]\nkind = \"http\"\ninterval = \"200ms\"\nrise = 1\npath = \"/name\"\n"
    );
    for s in servers {
        text.push_str(&format!("[[service.server]]\naddress = \"{s}\"\n"));
    }
    let file = dir.join("services.toml");
    std::fs::write(&file, text).unwrap();
    fleet_cli(etcd, &["import", file.to_str().unwrap()])
}

/// An instance's own file: where etcd is, its name, and its own listen address for `web`.
fn instance(etcd: &Etcd, name: &str) -> String {
    instance_with(etcd, name, "")
}

/// Like `instance`, with more of the instance's own settings for `web`.
fn instance_with(etcd: &Etcd, name: &str, overrides: &str) -> String {
    format!(
        "[fleet]\nendpoints = {}\nprefix = \"{PREFIX}\"\nname = \"{name}\"\nlease = \"3s\"\n\n[fleet.override.web]\nlisten = \"{{LISTEN}}\"\n{overrides}",
        etcd.endpoints_toml()
    )
}

fn registered(lb: &Fulcrum, n: usize) -> bool {
    let (_, fleet) = lb.api("GET", "/api/fleet", None);
    fleet["members"].as_array().is_some_and(|m| m.len() == n && m.iter().all(|m| m["lagging"] == false && m["gone_since"].is_null()))
}

fn servers(lb: &Fulcrum) -> Vec<(String, u64)> {
    let stats = lb.stats();
    stats["services"][0]["servers"]
        .as_array()
        .map(|s| s.iter().map(|v| (v["address"].as_str().unwrap_or_default().to_string(), v["weight"].as_u64().unwrap_or(0))).collect())
        .unwrap_or_default()
}

fn connected(lb: &Fulcrum) -> bool {
    lb.stats()["fleet"]["connected"] == true
}

fn post(lb: &Fulcrum, path: &str, body: serde_json::Value, headers: &[&str]) -> (u16, String) {
    let mut h = vec!["Content-Type: application/json".to_string()];
    h.extend(headers.iter().map(|s| s.to_string()));
    curl(lb.admin, "POST", path, &h, Some(&body.to_string()))
}

#[test]
fn three_instances_run_one_config_from_etcd_and_keep_serving_without_it() {
    let mut etcd = Etcd::start(3);
    let (a, b, c) = (Backend::start("a"), Backend::start("b"), Backend::start("c"));
    let out = import(&etcd, &[a.addr]);
    assert!(out.contains("imported 1 service from"), "{out}");

    // Each instance has no service of its own: it listens once etcd's arrives.
    let lbs: Vec<Fulcrum> = ["lb-1", "lb-2", "lb-3"].iter().map(|n| Fulcrum::start(&instance(&etcd, n))).collect();
    for lb in &lbs {
        assert_eq!(curl(lb.admin, "GET", "/ready", &[], None).0, 200);
        lb.wait_all_up();
        assert_eq!(http_get(lb.listen, "/name"), (200, "a\n".to_string()));
    }
    wait_until("three members registered", Duration::from_secs(10), || registered(&lbs[0], 3));

    // An edit through lb-1 runs on lb-2 and lb-3 within a second.
    let sent = Instant::now();
    let (status, body) = post(&lbs[0], "/api/services/web/servers", serde_json::json!({ "address": b.addr.to_string() }), &[]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("written to the fleet") && body.contains("applied here"), "{body}");
    let has_b = |lb: &Fulcrum| servers(lb).iter().any(|(s, _)| s == &b.addr.to_string());
    wait_until("the new server on every instance", Duration::from_secs(1), || lbs[1..].iter().all(has_b));
    eprintln!("an edit through lb-1 ran on lb-2 and lb-3 {} ms after it was sent", sent.elapsed().as_millis());

    // An edit based on a revision that is no longer the newest is refused, and says by whom.
    let seen = lbs[1].stats()["fleet"]["revision"].as_i64().unwrap();
    let weight = |w: u32| serde_json::json!({ "weight": w });
    let path = format!("/api/services/web/servers/{}/weight", b.addr);
    assert_eq!(post(&lbs[0], &path, weight(2), &[]).0, 200);
    let (status, body) = post(&lbs[1], &path, weight(5), &[&format!("If-Match: \"{seen}\"")]);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains(&format!("after revision {seen} this edit was based on")) && body.contains("(by lb-1)"), "{body}");
    let audit = etcd.ctl(&["get", "--prefix", &format!("{PREFIX}/audit/"), "--print-value-only"]);
    assert!(audit.contains(&format!("add server {} to web", b.addr)) && audit.contains("\"instance\":\"lb-1\""), "{audit}");
    assert!(!audit.contains("weight 5"), "{audit}");
    // This instance's own listen address is not the fleet's to change.
    let (status, body) = post(&lbs[1], "/api/services/web/settings", serde_json::json!({ "listen": "127.0.0.1:1" }), &[]);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("listen of service \\\"web\\\" is this instance's own"), "{body}");

    // One member down: edits still apply everywhere (an instance that was on it reconnects).
    etcd.stop_member(0);
    wait_until("an edit with one etcd member down", Duration::from_secs(20), || post(&lbs[2], &path, weight(3), &[]).0 == 200);
    wait_until("weight 3 everywhere", Duration::from_secs(5), || lbs.iter().all(|lb| servers(lb).contains(&(b.addr.to_string(), 3))));
    // Each instance registers what it runs after applying it; lb-1 sees all three current.
    wait_until("every instance registered as current", Duration::from_secs(10), || registered(&lbs[0], 3));

    // Every member down: traffic goes on, the stats say so, edits are refused, /ready stays 200.
    etcd.stop_member(1);
    etcd.stop_member(2);
    wait_until("every instance disconnected", Duration::from_secs(15), || lbs.iter().all(|lb| !connected(lb)));
    for lb in &lbs {
        let stats = lb.stats();
        assert!(stats["fleet"]["lost"].as_str().is_some_and(|l| !l.is_empty()), "{}", stats["fleet"]);
        for _ in 0..4 {
            assert_eq!(http_get(lb.listen, "/name").0, 200);
        }
        assert_eq!(curl(lb.admin, "GET", "/ready", &[], None).0, 200);
    }
    let (status, body) = post(&lbs[0], &path, weight(4), &[]);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not connected to etcd"), "{body}");
    // The dashboard says the same, in Chromium.
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    assert!(browser.join("node_modules/playwright-core").exists(), "scripts/test installs playwright-core in tests/browser");
    let out = Command::new("node").arg(browser.join("fleet.mjs")).env("DASHBOARD_URL", format!("http://{}/", lbs[0].admin)).output().expect("node must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("all checks passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));

    // etcd back, and a config imported before the instances reconnect: each catches up.
    for i in 0..3 {
        etcd.start_member(i);
    }
    etcd.wait_healthy();
    import(&etcd, &[c.addr]);
    let only_c = vec![(c.addr.to_string(), 1)];
    wait_until("every instance caught up", Duration::from_secs(20), || lbs.iter().all(|lb| connected(lb) && servers(lb) == only_c));
    for lb in &lbs {
        lb.wait_all_up();
        assert_eq!(http_get(lb.listen, "/name"), (200, "c\n".to_string()));
    }

    // A server that registers itself under a lease gets traffic, and leaves when the lease ends.
    let granted = etcd.ctl(&["lease", "grant", "2"]);
    let lease = granted.split_whitespace().nth(1).unwrap_or_else(|| panic!("{granted}")).to_string();
    etcd.ctl(&["put", "--lease", &lease, &format!("{PREFIX}/discovery/web/{}", a.addr), r#"{"weight": 1}"#]);
    let has_a = |lb: &Fulcrum| servers(lb).iter().any(|(s, _)| s == &a.addr.to_string());
    wait_until("the discovered server everywhere", Duration::from_secs(5), || lbs.iter().all(has_a));
    lbs[0].wait_all_up();
    let seen = tally(lbs[0].listen, 6);
    assert_eq!((seen.get("a"), seen.get("c")), (Some(&3), Some(&3)), "{seen:?}");
    wait_until("the discovered server gone with its lease", Duration::from_secs(10), || lbs.iter().all(|lb| !has_a(lb)));
}

#[test]
fn a_file_with_fleet_and_services_is_refused_and_import_validates_first() {
    let dir = scratch("fleet-check");
    let file = dir.join("both.toml");
    std::fs::write(&file, "[fleet]\nendpoints = [\"http://127.0.0.1:2379\", \"127.0.0.1:2379\"]\nprefix = \"fleet/\"\n\n[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\n[[service.server]]\naddress = \"127.0.0.1:9000\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("check").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("a fleet's services come from etcd") && text.contains("fulcrum fleet import"), "{text}");
    assert!(text.contains("\"127.0.0.1:2379\" is not an http:// or https:// URL"), "{text}");
    assert!(text.contains("must start with '/'"), "{text}");

    // A file that does not validate is not imported; etcd is not even asked.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["fleet", "import"]).arg(&bad).args(["--endpoints", "http://127.0.0.1:1"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("not imported"), "{text}");
}

#[test]
fn fleet_check_passes_on_an_agreeing_fleet_and_names_the_instance_that_differs() {
    let etcd = Etcd::start(1);
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    import_with(&etcd, "source-hash", &[a.addr, b.addr]);
    let lbs: Vec<Fulcrum> = ["lb-1", "lb-2"].iter().map(|n| Fulcrum::start(&instance(&etcd, n))).collect();
    for lb in &lbs {
        lb.wait_all_up();
    }
    wait_until("two members registered", Duration::from_secs(10), || registered(&lbs[0], 2));
    let (ok, out) = try_fleet_cli(&etcd, &["check"]);
    assert!(ok && out.contains("2 instances agree"), "{out}");
    assert!(out.contains("lb-1: admin") && out.contains("lb-2: admin"), "{out}");

    // An instance whose own file balances `web` another way is named, with what it does.
    let odd = Fulcrum::start(&instance_with(&etcd, "lb-3", "algorithm = \"round-robin\"\n"));
    odd.wait_all_up();
    wait_until("three members registered", Duration::from_secs(10), || registered(&lbs[0], 3));
    let (ok, out) = try_fleet_cli(&etcd, &["check"]);
    assert!(!ok, "{out}");
    assert!(out.contains("lb-3 differs in service web: algorithm: \"round-robin\", where lb-1, lb-2 have \"source-hash\""), "{out}");
    assert!(out.contains("lb-3 differs in service web: table digest: \"none\""), "{out}");
    assert!(!out.contains("lb-1 differs") && !out.contains("lb-2 differs"), "{out}");

    // An instance that stops is listed as gone by the others (its registration revoked on the way out).
    odd.signal(libc_sig::TERM);
    wait_until("lb-3 listed as gone", Duration::from_secs(5), || {
        let (_, fleet) = lbs[0].api("GET", "/api/fleet", None);
        fleet["members"].as_array().is_some_and(|m| m.iter().any(|m| m["name"] == "lb-3" && m["gone_since"].is_u64()))
    });
}

#[test]
fn fleet_check_names_an_instance_whose_shared_limit_cannot_reach_redis() {
    let etcd = Etcd::start(1);
    let mut redis = crate::limits::Redis::start();
    let backend = Backend::start("a");
    let dir = scratch("fleet-limit");
    let file = dir.join("services.toml");
    std::fs::write(
        &file,
        format!(
            "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:80\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n\
             [[service.limit]]\nname = \"shared\"\ncount = \"requests\"\nlimit = 100\nstore = \"redis\"\nredis = \"127.0.0.1:{}\"\n",
            backend.addr, redis.port
        ),
    )
    .unwrap();
    fleet_cli(&etcd, &["import", file.to_str().unwrap()]);
    let lbs: Vec<Fulcrum> = ["lb-1", "lb-2"].iter().map(|n| Fulcrum::start(&instance(&etcd, n))).collect();
    wait_until("two members registered", Duration::from_secs(10), || registered(&lbs[0], 2));
    let synced = |lb: &Fulcrum, connected: bool| lb.stats()["limits"][0]["sync"]["connected"] == connected;
    wait_until("both synced with Redis", Duration::from_secs(10), || lbs.iter().all(|lb| synced(lb, true)));
    let (ok, out) = try_fleet_cli(&etcd, &["check"]);
    assert!(ok && out.contains("2 instances agree"), "{out}");
    // Redis gone: they agree still, and each is named as running its shared limit on its own.
    redis.kill();
    wait_until("both lost Redis", Duration::from_secs(10), || lbs.iter().all(|lb| synced(lb, false)));
    let (ok, out) = try_fleet_cli(&etcd, &["check"]);
    assert!(!ok, "{out}");
    for name in ["lb-1", "lb-2"] {
        assert!(out.contains(&format!("{name}: limit shared: Redis cannot be reached (")), "{out}");
    }
    assert!(out.contains("not all run whole"), "{out}");
}

/// A CA and a certificate it signed for 127.0.0.1, written into `dir`, as etcd serves TLS.
fn etcd_tls(dir: &std::path::Path) -> Tls {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(vec!["Fleet test CA".to_string()]).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
    let tls = Tls { cert: dir.join("etcd.pem"), key: dir.join("etcd.key"), ca: dir.join("ca.pem") };
    std::fs::write(&tls.cert, cert.pem()).unwrap();
    std::fs::write(&tls.key, key.serialize_pem()).unwrap();
    std::fs::write(&tls.ca, ca_cert.pem()).unwrap();
    tls
}

#[test]
fn an_instance_reaches_etcd_over_tls_as_a_user_allowed_only_its_prefix() {
    let dir = scratch("fleet-tls");
    let tls = etcd_tls(&dir);
    let mut etcd = Etcd::start_with(1, Some(tls.clone()));
    for args in [
        &["user", "add", "root:root-password"][..],
        &["user", "add", "fulcrum:fleet-password"],
        &["role", "add", "fleet"],
        &["role", "grant-permission", "fleet", "--prefix=true", "readwrite", &format!("{PREFIX}/")],
        &["user", "grant-role", "fulcrum", "fleet"],
        &["auth", "enable"],
    ] {
        etcd.ctl(args);
    }
    etcd.root = Some("root:root-password".into());
    let backend = Backend::start("a");
    let password = dir.join("password");
    std::fs::write(&password, "fleet-password\n").unwrap();
    let local = |password: &std::path::Path| {
        format!(
            "[fleet]\nendpoints = {}\nprefix = \"{PREFIX}\"\nname = \"lb-tls\"\nlease = \"3s\"\nuser = \"fulcrum\"\npassword_file = \"{}\"\nca = \"{}\"\n\n[fleet.override.web]\nlisten = \"{{LISTEN}}\"\n",
            etcd.endpoints_toml(),
            password.display(),
            tls.ca.display()
        )
    };
    // The import and the instance both read [fleet] from an instance's file.
    let file = dir.join("lb.toml");
    std::fs::write(&file, local(&password).replace("{LISTEN}", "127.0.0.1:1")).unwrap();
    let services = dir.join("services.toml");
    std::fs::write(&services, format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:80\"\nmode = \"http\"\n[[service.server]]\naddress = \"{}\"\n", backend.addr)).unwrap();
    let import = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["fleet", "import"]).arg(&services).arg("--config").arg(&file).output().unwrap();
    assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));

    let lb = Fulcrum::start(&local(&password));
    lb.wait_all_up();
    assert_eq!(http_get(lb.listen, "/name"), (200, "a\n".to_string()));
    assert!(connected(&lb));
    let members = etcd.ctl(&["get", "--prefix", &format!("{PREFIX}/members/"), "--print-value-only"]);
    assert!(members.contains("\"name\":\"lb-tls\""), "{members}");

    // A wrong password is etcd's refusal, said as such.
    let wrong = dir.join("wrong");
    std::fs::write(&wrong, "not-it\n").unwrap();
    std::fs::write(&file, local(&wrong).replace("{LISTEN}", "127.0.0.1:1")).unwrap();
    let export = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["fleet", "export", "--config"]).arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&export.stderr);
    assert!(!export.status.success() && text.contains("authentication failed"), "{text}");
}
