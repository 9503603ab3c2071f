//! One admin API request, over the control socket or to the admin listener: HTTP/1.1 through
//! hyper's connection API, a connection per request, as a script's `curl` would make it.
//!
//! Errors say what to do about them: a socket that is not there (is Fulcrum running, is
//! `[admin] socket` set?), one the user may not open (its permissions are the authentication),
//! a listener that refuses the token.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// The most of an answer read: `/api/stats` of a large config is a few MiB.
const MOST_ANSWER: usize = 64 << 20;
/// How long a request may take, a reload's health round included.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where the admin API is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// The control socket: no credentials, its file permissions decide.
    Socket(PathBuf),
    /// The admin listener at `authority` (`host:port`), with a bearer token when it asks for one.
    Listener { authority: String, token: Option<String> },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Socket(path) => write!(f, "control socket {}", path.display()),
            Target::Listener { authority, .. } => write!(f, "admin listener http://{authority}"),
        }
    }
}

/// What the API answered: its status and body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON, or as a JSON string when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&self.body).into_owned()))
    }
}

/// Sends one request: `body` as JSON for a change (an empty object when `None`).
pub async fn request(target: &Target, method: &str, path: &str, body: Option<serde_json::Value>) -> anyhow::Result<Answer> {
    tokio::time::timeout(TIMEOUT, send(target, method, path, body)).await.map_err(|_| anyhow::anyhow!("{target} did not answer within {}s", TIMEOUT.as_secs()))?
}

async fn send(target: &Target, method: &str, path: &str, body: Option<serde_json::Value>) -> anyhow::Result<Answer> {
    let changing = method != "GET";
    let mut req = Request::builder().method(method).uri(path);
    match target {
        Target::Socket(_) => req = req.header(HOST, "localhost"),
        Target::Listener { authority, token } => {
            req = req.header(HOST, authority.as_str());
            if let Some(token) = token {
                req = req.header(AUTHORIZATION, format!("Bearer {token}"));
            }
        }
    }
    if changing {
        req = req.header(CONTENT_TYPE, "application/json");
    }
    let text = match (changing, body) {
        (_, Some(b)) => b.to_string(),
        (true, None) => "{}".to_string(),
        (false, None) => String::new(),
    };
    let req = req.body(Full::new(Bytes::from(text)))?;
    match target {
        Target::Socket(path) => {
            let stream = tokio::net::UnixStream::connect(path).await.map_err(|e| socket_error(path, &e))?;
            exchange(stream, req, target).await
        }
        Target::Listener { authority, .. } => {
            let stream = tokio::net::TcpStream::connect(authority.as_str()).await.map_err(|e| anyhow::anyhow!("cannot connect to the {target}: {e}"))?;
            exchange(stream, req, target).await
        }
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(stream: S, req: Request<Full<Bytes>>, target: &Target) -> anyhow::Result<Answer> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn);
    let res = sender.send_request(req).await.map_err(|e| anyhow::anyhow!("the {target} closed the request: {e}"))?;
    let status = res.status().as_u16();
    let body = Limited::new(res.into_body(), MOST_ANSWER).collect().await.map_err(|e| anyhow::anyhow!("reading the answer of the {target}: {e}"))?.to_bytes();
    driver.abort();
    Ok(Answer { status, body })
}

/// Why the control socket could not be opened, with what to check.
fn socket_error(path: &std::path::Path, e: &std::io::Error) -> anyhow::Error {
    let shown = path.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow::anyhow!("no control socket at {shown}: is Fulcrum running with [admin] socket = \"{shown}\"? (or give --socket, --config or --url)")
        }
        std::io::ErrorKind::PermissionDenied => {
            anyhow::anyhow!("permission denied on the control socket {shown}: run as its owner or a member of its group ([admin] socket_mode, socket_group)")
        }
        std::io::ErrorKind::ConnectionRefused => anyhow::anyhow!("nothing serves the control socket {shown}: the Fulcrum that made it has stopped"),
        _ => anyhow::anyhow!("cannot connect to the control socket {shown}: {e}"),
    }
}
