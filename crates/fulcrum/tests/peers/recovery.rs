//! How a server comes back through real traffic: the slow-start ramp of a server that restarts,
//! and flap damping keeping out one that restarts again and again, with the timeline of both.

use std::time::{Duration, Instant};

use crate::support::*;

fn state(f: &Fulcrum, address: &str) -> String {
    f.server_stats(address)["state"].as_str().unwrap_or_default().to_string()
}

/// Stops `b`, starts it again on its address once Fulcrum has seen it down, and waits until
/// Fulcrum has seen it pass a check (up, or suppressed).
fn restart(f: &Fulcrum, b: Backend) -> Backend {
    let (addr, address) = (b.addr, b.addr.to_string());
    drop(b);
    wait_until("b down", Duration::from_secs(10), || state(f, &address) == "down");
    let b = Backend::start_at("b", addr, &[]);
    wait_until("b checked again", Duration::from_secs(10), || state(f, &address) != "down");
    b
}

#[test]
fn a_restarted_server_ramps_up_and_one_that_keeps_restarting_is_suppressed_for_a_while() {
    let a = Backend::start("a");
    let mut b = Backend::start("b");
    let address = b.addr.to_string();
    let f = Fulcrum::start(&service_over(
        "round-robin",
        "slow_start = \"4s\"\n[service.damping]\nhalf_life = \"6s\"\n",
        "interval = \"100ms\"\nrise = 1\nfall = 1\n",
        &[(a.addr, ""), (b.addr, "")],
    ));
    f.wait_all_up();
    assert_eq!(tally(f.listen, 20).get("b"), Some(&10), "whole weights at start: no ramp");

    // b restarts: its share climbs from nearly nothing to half over the 4 s ramp.
    b = restart(&f, b);
    let start = Instant::now();
    let mut timeline = Vec::new();
    while start.elapsed() < Duration::from_millis(5500) {
        let ramp = f.server_stats(&address)["ramp_percent"].as_u64();
        let share = tally(f.listen, 40).get("b").copied().unwrap_or(0) as f64 / 40.0;
        timeline.push((start.elapsed().as_millis(), ramp, share));
        std::thread::sleep(Duration::from_millis(400));
    }
    eprintln!("slow start (ms since up, ramp %, b's share of 40 requests): {timeline:?}");
    assert!(timeline[0].2 <= 0.2, "b starts small: {timeline:?}");
    assert!(timeline.iter().any(|t| t.1.is_some_and(|r| (30..=70).contains(&r))), "the stats show the ramp midway: {timeline:?}");
    let last = timeline.last().unwrap();
    assert!(last.1.is_none() && (0.45..=0.55).contains(&last.2), "half once the ramp is over: {timeline:?}");
    let mid = timeline.iter().find(|t| t.0 >= 1500).unwrap();
    assert!(timeline[0].2 < mid.2 && mid.2 < last.2, "the share climbs: {timeline:?}");

    // Two more restarts soon after: the third flap's penalty passes 2000 and b stays out though
    // its checks pass, until the penalty halves below 750.
    b = restart(&f, b);
    b = restart(&f, b);
    wait_until("b suppressed", Duration::from_secs(10), || state(&f, &address) == "suppressed");
    let suppressed_at = Instant::now();
    let s = f.server_stats(&address);
    let why = s["suppressed"].as_str().unwrap_or_default().to_string();
    assert!(why.starts_with("flapping (penalty ") && why.contains("back in ~"), "{s}");
    assert!(s["check_up"] == true && s["last_check"].as_str().unwrap().starts_with("pass"), "its checks pass: {s}");
    assert!(f.log().contains("suppressed: flapping (penalty"), "{}", f.log());
    assert_eq!(tally(f.listen, 10).get("a"), Some(&10), "a suppressed server takes nothing");
    let mut flaps = Vec::new();
    wait_until("b back", Duration::from_secs(30), || {
        let s = f.server_stats(&address);
        flaps.push((suppressed_at.elapsed().as_millis(), s["flap_penalty"].as_u64().unwrap_or(0)));
        std::thread::sleep(Duration::from_millis(500));
        s["state"] == "up"
    });
    let back = suppressed_at.elapsed();
    eprintln!("flap damping: {why}; (ms since suppressed, penalty): {flaps:?}; back after {back:?}");
    assert!(flaps.last().unwrap().1 < 750, "back below reuse: {flaps:?}");
    assert!(back >= Duration::from_secs(5), "kept out for a while: {back:?}");
    assert!(f.log().contains("no longer suppressed"), "{}", f.log());
    drop(b);
}
