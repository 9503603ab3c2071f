//! `kind = "http"`: GET a document over a kept-alive connection and expect a status and a text.
//!
//! The connection is reused between checks, as the paper's "KeepAlive: HTTP" check does, so a
//! check every few seconds does not cost the server a new connection each time.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::CheckError;
use crate::config::Health;

/// Largest body read when looking for the expected text.
const MAX_BODY: usize = 1 << 20;

#[derive(Default)]
pub struct HttpCheck {
    conn: Option<SendRequest<Empty<Bytes>>>,
}

impl HttpCheck {
    pub async fn check(&mut self, addr: SocketAddr, host: &str, cfg: &Health) -> Result<String, CheckError> {
        let result = self.request(addr, host, cfg).await;
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn request(&mut self, addr: SocketAddr, host: &str, cfg: &Health) -> Result<String, CheckError> {
        let reusable = self.conn.as_mut().is_some_and(|c| !c.is_closed());
        if !reusable {
            self.conn = Some(connect(addr).await?);
        }
        let Some(conn) = self.conn.as_mut() else { return Err(CheckError::NoConnection) };
        conn.ready().await.map_err(CheckError::ConnectionLost)?;
        let req = hyper::Request::get(&cfg.path)
            .header(hyper::header::HOST, host)
            .header(hyper::header::USER_AGENT, "fulcrum-health")
            .body(Empty::new())
            .map_err(CheckError::BadRequest)?;
        let resp = conn.send_request(req).await.map_err(CheckError::Request)?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(CheckError::Body)?
            .to_bytes();
        if status != cfg.expect_status {
            return Err(CheckError::Status { path: cfg.path.clone(), status, expected: cfg.expect_status });
        }
        if let Some(text) = cfg.expect_text.as_ref().filter(|t| !contains(&body, t.as_bytes())) {
            return Err(CheckError::TextNotFound { path: cfg.path.clone(), status, text: text.clone() });
        }
        Ok(format!("GET {} answered {status}", cfg.path))
    }
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>, CheckError> {
    let stream = TcpStream::connect(addr).await.map_err(CheckError::Connect)?;
    let _ = stream.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(CheckError::Handshake)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
