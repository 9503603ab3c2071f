//! The one body type of HTTP mode, both ways: a client's request body on its way to a server
//! (with the first chunk possibly read ahead), a server's response on its way to a client (which
//! gives its lent connection back when it ends, holds the request's place on the server until
//! then, and writes the access-log line when dropped), or a short text Fulcrum answers itself. An enum rather than a boxed trait object: no allocation per
//! request for the body.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use hyper::client::conn::http1::SendRequest;

use super::access::Record;
use super::idle::Lent;
use crate::proxy::dispatch::Place;

pub enum ProxyBody {
    Empty,
    Text(Option<Bytes>),
    /// A client's body, counted into `bytes`, with a frame already read in front of it.
    Request { first: Option<Frame<Bytes>>, rest: Incoming, bytes: Arc<AtomicU64> },
    /// A server's response body; `place` holds the request's place on the server until the
    /// body has gone out.
    Response {
        body: Incoming,
        lent: Option<Lent<SendRequest<ProxyBody>>>,
        record: Option<Box<Record>>,
        #[allow(dead_code, reason = "held for its Drop")]
        place: Option<Place>,
    },
}

impl ProxyBody {
    pub fn text(text: impl Into<Bytes>) -> Self {
        ProxyBody::Text(Some(text.into()))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Text(t) => Poll::Ready(t.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Request { first, rest, bytes } => {
                let frame = match first.take() {
                    Some(f) => Some(Ok(f)),
                    None => match Pin::new(rest).poll_frame(cx) {
                        Poll::Ready(f) => f,
                        Poll::Pending => return Poll::Pending,
                    },
                };
                if let Some(Ok(Some(d))) = frame.as_ref().map(|f| f.as_ref().map(|f| f.data_ref())) {
                    bytes.fetch_add(d.len() as u64, Relaxed);
                }
                Poll::Ready(frame)
            }
            ProxyBody::Response { body, lent, record, .. } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(f))) => {
                        if let (Some(d), Some(r)) = (f.data_ref(), record.as_mut()) {
                            r.bytes_out += d.len() as u64;
                        }
                    }
                    Poll::Ready(Some(Err(_))) => {
                        // A broken response: its connection is not reused.
                        lent.take();
                    }
                    Poll::Ready(None) => {
                        if let Some(p) = lent.take() {
                            p.release();
                        }
                    }
                    Poll::Pending => {}
                }
                if body.is_end_stream()
                    && let Some(p) = lent.take()
                {
                    p.release();
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Text(t) => t.is_none(),
            ProxyBody::Request { first, rest, .. } => first.is_none() && rest.is_end_stream(),
            ProxyBody::Response { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Text(t) => SizeHint::with_exact(t.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Request { first: None, rest, .. } => rest.size_hint(),
            ProxyBody::Request { .. } => SizeHint::default(),
            ProxyBody::Response { body, .. } => body.size_hint(),
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // A response with no body (204, HEAD, length 0) is never polled: its connection is
        // still good for the next request.
        if let ProxyBody::Response { body, lent, .. } = self
            && body.is_end_stream()
            && let Some(p) = lent.take()
        {
            p.release();
        }
    }
}
