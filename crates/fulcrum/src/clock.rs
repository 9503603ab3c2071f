//! The process's clocks, in one place: readings that the data path, the health checks and the
//! stats share, so a test that pauses tokio's clock moves them all.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds on the runtime's clock (tokio's, so a test with a paused clock moves it), from a
/// base an hour before the first call, so 0 is never a reading and means "not set".
pub fn clock_ms() -> u64 {
    static BASE: std::sync::LazyLock<std::time::Instant> = std::sync::LazyLock::new(|| {
        let now = std::time::Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    });
    tokio::time::Instant::now().into_std().saturating_duration_since(*BASE).as_millis() as u64
}

/// Milliseconds since the Unix epoch on the wall clock; 0 if the clock is set before 1970.
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
