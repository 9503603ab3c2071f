//! A service's span exporter, built with the service (`[service.http.tracing]`): the spans of
//! sampled requests go to an OTLP/HTTP receiver (the OpenTelemetry Collector, Jaeger, Tempo...)
//! as protobuf (`application/x-protobuf`), in batches of `batch_size` or every `interval`,
//! whichever comes first.
//!
//! The exporter is a thread of its own with a one-thread runtime, as the access log's syslog
//! sender is a thread of its own: resolving the receiver's name, connecting and waiting for its
//! answer never hold a thread that moves traffic. Requests hand it finished spans through a
//! queue of `queue` spans; a span that finds it full is dropped and counted (`dropped`, logged
//! once a minute at most), as are the spans of a batch the receiver refused or did not answer
//! within `timeout` (no retry: a receiver that is down would otherwise hold the queue). The
//! connection to the receiver is kept alive between batches and opened again after a failure.
//!
//! A reload that changes nothing of the tracing keeps the running exporter; one that changes it
//! starts a new one, and the old one sends what it holds and ends when its last request has.
//! Spans still queued when the process exits are not sent.

pub mod otlp;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use tokio::sync::mpsc::{self, Receiver, Sender, error::TrySendError};

use super::losses::Losses;
use crate::config::{Http, OtlpEndpoint, Tracing};

/// Most bytes of a receiver's answer read (it is an `ExportTraceServiceResponse`, a few bytes
/// unless it reports a partial success); the rest is not read and the connection is closed.
const MAX_ANSWER: usize = 64 * 1024;

/// A finished request's span, as the request hands it to the exporter.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The span of the incoming `traceparent`; `None` for a trace Fulcrum started.
    pub parent_span_id: Option<[u8; 8]>,
    /// The incoming `tracestate`, when there was one of at most `MAX_TRACE_STATE` bytes.
    pub trace_state: Option<String>,
    pub start: SystemTime,
    pub end: SystemTime,
    pub method: String,
    pub path: String,
    /// `1.0`, `1.1` or `2`.
    pub version: &'static str,
    pub client: IpAddr,
    /// 0 when no answer was made (cannot happen for a finished request; kept out of the span).
    pub status: u16,
    /// The server that answered (or failed), when one was picked.
    pub server: Option<SocketAddr>,
    pub pool: String,
    /// How the server was picked, in `GET /api/explain/recent`'s words.
    pub why: Option<String>,
    pub queue: Duration,
    pub connect: Duration,
    /// The server's time: from the request sent to its response head.
    pub response: Duration,
}

/// Longest `tracestate` copied into a span (W3C Trace Context asks to propagate at least 512
/// characters); the header itself is passed on as it came, whatever its length.
pub const MAX_TRACE_STATE: usize = 512;

/// A service's tracing: its sampling and the queue to its exporter thread.
pub struct Tracer {
    /// Traces without a usable incoming context are sampled when the low 63 bits of their id are
    /// below this (OpenTelemetry's `TraceIdRatioBased`), so every instance that sees the same
    /// trace id decides alike.
    threshold: u64,
    spans: Sender<Span>,
    losses: Arc<Losses>,
    sent: Arc<AtomicU64>,
}

