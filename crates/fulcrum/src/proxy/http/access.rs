//! The access log: one line per request, as text or JSON, written when the response has gone out
//! (when its body ends, or is dropped because the client left), under the `access` log target.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use serde_json::json;

use crate::config::AccessLog;

pub struct Record {
    pub format: AccessLog,
    pub started: SystemTime,
    pub client: SocketAddr,
    pub service: String,
    pub pool: String,
    pub server: Option<SocketAddr>,
    pub method: String,
    pub path: String,
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
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.format == AccessLog::Off {
            return;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let server = self.server.map(|s| s.to_string()).unwrap_or_else(|| "-".into());
        let time = humantime::format_rfc3339_millis(self.started);
        let bytes_in = self.bytes_in.load(Relaxed);
        match self.format {
            AccessLog::Off => {}
            AccessLog::Text => tracing::info!(
                target: "access",
                "{time} {} {} {} {server} \"{} {}\" {} {bytes_in} {} queue={:.1}ms connect={:.1}ms response={:.1}ms{}{}",
                self.client, self.service, self.pool, self.method, self.path, self.status, self.bytes_out,
                ms(self.queue), ms(self.connect), ms(self.response),
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
                tracing::info!(target: "access", "{line}")
            }
        }
    }
}
