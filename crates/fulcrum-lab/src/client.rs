//! The lab's clients: HTTP/1.1 requests over a fresh connection each (as the papers' clients and
//! `ab` made them), from a chosen loopback source address so that each simulated client is a
//! distinct host to Fulcrum. Three ways to drive them: closed loops that browse a list of links,
//! a fixed number of requests at a fixed concurrency (`ab -n -c`), and open-loop Poisson arrivals.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use indicatif::ProgressBar;
use rand::{Rng, SeedableRng};
use tokio::net::TcpSocket;

/// The server header the lab's real servers set.
const SERVED_BY: &str = "x-served-by";

/// One request to make.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub method: Method,
    pub path: String,
    pub body: Bytes,
}

impl Link {
    pub fn get(path: impl Into<String>) -> Link {
        Link { method: Method::GET, path: path.into(), body: Bytes::new() }
    }
}

/// What one request did.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it started, from the start of its run.
    pub at: Duration,
    /// Until the connection to Fulcrum was open.
    pub connect: Duration,
    /// Until the response head arrived.
    pub first_byte: Duration,
    /// Until the whole body arrived.
    pub total: Duration,
    pub status: u16,
    pub bytes: u64,
    /// The real server that answered (`X-Served-By`).
    pub server: Option<String>,
    pub error: Option<String>,
}

impl Sample {
    /// A request that started `at` into its run and has no result yet.
    fn started(at: Duration) -> Sample {
        Sample { at, connect: Duration::ZERO, first_byte: Duration::ZERO, total: Duration::ZERO, status: 0, bytes: 0, server: None, error: None }
    }

    pub fn ok(&self) -> bool {
        self.error.is_none() && (200..400).contains(&self.status)
    }
}

/// Makes one request on a new connection from `source`; never fails, an error is in the sample.
pub async fn request(source: IpAddr, target: SocketAddr, link: &Link, timeout: Duration, run_start: Instant) -> Sample {
    let started = Instant::now();
    let mut sample = Sample::started(started - run_start);
    let result = tokio::time::timeout(timeout, exchange(source, target, link, started, &mut sample)).await;
    sample.total = started.elapsed();
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => sample.error = Some(e.to_string()),
        Err(_) => sample.error = Some(format!("no complete response within {timeout:?}")),
    }
    sample
}

/// A new connection from `source` with its HTTP/1.1 handshake done; the task drives it.
async fn connect(source: IpAddr, target: SocketAddr) -> anyhow::Result<(Sender, tokio::task::JoinHandle<hyper::Result<()>>)> {
    let socket = if target.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.bind(SocketAddr::new(source, 0))?;
    let stream = socket.connect(target).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    Ok((sender, tokio::spawn(conn)))
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

fn build(target: SocketAddr, link: &Link) -> anyhow::Result<Request<Full<Bytes>>> {
    Ok(Request::builder()
        .method(link.method.clone())
        .uri(link.path.as_str())
        .header(hyper::header::HOST, target.to_string())
        .header(hyper::header::CONNECTION, "close")
        .body(Full::new(link.body.clone()))?)
}

/// GETs `path` from 127.0.0.1 and returns the body (the lab reads Fulcrum's admin API with it).
pub async fn fetch(target: SocketAddr, path: &str) -> anyhow::Result<Bytes> {
    let (mut sender, driver) = connect(IpAddr::from([127, 0, 0, 1]), target).await?;
    let resp = sender.send_request(build(target, &Link::get(path))?).await?;
    anyhow::ensure!(resp.status().is_success(), "GET {path} from {target}: {}", resp.status());
    let body = resp.into_body().collect().await?.to_bytes();
    drop(sender);
    let _ = driver.await;
    Ok(body)
}

async fn exchange(source: IpAddr, target: SocketAddr, link: &Link, started: Instant, sample: &mut Sample) -> anyhow::Result<()> {
    let (mut sender, driver) = connect(source, target).await?;
    sample.connect = started.elapsed();
    let resp = sender.send_request(build(target, link)?).await?;
    sample.first_byte = started.elapsed();
    sample.status = resp.status().as_u16();
    sample.server = resp.headers().get(SERVED_BY).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame?.data_ref() {
            sample.bytes += data.len() as u64;
        }
    }
    drop(sender);
    let _ = driver.await;
    Ok(())
}