impl Tracer {
    /// The tracer `http` asks for; `None` without `[service.http.tracing]`. Starts the exporter
    /// thread (the receiver need not be up: the thread connects when it has spans to send).
    pub fn new(service: &str, http: &Http) -> std::io::Result<Option<Tracer>> {
        let Some(cfg) = &http.tracing else { return Ok(None) };
        let endpoint = cfg.endpoint().map_err(std::io::Error::other)?;
        let (spans, rx) = mpsc::channel(cfg.queue.max(1));
        let losses = Arc::new(Losses::new(service, "spans lost on their way to the OTLP receiver"));
        let sent = Arc::new(AtomicU64::new(0));
        let exporter = Exporter { cfg: cfg.clone(), service: service.to_string(), endpoint, losses: losses.clone(), sent: sent.clone(), conn: None };
        std::thread::Builder::new().name("fulcrum-otlp".into()).spawn(move || exporter.run(rx))?;
        let threshold = (cfg.sample.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
        Ok(Some(Tracer { threshold, spans, losses, sent }))
    }

    /// Whether `new` would build the same tracer for `http`: a reload that changes nothing of
    /// it keeps the running one (and its exporter).
    pub fn same(a: &Http, b: &Http) -> bool {
        a.tracing == b.tracing
    }

    /// Whether a trace started here (no usable parent) is sampled.
    pub fn samples(&self, trace_id: &[u8; 16]) -> bool {
        let mut low = [0u8; 8];
        low.copy_from_slice(&trace_id[8..]);
        (u64::from_be_bytes(low) >> 1) < self.threshold
    }

    /// Hands a finished span to the exporter, or counts it lost if the queue is full.
    pub fn send(&self, span: Span) {
        match self.spans.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.losses.lose(1, "the queue is full (the receiver is slower than the traffic)"),
            Err(TrySendError::Closed(_)) => self.losses.lose(1, "the exporter thread is gone"),
        }
    }

    /// Spans dropped: the queue full, or their batch refused or unanswered.
    pub fn dropped(&self) -> u64 {
        self.losses.count()
    }

    /// Spans the receiver took.
    pub fn sent(&self) -> u64 {
        self.sent.load(Relaxed)
    }
}

/// The exporter thread's state.
struct Exporter {
    cfg: Tracing,
    service: String,
    endpoint: OtlpEndpoint,
    losses: Arc<Losses>,
    sent: Arc<AtomicU64>,
    /// The kept-alive connection to the receiver.
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Exporter {
    fn run(mut self, rx: Receiver<Span>) {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => return tracing::error!(service = %self.service, "cannot start the span exporter: {e}"),
        };
        runtime.block_on(self.batches(rx));
    }

    /// Gathers spans into batches and sends each, until every sender is gone (the service was
    /// rebuilt with other tracing, or removed, and its last request ended): then sends what is
    /// left and ends.
    async fn batches(&mut self, mut rx: Receiver<Span>) {
        let size = self.cfg.batch_size.max(1);
        let mut batch = Vec::with_capacity(size.min(1024));
        loop {
            // Idle: nothing to send, no timer.
            let Some(first) = rx.recv().await else { return };
            batch.push(first);
            let deadline = crate::clock::timer_now() + self.cfg.interval;
            let mut closed = false;
            while batch.len() < size {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) => {
                        closed = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            let spans = std::mem::take(&mut batch);
            let n = spans.len() as u64;
            let body = prost::Message::encode_to_vec(&otlp::request(&self.cfg.service_name, &self.service, spans));
            match tokio::time::timeout(self.cfg.timeout, self.export(body)).await {
                Ok(Ok(())) => {
                    self.sent.fetch_add(n, Relaxed);
                }
                Ok(Err(why)) => {
                    self.conn = None;
                    self.losses.lose(n, &why);
                }
                Err(_) => {
                    self.conn = None;
                    let why = format!("{} did not answer within {}", self.cfg.endpoint, humantime::format_duration(self.cfg.timeout));
                    self.losses.lose(n, &why);
                }
            }
            if closed {
                return;
            }
        }
    }

    /// One export request: POSTs `body` over the kept connection (or a new one) and reads the
    /// answer; a status other than 2xx is a refusal.
    async fn export(&mut self, body: Vec<u8>) -> Result<(), String> {
        let mut sender = match self.conn.take() {
            // A kept connection the receiver closed meanwhile is not ready: open another.
            Some(mut s) => match s.ready().await {
                Ok(()) => s,
                Err(_) => self.connect().await?,
            },
            None => self.connect().await?,
        };
        let request = hyper::Request::post(&self.endpoint.path)
            .header(hyper::header::HOST, &self.endpoint.authority)
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("cannot make the export request: {e}"))?;
        let answer = sender.send_request(request).await.map_err(|e| format!("{}: {e}", self.cfg.endpoint))?;
        let status = answer.status();
        let read = Limited::new(answer.into_body(), MAX_ANSWER).collect().await;
        if !status.is_success() {
            let text = read.map(|b| String::from_utf8_lossy(&b.to_bytes()).chars().take(200).collect::<String>()).unwrap_or_default();
            return Err(format!("{} answered {status}: {}", self.cfg.endpoint, text.trim()));
        }
        if read.is_ok() {
            self.conn = Some(sender);
        }
        Ok(())
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let e = &self.endpoint;
        let stream = tokio::net::TcpStream::connect((e.host.as_str(), e.port)).await.map_err(|err| format!("cannot connect to {}: {err}", self.cfg.endpoint))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|err| format!("{}: {err}", self.cfg.endpoint))?;
        tokio::spawn(conn);
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracer(sample: f64) -> Tracer {
        let http = Http { tracing: Some(Tracing { sample, endpoint: "http://127.0.0.1:9/v1/traces".into(), ..Tracing::default() }), ..Http::default() };
        Tracer::new("web", &http).unwrap().unwrap()
    }

