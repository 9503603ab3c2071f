//! `passive-ratio`: the controller of the passive-measurement paper (section 4.1).
//!
//! Per server, R = (N_S - N_A) / N_A over a sliding window of `window_slots` counters of `slot`
//! seconds each, where N_S is the SYNs Fulcrum's kernel sent to the server and N_A the SYN-ACKs it
//! answered (`load::Measure`). A server whose accept queue overflows drops SYNs, the client side
//! retransmits them after the SYN timeout, and R rises with the connect time (t_c ~ R x RTO).
//! Every slot the server j with the largest R gives up delta = Delta x r_j of its traffic ratio and
//! each of the other n - 1 usable servers gains delta / (n - 1). Picks follow the ratios exactly
//! (stride scheduling, `stride.rs`: not a coin flip per request, and O(log n) per pick).
//!
//! Beyond the paper: R is trusted only once a window holds `min_samples` SYNs (a handful of
//! connects says nothing); no ratio falls below `MIN_RATIO`, so a degraded server keeps being
//! measured; ratios are renormalised in `update` whenever a server goes down or comes back (a
//! server that joins or leaves comes with a new generation, whose balancer starts afresh).
//!
//! The control steps stay in `pick`: they are driven by time, not by events, a step is due at most
//! once per slot and costs one pass over the servers with no allocation, and stepping where the
//! traffic is means an idle service runs no timer and its windows simply record empty slots.
//! A pick between steps reads no server but the one it takes. In `mode = "kernel"` nothing picks:
//! nftables draws each connection's server by the ratios, and the kernel controller reads its
//! counters into the servers' `Measure` and takes the steps with `advance` once a slot.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use super::entry::Tuning;
use super::stride::Strides;
use super::{Balancer, Pick, ServerView};

/// `passive-ratio` in the registry (`algorithm.rs`).
pub const PASSIVE_RATIO: super::entry::Registered = super::entry::Registered {
    about: super::entry::About {
        name: "passive-ratio",
        title: "Passive measurement (SYN / SYN-ACK ratio)",
        modes: super::entry::EVERY_MODE,
        hashes: false,
        description: "traffic ratios that move away from the server whose connects fail or lag most, measured from the SYNs sent and SYN-ACKs received",
    },
    build: |tuning| Box::new(PassiveRatio::new(*tuning)),
};

/// The smallest traffic ratio a usable server keeps, so its R can still be measured.
pub const MIN_RATIO: f64 = 0.01;

/// A sliding window of m (SYNs sent, SYN-ACKs) slots.
#[derive(Debug, Clone, Default)]
pub struct Window {
    slots: std::collections::VecDeque<(u64, u64)>,
}

impl Window {
    /// Adds the newest slot and drops the oldest beyond `m`.
    pub fn push(&mut self, syn_sent: u64, syn_acked: u64, m: usize) {
        self.slots.push_back((syn_sent, syn_acked));
        while self.slots.len() > m.max(1) {
            self.slots.pop_front();
        }
    }

    pub fn totals(&self) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(s, a), (x, y)| (s + x, a + y))
    }

    /// R = (N_S - N_A) / N_A (the paper's equation 5); `None` below `min_samples` SYNs.
    /// A server that answered no SYN at all has R = infinity.
    pub fn r(&self, min_samples: u64) -> Option<f64> {
        let (ns, na) = self.totals();
        if ns < min_samples.max(1) {
            return None;
        }
        Some(if na == 0 { f64::INFINITY } else { ns.saturating_sub(na) as f64 / na as f64 })
    }
}

/// The ratio controller, apart from time and the pool: fed windows, it moves ratios.
#[derive(Debug, Clone)]
pub struct Controller {
    pub ratios: Vec<f64>,
}

impl Controller {
    /// One control step over `usable` servers with their windowed R (`None`: not trusted).
    /// Returns the server that lost ratio, if any. Runs inside a pick, so the live and trusted
    /// sets are iterated rather than collected: a pick allocates nothing.
    pub fn step(&mut self, usable: &[bool], r: &[Option<f64>], delta: f64) -> Option<usize> {
        let n = self.ratios.len();
        let live = |i: &usize| usable.get(*i).copied().unwrap_or(false);
        let trusted = || (0..n).filter(live).filter_map(|i| r.get(i).copied().flatten().map(|v| (i, v)));
        let live_count = (0..n).filter(live).count();
        if live_count < 2 {
            return None;
        }
        let (worst, worst_r) = trusted().fold(None, |best: Option<(usize, f64)>, (i, v)| match best {
            Some((_, bv)) if bv >= v => best,
            _ => Some((i, v)),
        })?;
        if trusted().all(|(_, v)| v == worst_r) {
            return None;
        }
        let give = (delta * self.ratios[worst]).min(self.ratios[worst] - MIN_RATIO).max(0.0);
        if give == 0.0 {
            return None;
        }
        self.ratios[worst] -= give;
        let share = give / (live_count - 1) as f64;
        for i in (0..n).filter(live) {
            if i != worst {
                self.ratios[i] += share;
            }
        }
        Some(worst)
    }

