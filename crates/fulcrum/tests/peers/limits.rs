//! Per-client limits (`[[service.limit]]`) with real clients on loopback: 20 client addresses
//! (127.0.0.x) each at twice a limit of 50 requests a second over keep-alive connections, a TCP
//! connection rate and an open-connection count per address, a dry run, the API's top keys and
//! clearing one, up to a million spoofed `X-Forwarded-For` values from wrk that only evict, and a
//! table shared by three instances through a real redis-server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::*;

fn http_service(backend: SocketAddr, extra: &str) -> String {
    format!(
        r#"[[service]]
name = "web"
listen = "{{LISTEN}}"
mode = "http"
[service.health]
kind = "none"
[[service.server]]
address = "{backend}"
{extra}
"#
    )
}

/// A keep-alive HTTP/1.1 client from one source address.
struct Client {
    reader: BufReader<TcpStream>,
}

/// One answer: its status and its headers (lower-case names).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

impl Client {
    fn new(source: IpAddr, addr: SocketAddr) -> Client {
        let s = connect_from(Some(source), addr).unwrap_or_else(|e| panic!("connect from {source}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Client { reader: BufReader::new(s) }
    }

    fn get(&mut self, path: &str, extra: &str) -> Answer {
        write!(self.reader.get_mut(), "GET {path} HTTP/1.1\r\nHost: test\r\n{extra}\r\n").unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("status line {line:?}"));
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((n, v)) = l.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let answer = Answer { status, headers };
        let length: usize = answer.header("content-length").and_then(|v| v.parse().ok()).expect("a sized answer");
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        answer
    }
}

#[test]
fn twenty_clients_each_get_their_fifty_a_second_and_one_under_it_is_untouched() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service(b.addr, "[[service.limit]]\nname = \"per-client\"\ncount = \"requests\"\nlimit = 50\nperiod = \"1s\"\nburst = 5\nmax_keys = 1000\n"));
    const SECONDS: u64 = 3;
    // Each of 20 addresses offers 100 a second (one every 10 ms) for 3 s; a 21st offers 20 a
    // second, under its limit. A burst of 5 takes the timers' jitter: with none, a request due at
    // the rate that comes a moment early is refused, and a client at 100 a second gets fewer.
    let run = |source: IpAddr, every: Duration| {
        let mut c = Client::new(source, f.listen);
        let began = Instant::now();
        let (mut passed, mut limited, mut told) = (0u64, 0u64, None);
        let mut next = began;
        while began.elapsed() < Duration::from_secs(SECONDS) {
            let a = c.get("/name", "");
            match a.status {
                200 => passed += 1,
                429 => {
                    limited += 1;
                    told.get_or_insert((a.header("retry-after").map(String::from), a.header("ratelimit-policy").map(String::from), a.header("ratelimit").map(String::from)));
                }
                other => panic!("{source}: status {other}"),
            }
            next += every;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        (passed, limited, told, began.elapsed().as_secs_f64())
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let fast: Vec<_> = (0..20u8).map(|i| s.spawn(move || run(IpAddr::from([127, 0, 0, 10 + i]), Duration::from_millis(10)))).collect();
        let calm = s.spawn(move || run(IpAddr::from([127, 0, 0, 40]), Duration::from_millis(50)));
        let mut all: Vec<_> = fast.into_iter().map(|t| t.join().unwrap()).collect();
        all.push(calm.join().unwrap());
        all
    });
    for (i, (passed, limited, told, took)) in results[..20].iter().enumerate() {
        let per_second = *passed as f64 / took;
        println!("client 127.0.0.{}: {passed} passed ({per_second:.1}/s over {took:.2} s), {limited} limited", 10 + i);
        // Never more than the rate and the burst allow (one more for a request at the edge of
        // the run); not much less either: a client held back by a busy machine sends late and
        // then in a rush, and the burst of 5 takes only part of a rush, so the floor is 85%.
        assert!(*passed as f64 <= 50.0 * took + 5.0 + 1.0, "client {i}: {passed} passed in {took:.2} s, more than 50 a second and a burst of 5");
        assert!(per_second >= 42.5, "client {i}: {per_second:.1} a second passed, under 85% of 50");
        assert!(*limited > 0, "client {i} offered twice its limit and was never limited");
        let (retry, policy, rate) = told.clone().unwrap();
        assert_eq!(retry.as_deref(), Some("1"), "Retry-After in whole seconds");
        assert_eq!(policy.as_deref(), Some("\"per-client\";q=50;w=1"));
        assert_eq!(rate.as_deref(), Some("\"per-client\";r=0;t=1"));
    }
    let (passed, limited, _, _) = &results[20];
    assert_eq!(*limited, 0, "a client under its limit is never limited ({passed} passed)");
    // The table and its counts, in the stats and in /metrics.
    let stats = f.stats();
    let table = &stats["limits"][0];
    assert_eq!((table["name"].as_str(), table["keys"].as_u64()), (Some("per-client"), Some(21)), "{table}");
    let limited_total: u64 = results.iter().map(|r| r.1).sum();
    assert_eq!(table["limited"].as_u64(), Some(limited_total), "{table}");
    assert_eq!(stats["services"][0]["rate_limit"], "50/s per client");
    let (_, metrics) = curl(f.admin, "GET", "/metrics", &[], None);
    assert!(metrics.contains(&format!("fulcrum_limit_decisions_total{{table=\"per-client\",service=\"web\",outcome=\"limited\"}} {limited_total}")), "{metrics}");
}

