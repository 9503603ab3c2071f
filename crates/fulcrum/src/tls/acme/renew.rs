//! When to renew and when to try again: the arithmetic of the orderer, apart from it so that it
//! is tested on its own.
//!
//! A certificate is renewed at two thirds of its lifetime (Let's Encrypt's advice: a 90-day
//! certificate at day 60, leaving a month to fix what fails), brought forward by up to a
//! twentieth of the lifetime at random so that many instances or many certificates do not ask
//! the CA at the same second. When the CA publishes renewal information (ARI, RFC 9773) with a
//! suggested window that ends before that time (a CA about to revoke says so there), a random
//! time in the window is taken instead; a window that reaches later changes nothing, so a
//! certificate is never renewed later than two thirds of its life. A failed order is tried again after an exponential backoff with a cap, or
//! later when the CA said when (`Retry-After`, a rate limit).

use std::time::Duration;

/// The first wait after a failure; each following failure doubles it.
pub const FIRST_RETRY: Duration = Duration::from_secs(15);
/// The longest wait between two tries of a failing order (without the CA's word for longer).
pub const MOST_RETRY: Duration = Duration::from_secs(3600);
/// The longest a CA's `Retry-After` is obeyed: a day, so a bad header cannot stop renewals.
pub const MOST_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// The Unix time to renew a certificate valid from `not_before` to `not_after`; `jitter` in
/// [0, 1) picks the point (`rand`), `window` is ARI's suggested window if the CA gave one.
pub fn renewal_time(not_before: i64, not_after: i64, jitter: f64, window: Option<(i64, i64)>) -> i64 {
    let life = (not_after - not_before).max(0);
    let jitter = jitter.clamp(0.0, 1.0);
    let planned = not_before + life * 2 / 3 - (life as f64 / 20.0 * jitter) as i64;
    match window {
        Some((start, end)) if start <= end && end < planned => start + ((end - start) as f64 * jitter) as i64,
        _ => planned,
    }
}

/// How long to wait before trying a failing order again, after `failures` failures in a row
/// (1 for the first): `FIRST_RETRY` doubled each time up to `MOST_RETRY`, and never sooner than
/// the CA's `retry_after` (itself capped at `MOST_RETRY_AFTER`). A rate limit without a
/// `Retry-After` waits the cap.
pub fn backoff(failures: u32, retry_after: Option<Duration>, rate_limited: bool) -> Duration {
    let doubled = FIRST_RETRY.saturating_mul(1u32 << failures.saturating_sub(1).min(16)).min(MOST_RETRY);
    let floor = match (retry_after, rate_limited) {
        (Some(after), _) => after.min(MOST_RETRY_AFTER),
        (None, true) => MOST_RETRY,
        (None, false) => Duration::ZERO,
    };
    doubled.max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_at_two_thirds_of_the_lifetime_or_a_little_before() {
        let day = 86_400;
        // 90 days from 0: day 60 without jitter, at most 4.5 days earlier with it.
        assert_eq!(renewal_time(0, 90 * day, 0.0, None), 60 * day);
        let earliest = renewal_time(0, 90 * day, 0.999, None);
        assert!(earliest < 60 * day && earliest >= 60 * day - 90 * day / 20, "{earliest}");
        // A lifetime of 60 s renews after 40 s at the latest.
        assert!(renewal_time(1000, 1060, 0.5, None) <= 1040);
        // A certificate already expired (or a nonsense one) renews at once, never panics.
        assert_eq!(renewal_time(100, 50, 0.3, None), 100);
    }

    #[test]
    fn an_earlier_ari_window_brings_renewal_forward_and_a_later_one_does_not() {
        let day = 86_400;
        let at = renewal_time(0, 90 * day, 0.5, Some((10 * day, 12 * day)));
        assert_eq!(at, 11 * day);
        assert_eq!(renewal_time(0, 90 * day, 0.0, Some((70 * day, 80 * day))), 60 * day);
        // A window upside down is ignored.
        assert_eq!(renewal_time(0, 90 * day, 0.0, Some((12 * day, 10 * day))), 60 * day);
    }

    #[test]
    fn backoff_doubles_up_to_a_cap_and_obeys_the_ca() {
        assert_eq!(backoff(1, None, false), FIRST_RETRY);
        assert_eq!(backoff(2, None, false), FIRST_RETRY * 2);
        assert_eq!(backoff(3, None, false), FIRST_RETRY * 4);
        assert_eq!(backoff(40, None, false), MOST_RETRY);
        assert_eq!(backoff(0, None, false), FIRST_RETRY);
        assert_eq!(backoff(1, Some(Duration::from_secs(600)), false), Duration::from_secs(600));
        assert_eq!(backoff(1, Some(Duration::from_secs(10 * 86_400)), true), MOST_RETRY_AFTER);
        assert_eq!(backoff(1, None, true), MOST_RETRY);
    }
}
