//! Binary upgrades (`app::upgrade`): the binary is replaced three times while wrk and bounded
//! new-connection loops run through an HTTP, a TCP and a TLS service, and not one connect or
//! request fails; the servers' state and counters go on in the new process; a new binary that
//! fails its config leaves the old one serving.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;

/// Puts a fresh copy of the built binary at `exe`, as `install` does: a new file moved over the
/// old, which the running process keeps as long as it runs.
pub(crate) fn replace_binary(exe: &Path) {
    let fresh = exe.with_extension("new");
    std::fs::copy(env!("CARGO_BIN_EXE_fulcrum"), &fresh).unwrap();
    std::fs::rename(&fresh, exe).unwrap();
}

pub(crate) fn pid(f: &Fulcrum) -> u32 {
    f.stats()["process"]["pid"].as_u64().unwrap() as u32
}

/// New connections, one request each, until `stop`: how many, and the failures with why.
fn connect_loop(stop: Arc<AtomicBool>, mut once: impl FnMut() -> Result<(), String> + Send + 'static) -> std::thread::JoinHandle<(u32, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut done, mut failed) = (0, Vec::new());
        let deadline = Instant::now() + Duration::from_secs(90);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline && done < 100_000 {
            if let Err(e) = once() {
                failed.push(e);
            }
            done += 1;
        }
        (done, failed)
    })
}

fn tcp_request(addr: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.write_all(b"GET /name HTTP/1.0\r\n\r\n").map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    match parse_response(&raw) {
        Ok((200, _)) => Ok(()),
        other => Err(format!("answer: {other:?}")),
    }
}

fn tls_request(addr: SocketAddr, cert: &Path) -> Result<(), String> {
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--cacert"])
        .arg(cert)
        .args(["--resolve", &format!("up.test:{}:127.0.0.1", addr.port()), &format!("https://up.test:{}/name", addr.port())])
        .output()
        .map_err(|e| e.to_string())?;
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    if code == "200" { Ok(()) } else { Err(format!("curl {code}: {}", String::from_utf8_lossy(&out.stderr))) }
}

