//! What a server's agent last said of it (`[service.health.agent]`, HAProxy's `agent-check`): a
//! state that takes the server out of rotation on its own account, apart from its health check's
//! and its operator's, and a share of its configured weight. The answer's words are read here;
//! `health::agent` asks for them. Kept in atomics, as the data path reads them with the state.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering::Relaxed};

use serde::Serialize;

/// The state an agent gives its server. Each state word of an answer replaces the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    /// In service as far as the agent is concerned (`up`, `ready`).
    Up,
    /// No new connections; open ones go on (`drain`).
    Drain,
    /// Out of rotation for maintenance (`maint`): no new connections, as drain, and shown apart.
    Maint,
    /// Down whatever its check says (`down`, `failed`, `stopped`).
    Down,
}

impl AgentState {
    fn from_u8(v: u8) -> AgentState {
        match v {
            1 => AgentState::Drain,
            2 => AgentState::Maint,
            3 => AgentState::Down,
            _ => AgentState::Up,
        }
    }
}

/// The largest weight percentage an agent may give: ten times the configured weight (the result
/// is capped at the largest weight, 256, as HAProxy caps it).
pub const MAX_PERCENT: u32 = 1000;

/// What one answer says: the words it has; what it does not name stays as it was.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AgentAnswer {
    pub state: Option<AgentState>,
    /// The weight as a percentage of the configured weight, 0 to [`MAX_PERCENT`]; 0 drains.
    pub percent: Option<u32>,
}

impl AgentAnswer {
    /// Reads one line: words separated by spaces, tabs or commas, each a state or `N%`; text
    /// after `#` is a description and ignored (as HAProxy reads it). An unknown word, or a line
    /// with none, applies nothing.
    pub fn parse(line: &str) -> Result<AgentAnswer, String> {
        let words = line.split('#').next().unwrap_or_default();
        let mut answer = AgentAnswer::default();
        for word in words.split([' ', '\t', ',', '\r', '\n']).filter(|w| !w.is_empty()) {
            let lower = word.to_ascii_lowercase();
            if let Some(n) = lower.strip_suffix('%') {
                match n.parse::<u32>() {
                    Ok(p) if p <= MAX_PERCENT => answer.percent = Some(p),
                    _ => return Err(format!("{word:?} is not a weight of 0% to {MAX_PERCENT}%")),
                }
                continue;
            }
            answer.state = Some(match lower.as_str() {
                "up" | "ready" => AgentState::Up,
                "drain" => AgentState::Drain,
                "maint" => AgentState::Maint,
                "down" | "failed" | "stopped" => AgentState::Down,
                _ => return Err(format!("unknown word {word:?}")),
            });
        }
        if answer == AgentAnswer::default() {
            return Err("no state or weight in the answer".into());
        }
        Ok(answer)
    }
}

/// A server's agent: its last state, weight percentage and answer.
#[derive(Debug)]
pub struct Agent {
    /// Whether the server has an agent: its stats show one only then.
    active: AtomicBool,
    state: AtomicU8,
    percent: AtomicU32,
    /// Whether the last question failed (the failure is logged once, not every interval).
    failing: AtomicBool,
    last: Mutex<String>,
}

impl Default for Agent {
    fn default() -> Self {
        Agent { active: AtomicBool::new(false), state: AtomicU8::new(0), percent: AtomicU32::new(100), failing: AtomicBool::new(false), last: Mutex::new(String::new()) }
    }
}

/// What the stats say of an agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentView {
    pub state: AgentState,
    pub weight_percent: u32,
    /// The last answer, or why the last question failed (`fail: ...`).
    pub last: String,
}

impl Agent {
    pub fn state(&self) -> AgentState {
        AgentState::from_u8(self.state.load(Relaxed))
    }

    pub fn percent(&self) -> u32 {
        self.percent.load(Relaxed)
    }

    /// `weight` scaled by the agent's percentage: at least 1 (0% drains instead), at most
    /// [`crate::config::MAX_WEIGHT`].
    pub fn weighted(&self, weight: u32) -> u32 {
        match self.percent() {
            100 => weight,
            p => (u64::from(weight) * u64::from(p) / 100).clamp(1, u64::from(crate::config::MAX_WEIGHT)) as u32,
        }
    }

