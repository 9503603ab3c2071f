//! Health checks and redispatch against real nginx servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::*;

#[test]
fn a_server_whose_page_lacks_target_receives_zero_requests() {
    let mut servers = four_servers();
    servers[3] = Nginx::start("s4", "<html>maintenance</html>");
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let f = Fulcrum::start(&service("round-robin", "", HTTP_CHECK, &pool));
    let counts = tally(f.listen, 300);
    assert!(!counts.contains_key("s4"), "{counts:?}");
    assert_eq!(counts.values().sum::<usize>(), 300);
    let s4 = f.server_stats(&servers[3].addr.to_string());
    assert_eq!(s4["state"], "down", "{s4}");
    assert_eq!(s4["total"], 0, "{s4}");
    assert!(s4["last_check"].as_str().unwrap().contains("TARGET"), "{s4}");
    assert!(f.log().contains("server down"), "state change is logged");
}

#[test]
fn killing_a_server_under_load_fails_no_client_and_it_rejoins_after_rise() {
    let mut servers = four_servers();
    let pool: Vec<_> = servers.iter().map(|s| (s, "")).collect();
    let health = HTTP_CHECK.replace("fall = 2", "fall = 3");
    let f = Fulcrum::start(&service("round-robin", "retries = 3\nfailure_limit = 2", &health, &pool));
    let stop = Arc::new(AtomicBool::new(false));
    // Requests begun after the kill must all succeed (their connects are redispatched); a request
    // already in flight on the killed server when it dies cannot be saved by an L4 balancer, so
    // those are counted apart and bounded by the number of clients.
    // The kill takes a moment: from `killing` (it starts) to `killed_at` (the process is reaped).
    // A request begun before the kill ended may have been on the dying server.
    let killing = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let killed_at = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let failures = Arc::new(AtomicUsize::new(0));
    let in_flight_losses = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, failures, done, addr) = (stop.clone(), failures.clone(), done.clone(), f.listen);
            let (killing, killed_at, in_flight_losses) = (killing.clone(), killed_at.clone(), in_flight_losses.clone());
            std::thread::spawn(move || {
                // Bounded: at most 3,000 requests or until told to stop.
                for _ in 0..3000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let began = std::time::Instant::now();
                    match http_get_from(None, addr, "/name") {
                        Ok((200, _)) => done.fetch_add(1, Ordering::Relaxed),
                        _ => match (*killing.lock().unwrap(), *killed_at.lock().unwrap()) {
                            (_, Some(k)) if began >= k => failures.fetch_add(1, Ordering::Relaxed),
                            (Some(_), _) => in_flight_losses.fetch_add(1, Ordering::Relaxed),
                            _ => failures.fetch_add(1, Ordering::Relaxed),
                        },
                    };
                }
            })
        })
        .collect();
    wait_until("load running", Duration::from_secs(10), || done.load(Ordering::Relaxed) > 200);
    *killing.lock().unwrap() = Some(std::time::Instant::now());
    servers[1].stop();
    // Reaped: from here on the port refuses, and every connect to it is redispatched.
    *killed_at.lock().unwrap() = Some(std::time::Instant::now());
    let before = done.load(Ordering::Relaxed);
    wait_until("more load after the kill", Duration::from_secs(20), || done.load(Ordering::Relaxed) > before + 500);
    let s2 = servers[1].addr.to_string();
    wait_until("s2 marked down", Duration::from_secs(10), || f.server_stats(&s2)["state"] == "down");
    servers[1].restart();
    wait_until("s2 back up after rise checks", Duration::from_secs(10), || f.server_stats(&s2)["state"] == "up");
    let total_before = f.server_stats(&s2)["total"].as_u64().unwrap();
    wait_until("s2 takes traffic again", Duration::from_secs(10), || f.server_stats(&s2)["total"].as_u64().unwrap() > total_before + 10);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(failures.load(Ordering::Relaxed), 0, "client connections begun after the kill failed");
    assert!(in_flight_losses.load(Ordering::Relaxed) <= 4, "more losses than connections in flight");
    let log = f.log();
    assert!(log.contains("server down"), "{log}");
    assert!(log.contains("server up"), "{log}");
}

#[test]
fn with_no_server_up_backup_servers_take_the_traffic() {
    let mut servers = four_servers();
    let pool = [(&servers[0], ""), (&servers[1], "backup = true")];
    let f = Fulcrum::start(&service("round-robin", "", HTTP_CHECK, &pool));
    assert_eq!(tally(f.listen, 20).get("s1"), Some(&20));
    servers[0].stop();
    let s1 = servers[0].addr.to_string();
    wait_until("s1 down", Duration::from_secs(10), || f.server_stats(&s1)["state"] == "down");
    assert_eq!(tally(f.listen, 20).get("s2"), Some(&20));
}

#[test]
fn with_no_server_at_all_the_client_is_closed_at_once_and_the_reason_logged() {
    let mut servers = four_servers();
    let pool = [(&servers[0], "")];
    let f = Fulcrum::start(&service("round-robin", "", HTTP_CHECK, &pool));
    servers[0].stop();
    let s1 = servers[0].addr.to_string();
    wait_until("s1 down", Duration::from_secs(10), || f.server_stats(&s1)["state"] == "down");
    let refused = f.stats()["services"][0]["refused"].as_u64().unwrap();
    let started = std::time::Instant::now();
    let r = http_get_from(None, f.listen, "/name");
    assert!(r.is_err(), "no response expected: {r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    f.wait_log("no server is up");
    assert_eq!(f.stats()["services"][0]["refused"].as_u64().unwrap(), refused + 1);
    assert!(f.log().contains("the next health check is due within 200ms, and 2 passing in a row bring a server up"), "{}", f.log());

    // A crowd of clients in the same second is one line, with the count held back.
    std::thread::sleep(Duration::from_millis(1100));
    let lines = || f.log().matches("closing client").count();
    let before = lines();
    for _ in 0..30 {
        let _ = http_get_from(None, f.listen, "/name");
    }
    assert_eq!(f.stats()["services"][0]["refused"].as_u64().unwrap(), refused + 31);
    assert!(lines() - before <= 2, "{}", f.log());
    wait_until("the count of the held lines", Duration::from_secs(5), || {
        let _ = http_get_from(None, f.listen, "/name");
        f.log().lines().any(|l| l.contains("closing client") && !l.contains("held=0"))
    });
}
