//! Tracing (`[service.http.tracing]`) against a real OTLP/HTTP receiver: a Python server that
//! decodes each export with the opentelemetry-proto package's own protobuf classes
//! (tests/otlp/receiver.py; scripts/test installs the package), and nginx echoing the
//! `traceparent` and `tracestate` it got (`/headers`). Requests from curl over HTTP/1.1 and h2c.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::http::curl_get;
use crate::support::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

struct Receiver {
    addr: SocketAddr,
    spans: PathBuf,
    child: Child,
}

impl Receiver {
    fn start() -> Receiver {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let spans = scratch("otlp").join(format!("spans-{}.jsonl", addr.port()));
        let script = format!("{}/tests/otlp/receiver.py", env!("CARGO_MANIFEST_DIR"));
        let child = Command::new("python3")
            .args([script, addr.port().to_string(), spans.display().to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 with opentelemetry-proto (scripts/test installs it)");
        wait_until("the OTLP receiver", Duration::from_secs(20), || std::net::TcpStream::connect(addr).is_ok());
        Receiver { addr, spans, child }
    }

    /// Every line the receiver wrote so far; a line that is a decoding error fails the test.
    fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.spans).unwrap_or_default();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if let Some(e) = lines.iter().find(|l| l.get("error").is_some()) {
            panic!("the receiver refused an export: {e}");
        }
        lines
    }

    /// Waits for the span of trace `trace_id`.
    fn span(&self, trace_id: &str) -> Value {
        let mut found = None;
        wait_until(&format!("the span of trace {trace_id}"), Duration::from_secs(10), || {
            found = self.lines().into_iter().find(|s| s["trace_id"] == trace_id);
            found.is_some()
        });
        found.unwrap()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn service(server: SocketAddr, tracing: &str) -> String {
    format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.http]\nh2c = true\n{tracing}\n\
         [service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{server}\"\n"
    )
}

fn tracing(endpoint: &str, sample: f64) -> String {
    format!("[service.http.tracing]\nendpoint = \"{endpoint}\"\nsample = {sample:?}\nservice_name = \"edge proxy\"\ninterval = \"50ms\"\n")
}

/// GET /headers through Fulcrum with these extra request headers: what nginx got as
/// `traceparent` and `tracestate` (empty when it got none).
fn through(f: &Fulcrum, headers: &[&str], h2: bool) -> (String, String) {
    let mut args = Vec::new();
    for h in headers {
        args.extend(["-H", h]);
    }
    if h2 {
        args.push("--http2-prior-knowledge");
    }
    let (status, body) = curl_get(&format!("http://{}/headers", f.listen), &args);
    assert_eq!(status, 200, "{body}");
    let field = |name: &str| body.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or("").to_string();
    (field("traceparent"), field("tracestate"))
}

/// The four fields of a `traceparent` nginx got, checked to be one Fulcrum may send.
fn fields(traceparent: &str) -> [String; 4] {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent:?}");
    assert_eq!((parts[0], parts[1].len(), parts[2].len()), ("00", 32, 16), "{traceparent:?}");
    assert!(parts[1..].iter().all(|p| p.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())), "{traceparent:?}");
    assert!(parts[1].bytes().any(|b| b != b'0') && parts[2].bytes().any(|b| b != b'0'), "{traceparent:?}");
    [0, 1, 2, 3].map(|i| parts[i].to_string())
}

