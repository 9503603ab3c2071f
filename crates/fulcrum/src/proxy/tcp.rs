//! L4 forwarding between a client and a server: half close, idle timeouts, and splice for bulk.
//! With `fast_path = "adaptive"` it also counts the connection's direction turns and hands it
//! over for the sockmap once it has made enough small exchanges (`adaptive`); a connection that
//! has carried a full buffer (and splices) stays here.
//!
//! Each direction starts by copying through a small buffer, because splice costs more than a copy
//! for the few hundred bytes of a request; once a read fills the whole buffer the direction is
//! carrying bulk data and switches to splice(2) through a pipe (HAProxy's "splice-auto").
//!
//! An idle connection holds no buffer: a direction waits for its source to be readable first and
//! takes a buffer from the thread's pool only for the read and the write that follows, so a crowd
//! of idle connections costs their tasks and sockets, not 16 KiB a direction each. Waiting first
//! also saves the read that would find nothing on a server that was just connected to.
//!
//! The forward is one poll function over both directions and the idle timer, not a tree of
//! futures: its state is a few hundred bytes, and a wait registers the task in the socket's own
//! reader or writer slot instead of a waiter list.

use std::future::poll_fn;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::ReadHalf;

use super::adaptive::Turns;
use super::splice::{self, Pipe};

/// Size of the copy buffer a direction reads into; a read that fills it switches to splice.
const COPY_BUF: usize = 16 * 1024;

/// How a connection pair is forwarded.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub half_close: bool,
    /// Longest wait for the client when no byte moved either way.
    pub client_timeout: Duration,
    /// Longest wait for the server when no byte moved either way.
    pub server_timeout: Duration,
    pub splice: bool,
    /// Direction turns of small exchanges after which `forward` hands the connection back for
    /// the sockmap (`Outcome::Promote`, `fast_path = "adaptive"`); 0: never.
    pub promote_after: u32,
}

/// How `forward` ended, with the bytes moved client to server and server to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Both directions ended (half close), or either did (no half close).
    Closed(u64, u64),
    /// The connection has made `promote_after` turns of small exchanges: nothing is held in
    /// Fulcrum, and the caller moves the pair into the sockmap (`adaptive`).
    Promote(u64, u64),
}

impl Outcome {
    /// The bytes moved client to server and server to client, however it ended.
    pub fn totals(self) -> (u64, u64) {
        match self {
            Outcome::Closed(up, down) | Outcome::Promote(up, down) => (up, down),
        }
    }
}

/// Byte counters a forward adds to as it goes, so live stats see long transfers progress.
#[derive(Clone, Copy)]
pub struct Meters<'a> {
    /// Client to server.
    pub bytes_in: &'a AtomicU64,
    /// Server to client.
    pub bytes_out: &'a AtomicU64,
}

