//! `Balancer::peek` moves nothing: for every algorithm, the picks made with peeks between them
//! are exactly the picks made without (the generators of the random ones seeded alike), and a
//! peek answers what the next pick takes where the algorithm does not draw at random.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::load::InFlight;
use super::testing::FakePool;
use super::{Balancer, Pick};

/// An algorithm by name, how to build it afresh (seeded where it draws), and whether it draws at
/// random.
type Entry = (&'static str, fn() -> Box<dyn Balancer>, bool);

fn algorithms() -> Vec<Entry> {
    vec![
        ("round-robin", || Box::new(super::round_robin::RoundRobin::default()), false),
        ("static-rr", || Box::new(super::static_rr::StaticRr::default()), false),
        ("least-conn", || Box::new(super::least_conn::LeastConn::default()), false),
        ("source-hash", || Box::new(super::source_hash::SourceHash::default()), false),
        ("passive-ratio", || Box::new(super::passive_ratio::PassiveRatio::new(tuning())), false),
        ("random", || Box::new(super::random::Random::seeded(7)), true),
        ("p2c", || Box::new(super::p2c::P2c::<InFlight>::seeded(7)), true),
        ("p2c-ewma", || Box::new(super::p2c_ewma::P2cEwma::seeded(7)), true),
    ]
}

fn tuning() -> super::passive_ratio::Tuning {
    super::passive_ratio::Tuning { delta: 0.1, slot: Duration::from_secs(3600), window_slots: 4, min_samples: 10 }
}

/// Picks for clients 10.0.0.0 to 10.0.0.59 in turn, peeking `peeks` times before each; with
/// connections in flight varied so the load-aware rules have something to compare.
fn picks(b: &dyn Balancer, peeks: usize) -> (Vec<Option<usize>>, Vec<bool>) {
    let mut pool = FakePool::with_weights(&[3, 1, 2, 1]);
    b.update(&pool);
    let mut taken = Vec::new();
    let mut foretold = Vec::new();
    for k in 0..60u8 {
        pool.set_active(usize::from(k) % 4, u64::from(k % 3));
        let pick = Pick { client: IpAddr::V4(Ipv4Addr::new(10, 0, 0, k)), avoid: &[], hash: None };
        let looked: Vec<Option<usize>> = (0..peeks).map(|_| b.peek(&pick, &pool)).collect();
        let got = b.pick(&pick, &pool);
        foretold.push(looked.iter().all(|l| *l == got));
        taken.push(got);
    }
    (taken, foretold)
}

#[test]
fn peeking_moves_no_algorithm_and_foretells_the_ones_that_do_not_draw() {
    for (name, build, draws) in algorithms() {
        let (plain, _) = picks(&*build(), 0);
        let (peeked, foretold) = picks(&*build(), 100);
        assert_eq!(plain, peeked, "{name}: 100 peeks before each pick changed the picks");
        assert!(plain.iter().all(Option::is_some), "{name}: every pick found a server");
        if !draws {
            assert!(foretold.iter().all(|f| *f), "{name}: a peek did not answer the pick that followed");
        }
    }
}
