//! Idle client connections hold no hyper state. hyper keeps a read and a write buffer (8 KiB
//! each) and its connection state for as long as a connection lives; a crowd of idle keep-alive
//! clients would hold all of it for nothing. So the connection's driver runs hyper only while
//! the client is active: once hyper has answered every request, written and flushed the
//! answers, and asked for bytes the client has not sent, and that has lasted [`LINGER`], the
//! driver takes the socket back from hyper (`into_parts`), frees hyper, and waits for the
//! client's next bytes with no buffer at all; then it starts hyper again on the same socket.
//!
//! [`Activity`] is how the driver knows: the guard notes hyper's reads and writes, and every
//! answer is an [`Answer`], which counts the requests whose answer is not yet all written.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::Response;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::body::ProxyBody;

/// How long a connection stays with hyper after it went idle, so that a client sending request
/// after request never pays for a restart; at most a quarter of `head_timeout`.
pub const LINGER: Duration = Duration::from_millis(250);

/// What hyper is doing with a connection, as its guard and its answers see it. Touched only by
/// the connection's own task: the atomics are for `Send`, not for sharing between threads.
#[derive(Debug, Default)]
pub struct Activity {
    /// Requests whose answer has not been written whole.
    in_flight: AtomicU32,
    /// hyper asked for the client's next bytes between requests and there were none.
    waiting: AtomicBool,
    /// hyper wrote since it last flushed (its own buffer is empty only after a flush).
    unflushed: AtomicBool,
    /// Requests taken so far (HTTP/2's idle timeout sees a connection's progress by it).
    started: AtomicU64,
}

impl Activity {
    /// Nothing to read, nothing to write, nothing being answered.
    pub fn idle(&self) -> bool {
        self.in_flight.load(Relaxed) == 0 && self.waiting.load(Relaxed) && !self.unflushed.load(Relaxed)
    }
    /// Requests in flight now, and requests taken so far.
    pub fn requests(&self) -> (u32, u64) {
        (self.in_flight.load(Relaxed), self.started.load(Relaxed))
    }
    pub fn waiting(&self, waiting: bool) {
        self.waiting.store(waiting, Relaxed);
    }
    pub fn wrote(&self) {
        self.unflushed.store(true, Relaxed);
    }
    pub fn flushed(&self) {
        self.unflushed.store(false, Relaxed);
    }
}

/// A response body that counts as in flight until hyper has taken all of it (or dropped it).
pub struct Answer {
    body: ProxyBody,
    _in_flight: InFlight,
}

/// A request counted in flight from when hyper hands it over until its answer is written.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

impl InFlight {
    /// Counts a request in flight now, before its handler runs.
    pub fn count(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Relaxed);
        activity.started.fetch_add(1, Relaxed);
        InFlight(activity.clone())
    }

    /// The request's response, its body still counted until hyper is done with it.
    pub fn with(self, response: Response<ProxyBody>) -> Response<Answer> {
        response.map(|body| Answer { body, _in_flight: self })
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = super::body::BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// How a run of hyper ended.
pub enum Run<C> {
    /// The connection is over (closed, failed, upgraded, refused).
    Ended(Result<(), hyper::Error>),
    /// hyper has been idle for the linger: the connection, to take apart.
    Idle(C),
}

/// Runs hyper's connection until it ends, or until it has been idle for `linger` (never with
/// `None`: a connection that may not park).
pub async fn run<C>(mut conn: C, activity: &Activity, linger: Option<Duration>) -> Run<C>
where
    C: Future<Output = Result<(), hyper::Error>> + Unpin,
{
    // A connection that does not park runs to its end.
    let Some(linger) = linger else { return Run::Ended(conn.await) };
    // One timer, re-armed only when it fires, so a busy connection does not touch the wheel on
    // every request.
    let timer = tokio::time::sleep(linger);
    tokio::pin!(timer);
    let mut idle_since: Option<Instant> = None;
    let ended = poll_fn(|cx| {
        if let Poll::Ready(r) = Pin::new(&mut conn).poll(cx) {
            return Poll::Ready(Some(r));
        }
        if !activity.idle() {
            idle_since = None;
            return Poll::Pending;
        }
        let since = *idle_since.get_or_insert_with(crate::clock::timer_now);
        poll_lingered(timer.as_mut(), since, linger, cx).map(|()| None)
    })
    .await;
    match ended {
        Some(r) => Run::Ended(r),
        None => Run::Idle(conn),
    }
}

/// Ready once `linger` has passed since `since`, on a timer that is re-armed only when it fires:
/// a connection that stays busy never touches the timer wheel per request.
pub fn poll_lingered(mut timer: Pin<&mut tokio::time::Sleep>, since: Instant, linger: Duration, cx: &mut Context<'_>) -> Poll<()> {
    while timer.as_mut().poll(cx).is_ready() {
        if crate::clock::since(since) >= linger {
            return Poll::Ready(());
        }
        timer.as_mut().reset(since + linger);
    }
    Poll::Pending
}
