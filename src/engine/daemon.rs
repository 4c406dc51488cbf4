//! The daemon: one sweep every interval, under the single-instance lock of its socket, with the
//! metrics endpoint beside it; SIGTERM/SIGINT/SIGHUP finish the sweep and every reap in flight,
//! SIGUSR1 is ignored.

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinSet;
use tokio::time::Interval;

use crate::adapters::clock::now_ms;
use crate::adapters::metrics::Metrics;
use crate::adapters::systemd::Notifier;
use crate::config::Config;
use crate::core::policy::Action;
use crate::core::report::SweepReport;
use crate::engine::context::Reaper;
use crate::engine::inflight::InFlight;
use crate::engine::sweep::{sweep, Batches};
use crate::engine::watching::Watching;

use wake::Cause;
use watch::Pressure;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("failed to watch {0}: {1}")]
    Signal(&'static str, std::io::Error),
    #[error("failed to listen on CCS_METRICS_ADDR={0}: {1}")]
    Listen(std::net::SocketAddr, std::io::Error),
}

/// The daemon: one sweep every interval (or at the memory watcher's wake); SIGTERM/SIGINT/SIGHUP
/// finish the sweep and the reaps in flight, then return.
pub async fn run_daemon(r: Arc<Reaper>) -> Result<(), DaemonError> {
    let mut signals = Signals::new()?;
    let _metrics = match r.cfg.metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| DaemonError::Listen(addr, e))?;
            Some(crate::adapters::metrics::spawn(l, Arc::clone(&r.metrics)))
        }
        None => None,
    };
    say_started(&r.cfg, r.dry_run);
    let mut notify = Notifier::from_env(r.cfg.interval, r.cfg.tmux_timeout);
    // The batches of reaps the sweeps started: joined before exit.
    let mut batches = JoinSet::new();
    let mut tick = tokio::time::interval(r.cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Between sweeps, a watcher reads the memory every WATCH_EVERY and starts a sweep as soon as
    // it crosses CCS_ENGINE_MEM_HIGH (or the stall passes CCS_ENGINE_MEM_PSI).
    let pressure = Arc::new(Pressure::default());
    let p = &r.cfg.policy;
    let _watcher = if p.mem_high.is_some() || p.mem_psi.is_some() {
        let (r, pressure) = (Arc::clone(&r), Arc::clone(&pressure));
        Some(tokio::spawn(async move {
            let h = watch::Handles {
                policy: &r.cfg.policy,
                inflight: &r.inflight,
                watching: &r.watching,
                metrics: &r.metrics,
            };
            watch::watch(h, &pressure).await
        }))
    } else {
        r.metrics.record_pressure_watch("off");
        None
    };
    let mut seen = Seen::default();
    while let Some(why) = signals.next_sweep(&mut tick, &pressure).await {
        let rep = sweep(&r, Batches::Spawn(&mut batches)).await;
        while let Some(ended) = batches.try_join_next() {
            batch_ended(ended);
        }
        let reaping = rep
            .sessions
            .iter()
            .filter(|s| s.decision.action() == Action::Reap)
            .count();
        if why != Why::Interval {
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
        seen.say_sweep(why, &rep, reaping);
        seen.degraded(&r.watching, &r.metrics, &rep);
        notify.swept(&status(&rep, reaping));
    }
    finish(notify, batches, &r.inflight).await;
    Ok(())
}

/// What starts a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The loop's tick.
    Interval,
    /// The memory watcher, woken by this.
    Pressure(Cause),
}

impl Why {
    /// As the sweep line's `why` says it.
    fn as_str(self) -> &'static str {
        match self {
            Why::Interval => "interval",
            Why::Pressure(Cause::Threshold) => "memory pressure (threshold)",
            Why::Pressure(Cause::Psi) => "memory pressure (psi)",
            Why::Pressure(Cause::Poll) => "memory pressure (poll)",
        }
    }
}

/// The signals the daemon answers.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
}

impl Signals {
    fn new() -> Result<Signals, DaemonError> {
        let watch = |kind, name| signal(kind).map_err(|e| DaemonError::Signal(name, e));
        Ok(Signals {
            term: watch(SignalKind::terminate(), "SIGTERM")?,
            int: watch(SignalKind::interrupt(), "SIGINT")?,
            // SIGHUP (a closed terminal, a `kill -HUP` meant as "reload") stops it gracefully
            // like SIGTERM; SIGUSR1 is ignored. Their default action would kill it mid-teardown.
            hup: watch(SignalKind::hangup(), "SIGHUP")?,
            usr1: watch(SignalKind::user_defined1(), "SIGUSR1")?,
        })
    }

