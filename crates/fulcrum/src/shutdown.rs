//! One shutdown signal and one drain: listeners stop on `stopping()`, every connection task is
//! tracked, and `drain` waits for them up to a grace period before `terminate()` closes the rest.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Clone, Default)]
pub struct Shutdown {
    /// Fired first: stop accepting.
    stop: CancellationToken,
    /// Fired after the grace period: close connections still open.
    terminate: CancellationToken,
    tasks: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }
    /// Begins the shutdown: listeners stop accepting.
    pub fn begin(&self) {
        self.stop.cancel();
    }
    pub fn stopping(&self) -> &CancellationToken {
        &self.stop
    }
    pub fn terminating(&self) -> &CancellationToken {
        &self.terminate
    }
    /// The tracker every connection task is spawned on, so the drain can wait for it.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }
    /// Waits up to `grace` for tracked tasks, then tells the rest to close and waits for them.
    /// Returns how many connections were still open when the grace period ended.
    pub async fn drain(&self, grace: Duration) -> usize {
        self.begin();
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait()).await.is_ok() {
            return 0;
        }
        let left = self.tasks.len();
        self.terminate.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tasks.wait()).await;
        left
    }
}
