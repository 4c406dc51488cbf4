//! systemd's service notifications, for a unit with `Type=notify` (and `WatchdogSec=`): `READY=1`
//! once the first sweep is done, `WATCHDOG=1` after every sweep while the manager asks for it
//! (`WATCHDOG_USEC`), `STOPPING=1` on SIGTERM/SIGINT. Outside systemd (`NOTIFY_SOCKET` unset)
//! every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

/// Whether a service manager waits for our notifications (`NOTIFY_SOCKET` set: a `Type=notify`
/// unit).
pub fn managed() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty())
}

pub struct Notifier {
    ready: bool,
    watchdog: Option<Duration>,
    warned: bool,
}

impl Notifier {
    /// Read `NOTIFY_SOCKET` and `WATCHDOG_USEC`. A sweep can come `interval` plus one tmux
    /// timeout after the last one: a watchdog shorter than that would kill a healthy reaper, so
    /// it is warned about.
    pub fn from_env(interval: Duration, tmux_timeout: Duration) -> Notifier {
        let watchdog = sd_notify::watchdog_enabled();
        if let Some(w) = watchdog {
            let gap = interval + tmux_timeout;
            if w <= gap {
                tracing::warn!(
                    watchdog_ms = w.as_millis() as u64,
                    needed_ms = gap.as_millis() as u64,
                    "the unit's WatchdogSec= is not above CCS_REAP_INTERVAL_MS + CCS_TMUX_TIMEOUT_MS: \
                     systemd may kill the reaper between two healthy sweeps"
                );
            }
        }
        Notifier {
            ready: false,
            watchdog,
            warned: false,
        }
    }

    /// A sweep finished (whatever its outcome: the loop is alive): the first one makes the
    /// service ready; each one feeds the watchdog.
    pub fn swept(&mut self, status: &str) {
        // One line: the protocol is newline-separated.
        let status = status.replace(['\n', '\r'], " ");
        let mut states = vec![NotifyState::Status(&status)];
        if !self.ready {
            states.push(NotifyState::Ready);
        }
        if self.watchdog.is_some() {
            states.push(NotifyState::Watchdog);
        }
        self.send(&states);
        self.ready = true;
    }

    /// The daemon is stopping: finishing the reaps in flight.
    pub fn stopping(&mut self) {
        self.send(&[NotifyState::Stopping]);
    }

    fn send(&mut self, states: &[NotifyState]) {
        if let Err(e) = sd_notify::notify(states) {
            // Once: a manager that went away would otherwise fill the log every sweep.
            if !self.warned {
                tracing::warn!(error = %e, "failed to notify systemd (NOTIFY_SOCKET)");
                self.warned = true;
            }
        }
    }
}
