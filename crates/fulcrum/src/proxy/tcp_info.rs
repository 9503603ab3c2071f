//! The kernel's own count of SYNs a connect sent: `tcpi_total_retrans` from TCP_INFO on the
//! connecting socket, plus the first SYN. This is what the passive-measurement controller counts
//! as N_S, exactly, with no packet capture. A module of its own because reading TCP_INFO is
//! `unsafe` (getsockopt into a C struct). It also reads a listener's accept queue.

use std::os::fd::AsRawFd;

/// SYNs sent so far by a socket that is connecting or has just connected: 1 + retransmissions.
/// `None` when the kernel does not answer TCP_INFO.
pub fn syns_sent(socket: &impl AsRawFd) -> Option<u32> {
    read(socket).map(|info| 1 + info.tcpi_total_retrans)
}

/// For a listening socket, Linux reports its accept queue in TCP_INFO: connections waiting to be
/// accepted (`tcpi_unacked`) and the backlog limit (`tcpi_sacked`).
pub fn accept_queue(listener: &impl AsRawFd) -> Option<(u32, u32)> {
    read(listener).map(|info| (info.tcpi_unacked, info.tcpi_sacked))
}

/// Bytes of the socket's stream the far end acknowledged (plus 1 for the SYN, and 1 for a FIN),
/// or `None` once the connection is closed (reset, or ended both ways): it will send no more.
pub fn bytes_acked_while_open(socket: &impl AsRawFd) -> Option<u64> {
    // TCP_CLOSE of include/net/tcp_states.h.
    read(socket).filter(|info| info.tcpi_state != 7).map(|info| info.tcpi_bytes_acked)
}

/// Whether the socket is in TCP's ESTABLISHED state (no FIN received yet).
pub fn established(socket: &impl AsRawFd) -> bool {
    // TCP_ESTABLISHED of include/net/tcp_states.h; libc does not export the enum.
    read(socket).is_some_and(|info| info.tcpi_state == 1)
}

fn read(socket: &impl AsRawFd) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is a plain C struct of integers, so all-zero is a valid value; getsockopt
    // writes at most `len` bytes into it; the fd is borrowed from a live socket for the call.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len) };
    (rc == 0).then_some(info)
}
