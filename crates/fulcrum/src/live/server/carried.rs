//! A server's state as one process hands it to the next across a binary upgrade (`app::upgrade`):
//! health (the result, its streak and the last check), a passive hold, the slow-start ramp as far
//! as it got, the flap penalty and a suppression, the downtime, and the counters the stats show.
//! The new process restores each before its first health round, so its servers take traffic as
//! they did, ramps go on where they were, and the stats go on counting from where they stood.
//!
//! Connections in flight are not state here: they stay with the old process until they end.

use std::sync::atomic::Ordering::Relaxed;

use serde::{Deserialize, Serialize};

use super::ServerState;
use crate::clock::{clock_ms, unix_ms};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    pub service: String,
    pub address: String,
    health_up: bool,
    checked: bool,
    check_streak: u32,
    last_check: String,
    last_check_ms: u64,
    passive_down: bool,
    consecutive_failures: u32,
    down_since_ms: u64,
    downtime_ms: u64,
    ramps: bool,
    /// How far a running ramp had got, in ms; `None`: none runs.
    ramp_elapsed_ms: Option<u64>,
    penalty: f64,
    suppressed: bool,
    counters: CarriedCounters,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct CarriedCounters {
    max: u64,
    total: u64,
    connect_failures: u64,
    bytes_in: u64,
    bytes_out: u64,
    last_use_ms: u64,
    lb_total: u64,
    redispatches: u64,
    transfer_errors: u64,
    data_transfers: u64,
    responses: [u64; 5],
}

impl ServerState {
    /// What the next process needs to go on where this one is.
    pub fn carry(&self) -> Carried {
        let now = clock_ms();
        let from = self.ramp_from.load(Relaxed);
        let penalty = self.flaps.lock().map_or(0.0, |f| f.penalty(now));
        let c = &self.counters;
        Carried {
            service: self.key.service.clone(),
            address: self.key.address.clone(),
            health_up: self.health_up.load(Relaxed),
            checked: self.checked.load(Relaxed),
            check_streak: self.check_streak.load(Relaxed),
            last_check: self.last_check(),
            last_check_ms: self.last_check_ms.load(Relaxed),
            passive_down: self.passive_down.load(Relaxed),
            consecutive_failures: self.consecutive_failures.load(Relaxed),
            down_since_ms: self.down_since_ms.load(Relaxed),
            downtime_ms: self.downtime_ms.load(Relaxed),
            ramps: self.ramps.load(Relaxed),
            ramp_elapsed_ms: (from != 0).then(|| now.saturating_sub(from)),
            penalty,
            suppressed: self.suppressed.load(Relaxed),
            counters: CarriedCounters {
                max: c.max.load(Relaxed),
                total: c.total.load(Relaxed),
                connect_failures: c.connect_failures.load(Relaxed),
                bytes_in: c.bytes_in.load(Relaxed),
                bytes_out: c.bytes_out.load(Relaxed),
                last_use_ms: c.last_use_ms.load(Relaxed),
                lb_total: c.lb_total.load(Relaxed),
                redispatches: c.redispatches.load(Relaxed),
                transfer_errors: c.transfer_errors.load(Relaxed),
                data_transfers: c.data_transfers.load(Relaxed),
                responses: c.responses.read(),
            },
        }
    }

    /// Takes on what the previous process carried for this server (its generation's settings
    /// already configured): the balancers hear of the state, a ramp goes on, a suppression ends
    /// when its penalty has decayed, as they would have there.
    pub fn restore(&self, carried: &Carried) {
        let now = clock_ms();
        self.health_up.store(carried.health_up, Relaxed);
        self.checked.store(carried.checked, Relaxed);
        self.check_streak.store(carried.check_streak, Relaxed);
        if let Ok(mut g) = self.last_check.lock() {
            g.clone_from(&carried.last_check);
        }
        self.last_check_ms.store(carried.last_check_ms, Relaxed);
        self.passive_down.store(carried.passive_down, Relaxed);
        self.consecutive_failures.store(carried.consecutive_failures, Relaxed);
        // A downtime that runs goes on from when it began, wall clock against wall clock.
        self.down_since_ms.store(carried.down_since_ms.min(unix_ms()), Relaxed);
        self.downtime_ms.store(carried.downtime_ms, Relaxed);
        self.ramps.store(carried.ramps, Relaxed);
        if let Ok(mut f) = self.flaps.lock() {
            f.penalty = carried.penalty;
            f.at = now;
        }
        self.suppressed.store(carried.suppressed, Relaxed);
        let c = &self.counters;
        let k = &carried.counters;
        for (counter, value) in [
            (&c.max, k.max),
            (&c.total, k.total),
            (&c.connect_failures, k.connect_failures),
            (&c.bytes_in, k.bytes_in),
            (&c.bytes_out, k.bytes_out),
            (&c.last_use_ms, k.last_use_ms),
            (&c.lb_total, k.lb_total),
            (&c.redispatches, k.redispatches),
            (&c.transfer_errors, k.transfer_errors),
            (&c.data_transfers, k.data_transfers),
        ] {
            counter.store(value, Relaxed);
        }
        c.responses.restore(k.responses);
        self.was_healthy.store(carried.health_up && !carried.passive_down, Relaxed);
        let up = self.state() == super::State::Up;
        self.was_up.store(up, Relaxed);
        match carried.ramp_elapsed_ms {
            Some(elapsed) if up => self.resume_ramp(now.saturating_sub(elapsed).max(1)),
            _ => self.ramp_from.store(0, Relaxed),
        }
        if carried.suppressed {
            self.reconsider();
        }
        self.events.notify();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::balance::events::Subscribers;
    use crate::live::ServerKey;

    fn server(checked: bool) -> Arc<ServerState> {
        ServerState::new(ServerKey { service: "web".into(), address: "10.0.0.1:80".into() }, Arc::new(Subscribers::default()), 4, true, checked)
    }

    #[tokio::test(start_paused = true)]
    async fn a_restored_server_is_where_the_carried_one_was() {
        let old = server(true);
        old.configure(Duration::from_secs(100), &crate::config::Damping::default(), false);
        old.set_last_check("HTTP 200".into(), Duration::from_millis(3));
        old.set_health(true);
        old.set_check_streak(1);
        old.counters.total.store(1234, Relaxed);
        old.counters.responses.add(503);
        tokio::time::advance(Duration::from_secs(5)).await;
        let carried = old.carry();
        let line = serde_json::to_string(&carried).unwrap();

        let new = server(true);
        new.configure(Duration::from_secs(100), &crate::config::Damping::default(), false);
        assert_eq!(new.state(), super::super::State::Down, "a checked server starts down");
        new.restore(&serde_json::from_str(&line).unwrap());
        assert_eq!(new.state(), super::super::State::Up);
        assert!(new.checked() && new.check_streak() == 1 && new.last_check() == "HTTP 200");
        assert_eq!(new.counters.total.load(Relaxed), 1234);
        assert_eq!(new.counters.responses.read(), [0, 0, 0, 0, 1]);
        assert_eq!(new.carry(), carried, "what it carries on is what it was given");
    }
}
