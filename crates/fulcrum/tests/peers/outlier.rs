//! Health read from real traffic, with nginx servers made to answer 503 on demand (`/flaky`):
//! outlier ejection and return, `mode = "shift"` moving traffic away in steps and back, retries
//! on a 503 within a retry budget, and the panic threshold.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;

fn three() -> Vec<Nginx> {
    ["s1", "s2", "s3"].iter().map(|n| Nginx::start(n, "TARGET")).collect()
}

fn http_over(servers: &[Nginx], extra: &str) -> String {
    let mut text = format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n{extra}\n");
    for s in servers {
        text += &format!("[[service.server]]\naddress = \"{}\"\n", s.addr);
    }
    text
}

/// `n` requests to `/flaky`: answers by status and server name.
fn flaky(addr: std::net::SocketAddr, n: usize) -> BTreeMap<(u16, String), usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        let (status, body) = http_get(addr, "/flaky");
        let name = body.split_whitespace().next().unwrap_or("").to_string();
        *seen.entry((status, name)).or_insert(0) += 1;
    }
    seen
}

#[test]
fn a_server_answering_503_is_ejected_says_why_and_comes_back() {
    let servers = three();
    let f = Fulcrum::start(&http_over(
        &servers,
        "[service.health]\nkind = \"none\"\n[service.outlier]\nconsecutive_5xx = 3\nbase_ejection_time = \"2s\"\nmax_ejection_percent = 50\nsuccess_rate_stdev = 0.0\n",
    ));
    servers[1].fail(true);
    // Round robin: s2 gets every third request, and its third 503 ejects it.
    let first = flaky(f.listen, 9);
    assert_eq!(first.get(&(503, "s2".into())), Some(&3), "{first:?}");
    let after = flaky(f.listen, 20);
    assert!(after.keys().all(|(status, name)| *status == 200 && name != "s2"), "s2 is out: {after:?}");
    let s2 = f.server_stats(&servers[1].addr.to_string());
    assert_eq!(s2["state"], "ejected", "{s2}");
    let why = s2["outlier"].as_str().unwrap();
    assert!(why.starts_with("ejected: 3 consecutive 5xx answers (the last 503), back in"), "{why}");
    let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.1", None);
    let skipped = e["candidates"].as_array().unwrap().iter().find(|c| c["address"] == servers[1].addr.to_string()).unwrap()["skipped"].clone();
    assert!(skipped.as_str().unwrap().starts_with("ejected: 3 consecutive 5xx"), "{e}");
    f.wait_log("server ejected: 3 consecutive 5xx answers (the last 503), back in 2s");
    // Healed, it returns by itself once its ejection time is over.
    servers[1].fail(false);
    wait_until("s2 back from ejection", Duration::from_secs(5), || f.server_stats(&servers[1].addr.to_string())["state"] == "up");
    let back = flaky(f.listen, 9);
    assert_eq!(back.get(&(200, "s2".into())), Some(&3), "{back:?}");
}

#[test]
fn a_pool_never_ejects_more_than_its_share() {
    let servers = three();
    let f =
        Fulcrum::start(&http_over(&servers, "[service.health]\nkind = \"none\"\n[service.outlier]\nconsecutive_5xx = 2\nmax_ejection_percent = 34\nsuccess_rate_stdev = 0.0\n"));
    for s in &servers {
        s.fail(true);
    }
    flaky(f.listen, 30);
    let stats = f.stats();
    let ejected = stats["services"][0]["servers"].as_array().unwrap().iter().filter(|s| s["state"] == "ejected").count();
    assert_eq!(ejected, 1, "34% of three servers is one: {}", stats["services"][0]["servers"]);
    f.wait_log("max_ejection_percent");
}