#[test]
fn the_api_shows_the_clients_closest_to_their_limit_and_clears_one() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service(
        b.addr,
        "[[service.limit]]\nname = \"slow\"\ncount = \"requests\"\nlimit = 2\nperiod = \"1m\"\nburst = 1\n\
         [[service.limit]]\nname = \"keys\"\nkey = \"header:x-api-key\"\ncount = \"requests\"\nlimit = 100\nperiod = \"1m\"\naction = \"log\"\n",
    ));
    let near = IpAddr::from([127, 0, 0, 51]);
    let far = IpAddr::from([127, 0, 0, 52]);
    let mut c = Client::new(near, f.listen);
    assert_eq!([c.get("/name", "").status, c.get("/name", "").status, c.get("/name", "").status], [200, 200, 429]);
    Client::new(far, f.listen).get("/name", "X-Api-Key: k-123\r\n");
    let (status, table) = f.api("GET", "/api/limits/slow", None);
    assert_eq!(status, 200, "{table}");
    let top: Vec<&str> = table["top"].as_array().unwrap().iter().map(|k| k["key"].as_str().unwrap()).collect();
    assert_eq!(top, ["127.0.0.51", "127.0.0.52"], "the closest to its limit first: {table}");
    assert!(table["top"][0]["retry_after_ms"].as_u64().is_some_and(|ms| ms > 1000), "{table}");
    // A header's key is shown by its value.
    let (_, keys) = f.api("GET", "/api/limits/keys", None);
    assert_eq!(keys["top"][0]["key"], "k-123", "{keys}");
    // Cleared, the client starts afresh at once.
    let (status, cleared) = f.api("DELETE", "/api/limits/slow/127.0.0.51", None);
    assert_eq!(status, 200, "{cleared}");
    assert_eq!(c.get("/name", "").status, 200);
    let (status, _) = f.api("DELETE", "/api/limits/slow/127.0.0.99", None);
    assert_eq!(status, 404, "a key the table does not hold");
    let (status, _) = f.api("GET", "/api/limits/nope", None);
    assert_eq!(status, 404);
    let (status, _) = f.api("GET", "/api/limits?top=0", None);
    assert_eq!(status, 400);
}

#[test]
fn a_dry_run_lets_everything_through_and_counts_what_it_would_refuse() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service(b.addr, "[[service.limit]]\nname = \"dry\"\ncount = \"requests\"\nlimit = 5\nperiod = \"1m\"\nburst = 4\naction = \"log\"\n"));
    let mut c = Client::new(IpAddr::from([127, 0, 0, 61]), f.listen);
    for _ in 0..12 {
        assert_eq!(c.get("/name", "").status, 200);
    }
    let table = &f.stats()["limits"][0];
    assert_eq!((table["passed"].as_u64(), table["logged"].as_u64(), table["limited"].as_u64()), (Some(5), Some(7), Some(0)), "{table}");
    f.wait_log("over its limit of 5 requests per 1m (action = \"log\": let through)");
}