#[test]
fn a_traceparent_reaches_the_server_under_fulcrums_span_which_reaches_the_receiver() {
    let r = Receiver::start();
    let n = Nginx::start("traced", "TARGET");
    let f = Fulcrum::start(&service(n.addr, &tracing(&format!("http://{}/v1/traces", r.addr), 0.0)));
    for (h2, trace) in [(false, TRACE.to_string()), (true, TRACE.replace('4', "5"))] {
        let incoming = format!("traceparent: 00-{trace}-{PARENT}-01");
        let (traceparent, tracestate) = through(&f, &[&incoming, "tracestate: vendor=a,other=b"], h2);
        let [_, trace_id, parent, flags] = fields(&traceparent);
        assert_eq!((trace_id.as_str(), flags.as_str()), (trace.as_str(), "01"), "the same trace, sampled: {traceparent}");
        assert_ne!(parent, PARENT, "the server's parent is Fulcrum's span, not the client's");
        assert_eq!(tracestate, "vendor=a,other=b", "tracestate goes on as it came");

        let span = r.span(&trace);
        assert_eq!(span["span_id"], parent.as_str(), "the span the server was told is its parent: {span}");
        assert_eq!(span["parent_span_id"], PARENT, "{span}");
        assert_eq!(span["trace_state"], "vendor=a,other=b", "{span}");
        assert_eq!((&span["name"], &span["kind"], &span["scope"]), (&Value::from("GET"), &Value::from(2), &Value::from("fulcrum")), "a SERVER span: {span}");
        assert_eq!(span["resource"]["service.name"], "edge proxy");
        let a = &span["attributes"];
        assert_eq!(a["http.request.method"], "GET");
        assert_eq!(a["url.path"], "/headers");
        assert_eq!(a["http.response.status_code"], 200);
        assert_eq!(a["server.address"], "127.0.0.1");
        assert_eq!(a["server.port"], n.addr.port());
        assert_eq!(a["fulcrum.service"], "web");
        assert_eq!(a["network.protocol.version"], if h2 { "2" } else { "1.1" });
        assert!(a["fulcrum.pick"].as_str().is_some_and(|w| !w.is_empty()), "how the server was picked: {a}");
        let server_time = a["fulcrum.server.duration"].as_f64().unwrap();
        let whole = (span["end"].as_u64().unwrap() - span["start"].as_u64().unwrap()) as f64 / 1e9;
        assert!(server_time > 0.0 && server_time <= whole, "the server's time {server_time}s within the span's {whole}s");
    }
    let sent = |f: &Fulcrum| f.stats()["services"][0]["http"]["tracing_spans_sent"].clone();
    assert_eq!(sent(&f), 2);

    // A reload that leaves the tracing as it was keeps the exporter and its count; one that
    // changes it starts another.
    let applied = |f: &Fulcrum, n: usize| wait_until("the reload", Duration::from_secs(10), || f.log().matches("config applied").count() == n);
    let endpoint = format!("http://{}/v1/traces", r.addr);
    assert_eq!(f.log().matches("config applied").count(), 0, "a start is no reload");
    f.reload(&service(n.addr, &format!("access_log = \"json\"\n{}", tracing(&endpoint, 0.0))));
    applied(&f, 1);
    assert_eq!(sent(&f), 2, "the same exporter");
    f.reload(&service(n.addr, &tracing(&endpoint, 0.0).replace("edge proxy", "renamed")));
    applied(&f, 2);
    assert_eq!(sent(&f), 0, "a new exporter");
    let trace = TRACE.replace('4', "7");
    through(&f, &[&format!("traceparent: 00-{trace}-{PARENT}-01")], false);
    assert_eq!(r.span(&trace)["resource"]["service.name"], "renamed");
}

