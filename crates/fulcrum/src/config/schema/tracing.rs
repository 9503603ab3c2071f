//! `[service.http.tracing]`: W3C Trace Context propagation and OpenTelemetry export of a span
//! per request (proxy/http/trace_context.rs reads and writes `traceparent`, live/tracer.rs
//! exports). Per service, as Envoy's `tracing` sits on each HTTP connection manager; the
//! table's presence turns it on.

use super::*;

/// `[service.http.tracing]`: each request gets a span, sampled parent-based (a request whose
/// `traceparent` is sampled is traced, one whose `traceparent` is not is not, one without a
/// usable `traceparent` by `sample`), and the server gets a `traceparent` naming Fulcrum's span
/// as its parent. Sampled spans go in batches to an OTLP/HTTP receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tracing {
    /// The OTLP/HTTP traces URL, `http://host:port/path` (the OpenTelemetry Collector's is
    /// `http://127.0.0.1:4318/v1/traces`). Plain HTTP: the receiver is a local collector or agent.
    #[serde(default = "defaults::tracing_endpoint")]
    pub endpoint: String,
    /// The share of requests without a usable incoming `traceparent` that are traced, 0 to 1.
    #[serde(default = "defaults::tracing_sample")]
    pub sample: f64,
    /// The resource's `service.name`: 1 to 128 visible ASCII characters or spaces.
    #[serde(default = "defaults::tracing_service_name")]
    pub service_name: String,
    /// Most spans in one export request, 1 to 8192.
    #[serde(default = "defaults::tracing_batch_size")]
    pub batch_size: usize,
    /// Longest a finished span waits before it is sent, 10ms to 1 minute.
    #[serde(default = "defaults::tracing_interval", with = "duration")]
    pub interval: Duration,
    /// Most finished spans waiting to be sent, 1 to 65536; a span that finds it full is dropped.
    #[serde(default = "defaults::tracing_queue")]
    pub queue: usize,
    /// Time for the receiver to answer an export request, 1ms to 1 minute.
    #[serde(default = "defaults::tracing_timeout", with = "duration")]
    pub timeout: Duration,
}

impl Default for Tracing {
    fn default() -> Self {
        Tracing {
            endpoint: defaults::tracing_endpoint(),
            sample: defaults::tracing_sample(),
            service_name: defaults::tracing_service_name(),
            batch_size: defaults::tracing_batch_size(),
            interval: defaults::tracing_interval(),
            queue: defaults::tracing_queue(),
            timeout: defaults::tracing_timeout(),
        }
    }
}

/// An `endpoint`, read: where to connect and what to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpEndpoint {
    /// The host as written, without IPv6 brackets: resolved by the exporter, off the traffic path.
    pub host: String,
    pub port: u16,
    /// The `Host` header: the URL's authority.
    pub authority: String,
    /// The path and query asked for.
    pub path: String,
}

impl Tracing {
    /// `endpoint`, read; the error says what is wrong with it.
    pub fn endpoint(&self) -> Result<OtlpEndpoint, String> {
        let uri: hyper::Uri = self.endpoint.parse().map_err(|e| format!("{:?} is not a URL: {e}", self.endpoint))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("{:?} is not an http:// URL (the receiver is spoken to in plain HTTP)", self.endpoint));
        }
        let authority = uri.authority().ok_or_else(|| format!("{:?} names no host", self.endpoint))?;
        if authority.as_str().contains('@') {
            return Err(format!("{:?} has user information, which is not sent", self.endpoint));
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("{:?} names no host", self.endpoint));
        }
        Ok(OtlpEndpoint {
            host: host.to_string(),
            port: authority.port_u16().unwrap_or(80),
            authority: authority.as_str().to_string(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }
}
