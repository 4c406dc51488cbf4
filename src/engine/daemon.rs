//! The daemon: one sweep every interval, under the single-instance lock of its socket, with the
//! metrics endpoint beside it; SIGTERM/SIGINT/SIGHUP finish the sweep and every reap in flight,
//! SIGUSR1 is ignored.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::adapters::clock::now_ms;
use crate::adapters::memory;

use crate::core::policy::Action;
use crate::engine::context::Reaper;
use crate::engine::sweep::{sweep, Batches};
use crate::engine::watching::Watching;

/// The daemon: one sweep every interval; SIGTERM/SIGINT finish the sweep and the reaps in flight,
/// then return.
/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("failed to watch {0}: {1}")]
    Signal(&'static str, std::io::Error),
    #[error("failed to listen on CCS_METRICS_ADDR={0}: {1}")]
    Listen(std::net::SocketAddr, std::io::Error),
}

///
/// Long (about 110 lines) on purpose: one `select!` loop whose arms (sweep tick, watcher, signals,
/// batches ending) share the loop's state; split, each arm would take all of it.
pub async fn run_daemon(r: Arc<Reaper>) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| DaemonError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| DaemonError::Signal("SIGINT", e))?;
    // SIGHUP (a closed terminal, a `kill -HUP` meant as "reload") stops it gracefully like
    // SIGTERM; SIGUSR1 is ignored. Their default action would kill it mid-teardown.
    let mut hup = signal(SignalKind::hangup()).map_err(|e| DaemonError::Signal("SIGHUP", e))?;
    let mut usr1 =
        signal(SignalKind::user_defined1()).map_err(|e| DaemonError::Signal("SIGUSR1", e))?;
    let _metrics = match r.cfg.metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| DaemonError::Listen(addr, e))?;
            Some(crate::adapters::metrics::spawn(l, Arc::clone(&r.metrics)))
        }
        None => None,
    };
    let p = &r.cfg.policy;
    tracing::info!(
        socket = %r.cfg.socket.path().display(), prefix = %r.cfg.prefix, idle_kill_ms = r.cfg.policy.idle_kill_ms,
        interval_ms = r.cfg.interval.as_millis() as u64, grace_ms = r.cfg.grace.as_millis() as u64,
        dry_run = r.dry_run, version = %env!("CARGO_PKG_VERSION"), rules = %r.cfg.rules(),
        settings_file = %r.cfg.file.as_deref().map_or("none".into(), |f| f.display().to_string()),
        pressure_wake = if p.mem_high.is_some() || p.mem_psi.is_some() { "event where the kernel notifies, else poll (the path: 'memory pressure wake', once the memory watched is resolved)" } else { "off" },
        "ccs-reap started"
    );
    let mut notify =
        crate::adapters::systemd::Notifier::from_env(r.cfg.interval, r.cfg.tmux_timeout);
    // The batches of reaps the sweeps started: joined before exit.
    let mut batches = JoinSet::new();
    let mut tick = tokio::time::interval(r.cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Between sweeps, a watcher reads the memory every WATCH_EVERY and starts a sweep as soon as
    // it crosses CCS_ENGINE_MEM_HIGH (or the stall passes CCS_ENGINE_MEM_PSI).
    let pressure = Arc::new(Pressure::default());
    let _watcher = (p.mem_high.is_some() || p.mem_psi.is_some())
        .then(|| tokio::spawn(watch(Arc::clone(&r), Arc::clone(&pressure))));
    if _watcher.is_none() {
        r.metrics.record_pressure_watch("off");
    }
    // The degraded states (no server, an activity file, no cid anywhere) across sweeps.
    let mut degraded = crate::core::degraded::Tracker::default();
    // The last sweep's error, said once while it stays the same.
    let mut last_error: Option<String> = None;
    loop {
        let why = tokio::select! {
            _ = tick.tick() => "interval",
            _ = pressure.wake.notified() => match pressure.cause() {
                "threshold" => "memory pressure (threshold)",
                "psi" => "memory pressure (psi)",
                "memory.events" => "memory pressure (memory.events)",
                _ => "memory pressure (poll)",
            },
            _ = term.recv() => { tracing::info!("SIGTERM: stopping"); break }
            _ = int.recv() => { tracing::info!("SIGINT: stopping"); break }
            _ = hup.recv() => { tracing::info!("SIGHUP: stopping (as on SIGTERM; there is no reload)"); break }
            _ = usr1.recv() => { tracing::info!("SIGUSR1: ignored"); continue }
        };
        let rep = sweep(&r, Batches::Spawn(&mut batches)).await;
        while let Some(ended) = batches.try_join_next() {
            batch_ended(ended);
        }
        let reaping = rep
            .sessions
            .iter()
            .filter(|s| s.decision.action() == Action::Reap)
            .count();
        if why != "interval" {
            // Nothing to take under pressure (all busy, viewed or young): do not sweep again at
            // every watch; the interval, or a while, will tell.
            // A short pause only while a teardown it started is under way (the watcher waits
            // for it anyway); a reap decided but not started (held, dry run) waits the long one.
            let pause = if reaping > 0 && r.inflight.count() > 0 {
                WATCH_EVERY
            } else {
                PRESSURE_PAUSE
            };
            pressure.pause_until(now_ms() + pause.as_millis() as i64);
        }
        // A sweep that reaps is said; one that kept everything for an error only when the error
        // is new (an unreadable activity file is a degraded state, said once below).
        let new_error = rep.error.is_some() && rep.error != last_error;
        last_error.clone_from(&rep.error);
        if reaping > 0 || new_error {
            tracing::info!(
                why,
                sessions = rep.sessions.len(),
                reaping,
                error = rep.error.as_deref(),
                took_ms = rep.took_ms,
                "sweep"
            );
        } else {
            tracing::debug!(
                why,
                sessions = rep.sessions.len(),
                took_ms = rep.took_ms,
                "sweep"
            );
        }
        // A degraded state is said once when it starts, once when it ends; the metric and
        // /healthz follow it.
        for c in degraded.sweep(&degraded_seen(&r.watching, &rep)) {
            say_degraded(&c, &rep.socket_path);
        }
        r.metrics.set_degraded(degraded.active());
        notify.swept(&match (&rep.error, rep.tmux_server_up) {
            (Some(e), _) => format!("kept every session: {e}"),
            (None, Some(false)) if rep.tmux_server_empty => format!(
                "empty: the tmux server at {} exited after its last chat was reaped",
                rep.socket_path
            ),
            (None, Some(false)) => format!("no tmux server at {}", rep.socket_path),
            (None, _) => format!(
                "{} session(s), {reaping} to reap; last sweep {} ms",
                rep.sessions.len(),
                rep.took_ms
            ),
        });
    }
    notify.stopping();
    if !batches.is_empty() {
        tracing::info!(
            batches = batches.len(),
            reaps = r.inflight.count(),
            "finishing the reaps in flight before exit"
        );
    }
    while let Some(ended) = batches.join_next().await {
        batch_ended(ended);
    }
    tracing::info!("ccs-reap stopped");
    Ok(())
}

