//! The control socket and `fulcrum ctl` against a running Fulcrum: the API over a Unix socket
//! with no token while the TCP listener keeps its authentication, the socket's file made and
//! removed as documented, a socket-only config, a reload that moves the socket, and ctl's errors
//! and exit codes.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// `fulcrum ctl ARGS`: whether it exited 0, its standard output and error.
pub fn ctl(args: &[&str]) -> (bool, String, String) {
    ctl_as(None, args)
}

/// `fulcrum ctl ARGS` run as `user` (with runuser) when given.
fn ctl_as(user: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut command = match user {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--", env!("CARGO_BIN_EXE_fulcrum")]);
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_fulcrum")),
    };
    let out = command.arg("ctl").args(args).output().expect("fulcrum ctl runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn service(backends: &[&Backend]) -> String {
    let mut s = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\n\n[service.health]\n{HTTP_CHECK}\n");
    for b in backends {
        s.push_str(&format!("\n[[service.server]]\naddress = \"{}\"\n", b.addr));
    }
    s
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[test]
fn ctl_drives_the_api_over_the_socket_without_a_token_while_the_listener_keeps_its_own() {
    let (b1, b2) = (Backend::start("c1"), Backend::start("c2"));
    let dir = scratch("control-socket");
    let socket = dir.join("run/fulcrum/admin.sock");
    let token = dir.join("token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    let extra = format!("token_file = \"{}\"\nsocket = \"{}\"\nsocket_mode = \"0660\"", token.display(), socket.display());
    let f = Fulcrum::start_with_admin(&service(&[&b1, &b2]), &extra, Some("Bearer 0123456789abcdef0123456789abcdef".into()));
    f.wait_all_up();
    let sock = socket.to_str().unwrap();

    // Made in a new directory, with the configured mode.
    assert!(is_socket(&socket), "no socket at {sock}");
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o660);

    // The socket asks for no token; the TCP listener still does.
    let raw = Command::new("curl").args(["-sS", "--unix-socket", sock, "-o", "/dev/null", "-w", "%{http_code}", "http://localhost/api/stats"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&raw.stdout), "200");
    let (status, _) = curl(f.admin, "GET", "/api/stats", &[], None);
    assert_eq!(status, 401, "the TCP listener keeps its authentication");

    // A change: a message and exit 0, seen in the stats.
    let a1 = b1.addr.to_string();
    let (ok, out, err) = ctl(&["--socket", sock, "drain", "web", &a1]);
    assert!(ok, "drain: {out} {err}");
    assert!(out.contains("config applied"), "{out}");
    assert_eq!(f.server_stats(&a1)["state"], "drain");
    let (ok, out, _) = ctl(&["--socket", sock, "weight", "web", &b2.addr.to_string(), "5"]);
    assert!(ok, "{out}");
    assert_eq!(f.server_stats(&b2.addr.to_string())["weight"], 5);

    // Stats for a person, and as the API's JSON.
    let (ok, out, _) = ctl(&["--socket", sock, "stats"]);
    assert!(ok);
    assert!(out.lines().any(|l| l.contains(&a1) && l.contains("drain")), "{out}");
    let (ok, out, _) = ctl(&["--socket", sock, "--json", "stats", "web"]);
    assert!(ok);
    let json: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(json["services"][0]["name"], "web");

    // Explain, and the config file found through --config.
    let (ok, out, err) = ctl(&["--socket", sock, "explain", "web", "--client", "10.1.2.3"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("web for client 10.1.2.3: "), "{out}");
    let (ok, out, err) = ctl(&["--config", f.config_path.to_str().unwrap(), "enable", "web", &a1]);
    assert!(ok, "--config finds the socket: {out} {err}");
    assert_eq!(f.server_stats(&a1)["state"], "up");

    // A refusal: exit 1 and the API's reason.
    let (ok, _, err) = ctl(&["--socket", sock, "weight", "web", &a1, "999"]);
    assert!(!ok);
    assert!(err.contains("refused (422)") && err.contains("weight"), "{err}");
    let (ok, _, err) = ctl(&["--socket", sock, "disable", "web", "10.9.9.9:80"]);
    assert!(!ok);
    assert!(err.contains("10.9.9.9:80"), "{err}");

    // The listener with the token file, and without it.
    let url = format!("http://{}", f.admin);
    let (ok, out, err) = ctl(&["--url", &url, "--token-file", token.to_str().unwrap(), "disable", "web", &a1]);
    assert!(ok, "{out} {err}");
    assert_eq!(f.server_stats(&a1)["state"], "disabled");
    let (ok, _, err) = ctl(&["--url", &url, "stats"]);
    assert!(!ok);
    assert!(err.contains("401") && err.contains("authentication required"), "{err}");

    // Permissions are the authentication: a user outside owner and group is turned away.
    let (ok, _, err) = ctl_as(Some("nobody"), &["--socket", sock, "stats"]);
    assert!(!ok);
    assert!(err.contains("permission denied on the control socket"), "{err}");

    // A socket that is not there.
    let (ok, _, err) = ctl(&["--socket", dir.join("none.sock").to_str().unwrap(), "stats"]);
    assert!(!ok);
    assert!(err.contains("no control socket at"), "{err}");

    // Removed at exit.
    let mut f = f;
    f.signal(libc_sig::TERM);
    assert!(f.wait_exit(Duration::from_secs(20)).is_some(), "fulcrum exits");
    assert!(!socket.exists(), "the socket is removed at exit");
}

#[test]
fn a_socket_only_config_replaces_a_stale_socket_and_a_reload_moves_it() {
    let b = Backend::start("only");
    let dir = scratch("socket-only");
    let (first, second) = (dir.join("a.sock"), dir.join("moved/b.sock"));
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = |socket: &Path| format!("allow_root = true\n\n{}\n[admin]\nsocket = \"{}\"\n", service(&[&b]).replace("{LISTEN}", &listen.to_string()), socket.display());
    let path = dir.join("fulcrum.toml");
    std::fs::write(&path, config(&first)).unwrap();
    // What a process that died leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&first).unwrap());
    let log = dir.join("fulcrum.log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_fulcrum"));
    command.args(["run", path.to_str().unwrap()]);
    let mut proc = testkit::start_fulcrum(&mut command, &log, &[listen], Duration::from_secs(15)).unwrap_or_else(|e| panic!("{e:#}"));
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the socket serves", Duration::from_secs(10), || ctl(&["--socket", first.to_str().unwrap(), "stats"]).0);
    assert!(!text().contains("admin API listening"), "no TCP listener without listen: {}", text());
    let (ok, out, _) = ctl(&["--config", path.to_str().unwrap(), "stats", "web"]);
    assert!(ok && out.contains(&b.addr.to_string()), "{out}");

    // A reload that names another path binds it and closes the first.
    std::fs::write(&path, config(&second)).unwrap();
    let (ok, out, err) = ctl(&["--socket", first.to_str().unwrap(), "reload"]);
    assert!(ok, "{out} {err}");
    wait_until("the first socket is gone", Duration::from_secs(10), || !first.exists());
    assert!(is_socket(&second));
    let (ok, _, err) = ctl(&["--socket", second.to_str().unwrap(), "ready"]);
    assert!(ok, "{err}");

    // A path taken by a file that is not a socket refuses the reload, and the socket stays.
    let file = dir.join("plain");
    std::fs::write(&file, "not a socket").unwrap();
    std::fs::write(&path, config(&file)).unwrap();
    let (ok, _, err) = ctl(&["--socket", second.to_str().unwrap(), "reload"]);
    assert!(!ok);
    assert!(err.contains("exists and is not a socket") && err.contains("the running config stays"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a socket");
    assert!(ctl(&["--socket", second.to_str().unwrap(), "stats"]).0);

    let killed = Command::new("kill").args(["-TERM", &proc.pid().to_string()]).status().unwrap();
    assert!(killed.success());
    assert!(testkit::wait_for(Duration::from_secs(20), || proc.exited().is_some()), "fulcrum exits");
    assert!(!second.exists(), "removed at exit");
}
