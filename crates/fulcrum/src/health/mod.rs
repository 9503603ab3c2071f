//! Health checking: active checks (`tcp`, `http`, `grpc`, `ftp`) on a schedule, a server's
//! agent asked for its state and weight (`agent`), and the
//! rise/fall state machine that turns samples into transitions. Passive checking
//! (`failure_limit` consecutive connect failures) is counted on the data path in
//! `runtime::ServerState` and ended here by the next passing check. Only transitions are
//! logged, once each, with the reason.

mod agent;
mod error;
mod ftp;
pub(crate) mod grpc;
mod http;
mod scheduler;
mod target;
mod tcp;

pub use error::CheckError;
pub use scheduler::{CheckNowError, Checked, Checks, wait_first_round};

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::ProxyProtocol;

/// A check's connection to `addr`. A server sent the PROXY protocol expects its header first on
/// every connection, so a check sends one too: LOCAL, which says the connection is Fulcrum's own
/// and carries no client (as HAProxy's `check-send-proxy` does).
async fn connect(addr: SocketAddr, proxy: Option<ProxyProtocol>) -> Result<TcpStream, CheckError> {
    let mut stream = TcpStream::connect(addr).await.map_err(CheckError::Connect)?;
    if let Some(version) = proxy {
        stream.write_all(crate::proxy_header::local(version)).await.map_err(CheckError::ProxyHeader)?;
    }
    Ok(stream)
}

/// Reads from `stream` until `done` says what was read is enough, the peer closes, or `limit`
/// bytes are in: a check holds no more of a server's answer than that.
/// What was read is in `got`, also when the caller's timeout ends the read.
async fn read_until(stream: &mut TcpStream, got: &mut Vec<u8>, limit: usize, done: impl Fn(&[u8]) -> bool) -> std::io::Result<()> {
    let mut buf = [0u8; 256];
    while got.len() < limit && !done(got) {
        let want = (limit - got.len()).min(buf.len());
        let n = stream.read(&mut buf[..want]).await?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// Whether `hay` contains `needle` (an empty needle always is).
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// Rise/fall hysteresis: `rise` passes in a row bring a server up, `fall` failures take it down.
#[derive(Debug, Clone)]
pub struct RiseFall {
    rise: u32,
    fall: u32,
    up: bool,
    /// Consecutive samples that disagree with the current state.
    streak: u32,
    /// A server never checked goes up or down on its first sample, so start-up needs no `rise`.
    first: bool,
}

impl RiseFall {
    pub fn new(rise: u32, fall: u32, up: bool, checked_before: bool) -> Self {
        RiseFall { rise: rise.max(1), fall: fall.max(1), up, streak: 0, first: !checked_before }
    }

    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Samples in a row that disagree with the current state (failures of an up server).
    pub fn streak(&self) -> u32 {
        self.streak
    }

    /// Records one sample; returns the new state when it changed (or on the first sample).
    pub fn record(&mut self, ok: bool) -> Option<bool> {
        if std::mem::take(&mut self.first) {
            self.up = ok;
            self.streak = 0;
            return Some(ok);
        }
        if ok == self.up {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        let needed = if ok { self.rise } else { self.fall };
        if self.streak >= needed {
            self.up = ok;
            self.streak = 0;
            Some(ok)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RiseFall;

    #[test]
    fn first_sample_decides_a_new_server() {
        let mut m = RiseFall::new(2, 3, false, false);
        assert_eq!(m.record(true), Some(true));
        let mut m = RiseFall::new(2, 3, false, false);
        assert_eq!(m.record(false), Some(false));
    }

    #[test]
    fn up_server_goes_down_after_fall_failures_in_a_row() {
        let mut m = RiseFall::new(2, 3, true, true);
        assert_eq!(m.record(false), None);
        assert_eq!(m.record(false), None);
        assert_eq!(m.record(false), Some(false));
        assert!(!m.is_up());
    }

    #[test]
    fn a_pass_between_failures_resets_the_streak() {
        let mut m = RiseFall::new(2, 2, true, true);
        assert_eq!(m.record(false), None);
        assert_eq!(m.record(true), None);
        assert_eq!(m.record(false), None);
        assert_eq!(m.record(false), Some(false));
    }

    #[test]
    fn down_server_rises_after_rise_passes() {
        let mut m = RiseFall::new(3, 2, false, true);
        assert_eq!(m.record(true), None);
        assert_eq!(m.record(true), None);
        assert_eq!(m.record(true), Some(true));
        assert_eq!(m.record(true), None);
    }
}
