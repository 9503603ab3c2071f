//! Forwarding between two byte streams when one is not a plain socket (a TLS session): what
//! `tcp::forward` does (half close, idle timeouts, live byte counts) through a buffer per
//! direction, without splice, since the bytes must pass through the TLS library. A direction
//! holds its buffer only while bytes are in it, so an idle connection keeps none.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::tcp::{Meters, Options, idle_limit};

const COPY_BUF: usize = 16 * 1024;

/// Forwards until both directions end (half close) or either does; returns the bytes moved
/// client to server and server to client.
pub async fn forward<C, S>(client: &mut C, server: &mut S, opts: Options, meters: Meters<'_>) -> io::Result<(u64, u64)>
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut up, mut down) = (Half::default(), Half::default());
    let mut last = crate::clock::timer_now();
    let timer = tokio::time::sleep_until(last + idle_limit(&opts, false, false));
    tokio::pin!(timer);
    poll_fn(|cx| {
        let moved = (up.total, down.total);
        let up_end = up.done || ready_or_fail(up.poll(cx, &mut *client, &mut *server, meters.bytes_in, opts.half_close))?;
        let down_end = down.done || ready_or_fail(down.poll(cx, &mut *server, &mut *client, meters.bytes_out, opts.half_close))?;
        up.done = up_end;
        down.done = down_end;
        if (up_end && down_end) || (!opts.half_close && (up_end || down_end)) {
            return Poll::Ready(Ok((up.total, down.total)));
        }
        if (up.total, down.total) != moved {
            last = crate::clock::timer_now();
        }
        while timer.as_mut().poll(cx).is_ready() {
            let deadline = last + idle_limit(&opts, up.done, down.done);
            if deadline <= crate::clock::timer_now() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")));
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await
}

fn ready_or_fail(p: Poll<io::Result<()>>) -> io::Result<bool> {
    match p {
        Poll::Ready(Ok(())) => Ok(true),
        Poll::Ready(Err(e)) => Err(e),
        Poll::Pending => Ok(false),
    }
}

/// One direction: read into the buffer, write it out, flush before waiting for more, and at the
/// source's end pass the end on (a FIN, or TLS close_notify then FIN).
#[derive(Default)]
struct Half {
    buf: Option<Box<[u8]>>,
    start: usize,
    end: usize,
    eof: bool,
    unflushed: bool,
    done: bool,
    total: u64,
}

impl Half {
    fn poll<R, W>(&mut self, cx: &mut Context<'_>, src: &mut R, dst: &mut W, meter: &AtomicU64, half_close: bool) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            if self.start < self.end {
                let buf = self.buf.as_deref().unwrap_or_default();
                let n = ready!(Pin::new(&mut *dst).poll_write(cx, &buf[self.start..self.end]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.start += n;
                self.total += n as u64;
                self.unflushed = true;
                meter.fetch_add(n as u64, Relaxed);
                continue;
            }
            if self.eof {
                ready!(Pin::new(&mut *dst).poll_flush(cx))?;
                if half_close {
                    ready!(Pin::new(&mut *dst).poll_shutdown(cx))?;
                }
                return Poll::Ready(Ok(()));
            }
            let buf = self.buf.get_or_insert_with(|| vec![0; COPY_BUF].into_boxed_slice());
            let mut read = ReadBuf::new(buf);
            match Pin::new(&mut *src).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    (self.start, self.end) = (0, n);
                    self.eof = n == 0;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Nothing to move: give the buffer back, and push out what the writer holds
                    // (a TLS session keeps records until flushed).
                    self.buf = None;
                    if self.unflushed {
                        ready!(Pin::new(&mut *dst).poll_flush(cx))?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
