//! The access log: one line per request, as text or JSON, written when the response has gone out
//! (when its body ends, or is dropped because the client left), under the `access` log target.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::config::{AccessLog, LogField, LogFormat, Piece};
use crate::live::access_log::AccessLogger;

/// The longest request header value (`Host`, `User-Agent`, `Referer`) a line keeps.
pub const MAX_HEADER_FIELD: usize = 256;

pub struct Record {
    /// The service's access log; `None` when it is off (nothing is then gathered).
    pub log: Option<Arc<AccessLogger>>,
    pub started: SystemTime,
    pub client: SocketAddr,
    pub service: String,
    pub pool: String,
    pub server: Option<SocketAddr>,
    pub method: String,
    pub path: String,
    pub version: &'static str,
    pub status: u16,
    /// Request body bytes, counted as they are forwarded.
    pub bytes_in: Arc<AtomicU64>,
    pub bytes_out: u64,
    pub queue: Duration,
    pub connect: Duration,
    pub response: Duration,
    /// With `access_log_why`: how the server was picked (`None` when no server was).
    pub why: Option<String>,
    /// With `request_id`: the request's id.
    pub request_id: Option<String>,
    /// Request headers, gathered only when the `log_format` names them.
    pub host: Option<String>,
    pub user_agent: Option<String>,
    pub referer: Option<String>,
    /// With `[service.http.tracing]`, a sampled request's span: finished and handed to the
    /// exporter when the record is dropped, as the line is written.
    pub trace: Option<Box<super::trace_context::Traced>>,
}

/// A field's value in a line.
enum Value<'a> {
    Text(Cow<'a, str>),
    Count(u64),
    Ms(f64),
    /// Not known for this request (no server, no id): `-` in text, `null` in JSON.
    Absent,
}

impl Record {
    fn value(&self, field: LogField) -> Value<'_> {
        fn optional(s: &Option<String>) -> Value<'_> {
            s.as_deref().map_or(Value::Absent, |s| Value::Text(Cow::Borrowed(s)))
        }
        let ms = |d: Duration| Value::Ms(d.as_secs_f64() * 1000.0);
        let text = |s: &str| Value::Text(Cow::Owned(s.to_string()));
        match field {
            LogField::Time => text(&humantime::format_rfc3339_millis(self.started).to_string()),
            LogField::Client => text(&self.client.to_string()),
            LogField::ClientIp => text(&self.client.ip().to_string()),
            LogField::ClientPort => Value::Count(u64::from(self.client.port())),
            LogField::Service => Value::Text(Cow::Borrowed(&self.service)),
            LogField::Pool => Value::Text(Cow::Borrowed(&self.pool)),
            LogField::Server => self.server.map_or(Value::Absent, |s| text(&s.to_string())),
            LogField::Method => Value::Text(Cow::Borrowed(&self.method)),
            LogField::Path => Value::Text(Cow::Borrowed(&self.path)),
            LogField::Version => Value::Text(Cow::Borrowed(self.version)),
            LogField::Status => Value::Count(u64::from(self.status)),
            LogField::BytesIn => Value::Count(self.bytes_in.load(Relaxed)),
            LogField::BytesOut => Value::Count(self.bytes_out),
            LogField::QueueMs => ms(self.queue),
            LogField::ConnectMs => ms(self.connect),
            LogField::ResponseMs => ms(self.response),
            LogField::TotalMs => ms(crate::clock::wall().duration_since(self.started).unwrap_or_default()),
            LogField::RequestId => optional(&self.request_id),
            LogField::Why => optional(&self.why),
            LogField::Host => optional(&self.host),
            LogField::UserAgent => optional(&self.user_agent),
            LogField::Referer => optional(&self.referer),
        }
    }

    /// The line `format` makes of this request: its text with each field's value, escaped as
    /// NGINX does (`"`, `\` and control characters as `\xHH`) so that a value a client chose
    /// cannot end the line or a quoted field early.
    fn text_line(&self, format: &LogFormat) -> String {
        let mut line = String::new();
        for piece in &format.pieces {
            match piece {
                Piece::Text(t) => line.push_str(t),
                Piece::Var(f) => match self.value(*f) {
                    Value::Text(t) => escape_into(&mut line, &t),
                    Value::Count(n) => line.push_str(&n.to_string()),
                    Value::Ms(ms) => line.push_str(&format!("{ms:.1}")),
                    Value::Absent => line.push('-'),
                },
            }
        }
        line
    }

    /// The JSON object of the fields `format` names, in its order.
    fn json_line(&self, format: &LogFormat) -> String {
        let mut line = String::from("{");
        for (i, &f) in format.fields().iter().enumerate() {
            let v = match self.value(f) {
                Value::Text(t) => serde_json::Value::from(t.into_owned()),
                Value::Count(n) => n.into(),
                Value::Ms(ms) => ms.into(),
                Value::Absent => serde_json::Value::Null,
            };
            if i > 0 {
                line.push(',');
            }
            line.push_str(&format!("\"{}\":{v}", f.name()));
        }
        line.push('}');
        line
    }

    /// Today's line, for a service without `log_format`.
    fn default_line(&self, format: AccessLog) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let server = self.server.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
        let time = humantime::format_rfc3339_millis(self.started);
        let bytes_in = self.bytes_in.load(Relaxed);
        match format {
            AccessLog::Off | AccessLog::Text => format!(
                "{time} {} {} {} {server} \"{} {}\" {} {bytes_in} {} queue={:.1}ms connect={:.1}ms response={:.1}ms{}{}",
                self.client,
                self.service,
                self.pool,
                self.method,
                self.path,
                self.status,
                self.bytes_out,
                ms(self.queue),
                ms(self.connect),
                ms(self.response),
                self.request_id.as_ref().map(|id| format!(" id={id}")).unwrap_or_default(),
                self.why.as_ref().map(|w| format!(" why=\"{w}\"")).unwrap_or_default(),
            ),
            AccessLog::Json => {
                let mut line = json!({
                    "time": time.to_string(), "client": self.client.to_string(), "service": self.service, "pool": self.pool,
                    "server": server, "method": self.method, "path": self.path, "status": self.status,
                    "bytes_in": bytes_in, "bytes_out": self.bytes_out,
                    "queue_ms": ms(self.queue), "connect_ms": ms(self.connect), "response_ms": ms(self.response),
                });
                if let Some(why) = &self.why {
                    line["why"] = why.as_str().into();
                }
                if let Some(id) = &self.request_id {
                    line["request_id"] = id.as_str().into();
                }
                line.to_string()
            }
        }
    }
}

