//! What wakes the memory watcher besides its clock: a PSI trigger on the watched cgroup's
//! `memory.pressure` (on cgroup v1, its v2 twin's; else the host's `/proc/pressure/memory`),
//! `None` where the kernel refused it (a read-only `/sys/fs/cgroup`, a kernel without PSI, a
//! cgroup v1 host without a v2 twin): the watcher then polls for what it would have told.

use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::adapters::memory::{MemorySource, Watched};
use crate::adapters::psi;
use crate::core::policy::Policy;

/// What woke the watcher (the `cause` of `ccs_reap_pressure_wakes_total`, and of the sweep's
/// `why`: `memory pressure (<cause>)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Cause {
    /// cgroup v1's notification of the threshold (an eventfd).
    Threshold,
    /// A PSI trigger on `memory.pressure`.
    Psi,
    /// Its own clock.
    Poll,
}

impl Cause {
    /// Every cause, in the order of their `u8`.
    pub const ALL: [Cause; 3] = [Cause::Threshold, Cause::Psi, Cause::Poll];

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Threshold => "threshold",
            Cause::Psi => "psi",
            Cause::Poll => "poll",
        }
    }

    /// The cause of this `u8` (`Cause::Poll` for none).
    pub fn from_u8(n: u8) -> Cause {
        Cause::ALL
            .get(usize::from(n))
            .copied()
            .unwrap_or(Cause::Poll)
    }
}

/// A PSI trigger set and registered with the runtime.
pub(super) struct Psi {
    fd: AsyncFd<OwnedFd>,
    pub pct: f64,
    pub window_us: u64,
}

/// The kernel's wake-ups set up for the memory watched (the PSI trigger alone, now).
pub(super) struct Wakers {
    /// The memory they were set up for.
    pub watched: Watched,
    pub psi: Option<Psi>,
    /// What was set up, or what was refused and why: for the log line.
    pub said: String,
}

impl Wakers {
    pub fn new(w: &Watched, p: &Policy) -> Wakers {
        let pressure = crate::engine::watching::pressure_file(w);
        let pct = p.mem_psi.unwrap_or(psi::HINT_STALL_PCT);
        let (psi, said) = match psi::trigger(&pressure, pct) {
            // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it: the fd stays open and
            // the same until the AsyncFd drops.
            Ok(t) => match unsafe { AsyncFd::register_with_interest(t.fd, Interest::PRIORITY) } {
                Ok(fd) => (
                    Some(Psi {
                        fd,
                        pct: t.pct,
                        window_us: t.window_us,
                    }),
                    format!("PSI trigger {:?} on {}", t.line, t.file.display()),
                ),
                Err(e) => (
                    None,
                    format!(
                        "PSI trigger on {} cannot be polled: {e}",
                        pressure.display()
                    ),
                ),
            },
            Err(e) => (None, e.to_string()),
        };
        Wakers {
            watched: w.clone(),
            psi,
            said,
        }
    }

