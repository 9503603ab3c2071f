//! When a request that failed on its way to a server may be sent again. Only two cases are safe
//! (RFC 9110 section 9.2.2, and what HAProxy and hyper's own pool do):
//! - the request was never written: the reused connection was found closed before use, and
//!   the client (hyper's or `origin`) hands the request back; it can go anywhere, at no cost of
//!   an attempt;
//! - the request is idempotent, its body is wholly in hand (none, or read whole ahead: see
//!   `body.rs`), and the reused connection was closed by the server as the request went out (a
//!   keep-alive race): it is rebuilt and sent again, as a retry.
//!
//! Anything else (a body streamed past the read-ahead, a new connection broke, a non-idempotent
//! method) is the client's answer: 502. `[service.http.retry]` sends an idempotent request whose
//! body is in hand to another server after an answer or failure it names ([`Replay::again`]).

use hyper::{HeaderMap, Method, Request, Uri, Version};

use super::body::ProxyBody;
use super::origin;

/// Why a send failed: in hyper's client, or on the own HTTP/1.1 path.
#[derive(Debug, thiserror::Error)]
pub enum Broke {
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    #[error(transparent)]
    Own(#[from] origin::Failed),
}

impl Broke {
    /// The connection closed before any of the response: on a reused connection, the
    /// keep-alive race.
    fn closed_early(&self) -> bool {
        match self {
            Broke::Hyper(e) => e.is_incomplete_message(),
            Broke::Own(e) => matches!(e, origin::Failed::Closed),
        }
    }
}

/// What a request needs to be sent again, kept only for requests that may be.
pub struct Replay {
    template: Option<(Method, Uri, Version, HeaderMap, ProxyBody)>,
}

/// What to do after a send failed.
pub enum Next {
    /// Never written: send it again, on this server or another.
    Unsent(Request<ProxyBody>),
    /// Rebuilt after a keep-alive race: send it again if an attempt is left.
    Retry(Request<ProxyBody>, Broke),
    Fail(Broke),
}

impl Replay {
    /// `idempotent`: the request's method is; its body must also be wholly in hand.
    pub fn of(req: &Request<ProxyBody>, idempotent: bool) -> Self {
        let body = if idempotent { req.body().replica() } else { None };
        Replay { template: body.map(|b| (req.method().clone(), req.uri().clone(), req.version(), req.headers().clone(), b)) }
    }

    /// After a send failed with `error`; `unsent` is the request handed back when not a byte of
    /// it was written.
    pub fn after(&self, unsent: Option<Request<ProxyBody>>, error: Broke, reused: bool) -> Next {
        if let (Some(req), true) = (unsent, reused) {
            return Next::Unsent(req);
        }
        match self.again() {
            Some(again) if reused && error.closed_early() => Next::Retry(again, error),
            _ => Next::Fail(error),
        }
    }

    /// The request once more, when it may be sent again (`[service.http.retry]`).
    pub fn again(&self) -> Option<Request<ProxyBody>> {
        let (method, uri, version, headers, body) = self.template.as_ref()?;
        let mut again = Request::new(body.replica()?);
        *again.method_mut() = method.clone();
        *again.uri_mut() = uri.clone();
        *again.version_mut() = *version;
        *again.headers_mut() = headers.clone();
        Some(again)
    }
}
