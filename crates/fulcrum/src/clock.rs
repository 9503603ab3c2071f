//! The process's clocks, in one place: every reading of the time in this crate comes from here
//! (`clippy.toml` refuses `Instant::now`, `SystemTime::now` and `elapsed` elsewhere), so a test
//! that pauses tokio's clock moves the data path, the health checks and the stats together.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Now on the runtime's clock: tokio's, which a test can pause; the monotonic clock elsewhere.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Now as tokio's `Instant`, for its timers' deadlines.
pub fn timer_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// How long since `then` on the runtime's clock; zero if `then` is later.
pub fn since(then: impl Into<Instant>) -> Duration {
    now().saturating_duration_since(then.into())
}

/// The wall clock: for what is shown or stored as a date (logs, certificates' expiry, etcd).
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// Milliseconds on the runtime's clock, from a base an hour before the first call, so 0 is
/// never a reading and means "not set".
pub fn clock_ms() -> u64 {
    static BASE: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    });
    now().saturating_duration_since(*BASE).as_millis() as u64
}

/// The wall clock as time since the Unix epoch; zero if the clock is set before 1970.
pub fn since_epoch() -> Duration {
    wall().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Milliseconds since the Unix epoch on the wall clock; 0 if the clock is set before 1970.
pub fn unix_ms() -> u64 {
    since_epoch().as_millis() as u64
}
