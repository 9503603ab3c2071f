//! The admin listener's authentication against a running Fulcrum: wrong passwords, however many
//! and from however many addresses, do not slow the proxied traffic; an address whose passwords
//! fail is made to wait; schemes are case-insensitive; requests with an ambiguous `Host` are
//! refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;

const PASSWORD: &str = "correct horse";

fn basic(credentials: &str) -> String {
    use base64::Engine;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(credentials))
}

/// The right credentials with `scheme` spelled as given: each spelling is a header value of its
/// own, so it is not among those already verified and must be hashed.
fn right(scheme: &str) -> String {
    basic(&format!("admin:{PASSWORD}")).replacen("Basic ", scheme, 1)
}

/// Fulcrum in HTTP mode over one nginx, with HTTP basic authentication on the admin listener.
fn start() -> (Nginx, Fulcrum) {
    let server = Nginx::start("s1", "<html>TARGET s1</html>");
    let config = service("round-robin", "mode = \"http\"", HTTP_CHECK, &[(&server, "")]);
    let admin = format!("user = \"admin\"\npassword_hash = \"{}\"", password_hash(PASSWORD));
    let f = Fulcrum::start_with_admin(&config, &admin, Some(basic(&format!("admin:{PASSWORD}"))));
    f.wait_all_up();
    (server, f)
}

/// One request to the admin listener from `source` on its own connection: (status, raw head).
/// `head` holds the header lines after the request line.
fn admin_request(source: IpAddr, admin: SocketAddr, head: &str) -> std::io::Result<(u16, String)> {
    let mut s = connect_from(Some(source), admin)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET /api/stats HTTP/1.1\r\n{head}Connection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| std::io::Error::other(format!("no status in {text:?}")))?;
    Ok((status, text))
}

