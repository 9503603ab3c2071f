use std::time::Duration;

use super::*;
use crate::balance::testing::FakePool;

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

#[test]
fn window_keeps_the_last_m_slots_as_it_rolls_over() {
    let mut w = Window::default();
    w.push(10, 10, 2);
    w.push(12, 10, 2);
    assert_eq!(w.totals(), (22, 20));
    w.push(30, 10, 2);
    assert_eq!(w.totals(), (42, 20), "the oldest slot left the window");
    assert_eq!(w.r(1), Some(1.1));
}

#[test]
fn r_follows_equation_5_and_needs_min_samples() {
    let mut w = Window::default();
    w.push(12, 10, 10);
    assert_eq!(w.r(12), Some(0.2));
    assert_eq!(w.r(13), None, "12 SYNs are fewer than the minimum of 13");
    let mut dead = Window::default();
    dead.push(5, 0, 10);
    assert_eq!(dead.r(5), Some(f64::INFINITY));
}

#[test]
fn the_worst_server_gives_delta_of_its_ratio_to_the_others_in_equal_parts() {
    let mut c = Controller { ratios: vec![1.0 / 3.0; 3] };
    let moved = c.step(&[true; 3], &[Some(0.0), Some(0.5), Some(0.1)], 0.1);
    assert_eq!(moved, Some(1));
    // r1 = 1/3 - 1/30 = 0.3; the others gain 1/60 each.
    assert!(close(&c.ratios, &[1.0 / 3.0 + 1.0 / 60.0, 0.3, 1.0 / 3.0 + 1.0 / 60.0]), "{:?}", c.ratios);
    // Second step: the same server loses 10% of 0.3.
    c.step(&[true; 3], &[Some(0.0), Some(0.5), Some(0.1)], 0.1);
    assert!((c.ratios[1] - 0.27).abs() < 1e-9);
    assert!((c.ratios.iter().sum::<f64>() - 1.0).abs() < 1e-9);
}

#[test]
fn no_move_when_every_r_is_equal_or_untrusted() {
    let mut c = Controller { ratios: vec![0.5, 0.5] };
    assert_eq!(c.step(&[true, true], &[Some(0.2), Some(0.2)], 0.1), None);
    assert_eq!(c.step(&[true, true], &[None, None], 0.1), None);
    assert_eq!(c.step(&[true, true], &[Some(0.3), None], 0.1), None, "one trusted server has nothing to compare with");
    assert!(close(&c.ratios, &[0.5, 0.5]));
}

#[test]
fn a_server_leaving_mid_window_gives_its_share_to_the_rest_in_proportion() {
    let mut c = Controller { ratios: vec![0.4, 0.2, 0.4] };
    c.renormalise(&[true, true, true], &[true, false, true]);
    assert!(close(&c.ratios, &[0.5, 0.0, 0.5]), "{:?}", c.ratios);
    c.renormalise(&[true, false, true], &[true, true, true]);
    assert!(close(&c.ratios, &[1.0 / 3.0; 3]), "a joiner gets 1/n: {:?}", c.ratios);
}

#[test]
fn no_ratio_falls_below_the_floor() {
    let mut c = Controller { ratios: vec![0.5, 0.5] };
    for _ in 0..200 {
        c.step(&[true, true], &[Some(0.0), Some(1.0)], 0.1);
    }
    assert!((c.ratios[1] - MIN_RATIO).abs() < 1e-9, "{:?}", c.ratios);
}

#[test]
fn picks_follow_the_ratios_exactly_and_steps_come_once_per_slot() {
    let tuning = Tuning { delta: 0.1, slot: Duration::from_secs(1), window_slots: 3, min_samples: 10 };
    let mut pool = FakePool::with_weights(&[1, 1, 1]);
    let b = pool.attach(PassiveRatio::new(tuning));
    let t0 = crate::clock::now();
    let pick = FakePool::pick(&[]);
    let mut counts = [0usize; 3];
    for _ in 0..300 {
        counts[b.pick_at(&pick, &pool, t0).unwrap()] += 1;
    }
    assert_eq!(counts, [100, 100, 100], "equal ratios before any step");
    // One slot of traffic: server 2 needed 3 SYNs per connect, the others 1.
    pool.add_syns(0, 100, 100);
    pool.add_syns(1, 100, 100);
    pool.add_syns(2, 300, 100);
    b.pick_at(&pick, &pool, t0 + Duration::from_millis(1500));
    let table = b.table();
    assert_eq!(table[2].1, Some(2.0), "R = (300 - 100) / 100");
    assert!((table[2].0 - 0.3).abs() < 1e-9, "one step: {table:?}");
    // Half a slot later: no second step.
    b.pick_at(&pick, &pool, t0 + Duration::from_millis(1900));
    assert!((b.table()[2].0 - 0.3).abs() < 1e-9);
    let mut counts = [0usize; 3];
    for _ in 0..1000 {
        counts[b.pick_at(&pick, &pool, t0 + Duration::from_millis(1900)).unwrap()] += 1;
    }
    assert!((counts[2] as i64 - 300).abs() <= 1, "{counts:?}");
}