/// What a sweep saw, for the degraded states.
pub fn degraded_seen(
    watching: &Watching,
    rep: &crate::core::report::SweepReport,
) -> crate::core::degraded::SweepSeen {
    use crate::core::policy::State;
    crate::core::degraded::SweepSeen {
        activity_problem: watching.activity_problem(),
        server_up: rep.tmux_server_up,
        emptied: rep.tmux_server_empty,
        socket: rep.socket_path.clone(),
        chats: rep.sessions.len(),
        // An unused chat of an agent that picks its id at its first prompt (Codex CLI) is
        // `no-cid` by design: it does not make the reaper degraded.
        no_cid: rep
            .sessions
            .iter()
            .filter(|s| s.decision.state == State::NoCid && !s.no_cid_by_design())
            .count(),
        any_cid: rep.sessions.iter().any(|s| s.decision.cid.is_some()),
    }
}

/// One log line when a degraded state starts (a warning) or ends.
fn say_degraded(c: &crate::core::degraded::Change, socket: &str) {
    use crate::core::degraded::{Change, Reason};
    match c {
        Change::Started(reason, why) => {
            tracing::warn!(degraded = reason.as_str(), socket = %socket, "{why}")
        }
        Change::Ended(Reason::NoServer) => {
            tracing::info!(degraded = "no-server", socket = %socket, "a tmux server listens at {socket} again")
        }
        Change::Ended(reason) => {
            tracing::info!(
                degraded = reason.as_str(),
                "no longer degraded ({})",
                reason.as_str()
            )
        }
    }
}

