//! Running as an unprivileged user: started as root with `user = "nobody"`, every thread of the
//! process runs as nobody (as `/proc` shows), traffic flows, Save writes into a directory the
//! user owns; a reload that adds a port below 1024 is refused with the reason unless
//! `keep_capabilities` kept CAP_NET_BIND_SERVICE, and then it binds. As root without `user`,
//! `fulcrum run` refuses unless `allow_root`; `fulcrum check` names a user that does not exist.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

const NOBODY: u32 = 65534;

fn config(top: &str, backend: &Backend, low: Option<SocketAddr>) -> String {
    let mut s = format!("{top}\n[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\n\n[service.health]\n{HTTP_CHECK}\n\n[[service.server]]\naddress = \"{}\"\n", backend.addr);
    if let Some(low) = low {
        s.push_str(&format!("\n[[service]]\nname = \"low\"\nlisten = \"{low}\"\n\n[service.health]\n{HTTP_CHECK}\n\n[[service.server]]\naddress = \"{}\"\n", backend.addr));
    }
    s
}

/// A loopback port below 1024 that nothing listens on now.
fn low_port() -> SocketAddr {
    (600..1000).map(|p| SocketAddr::from(([127, 0, 0, 1], p))).find(|a| TcpListener::bind(a).is_ok()).expect("a free port below 1024")
}

/// The name, `Uid`, `Gid`, `Groups` and `CapEff` of every thread of `pid`.
fn threads(pid: u32) -> Vec<(String, String, String, String, String)> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    for task in std::fs::read_dir(&dir).unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(&format!("{name}:\t")).map(str::to_string)).unwrap_or_default();
        out.push((field("Name"), field("Uid"), field("Gid"), field("Groups"), field("CapEff")));
    }
    assert!(!out.is_empty(), "no threads read in {dir}");
    out
}

fn assert_runs_as_nobody(f: &Fulcrum, caps: &str) {
    let every = format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}");
    for (name, uid, gid, groups, eff) in threads(f.pid()) {
        assert_eq!(uid, every, "Uid of thread {name}");
        assert_eq!(gid, every, "Gid of thread {name}");
        assert_eq!(groups.trim(), NOBODY.to_string(), "supplementary groups of thread {name}");
        // The allocator's background threads start before the switch and never bind: they
        // keep nothing. Every other thread has exactly what was kept.
        let want = if name.starts_with("jemalloc") { "0000000000000000" } else { caps };
        assert_eq!(eff, want, "effective capabilities of thread {name}");
    }
}

fn get(addr: SocketAddr) -> (u16, String) {
    curl(addr, "GET", "/index.html", &[], None)
}

#[test]
fn started_as_root_with_a_user_every_thread_runs_as_it_and_a_low_port_needs_the_capability() {
    let b = Backend::start("priv");
    let top = "user = \"nobody\"\ngroup = \"nogroup\"\nworkers = 2\n";
    let socket = scratch("priv-socket").join("run/admin.sock");
    let f = Fulcrum::start_with_admin(&config(top, &b, None), &format!("socket = \"{}\"", socket.display()), None);
    f.wait_all_up();
    // The control socket and the directory made for it are the user's, so it can remove them.
    for made in [&socket, socket.parent().unwrap()] {
        let m = std::fs::symlink_metadata(made).unwrap();
        assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "owner of {}", made.display());
    }
    let (ok, out, err) = crate::control_socket::ctl(&["--socket", socket.to_str().unwrap(), "stats"]);
    assert!(ok && out.contains("web on"), "{out} {err}");
    assert_runs_as_nobody(&f, "0000000000000000");
    assert!(f.log().contains("running as an unprivileged user"), "{}", f.log());
    let (status, body) = get(f.listen);
    assert_eq!(status, 200, "traffic flows: {body}");

    // Save writes next to the config: the user needs that directory.
    let dir = f.config_path.parent().unwrap();
    let (status, answer) = f.api("POST", "/api/save", None);
    assert_eq!(status, 422, "a root-owned directory: {answer}");
    assert!(answer["error"].as_str().unwrap_or_default().contains("Permission denied"), "{answer}");
    std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
    let (status, answer) = f.api("POST", "/api/save", None);
    assert_eq!(status, 200, "the user's own directory: {answer}");

    // Without the capability, a port below 1024 is refused with the reason and the hint.
    let low = low_port();
    f.reload(&config(top, &b, Some(low)));
    f.wait_log("reload refused");
    let log = f.log();
    assert!(log.contains(&format!("cannot listen on {low}: Permission denied")) && log.contains("keep_capabilities = [\"net_bind_service\"]"), "{log}");
    assert_eq!(get(f.listen).0, 200, "the running config stays");

    let mut f = f;
    f.signal(libc_sig::TERM);
    assert!(f.wait_exit(Duration::from_secs(20)).is_some(), "fulcrum exits");
    assert!(!socket.exists(), "the user removed its socket at exit");
}

#[test]
fn with_keep_capabilities_the_user_keeps_only_the_bind_capability_and_a_reload_binds_a_low_port() {
    let b = Backend::start("keep");
    let top = "user = \"nobody\"\nkeep_capabilities = [\"net_bind_service\"]\nworkers = 2\n";
    let f = Fulcrum::start(&config(top, &b, None));
    f.wait_all_up();
    // CAP_NET_BIND_SERVICE is bit 10, and nothing else is left.
    assert_runs_as_nobody(&f, "0000000000000400");
    let low = low_port();
    f.reload(&config(top, &b, Some(low)));
    wait_until("the low port serves", Duration::from_secs(10), || get(low).0 == 200);
    assert_runs_as_nobody(&f, "0000000000000400");
}

#[test]
fn run_as_root_without_user_is_refused_unless_allowed_and_check_names_a_missing_user() {
    let dir = scratch("root");
    let port = free_port();
    let body = format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:{port}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"127.0.0.1:9\"\n");
    let path = dir.join("root.toml");
    std::fs::write(&path, &body).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["run", path.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to run as root") && err.contains("allow_root = true") && err.contains("user = \"NAME\""), "{err}");

    let missing = dir.join("missing.toml");
    std::fs::write(&missing, format!("user = \"no-such-user-fulcrum\"\ngroup = \"no-such-group-fulcrum\"\n\n{body}")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", missing.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.toml:1:") && err.contains("no user named \"no-such-user-fulcrum\""), "{err}");
    assert!(err.contains("missing.toml:2:") && err.contains("no group named \"no-such-group-fulcrum\""), "{err}");
}
