//! `kind = "http"` and `kind = "grpc"`: a request over a kept-alive connection, in the protocol
//! the pool speaks to its servers (HTTP/1.1, or HTTP/2 for `protocol = "h2"`) and in TLS when the
//! pool has `server_tls`, so a check tests what the traffic will use.
//!
//! The connection is reused between checks, as the paper's "KeepAlive: HTTP" check does, so a
//! check every few seconds does not cost the server a new connection each time.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::either::Either;

use super::CheckError;
use super::grpc;
use super::target::Target;
use crate::config::{Health, HealthKind};

/// Largest body read when looking for the expected text.
const MAX_BODY: usize = 1 << 20;

enum Conn {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    fn is_closed(&self) -> bool {
        match self {
            Conn::H1(c) => c.is_closed(),
            Conn::H2(c) => c.is_closed(),
        }
    }

    async fn send(&mut self, req: hyper::Request<Full<Bytes>>) -> Result<hyper::Response<hyper::body::Incoming>, CheckError> {
        match self {
            Conn::H1(c) => {
                c.ready().await.map_err(CheckError::ConnectionLost)?;
                c.send_request(req).await.map_err(CheckError::Request)
            }
            Conn::H2(c) => {
                c.ready().await.map_err(CheckError::ConnectionLost)?;
                c.send_request(req).await.map_err(CheckError::Request)
            }
        }
    }
}

#[derive(Default)]
pub struct HttpCheck {
    conn: Option<Conn>,
}

impl HttpCheck {
    pub async fn check(&mut self, target: &Target<'_>, cfg: &Health) -> Result<String, CheckError> {
        let result = self.request(target, cfg).await;
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn request(&mut self, target: &Target<'_>, cfg: &Health) -> Result<String, CheckError> {
        let reusable = self.conn.as_ref().is_some_and(|c| !c.is_closed());
        if !reusable {
            self.conn = Some(connect(target, cfg).await?);
        }
        let Some(conn) = self.conn.as_mut() else { return Err(CheckError::NoConnection) };
        if cfg.kind == HealthKind::Grpc {
            let resp = conn.send(grpc::request(target, &cfg.grpc_service)?).await?;
            return grpc::verdict(resp).await;
        }
        // HTTP/2 carries the host in the URI (`:authority`), HTTP/1.1 in Host.
        let host = target.host(cfg);
        let uri = if target.h2 { format!("{}://{host}{}", target.scheme(), cfg.path) } else { cfg.path.clone() };
        let method = hyper::Method::from_bytes(cfg.method.as_bytes()).map_err(|e| CheckError::BadRequest(e.into()))?;
        let mut req = hyper::Request::builder().method(method).uri(uri).header(hyper::header::USER_AGENT, "fulcrum-health");
        if !target.h2 {
            req = req.header(hyper::header::HOST, host);
        }
        let req = req.body(Full::new(Bytes::new())).map_err(CheckError::BadRequest)?;
        let resp = conn.send(req).await?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_BODY).collect().await.map_err(CheckError::Body)?.to_bytes();
        let request = || format!("{} {}", cfg.method, cfg.path);
        if status != cfg.expect_status {
            return Err(CheckError::Status { request: request(), status, expected: cfg.expect_status });
        }
        if let Some(text) = cfg.expect_text.as_ref().filter(|t| !super::contains(&body, t.as_bytes())) {
            return Err(CheckError::TextNotFound { request: request(), status, text: text.clone() });
        }
        Ok(format!("{} answered {status}", request()))
    }
}

/// Connects, handshakes TLS when the pool asks for it (within the check's timeout, which bounds
/// the whole check), and opens the HTTP connection whose driver runs on a task of its own.
async fn connect(target: &Target<'_>, cfg: &Health) -> Result<Conn, CheckError> {
    let stream = super::connect(target.addr, target.server.proxy_protocol).await?;
    let _ = stream.set_nodelay(true);
    let io = match target.tls {
        Some(origin) => Either::Right(origin.connect(stream, target.server.sni.as_ref(), &target.server.state.key.address, cfg.timeout).await.map_err(CheckError::Tls)?),
        None => Either::Left(stream),
    };
    let io = TokioIo::new(io);
    if target.h2 {
        let (send, conn) = http2::handshake(TokioExecutor::new(), io).await.map_err(CheckError::Handshake)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn::H2(send))
    } else {
        let (send, conn) = http1::handshake(io).await.map_err(CheckError::Handshake)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn::H1(send))
    }
}