/// A batch's task ended. Its reaps logged themselves; a task that failed all the same (a panic
/// outside the teardown, which unwinds its own) is logged here.
fn batch_ended(ended: Result<(), tokio::task::JoinError>) {
    if let Err(e) = ended {
        tracing::error!(error = %e, "a reap batch's task failed");
    }
}

/// How often the watcher reads the memory between sweeps.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);
/// How often the watcher re-reads the limit it compares with.
const LIMIT_REREAD: Duration = Duration::from_secs(10);
/// How often the watcher looks at the stall itself while a PSI trigger is set for the stall rule:
/// the trigger's own window. The kernel may leave a trigger silent under a stall that its own
/// totals show (on this machine a trigger at 1 % and 2 % over 2 s stayed silent under a 3 % stall
/// for 20 s: BENCH.md), and a trigger must never make the rule slower than the poll it replaces.
const STALL_REREAD: Duration = Duration::from_secs(2);
/// How long the watcher waits after a pressure sweep that found nothing to take.
pub const PRESSURE_PAUSE: Duration = Duration::from_secs(5);

/// Between the watcher and the daemon loop.
#[derive(Default)]
struct Pressure {
    wake: Notify,
    /// No wake before this (Unix ms).
    quiet_until: AtomicI64,
    /// What woke the watcher for the last wake.
    cause: std::sync::Mutex<&'static str>,
}

impl Pressure {
    fn set_cause(&self, c: &'static str) {
        *self.cause.lock().unwrap_or_else(|p| p.into_inner()) = c;
    }

    fn cause(&self) -> &'static str {
        *self.cause.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pause_until(&self, ms: i64) {
        self.quiet_until.store(ms, Ordering::Relaxed);
    }
}

/// What woke the watcher (the `cause` of `ccs_reap_pressure_wakes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// cgroup v1's notification of the threshold (an eventfd).
    Threshold,
    /// A PSI trigger on `memory.pressure`.
    Psi,
    /// A counter of cgroup v2's `memory.events` moved.
    Events,
    /// Its own clock.
    Poll,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Threshold => "threshold",
            Cause::Psi => "psi",
            Cause::Events => "memory.events",
            Cause::Poll => "poll",
        }
    }
}

