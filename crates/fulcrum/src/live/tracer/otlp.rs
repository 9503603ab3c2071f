//! The OTLP trace messages Fulcrum sends (`ExportTraceServiceRequest` and what it holds), as
//! `prost` structs with the field numbers of opentelemetry-proto's `trace/v1/trace.proto`,
//! `common/v1/common.proto`, `resource/v1/resource.proto` and
//! `collector/trace/v1/trace_service.proto`: only the fields Fulcrum fills.
//!
//! Why not the `opentelemetry-proto` crate: it depends on `opentelemetry` and
//! `opentelemetry_sdk` whatever features are chosen, an SDK compiled to use a dozen message
//! types. `prost` is in the build already (etcd's client), and protobuf's wire format lets a
//! sender leave out any field, so these few structs encode what a receiver decodes with the
//! full schema (the peers test decodes them with the `opentelemetry-proto` Python package).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Span;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub spans: Vec<OtlpSpan>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OtlpSpan {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
    #[prost(string, tag = "3")]
    pub trace_state: String,
    #[prost(bytes = "vec", tag = "4")]
    pub parent_span_id: Vec<u8>,
    #[prost(string, tag = "5")]
    pub name: String,
    #[prost(int32, tag = "6")]
    pub kind: i32,
    #[prost(fixed64, tag = "7")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(message, optional, tag = "15")]
    pub status: Option<Status>,
    /// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
    #[prost(fixed32, tag = "16")]
    pub flags: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(int32, tag = "3")]
    pub code: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 3, 4")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

/// `Span.SpanKind.SPAN_KIND_SERVER`: the span of a request Fulcrum received.
const KIND_SERVER: i32 = 2;
/// `Status.StatusCode.STATUS_CODE_ERROR`.
const STATUS_ERROR: i32 = 2;
/// The parent's context is known, and it came from another process (`Span.flags`).
const FLAGS_HAS_IS_REMOTE: u32 = 0x100;
const FLAGS_IS_REMOTE: u32 = 0x200;

fn attribute(key: &str, value: Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(value) }) }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The request's whole body: one resource (`service.name`), one scope (Fulcrum), the spans.
pub fn request(service_name: &str, service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    let resource = Resource { attributes: vec![attribute("service.name", Value::String(service_name.into()))] };
    let scope = InstrumentationScope { name: "fulcrum".into(), version: env!("CARGO_PKG_VERSION").into() };
    let spans = spans.into_iter().map(|s| span(service, s)).collect();
    ExportTraceServiceRequest { resource_spans: vec![ResourceSpans { resource: Some(resource), scope_spans: vec![ScopeSpans { scope: Some(scope), spans }] }] }
}

/// One request's span, named and described as OpenTelemetry's HTTP server conventions say
/// (`http.request.method`, `url.path`, `http.response.status_code`; an error for a 5xx), with
/// the server Fulcrum picked as `server.address` and `server.port` and Fulcrum's own figures
/// under `fulcrum.`.
fn span(service: &str, s: Span) -> OtlpSpan {
    let seconds = |d: Duration| Value::Double(d.as_secs_f64());
    let mut attributes = vec![
        attribute("http.request.method", Value::String(s.method.clone())),
        attribute("url.path", Value::String(s.path)),
        attribute("network.protocol.version", Value::String(s.version.into())),
        attribute("client.address", Value::String(s.client.to_string())),
        attribute("fulcrum.service", Value::String(service.into())),
    ];
    if s.status != 0 {
        attributes.push(attribute("http.response.status_code", Value::Int(i64::from(s.status))));
    }
    if !s.pool.is_empty() {
        attributes.push(attribute("fulcrum.pool", Value::String(s.pool)));
    }
    if let Some(server) = s.server {
        attributes.push(attribute("server.address", Value::String(server.ip().to_string())));
        attributes.push(attribute("server.port", Value::Int(i64::from(server.port()))));
        attributes.push(attribute("fulcrum.queue.duration", seconds(s.queue)));
        attributes.push(attribute("fulcrum.connect.duration", seconds(s.connect)));
        attributes.push(attribute("fulcrum.server.duration", seconds(s.response)));
    }
    if let Some(why) = s.why {
        attributes.push(attribute("fulcrum.pick", Value::String(why)));
    }
    let status = (s.status >= 500).then(|| Status { message: String::new(), code: STATUS_ERROR });
    OtlpSpan {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        trace_state: s.trace_state.unwrap_or_default(),
        parent_span_id: s.parent_span_id.map(|p| p.to_vec()).unwrap_or_default(),
        name: s.method,
        kind: KIND_SERVER,
        start_time_unix_nano: unix_nanos(s.start),
        end_time_unix_nano: unix_nanos(s.end),
        attributes,
        status,
        flags: if s.parent_span_id.is_some() { FLAGS_HAS_IS_REMOTE | FLAGS_IS_REMOTE } else { FLAGS_HAS_IS_REMOTE },
    }
}
