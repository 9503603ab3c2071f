//! Replacing the running binary without refusing a connection (`fulcrum upgrade`, SIGUSR2,
//! `POST /api/upgrade`), as HAProxy hands its listeners to a new process over a Unix socket and
//! NGINX starts its new binary on USR2.
//!
//! The running process starts the binary at the path it was started from (where a package
//! manager or `install` put the new one) with the arguments it was given and one end of a Unix
//! socket pair, named by `FULCRUM_HANDOVER_FD`. Over it go, with `SCM_RIGHTS`, the listening
//! sockets of every service address and of the admin listener, and as JSON the state of every
//! server ([`Carried`]: health, ramps, damping, counters). The new process reads its config file
//! as a restart would, accepts on the sockets it was given (the kernel's accept queues are the
//! same sockets', so no client between the two processes is refused), restores the servers'
//! state before its first health round, and says it is ready. Only then does the old one stop
//! accepting and drain its connections for `shutdown_grace`. A new binary that cannot start (its
//! config fails, it crashes, it says nothing within [`READY_WITHIN`]) is stopped and the old one
//! serves on.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::live::{Carried, Generation};

/// The variable that names the new process's end of the handover socket.
pub const HANDOVER_FD: &str = "FULCRUM_HANDOVER_FD";

/// How long the new process has to read its config, run its first health round (usually
/// skipped: the servers' health comes with the handover) and bind what is new.
pub const READY_WITHIN: Duration = Duration::from_secs(60);

/// The most sockets one handover carries: every service address (times the workers with
/// `reuse_port`) and the admin listener.
const MOST_SOCKETS: usize = 4096;

/// The most bytes of the handover's JSON: the state of some hundred thousand servers.
const MOST_JSON: usize = 256 << 20;

/// What the old process sends after the sockets.
#[derive(Debug, Serialize, Deserialize)]
struct Message {
    /// The listening sockets of each service address, as configured, in the order of the
    /// descriptors; the admin listener's, if any, comes after them.
    listeners: Vec<(SocketAddr, usize)>,
    admin: Option<SocketAddr>,
    servers: Vec<Carried>,
    from_pid: u32,
}

/// What the new process answers.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Ready { pid: u32 },
    Failed { error: String },
}

/// The sockets and state a new process was handed, taken as it starts.
pub struct Inherited {
    listeners: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
    admin: Option<(SocketAddr, std::net::TcpListener)>,
    servers: Vec<Carried>,
    pub from_pid: u32,
}

/// The new process's end of the handover socket: how it tells the old one it serves, or why not.
pub struct Answer(UnixStream);

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("this instance runs an embedded config; an upgrade starts the binary on a config file")]
    NoFile,
    #[error("an upgrade is already under way")]
    Busy,
    #[error("cannot find this process's executable: {0}")]
    Executable(std::io::Error),
    #[error("cannot start the new binary {exe}: {cause}")]
    Spawn { exe: String, cause: std::io::Error },
    #[error("the handover to the new process failed: {0}")]
    Handover(std::io::Error),
    #[error("the new binary did not take over; this process serves on: {0}")]
    Refused(String),
    #[error("the new binary said nothing within {}s and was stopped; this process serves on", READY_WITHIN.as_secs())]
    Silent,
    #[error("the new binary exited ({status}) before it was ready; this process serves on")]
    Exited { status: std::process::ExitStatus },
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// The executable and arguments this process was started with, taken at start: once the file
/// is replaced, `/proc/self/exe` names the old, deleted one.
pub struct Exe {
    path: std::path::PathBuf,
    args: Vec<std::ffi::OsString>,
}

static EXE: std::sync::OnceLock<Exe> = std::sync::OnceLock::new();

/// Notes the executable's path and the arguments; call first thing in `main`.
pub fn remember_exe() {
    let mut args = std::env::args_os();
    let argv0 = args.next();
    // argv[0] as run (a path, or a name looked up in PATH); the resolved path otherwise.
    let path = argv0.map(std::path::PathBuf::from).filter(|p| p.components().count() > 1).map_or_else(std::env::current_exe, Ok);
    if let Ok(path) = path {
        let _ = EXE.set(Exe { path, args: args.collect() });
    }
}

/// Starts the new binary and hands it `sockets` (each service address with its listening
/// sockets, then the admin listener) and the servers of `generation`; returns the new process's
/// pid once it says it is ready.
pub fn hand_over(sockets: &[(SocketAddr, Vec<OwnedFd>)], admin: Option<(SocketAddr, OwnedFd)>, generation: &Generation) -> Result<u32, UpgradeError> {
    let exe = EXE.get().ok_or_else(|| UpgradeError::Executable(std::io::Error::other("not noted at start")))?;
    let (mine, theirs) = UnixStream::pair().map_err(UpgradeError::Handover)?;
    // Inherited by the child: no other thread of this process starts programs (the one that
    // could, this one, holds the config lock), so the descriptor reaches the new binary alone.
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).map_err(|e| UpgradeError::Handover(e.into()))?;
    let mut command = std::process::Command::new(&exe.path);
    command.args(&exe.args).env(HANDOVER_FD, theirs.as_raw_fd().to_string()).stdin(std::process::Stdio::null());
    let mut child = command.spawn().map_err(|cause| UpgradeError::Spawn { exe: exe.path.display().to_string(), cause })?;
    drop(theirs);
    let servers = generation.pools().flat_map(|(_, p)| p.servers()).map(|e| e.state.carry()).collect();
    let message =
        Message { listeners: sockets.iter().map(|(addr, fds)| (*addr, fds.len())).collect(), admin: admin.as_ref().map(|(addr, _)| *addr), servers, from_pid: std::process::id() };
    let mut fds: Vec<BorrowedFd<'_>> = sockets.iter().flat_map(|(_, fds)| fds.iter().map(|f| f.as_fd())).collect();
    fds.extend(admin.as_ref().map(|(_, f)| f.as_fd()));
    let sent = send(&mine, &message, &fds);
    let reply = sent.and_then(|()| receive_reply(&mine));
    match reply {
        Ok(Reply::Ready { pid }) => Ok(pid),
        Ok(Reply::Failed { error }) => {
            let _ = child.wait();
            Err(UpgradeError::Refused(error))
        }
        Err(e) => {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(UpgradeError::Exited { status });
            }
            let _ = child.kill();
            let _ = child.wait();
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) { Err(UpgradeError::Silent) } else { Err(UpgradeError::Handover(e)) }
        }
    }
}