fn authorized(source: IpAddr, admin: SocketAddr, authorization: &str) -> (u16, String) {
    admin_request(source, admin, &format!("Host: {admin}\r\nAuthorization: {authorization}\r\n")).unwrap()
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// The proxied latency is sampled in slices that alternate between the flood running and the
/// flood paused, so that whatever else the machine runs meanwhile (the lab's servers beside this
/// tier in CI) falls on both sides alike: `ROUNDS` slices of each, the 4 s of each in all.
const ROUNDS: usize = 8;
const SLICE: Duration = Duration::from_millis(500);
/// After the flood is paused or resumed, requests already sent (and a hash already started) are
/// let finish before the slice is timed.
const SETTLE: Duration = Duration::from_millis(50);
/// Requests timed at most in one slice (thousands fit in 500 ms).
const MAX_SAMPLES: usize = 20_000;

/// A keep-alive HTTP/1.1 client that times each request.
struct Timed {
    reader: BufReader<std::net::TcpStream>,
}

impl Timed {
    fn connect(addr: SocketAddr) -> Timed {
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Timed { reader: BufReader::new(s) }
    }

    /// One `GET /name` answered by s1; returns how long it took.
    fn get(&mut self) -> Duration {
        let started = Instant::now();
        self.reader.get_mut().write_all(b"GET /name HTTP/1.1\r\nHost: web\r\n\r\n").unwrap();
        let mut length = 0;
        let mut status = String::new();
        self.reader.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        let took = started.elapsed();
        assert_eq!(body, b"s1\n");
        took
    }

    /// Sequential requests sent for `period`, at most `MAX_SAMPLES`, timed into `took`.
    fn sample(&mut self, period: Duration, took: &mut Vec<Duration>) {
        let until = Instant::now() + period;
        let mut n = 0;
        while Instant::now() < until && n < MAX_SAMPLES {
            took.push(self.get());
            n += 1;
        }
    }
}

fn median(mut took: Vec<Duration>) -> Duration {
    took.sort();
    took[took.len() / 2]
}

/// Wrong-password attempts answered, by outcome.
#[derive(Default)]
struct Tally {
    /// 401: the password was hashed and refused.
    hashed: AtomicU64,
    /// 429 or 503: refused without hashing.
    refused: AtomicU64,
}

/// How often one client sends a wrong password: a shell loop of curl, as in the issue, runs
/// about this fast. A tighter loop would measure the CPU its own connections take from the
/// proxy on a small machine, not the passwords' cost.
const PACE: Duration = Duration::from_millis(5);

/// Clients sending wrong passwords from `sources` (one thread each), each one as soon as the
/// last is answered and `PACE` has passed, while `paused` is false, until `stop` (or 60 s at most).
fn hammer(admin: SocketAddr, sources: Vec<IpAddr>, flood: &Flood) -> Vec<std::thread::JoinHandle<()>> {
    let wrong = basic("admin:battery staple");
    sources
        .into_iter()
        .map(|source| {
            let (flood, wrong) = (flood.clone(), wrong.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !flood.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let next = Instant::now() + PACE;
                    if !flood.paused.load(Ordering::Relaxed) {
                        match authorized(source, admin, &wrong).0 {
                            401 => flood.tally.hashed.fetch_add(1, Ordering::Relaxed),
                            429 | 503 => flood.tally.refused.fetch_add(1, Ordering::Relaxed),
                            other => panic!("a wrong password answered {other}"),
                        };
                    }
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
        })
        .collect()
}

/// What the flood's threads share with the test: whether to pause or stop, and what they got.
#[derive(Clone, Default)]
struct Flood {
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    tally: Arc<Tally>,
}

/// The measure: two loops of wrong passwords took the proxied p50 from 0.2 ms to 16 ms,
/// since Argon2 ran on the threads that move the traffic. With hashing off those threads and
/// each address slowed by its failures, the p50 under a flood of wrong passwords stays within
/// 2 ms of the p50 without it: far below the 16 ms of hashing on the traffic's threads, and above
/// what the flood's own clients take from a 2-core machine. The two are sampled in alternating
/// slices, so load from outside the test (the lab beside this tier in CI) weighs on both alike.
#[test]
fn wrong_passwords_do_not_slow_the_proxied_traffic() {
    let (_server, f) = start();
    let mut client = Timed::connect(f.listen);
    client.sample(Duration::from_millis(300), &mut Vec::new()); // warm-up: the idle server connection, caches

    for (what, sources) in [("8 addresses", (10..18).map(loopback).collect::<Vec<_>>()), ("one address", vec![loopback(20); 8])] {
        let flood = Flood::default();
        let started = Instant::now();
        let clients = hammer(f.admin, sources, &flood);
        // Let the flood build up before measuring under it.
        std::thread::sleep(Duration::from_millis(500));
        let (mut loaded, mut unloaded) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            for (paused, took) in [(false, &mut loaded), (true, &mut unloaded)] {
                flood.paused.store(paused, Ordering::Relaxed);
                std::thread::sleep(SETTLE);
                client.sample(SLICE, took);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        flood.stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().unwrap();
        }
        let (hashed, refused) = (flood.tally.hashed.load(Ordering::Relaxed), flood.tally.refused.load(Ordering::Relaxed));
        let (samples, loaded, unloaded) = ((loaded.len(), unloaded.len()), median(loaded), median(unloaded));
        eprintln!(
            "{what}: proxied p50 {unloaded:?} with the flood paused, {loaded:?} under it ({samples:?} requests); wrong passwords over {seconds:.1} s: {hashed} hashed, {refused} refused without hashing"
        );
        assert!(loaded <= unloaded + Duration::from_millis(2), "{what}: p50 {loaded:?} under wrong passwords against {unloaded:?} without");
        assert!(refused > 0, "{what}: the flood must be refused, not hashed");
        // An address's k-th hash comes 0.5 s x (2^(k-1) - 1) after its first at the earliest;
        // the paused slices count too, since the wait runs on the clock.
        let per_address = ((2.0 * seconds + 1.0).log2() + 1.0).floor() as u64;
        let addresses = if what == "one address" { 1 } else { 8 };
        assert!(hashed <= addresses * per_address, "{what}: {hashed} hashed in {seconds:.1} s, at most {per_address} per address expected");
    }
}

#[test]
fn an_address_whose_password_failed_waits_before_its_next_is_checked() {
    let (_server, f) = start();
    let (me, other) = (loopback(30), loopback(31));
    assert_eq!(authorized(me, f.admin, &basic("admin:wrong")).0, 401);
    // Even the right password is not checked while the address waits.
    let (status, head) = authorized(me, f.admin, &right("basic "));
    assert_eq!(status, 429, "{head}");
    assert!(head.to_lowercase().contains("retry-after: 1\r\n"), "{head}");
    // Another address is not held back.
    assert_eq!(authorized(other, f.admin, &right("BASIC ")).0, 200);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(authorized(me, f.admin, &right("Basic  ")).0, 200, "checked once the wait is over");
    // The success reset the address: a wrong password is checked at once again.
    assert_eq!(authorized(me, f.admin, &basic("admin:wrong")).0, 401);
}

#[test]
fn authorization_schemes_are_case_insensitive() {
    let (_server, f) = start();
    for scheme in ["basic ", "BASIC ", "bAsIc "] {
        assert_eq!(authorized(loopback(1), f.admin, &right(scheme)).0, 200, "{scheme}");
    }
}

#[test]
fn two_host_headers_or_none_in_http_1_1_are_answered_400() {
    let (_server, f) = start();
    let auth = format!("Authorization: {}\r\n", basic(&format!("admin:{PASSWORD}")));
    let (status, head) = admin_request(loopback(1), f.admin, &format!("Host: {}\r\nHost: evil.example\r\n{auth}", f.admin)).unwrap();
    assert_eq!(status, 400, "{head}");
    assert!(head.contains("more than one Host header"), "{head}");
    let (status, head) = admin_request(loopback(1), f.admin, &auth).unwrap();
    assert_eq!(status, 400, "{head}");
    assert!(head.contains("must have a Host header"), "{head}");
    // Without credentials too: the check comes before authentication.
    let (status, _) = admin_request(loopback(1), f.admin, "Host: a\r\nHost: b\r\n").unwrap();
    assert_eq!(status, 400);
    assert_eq!(admin_request(loopback(1), f.admin, &format!("Host: {}\r\n{auth}", f.admin)).unwrap().0, 200);
}