    /// Until the next sweep is due (its `Why`), or `None` when a signal says to stop.
    async fn next_sweep(&mut self, tick: &mut Interval, pressure: &Pressure) -> Option<Why> {
        loop {
            tokio::select! {
                _ = tick.tick() => return Some(Why::Interval),
                cause = pressure.woken() => return Some(Why::Pressure(cause)),
                _ = self.term.recv() => { tracing::info!("SIGTERM: stopping"); return None }
                _ = self.int.recv() => { tracing::info!("SIGINT: stopping"); return None }
                _ = self.hup.recv() => { tracing::info!("SIGHUP: stopping (as on SIGTERM; there is no reload)"); return None }
                _ = self.usr1.recv() => tracing::info!("SIGUSR1: ignored"),
            }
        }
    }
}

/// The line that says the daemon started, and with what.
fn say_started(cfg: &Config, dry_run: bool) {
    let p = &cfg.policy;
    tracing::info!(
        socket = %cfg.socket.path().display(), prefix = %cfg.prefix, idle_kill_ms = p.idle_kill_ms,
        interval_ms = cfg.interval.as_millis() as u64, grace_ms = cfg.grace.as_millis() as u64,
        dry_run, version = %env!("CARGO_PKG_VERSION"), rules = %cfg.rules(),
        settings_file = %cfg.file.as_deref().map_or("none".into(), |f| f.display().to_string()),
        pressure_wake = if p.mem_high.is_some() || p.mem_psi.is_some() { "event where the kernel notifies, else poll (the path: 'memory pressure wake', once the memory watched is resolved)" } else { "off" },
        "ccs-reap started"
    );
}

/// What the loop keeps across sweeps for its log lines and the degraded states.
#[derive(Default)]
struct Seen {
    /// The degraded states (no server, an activity file, no cid anywhere) across sweeps.
    degraded: crate::core::degraded::Tracker,
    /// The last sweep's error, said once while it stays the same.
    last_error: Option<String>,
}

impl Seen {
    /// A sweep that reaps is said; one that kept everything for an error only when the error is
    /// new (an unreadable activity file is a degraded state, said once by [`Seen::degraded`]).
    fn say_sweep(&mut self, why: Why, rep: &SweepReport, reaping: usize) {
        let new_error = rep.error.is_some() && rep.error != self.last_error;
        self.last_error.clone_from(&rep.error);
        if reaping > 0 || new_error {
            tracing::info!(
                why = why.as_str(),
                sessions = rep.sessions.len(),
                reaping,
                error = rep.error.as_deref(),
                took_ms = rep.took_ms,
                "sweep"
            );
        } else {
            tracing::debug!(
                why = why.as_str(),
                sessions = rep.sessions.len(),
                took_ms = rep.took_ms,
                "sweep"
            );
        }
    }

    /// A degraded state is said once when it starts, once when it ends; the metric and /healthz
    /// follow it.
    fn degraded(&mut self, watching: &Watching, metrics: &Metrics, rep: &SweepReport) {
        for c in self.degraded.sweep(&degraded_seen(watching, rep)) {
            say_degraded(&c, &rep.socket_path);
        }
        metrics.set_degraded(self.degraded.active());
    }
}

/// The `STATUS=` systemd shows after a sweep.
fn status(rep: &SweepReport, reaping: usize) -> String {
    match (&rep.error, rep.tmux_server_up) {
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
    }
}

/// Stopping: the reaps in flight are finished first.
async fn finish(mut notify: Notifier, mut batches: JoinSet<()>, inflight: &InFlight) {
    notify.stopping();
    if !batches.is_empty() {
        tracing::info!(
            batches = batches.len(),
            reaps = inflight.count(),
            "finishing the reaps in flight before exit"
        );
    }
    while let Some(ended) = batches.join_next().await {
        batch_ended(ended);
    }
    tracing::info!("ccs-reap stopped");
}

/// What a sweep saw, for the degraded states.
pub fn degraded_seen(watching: &Watching, rep: &SweepReport) -> crate::core::degraded::SweepSeen {
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
/// How long the watcher waits after a pressure sweep that found nothing to take.
pub const PRESSURE_PAUSE: Duration = Duration::from_secs(5);

mod standby;
mod wake;
mod watch;
pub use standby::standby;

#[cfg(test)]
mod tests {
    use super::{Cause, Why};

    #[test]
    fn each_why_is_the_sweep_lines_word_for_it() {
        let table = [
            (Why::Interval, "interval"),
            (
                Why::Pressure(Cause::Threshold),
                "memory pressure (threshold)",
            ),
            (Why::Pressure(Cause::Psi), "memory pressure (psi)"),
            (Why::Pressure(Cause::Poll), "memory pressure (poll)"),
        ];
        for (why, want) in table {
            assert_eq!(why.as_str(), want);
        }
    }
}
