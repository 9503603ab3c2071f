//! What a config's size costs (`bench/scale`'s config curve, in process): the bytes held by the
//! parsed config, by its first generation (`live`), and by the running app (the generation, the
//! health checks' tasks, the listeners, the admin state), per service and per server; then the
//! traffic history's share, once 24 h of points are held for every server; then the time one
//! weight edit takes to apply through `App::change` (the path the API takes) and a full reload
//! of the file.
//!
//! `config_size [SERVICES [SERVERS]]`: 1,000 TCP services of 10 servers by default, each with the
//! default TCP check (every 2 s, to addresses on 127.0.0.0/8 where nothing listens, so checks fail
//! at once and the servers are down: the state is what it would be with servers up). Bytes are
//! counted by a global allocator that adds up the bytes asked for and not yet freed; the
//! `fulcrum` binary's jemalloc serves these sizes within a few percent of that, plus its own
//! arenas. Prints one JSON line last, for `bench/scale`.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]
// A global allocator is unsafe to implement: this one counts and hands each call to the system's.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use fulcrum::app::App;
use fulcrum::config::{self, Change};
use fulcrum::shutdown::Shutdown;

#[path = "support/counting.rs"]
mod counting;
use counting::live;

/// `services` TCP services of `servers` servers each, as `bench/scale` writes them; `weight` is
/// the first server of the first service's.
fn text(services: usize, servers: usize, weight: u32) -> String {
    let mut out = String::from("allow_root = true\n\n");
    for i in 0..services {
        out += &format!("[[service]]\nname = \"s{i}\"\nlisten = \"127.0.0.1:{}\"\nmode = \"tcp\"\n", 20000 + i);
        for j in 0..servers {
            out += &format!("[[service.server]]\naddress = \"{}:80\"\n", server(i, j));
            if i == 0 && j == 0 {
                out += &format!("weight = {weight}\n");
            }
        }
        out.push('\n');
    }
    out
}

/// The `j`th server of service `i`: its own address on 127.0.0.0/8.
fn server(i: usize, j: usize) -> String {
    format!("127.{}.{}.{}", 1 + i / 250, i % 250, 1 + j)
}

fn kib(bytes: isize, per: usize) -> f64 {
    bytes as f64 / 1024.0 / per.max(1) as f64
}

fn median_ms(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // As `fulcrum run` does: the soft descriptor limit up to the hard one (a config its
    // listeners and checks do not fit is refused, and the clients need theirs).
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let services = args.first().copied().unwrap_or(1000);
    let servers = args.get(1).copied().unwrap_or(10);
    let total = services * servers;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let dir = std::env::temp_dir().join(format!("fulcrum-config-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("fulcrum.toml");
    std::fs::write(&path, text(services, servers, 1)).expect("config file");

    let base = live();
    let parsed = config::load_against(&path, None).expect("config").config;
    let config_bytes = live() - base;
    let config_copy = parsed.clone();

    let before = live();
    let generation = fulcrum::live::Live::new(config_copy).expect("generation");
    let generation_bytes = live() - before;
    drop(generation);

    rt.block_on(async {
        let before = live();
        let shutdown = Shutdown::new();
        let app = App::start(parsed, Some(path.clone()), shutdown.clone()).await.expect("start");
        // A health round for every server, and the allocator's caches settled.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let app_bytes = live() - before;
        println!("{services} services x {servers} servers: config {:.1} KiB per server, generation {:.1} KiB per server, app {:.1} KiB per server ({:.1} KiB per service)",
            kib(config_bytes, total), kib(generation_bytes, total), kib(app_bytes, total), kib(app_bytes, services));

        // One weight edit through the path the API takes (validation, diff, generation, swap, audit).
        let mut edits = Vec::new();
        for n in 0..20usize {
            let i = (n * 37) % services;
            let change = Change::Weight { service: format!("s{i}"), address: format!("{}:80", server(i, 0)), weight: 2 + (n % 2) as u32 };
            let t = Instant::now();
            app.change(change, fulcrum::admin::Editor { who: "bench".into(), based_on: None }).await.expect("edit");
            edits.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let edit_ms = median_ms(edits);
        // A full reload of the file with one weight changed: read, parse, validate, diff, apply.
        let mut reloads = Vec::new();
        for n in 0..5u32 {
            std::fs::write(&path, text(services, servers, 3 + n % 2)).expect("config file");
            let t = Instant::now();
            app.reload_by("bench", config::audit::Source::Api).await.expect("reload");
            reloads.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let reload_ms = median_ms(reloads);
        println!("one weight edit: {edit_ms:.2} ms (median of 20); a full reload: {reload_ms:.1} ms (median of 5)");

        // 24 h of history: 8,640 samples of every server, as the app takes one every 10 s.
        let before = live();
        let current = app.live.current();
        for _ in 0..fulcrum::stats::history::POINTS {
            app.history.sample(&current);
        }
        let history_bytes = live() - before;
        println!("history with 24 h of points: {:.1} KiB per server", kib(history_bytes, total));
        println!(
            "{{\"services\": {services}, \"servers_per_service\": {servers}, \"config_kib_per_server\": {:.2}, \"generation_kib_per_server\": {:.2}, \"app_kib_per_server\": {:.2}, \"app_kib_per_service\": {:.2}, \"history_24h_kib_per_server\": {:.2}, \"edit_ms\": {edit_ms:.3}, \"reload_ms\": {reload_ms:.3}}}",
            kib(config_bytes, total),
            kib(generation_bytes, total),
            kib(app_bytes, total),
            kib(app_bytes, services),
            kib(history_bytes, total)
        );
        shutdown.begin();
        app.stop().await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
