//! `[service.health.agent]`: every `interval` each server's agent is asked for its state and
//! weight (HAProxy's `agent-check`): connect to its port, send `send` if set, read one line of at
//! most [`MAX_LINE`] bytes, close. The answer (`live::agent`) takes effect at once; a question
//! that fails leaves the server as its agent last said, since whether the server answers is its
//! health check's to say. Runs beside the server's check, in a task of its own.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::CheckError;
use super::scheduler::{View, timed};
use crate::config::Agent;
use crate::live::agent::AgentAnswer;

/// The longest answer read: one line, as HAProxy reads it.
pub const MAX_LINE: usize = 256;

/// Where a server's agent listens: its own address unless the agent has one, on the agent's port.
fn agent_addr(server: SocketAddr, agent: &Agent) -> SocketAddr {
    SocketAddr::new(agent.address.unwrap_or(server.ip()), u16::try_from(agent.port).unwrap_or(0))
}

/// One question: the agent's line, without its line end.
async fn ask(addr: SocketAddr, send: Option<&str>) -> Result<String, CheckError> {
    let mut stream = super::connect(addr, None).await?;
    if let Some(send) = send.filter(|s| !s.is_empty()) {
        stream.write_all(send.as_bytes()).await.map_err(CheckError::Send)?;
    }
    let mut read = Vec::new();
    super::read_until(&mut stream, &mut read, MAX_LINE, |got| got.contains(&b'\n')).await.map_err(CheckError::Read)?;
    let line = read.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(String::from_utf8_lossy(line).trim().to_string())
}

/// One server's agent, asked each interval against the newest view of it, until `stop` or until
/// its pool has no agent any more (the check restarts then, `Checks::follow`).
pub(super) async fn run(mut view: watch::Receiver<View>, stop: CancellationToken) {
    loop {
        let (pool, entry) = view.borrow_and_update().clone();
        let Some(agent) = pool.config.health.agent.clone() else { return };
        let (name, state) = (&pool.config.name, &entry.state);
        let addr = agent_addr(entry.addr, &agent);
        match timed(agent.timeout, ask(addr, agent.send.as_deref())).await.map(|line| (AgentAnswer::parse(&line), line)) {
            Ok((Ok(answer), line)) => {
                if state.set_agent(answer, &line) {
                    info!(service = %name, server = %state.key.address, "agent says {line:?}: server {}, weight {}% ({} of {})", state.state().as_str(), state.agent.percent(), state.effective_weight(), state.weight());
                }
            }
            Ok((Err(why), line)) => {
                if state.agent_failed(format!("answer {line:?}: {why}")) {
                    warn!(service = %name, server = %state.key.address, "agent answer {line:?} not understood: {why}; the server stays as its agent last said");
                }
            }
            Err(e) => {
                if state.agent_failed(format!("{addr}: {e}")) {
                    warn!(service = %name, server = %state.key.address, "agent at {addr} failed: {e}; the server stays as its agent last said");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(agent.interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}