    /// Renormalises after the usable set changed: leavers drop to 0, joiners get 1/n, and the
    /// rest keep their proportions within what is left.
    pub fn renormalise(&mut self, was: &[bool], now: &[bool]) {
        let n = now.iter().filter(|&&u| u).count();
        if n == 0 {
            self.ratios.iter_mut().for_each(|r| *r = 0.0);
            return;
        }
        let joiners = (0..now.len()).filter(|&i| now[i] && !was.get(i).copied().unwrap_or(false)).count();
        let stay_sum: f64 = (0..now.len()).filter(|&i| now[i] && was.get(i).copied().unwrap_or(false)).map(|i| self.ratios[i]).sum();
        let for_stayers = 1.0 - joiners as f64 / n as f64;
        for (i, (ratio, &up)) in self.ratios.iter_mut().zip(now).enumerate() {
            *ratio = if !up {
                0.0
            } else if !was.get(i).copied().unwrap_or(false) {
                1.0 / n as f64
            } else if stay_sum > 0.0 {
                *ratio / stay_sum * for_stayers
            } else {
                for_stayers / (n - joiners) as f64
            };
        }
    }
}

#[derive(Debug)]
struct State {
    controller: Controller,
    windows: Vec<Window>,
    /// Counter totals at the last step, to cut the next slot from.
    last: Vec<(u64, u64)>,
    /// The usable set the ratios were last renormalised for.
    usable: Vec<bool>,
    /// When the last step was due; `None` until the first pick, which starts the control clock.
    last_step: Option<Instant>,
    /// The picks' order by the ratios, started afresh whenever they move.
    strides: Strides,
    /// Each server's R at the last step, kept so a step allocates nothing.
    r: Vec<Option<f64>>,
}

#[derive(Debug)]
pub struct PassiveRatio {
    tuning: Tuning,
    state: Mutex<Option<State>>,
}

fn usable_set(view: &dyn ServerView) -> impl Iterator<Item = bool> + '_ {
    (0..view.len()).map(|i| view.effective_weight(i) > 0)
}

impl PassiveRatio {
    pub fn new(tuning: Tuning) -> Self {
        PassiveRatio { tuning, state: Mutex::new(None) }
    }

    /// Runs the control steps due by `now`.
    fn step_due(&self, st: &mut State, view: &dyn ServerView, now: Instant) {
        let Some(last_step) = st.last_step else {
            st.last_step = Some(now);
            return;
        };
        let elapsed = now.saturating_duration_since(last_step);
        let slot = self.tuning.slot.max(Duration::from_millis(1));
        if elapsed < slot {
            return;
        }
        // Counted without casts: after a long idle spell the slots that passed can outnumber a
        // u32 (49 days of 1 ms slots), and a truncated count would step the clock wrongly.
        let steps = elapsed.as_nanos() / slot.as_nanos();
        let into_slot = Duration::from_nanos(u64::try_from(elapsed.as_nanos() % slot.as_nanos()).unwrap_or(0));
        st.last_step = Some(now.checked_sub(into_slot).unwrap_or(now));
        let m = self.tuning.window_slots;
        let empty = usize::try_from(steps).unwrap_or(usize::MAX).min(m);
        for i in 0..view.len().min(st.windows.len()) {
            let s = view.sample(i);
            let (ps, pa) = st.last[i];
            st.last[i] = (s.syn_sent, s.syn_acked);
            // Slots that passed with no pick are empty: the window still moves on.
            for _ in 1..empty {
                st.windows[i].push(0, 0, m);
            }
            st.windows[i].push(s.syn_sent.saturating_sub(ps), s.syn_acked.saturating_sub(pa), m);
        }
        for (r, w) in st.r.iter_mut().zip(&st.windows) {
            *r = w.r(self.tuning.min_samples);
        }
        let moved = st.controller.step(&st.usable, &st.r, self.tuning.delta);
        if moved.is_some() {
            st.strides.restart(&st.controller.ratios);
        }
        tracing::debug!(ratios = ?st.controller.ratios, r = ?st.r, moved = ?moved, "passive-ratio control step");
    }

