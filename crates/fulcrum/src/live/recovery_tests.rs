//! How servers come back, over a live generation and tokio's paused clock: the slow-start ramp
//! of every algorithm, flap damping's suppression and its end, and `all_down = "use-all"`.

use std::net::IpAddr;
use std::time::Duration;

use super::*;

/// Two servers (1001 and 1002) with TCP checks, both up; `extra` goes into the service.
fn live(algorithm: &str, extra: &str) -> Live {
    let text = format!(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nalgorithm = \"{algorithm}\"\n{extra}\n\
         [[service.server]]\naddress = \"127.0.0.1:1001\"\n[[service.server]]\naddress = \"127.0.0.1:1002\"\n"
    );
    let live = Live::new(config::parse(&text, "t.toml").unwrap()).unwrap();
    for port in [1001, 1002] {
        server(&live, port).set_health(true);
    }
    live
}

fn server(live: &Live, port: u16) -> Arc<ServerState> {
    live.server("web", &format!("127.0.0.1:{port}")).unwrap()
}

/// The share of `n` picks server 1 (1002) gets, clients spread over 127.0.0.0/16; least-conn
/// holds every connection it hands out, so its picks follow the weights.
fn share_of_second(live: &Live, n: usize) -> f64 {
    let generation = live.current();
    let pool = &generation.services[0].pool;
    let mut held = Vec::new();
    let mut second = 0;
    for k in 0..n {
        let client = IpAddr::from([127, 0, (k >> 8) as u8, k as u8]);
        let super::Picked { entry, index: i, .. } = pool.pick(client, None, &Avoid::default()).expect("a usable server");
        held.push(entry.state.try_reserve(0).unwrap());
        second += usize::from(i == 1);
    }
    second as f64 / n as f64
}

/// Takes server 1002 down and up again after both came up at start: it ramps from there.
fn bounce(live: &Live) {
    let s = server(live, 1002);
    s.set_health(false);
    s.set_health(true);
}