    /// The agent's view for the stats, while the server has one.
    pub fn view(&self) -> Option<AgentView> {
        self.active.load(Relaxed).then(|| AgentView { state: self.state(), weight_percent: self.percent(), last: self.last.lock().map(|l| l.clone()).unwrap_or_default() })
    }

    /// Takes an answer (`line` as it came); returns whether the state or weight changed.
    pub(super) fn apply(&self, answer: AgentAnswer, line: &str) -> bool {
        self.active.store(true, Relaxed);
        self.failing.store(false, Relaxed);
        self.set_last(line.to_string());
        let state = answer.state.is_some_and(|s| self.state.swap(s as u8, Relaxed) != s as u8);
        let percent = answer.percent.is_some_and(|p| self.percent.swap(p, Relaxed) != p);
        state || percent
    }

    /// A question that failed: the state stays as the agent last said (the health check, not
    /// the agent, says whether the server answers). Returns true on the first failure in a row.
    pub(super) fn failed(&self, why: String) -> bool {
        self.active.store(true, Relaxed);
        self.set_last(format!("fail: {why}"));
        !self.failing.swap(true, Relaxed)
    }

    /// The server has no agent any more: it is as if its agent said `up 100%`. Returns whether
    /// that changed its state or weight.
    pub(super) fn clear(&self) -> bool {
        let was_active = self.active.swap(false, Relaxed);
        self.set_last(String::new());
        let state = self.state.swap(AgentState::Up as u8, Relaxed) != AgentState::Up as u8;
        let percent = self.percent.swap(100, Relaxed) != 100;
        was_active && (state || percent)
    }

    fn set_last(&self, text: String) {
        if let Ok(mut l) = self.last.lock() {
            *l = text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_names_a_state_a_weight_or_both() {
        let p = |s| AgentAnswer::parse(s);
        assert_eq!(p("75%\n"), Ok(AgentAnswer { state: None, percent: Some(75) }));
        assert_eq!(p("up 50%"), Ok(AgentAnswer { state: Some(AgentState::Up), percent: Some(50) }));
        assert_eq!(p("DRAIN"), Ok(AgentAnswer { state: Some(AgentState::Drain), percent: None }));
        assert_eq!(p("ready,maint\t10%"), Ok(AgentAnswer { state: Some(AgentState::Maint), percent: Some(10) }));
        assert_eq!(p("down # disk full"), Ok(AgentAnswer { state: Some(AgentState::Down), percent: None }));
        assert_eq!(p("stopped"), Ok(AgentAnswer { state: Some(AgentState::Down), percent: None }));
    }

    #[test]
    fn an_answer_with_an_unknown_word_or_a_bad_weight_applies_nothing() {
        assert!(AgentAnswer::parse("up sideways").unwrap_err().contains("unknown word \"sideways\""));
        assert!(AgentAnswer::parse("1001%").is_err());
        assert!(AgentAnswer::parse("-5%").is_err());
        assert!(AgentAnswer::parse("").is_err());
        assert!(AgentAnswer::parse("# only a note").is_err());
    }

    #[test]
    fn the_weight_is_a_share_of_the_configured_one_never_zero_never_past_the_largest() {
        let a = Agent::default();
        assert_eq!(a.weighted(10), 10);
        a.apply(AgentAnswer { state: None, percent: Some(75) }, "75%");
        assert_eq!(a.weighted(10), 7);
        a.apply(AgentAnswer { state: None, percent: Some(1) }, "1%");
        assert_eq!(a.weighted(10), 1);
        a.apply(AgentAnswer { state: None, percent: Some(1000) }, "1000%");
        assert_eq!(a.weighted(100), crate::config::MAX_WEIGHT);
    }

    #[test]
    fn a_failure_keeps_the_last_state_and_is_news_once() {
        let a = Agent::default();
        assert!(a.apply(AgentAnswer { state: Some(AgentState::Drain), percent: None }, "drain"));
        assert!(!a.apply(AgentAnswer { state: Some(AgentState::Drain), percent: None }, "drain"), "the same answer changes nothing");
        assert!(a.failed("connect failed".into()));
        assert!(!a.failed("connect failed".into()));
        assert_eq!(a.state(), AgentState::Drain);
        assert_eq!(a.view().unwrap().last, "fail: connect failed");
        assert!(a.clear());
        assert_eq!((a.state(), a.percent(), a.view().is_none()), (AgentState::Up, 100, true));
    }
}
