//! systemd's readiness protocol, for a unit with `Type=notify` (`contrib/systemd/fulcrum.service`):
//! READY once the first health round is done and the listeners are bound, RELOADING and READY
//! again around a reload (SIGHUP, which the unit's `ExecReload` sends), STOPPING when the drain
//! begins. Outside systemd (no `NOTIFY_SOCKET`) each call does nothing.

use sd_notify::NotifyState;
use tracing::warn;

/// The process serves; `status` is what `systemctl status` shows.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
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

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!("cannot tell systemd ({}): {e}", std::env::var("NOTIFY_SOCKET").unwrap_or_default());
    }
}