#[test]
fn a_server_going_down_is_renormalised_out_and_gets_no_picks() {
    let tuning = Tuning { delta: 0.1, slot: Duration::from_secs(1), window_slots: 3, min_samples: 10 };
    let mut pool = FakePool::with_weights(&[1, 1, 1]);
    let b = pool.attach(PassiveRatio::new(tuning));
    let t0 = crate::clock::now();
    let pick = FakePool::pick(&[]);
    b.pick_at(&pick, &pool, t0);
    pool.set_up(0, false);
    for _ in 0..10 {
        assert_ne!(b.pick_at(&pick, &pool, t0), Some(0));
    }
    let table = b.table();
    assert_eq!(table[0].0, 0.0);
    assert!((table[1].0 - 0.5).abs() < 1e-9 && (table[2].0 - 0.5).abs() < 1e-9, "{table:?}");
}

#[test]
fn a_server_coming_back_is_renormalised_in_on_the_event_with_its_share() {
    let tuning = Tuning { delta: 0.1, slot: Duration::from_secs(1), window_slots: 3, min_samples: 10 };
    let mut pool = FakePool::with_weights(&[1, 1]);
    let b = pool.attach(PassiveRatio::new(tuning));
    pool.set_up(1, false);
    assert!(close(&b.table().iter().map(|t| t.0).collect::<Vec<_>>(), &[1.0, 0.0]));
    pool.set_up(1, true);
    let ratios: Vec<f64> = b.table().iter().map(|t| t.0).collect();
    assert!(close(&ratios, &[0.5, 0.5]), "renormalised before any pick: {ratios:?}");
}

#[test]
fn after_more_idle_slots_than_a_u32_counts_the_next_step_is_still_one_slot_away() {
    let slot = Duration::from_millis(1);
    let tuning = Tuning { delta: 0.1, slot, window_slots: 3, min_samples: 10 };
    let mut pool = FakePool::with_weights(&[1, 1, 1]);
    let b = pool.attach(PassiveRatio::new(tuning));
    let t0 = crate::clock::now();
    let pick = FakePool::pick(&[]);
    b.pick_at(&pick, &pool, t0);
    // 50 days of 1 ms slots: more than u32::MAX of them.
    let later = t0 + Duration::from_secs(50 * 86_400);
    b.pick_at(&pick, &pool, later);
    pool.add_syns(0, 100, 100);
    pool.add_syns(1, 100, 100);
    pool.add_syns(2, 300, 100);
    b.pick_at(&pick, &pool, later + slot / 2);
    assert!((b.table()[2].0 - 1.0 / 3.0).abs() < 1e-9, "no step within the slot: {:?}", b.table());
    b.pick_at(&pick, &pool, later + slot);
    assert!((b.table()[2].0 - 0.3).abs() < 1e-9, "one step a slot later: {:?}", b.table());
}

#[test]
fn advance_takes_the_steps_a_pick_would_without_picking() {
    let mut pool = FakePool::with_weights(&[1, 1, 1]);
    let b = pool.attach(PassiveRatio::new(Tuning { delta: 0.1, slot: Duration::from_secs(1), window_slots: 3, min_samples: 10 }));
    let t0 = crate::clock::now();
    b.advance(&pool, t0);
    // One slot of traffic the kernel counted: server 2 needed 3 SYNs per connect.
    for (i, syns) in [(0, 100), (1, 100), (2, 300)] {
        pool.add_syns(i, syns, 100);
    }
    b.advance(&pool, t0 + Duration::from_millis(500));
    assert!((b.table()[2].0 - 1.0 / 3.0).abs() < 1e-9, "no step within the slot: {:?}", b.table());
    b.advance(&pool, t0 + Duration::from_secs(1));
    let table = b.table();
    assert_eq!(table[2].1, Some(2.0));
    assert!((table[2].0 - 0.3).abs() < 1e-9, "one step on the slot's clock: {table:?}");
}
