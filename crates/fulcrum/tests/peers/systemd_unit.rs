//! The shipped unit (`contrib/systemd/`) run for real: `systemd-analyze verify` accepts it, and
//! its sandbox, reproduced here as systemd would set it up (systemd does not run as PID 1 on the
//! test machines), lets Fulcrum do what an operator asks of it: serve TLS with a key under
//! `/etc/ssl/private`, Save the dashboard's edits beside its config, reload, write its audit log,
//! bind a port below 1024, and tell systemd it is alive.
//!
//! The reproduction: the user and groups by `systemd-sysusers` from `fulcrum.sysusers`, the
//! config directory as `fulcrum.tmpfiles` makes it, the `*Directory=` ones owned by the user;
//! then, in a mount namespace of its own, the whole filesystem read-only but the unit's
//! writable paths (`ProtectSystem=strict`, `ReadWritePaths=`), a private `/tmp`, and the process
//! run as `User=`/`Group=` with their supplementary groups, `NoNewPrivileges=` and the unit's
//! ambient capability (`setpriv`). Every absolute path of the unit is taken under a scratch root.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

const CONTRIB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/systemd");

/// The `[Service]` directives of a unit, each key with its values in order.
fn service_directives(unit: &str) -> BTreeMap<String, Vec<String>> {
    let mut section = "";
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in unit.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]"
            && let Some((k, v)) = line.split_once('=')
        {
            found.entry(k.trim().to_string()).or_default().push(v.trim().to_string());
        }
    }
    found
}

fn run(what: &str, command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn install_dir(path: &Path, mode: &str, user: &str, group: &str) {
    run("install -d", Command::new("install").args(["-d", "-m", mode, "-o", user, "-g", group]).arg(path));
}

/// The next notify message that contains `wanted`, within 20 s.
fn wait_message(socket: &UnixDatagram, wanted: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            if message.contains(wanted) {
                return message;
            }
        }
    }
    panic!("no {wanted:?} from fulcrum within 20 s");
}