#[test]
fn three_upgrades_under_load_fail_no_connect_and_no_request_and_keep_the_stats() {
    let b1 = Backend::start("b1");
    let b2 = Backend::start("b2");
    let dir = scratch("upgrade");
    let exe = dir.join("fulcrum");
    replace_binary(&exe);
    let (cert, key) = openssl_self_signed(&dir, "up.test");
    let tcp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let tls: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let servers = format!("[[service.server]]\naddress = \"{}\"\n[[service.server]]\naddress = \"{}\"\n", b1.addr, b2.addr);
    let check = "[service.health]\nkind = \"http\"\npath = \"/name\"\ninterval = \"300ms\"\n";
    let config = format!(
        "shutdown_grace = \"5s\"\n\n[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n{check}{servers}\n\
         [[service]]\nname = \"tcp\"\nlisten = \"{tcp}\"\nmode = \"tcp\"\n{check}{servers}\n\
         [[service]]\nname = \"tls\"\nlisten = \"{tls}\"\nmode = \"http\"\n[service.tls]\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n{check}{servers}",
        cert.display(),
        key.display()
    );
    let f = Fulcrum::start_exe(&exe, &config);
    f.wait_all_up();
    let first = pid(&f);

    // Load on all three services for the whole of the three upgrades.
    let stop = Arc::new(AtomicBool::new(false));
    let tcp_loop = connect_loop(stop.clone(), move || tcp_request(tcp));
    let tls_loop = connect_loop(stop.clone(), {
        let cert = cert.clone();
        move || tls_request(tls, &cert)
    });
    let wrk =
        Command::new("wrk").args(["-t1", "-c16", "-d14s"]).arg(format!("http://{}/name", f.listen)).stdout(std::process::Stdio::piped()).spawn().expect("wrk must be installed");
    std::thread::sleep(Duration::from_secs(2));

    // Three new binaries: through the API, by SIGUSR2 and by `fulcrum upgrade`.
    let mut pids = vec![first];
    for round in 0..3 {
        replace_binary(&exe);
        let before = f.server_stats(&b1.addr.to_string());
        match round {
            0 => {
                let (status, answer) = f.api("POST", "/api/upgrade", None);
                assert_eq!(status, 200, "{answer}");
                assert!(answer["message"].as_str().unwrap().starts_with("upgraded: process "), "{answer}");
            }
            1 => assert!(Command::new("kill").args(["-USR2", &pids[round].to_string()]).status().unwrap().success()),
            _ => {
                // The operator's command, which finds the admin listener in the config file.
                let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("upgrade").arg("--config").arg(&f.config_path).output().unwrap();
                let said = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success() && said.contains("upgraded: process "), "{said}{}", String::from_utf8_lossy(&out.stderr));
            }
        }
        let old = pids[round];
        wait_until("the new process answers the admin API", Duration::from_secs(20), || pid(&f) != old);
        pids.push(pid(&f));
        // The old process drains and leaves.
        wait_until("the old process exits", Duration::from_secs(20), || {
            !Path::new(&format!("/proc/{old}")).exists() || std::fs::read_to_string(format!("/proc/{old}/stat")).is_ok_and(|s| s.contains(") Z "))
        });
        // The servers' health and counters went on in the new one.
        let after = f.server_stats(&b1.addr.to_string());
        assert_eq!(after["state"], "up", "{after}");
        assert!(after["total"].as_u64() >= before["total"].as_u64() && after["lb_total"].as_u64() >= before["lb_total"].as_u64(), "counters carried: {before} then {after}");
        std::thread::sleep(Duration::from_millis(1500));
    }
    let out = wrk.wait_with_output().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (tcp_done, tcp_failed) = tcp_loop.join().unwrap();
    let (tls_done, tls_failed) = tls_loop.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let requests: u64 = text.lines().find_map(|l| l.trim().split_once(" requests in").and_then(|(n, _)| n.trim().parse().ok())).unwrap_or_else(|| panic!("wrk said: {text}"));
    println!("pids {pids:?}; wrk {requests} requests; {tcp_done} TCP and {tls_done} TLS connections");
    assert!(!text.contains("Socket errors") && !text.contains("Non-2xx"), "wrk saw failures across the upgrades:\n{text}");
    assert!(requests > 1000, "{text}");
    assert!(tcp_failed.is_empty(), "{} of {tcp_done} TCP connections failed: {:?}", tcp_failed.len(), &tcp_failed[..tcp_failed.len().min(5)]);
    assert!(tls_failed.is_empty(), "{} of {tls_done} TLS connections failed: {:?}", tls_failed.len(), &tls_failed[..tls_failed.len().min(5)]);
    assert!(tcp_done > 50 && tls_done > 20, "{tcp_done} TCP, {tls_done} TLS");
    let mut distinct = pids.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "three new processes: {pids:?}");
    let log = f.log();
    assert!(log.matches("upgrade: took over the state of 6 servers").count() == 3, "{log}");

    // A new binary whose config fails: refused with the reason, the running one serves on.
    let good = std::fs::read_to_string(&f.config_path).unwrap();
    std::fs::write(&f.config_path, good.replace("mode = \"tcp\"", "mode = \"tcpp\"")).unwrap();
    let (status, answer) = f.api("POST", "/api/upgrade", None);
    assert_eq!(status, 422, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(error.contains("the new binary did not take over; this process serves on") && error.contains("invalid config") && error.contains("tcpp"), "{error}");
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["upgrade", "--url", &format!("http://{}", f.admin)]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("refused (422)"), "{out:?}");
    assert_eq!(pid(&f), *pids.last().unwrap());
    assert_eq!(http_get(f.listen, "/name").0, 200);
    assert!(tcp_request(tcp).is_ok());

    // The audit trail has them all.
    let (_, trail) = f.api("GET", "/api/audit", None);
    let upgrades = trail["records"].as_array().unwrap().iter().filter(|r| r["what"] == "upgrade").count();
    assert!(upgrades >= 1, "{trail}");
    // The last process is no child of this test's: end it here.
    Command::new("kill").args(["-KILL", &pids.last().unwrap().to_string()]).status().unwrap();
}
