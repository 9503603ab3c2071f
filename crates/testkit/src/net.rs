//! Loopback ports for the processes a test starts, and whether something listens on one.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A loopback port free right now, below the kernel's ephemeral range (32768 and up).
///
/// A port the kernel hands out for `bind(0)` is also one it may give an outgoing connection as
/// its source port before the server that was meant to take it binds; and a client that polls a
/// port of that range until it answers can connect to itself (TCP simultaneous open) and believe
/// a server is there. Ports below the range are never source ports, so neither can happen. Each
/// process walks its own stretch of them (by pid), skipping ports that are taken. Only even ports
/// are handed out, so the port after one stays free for a test that needs a pair (the fleet
/// demo's second instance listens on the port after the first's).
pub fn free_port() -> anyhow::Result<u16> {
    // Above the fixed ports of the FTP tests' data ranges (21000 to 21900), below the ephemeral range.
    const FIRST: u32 = 24_000;
    const COUNT: u32 = 8_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(u32::MAX, (std::process::id().wrapping_mul(7919) % COUNT) & !1, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..COUNT / 2 {
        let port = (FIRST + NEXT.fetch_add(2, Ordering::Relaxed) % COUNT) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port between {FIRST} and {}", FIRST + COUNT)
}

/// `127.0.0.1` on a [`free_port`].
pub fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], free_port()?)))
}

/// Whether a socket listens on `addr` (IPv4), read from `/proc/net/tcp` without connecting: a
/// probe connection would be a session to a server that forks one per connection (vsftpd).
pub fn listens(addr: SocketAddr) -> bool {
    listens_in("/proc/net/tcp", addr)
}

/// The same in the network namespace of process `pid` (`/proc/PID/net/tcp`): a server in a
/// namespace of its own listens where `/proc/net/tcp` of ours does not show.
pub fn listens_for(pid: u32, addr: SocketAddr) -> bool {
    listens_in(&format!("/proc/{pid}/net/tcp"), addr)
}

fn listens_in(table: &str, addr: SocketAddr) -> bool {
    let SocketAddr::V4(v4) = addr else { return accepts(addr) };
    // The kernel prints the address as the hex of its bytes in memory (network order read as a
    // native u32) and the port as plain hex; state 0A is LISTEN.
    let want = format!("{:08X}:{:04X}", u32::from_ne_bytes(v4.ip().octets()), v4.port());
    std::fs::read_to_string(table).unwrap_or_default().lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&want.as_str()) && f.get(3) == Some(&"0A")
    })
}

/// Whether `addr` accepts a connection now. A connection to itself (possible only in the
/// ephemeral range) is nobody listening.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok_and(|s| s.local_addr().ok() != Some(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_listening_socket_is_seen_without_a_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert!(listens(addr) && accepts(addr));
        drop(l);
        // A process another test forks holds a copy of the socket until it execs, so the port
        // may listen a moment longer: it must stop within the bound.
        let deadline = Instant::now() + Duration::from_secs(10);
        while listens(addr) {
            assert!(Instant::now() < deadline, "{addr} still listens 10 s after its socket closed");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn free_ports_are_even_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        assert!(ports.iter().all(|p| p % 2 == 0 && (24_000..32_000).contains(p)), "{ports:?}");
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
    }
}
