//! The sockmap fast path of TCP mode (`fast_path = "sockmap"`, and `"adaptive"` once a
//! connection is promoted): owns the BPF program of `bpf/sockmap.c` (loaded once per process),
//! its maps, and the forwarding of a connection whose bytes the kernel moves.
//!
//! Both sockets of a connection go into a SOCKHASH keyed by socket cookie, with a stream verdict
//! program attached that hands every skb arriving on one socket to the egress of its peer
//! (`bpf_sk_redirect_hash`, Cloudflare's and Cilium's socket-level proxying). The process then
//! only waits: a socket whose data is redirected never becomes readable, so readability means
//! end of stream, an error, or bytes the program passed up because they arrived before the pair
//! was linked (the process forwards those itself, and the program holds later bytes back until
//! it has; see the ordering note in `bpf/sockmap.c`).
//!
//! End of stream: the FIN is passed on only once the peer socket has taken every byte received
//! before it (the kernel redirects through a work queue, so a shutdown right away could overtake
//! the last bytes): the peer's bytes acknowledged plus its send queue (`TIOCOUTQ`) must reach the
//! bytes the program counted. So half close works as in the copy path.
//!
//! Leaving (adaptive connections that turn to bulk, `adaptive::bulk`): the links go, so the
//! program passes every later byte up; once each socket has taken every byte redirected to it
//! the process copies the rest. The sockets stay in the map until the connection ends: taking a
//! socket out drops what waits in its psock queue.
//!
//! Idle timeouts: the process does not see bytes move, so when the idle timer fires it reads the
//! program's byte counters and re-arms if they moved. The same counters feed the stats' bytes in
//! and out, at each idle check and at the end.
//!
//! Where the program cannot run (no CAP_BPF/CAP_NET_ADMIN, a kernel without
//! `CONFIG_BPF_STREAM_PARSER`, a load or attach error) `prepare` logs one line saying why (a
//! warning when a service asked for `sockmap` by name) and the services splice. This is one of the few modules with `unsafe`: reading SO_COOKIE and
//! TIOCOUTQ, and marking the maps' value types as plain data for aya.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, OnceLock};
use std::task::Poll;
use std::task::{Context, Waker};
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, Map, MapData, SockHash};
use aya::programs::SkSkb;
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use super::adaptive;
use super::tcp::{Meters, Options};
use crate::config::{Config, FastPath, Mode};

/// The compiled program, committed beside its source (BPF bytecode is the same on every
/// architecture; `scripts/bpf` rebuilds it and `scripts/test` checks it matches), so no build
/// of Fulcrum needs clang.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../../bpf/sockmap.o");

/// `SO_COOKIE` from asm-generic/socket.h (libc does not export it): a socket's 64-bit id.
const SO_COOKIE: libc::c_int = 57;

/// First wait between checks that a peer has taken the bytes before a FIN; doubles up to
/// `DRAIN_MAX`. The redirect work queue usually empties within a millisecond.
const DRAIN_FIRST: Duration = Duration::from_millis(1);
const DRAIN_MAX: Duration = Duration::from_millis(50);

/// After linking, and after passed bytes moved, look for more at these intervals, doubling:
/// long past the microseconds a verdict that raced the process's update can take.
const SETTLE_FIRST: Duration = Duration::from_millis(1);
const SETTLE_LAST: Duration = Duration::from_millis(512);

/// `struct link` of sockmap.c: written by the process only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Link {
    peer: u64,
    taken: u64,
}

/// `struct count` of sockmap.c: written by the program only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Count {
    bytes: u64,
    passed: u64,
}

// SAFETY: both are repr(C) structs of u64 without padding, so every bit pattern is a value and
// they match the program's map values byte for byte.
unsafe impl aya::Pod for Link {}
unsafe impl aya::Pod for Count {}

/// The loaded program and the descriptors of its maps. The `Ebpf` keeps the program attached to
/// `socks` for the life of the process.
struct Loaded {
    _ebpf: aya::Ebpf,
    socks: OwnedFd,
    links: OwnedFd,
    counts: OwnedFd,
}

// Set by the first `prepare` that sees a sockmap service: the program, or why it cannot run.
static LOADED: OnceLock<Result<Loaded, LoadError>> = OnceLock::new();