/// Forwards until both directions end (half close) or either does (no half close), or until
/// the connection has shown itself a long run of small exchanges (`Options::promote_after`).
pub async fn forward(client: &mut TcpStream, server: &mut TcpStream, opts: Options, meters: Meters<'_>) -> io::Result<Outcome> {
    let (mut client_read, client_write) = client.split();
    let (mut server_read, server_write) = server.split();
    let (client, server) = (client_write.as_ref(), server_write.as_ref());
    let mut up = Direction::new(opts.splice);
    let mut down = Direction::new(opts.splice);
    let mut turns = Turns::default();
    let mut last = crate::clock::timer_now();
    let timer = tokio::time::sleep_until(last + idle_limit(&opts, false, false));
    tokio::pin!(timer);
    poll_fn(|cx| {
        let up_was = up.total;
        let down_was = down.total;
        let up_end = up.ended || ready_or_fail(up.poll(cx, &mut client_read, server, meters.bytes_in))?;
        let down_end = down.ended || ready_or_fail(down.poll(cx, &mut server_read, client, meters.bytes_out))?;
        // Pass a FIN on once; the other direction keeps flowing until it ends too. When both have
        // ended, the sockets close right after this and the close sends the FINs.
        if up_end && !up.ended {
            up.ended = true;
            if opts.half_close && !down_end {
                let _ = socket2::SockRef::from(server).shutdown(std::net::Shutdown::Write);
            }
        }
        if down_end && !down.ended {
            down.ended = true;
            if opts.half_close && !up_end {
                let _ = socket2::SockRef::from(client).shutdown(std::net::Shutdown::Write);
            }
        }
        if (up_end && down_end) || (!opts.half_close && (up_end || down_end)) {
            return Poll::Ready(Ok(Outcome::Closed(up.total, down.total)));
        }
        if up.total != up_was || down.total != down_was {
            last = crate::clock::timer_now();
            if opts.promote_after > 0 {
                // A direction that splices has carried a full buffer: bulk, which the sockmap
                // carries worse than splice.
                turns.observe(up.total != up_was, down.total != down_was, up.pipe.is_some() || down.pipe.is_some());
                // Both directions wait on their sources with nothing held: the kernel can take
                // over from here without reordering a byte.
                if turns.promote(opts.promote_after) && up.idle() && down.idle() {
                    return Poll::Ready(Ok(Outcome::Promote(up.total, down.total)));
                }
            }
        }
        // The timer is re-armed only when it fires, so the data path never touches the wheel.
        while timer.as_mut().poll(cx).is_ready() {
            let deadline = last + idle_limit(&opts, up.ended, down.ended);
            if deadline <= crate::clock::timer_now() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")));
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await
}

/// Whether a direction ended; its error ends the forward.
fn ready_or_fail(p: Poll<io::Result<()>>) -> io::Result<bool> {
    match p {
        Poll::Ready(Ok(())) => Ok(true),
        Poll::Ready(Err(e)) => Err(e),
        Poll::Pending => Ok(false),
    }
}

/// How long no byte may move: the client's timeout while the client may still send, the server's
/// while the server may.
pub(super) fn idle_limit(opts: &Options, up_ended: bool, down_ended: bool) -> Duration {
    match (up_ended, down_ended) {
        (false, false) => opts.client_timeout.min(opts.server_timeout),
        (true, _) => opts.server_timeout,
        (false, true) => opts.client_timeout,
    }
}

/// One direction's state between polls.
struct Direction {
    /// Bytes read and not yet all written: the buffer, how far it is written, how far filled.
    held: Option<(Box<[u8]>, usize, usize)>,
    /// Set once a read filled a whole buffer: this direction carries bulk and splices.
    pipe: Option<Pipe>,
    splice: bool,
    total: u64,
    /// End of stream seen and passed on.
    ended: bool,
}

impl Direction {
    fn new(splice: bool) -> Direction {
        Direction { held: None, pipe: None, splice, total: 0, ended: false }
    }

    /// Waiting for its source with nothing read and not yet written.
    fn idle(&self) -> bool {
        self.held.is_none() && self.pipe.as_ref().is_none_or(|p| p.pending == 0) && !self.ended
    }

    /// Moves bytes from `src` to `dst` until either must wait; ready at end of stream on `src`.
    fn poll(&mut self, cx: &mut Context<'_>, src: &mut ReadHalf<'_>, dst: &TcpStream, meter: &AtomicU64) -> Poll<io::Result<()>> {
        loop {
            ready!(self.poll_flush(cx, dst))?;
            // Readiness first, then a buffer: while the source is idle this direction holds none.
            ready!(src.as_ref().poll_read_ready(cx))?;
            let n = match &mut self.pipe {
                Some(pipe) => {
                    let fd = src.as_ref().as_raw_fd();
                    match src.as_ref().try_io(Interest::READABLE, || pipe.fill_from(fd)) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        // This socket pair cannot splice (a kernel without support): copy.
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            self.pipe = None;
                            continue;
                        }
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                None => {
                    // tokio's read forgets the readiness after a short read (the socket is empty)
                    // using the readiness it read before, so the next read waits for the kernel's
                    // next event instead of finding nothing, and no wakeup is lost.
                    let mut buf = buffers::get();
                    let mut filled = ReadBuf::new(&mut buf);
                    match Pin::new(&mut *src).poll_read(cx, &mut filled) {
                        Poll::Ready(Ok(())) => {
                            let n = filled.filled().len();
                            if n > 0 {
                                self.held = Some((buf, 0, n));
                            } else {
                                buffers::put(buf);
                            }
                            n
                        }
                        Poll::Ready(Err(e)) => {
                            buffers::put(buf);
                            return Poll::Ready(Err(e));
                        }
                        Poll::Pending => {
                            buffers::put(buf);
                            return Poll::Pending;
                        }
                    }
                }
            };
            if n == 0 {
                if let Some(p) = self.pipe.take() {
                    splice::recycle(p);
                }
                return Poll::Ready(Ok(()));
            }
            self.total += n as u64;
            meter.fetch_add(n as u64, Relaxed);
            if n == COPY_BUF && self.splice && self.pipe.is_none() {
                self.pipe = Pipe::get().ok();
            }
        }
    }

    /// Writes what was read; the buffer goes back to the pool once it is all written.
    fn poll_flush(&mut self, cx: &mut Context<'_>, dst: &TcpStream) -> Poll<io::Result<()>> {
        if let Some(pipe) = &mut self.pipe {
            let fd = dst.as_raw_fd();
            while pipe.pending > 0 {
                ready!(dst.poll_write_ready(cx))?;
                match dst.try_io(Interest::WRITABLE, || pipe.drain_to(fd)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        while let Some((buf, off, n)) = &mut self.held {
            if *off == *n {
                if let Some((buf, ..)) = self.held.take() {
                    buffers::put(buf);
                }
                break;
            }
            ready!(dst.poll_write_ready(cx))?;
            match dst.try_write(&buf[*off..*n]) {
                Ok(w) => *off += w,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for Direction {
    fn drop(&mut self) {
        if let Some((buf, ..)) = self.held.take() {
            buffers::put(buf);
        }
        if let Some(p) = self.pipe.take() {
            splice::recycle(p);
        }
    }
}

/// Copy buffers kept per thread: a short connection then costs no allocation and no zeroing.
mod buffers {
    use std::cell::RefCell;

    use super::COPY_BUF;

    // 32 x 16 KiB a thread: enough for bursts of short connections, small enough that memory
    // a crowd of long ones used goes back to the system when they leave.
    const KEEP: usize = 32;

    thread_local! {
        static FREE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    }

    pub fn get() -> Box<[u8]> {
        FREE.with(|f| f.borrow_mut().pop()).unwrap_or_else(|| vec![0u8; COPY_BUF].into_boxed_slice())
    }

    pub fn put(buf: Box<[u8]>) {
        FREE.with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < KEEP {
                f.push(buf);
            }
        });
    }
}