fn escape_into(line: &mut String, value: &str) {
    for c in value.chars() {
        if c == '"' || c == '\\' || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                line.push_str(&format!("\\x{b:02X}"));
            }
        } else {
            line.push(c);
        }
    }
}

impl Record {
    /// Ends the request's span with what the record knows of its answer, and hands it over.
    fn end_span(&self, traced: super::trace_context::Traced) {
        let super::trace_context::Traced { tracer, mut span } = traced;
        span.end = crate::clock::wall();
        span.status = self.status;
        span.server = self.server;
        span.pool.clone_from(&self.pool);
        span.why.clone_from(&self.why);
        span.queue = self.queue;
        span.connect = self.connect;
        span.response = self.response;
        tracer.send(span);
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(traced) = self.trace.take() {
            self.end_span(*traced);
        }
        let Some(log) = self.log.take() else { return };
        let line = match (&log.template, log.format) {
            (Some(t), AccessLog::Json) => self.json_line(t),
            (Some(t), _) => self.text_line(t),
            (None, format) => self.default_line(format),
        };
        log.emit(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            log: None,
            started: SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_000_000_123),
            client: "127.0.0.9:4000".parse().unwrap(),
            service: "web".into(),
            pool: "api".into(),
            server: None,
            method: "GET".into(),
            path: "/a?b".into(),
            version: "HTTP/1.1",
            status: 502,
            bytes_in: Arc::new(AtomicU64::new(7)),
            bytes_out: 12,
            queue: Duration::from_micros(1500),
            connect: Duration::ZERO,
            response: Duration::ZERO,
            why: None,
            request_id: Some("r-1".into()),
            host: Some("a.test".into()),
            user_agent: Some("evil\"\n\\ agent".into()),
            referer: None,
            trace: None,
        }
    }

    #[test]
    fn a_format_fills_its_fields_and_a_client_cannot_break_the_line() {
        let r = record();
        let f: LogFormat = "{client_ip} {host} [{time}] \"{method} {path} {version}\" {status} {bytes_out} \"{referer}\" \"{user_agent}\" {queue_ms} {server} {{id={request_id}}}"
            .parse()
            .unwrap();
        assert_eq!(r.text_line(&f), "127.0.0.9 a.test [2026-11-18T11:06:40.123Z] \"GET /a?b HTTP/1.1\" 502 12 \"-\" \"evil\\x22\\x0A\\x5C agent\" 1.5 - {id=r-1}");
        let j: serde_json::Value = serde_json::from_str(&r.json_line(&f)).unwrap();
        assert_eq!(j["status"], 502);
        assert_eq!(j["user_agent"], "evil\"\n\\ agent");
        assert_eq!(j["server"], serde_json::Value::Null);
        assert!(r.json_line(&f).starts_with("{\"client_ip\":\"127.0.0.9\",\"host\":"), "the format's order");
    }
}