/// When a closed-loop client stops.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// After this many requests.
    Requests(usize),
    /// When this much time has passed (the request in flight finishes).
    Elapsed(Duration),
}

/// A client that browses `links` in order, over and over, one request at a time.
#[derive(Debug, Clone)]
pub struct Browser {
    pub source: IpAddr,
    pub links: Vec<Link>,
}

/// Runs every browser at once until `until`; returns each browser's samples.
pub async fn browse(browsers: &[Browser], target: SocketAddr, until: Until, timeout: Duration, progress: &ProgressBar) -> Vec<Vec<Sample>> {
    let start = Instant::now();
    let tasks: Vec<_> = browsers
        .iter()
        .cloned()
        .map(|b| {
            let progress = progress.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                for link in b.links.iter().cycle() {
                    let done = match until {
                        Until::Requests(n) => samples.len() >= n,
                        Until::Elapsed(d) => start.elapsed() >= d,
                    };
                    if done || b.links.is_empty() {
                        break;
                    }
                    samples.push(request(b.source, target, link, timeout, start).await);
                    progress.inc(1);
                }
                samples
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap_or_default());
    }
    out
}

/// The same request sent again and again, from sources taken in turn.
#[derive(Clone)]
pub struct Traffic<'a> {
    pub sources: &'a [IpAddr],
    pub target: SocketAddr,
    pub link: &'a Link,
    /// For one whole request.
    pub timeout: Duration,
}

/// `total` requests with `concurrency` in flight (`ab -n total -c concurrency`). Returns the
/// samples and the wall time.
pub async fn fixed(total: usize, concurrency: usize, traffic: Traffic<'_>, progress: &ProgressBar) -> (Vec<Sample>, Duration) {
    let Traffic { sources, target, link, timeout } = traffic;
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let sources: Arc<[IpAddr]> = sources.into();
    let tasks: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (next, sources, link, progress) = (next.clone(), sources.clone(), link.clone(), progress.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= total {
                        return samples;
                    }
                    samples.push(request(sources[i % sources.len()], target, &link, timeout, start).await);
                    progress.inc(1);
                }
            })
        })
        .collect();
    let mut out = Vec::with_capacity(total);
    for t in tasks {
        out.extend(t.await.unwrap_or_default());
    }
    (out, start.elapsed())
}

/// Open-loop load: arrivals with exponential gaps at `rate` per second for `duration`, each one
/// request from the next source in turn, at most `max_in_flight` at once (an arrival beyond that
/// is recorded as failed, not silently dropped). Seeded, so a run can be repeated.
pub async fn poisson(rate: f64, duration: Duration, seed: u64, traffic: Traffic<'_>, max_in_flight: usize) -> Vec<Sample> {
    let Traffic { sources, target, link, timeout } = traffic;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let start = Instant::now();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let mut refused = Vec::new();
    let mut at = 0.0f64;
    let mut i = 0usize;
    loop {
        let gap: f64 = -(1.0 - rng.random::<f64>()).ln() / rate;
        at += gap;
        if at >= duration.as_secs_f64() {
            break;
        }
        tokio::time::sleep_until((start + Duration::from_secs_f64(at)).into()).await;
        let source = sources[i % sources.len()];
        i += 1;
        if in_flight.load(Relaxed) >= max_in_flight {
            refused.push(Sample { error: Some(format!("client limit of {max_in_flight} requests in flight")), ..Sample::started(start.elapsed()) });
            continue;
        }
        in_flight.fetch_add(1, Relaxed);
        let (link, in_flight) = (link.clone(), in_flight.clone());
        tasks.push(tokio::spawn(async move {
            let s = request(source, target, &link, timeout, start).await;
            in_flight.fetch_sub(1, Relaxed);
            s
        }));
    }
    let mut out = refused;
    for t in tasks {
        if let Ok(s) = t.await {
            out.push(s);
        }
    }
    out.sort_by_key(|s| s.at);
    out
}

/// The simulated clients' addresses: 127.0.0.11, 127.0.0.12, ...
pub fn sources(n: usize) -> Vec<IpAddr> {
    (0..n).map(|i| IpAddr::from([127, 0, 0, 11 + i as u8])).collect()
}
