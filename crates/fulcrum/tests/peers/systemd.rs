//! Fulcrum under systemd's `Type=notify`: the messages it sends to `NOTIFY_SOCKET` at start, around
//! a reload and at the drain, read from a datagram socket this test binds where systemd would.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use crate::support::*;

/// The next message, within 20 s.
fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a message from fulcrum within the timeout");
    String::from_utf8_lossy(&buf[..n]).to_string()
}

#[test]
fn fulcrum_tells_systemd_it_is_ready_reloading_and_stopping() {
    let b = Backend::start("b");
    let dir = scratch("systemd");
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let config = service_over("round-robin", "", "interval = \"100ms\"", &[(b.addr, "")]);
    let mut f = Fulcrum::start_under(&["env", &format!("NOTIFY_SOCKET={}", path.display())], &config);

    let ready = next(&socket);
    assert!(ready.contains("READY=1\n") && ready.contains("STATUS=serving 1 service\n"), "{ready:?}");
    assert!(http_get(f.listen, "/name").0 == 200, "ready means serving");

    f.reload(&config.replace("100ms", "200ms"));
    let reloading = next(&socket);
    assert!(reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{reloading:?}");
    let again = next(&socket);
    assert!(again.contains("READY=1\n") && again.contains("STATUS=config applied"), "{again:?}");

    f.reload("this is not toml");
    assert!(next(&socket).starts_with("RELOADING=1"));
    let refused = next(&socket);
    assert!(refused.contains("READY=1\n") && refused.contains("STATUS=reload refused, the running config stays"), "{refused:?}");

    f.signal(15);
    let stopping = next(&socket);
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping:?}");
    assert!(f.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()));
    assert!(!f.log().contains("\u{1b}["), "no colour codes when standard error is not a terminal");
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let b = Backend::start("b");
    let dir = scratch("json-log");
    let config = dir.join("c.toml");
    let listen = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        &config,
        format!("allow_root = true\n\n[[service]]\nname = \"web\"\nlisten = \"{listen}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n", b.addr),
    )
    .unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_fulcrum"))
        .args(["--log-format", "json", "run"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the listener", Duration::from_secs(10), || std::net::TcpStream::connect(&listen).is_ok());
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect();
    assert!(lines.iter().any(|l| l["message"] == "listening" && l["level"] == "INFO" && l["addr"] == listen.as_str()), "{text}");
    assert!(lines.iter().any(|l| l["message"] == "stopped"), "{text}");
}
