//! splice(2) through a pipe: bulk bytes move socket -> pipe -> socket inside the kernel, never
//! copied to user space. This is the one module with `unsafe`; each block states its invariant.
//!
//! Pipes are kept per thread, because creating two pipes per connection costs more than
//! a short request/response moves; a pipe is kept for reuse only when it is empty.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Bytes one splice call may move. The pipe is resized to this, so one call can move it whole.
pub const PIPE_SIZE: usize = 256 * 1024;
const PIPES_KEPT: usize = 64;

/// A kernel pipe used as the buffer between two sockets.
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe not yet spliced out.
    pub pending: usize,
    pub capacity: usize,
}

thread_local! {
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

impl Pipe {
    /// A spare pipe of this thread, or a new one.
    pub fn get() -> io::Result<Pipe> {
        if let Some(p) = PIPES.with(|p| p.borrow_mut().pop()) {
            return Ok(p);
        }
        Self::create()
    }

    fn create() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill; on success both are open
        // descriptors this process owns, and nothing else holds them.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned only here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETPIPE_SZ on a pipe we own; failure (a lower pipe-max-size) keeps the default.
        let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE as libc::c_int) };
        let capacity = if size > 0 { size as usize } else { 64 * 1024 };
        Ok(Pipe { read, write, pending: 0, capacity })
    }

    /// Moves up to the free room of the pipe from `src` into it. `Ok(0)` is end of stream.
    pub fn fill_from(&mut self, src: RawFd) -> io::Result<usize> {
        let n = splice(src, self.write.as_raw_fd(), self.capacity - self.pending)?;
        self.pending += n;
        Ok(n)
    }

    /// Moves pending bytes from the pipe to `dst`; returns how many moved.
    pub fn drain_to(&mut self, dst: RawFd) -> io::Result<usize> {
        let n = splice(self.read.as_raw_fd(), dst, self.pending)?;
        self.pending -= n;
        Ok(n)
    }
}

/// Keeps an empty pipe for this thread to reuse; a pipe still holding bytes is closed instead.
pub fn recycle(pipe: Pipe) {
    if pipe.pending == 0 {
        PIPES.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < PIPES_KEPT {
                p.push(pipe);
            }
        });
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the duration of the call (borrowed from live sockets
    // and pipes); null offsets are required for sockets and pipes. Nonblocking: never parks the
    // runtime thread, EAGAIN comes back as WouldBlock for the caller's readiness loop.
    let n = unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), len, libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn bytes_pass_through_a_pipe_unchanged() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (c, mut d) = UnixStream::pair().unwrap();
        a.write_all(b"hello splice").unwrap();
        let mut pipe = Pipe::get().unwrap();
        let n = pipe.fill_from(b.as_raw_fd()).unwrap();
        assert_eq!(n, 12);
        assert_eq!(pipe.drain_to(c.as_raw_fd()).unwrap(), 12);
        assert_eq!(pipe.pending, 0);
        let mut buf = [0u8; 12];
        d.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello splice");
        recycle(pipe);
    }
}
