//! A group of fake servers for the algorithms' unit tests, which tells the balancers attached to
//! it of every weight or state change as the runtime's event hub (`events.rs`) does.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Weak};

use super::{Balancer, Pick, ServerView};

#[derive(Clone)]
pub struct FakePool {
    weights: Vec<u32>,
    up: Vec<bool>,
    active: Vec<u64>,
    keys: Vec<String>,
    samples: Vec<super::load::Sample>,
    attached: Vec<Weak<dyn Balancer>>,
}

impl FakePool {
    pub fn with_weights(weights: &[u32]) -> Self {
        FakePool {
            weights: weights.to_vec(),
            up: vec![true; weights.len()],
            active: vec![0; weights.len()],
            keys: (0..weights.len()).map(|i| format!("192.0.2.{i}:80")).collect(),
            samples: vec![super::load::Sample::default(); weights.len()],
            attached: Vec::new(),
        }
    }
    /// Builds a balancer over this pool as the runtime does: one update now, one on every change.
    pub fn attach<B: Balancer + 'static>(&mut self, b: B) -> Arc<B> {
        let b = Arc::new(b);
        b.update(self);
        self.attached.push(Arc::downgrade(&b) as Weak<dyn Balancer>);
        b
    }
    /// A copy no balancer hears of: changed behind their backs, as in the instant between a
    /// server's change and the update that follows it.
    pub fn untold(&self) -> FakePool {
        FakePool { attached: Vec::new(), ..self.clone() }
    }
    fn changed(&self) {
        for b in self.attached.iter().filter_map(Weak::upgrade) {
            b.update(self);
        }
    }
    /// Changes the configured weight (the effective one follows while the server is up).
    pub fn set_weight(&mut self, i: usize, w: u32) {
        self.weights[i] = w;
        self.changed();
    }
    /// A health flip: the server goes down (effective weight 0) or comes back.
    pub fn set_up(&mut self, i: usize, up: bool) {
        self.up[i] = up;
        self.changed();
    }
    pub fn set_active(&mut self, i: usize, n: u64) {
        self.active[i] = n;
    }
    pub fn set_ewma(&mut self, i: usize, us: f64) {
        self.samples[i].ewma_us = us;
    }
    /// Adds connects to server `i`'s monotonic counters.
    pub fn add_syns(&mut self, i: usize, sent: u64, acked: u64) {
        self.samples[i].syn_sent += sent;
        self.samples[i].syn_acked += acked;
    }
    /// A pick from a fixed client with the given avoid set.
    pub fn pick(avoid: &[usize]) -> Pick<'_> {
        Pick { client: IpAddr::V4(Ipv4Addr::LOCALHOST), avoid, hash: None }
    }
}

impl ServerView for FakePool {
    fn len(&self) -> usize {
        self.weights.len()
    }
    fn weight(&self, i: usize) -> u32 {
        self.weights[i]
    }
    fn effective_weight(&self, i: usize) -> u32 {
        if self.up[i] { self.weights[i] } else { 0 }
    }
    fn active(&self, i: usize) -> u64 {
        self.active[i]
    }
    fn key(&self, i: usize) -> &str {
        &self.keys[i]
    }
    fn sample(&self, i: usize) -> super::load::Sample {
        self.samples[i]
    }
}

/// How many of `n` picks went to each server.
pub fn count_picks(b: &dyn Balancer, pool: &FakePool, n: usize) -> Vec<usize> {
    let mut counts = vec![0; pool.len()];
    for _ in 0..n {
        if let Some(i) = b.pick(&FakePool::pick(&[]), pool) {
            counts[i] += 1;
        }
    }
    counts
}