/// The watcher: it sleeps until the kernel says the memory moved where the kernel can say so
/// (cgroup v1's threshold eventfd for `CCS_ENGINE_MEM_HIGH`; a PSI trigger for
/// `CCS_ENGINE_MEM_PSI`, see [`wake::Wakers`]), and reads one small file every [`WATCH_EVERY`]
/// for what it cannot (cgroup v2 has no threshold notification: there a PSI trigger and
/// `memory.events` only cut the wait short). Either way it wakes the daemon loop when the memory
/// is above the threshold (or the stall above its limit), and stays quiet while a teardown is in
/// flight (it is freeing memory) and after a pressure sweep.
///
/// Long (about 105 lines) on purpose: one loop whose steps (wait, re-register, look, wake) share
/// the kernel's handles and the last look.
async fn watch(r: Arc<Reaper>, pressure: Arc<Pressure>) {
    let p = &r.cfg.policy;
    // The threshold in bytes for the source watched, re-read now and then (a limit rarely moves).
    let mut threshold: Option<(memory::Watched, Option<u64>, tokio::time::Instant)> = None;
    let mut used = memory::UsedReader::default();
    // The kernel's notification, for the source and threshold it was registered for.
    let mut notify: Option<(
        memory::Watched,
        u64,
        tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    )> = None;
    // A registration the kernel refused (a read-only mount, no limit), for the source and
    // threshold it was for: tried again after LIMIT_REREAD, not at every poll.
    let mut refused: Option<(memory::Watched, u64, tokio::time::Instant)> = None;
    // The PSI trigger and memory.events, for the source they were set up for.
    let mut wakers: Option<wake::Wakers> = None;
    // The path last said (and whether the threshold's eventfd was part of it).
    let mut said: Option<(&'static str, bool)> = None;
    // The clock between looks (one wake of the runtime per poll).
    let clock = wake::Clock::new();
    // Above the threshold at the last look: poll until it is not (a crossing is notified once).
    let mut last_over = false;
    loop {
        let quiet =
            r.inflight.count() > 0 || now_ms() < pressure.quiet_until.load(Ordering::Relaxed);
        // By event alone when the kernel notifies everything the rules need (and at most
        // LIMIT_REREAD, to follow changes); else one poll period, cut short by any event.
        let by_event = !last_over
            && (p.mem_high.is_none() || notify.is_some())
            && (p.mem_psi.is_none() || wakers.as_ref().is_some_and(|k| k.psi.is_some()));
        let cause = if quiet {
            clock.sleep(WATCH_EVERY).await;
            Cause::Poll
        } else {
            let period = match (by_event, p.mem_psi) {
                (true, Some(_)) => STALL_REREAD,
                (true, None) => LIMIT_REREAD,
                (false, _) => WATCH_EVERY,
            };
            tokio::select! {
                _ = wake::eventfd(notify.as_ref().map(|n| &n.2)) => Cause::Threshold,
                _ = wake::psi(wakers.as_ref()) => Cause::Psi,
                _ = wake::events(wakers.as_ref()) => Cause::Events,
                _ = clock.sleep(period) => Cause::Poll,
            }
        };
        if r.inflight.count() > 0 || now_ms() < pressure.quiet_until.load(Ordering::Relaxed) {
            continue;
        }
        // Resolved by the sweeps (the tmux server's cgroup needs its pid).
        let Some(w) = r.watching.watched() else {
            continue;
        };
        if wakers.as_ref().is_none_or(|k| k.watched != w) {
            wakers = Some(wake::Wakers::new(&w, p));
            said = None;
        }
        let limit = match &threshold {
            Some((tw, l, at)) if *tw == w && at.elapsed() < LIMIT_REREAD => *l,
            _ => {
                let l = memory::read(&w.source)
                    .and_then(|h| crate::core::policy::mem_limit(p, Some(h)));
                threshold = Some((w.clone(), l, tokio::time::Instant::now()));
                l
            }
        };
        // (Re-)register the kernel's notification when the source or the threshold moved.
        if let Some(l) = limit {
            let stale = notify
                .as_ref()
                .is_none_or(|(nw, nl, _)| *nw != w || *nl != l);
            let lately_refused = refused
                .as_ref()
                .is_some_and(|(rw, rl, at)| *rw == w && *rl == l && at.elapsed() < LIMIT_REREAD);
            if stale && !lately_refused {
                notify = memory::threshold(&w.source, l)
                    // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it: the fd stays
                    // open and the same until the AsyncFd drops.
                    .and_then(|t| unsafe { tokio::io::unix::AsyncFd::register(t.fd) }.ok())
                    .map(|fd| (w.clone(), l, fd));
                refused = notify
                    .is_none()
                    .then(|| (w.clone(), l, tokio::time::Instant::now()));
            }
        }
        // The path in use, said when it changes.
        if let Some(k) = &wakers {
            let eventfd = notify.as_ref().is_some_and(|(nw, _, _)| *nw == w);
            let path = k.path(p, eventfd);
            if said != Some((path, eventfd)) {
                let how = k.how(p, &w, eventfd);
                tracing::info!(path, watching = %w, how, "memory pressure wake: {path}");
                r.metrics.record_pressure_watch(path);
                said = Some((path, eventfd));
            }
        }
        // A fired trigger is the kernel's word that the stall passed its share of the window.
        let fired = cause == Cause::Psi;
        if let (true, Some(k)) = (fired, &wakers) {
            if let Some(t) = &k.psi {
                r.watching
                    .psi_fired(t.pct, now_ms() + (t.window_us / 1000) as i64);
            }
        }
        // The threshold is on the working set; v1's notification is on the usage (a superset),
        // which does not cross again while it stays above: poll until it is back below.
        let now_used = used.read(&w.source);
        let over = limit.is_some_and(|l| now_used.is_some_and(|u| u.working_set > l));
        last_over = limit.is_some_and(|l| now_used.is_some_and(|u| u.usage > l));
        // Its share is CCS_ENGINE_MEM_PSI's; without a trigger this look, `some avg10` judges.
        let stalled = p.mem_psi.is_some_and(|max| {
            (fired && wakers.as_ref().is_some_and(|k| k.psi.is_some()))
                || crate::engine::watching::stall_now(&w).is_some_and(|now| now >= max)
        });
        if over || stalled {
            let cause = cause.as_str();
            tracing::info!(
                cause,
                over,
                stalled,
                "memory pressure: waking the sweep ({cause})"
            );
            r.metrics.record_pressure_wake(cause);
            pressure.set_cause(cause);
            pressure.wake.notify_one();
            // One wake per crossing: the sweep sets the next quiet time.
            pressure.pause_until(now_ms() + 60_000);
        }
    }
}

mod standby;
mod wake;
pub use standby::standby;