#[test]
fn a_scanner_collecting_errors_is_refused_and_a_route_has_its_own_limit() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service(
        b.addr,
        "[[service.limit]]\nname = \"scanners\"\ncount = \"errors\"\nlimit = 5\nperiod = \"1m\"\n\
         [[service.route]]\npath_prefix = [\"/api\"]\n[[service.route.limit]]\nname = \"api\"\ncount = \"requests\"\nlimit = 1\nperiod = \"1m\"\n",
    ));
    let mut scanner = Client::new(IpAddr::from([127, 0, 0, 71]), f.listen);
    // Five 404s within the window pass; the sixth request, whatever it asks, is refused.
    let statuses: Vec<u16> = (0..7).map(|i| scanner.get(&format!("/missing-{i}"), "").status).collect();
    assert_eq!(statuses, [404, 404, 404, 404, 404, 429, 429], "errors counted after the fact hold back the next request");
    assert_eq!(scanner.get("/name", "").status, 429);
    // The route's limit counts only its requests.
    let mut c = Client::new(IpAddr::from([127, 0, 0, 72]), f.listen);
    assert_eq!([c.get("/api/x", "").status, c.get("/api/x", "").status, c.get("/name", "").status], [404, 429, 200]);
    // Explain lists the route's limit first among what it does.
    let (_, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.73&path=/api/y", None);
    let taken = e["routes"].as_array().unwrap().iter().find(|r| r["taken"] == true).unwrap().clone();
    assert_eq!(taken["actions"][0], "limit api: 1 requests per 1m by client (reject)", "{e}");
}

/// Whether a TCP connection from `source` through Fulcrum reaches the server: an HTTP/1.0
/// request answered, or the connection closed unanswered.
fn served(source: IpAddr, addr: SocketAddr) -> bool {
    connect_from(Some(source), addr).is_ok_and(|s| answers(&s))
}

/// Whether a request on `s` is answered by the server behind Fulcrum.
fn answers(mut s: &TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if write!(s, "GET /name HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    raw.starts_with(b"HTTP/1.")
}

#[test]
fn a_tcp_connection_rate_refuses_the_eleventh_connection_in_a_second() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"tcp\"\nlisten = \"{{LISTEN}}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n\
         [[service.limit]]\nname = \"conn-rate\"\ncount = \"new-connections\"\nlimit = 10\nperiod = \"1s\"\nburst = 9\n",
        b.addr
    ));
    let one = IpAddr::from([127, 0, 0, 81]);
    // Eleven connections at once (each accepted and checked in turn), then a request on each.
    let began = Instant::now();
    let opened: Vec<TcpStream> = (0..11).map(|_| connect_from(Some(one), f.listen).unwrap()).collect();
    assert!(began.elapsed() < Duration::from_millis(500), "the eleven connects took {:?}", began.elapsed());
    let answered = opened.iter().filter(|s| answers(s)).count();
    assert_eq!(answered, 10, "ten pass, the eleventh is closed");
    assert!(served(IpAddr::from([127, 0, 0, 82]), f.listen), "another address is not touched");
    // A second later the address has its rate again.
    std::thread::sleep(Duration::from_millis(200));
    assert!(served(one, f.listen));
    let stats = f.stats();
    assert_eq!(stats["limits"][0]["limited"], 1, "{}", stats["limits"]);
    assert_eq!(stats["services"][0]["rate_limit"], "10/s per client");
}

#[test]
fn open_connections_per_client_are_capped_and_freed_as_they_close() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"tcp\"\nlisten = \"{{LISTEN}}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n\
         [[service.limit]]\nname = \"open\"\ncount = \"connections\"\nlimit = 2\n",
        b.addr
    ));
    let one = IpAddr::from([127, 0, 0, 91]);
    // Two held open (a request not yet sent), the third is closed unanswered.
    let first = connect_from(Some(one), f.listen).unwrap();
    let second = connect_from(Some(one), f.listen).unwrap();
    wait_until("both connections counted", Duration::from_secs(5), || f.stats()["limits"][0]["keys"] == 1);
    assert!(!served(one, f.listen), "a third connection at once is refused");
    assert!(served(IpAddr::from([127, 0, 0, 92]), f.listen), "another address is not touched");
    drop(first);
    wait_until("a place freed", Duration::from_secs(5), || served(one, f.listen));
    drop(second);
    wait_until("the key leaves with its last connection", Duration::from_secs(5), || f.stats()["limits"][0]["keys"] == 0);
}