    #[test]
    fn the_sample_ratio_decides_by_the_trace_ids_low_bits() {
        let low = |n: u64| {
            let mut id = [0xabu8; 16];
            id[8..].copy_from_slice(&n.to_be_bytes());
            id
        };
        let (none, half, all) = (tracer(0.0), tracer(0.5), tracer(1.0));
        for n in [0, 1, u64::MAX / 2, u64::MAX / 2 + 2, u64::MAX] {
            assert!(!none.samples(&low(n)), "{n}");
            assert!(all.samples(&low(n)), "{n}");
        }
        assert!(half.samples(&low(u64::MAX / 2 - 2)));
        assert!(!half.samples(&low(u64::MAX / 2 + 2)));
    }

    #[test]
    fn a_span_that_finds_the_queue_full_is_dropped_and_counted() {
        // A receiver that takes the connection and never answers: the exporter holds one
        // batch of one span for a minute, the queue holds one more, the rest are dropped.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}/v1/traces", silent.local_addr().unwrap());
        let cfg = Tracing { endpoint, queue: 1, batch_size: 1, timeout: Duration::from_secs(60), ..Tracing::default() };
        let t = Tracer::new("web", &Http { tracing: Some(cfg), ..Http::default() }).unwrap().unwrap();
        for _ in 0..5 {
            t.send(span());
        }
        assert!(t.dropped() >= 3, "{} dropped", t.dropped());
        assert_eq!(t.sent(), 0);
    }

    fn span() -> Span {
        Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: Some([3; 8]),
            trace_state: Some("a=b".into()),
            start: SystemTime::UNIX_EPOCH + Duration::from_secs(1),
            end: SystemTime::UNIX_EPOCH + Duration::from_secs(2),
            method: "GET".into(),
            path: "/a".into(),
            version: "1.1",
            client: "127.0.0.9".parse().unwrap(),
            status: 503,
            server: Some("127.0.0.2:8080".parse().unwrap()),
            pool: "api".into(),
            why: None,
            queue: Duration::ZERO,
            connect: Duration::ZERO,
            response: Duration::from_millis(5),
        }
    }

    #[test]
    fn a_span_encodes_as_an_otlp_export_request() {
        let bytes = prost::Message::encode_to_vec(&otlp::request("edge", "web", vec![span()]));
        let back: otlp::ExportTraceServiceRequest = prost::Message::decode(&bytes[..]).unwrap();
        let s = &back.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!((s.trace_id.as_slice(), s.parent_span_id.as_slice(), s.name.as_str()), (&[1u8; 16][..], &[3u8; 8][..], "GET"));
        assert_eq!(s.end_time_unix_nano - s.start_time_unix_nano, 1_000_000_000);
        assert_eq!(s.status.as_ref().map(|st| st.code), Some(2), "a 5xx is an error");
        let attr = |k: &str| s.attributes.iter().find(|a| a.key == k).and_then(|a| a.value.clone()).and_then(|v| v.value);
        assert_eq!(attr("server.address"), Some(otlp::Value::String("127.0.0.2".into())));
        assert_eq!(attr("http.response.status_code"), Some(otlp::Value::Int(503)));
    }
}
