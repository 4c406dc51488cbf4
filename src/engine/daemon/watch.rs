//! The memory watcher between sweeps: it sleeps until the kernel says the memory moved where the
//! kernel can say so (cgroup v1's threshold eventfd for `CCS_ENGINE_MEM_HIGH`; a PSI trigger for
//! `CCS_ENGINE_MEM_PSI`, see [`Wakers`]), and reads one small file every [`WATCH_EVERY`] for what
//! it cannot (cgroup v2 has no threshold notification: there a PSI trigger only cuts the wait
//! short). Either way it wakes the daemon loop when the memory is above the threshold (or the
//! stall above its limit), and stays quiet while a teardown is in flight (it is freeing memory)
//! and after a pressure sweep.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::wake::{self, Cause, Wakers};
use super::WATCH_EVERY;
use crate::adapters::clock::now_ms;
use crate::adapters::memory::{self, Watched};
use crate::adapters::metrics::Metrics;
use crate::core::policy::Policy;
use crate::engine::inflight::InFlight;
use crate::engine::watching::Watching;

/// How often the watcher re-reads the limit it compares with.
const LIMIT_REREAD: Duration = Duration::from_secs(10);
/// How often the watcher looks at the stall itself while a PSI trigger is set for the stall rule:
/// the trigger's own window. The kernel may leave a trigger silent under a stall that its own
/// totals show (on this machine a trigger at 1 % and 2 % over 2 s stayed silent under a 3 % stall
/// for 20 s: BENCH.md), and a trigger must never make the rule slower than the poll it replaces.
const STALL_REREAD: Duration = Duration::from_secs(2);

/// Between the watcher and the daemon loop.
#[derive(Default)]
pub(super) struct Pressure {
    wake: Notify,
    /// No wake before this (Unix ms).
    quiet_until: AtomicI64,
    /// What woke the watcher for the last wake (a [`Cause`] as its `u8`).
    cause: AtomicU8,
}

impl Pressure {
    /// Until the watcher wakes the loop; what woke it.
    pub async fn woken(&self) -> Cause {
        self.wake.notified().await;
        Cause::from_u8(self.cause.load(Ordering::Relaxed))
    }

    /// No wake before `ms` (Unix ms).
    pub fn pause_until(&self, ms: i64) {
        self.quiet_until.store(ms, Ordering::Relaxed);
    }

    fn quiet(&self) -> bool {
        now_ms() < self.quiet_until.load(Ordering::Relaxed)
    }

    fn wake(&self, cause: Cause) {
        self.cause.store(cause as u8, Ordering::Relaxed);
        self.wake.notify_one();
    }
}

/// What the watcher uses of the reaper.
pub(super) struct Handles<'a> {
    pub policy: &'a Policy,
    pub inflight: &'a InFlight,
    pub watching: &'a Watching,
    pub metrics: &'a Metrics,
}

impl Handles<'_> {
    /// A teardown is in flight, or a pressure sweep asked for quiet.
    fn quiet(&self, pressure: &Pressure) -> bool {
        self.inflight.count() > 0 || pressure.quiet()
    }
}

/// The watcher's state between looks.
struct Watcher {
    /// The threshold in bytes for the source watched, re-read now and then (a limit rarely moves).
    threshold: Option<(Watched, Option<u64>, Instant)>,
    used: memory::UsedReader,
    /// The kernel's notification, for the source and threshold it was registered for.
    notify: Option<(Watched, u64, AsyncFd<OwnedFd>)>,
    /// A registration the kernel refused (a read-only mount, no limit), for the source and
    /// threshold it was for: tried again after LIMIT_REREAD, not at every poll.
    refused: Option<(Watched, u64, Instant)>,
    /// The PSI trigger, for the source it was set up for.
    wakers: Option<Wakers>,
    /// The path last said (and whether the threshold's eventfd was part of it).
    said: Option<(&'static str, bool)>,
    /// The clock between looks (one wake of the runtime per poll).
    clock: wake::Clock,
    /// Above the threshold at the last look: poll until it is not (a crossing is notified once).
    last_over: bool,
}

/// The watcher (see the module's doc): wakes the loop through `pressure`, until dropped.
pub(super) async fn watch(h: Handles<'_>, pressure: &Pressure) {
    let mut me = Watcher {
        threshold: None,
        used: memory::UsedReader::default(),
        notify: None,
        refused: None,
        wakers: None,
        said: None,
        clock: wake::Clock::new(),
        last_over: false,
    };
    loop {
        let cause = me.wait(&h, pressure).await;
        if h.quiet(pressure) {
            continue;
        }
        // Resolved by the sweeps (the tmux server's cgroup needs its pid).
        let Some(w) = h.watching.watched() else {
            continue;
        };
        if me.wakers.as_ref().is_none_or(|k| k.watched != w) {
            me.wakers = Some(Wakers::new(&w, h.policy));
            me.said = None;
        }
        let limit = me.limit(h.policy, &w);
        if let Some(l) = limit {
            me.register(&w, l);
        }
        me.say_path(&h, &w);
        let (over, stalled) = me.look(&h, &w, cause, limit);
        if over || stalled {
            let cause_str = cause.as_str();
            tracing::info!(
                cause = cause_str,
                over,
                stalled,
                "memory pressure: waking the sweep ({cause_str})"
            );
            h.metrics.record_pressure_wake(cause_str);
            pressure.wake(cause);
            // One wake per crossing: the sweep sets the next quiet time.
            pressure.pause_until(now_ms() + 60_000);
        }
    }
}

impl Watcher {
    /// Until the next look: the poll's period while quiet; else by event alone when the kernel
    /// notifies everything the rules need (and at most LIMIT_REREAD, to follow changes), else
    /// one poll period cut short by any event.
    async fn wait(&self, h: &Handles<'_>, pressure: &Pressure) -> Cause {
        if h.quiet(pressure) {
            self.clock.sleep(WATCH_EVERY).await;
            return Cause::Poll;
        }
        let p = h.policy;
        let by_event = !self.last_over
            && (p.mem_high.is_none() || self.notify.is_some())
            && (p.mem_psi.is_none() || self.wakers.as_ref().is_some_and(|k| k.psi.is_some()));
        let period = match (by_event, p.mem_psi) {
            (true, Some(_)) => STALL_REREAD,
            (true, None) => LIMIT_REREAD,
            (false, _) => WATCH_EVERY,
        };
        tokio::select! {
            _ = wake::eventfd(self.notify.as_ref().map(|n| &n.2)) => Cause::Threshold,
            _ = wake::psi(self.wakers.as_ref()) => Cause::Psi,
            _ = self.clock.sleep(period) => Cause::Poll,
        }
    }

