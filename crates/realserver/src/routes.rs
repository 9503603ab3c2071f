//! The backend's routes. Bodies are either small and whole, or streamed in chunks (`/large`,
//! `/bytes/N`) so a 64 MiB body never sits in memory.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};

use super::Instance;

type Body = BoxBody<Bytes, Infallible>;

const CHUNK: usize = 64 * 1024;
const MAX_BYTES: u64 = 1 << 30;

/// Byte `i` of every generated body: a pattern a client can check without a copy of the file.
pub fn pattern_byte(i: u64) -> u8 {
    (i % 251) as u8
}

pub async fn route(instance: Arc<Instance>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    instance.requests.fetch_add(1, Relaxed);
    // Held until the response head is built; a streamed body is sent without a worker.
    let _worker = match &instance.workers {
        Some(pool) => match instance.degrade.queue_timeout_ms {
            0 => pool.acquire().await.ok(),
            ms => match tokio::time::timeout(Duration::from_millis(ms), pool.acquire()).await {
                Ok(permit) => permit.ok(),
                Err(_) => {
                    instance.overloaded.fetch_add(1, Relaxed);
                    return Ok(text(&instance, StatusCode::SERVICE_UNAVAILABLE, "overloaded\n".into(), "text/plain"));
                }
            },
        },
        None => None,
    };
    let now = instance.in_service.fetch_add(1, Relaxed) + 1;
    instance.in_service_max.fetch_max(now, Relaxed);
    degrade(&instance.degrade).await;
    instance.in_service.fetch_sub(1, Relaxed);
    let path = req.uri().path().to_string();
    let resp = match (req.method().clone(), path.as_str()) {
        (Method::POST, _) => {
            let received = match req.into_body().collect().await {
                Ok(b) => b.to_bytes().len(),
                Err(_) => return Ok(text(&instance, StatusCode::BAD_REQUEST, "bad body".into(), "text/plain")),
            };
            let body = serde_json::json!({ "name": instance.name, "received": received }).to_string();
            text(&instance, StatusCode::OK, body, "application/json")
        }
        (Method::GET | Method::HEAD, "/" | "/index.html") => text(&instance, StatusCode::OK, instance.index.clone(), "text/html"),
        (Method::GET, "/name") => text(&instance, StatusCode::OK, format!("{}\n", instance.name), "text/plain"),
        (Method::GET, "/stats") => {
            let body = serde_json::json!({
                "name": instance.name,
                "requests": instance.requests.load(Relaxed),
                "connections": instance.connections.load(Relaxed),
                "max_in_service": instance.in_service_max.load(Relaxed),
                "overloaded": instance.overloaded.load(Relaxed),
            });
            text(&instance, StatusCode::OK, body.to_string(), "application/json")
        }
        (Method::GET, "/large") => stream(&instance, instance.large_size, "application/octet-stream"),
        (Method::GET, p) if p.starts_with("/bytes/") => match p["/bytes/".len()..].parse::<u64>() {
            Ok(n) if n <= MAX_BYTES => stream(&instance, n, "application/octet-stream"),
            _ => text(&instance, StatusCode::BAD_REQUEST, "size must be 0 to 1073741824 bytes".into(), "text/plain"),
        },
        (Method::GET, p) if p.starts_with("/site/") => match site_file(&p["/site/".len()..]) {
            Some((size, content_type)) => stream(&instance, size, content_type),
            None => text(&instance, StatusCode::NOT_FOUND, "site files are named NAME-SIZE.EXT".into(), "text/plain"),
        },
        (Method::GET, p) if p.starts_with("/slow/") => match p["/slow/".len()..].parse::<u64>() {
            Ok(ms) if ms <= 60_000 => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text(&instance, StatusCode::OK, format!("{}\n", instance.name), "text/plain")
            }
            _ => text(&instance, StatusCode::BAD_REQUEST, "delay must be 0 to 60000 ms".into(), "text/plain"),
        },
        _ => text(&instance, StatusCode::NOT_FOUND, "not found".into(), "text/plain"),
    };
    Ok(resp)
}

/// The configured per-request cost: a delay (fixed plus jitter) and busy CPU work.
async fn degrade(d: &super::Degrade) {
    let jitter = if d.jitter_ms > 0 { rand::random_range(0..d.jitter_ms) } else { 0 };
    if d.delay_ms + jitter > 0 {
        tokio::time::sleep(Duration::from_millis(d.delay_ms + jitter)).await;
    }
    if d.cpu_us > 0 {
        // Counted on the thread's own CPU clock, not the wall clock: a server under a CPU quota
        // (the lab's isolated servers) that is held back mid-request must still spend the whole
        // cost, or the quota would make each request cheaper instead of the server slower.
        let spent = || nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from);
        let until = spent() + Duration::from_micros(d.cpu_us);
        let mut x = 0u64;
        while spent() < until {
            for _ in 0..64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }
}

fn builder(instance: &Instance, status: StatusCode, content_type: &str) -> hyper::http::response::Builder {
    Response::builder().status(status).header("X-Served-By", &instance.name).header(header::CONTENT_TYPE, content_type)
}

fn text(instance: &Instance, status: StatusCode, body: String, content_type: &str) -> Response<Body> {
    builder(instance, status, content_type).body(Full::new(Bytes::from(body)).boxed()).unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// A site file's size and content type from its name, `NAME-SIZE.EXT`.
fn site_file(name: &str) -> Option<(u64, &'static str)> {
    let (stem, ext) = name.rsplit_once('.')?;
    let size: u64 = stem.rsplit_once('-')?.1.parse().ok()?;
    let content_type = match ext {
        "html" => "text/html",
        "css" => "text/css",
        "jpg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        _ => return None,
    };
    (size <= MAX_BYTES).then_some((size, content_type))
}

fn stream(instance: &Instance, len: u64, content_type: &str) -> Response<Body> {
    // Every chunk is a cheap slice of one period-aligned buffer, cut at the chunk's phase.
    let period: Bytes = (0..(CHUNK as u64 + 251)).map(pattern_byte).collect::<Vec<u8>>().into();
    let mut sent = 0u64;
    let frames = std::iter::from_fn(move || {
        if sent >= len {
            return None;
        }
        let n = (len - sent).min(CHUNK as u64) as usize;
        let phase = (sent % 251) as usize;
        sent += n as u64;
        Some(Ok(Frame::data(period.slice(phase..phase + n))))
    });
    builder(instance, StatusCode::OK, content_type)
        .header(header::CONTENT_LENGTH, len)
        .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames))))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}
