//! The soak's clients: a fixed set of loops, each one kind of client against one service, each
//! making one request (or FTP session) at a time until the deadline, and the tally of what they
//! did. A failure is kept with its time span and the server it reached when that is known, and
//! judged against the chaos windows when the tally is read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use super::chaos::Windows;
use super::topology::ftp_files;
use super::wire::{self, Http, Pace, Request};

/// The longest a request may take, a slow one included; far above a chaotic server's stop (3 s)
/// so a stalled request finishes instead of failing.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A slow client: 4 KiB per 100 ms (40 KiB/s).
const SLOW: Pace = Pace { chunk: 4 << 10, gap: Duration::from_millis(100) };
/// The receive buffer of a slow reader.
const SLOW_RCVBUF: u32 = 4096;
/// Between two requests of one loop, so the load leaves the 2-core machine some air.
const PAUSE: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tcp,
    Http,
    Ftp,
}

pub const MODES: [Mode; 3] = [Mode::Tcp, Mode::Http, Mode::Ftp];

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tcp => "tcp",
            Mode::Http => "http",
            Mode::Ftp => "ftp",
        }
    }
}

/// One kind of client.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// GETs of 1 B to 64 KiB on one connection kept open (in TCP mode it stays on one server).
    KeepAlive,
    /// The same, a new connection each.
    NewConnection,
    /// POSTs of 4 KiB to 2 MiB, a new connection each.
    Upload,
    /// GETs of 128 to 384 KiB read 4 KiB per 100 ms through a 4 KiB receive buffer.
    SlowReader,
    /// POSTs of 64 to 192 KiB written 4 KiB per 100 ms.
    SlowUpload,
    /// Anonymous FTP sessions downloading three files each over EPSV.
    FtpSession,
}

/// The loops of a run: 12 clients in all, few enough for Fulcrum, six real servers and the
/// clients to share two cores.
pub const LOOPS: [(Mode, Kind); 12] = [
    (Mode::Tcp, Kind::KeepAlive),
    (Mode::Tcp, Kind::NewConnection),
    (Mode::Tcp, Kind::Upload),
    (Mode::Tcp, Kind::SlowReader),
    (Mode::Http, Kind::KeepAlive),
    (Mode::Http, Kind::KeepAlive),
    (Mode::Http, Kind::NewConnection),
    (Mode::Http, Kind::Upload),
    (Mode::Http, Kind::SlowReader),
    (Mode::Http, Kind::SlowUpload),
    (Mode::Ftp, Kind::FtpSession),
    (Mode::Ftp, Kind::FtpSession),
];

/// A request or session that failed.
#[derive(Debug, Clone)]
pub struct Failure {
    pub mode: Mode,
    pub kind: Kind,
    pub start: Instant,
    pub end: Instant,
    /// The real server it reached, when something said so.
    pub server: Option<String>,
    pub error: String,
}

/// What every loop did.
#[derive(Default)]
pub struct Tally {
    ok: [AtomicU64; 3],
    failures: Mutex<Vec<Failure>>,
}

impl Tally {
    pub fn ok(&self, mode: Mode) -> u64 {
        self.ok[mode as usize].load(Relaxed)
    }

    pub fn failures(&self) -> Vec<Failure> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Failures no chaos window excuses, and the excused ones.
    pub fn judge(&self, windows: &Windows) -> (Vec<Failure>, Vec<Failure>) {
        self.failures().into_iter().partition(|f| !windows.excuses(f.server.as_deref(), f.start, f.end))
    }

    fn record(&self, mode: Mode, kind: Kind, start: Instant, server: Option<String>, result: anyhow::Result<()>) {
        match result {
            Ok(()) => {
                self.ok[mode as usize].fetch_add(1, Relaxed);
            }
            Err(e) => self.failures.lock().unwrap_or_else(|e| e.into_inner()).push(Failure { mode, kind, start, end: Instant::now(), server, error: format!("{e:#}") }),
        }
    }
}

/// Targets of the loops.
#[derive(Debug, Clone, Copy)]
pub struct Vips {
    pub tcp: SocketAddr,
    pub http: SocketAddr,
    pub ftp: SocketAddr,
}

/// Runs one loop until `deadline`; the request in flight then finishes (within `REQUEST_TIMEOUT`).
pub async fn run_loop(mode: Mode, kind: Kind, vips: Vips, seed: u64, deadline: Instant, tally: Arc<Tally>) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let vip = match mode {
        Mode::Tcp => vips.tcp,
        Mode::Http => vips.http,
        Mode::Ftp => vips.ftp,
    };
    let files = ftp_files();
    // A kept-alive connection, and the server its last response came from (TCP mode: the
    // server of every request on it).
    let mut kept: Option<(Http, Option<String>)> = None;
    while Instant::now() < deadline {
        let start = Instant::now();
        let mut server = None;
        let result = match kind {
            Kind::FtpSession => {
                let pick: Vec<(String, u64)> = (0..3).map(|_| files[rng.random_range(0..files.len())].clone()).collect();
                within(wire::ftp_session(vip, &pick, &mut server)).await
            }
            Kind::KeepAlive => {
                let req = Request { upload: false, size: rng.random_range(1..=64 << 10), keep_alive: true, pace: None };
                let (conn, known) = match kept.take() {
                    Some(k) => (Some(k.0), k.1),
                    None => (None, None),
                };
                // In HTTP mode each request picks its own server: an earlier answer says nothing.
                let pinned = if mode == Mode::Tcp { known } else { None };
                server = pinned.clone();
                let outcome = within(async {
                    let mut conn = match conn {
                        Some(c) => c,
                        None => Http::new(wire::connect(vip, None).await?),
                    };
                    let mut named = pinned.clone();
                    let r = conn.exchange(req, &mut named).await;
                    Ok((conn, r, named))
                })
                .await;
                match outcome {
                    Ok((conn, Ok(resp), _)) => {
                        if !resp.close {
                            kept = Some((conn, resp.server));
                        }
                        Ok(())
                    }
                    Ok((_, Err(e), named)) => {
                        server = server.or(named);
                        Err(e)
                    }
                    Err(e) => Err(e),
                }
            }
            _ => {
                let (upload, size, pace, rcvbuf) = match kind {
                    Kind::Upload => (true, log_uniform(&mut rng, 4 << 10, 2 << 20), None, None),
                    Kind::SlowReader => (false, rng.random_range(128 << 10..=384 << 10), Some(SLOW), Some(SLOW_RCVBUF)),
                    Kind::SlowUpload => (true, rng.random_range(64 << 10..=192 << 10), Some(SLOW), None),
                    _ => (false, rng.random_range(1..=64 << 10), None, None),
                };
                let req = Request { upload, size, keep_alive: false, pace };
                within(async {
                    let mut conn = Http::new(wire::connect(vip, rcvbuf).await?);
                    conn.exchange(req, &mut server).await.map(|_| ())
                })
                .await
            }
        };
        tally.record(mode, kind, start, server, result);
        tokio::time::sleep(PAUSE).await;
    }
}

/// `f` within `REQUEST_TIMEOUT`, a timeout being a failure.
async fn within<T>(f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!("no complete answer within {REQUEST_TIMEOUT:?}"),
    }
}

/// A size between `lo` and `hi` whose logarithm is uniform: as many small uploads as large.
fn log_uniform(rng: &mut impl Rng, lo: u64, hi: u64) -> u64 {
    let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
    (a + (b - a) * rng.random::<f64>()).exp().round() as u64
}