#[test]
fn sampling_is_parent_based_and_a_malformed_traceparent_starts_a_new_trace() {
    let r = Receiver::start();
    let n = Nginx::start("sampled", "TARGET");
    let endpoint = format!("http://{}/v1/traces", r.addr);

    // sample = 0: only a sampled parent is traced.
    let f = Fulcrum::start(&service(n.addr, &tracing(&endpoint, 0.0)));
    let (fresh, _) = through(&f, &[], false);
    let [_, fresh_trace, _, flags] = fields(&fresh);
    assert_eq!(flags, "00", "a new trace, not sampled at 0: {fresh}");
    let unsampled = format!("00-{TRACE}-{PARENT}-00");
    let (passed, _) = through(&f, &[&format!("traceparent: {unsampled}")], false);
    let [_, trace_id, parent, flags] = fields(&passed);
    assert_eq!((trace_id.as_str(), flags.as_str()), (TRACE, "00"), "the client's trace, still not sampled");
    assert_ne!(parent, PARENT);
    let (malformed, tracestate) = through(&f, &["traceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01", "tracestate: old=1"], true);
    let [_, new_trace, _, flags] = fields(&malformed);
    assert_eq!(flags, "00", "an all-zero trace id is no parent, so its sampled flag counts for nothing");
    assert_eq!(tracestate, "", "the tracestate of a trace not taken is dropped");
    // The marker: sampled by its parent. The spans go in the order the requests ended, so once
    // it is there, nothing before it was sent.
    let marker = TRACE.replace('4', "6");
    through(&f, &[&format!("traceparent: 00-{marker}-{PARENT}-01")], false);
    r.span(&marker);
    let traces: Vec<Value> = r.lines().iter().map(|s| s["trace_id"].clone()).collect();
    assert_eq!(traces, [Value::from(marker.as_str())], "only the sampled parent's span (not {fresh_trace}, {TRACE}, {new_trace})");
    drop(f);

    // sample = 1: a request that starts a trace is traced, malformed context or none.
    let f = Fulcrum::start(&service(n.addr, &tracing(&endpoint, 1.0)));
    for headers in
        [vec![], vec!["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01"], vec!["traceparent: ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]]
    {
        let (traceparent, _) = through(&f, &headers, false);
        let [_, trace_id, parent, flags] = fields(&traceparent);
        assert_eq!(flags, "01", "{headers:?}");
        assert_ne!(trace_id, TRACE, "a malformed traceparent starts a new trace: {headers:?}");
        let span = r.span(&trace_id);
        assert_eq!((&span["span_id"], &span["parent_span_id"]), (&Value::from(parent), &Value::from("")), "a root span: {span}");
    }
    // The client's unsampled parent wins over the ratio.
    through(&f, &[&format!("traceparent: {unsampled}")], false);
    through(&f, &[&format!("traceparent: 00-{marker}-{PARENT}-01")], false);
    wait_until("the second marker", Duration::from_secs(10), || r.lines().iter().filter(|s| s["trace_id"] == marker.as_str()).count() == 2);
    assert!(!r.lines().iter().any(|s| s["trace_id"] == TRACE), "an unsampled parent is not traced at sample = 1");
}

#[test]
fn without_tracing_the_headers_pass_untouched() {
    let n = Nginx::start("untraced", "TARGET");
    let f = Fulcrum::start(&service(n.addr, ""));
    let malformed = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    assert_eq!(through(&f, &[&format!("traceparent: {malformed}"), "tracestate: a=1"], false), (malformed.to_string(), "a=1".to_string()));
    assert_eq!(through(&f, &[], false), (String::new(), String::new()));
}

#[test]
fn spans_the_receiver_does_not_get_are_counted_and_said_once() {
    let n = Nginx::start("unreceived", "TARGET");
    // Nothing listens there.
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", free_port());
    let f = Fulcrum::start(&service(n.addr, &tracing(&endpoint, 1.0)));
    for _ in 0..3 {
        through(&f, &[], false);
    }
    wait_until("three spans dropped", Duration::from_secs(10), || f.stats()["services"][0]["http"]["tracing_spans_dropped"] == 3);
    let (status, metrics) = curl(f.admin, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    assert!(metrics.contains("fulcrum_tracing_spans_dropped_total{service=\"web\"} 3"), "{metrics}");
    assert!(metrics.contains("fulcrum_tracing_spans_sent_total{service=\"web\"} 0"), "{metrics}");
    let log = f.log();
    assert_eq!(log.matches("spans lost on their way to the OTLP receiver").count(), 1, "one warning a minute at most:\n{log}");
}
