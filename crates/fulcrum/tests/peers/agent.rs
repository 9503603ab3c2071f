//! `[service.health.agent]` against real servers: two nginx servers on their own loopback
//! addresses, each with an agent beside it (a TCP server of the test's own, on the same port of
//! each address) whose answer the test changes. The agent's weight shows in real traffic, and its
//! `drain`, `maint`, `down` and `up` in the stats, explain, the log and the traffic; an operator's
//! disable outranks the agent's `up`.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;

/// An agent: answers every connection with its current line, then closes.
struct Agent {
    answer: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
}

impl Agent {
    fn start(addr: SocketAddr, first: &str) -> Agent {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("agent on {addr}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let answer = Arc::new(Mutex::new(first.to_string()));
        let stop = Arc::new(AtomicBool::new(false));
        let (said, stopped) = (answer.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        let line = format!("{}\n", said.lock().unwrap());
                        let _ = c.write_all(line.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Agent { answer, stop }
    }

    fn say(&self, line: &str) {
        *self.answer.lock().unwrap() = line.to_string();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One nginx answering `/name` with `s1` on 127.0.0.11 and `s2` on 127.0.0.12, same port.
fn two_servers() -> (std::process::Child, [SocketAddr; 2]) {
    let dir = scratch("nginx-agent");
    let port = free_port();
    let addrs: [SocketAddr; 2] = [format!("127.0.0.11:{port}").parse().unwrap(), format!("127.0.0.12:{port}").parse().unwrap()];
    let server = |name: &str, addr: SocketAddr| {
        format!("    server {{\n        listen {addr};\n        location = /name {{ default_type text/plain; return 200 \"{name}\\n\"; }}\n    }}\n")
    };
    let servers = server("s1", addrs[0]) + &server("s2", addrs[1]);
    let nginx = run_nginx(&dir, &nginx_conf(&dir, &servers), addrs[0], "nginx s1 and s2");
    wait_until("s2", Duration::from_secs(5), || std::net::TcpStream::connect(addrs[1]).is_ok());
    (nginx, addrs)
}

#[test]
fn the_agent_sets_weight_drain_maint_down_and_up_but_not_over_the_operator() {
    let (mut nginx, [s1, s2]) = two_servers();
    let agent_port = free_port();
    let a1 = Agent::start(SocketAddr::new(s1.ip(), agent_port), "up 100%");
    let _a2 = Agent::start(SocketAddr::new(s2.ip(), agent_port), "up");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"tcp\"\ninterval = \"100ms\"\n[service.health.agent]\nport = {agent_port}\ninterval = \"100ms\"\n[[service.server]]\naddress = \"{s1}\"\nweight = 10\n[[service.server]]\naddress = \"{s2}\"\nweight = 10\n"
    ));
    f.wait_all_up();
    let s1_stats = || f.server_stats(&s1.to_string());
    wait_until("the agent's first answer", Duration::from_secs(3), || s1_stats()["agent"]["last"] == "up 100%");
    let even = tally(f.listen, 40);
    assert_eq!((even["s1"], even["s2"]), (20, 20), "{even:?}");

    // 25% of 10 is 2: s1 takes 2 of every 12 requests.
    a1.say("25%");
    wait_until("weight from the agent", Duration::from_secs(2), || s1_stats()["effective_weight"] == 2.0);
    let s = s1_stats();
    assert_eq!((s["weight"].as_u64(), s["weight_by"].as_str(), s["agent"]["weight_percent"].as_u64()), (Some(10), Some("agent"), Some(25)), "{s}");
    let shifted = tally(f.listen, 120);
    assert_eq!((shifted["s1"], shifted["s2"]), (20, 100), "{shifted:?}");
    f.wait_log("agent says \"25%\": server up, weight 25% (2 of 10)");

    for (word, state, skipped) in
        [("drain", "drain", "draining: its agent said \"drain\""), ("maint", "maint", "maint: its agent said \"maint\""), ("down", "down", "down: its agent said \"down\"")]
    {
        a1.say(word);
        wait_until(word, Duration::from_secs(2), || s1_stats()["state"] == state);
        let s = s1_stats();
        assert_eq!((s["state_by"].as_str(), s["check_up"].as_bool(), s["agent"]["state"].as_str()), (Some("agent"), Some(true), Some(state)), "{word}: {s}");
        let seen = tally(f.listen, 20);
        assert_eq!(seen.get("s1"), None, "{word}: s1 takes nothing: {seen:?}");
        let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.1", None);
        let c = e["candidates"].as_array().unwrap().iter().find(|c| c["address"] == s1.to_string()).unwrap().clone();
        assert_eq!((c["skipped"].as_str(), c["state_by"].as_str()), (Some(skipped), Some("agent")), "{e}");
        f.wait_log(&format!("agent says \"{word}\": server {state}"));
    }

    // An operator's disable outranks the agent: its `up` does not bring s1 back.
    let (code, _) = f.api("POST", &format!("/api/services/web/servers/{s1}/state"), Some(serde_json::json!({ "state": "disable" })));
    assert_eq!(code, 200);
    a1.say("up 100%");
    wait_until("the agent's up heard", Duration::from_secs(2), || s1_stats()["agent"]["state"] == "up");
    let s = s1_stats();
    assert_eq!((s["state"].as_str(), s["state_by"].as_str()), (Some("disabled"), Some("operator")), "{s}");
    assert_eq!(tally(f.listen, 10).get("s1"), None);
    let (code, _) = f.api("POST", &format!("/api/services/web/servers/{s1}/state"), Some(serde_json::json!({ "state": "enable" })));
    assert_eq!(code, 200);
    wait_until("s1 up again", Duration::from_secs(2), || s1_stats()["state"] == "up");
    let s = s1_stats();
    assert!(s.get("state_by").is_none() && s.get("weight_by").is_none(), "{s}");
    let back = tally(f.listen, 40);
    assert_eq!((back["s1"], back["s2"]), (20, 20), "{back:?}");

    // An answer it cannot read, or an agent gone, leaves s1 as its agent last said.
    a1.say("sideways");
    wait_until("the bad answer", Duration::from_secs(2), || s1_stats()["agent"]["last"].as_str().unwrap_or_default().starts_with("fail: answer \"sideways\""));
    assert_eq!(s1_stats()["state"], "up");
    f.wait_log("agent answer \"sideways\" not understood");
    drop(a1);
    wait_until("the agent gone", Duration::from_secs(3), || s1_stats()["agent"]["last"].as_str().unwrap_or_default().contains("connect failed"));
    assert_eq!(s1_stats()["state"], "up");
    let _ = nginx.kill();
    let _ = nginx.wait();
}
