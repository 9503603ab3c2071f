//! systemd's readiness protocol, for a unit with `Type=notify` (`contrib/systemd/fulcrum.service`):
//! READY once the first health round is done and the listeners are bound, RELOADING and READY
//! again around a reload (SIGHUP, which the unit's `ExecReload` sends), STOPPING when the drain
//! begins. Outside systemd (no `NOTIFY_SOCKET`) each call does nothing.
//!
//! With `WatchdogSec=` in the unit, the main loop (`App::run_until_signal`) says WATCHDOG=1 at
//! half that interval: a process whose runtime no longer runs its tasks stops saying it, and
//! systemd restarts it.

use sd_notify::NotifyState;
use tracing::warn;

/// The process serves; `status` is what `systemctl status` shows.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The process took over from the one it upgraded (`app::upgrade`): it is the service's main
/// process now (the unit's `NotifyAccess=all` lets systemd hear it before it is), and serves.
pub fn took_over(status: &str) {
    send(&[NotifyState::MainPid(std::process::id()), NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload begins: systemd waits for the next READY before it calls the reload done.
pub fn reloading() {
    // systemd 253 and later want the monotonic time with RELOADING to tell reloads apart.
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// The drain begins.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining connections")]);
}

/// How often to say WATCHDOG=1: half the unit's `WatchdogSec`, or `None` without one.
pub fn watchdog_interval() -> Option<std::time::Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero()).map(|d| d / 2)
}

/// The main loop is alive.
pub fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!("cannot tell systemd ({}): {e}", std::env::var("NOTIFY_SOCKET").unwrap_or_default());
    }
}
