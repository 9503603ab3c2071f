//! `fulcrum backend`: a real server whose replies name it, for the tests, the demo and the lab.
//!
//! HTTP/1.1 with keep-alive (hyper), and half-closed connections served to the end, since the L4
//! half-close tests need a server that keeps answering after the client's FIN (nginx aborts).
//! `/index.html` carries a configurable text for health checks, `/name` the instance's name,
//! `/large` a deterministic bulk body streamed in chunks, `/site/NAME-SIZE.EXT` a page or image of
//! the lab's generated website, and `/stats` what this instance served.
// A real server answers in real time (its delays and timestamps); the paused clock is the
// balancer's (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod routes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use anyhow::Context;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Options of one real-server process (also the CLI args of `fulcrum backend`).
#[derive(Debug, Clone, clap::Args)]
pub struct BackendArgs {
    /// Address to listen on (ip:port). Port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Name this instance reports in `X-Served-By` and in `/name`.
    #[arg(long, default_value = "backend")]
    pub name: String,
    /// Text of /index.html; default "<html><body>TARGET {name}</body></html>".
    #[arg(long)]
    pub index_text: Option<String>,
    /// Size in bytes of /large.
    #[arg(long, default_value_t = 64 << 20)]
    pub large_size: u64,
    /// Listen backlog (small values make the kernel drop SYNs under load).
    #[arg(long, default_value_t = 1024)]
    pub backlog: u32,
    #[command(flatten)]
    pub degrade: Degrade,
}

/// Ways to make a real server slow, as the passive-measurement paper's `stress` runs did.
///
/// Each flag has a range, so no value can overflow the delay sum or tokio's semaphore (which
/// panics above its most permits): delays up to an hour, CPU work up to a minute a request.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Degrade {
    /// Pause this many ms after each accept (0 to 3600000): with a small backlog the accept
    /// queue overflows and the kernel drops SYNs.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=MAX_DELAY_MS))]
    pub slow_accept_ms: u64,
    /// Fixed delay per request, in ms (0 to 3600000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=MAX_DELAY_MS))]
    pub delay_ms: u64,
    /// Extra random delay per request, uniform in 0..this many ms (0 to 3600000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=MAX_DELAY_MS))]
    pub jitter_ms: u64,
    /// CPU work per request, in µs of busy computation (0 to 60000000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=60_000_000))]
    pub cpu_us: u64,
    /// Requests served at once (0: no limit, at most 1000000); others wait their turn, like a
    /// server with a fixed pool of worker threads.
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(..=1_000_000))]
    pub workers: usize,
    /// With `--workers`: how long a request may wait for a worker, in ms (0: no limit, at most
    /// 3600000); one that waits longer is answered 503, like a servlet engine that fails
    /// requests when overloaded.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(..=MAX_DELAY_MS))]
    pub queue_timeout_ms: u64,
}

/// The longest delay a degradation flag takes: an hour.
const MAX_DELAY_MS: u64 = 3_600_000;

/// What one instance serves and counts.
pub struct Instance {
    pub degrade: Degrade,
    pub name: String,
    pub index: String,
    pub large_size: u64,
    pub requests: AtomicU64,
    pub connections: AtomicU64,
    /// Requests being served now, and the most at once (what `--workers` bounds).
    pub in_service: AtomicU64,
    pub in_service_max: AtomicU64,
    /// Requests answered 503 because they waited too long for a worker.
    pub overloaded: AtomicU64,
    /// The worker pool of `--workers`.
    pub workers: Option<tokio::sync::Semaphore>,
}

/// Binds, then returns the bound address and the future that serves until `stop` fires.
pub async fn bind(args: BackendArgs, stop: CancellationToken) -> anyhow::Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let listener = listen(args.listen, args.backlog).with_context(|| format!("backend {}: cannot listen on {}", args.name, args.listen))?;
    let addr = listener.local_addr()?;
    let instance = Arc::new(Instance {
        index: args.index_text.clone().unwrap_or_else(|| format!("<html><body>TARGET {}</body></html>", args.name)),
        name: args.name,
        degrade: args.degrade.clone(),
        large_size: args.large_size,
        requests: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        in_service: AtomicU64::new(0),
        in_service_max: AtomicU64::new(0),
        overloaded: AtomicU64::new(0),
        workers: (args.degrade.workers > 0).then(|| tokio::sync::Semaphore::new(args.degrade.workers)),
    });
    Ok((addr, accept_loop(listener, instance, stop)))
}

/// Serves until `shutdown` resolves.
pub async fn serve(args: BackendArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let (addr, serving) = bind(args.clone(), stop.clone()).await?;
    tracing::info!(%addr, name = %args.name, "backend listening");
    // The bound address on standard output, so a parent that asked for port 0 learns the port.
    println!("{addr}");
    tokio::spawn(async move {
        shutdown.await;
        stop.cancel();
    });
    serving.await;
    Ok(())
}

fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    TcpListener::from_std(socket.into())
}

async fn accept_loop(listener: TcpListener, instance: Arc<Instance>, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("backend accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        instance.connections.fetch_add(1, Relaxed);
        if instance.degrade.slow_accept_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(instance.degrade.slow_accept_ms)).await;
        }
        let _ = stream.set_nodelay(true);
        let instance = instance.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| routes::route(instance.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new().half_close(true).serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests;