    /// The path in use, as the metric's label says it: `event` when the kernel notifies all the
    /// rules need (`eventfd`: cgroup v1's threshold notification is registered), `poll+event`
    /// when it is polled and woken early too, `poll` when nothing notifies.
    pub fn path(&self, p: &Policy, eventfd: bool) -> &'static str {
        let high_ok = p.mem_high.is_none() || eventfd;
        let psi_ok = p.mem_psi.is_none() || self.psi.is_some();
        let any = eventfd || self.psi.is_some();
        match (high_ok && psi_ok, any) {
            (true, _) => "event",
            (false, true) => "poll+event",
            (false, false) => "poll",
        }
    }

    /// What wakes the watcher, and what was refused, for the log line.
    pub fn how(&self, p: &Policy, w: &Watched, eventfd: bool) -> String {
        let threshold = match (&w.source, p.mem_high.is_some(), eventfd) {
            (_, false, _) => None,
            (MemorySource::V1(d), true, true) => Some(format!(
                "cgroup v1 threshold eventfd on {}",
                d.join("memory.usage_in_bytes").display()
            )),
            (MemorySource::V1(d), true, false) => Some(format!(
                "no cgroup v1 threshold notification ({} could not be written, or no limit): CCS_ENGINE_MEM_HIGH polled every {} ms",
                d.join("cgroup.event_control").display(),
                super::WATCH_EVERY.as_millis()
            )),
            (_, true, _) => Some(format!(
                "no threshold notification on {}: CCS_ENGINE_MEM_HIGH polled every {} ms",
                if matches!(w.source, MemorySource::V2(_)) { "cgroup v2" } else { "/proc/meminfo" },
                super::WATCH_EVERY.as_millis()
            )),
        };
        threshold
            .into_iter()
            .chain(std::iter::once(self.said.clone()))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Until the eventfd of cgroup v1's threshold is readable (drained then); never without one.
pub(super) async fn eventfd(fd: Option<&AsyncFd<OwnedFd>>) {
    let Some(fd) = fd else {
        return std::future::pending().await;
    };
    if let Ok(mut g) = fd.readable().await {
        // Drain the eventfd's counter; the crossing is judged by the caller.
        let mut buf = [0u8; 8];
        let _ = g.try_io(|f| rustix::io::read(f.get_ref(), &mut buf).map_err(std::io::Error::from));
        g.clear_ready();
    }
}

/// Until the PSI trigger fires; never without one.
pub(super) async fn psi(k: Option<&Wakers>) {
    let Some(t) = k.and_then(|k| k.psi.as_ref()) else {
        return std::future::pending().await;
    };
    match t.fd.ready(Interest::PRIORITY).await {
        Ok(mut g) => g.clear_ready(),
        // The runtime lost it: wait as if it never fires (the poll goes on).
        Err(_) => std::future::pending().await,
    }
}

/// The watcher's own clock between looks: a timerfd armed for each wait, so that a 250 ms poll
/// costs one wake of the runtime. A tokio sleep that long sits on the timer wheel's 64 ms level
/// and wakes the runtime twice (at its slot, then at its deadline), and its registration wakes
/// the driver once more: on a VM that was most of the idle watcher's CPU. Without a timerfd (it
/// could not be made), tokio's sleep.
pub(super) struct Clock {
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Clock {
    pub fn new() -> Clock {
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )
        .ok()
        // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it: the fd stays open and
        // the same until the AsyncFd drops.
        .and_then(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok());
        Clock { fd }
    }

    /// Until `d` has passed (at once for zero, which would disarm a timerfd).
    pub async fn sleep(&self, d: std::time::Duration) {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        let Some(fd) = self.fd.as_ref().filter(|_| !d.is_zero()) else {
            return tokio::time::sleep(d).await;
        };
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: d.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: d.subsec_nanos().into(),
            },
        };
        // Arming it again also drops an expiry that was never read.
        if timerfd_settime(fd.get_ref(), TimerfdTimerFlags::empty(), &spec).is_err() {
            return tokio::time::sleep(d).await;
        }
        loop {
            let Ok(mut g) = fd.readable().await else {
                return tokio::time::sleep(d).await;
            };
            let mut buf = [0u8; 8];
            // A readiness left from an earlier wait reads nothing (EAGAIN) and is cleared.
            match g
                .try_io(|f| rustix::io::read(f.get_ref(), &mut buf).map_err(std::io::Error::from))
            {
                Ok(_) => {
                    // The expiry is read: not readable until the next one (saves a read).
                    g.clear_ready();
                    return;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cause, Clock};
    use std::time::{Duration, Instant};

    #[test]
    fn each_cause_is_one_the_metric_knows_and_comes_back_from_its_u8() {
        let names: Vec<&str> = Cause::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, crate::adapters::metrics::PRESSURE_CAUSES);
        for c in Cause::ALL {
            assert_eq!(Cause::from_u8(c as u8), c);
        }
    }

    #[tokio::test]
    async fn the_clock_waits_its_time_each_time_and_not_for_a_stale_expiry() {
        let c = Clock::new();
        assert!(c.fd.is_some(), "no timerfd on this kernel");
        for ms in [30u64, 0, 60, 20] {
            let t = Instant::now();
            c.sleep(Duration::from_millis(ms)).await;
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(ms), "{ms} ms took {took:?}");
            assert!(
                took < Duration::from_millis(ms + 2000),
                "{ms} ms took {took:?}"
            );
        }
        // An expiry never read (the wait was given up, as a select! does) does not end the next.
        tokio::select! {
            _ = c.sleep(Duration::from_millis(10)) => panic!("the 10 ms wait was to lose"),
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        let t = Instant::now();
        c.sleep(Duration::from_millis(80)).await;
        assert!(
            t.elapsed() >= Duration::from_millis(80),
            "{:?}",
            t.elapsed()
        );
    }
}