#[test]
fn the_shipped_unit_passes_verify_and_its_sandbox_lets_fulcrum_save_reload_and_read_its_key() {
    let unit_text = std::fs::read_to_string(format!("{CONTRIB}/fulcrum.service")).unwrap();
    let unit = service_directives(&unit_text);
    let one = |k: &str| unit.get(k).and_then(|v| v.last()).unwrap_or_else(|| panic!("the unit has no {k}=")).clone();
    let bin = env!("CARGO_BIN_EXE_fulcrum");
    let root = scratch("unit");

    // systemd's own check of the unit, with the binary where this build has it: no warning.
    let verified = root.join("fulcrum.service");
    std::fs::write(&verified, unit_text.replace("/usr/local/bin/fulcrum", bin)).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&verified).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "systemd-analyze verify: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(one("Type"), "notify");
    assert!(!unit.contains_key("DynamicUser"), "a dynamic user cannot own the config directory Save writes to");

    // The user, as the install steps make it.
    run("systemd-sysusers", Command::new("systemd-sysusers").arg(format!("{CONTRIB}/fulcrum.sysusers")));
    let (user, group) = (one("User"), one("Group"));
    let groups = run("id", Command::new("id").args(["-nG", &user]));
    assert!(groups.split_whitespace().any(|g| g == "ssl-cert"), "{user} reads keys through ssl-cert: {groups}");

    // Directories: the config's from tmpfiles.d, the *Directory= ones owned by the user.
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for line in std::fs::read_to_string(format!("{CONTRIB}/fulcrum.tmpfiles")).unwrap().lines().filter(|l| l.starts_with("d ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        install_dir(&at(f[1]), f[2], f[3], f[4]);
    }
    let mut writable: Vec<PathBuf> = unit.get("ReadWritePaths").into_iter().flatten().flat_map(|v| v.split_whitespace()).map(at).collect();
    for (key, base) in [("LogsDirectory", "/var/log"), ("StateDirectory", "/var/lib"), ("RuntimeDirectory", "/run")] {
        for name in unit.get(key).into_iter().flatten() {
            let dir = at(&format!("{base}/{name}"));
            install_dir(&dir, "0755", &user, &group);
            writable.push(dir);
        }
    }
    let config_dir = at("/etc/fulcrum");
    assert!(writable.contains(&config_dir), "Save writes beside the config file: {writable:?}");

    // A certificate whose key is root's, readable by ssl-cert only, as Debian keeps them.
    let private = at("/etc/ssl/private");
    install_dir(&private, "0710", "root", "ssl-cert");
    let (cert, key) = openssl_self_signed(&private, "site.test");
    run("chown", Command::new("chown").arg("root:ssl-cert").arg(&key));
    run("chmod", Command::new("chmod").arg("0640").arg(&key));

    // The config as an operator installs it: the user's, in its directory.
    let b1 = Backend::start("b1");
    let b2 = Backend::start("b2");
    let (listen, admin) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    // A port below 1024, bound through AmbientCapabilities=CAP_NET_BIND_SERVICE.
    let low = (900..1000).map(|p| format!("127.0.0.1:{p}")).find(|a| std::net::TcpListener::bind(a).is_ok()).expect("a free port below 1024");
    let audit = at("/var/log/fulcrum/audit.log");
    let config_path = config_dir.join("fulcrum.toml");
    let config = format!(
        "[audit]\nfile = \"{}\"\n\n[admin]\nlisten = \"{admin}\"\n\n[[service]]\nname = \"site\"\nlisten = \"{listen}\"\nmode = \"http\"\n\n[service.tls]\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n\n[service.health]\nkind = \"none\"\n\n[[service.server]]\naddress = \"{}\"\n\n[[service.server]]\naddress = \"{}\"\n\n[[service]]\nname = \"low\"\nlisten = \"{low}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n",
        audit.display(),
        cert.display(),
        key.display(),
        b1.addr,
        b2.addr,
        b1.addr
    );
    let staged = root.join("staged.toml");
    std::fs::write(&staged, &config).unwrap();
    run("install config", Command::new("install").args(["-m", "0640", "-o", &user, "-g", &group]).arg(&staged).arg(&config_path));

    // Where systemd would listen for the notify messages; the user must be able to send to it.
    let notify_dir = root.join("notify");
    std::fs::create_dir(&notify_dir).unwrap();
    let notify_path = notify_dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    run("chmod", Command::new("chmod").arg("0666").arg(&notify_path));

    // The sandbox, then ExecStart= with the paths under the root.
    let exec_start = one("ExecStart").replace("/usr/local/bin/fulcrum", bin).replace("/etc/fulcrum/fulcrum.toml", config_path.to_str().unwrap());
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("PrivateTmp"), "yes");
    assert_eq!(one("NoNewPrivileges"), "yes");
    let caps: Vec<String> = one("AmbientCapabilities").split_whitespace().map(|c| c.trim_start_matches("CAP_").to_lowercase()).collect();
    let caps = caps.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(",");
    let binds: String = writable.iter().map(|d| format!("mount --bind '{0}' '{0}' && ", d.display())).collect();
    let script = format!(
        "{binds}mount -o remount,bind,ro / && mount -t tmpfs -o mode=1777 tmpfs /tmp && exec setpriv --reuid={user} --regid={group} --init-groups --no-new-privs --inh-caps={caps} --ambient-caps={caps} --bounding-set=-all,{caps} -- env NOTIFY_SOCKET={} WATCHDOG_USEC=400000 {exec_start}",
        notify_path.display()
    );
    let log = root.join("fulcrum.log");
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let mut proc = testkit::start_fulcrum(&mut command, &log, &[listen.parse().unwrap(), admin.parse().unwrap(), low.parse().unwrap()], Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let pid = proc.pid();
    let api = |method: &str, path: &str, body: Option<serde_json::Value>| {
        let body = body.map(|b| b.to_string());
        curl(admin.parse().unwrap(), method, path, &["Content-Type: application/json".to_string()], body.as_deref())
    };

    // Ready, and alive at half the watchdog interval.
    assert!(wait_message(&notify, "READY=1").contains("STATUS=serving 2 services"));
    let started = Instant::now();
    wait_message(&notify, "WATCHDOG=1");
    wait_message(&notify, "WATCHDOG=1");
    assert!(started.elapsed() < Duration::from_secs(3), "two WATCHDOG=1 within 3 s of a 400 ms WatchdogSec");

    // Who it runs as: the unit's user, with only the ambient capability.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = run("id -u", Command::new("id").args(["-u", &user])).trim().to_string();
    assert!(status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().skip(1).all(|u| u == uid)), "{status}");
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(|v| u64::from_str_radix(v.trim(), 16).unwrap()).unwrap();
    assert_eq!(cap_eff, 1 << 10, "CAP_NET_BIND_SERVICE alone: {status}");

    // TLS with the key under /etc/ssl/private, and the port below 1024.
    let served = run(
        "curl https",
        Command::new("curl").args(["-sS", "--max-time", "10", "--cacert"]).arg(&cert).args([
            "--resolve",
            &format!("site.test:{}:127.0.0.1", listen.rsplit(':').next().unwrap()),
            &format!("https://site.test:{}/name", listen.rsplit(':').next().unwrap()),
        ]),
    );
    assert!(served == "b1\n" || served == "b2\n", "{served}");
    assert_eq!(http_get(low.parse().unwrap(), "/name").0, 200);

    // Save from the API: the file and its .bak are written beside it, by the user.
    let server = b2.addr.to_string();
    let (status, body) = api("POST", &format!("/api/services/site/servers/{server}/weight"), Some(json!({ "weight": 4 })));
    assert_eq!(status, 200, "{body}");
    let (status, body) = api("POST", "/api/save", None);
    assert_eq!(status, 200, "Save under the unit's sandbox: {body}");
    let saved = std::fs::read_to_string(&config_path).unwrap();
    assert!(saved.contains("weight = 4"), "{saved}");
    assert!(config_path.with_extension("toml.bak").exists());
    assert_eq!(std::fs::metadata(&config_path).unwrap().uid().to_string(), uid, "the saved file is the user's");

    // A reload (ExecReload= sends SIGHUP) reads the saved file: READY again, the edit kept.
    let edited = saved.replace("weight = 4", "weight = 6");
    std::fs::write(&config_path, edited).unwrap();
    run("kill -HUP", Command::new("kill").args(["-HUP", &pid.to_string()]));
    assert!(wait_message(&notify, "READY=1").contains("STATUS=config applied"));
    let (_, stats) = api("GET", "/api/stats", None);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(server_in(&stats, &server)["weight"], 6, "{stats}");

    // The audit log, in the logs directory: the edit, the save and the reload.
    let trail = std::fs::read_to_string(&audit).unwrap();
    for what in ["\"what\":\"weight 4 for server", "\"what\":\"save to", "\"source\":\"signal\""] {
        assert!(trail.contains(what), "{what} in {trail}");
    }

    // Nothing else is writable: the sandbox is read-only where the unit does not open it.
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(!log_text.contains("Permission denied") && !log_text.contains("Read-only"), "{log_text}");
    run("kill -TERM", Command::new("kill").args(["-TERM", &pid.to_string()]));
    assert!(wait_message(&notify, "STOPPING=1").contains("draining"));
    let mut exited = None;
    testkit::wait_for(Duration::from_secs(20), || {
        exited = proc.exited();
        exited.is_some()
    });
    assert!(exited.is_some_and(|s| s.success()), "{exited:?}: {}", std::fs::read_to_string(&log).unwrap());
}