/// Why the fast path's program could not be loaded; the services that asked for it splice.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("loading the BPF object: {0} (needs CAP_BPF and CAP_NET_ADMIN, or root)")]
    Object(aya::EbpfError),
    #[error("no {0} in the object")]
    Missing(&'static str),
    #[error("{0} has an unexpected map type")]
    MapType(&'static str),
    #[error("{what}: {cause}")]
    Map { what: &'static str, cause: aya::maps::MapError },
    #[error("{what}: {cause}")]
    Program { what: &'static str, cause: aya::programs::ProgramError },
    #[error("{what}: {cause}")]
    Io { what: &'static str, cause: io::Error },
}

/// Whether `prepare` has work for `config`: a TCP service uses the fast path (`sockmap`, or
/// `adaptive`, the default) and no load was tried yet. Cheap, so a reload can ask before it
/// moves to a blocking thread.
pub fn needs_prepare(config: &Config) -> bool {
    LOADED.get().is_none() && wanted(config).next().is_some()
}

fn wanted(config: &Config) -> impl Iterator<Item = &crate::config::Service> {
    config.services.iter().filter(|s| s.mode == Mode::Tcp && s.fast_path() != FastPath::Splice)
}

/// Loads the program once if a TCP service of `config` uses it; the first time, logs in one
/// line whether the fast path is on or why those services splice instead (a warning when a
/// service asked for `sockmap` by name; information when only the default, `adaptive`, would
/// have used it). Called at start and on a config change that needs it, on a blocking thread:
/// the kernel's verifier runs in the call.
pub fn prepare(config: &Config) {
    if !needs_prepare(config) {
        return;
    }
    let names = wanted(config).map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
    let asked = wanted(config).any(|s| s.fast_path == Some(FastPath::Sockmap));
    match LOADED.get_or_init(load) {
        Ok(_) => info!(services = %names, "sockmap fast path loaded: the kernel forwards these services' bytes (adaptive: their long-lived connections of small exchanges)"),
        Err(why) if asked => warn!(services = %names, "sockmap fast path unavailable, these services splice instead: {why}"),
        Err(why) => info!(services = %names, "sockmap fast path unavailable, these services splice instead: {why}"),
    }
}

/// Whether the program is loaded and attached.
pub fn active() -> bool {
    matches!(LOADED.get(), Some(Ok(_)))
}

fn load() -> Result<Loaded, LoadError> {
    let mut ebpf = aya::Ebpf::load(OBJECT).map_err(LoadError::Object)?;
    let socks = ebpf.map("socks").ok_or(LoadError::Missing("socks map"))?;
    let socks = SockHash::<_, u64>::try_from(socks).map_err(|cause| LoadError::Map { what: "socks map", cause })?;
    let socks_fd = socks.fd().try_clone().map_err(|cause| LoadError::Io { what: "socks map", cause })?;
    let program: &mut SkSkb =
        ebpf.program_mut("verdict").ok_or(LoadError::Missing("verdict program"))?.try_into().map_err(|cause| LoadError::Program { what: "verdict program", cause })?;
    program.load().map_err(|cause| LoadError::Program { what: "loading the stream verdict program", cause })?;
    program.attach(&socks_fd).map_err(|cause| LoadError::Program { what: "attaching the stream verdict program (a kernel without CONFIG_BPF_STREAM_PARSER?)", cause })?;
    let fd = |name: &'static str| -> Result<OwnedFd, LoadError> {
        let map = ebpf.map(name).ok_or(LoadError::Missing(name))?;
        let data = match map {
            Map::HashMap(d) | Map::SockHash(d) => d,
            _ => return Err(LoadError::MapType(name)),
        };
        data.fd().as_fd().try_clone_to_owned().map_err(|cause| LoadError::Io { what: name, cause })
    };
    let (socks, links, counts) = (fd("socks")?, fd("links")?, fd("counts")?);
    Ok(Loaded { _ebpf: ebpf, socks, links, counts })
}

/// This thread's handles on the maps: aya's updates take `&mut`, and a handle per thread (a
/// duplicate descriptor of each map) needs no lock between the runtime's threads.
struct Maps {
    socks: SockHash<MapData, u64>,
    links: BpfHashMap<MapData, u64, Link>,
    counts: BpfHashMap<MapData, u64, Count>,
}

thread_local! {
    static MAPS: RefCell<Option<Maps>> = const { RefCell::new(None) };
}

fn with_maps<T>(f: impl FnOnce(&mut Maps) -> io::Result<T>) -> io::Result<T> {
    let Some(Ok(loaded)) = LOADED.get() else {
        return Err(io::Error::other("the sockmap program is not loaded"));
    };
    MAPS.with(|m| {
        let mut m = m.borrow_mut();
        if m.is_none() {
            let data = |fd: &OwnedFd| MapData::from_fd(fd.try_clone()?).map_err(io::Error::other);
            let socks = SockHash::try_from(Map::SockHash(data(&loaded.socks)?)).map_err(io::Error::other)?;
            let links = BpfHashMap::try_from(Map::HashMap(data(&loaded.links)?)).map_err(io::Error::other)?;
            let counts = BpfHashMap::try_from(Map::HashMap(data(&loaded.counts)?)).map_err(io::Error::other)?;
            *m = Some(Maps { socks, links, counts });
        }
        match m.as_mut() {
            Some(maps) => f(maps),
            None => Err(io::Error::other("sockmap maps unavailable")),
        }
    })
}

/// One side of a linked pair.
struct End {
    cookie: u64,
    /// The socket's bytes written (acknowledged plus queued) when it was linked: Fulcrum writes
    /// nothing before forwarding, so this is where the peer's bytes start.
    base: u64,
    /// Bytes this side received that the process forwarded itself.
    moved: u64,
    /// What of this side's bytes the stats have been told.
    reported: u64,
    /// End of stream seen on this side.
    eof: bool,
    /// The FIN was passed on (or the forward ends with it).
    ended: bool,
}

/// A client and server socket in the maps; taken out on drop.
pub struct Pair {
    client: End,
    server: End,
}

/// What linking a connection's two sockets came to.
pub enum Linked {
    /// Both sockets are in the map and linked: the kernel forwards (`forward`).
    Yes(Pair),
    /// A socket went into the map but the pair could not be linked (its peer reached FIN or
    /// the map is full). The program passes that socket's bytes up, where only a read sees them
    /// in order: copy the connection without splice (splice reads the receive queue past them)
    /// and drop the guard at its end.
    Held(Pair, io::Error),
    /// Nothing went into the map: forward as usual.
    No(io::Error),
}

impl Pair {
    /// Puts both sockets in the sockhash and links them. Bytes that arrive meanwhile are passed
    /// up to the process, which forwards them in order (`forward`).
    pub fn link(client: &TcpStream, server: &TcpStream) -> Linked {
        let end = |s: &TcpStream| -> io::Result<End> { Ok(End { cookie: cookie(s)?, base: written(s)?, moved: 0, reported: 0, eof: false, ended: false }) };
        // A sockhash takes only ESTABLISHED sockets: a client that already sent its FIN (a
        // request and a half close) is not linked. Checked first, as the common refusal.
        if !super::tcp_info::established(client) || !super::tcp_info::established(server) {
            return Linked::No(io::Error::other("a socket is no longer ESTABLISHED"));
        }
        let pair = match (end(client), end(server)) {
            (Ok(client), Ok(server)) => Pair { client, server },
            (Err(e), _) | (_, Err(e)) => return Linked::No(e),
        };
        let (c, s) = (pair.client.cookie, pair.server.cookie);
        let mut inserted = false;
        let result = with_maps(|m| {
            m.counts.insert(c, Count::default(), 0).map_err(io::Error::other)?;
            m.counts.insert(s, Count::default(), 0).map_err(io::Error::other)?;
            // The server first: it has rarely sent anything yet, while the client's first bytes
            // are often waiting already.
            m.socks.insert(s, server.as_raw_fd(), 0).map_err(io::Error::other)?;
            inserted = true;
            m.socks.insert(c, client.as_raw_fd(), 0).map_err(io::Error::other)?;
            m.links.insert(c, Link { peer: s, taken: 0 }, 0).map_err(io::Error::other)?;
            m.links.insert(s, Link { peer: c, taken: 0 }, 0).map_err(io::Error::other)
        });
        if inserted {
            // Bytes that were in a receive queue before the socket joined the map meet the
            // program only at the socket's next data-ready; raising SO_RCVLOWAT signals it now,
            // so they are passed or redirected in order before anything newer.
            kick(client);
            kick(server);
        }
        match result {
            Ok(()) => Linked::Yes(pair),
            // Taking a socket out of the map would drop the bytes the program passed up.
            Err(e) if inserted => Linked::Held(pair, e),
            Err(e) => Linked::No(e),
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = with_maps(|m| {
            for cookie in [self.client.cookie, self.server.cookie] {
                let _ = m.socks.remove(&cookie);
                let _ = m.links.remove(&cookie);
                let _ = m.counts.remove(&cookie);
            }
            Ok(())
        });
    }
}

/// How the forward of a linked pair ended.
pub enum Ended {
    /// Both directions ended (or one, without half close): the bytes moved client to server
    /// and server to client since linking.
    Closed(u64, u64),
    /// The connection turned to bulk and left the kernel's forwarding (`fast_path =
    /// "adaptive"`): every byte the program redirected has reached its peer socket and the
    /// program passes every later byte up. The caller forwards the rest by copy (without
    /// splice: those bytes wait in the socket's psock queue, where only a read sees them) and
    /// keeps the `Pair` until the end, since taking a socket out of the map drops what waits
    /// there. The bytes each way so far, already added to the stats.
    Demoted { client: TcpStream, server: TcpStream, up: u64, down: u64 },
}

/// Waits for the ends of a linked pair, with the copy path's half close and idle timeouts; with
/// `demote`, hands the connection back (`Ended::Demoted`) once it carries bulk
/// (`adaptive::bulk`).
///
/// Both sockets leave tokio's reactor for `watch`'s epoll, which asks only for hang-up and
/// errors: tokio registers every socket for EPOLLIN, and the kernel's data-ready callback after
/// each redirected skb would wake a runtime thread in epoll_wait for nothing, thousands of times
/// for a 64 MiB transfer.
pub async fn forward(pair: &mut Pair, client: TcpStream, server: TcpStream, opts: Options, meters: Meters<'_>, demote: bool) -> io::Result<Ended> {
    let result = match (client.into_std(), server.into_std()) {
        (Ok(client), Ok(server)) => match wait(pair, &client, &server, opts, &meters, demote).await {
            Ok(Waited::Demote) => return demoted(pair, client, server, &meters),
            other => other,
        },
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    report(pair, &meters);
    let totals = (counted(pair.client.cookie, &pair.client), counted(pair.server.cookie, &pair.server));
    result.map(|_| Ended::Closed(totals.0, totals.1))
}

/// The hand-back of a drained pair: the bytes each way come from the sockets themselves (what
/// was written into the peer since linking: nothing but this pair's forwarding writes there, and
/// no redirect is in flight), exact where the program's two counters could be read between the
/// two updates of a passed skb.
fn demoted(pair: &mut Pair, client: std::net::TcpStream, server: std::net::TcpStream, meters: &Meters<'_>) -> io::Result<Ended> {
    let up = written(&server)?.saturating_sub(pair.server.base);
    let down = written(&client)?.saturating_sub(pair.client.base);
    for (side, now, meter) in [(&mut pair.client, up, meters.bytes_in), (&mut pair.server, down, meters.bytes_out)] {
        meter.fetch_add(now.saturating_sub(side.reported), Relaxed);
        side.reported = side.reported.max(now);
    }
    Ok(Ended::Demoted { client: TcpStream::from_std(client)?, server: TcpStream::from_std(server)?, up, down })
}

/// What `wait` came to.
enum Waited {
    Closed,
    /// Bulk: the pair is unlinked and drained, ready to be copied.
    Demote,
}

/// The wait itself. Bytes the program passed up (those of the moment of linking) wake nobody,
/// since the watch asks for no EPOLLIN; they are looked for at once and then on a short timer
/// that backs off (`SETTLE_FIRST` to `SETTLE_LAST`): a verdict already running when the
/// process raised `taken` may still pass an skb, and every later one is then passed too (the
/// counts differ), so order holds and only a look is needed to move them.
///
/// With `demote`, the timer also looks at the counters (`adaptive::LOOK_FIRST` to `LOOK_MAX`).
/// To leave, the links go first, so the program passes every later byte up; the process then
/// moves nothing until each socket has taken every byte redirected to it (the FIN's drain
/// check), so its own writes of the passed bytes cannot overtake them.
async fn wait(pair: &mut Pair, client: &std::net::TcpStream, server: &std::net::TcpStream, opts: Options, meters: &Meters<'_>, demote: bool) -> io::Result<Waited> {
    let watch = Watch::new(client, server)?;
    let mut last = crate::clock::timer_now();
    let mut seen = 0u64;
    let mut drain_wait = DRAIN_FIRST;
    let mut settle = Some(SETTLE_FIRST);
    // The adaptive looks: when the next is due, how long the last wait was, and each side's
    // count at the last look.
    let mut look = adaptive::LOOK_FIRST;
    let mut look_at = last + look;
    let mut looked = (last, 0u64, 0u64);
    let mut leaving = false;
    let first = if demote { look_at.min(last + idle_limit(&opts, pair)) } else { last + idle_limit(&opts, pair) };
    let timer = tokio::time::sleep_until(first);
    tokio::pin!(timer);
    poll_fn(|cx| {
        // Arm first, then look: an end that comes after the look wakes this task.
        watch.arm(cx);
        let mut draining = false;
        if leaving {
            let up = drained(&pair.client, server, pair.server.base)?;
            let down = drained(&pair.server, client, pair.client.base)?;
            if up && down {
                return Poll::Ready(Ok(Waited::Demote));
            }
            draining = true;
        } else {
            for up in [true, false] {
                let (src, dst, side) = if up { (client, server, &mut pair.client) } else { (server, client, &mut pair.server) };
                loop {
                    match take_passed(src, dst, side)? {
                        Step::Moved => settle = Some(SETTLE_FIRST),
                        Step::Blocked => {
                            draining = true;
                            break;
                        }
                        Step::Eof | Step::Empty => break,
                    }
                }
            }
            // A side at end of stream passes its FIN on once the peer has every byte before it.
            for up in [true, false] {
                let (dst, side, peer) = if up { (server, &mut pair.client, &pair.server) } else { (client, &mut pair.server, &pair.client) };
                if side.eof && !side.ended {
                    if drained(side, dst, peer.base)? {
                        side.ended = true;
                        if opts.half_close && !peer.eof {
                            let _ = dst.shutdown(std::net::Shutdown::Write);
                        }
                    } else {
                        draining = true;
                    }
                }
            }
            let (up, down) = (pair.client.ended, pair.server.ended);
            if (up && down) || (!opts.half_close && (up || down)) {
                return Poll::Ready(Ok(Waited::Closed));
            }
        }
        // Look again soon while a FIN, passed bytes or a hand-back wait for the peer to take its
        // bytes, and for a while after passed bytes moved; the idle limit still applies.
        let soon = if draining {
            let wait = drain_wait;
            drain_wait = (drain_wait * 2).min(DRAIN_MAX);
            Some(wait)
        } else {
            drain_wait = DRAIN_FIRST;
            let wait = settle;
            settle = settle.map(|d| d * 2).filter(|d| *d <= SETTLE_LAST);
            wait
        };
        if let Some(wait) = soon {
            timer.as_mut().reset((crate::clock::timer_now() + wait).min(last + idle_limit(&opts, pair)));
        }
        while timer.as_mut().poll(cx).is_ready() {
            // The timer fired: did bytes move since the last look? (Not while leaving: every
            // skb is then passed, and the counters read between a passed skb's two updates
            // would count it twice; `demoted` counts from the sockets instead.)
            let total = if leaving { seen } else { report(pair, meters) };
            let now = crate::clock::timer_now();
            if total != seen {
                seen = total;
                last = now;
            }
            let deadline = last + idle_limit(&opts, pair);
            if deadline <= now {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")));
            }
            let mut next = deadline;
            if demote && !leaving {
                if now >= look_at {
                    let (up, down) = (pair.client.reported, pair.server.reported);
                    let elapsed = now.saturating_duration_since(looked.0);
                    if adaptive::bulk(up - looked.1, elapsed) || adaptive::bulk(down - looked.2, elapsed) {
                        match unlink(pair) {
                            Ok(()) => {
                                leaving = true;
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                            Err(e) => debug!("sockmap: a connection that turned to bulk stays linked: {e}"),
                        }
                    }
                    look = adaptive::next_look(look, (up, down) != (looked.1, looked.2));
                    looked = (now, up, down);
                    look_at = now + look;
                }
                next = next.min(look_at);
            }
            timer.as_mut().reset(next);
            if soon.is_some() {
                // Look from the top again.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        Poll::Pending
    })
    .await
}

/// Takes both sides' links out, so that the program passes every later byte up (`sockmap.c`:
/// no link, no redirect).
fn unlink(pair: &Pair) -> io::Result<()> {
    with_maps(|m| {
        for cookie in [pair.client.cookie, pair.server.cookie] {
            // A link that was never made is as good as one taken out.
            if let Err(e) = m.links.remove(&cookie)
                && m.links.get(&cookie, 0).is_ok()
            {
                return Err(io::Error::other(e));
            }
        }
        Ok(())
    })
}

/// One epoll instance for the process, asking only for hang-up and errors on the sockets of
/// linked pairs, and a thread that waits on it and wakes the pair's task. It wakes at the end of
/// a connection, never for its bytes; its lock is taken only then and when a task arms.
struct Watcher {
    epoll: OwnedFd,
    wakers: Mutex<HashMap<u64, Waker>>,
    next: AtomicU64,
}

// The error is kept as its kind and message: each caller gets an `io::Error` of its own.
static WATCHER: OnceLock<Result<Watcher, (io::ErrorKind, String)>> = OnceLock::new();

fn watcher() -> io::Result<&'static Watcher> {
    let w = WATCHER.get_or_init(|| {
        // SAFETY: epoll_create1 takes no pointer; a non-negative result is a descriptor we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err((e.kind(), format!("epoll_create1: {e}")));
        }
        // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
        let epoll = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        std::thread::Builder::new().name("fulcrum-sockmap".into()).spawn(watch_loop).map_err(|e| (e.kind(), format!("watcher thread: {e}")))?;
        Ok(Watcher { epoll, wakers: Mutex::default(), next: AtomicU64::new(1) })
    });
    w.as_ref().map_err(|(kind, why)| io::Error::new(*kind, why.clone()))
}

fn watch_loop() {
    let Ok(w) = watcher() else { return };
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        // SAFETY: `events` is a live array of 64 epoll_event the kernel fills at most 64 of.
        let n = unsafe { libc::epoll_wait(w.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as libc::c_int, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            warn!("sockmap watcher stopped: {}", io::Error::last_os_error());
            return;
        }
        let wakers = w.wakers.lock().unwrap_or_else(|p| p.into_inner());
        for e in &events[..n as usize] {
            let token = e.u64;
            if let Some(waker) = wakers.get(&token) {
                waker.wake_by_ref();
            }
        }
    }
}

/// A pair's registration with the watcher; removed on drop.
struct Watch {
    token: u64,
    fds: [libc::c_int; 2],
}

impl Watch {
    fn new(client: &std::net::TcpStream, server: &std::net::TcpStream) -> io::Result<Watch> {
        let w = watcher()?;
        let token = w.next.fetch_add(1, Relaxed);
        let mut watch = Watch { token, fds: [-1, -1] };
        for (i, fd) in [client.as_raw_fd(), server.as_raw_fd()].into_iter().enumerate() {
            // Hang-up (a FIN), errors and full hang-up are all this asks for; no EPOLLIN, so the
            // data-ready callback of a redirected skb finds no interest here and wakes nobody.
            let mut ev = libc::epoll_event { events: (libc::EPOLLRDHUP | libc::EPOLLET) as u32, u64: token };
            // SAFETY: `ev` is a live epoll_event; both descriptors are live sockets.
            let rc = unsafe { libc::epoll_ctl(w.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            watch.fds[i] = fd;
        }
        Ok(watch)
    }

    /// Makes the next event of this pair wake the task of `cx`.
    fn arm(&self, cx: &Context<'_>) {
        if let Ok(w) = watcher() {
            let mut wakers = w.wakers.lock().unwrap_or_else(|p| p.into_inner());
            match wakers.get_mut(&self.token) {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => {
                    wakers.insert(self.token, cx.waker().clone());
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(w) = watcher() {
            for fd in self.fds.into_iter().filter(|fd| *fd >= 0) {
                // SAFETY: a null event is allowed for EPOLL_CTL_DEL; the sockets outlive this.
                unsafe { libc::epoll_ctl(w.epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
            }
            w.wakers.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.token);
        }
    }
}

/// What one `take_passed` came to.
enum Step {
    /// Bytes moved to the peer.
    Moved,
    /// End of stream: the socket's FIN arrived and no passed bytes are left before it.
    Eof,
    /// Nothing passed up to move.
    Empty,
    /// Passed bytes wait, but the peer's send buffer is full.
    Blocked,
}

/// Moves bytes the program passed up on `src` to `dst`. It peeks, sends what `dst` takes and
/// only then consumes that much, so a full peer leaves them where they were and nothing is
/// buffered here. Once they are in `dst`'s send queue, `taken` tells the program it may
/// redirect again.
fn take_passed(src: &impl AsFd, dst: &impl AsFd, side: &mut End) -> io::Result<Step> {
    if side.eof {
        return Ok(Step::Eof);
    }
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let src = socket2::SockRef::from(src);
    let n = match src.peek(&mut buf) {
        Ok(0) => {
            side.eof = true;
            return Ok(Step::Eof);
        }
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Empty),
        Err(e) => return Err(e),
    };
    // SAFETY: peek initialised the first `n` bytes of `buf`.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
    let sent = match socket2::SockRef::from(dst).send(bytes) {
        Ok(w) => w,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Blocked),
        Err(e) => return Err(e),
    };
    // The same bytes again, now taken off the queue: nothing else reads this socket.
    let consumed = src.recv(&mut buf[..sent])?;
    if consumed != sent {
        return Err(io::Error::other(format!("sockmap: {sent} bytes forwarded but {consumed} consumed")));
    }
    side.moved += sent as u64;
    let (cookie, taken) = (side.cookie, side.moved);
    with_maps(|m| {
        let link = m.links.get(&cookie, 0).map_err(io::Error::other)?;
        m.links.insert(cookie, Link { peer: link.peer, taken }, 0).map_err(io::Error::other)
    })?;
    Ok(Step::Moved)
}

/// Whether `dst` has taken every byte `side` received (the program's count, less what it passed
/// up, plus what the process forwarded).
fn drained(side: &End, dst: &(impl AsRawFd + AsFd), dst_base: u64) -> io::Result<bool> {
    let owed = counted(side.cookie, side);
    Ok(written(dst)?.saturating_sub(dst_base) >= owed)
}

/// Bytes received on `side` so far, whichever way they went.
fn counted(cookie: u64, side: &End) -> u64 {
    let c = with_maps(|m| m.counts.get(&cookie, 0).map_err(io::Error::other)).unwrap_or_default();
    c.bytes - c.passed + side.moved
}

/// Adds the bytes moved since the last report to the stats; returns both directions' total.
fn report(pair: &mut Pair, meters: &Meters<'_>) -> u64 {
    let mut total = 0;
    for (side, meter) in [(&mut pair.client, meters.bytes_in), (&mut pair.server, meters.bytes_out)] {
        let now = counted(side.cookie, side);
        meter.fetch_add(now.saturating_sub(side.reported), Relaxed);
        side.reported = side.reported.max(now);
        total += now;
    }
    total
}

fn idle_limit(opts: &Options, pair: &Pair) -> Duration {
    match (pair.client.ended, pair.server.ended) {
        (false, false) => opts.client_timeout.min(opts.server_timeout),
        (true, _) => opts.server_timeout,
        (false, true) => opts.client_timeout,
    }
}

/// The socket's cookie, the key of every map.
fn cookie(s: &TcpStream) -> io::Result<u64> {
    let mut value = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` (8) bytes into `value`, a live u64; the fd is
    // borrowed from a live socket for the call.
    let rc = unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, SO_COOKIE, (&mut value as *mut u64).cast(), &mut len) };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(value) }
}

/// Bytes ever written into the socket: acknowledged by the far end plus still in the send queue.
fn written(s: &(impl AsRawFd + AsFd)) -> io::Result<u64> {
    // A closed socket takes nothing more: an error, so that a FIN that waits for it ends.
    let acked = super::tcp_info::bytes_acked_while_open(s).ok_or_else(|| match socket2::SockRef::from(s).take_error() {
        Ok(Some(e)) => e,
        _ => io::Error::new(io::ErrorKind::ConnectionReset, "the socket closed before it took every byte"),
    })?;
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int into `queued`; the fd is a live TCP socket.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(acked + queued.max(0) as u64)
}

/// Signals data-ready on a socket by setting SO_RCVLOWAT to its default of 1.
fn kick(s: &TcpStream) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one int from `one`; the fd is a live socket.
    unsafe {
        libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, (&one as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t);
    }
}
