//! Configs with every numeric setting drawn from its range (`config::range::testing`) run: the
//! live generation builds (balancers with their tuning, health state), hyper's server takes its
//! limits and reads a request through them, and no duration overflows `Instant` arithmetic.

use proptest::prelude::*;

use crate::config::range::testing::*;
use crate::config::{Config, parse};

/// What the app builds from a config: the live generation (balancers with their tuning, health
/// state), and for every HTTP service hyper's server, which reads one request through it.
fn run(config: &Config) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    rt.block_on(async {
        let live = crate::live::Live::new(config.clone()).unwrap_or_else(|e| panic!("live state: {e}"));
        assert_eq!(live.current().services.len(), config.services.len());
        for service in config.services.iter().filter(|s| s.mode == crate::config::Mode::Http) {
            let status = one_request(&service.http).await;
            assert!(status.ends_with(" 200 OK"), "{status:?} with {:?}", service.http);
        }
    });
    let durations = config.services.iter().flat_map(|s| {
        let own = [
            s.connect_timeout,
            s.client_timeout,
            s.server_timeout,
            s.queue_timeout(),
            s.http.head_timeout,
            s.http.response_timeout,
            s.http.keepalive_idle,
            s.slow_start,
            s.damping.half_life,
        ];
        let pooled = std::iter::once((&s.health, &s.passive, &s.p2c)).chain(s.pools.iter().map(|p| (&p.health, &p.passive, &p.p2c)));
        own.into_iter().chain(pooled.flat_map(|(h, p, c)| [h.interval, h.timeout, p.slot, c.decay]))
    });
    for d in durations.chain(Some(config.shutdown_grace)) {
        assert!(crate::clock::now().checked_add(d * 2).is_some(), "{d:?} overflows Instant arithmetic");
    }
}

/// One request through hyper's server built with `http`'s limits; the response's status line.
async fn one_request(http: &crate::config::Http) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let svc = hyper::service::service_fn(|_req| async { Ok::<_, std::convert::Infallible>(hyper::Response::new(String::from("ok"))) });
    let conn = super::server_builder(http, http.head_timeout).serve_connection(hyper_util::rt::TokioIo::new(server), svc);
    let served = tokio::spawn(conn);
    // As many header fields as allowed (up to 50), Host included; HTTP/1.0, so hyper closes after.
    let headers: String = (1..http.max_headers.min(50)).map(|i| format!("x-h{i}: v\r\n")).collect();
    client.write_all(format!("GET / HTTP/1.0\r\nHost: t\r\n{headers}\r\n").as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    client.read_to_end(&mut raw).await.unwrap();
    served.await.unwrap().unwrap();
    String::from_utf8_lossy(&raw).lines().next().unwrap_or_default().to_string()
}

#[test]
fn the_config_of_every_setting_at_its_smallest_value_runs() {
    let settings = settings();
    let (text, _) = config_text(&settings, &minimal(&settings));
    let config = parse(&text, "t.toml").unwrap_or_else(|d| panic!("{d}\n{text}"));
    run(&config);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_config_within_the_ranges_runs(values in drawn_values()) {
        run(&drawn_config(values)?);
    }
}