#[test]
fn shift_moves_traffic_away_from_a_failing_server_in_steps_and_back() {
    let servers = three();
    let f = Fulcrum::start(&http_over(
        &servers,
        "algorithm = \"random\"\n[service.health]\nkind = \"none\"\n[service.outlier]\nmode = \"shift\"\ninterval = \"1s\"\nsuccess_rate_min_requests = 5\nshift_delta = 0.5\n",
    ));
    servers[1].fail(true);
    let s2 = servers[1].addr.to_string();
    let share = |f: &Fulcrum| f.server_stats(&s2)["outlier"].as_str().map(String::from);
    // Traffic for about four intervals: s2 loses half of its share each interval.
    let began = Instant::now();
    let mut seen = Vec::new();
    while began.elapsed() < Duration::from_secs(4) {
        flaky(f.listen, 30);
        seen.extend(share(&f));
    }
    let last = seen.last().cloned().unwrap_or_default();
    assert!(last.starts_with("shifted: takes") && last.contains("error ratio 100%"), "{seen:?}");
    let taken: u32 = last.trim_start_matches("shifted: takes ").split('%').next().unwrap().parse().unwrap();
    assert!(taken <= 25, "two or more steps of half: {last}");
    let late = flaky(f.listen, 200);
    let s2_hits = late.get(&(503, "s2".into())).copied().unwrap_or(0);
    assert!(s2_hits < 40, "a shifted server takes far less than a third: {late:?}");
    assert_eq!(f.server_stats(&s2)["state"], "up", "shift never takes it out");
    // Healed: it regains half of its whole share each interval, back to all of it.
    servers[1].fail(false);
    let began = Instant::now();
    while share(&f).is_some() && began.elapsed() < Duration::from_secs(8) {
        flaky(f.listen, 30);
    }
    assert_eq!(share(&f), None, "s2 takes its whole share again");
    f.wait_log("traffic shifted back");
}

#[test]
fn a_retry_hides_a_failing_server_and_a_budget_caps_retries_when_all_fail() {
    let servers = three();
    let retry = |budget: &str| format!("[service.health]\nkind = \"none\"\n[service.http.retry]\nretry_on = [\"503\"]\ncount = 2\n{budget}\n");
    // One server failing: each of its requests goes on to another (the floor of 3 a second
    // over 10 s covers them).
    let f = Fulcrum::start(&http_over(&servers, &retry("")));
    servers[1].fail(true);
    let seen = flaky(f.listen, 30);
    assert_eq!(seen.keys().filter(|(status, _)| *status == 200).map(|(_, n)| seen[&(200, n.clone())]).sum::<usize>(), 30, "{seen:?}");
    let stats = f.stats();
    assert_eq!(stats["services"][0]["retries"], 10, "{}", stats["services"][0]);
    drop(f);
    let f = Fulcrum::start(&http_over(&servers, &retry("budget_percent = 20\nmin_retries_per_second = 0")));
    // Every server failing: 500 requests, which would take two retries each; the budget (a
    // fifth of the requests, no floor) lets a hundred through.
    for s in &servers {
        s.fail(true);
    }
    let seen = flaky(f.listen, 500);
    assert!(seen.keys().all(|(status, _)| *status == 503), "{seen:?}");
    let s = &f.stats()["services"][0];
    let (retries, refused) = (s["retries"].as_u64().unwrap(), s["retries_over_budget"].as_u64().unwrap());
    println!("500 requests: {retries} retries, {refused} refused by the budget");
    assert!((50..=101).contains(&retries), "retries are a fifth of the requests: {retries}");
    assert!(refused > 300, "the budget refused most retries: {refused}");
}

#[test]
fn below_the_panic_threshold_traffic_goes_to_every_server() {
    let servers: Vec<Nginx> = ["p1", "p2", "p3", "p4"].iter().map(|n| Nginx::start(n, "TARGET")).collect();
    let f = Fulcrum::start(&http_over(&servers, "panic_threshold = 50\n[service.health]\nkind = \"http\"\npath = \"/flaky\"\ninterval = \"100ms\"\nfall = 1\nrise = 1\n"));
    f.wait_all_up();
    assert_eq!(f.stats()["services"][0]["panic"], false);
    // Two of four down: 50% usable, not below the threshold; the two up take everything.
    servers[0].fail(true);
    servers[1].fail(true);
    wait_until("two down", Duration::from_secs(5), || f.stats()["services"][0]["servers"].as_array().unwrap().iter().filter(|s| s["state"] == "down").count() == 2);
    let seen = flaky(f.listen, 20);
    assert!(seen.keys().all(|(status, _)| *status == 200), "{seen:?}");
    // Three of four down: 25% usable, below 50%: every server takes traffic, health ignored.
    servers[2].fail(true);
    wait_until("panic", Duration::from_secs(5), || f.stats()["services"][0]["panic"] == true);
    let seen = flaky(f.listen, 40);
    let names: std::collections::BTreeSet<&str> = seen.keys().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names.len(), 4, "every server takes traffic in panic: {seen:?}");
    for s in &servers {
        s.fail(false);
    }
    wait_until("out of panic", Duration::from_secs(5), || f.stats()["services"][0]["panic"] == false);
}
