//! A pool of fake servers for the algorithms' unit tests.

use std::net::{IpAddr, Ipv4Addr};

use super::{Balancer, Pick, Pool};

#[derive(Debug, Clone)]
pub struct FakePool {
    weights: Vec<u32>,
    active: Vec<u64>,
    keys: Vec<String>,
    epoch: u64,
    samples: Vec<super::load::Sample>,
}

impl FakePool {
    pub fn with_weights(weights: &[u32]) -> Self {
        FakePool {
            weights: weights.to_vec(),
            active: vec![0; weights.len()],
            keys: (0..weights.len()).map(|i| format!("192.0.2.{i}:80")).collect(),
            epoch: 1,
            samples: vec![super::load::Sample::default(); weights.len()],
        }
    }
    pub fn set_weight(&mut self, i: usize, w: u32) {
        self.weights[i] = w;
        self.epoch += 1;
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

impl Pool for FakePool {
    fn len(&self) -> usize {
        self.weights.len()
    }
    fn weight(&self, i: usize) -> u32 {
        self.weights[i]
    }
    fn active(&self, i: usize) -> u64 {
        self.active[i]
    }
    fn key(&self, i: usize) -> &str {
        &self.keys[i]
    }
    fn epoch(&self) -> u64 {
        self.epoch
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
