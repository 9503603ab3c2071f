//! L4 forwarding between a client and a server: half close, idle timeouts, and splice for bulk.
//!
//! Each direction starts by copying through a small buffer, because splice costs more than a copy
//! for the few hundred bytes of a request; once a read fills the whole buffer the direction is
//! carrying bulk data and switches to splice(2) through a pipe (HAProxy's "splice-auto").

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::splice::{self, Pipe};

/// Size of the copy buffer a direction starts with; a read that fills it switches to splice.
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
}

/// Byte counters a forward adds to as it goes, so live stats see long transfers progress.
pub struct Meters<'a> {
    /// Client to server.
    pub bytes_in: &'a AtomicU64,
    /// Server to client.
    pub bytes_out: &'a AtomicU64,
}

/// When the last byte moved in either direction; both directions' idle timers read it.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Relaxed);
    }
    fn deadline(&self, idle: Duration) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Relaxed)) + idle
    }
}

/// Forwards until both directions end (half close) or either does (no half close).
/// Returns the bytes moved client to server and server to client.
pub async fn forward(client: &TcpStream, server: &TcpStream, opts: Options, meters: Meters<'_>) -> io::Result<(u64, u64)> {
    let act = Activity { start: Instant::now(), last_ms: AtomicU64::new(0) };
    let up_done = AtomicBool::new(false);
    let down_done = AtomicBool::new(false);
    let up = Direction { src: client, dst: server, act: &act, meter: meters.bytes_in, splice: opts.splice, done: &up_done, other: &down_done };
    let down = Direction { src: server, dst: client, act: &act, meter: meters.bytes_out, splice: opts.splice, done: &down_done, other: &up_done };
    let both = async {
        if opts.half_close {
            tokio::try_join!(up.run_then_shutdown(), down.run_then_shutdown())
        } else {
            tokio::select! {
                r = up.run() => r.map(|n| (n, 0)),
                r = down.run() => r.map(|n| (0, n)),
            }
        }
    };
    tokio::select! {
        r = both => r,
        e = watchdog(&act, &opts, &up_done, &down_done) => Err(e),
    }
}

/// Fires when no byte moved either way for the timeout of the side still being waited on: the
/// client's while the client may still send, the server's while the server may. One timer per
/// connection, re-armed only when it fires, so the data path never touches the timer wheel.
async fn watchdog(act: &Activity, opts: &Options, up_done: &AtomicBool, down_done: &AtomicBool) -> io::Error {
    loop {
        let idle = match (up_done.load(Relaxed), down_done.load(Relaxed)) {
            (false, false) => opts.client_timeout.min(opts.server_timeout),
            (true, _) => opts.server_timeout,
            (false, true) => opts.client_timeout,
        };
        let deadline = act.deadline(idle);
        if deadline <= Instant::now() {
            return io::Error::new(io::ErrorKind::TimedOut, "idle timeout");
        }
        tokio::time::sleep_until(deadline).await;
    }
}

struct Direction<'a> {
    src: &'a TcpStream,
    dst: &'a TcpStream,
    act: &'a Activity,
    meter: &'a AtomicU64,
    splice: bool,
    /// Set at end of stream, so the watchdog stops waiting on this side.
    done: &'a AtomicBool,
    /// The opposite direction's `done`.
    other: &'a AtomicBool,
}

impl Direction<'_> {
    async fn run_then_shutdown(&self) -> io::Result<u64> {
        let n = self.run().await?;
        self.done.store(true, Relaxed);
        // Pass the FIN on; the other direction keeps flowing until it ends too. When it has ended
        // already, both sockets close right after this and the close sends the FIN.
        if !self.other.load(Relaxed) {
            let _ = socket2::SockRef::from(self.dst).shutdown(std::net::Shutdown::Write);
        }
        Ok(n)
    }

    /// Moves bytes until end of stream on `src`.
    async fn run(&self) -> io::Result<u64> {
        let mut total = 0u64;
        let mut buf = buffers::get();
        let mut pipe: Option<Pipe> = None;
        let result = loop {
            let moved = match pipe.as_mut() {
                Some(p) => self.splice_once(p).await,
                None => self.copy_once(&mut buf).await,
            };
            match moved {
                Ok(0) => break Ok(total),
                Ok(n) => {
                    total += n as u64;
                    self.meter.fetch_add(n as u64, Relaxed);
                    self.act.touch();
                    if pipe.is_none() && n == buf.len() && self.splice {
                        pipe = Pipe::get().ok();
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && pipe.is_some() => {
                    // This socket pair cannot splice (e.g. a kernel without support): copy.
                    pipe = None;
                }
                Err(e) => break Err(e),
            }
        };
        if let Some(p) = pipe {
            splice::recycle(p);
        }
        buffers::put(buf);
        result
    }

    async fn copy_once(&self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.op(self.src, Interest::READABLE, || self.src.try_read(buf)).await?;
        let mut off = 0;
        while off < n {
            off += self.op(self.dst, Interest::WRITABLE, || self.dst.try_write(&buf[off..n])).await?;
        }
        Ok(n)
    }

    async fn splice_once(&self, pipe: &mut Pipe) -> io::Result<usize> {
        let (src, dst) = (self.src.as_raw_fd(), self.dst.as_raw_fd());
        let n = self.op(self.src, Interest::READABLE, || pipe.fill_from(src)).await?;
        while pipe.pending > 0 {
            self.op(self.dst, Interest::WRITABLE, || pipe.drain_to(dst)).await?;
        }
        Ok(n)
    }

    /// Runs a nonblocking socket operation, waiting for readiness as long as it takes (the
    /// watchdog bounds the wait).
    async fn op<T>(&self, s: &TcpStream, interest: Interest, mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        loop {
            match s.try_io(interest, &mut f) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            s.ready(interest).await?;
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
