//! The usable servers of a view as `update` last saw them, with their shares summed in order:
//! what lets a pick cost the same over 4 servers and over 10,000. `random` draws a point below
//! the total and finds its server by binary search, `p2c` draws two servers by index, and
//! `round-robin` over equal shares walks the list with one cursor, where each would otherwise
//! read every server's state on every pick.
//!
//! A snapshot can be behind the view for the instant between a change and its update (the update
//! thread rebuilds it at once, a slow-start ramp every twentieth of its period), so a pick checks
//! the server it drew ([`Pick::usable`]) and, when a few draws miss, makes the pass over the view
//! it would have made without one: the answer is always one the view allows.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use super::{Pick, ServerView};

/// How often a pick draws from the snapshot before it falls back to a pass over the view: misses
/// come from servers a connection already failed on, or from a change not yet rebuilt.
pub const DRAWS: usize = 4;

/// The usable servers of a view in index order, each with the sum of the shares up to and
/// including its own.
#[derive(Debug, Default)]
pub struct Usable {
    /// The length of the view it was built from: a snapshot of another view is never used.
    of_len: usize,
    servers: Vec<usize>,
    ends: Vec<u64>,
    /// Whether every usable server had the same share (plain rotation is then smooth weighted
    /// round robin).
    equal: bool,
}

impl Usable {
    /// The servers of `view` with a share above zero.
    pub fn of(view: &dyn ServerView) -> Usable {
        let mut u = Usable { of_len: view.len(), equal: true, ..Usable::default() };
        let mut total = 0u64;
        let mut first = None;
        for i in 0..view.len() {
            let share = view.share(i);
            if share == 0 {
                continue;
            }
            u.equal &= *first.get_or_insert(share) == share;
            total += share;
            u.servers.push(i);
            u.ends.push(total);
        }
        u
    }

    /// Whether the snapshot may serve a pick in `view`: built from a view of its length, and
    /// from the live one (a view that ignores health is never told of changes).
    fn serves(&self, view: &dyn ServerView) -> bool {
        self.of_len == view.len() && view.told() && !self.servers.is_empty()
    }

    /// The sum of the shares.
    pub fn total(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The `k`th usable server (mod the count).
    pub fn nth(&self, k: usize) -> usize {
        self.servers[k % self.servers.len()]
    }

    /// The server whose range of shares holds `point` (below [`Usable::total`]).
    pub fn at(&self, point: u64) -> usize {
        let k = self.ends.partition_point(|&end| end <= point);
        self.servers[k.min(self.servers.len() - 1)]
    }

    pub fn equal_shares(&self) -> bool {
        self.equal
    }
}

/// A [`Usable`] snapshot published by `update` for picks to load without a lock.
#[derive(Debug, Default)]
pub struct Snapshot(ArcSwap<Usable>);

impl Snapshot {
    /// Rebuilt from `view`: called from `Balancer::update`, on the update thread.
    pub fn rebuild(&self, view: &dyn ServerView) {
        self.0.store(Arc::new(Usable::of(view)));
    }

    /// The snapshot when it may serve a pick in `view`: a guard, not a clone of the `Arc`, so
    /// a pick moves no shared reference count.
    pub fn serving(&self, view: &dyn ServerView) -> Option<Guard<Arc<Usable>>> {
        let usable = self.0.load();
        usable.serves(view).then_some(usable)
    }

    /// The first of up to [`DRAWS`] servers `draw` gives from the snapshot that `pick` may use
    /// now; `None` when there is no snapshot for `view` or every draw missed (the caller then
    /// passes over the view).
    pub fn draw(&self, pick: &Pick<'_>, view: &dyn ServerView, mut draw: impl FnMut(&Usable) -> usize) -> Option<usize> {
        let usable = self.serving(view)?;
        (0..DRAWS).map(|_| draw(&usable)).find(|&i| pick.usable(view, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::testing::FakePool;

    #[test]
    fn points_fall_in_the_range_of_their_server_and_unusable_servers_have_none() {
        let mut pool = FakePool::with_weights(&[2, 0, 1, 3]);
        pool.set_up(3, false);
        let u = Usable::of(&pool);
        assert_eq!(u.len(), 2);
        assert_eq!(u.total(), 3 * u64::from(crate::balance::RAMP_FULL));
        let unit = u64::from(crate::balance::RAMP_FULL);
        assert_eq!(u.at(0), 0);
        assert_eq!(u.at(2 * unit - 1), 0);
        assert_eq!(u.at(2 * unit), 2);
        assert_eq!(u.at(3 * unit - 1), 2);
        assert!(!u.equal_shares());
        assert!(Usable::of(&FakePool::with_weights(&[5, 5, 0, 5])).equal_shares());
    }

    #[test]
    fn a_snapshot_of_another_view_or_an_empty_one_serves_no_pick() {
        let s = Snapshot::default();
        let pool = FakePool::with_weights(&[1, 1]);
        assert!(s.serving(&pool).is_none(), "before the first update");
        s.rebuild(&FakePool::with_weights(&[1, 1, 1]));
        assert!(s.serving(&pool).is_none(), "built from a view of another length");
        s.rebuild(&FakePool::with_weights(&[0, 0]));
        assert!(s.serving(&pool).is_none(), "nothing usable: the pass over the view answers");
        s.rebuild(&pool);
        assert!(s.serving(&pool).is_some());
    }

    #[test]
    fn a_draw_never_returns_a_server_the_pick_may_not_use() {
        let mut pool = FakePool::with_weights(&[1, 1, 1]);
        let s = Snapshot::default();
        s.rebuild(&pool);
        // Down since the snapshot was built (its update not yet run): every draw lands on it.
        pool.set_up(1, false);
        assert_eq!(s.draw(&FakePool::pick(&[]), &pool, |u| u.nth(1)), None);
        assert_eq!(s.draw(&FakePool::pick(&[0]), &pool, |u| u.nth(0)), None, "avoided");
        assert_eq!(s.draw(&FakePool::pick(&[]), &pool, |u| u.nth(2)), Some(2));
    }
}