/// The length of the JSON and the descriptors in one message, then the JSON.
fn send(channel: &UnixStream, message: &Message, fds: &[BorrowedFd<'_>]) -> Result<(), std::io::Error> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let json = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let header = (json.len() as u64).to_le_bytes();
    let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many sockets for one message"));
    }
    let sent = sendmsg(channel, &[std::io::IoSlice::new(&header)], &mut control, SendFlags::empty())?;
    if sent != header.len() {
        return Err(std::io::Error::other("the handover header went out in part"));
    }
    (&*channel).write_all(&json)
}

/// The new process's answer: one JSON line of at most 64 KiB.
fn receive_reply(channel: &UnixStream) -> std::io::Result<Reply> {
    channel.set_read_timeout(Some(READY_WITHIN))?;
    let mut line = Vec::new();
    std::io::BufReader::new(channel).take(64 * 1024).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    serde_json::from_slice(&line).map_err(std::io::Error::other)
}

impl Inherited {
    /// The handover this process was started with, if `FULCRUM_HANDOVER_FD` names one: its
    /// sockets and the servers' state, and where to answer. Call before anything else opens
    /// descriptors.
    pub fn take() -> Result<Option<(Inherited, Answer)>, std::io::Error> {
        let Some(fd) = std::env::var_os(HANDOVER_FD) else { return Ok(None) };
        let fd: i32 = fd.to_str().and_then(|s| s.parse().ok()).filter(|fd| *fd > 2).ok_or_else(|| std::io::Error::other(format!("{HANDOVER_FD} is not a descriptor")))?;
        // SAFETY: the old process made this descriptor for this process alone and names it here;
        // nothing else in this process owns it.
        let channel = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // Not passed on to a process this one may start in turn.
        rustix::io::fcntl_setfd(&channel, rustix::io::FdFlags::CLOEXEC)?;
        let (message, mut fds) = receive(&channel)?;
        let mut listeners = HashMap::new();
        for (addr, count) in &message.listeners {
            let sockets: Vec<std::net::TcpListener> = fds.by_ref().take(*count).map(std::net::TcpListener::from).collect();
            if sockets.len() != *count {
                return Err(std::io::Error::other("the handover carried fewer sockets than it named"));
            }
            listeners.insert(*addr, sockets);
        }
        let admin = match message.admin {
            Some(addr) => Some((addr, fds.next().map(std::net::TcpListener::from).ok_or_else(|| std::io::Error::other("the handover named an admin socket it did not carry"))?)),
            None => None,
        };
        Ok(Some((Inherited { listeners, admin, servers: message.servers, from_pid: message.from_pid }, Answer(channel))))
    }

    /// The listening sockets of `addr` (as configured), if the old process had it.
    pub fn listener(&mut self, addr: SocketAddr) -> Option<Vec<std::net::TcpListener>> {
        self.listeners.remove(&addr)
    }

    /// The admin listener, if the old process's listened where this config says.
    pub fn admin(&mut self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        self.admin.take_if(|(a, _)| *a == addr).map(|(_, l)| l)
    }

    /// Gives each server of `generation` the state the old process carried for it.
    pub fn restore(&self, generation: &Generation) -> usize {
        let carried: HashMap<(&str, &str), &Carried> = self.servers.iter().map(|c| ((c.service.as_str(), c.address.as_str()), c)).collect();
        let mut restored = 0;
        for (_, pool) in generation.pools() {
            for entry in pool.servers() {
                if let Some(c) = carried.get(&(entry.state.key.service.as_str(), entry.state.key.address.as_str())) {
                    entry.state.restore(c);
                    restored += 1;
                }
            }
        }
        restored
    }
}

impl Answer {
    /// Tells the old process this one serves: it stops accepting and drains.
    pub fn ready(self) -> std::io::Result<()> {
        self.send(&Reply::Ready { pid: std::process::id() })
    }

    /// Tells the old process this one cannot serve, and why: it serves on.
    pub fn fail(self, error: &str) {
        let _ = self.send(&Reply::Failed { error: error.to_string() });
    }

    fn send(&self, reply: &Reply) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
        line.push(b'\n');
        (&self.0).write_all(&line)
    }
}

fn receive(channel: &UnixStream) -> std::io::Result<(Message, std::vec::IntoIter<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    channel.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut header = [0u8; 8];
    let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MOST_SOCKETS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(channel, &mut [std::io::IoSliceMut::new(&mut header)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes != header.len() {
        return Err(std::io::Error::other("the handover header came in part"));
    }
    if got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err(std::io::Error::other(format!("the handover carried more than {MOST_SOCKETS} sockets")));
    }
    let len = u64::from_le_bytes(header) as usize;
    if len > MOST_JSON {
        return Err(std::io::Error::other(format!("the handover's state is {len} bytes, more than {MOST_JSON}")));
    }
    let mut json = vec![0u8; len];
    (&*channel).read_exact(&mut json)?;
    let message: Message = serde_json::from_slice(&json).map_err(std::io::Error::other)?;
    Ok((message, fds.into_iter()))
}