/// With two servers of weight 1, one ramping at r (1% to 100% over 10 s) gets r / (1 + r) of
/// the picks; under a hashing algorithm, r of its own half of the keys.
async fn follows_the_ramp(algorithm: &str, tolerance: f64) {
    let live = live(algorithm, "slow_start = \"10s\"");
    assert!((share_of_second(&live, 1000) - 0.5).abs() <= tolerance, "{algorithm}: no ramp at start");
    bounce(&live);
    for second in 0..=11u32 {
        let r = (f64::from(second) / 10.0).clamp(0.01, 1.0);
        let expected = if algorithm.ends_with("-hash") { r / 2.0 } else { r / (1.0 + r) };
        let got = share_of_second(&live, 1000);
        assert!((got - expected).abs() <= tolerance, "{algorithm} at {second}s: share {got:.3}, the ramp says {expected:.3}");
        let ramp = server(&live, 1002).ramp();
        assert!(second < 10 || ramp == crate::balance::RAMP_FULL, "{algorithm}: the ramp ends at 10s ({ramp})");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

// Tolerances: the deterministic rotations land within a pick or two of the ramp, static-rr's in
// sixteenths of a weight (it starts at 1/17, not 1/101); random and the hashed keys are samples
// of 1000 (a standard deviation of at most 0.016).
#[tokio::test(start_paused = true)]
async fn a_returning_server_takes_its_ramped_share_under_every_algorithm() {
    for (algorithm, tolerance) in
        [("round-robin", 0.01), ("static-rr", 0.05), ("least-conn", 0.01), ("p2c-ewma", 0.1), ("passive-ratio", 0.01), ("random", 0.06), ("source-hash", 0.06)]
    {
        follows_the_ramp(algorithm, tolerance).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_hashed_key_moves_to_a_returning_server_once_and_stays() {
    let live = live("source-hash", "slow_start = \"10s\"");
    let generation = live.current();
    let primary = &generation.services[0].pool.primary;
    let clients: Vec<IpAddr> = (0..2000u32).map(|k| IpAddr::from([127, 1, (k >> 8) as u8, k as u8])).collect();
    let picks = || clients.iter().map(|&c| primary.pick(c, None, &[]).unwrap()).collect::<Vec<_>>();
    let before = picks();
    bounce(&live);
    let mut last = picks();
    assert!(last.iter().filter(|&&i| i == 1).count() < 60, "1% of its keys at first");
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = picks();
        for (k, (was, is)) in last.iter().zip(&now).enumerate() {
            assert!(was == is || (*was == 0 && *is == 1 && before[k] == 1), "key {k} moved {was} -> {is}: only back to the server it had");
        }
        last = now;
    }
    assert_eq!(last, before, "every key home once the ramp is over");
}

#[tokio::test(start_paused = true)]
async fn no_ramp_for_the_servers_a_process_starts_with_and_one_for_a_server_added_later() {
    let live = live("round-robin", "slow_start = \"10s\"");
    assert_eq!(server(&live, 1001).ramp(), crate::balance::RAMP_FULL);
    let mut config = live.current().config.clone();
    let third = config::Server { address: "127.0.0.1:1003".into(), ..config.services[0].servers[0].clone() };
    config.services[0].servers.push(third);
    live.apply(config).unwrap();
    let added = server(&live, 1003);
    assert_eq!(added.state(), State::Down, "checked: down until its first check");
    added.set_health(true);
    assert_eq!(added.ramp(), 10, "added while running: it starts at 1%");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(added.ramp(), 500);
}

#[tokio::test(start_paused = true)]
async fn a_flapping_server_is_suppressed_until_its_penalty_decays_below_reuse() {
    let live = live("round-robin", "[service.damping]\nhalf_life = \"60s\"\nsuppress = 2000\nreuse = 750\n");
    let s = server(&live, 1002);
    bounce(&live);
    bounce(&live);
    assert_eq!(s.state(), State::Up, "two flaps stay under suppress (1000 + 1000, a little decayed)");
    tokio::time::sleep(Duration::from_secs(1)).await;
    bounce(&live);
    assert_eq!(s.state(), State::Suppressed, "the third flap passes 2000");
    assert_eq!(s.effective_weight(), 0);
    let d = s.damping();
    assert!((2900.0..=3000.0).contains(&d.penalty), "{d:?}");
    // log2(3000 / 750) = 2 half-lives: back after about two minutes.
    let back_in = d.back_in.unwrap();
    assert!((Duration::from_secs(115)..=Duration::from_secs(121)).contains(&back_in), "{back_in:?}");
    assert!(share_of_second(&live, 100) == 0.0, "a suppressed server takes nothing");
    tokio::time::sleep(Duration::from_secs(110)).await;
    assert_eq!(s.state(), State::Suppressed);
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(s.state(), State::Up, "back once below reuse: {:?}", s.damping());
    assert!(s.damping().penalty < 750.0);
}

#[tokio::test(start_paused = true)]
async fn the_default_damping_leaves_a_server_that_fails_once_or_twice_alone() {
    let live = live("round-robin", "");
    bounce(&live);
    tokio::time::sleep(Duration::from_secs(30)).await;
    bounce(&live);
    assert_eq!(server(&live, 1002).state(), State::Up);
    let off = self::live("round-robin", "[service.damping]\nsuppress = 0\n");
    for _ in 0..10 {
        bounce(&off);
    }
    assert_eq!(server(&off, 1002).state(), State::Up, "suppress = 0 turns damping off");
    assert_eq!(server(&off, 1002).damping().penalty, 0.0);
}

#[test]
fn with_use_all_a_pool_whose_servers_are_all_down_spreads_over_them_and_says_so() {
    for algorithm in ["round-robin", "static-rr", "least-conn", "source-hash"] {
        let fail = live(algorithm, "");
        let panic = live(algorithm, "all_down = \"use-all\"");
        for l in [&fail, &panic] {
            server(l, 1001).set_health(false);
            server(l, 1002).set_health(false);
        }
        let client = IpAddr::from([127, 0, 0, 9]);
        assert!(fail.current().services[0].pool.pick(client, None, &Avoid::default()).is_none(), "{algorithm}: fail refuses");
        let generation = panic.current();
        let pool = &generation.services[0].pool;
        assert!(pool.panicking());
        let picked: std::collections::BTreeSet<usize> = (0..64u8).filter_map(|h| pool.pick(IpAddr::from([127, 0, 1, h]), None, &Avoid::default()).map(|p| p.index)).collect();
        assert_eq!(picked.len(), 2, "{algorithm}: both servers take traffic in panic mode");
        server(&panic, 1001).set_enabled(false);
        assert!((0..16).all(|_| pool.pick(client, None, &Avoid::default()).is_some_and(|p| p.index == 1)), "{algorithm}: a disabled server stays out");
        server(&panic, 1002).set_health(true);
        assert!(!pool.panicking(), "a usable server ends panic mode");
    }
}