#[test]
fn a_flood_of_spoofed_forwarded_addresses_only_evicts() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service(
        b.addr,
        "[service.http]\ntrusted_forwarders = [\"127.0.0.1/32\"]\n[[service.limit]]\nname = \"spoofed\"\ncount = \"requests\"\nlimit = 1\nperiod = \"1h\"\nmax_keys = 1000\n\
         [[service.route]]\npath = [\"/flood\"]\ndeny = 403\n",
    ));
    // wrk sends a new X-Forwarded-For address with every request, until each of its two threads
    // has had 500,000 answers (wrk itself runs out its 75 s); a route answers them itself (limits are counted
    // before a route's deny), so no server holds the flood back.
    let dir = scratch("limits-flood");
    let script = dir.join("spoof.lua");
    std::fs::write(
        &script,
        r#"local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end
local n = 0
local answered = 0
request = function()
  n = n + 1
  local k = n * 2 + id
  local a = string.format("10.%d.%d.%d", math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
  return wrk.format("GET", "/flood", { ["X-Forwarded-For"] = a })
end
response = function()
  answered = answered + 1
  if answered >= 500000 then
    wrk.thread:stop()
  end
end
"#,
    )
    .unwrap();
    let rss_before = f.rss_kib();
    let out = std::process::Command::new("wrk")
        // Bounded by the count (the script stops at a million answers) and, on a machine busy
        // with other tests, by time.
        .args(["-t2", "-c32", "-d150s", "-s"])
        .arg(&script)
        .arg(format!("http://{}/", f.listen))
        .output()
        .expect("wrk must be installed (scripts/test installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let sent: u64 = text.lines().find_map(|l| l.trim().split_once(" requests in").and_then(|(n, _)| n.trim().parse().ok())).unwrap_or_else(|| panic!("wrk said: {text}"));
    let table = f.stats()["limits"][0].clone();
    let keys = table["keys"].as_u64().unwrap();
    let rss_after = f.rss_kib();
    println!("{sent} requests, each from a new forwarded address; the table holds {keys} keys; RSS {rss_before} KiB before, {rss_after} KiB after");
    // Bounded by time too, the flood reaches fewer addresses on a machine busy with other tests
    // (851,328 in one CI run beside the lab's); three hundred times the table's keys is still a
    // flood the table must survive by evicting.
    assert!(sent >= 300_000, "the flood stopped short of 300,000 addresses: {text}");
    // 64 shards of ceil(1000/64) keys each; each key's count lasts the run (one request an
    // hour), so the sweep of keys with nothing counted leaves them.
    assert!(keys <= 1024 && keys > 500, "{table}");
    // The table is about 90 KiB full; the rest is the connections' buffers.
    assert!(rss_after < rss_before + 32 * 1024, "memory grew from {rss_before} to {rss_after} KiB");
}

#[test]
fn delay_holds_a_request_until_its_turn_and_tarpit_holds_then_refuses() {
    let b = Backend::start("b");
    let f = Fulcrum::start(&http_service(
        b.addr,
        "[[service.limit]]\nname = \"paced\"\ncount = \"requests\"\nlimit = 10\naction = \"delay\"\nhold = \"1s\"\n\
         [[service.route]]\npath_prefix = [\"/trap\"]\n[[service.route.limit]]\nname = \"trap\"\ncount = \"requests\"\nlimit = 1\nperiod = \"1m\"\naction = \"tarpit\"\nhold = \"300ms\"\n",
    ));
    // Five at once at 10 a second: all served, the last about 400 ms after the first.
    let mut c = Client::new(IpAddr::from([127, 0, 0, 101]), f.listen);
    let began = Instant::now();
    let statuses: Vec<u16> = (0..5).map(|_| c.get("/name", "").status).collect();
    let took = began.elapsed();
    assert_eq!(statuses, [200; 5]);
    assert!(took >= Duration::from_millis(390), "delayed to the rate: {took:?}");
    assert_eq!(f.stats()["limits"][0]["delayed"], 4, "{}", f.stats()["limits"]);
    // The trap's second request waits its hold, then is refused.
    let mut t = Client::new(IpAddr::from([127, 0, 0, 102]), f.listen);
    assert_eq!(t.get("/trap/a", "").status, 404);
    let began = Instant::now();
    assert_eq!(t.get("/trap/b", "").status, 429);
    assert!(began.elapsed() >= Duration::from_millis(290), "held {:?} before the refusal", began.elapsed());
}

/// A redis-server of the test's own on a loopback port; killed when dropped, and restartable
/// on the same port.
pub struct Redis {
    pub port: u16,
    child: Option<std::process::Child>,
}

impl Redis {
    pub fn start() -> Redis {
        let mut r = Redis { port: free_port(), child: None };
        r.restart();
        r
    }

    fn restart(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test installs it)");
        self.child = Some(child);
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        wait_until("redis-server accepting", Duration::from_secs(10), || TcpStream::connect(addr).is_ok());
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One client address offering `per_second` requests a second to each instance for `seconds`:
/// the requests the fleet let through in each second.
fn offer_fleet(instances: &[&Fulcrum], source: IpAddr, per_second: u32, seconds: u64) -> Vec<u64> {
    let began = Instant::now();
    let passed: Vec<Vec<u64>> = std::thread::scope(|s| {
        let threads: Vec<_> = instances
            .iter()
            .map(|f| {
                let listen = f.listen;
                s.spawn(move || {
                    let mut c = Client::new(source, listen);
                    let mut by_second = vec![0u64; seconds as usize];
                    let every = Duration::from_secs(1) / per_second;
                    let mut next = Instant::now();
                    while began.elapsed() < Duration::from_secs(seconds) {
                        let at = began.elapsed().as_secs() as usize;
                        if c.get("/name", "").status == 200 && at < by_second.len() {
                            by_second[at] += 1;
                        }
                        next += every;
                        std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    }
                    by_second
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    (0..seconds as usize).map(|i| passed.iter().map(|p| p[i]).sum()).collect()
}

#[test]
fn three_instances_share_a_limit_through_redis_and_go_on_without_it() {
    let mut redis = Redis::start();
    let b = Backend::start("b");
    let config = http_service(
        b.addr,
        &format!(
            "[[service.limit]]\nname = \"fleet\"\ncount = \"requests\"\nlimit = 100\nperiod = \"1s\"\nstore = \"redis\"\nredis = \"127.0.0.1:{}\"\nsync_interval = \"100ms\"\n",
            redis.port
        ),
    );
    let fleet: Vec<Fulcrum> = (0..3).map(|_| Fulcrum::start(&config)).collect();
    let all: Vec<&Fulcrum> = fleet.iter().collect();
    let client = IpAddr::from([127, 0, 0, 111]);
    // 100 a second to each of three instances: 300 offered against a fleet-wide 100. The bound
    // (docs/protection.md): the limit plus what the fleet is offered in one sync interval.
    let bound = 100 + 300 / 10;
    let shared = offer_fleet(&all, client, 100, 4);
    println!("shared through Redis, passed each second: {shared:?} (bound {bound})");
    // The first second may hold a fresh key's burst; the ones after hold the rate.
    for (i, n) in shared.iter().enumerate().skip(1) {
        assert!((80..=bound + 10).contains(n), "second {i}: {n} passed across the fleet, not 100 within the bound {bound}: {shared:?}");
    }
    let sync = &fleet[0].stats()["limits"][0]["sync"];
    assert_eq!(sync["connected"], true, "{sync}");
    // Redis killed: each instance goes on with its own counts (fail-open), and says so once.
    redis.kill();
    let alone = offer_fleet(&all, client, 100, 2);
    println!("Redis down, passed each second: {alone:?}");
    assert!(alone[1] > 0, "requests go on without Redis: {alone:?}");
    for f in &fleet {
        let sync = &f.stats()["limits"][0]["sync"];
        assert_eq!(sync["connected"], false, "{sync}");
        f.wait_log("cannot sync the limit's counts with Redis, going on with this instance's counts");
    }
    // Back: every instance syncs again within a few intervals, and the fleet-wide limit holds.
    redis.restart();
    wait_until("every instance synced again", Duration::from_secs(5), || fleet.iter().all(|f| f.stats()["limits"][0]["sync"]["connected"] == true));
    let again = offer_fleet(&all, client, 100, 3);
    println!("Redis back, passed each second: {again:?}");
    for (i, n) in again.iter().enumerate().skip(1) {
        assert!(*n <= bound + 10, "second {i} after the restart: {n} passed, past the bound {bound}: {again:?}");
    }
}