    /// The threshold in bytes for `w`, re-read after LIMIT_REREAD.
    fn limit(&mut self, p: &Policy, w: &Watched) -> Option<u64> {
        match &self.threshold {
            Some((tw, l, at)) if tw == w && at.elapsed() < LIMIT_REREAD => *l,
            _ => {
                let l = memory::read(&w.source)
                    .and_then(|h| crate::core::policy::mem_limit(p, Some(h)));
                self.threshold = Some((w.clone(), l, Instant::now()));
                l
            }
        }
    }

    /// (Re-)register the kernel's notification when the source or the threshold moved.
    fn register(&mut self, w: &Watched, l: u64) {
        let stale = self
            .notify
            .as_ref()
            .is_none_or(|(nw, nl, _)| nw != w || *nl != l);
        let lately_refused = self
            .refused
            .as_ref()
            .is_some_and(|(rw, rl, at)| rw == w && *rl == l && at.elapsed() < LIMIT_REREAD);
        if stale && !lately_refused {
            self.notify = memory::threshold(&w.source, l)
                // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it: the fd stays
                // open and the same until the AsyncFd drops.
                .and_then(|t| unsafe { AsyncFd::register(t.fd) }.ok())
                .map(|fd| (w.clone(), l, fd));
            self.refused = self
                .notify
                .is_none()
                .then(|| (w.clone(), l, Instant::now()));
        }
    }

    /// The path in use, said (log line and metric) when it changes.
    fn say_path(&mut self, h: &Handles<'_>, w: &Watched) {
        let Some(k) = &self.wakers else { return };
        let eventfd = self.notify.as_ref().is_some_and(|(nw, _, _)| nw == w);
        let path = k.path(h.policy, eventfd);
        if self.said != Some((path, eventfd)) {
            let how = k.how(h.policy, w, eventfd);
            tracing::info!(path, watching = %w, how, "memory pressure wake: {path}");
            h.metrics.record_pressure_watch(path);
            self.said = Some((path, eventfd));
        }
    }

    /// Whether the memory is over the threshold and whether it stalls past its limit, now.
    fn look(
        &mut self,
        h: &Handles<'_>,
        w: &Watched,
        cause: Cause,
        limit: Option<u64>,
    ) -> (bool, bool) {
        let p = h.policy;
        // A fired trigger is the kernel's word that the stall passed its share of the window.
        let trigger = self.wakers.as_ref().and_then(|k| k.psi.as_ref());
        let fired = cause == Cause::Psi;
        if let (true, Some(t)) = (fired, trigger) {
            h.watching
                .psi_fired(t.pct, now_ms() + (t.window_us / 1000) as i64);
        }
        // The threshold is on the working set; v1's notification is on the usage (a superset),
        // which does not cross again while it stays above: poll until it is back below.
        let now_used = self.used.read(&w.source);
        let over = limit.is_some_and(|l| now_used.is_some_and(|u| u.working_set > l));
        self.last_over = limit.is_some_and(|l| now_used.is_some_and(|u| u.usage > l));
        // Its share is CCS_ENGINE_MEM_PSI's; without a trigger this look, `some avg10` judges.
        let stalled = p.mem_psi.is_some_and(|max| {
            (fired && trigger.is_some())
                || crate::engine::watching::stall_now(w).is_some_and(|now| now >= max)
        });
        (over, stalled)
    }
}