    fn fresh(view: &dyn ServerView) -> State {
        let n = view.len();
        let usable: Vec<bool> = usable_set(view).collect();
        let mut controller = Controller { ratios: vec![0.0; n] };
        controller.renormalise(&vec![false; n], &usable);
        let mut strides = Strides::default();
        strides.restart(&controller.ratios);
        State {
            controller,
            windows: vec![Window::default(); n],
            last: (0..n).map(|i| view.sample(i)).map(|s| (s.syn_sent, s.syn_acked)).collect(),
            usable,
            last_step: None,
            strides,
            r: vec![None; n],
        }
    }

    /// Per server: (ratio, R over the window if trusted, N_S, N_A), for stats.
    pub fn table(&self) -> Vec<(f64, Option<f64>, u64, u64)> {
        let Ok(g) = self.state.lock() else { return Vec::new() };
        let Some(st) = g.as_ref() else { return Vec::new() };
        st.windows
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let (ns, na) = w.totals();
                (st.controller.ratios[i], w.r(self.tuning.min_samples), ns, na)
            })
            .collect()
    }

    pub fn pick_at(&self, pick: &Pick<'_>, view: &dyn ServerView, now: Instant) -> Option<usize> {
        let mut g = self.stepped(view, now);
        let st = g.as_mut()?;
        turn(&st.controller.ratios, &mut st.strides, pick, view)
    }

    /// The state, locked, with the steps due by `now` taken.
    fn stepped(&self, view: &dyn ServerView, now: Instant) -> std::sync::MutexGuard<'_, Option<State>> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if g.as_ref().is_none_or(|s| s.windows.len() != view.len()) {
            // Only for a balancer picking before its first update; `update` builds the state.
            *g = Some(Self::fresh(view));
        }
        if let Some(st) = g.as_mut() {
            self.step_due(st, view, now);
        }
        g
    }
}

/// The next pick by the traffic `ratios` in the order of `strides`.
fn turn(ratios: &[f64], strides: &mut Strides, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
    let n = view.len().min(ratios.len());
    // Slow start scales a returning server's ratio; the controller's own ratios stay.
    strides.take(|i| i < n && pick.usable(view, i), |i| ratios[i] * f64::from(view.ramp(i)) / f64::from(super::RAMP_FULL))
}

impl Balancer for PassiveRatio {
    fn pick(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        self.pick_at(pick, view, crate::clock::now())
    }

    /// The turn by the ratios as they are, on a copy of the scores: no control step is taken.
    fn peek(&self, pick: &Pick<'_>, view: &dyn ServerView) -> Option<usize> {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_ref().filter(|s| s.windows.len() == view.len()) {
            Some(st) => turn(&st.controller.ratios, &mut st.strides.clone(), pick, view),
            // Before its first update: the ratios it would start with.
            None => {
                let mut fresh = Self::fresh(view);
                turn(&fresh.controller.ratios, &mut fresh.strides, pick, view)
            }
        }
    }

    /// Builds the state at build time and renormalises the ratios when a server went down or
    /// came back; the windows and the control clock carry on.
    fn update(&self, view: &dyn ServerView) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_mut() {
            Some(st) if st.windows.len() == view.len() => {
                if !usable_set(view).eq(st.usable.iter().copied()) {
                    let usable: Vec<bool> = usable_set(view).collect();
                    st.controller.renormalise(&st.usable, &usable);
                    st.usable = usable;
                    st.strides.restart(&st.controller.ratios);
                }
            }
            _ => *g = Some(Self::fresh(view)),
        }
    }

    /// The steps a pick would take, driven by the kernel controller's slot clock instead.
    fn advance(&self, view: &dyn ServerView, now: Instant) {
        drop(self.stepped(view, now));
    }

    fn metrics(&self, i: usize) -> Option<super::AlgorithmMetrics> {
        let (ratio, r, n_s, n_a) = *self.table().get(i)?;
        Some(super::AlgorithmMetrics { ratio: Some(ratio), r, n_s: Some(n_s), n_a: Some(n_a) })
    }
}

#[cfg(test)]
mod tests;
