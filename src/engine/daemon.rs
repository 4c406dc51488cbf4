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
    tracing::info!(
        socket = %r.cfg.socket.path().display(), prefix = %r.cfg.prefix, idle_kill_ms = r.cfg.policy.idle_kill_ms,
        interval_ms = r.cfg.interval.as_millis() as u64, grace_ms = r.cfg.grace.as_millis() as u64,
        dry_run = r.dry_run, version = %env!("CARGO_PKG_VERSION"), rules = %r.cfg.rules(),
        settings_file = %r.cfg.file.as_deref().map_or("none".into(), |f| f.display().to_string()),
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
    let p = &r.cfg.policy;
    let _watcher = (p.mem_high.is_some() || p.mem_psi.is_some())
        .then(|| tokio::spawn(watch(Arc::clone(&r), Arc::clone(&pressure))));
    // The degraded states (no server, an activity file, no cid anywhere) across sweeps.
    let mut degraded = crate::core::degraded::Tracker::default();
    // The last sweep's error, said once while it stays the same.
    let mut last_error: Option<String> = None;
    loop {
        let why = tokio::select! {
            _ = tick.tick() => "interval",
            _ = pressure.wake.notified() => "memory pressure",
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
            .filter(|s| s.decision.action == Action::Reap)
            .count();
        if why != "interval" {
            // Nothing to take under pressure (all busy, viewed or young): do not sweep again at
            // every watch; the interval, or a while, will tell.
            // A short pause only while a teardown it started is under way (the watcher waits
            // for it anyway); a reap decided but not started (held, dry run) waits the long one.
            let pause = if reaping > 0 && r.inflight_count() > 0 {
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
        for c in degraded.sweep(&degraded_seen(&r, &rep)) {
            say_degraded(&c, &rep.socket_path);
        }
        r.metrics.set_degraded(degraded.active());
        notify.swept(&match (&rep.error, rep.tmux_server_up) {
            (Some(e), _) => format!("kept every session: {e}"),
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
            reaps = r.inflight_count(),
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
    r: &Reaper,
    rep: &crate::core::report::SweepReport,
) -> crate::core::degraded::Seen {
    use crate::core::policy::State;
    crate::core::degraded::Seen {
        activity_problem: r.activity_problem(),
        server_up: rep.tmux_server_up,
        socket: rep.socket_path.clone(),
        chats: rep.sessions.len(),
        no_cid: rep
            .sessions
            .iter()
            .filter(|s| s.decision.state == State::NoCid)
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
/// How long the watcher waits after a pressure sweep that found nothing to take.
pub const PRESSURE_PAUSE: Duration = Duration::from_secs(5);

/// Between the watcher and the daemon loop.
#[derive(Default)]
struct Pressure {
    wake: Notify,
    /// No wake before this (Unix ms).
    quiet_until: AtomicI64,
}

impl Pressure {
    fn pause_until(&self, ms: i64) {
        self.quiet_until.store(ms, Ordering::Relaxed);
    }
}

/// The watcher: where the kernel offers a notification of the threshold (cgroup v1), it sleeps
/// until the memory crosses it; elsewhere it reads one small file every [`WATCH_EVERY`]. Either
/// way it wakes the daemon loop when the memory is above the threshold (or the stall above its
/// limit), and stays quiet while a teardown is in flight (it is freeing memory) and after a
/// pressure sweep.
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
    // Above the threshold at the last look: poll until it is not (a crossing is notified once).
    let mut last_over = false;
    loop {
        // Wait: for the kernel where it notifies (and at most LIMIT_REREAD, to follow changes and
        // to look again while the memory stays high), else one poll period.
        match &notify {
            Some((_, _, fd))
                if !last_over
                    && p.mem_psi.is_none()
                    && now_ms() >= pressure.quiet_until.load(Ordering::Relaxed) =>
            {
                if let Ok(Ok(mut g)) = tokio::time::timeout(LIMIT_REREAD, fd.readable()).await {
                    // Drain the eventfd's counter; the crossing is judged below.
                    let mut buf = [0u8; 8];
                    let _ = g.try_io(|f| {
                        rustix::io::read(f.get_ref(), &mut buf).map_err(std::io::Error::from)
                    });
                    g.clear_ready();
                }
            }
            _ => tokio::time::sleep(WATCH_EVERY).await,
        }
        if r.inflight_count() > 0 || now_ms() < pressure.quiet_until.load(Ordering::Relaxed) {
            continue;
        }
        // Resolved by the sweeps (the tmux server's cgroup needs its pid).
        let Some(w) = r.watched() else { continue };
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
            if stale {
                notify = memory::threshold(&w.source, l)
                    // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it: the fd stays
                    // open and the same until the AsyncFd drops.
                    .and_then(|t| unsafe { tokio::io::unix::AsyncFd::register(t.fd) }.ok())
                    .map(|fd| (w.clone(), l, fd));
            }
        }
        // The threshold is on the working set; v1's notification is on the usage (a superset),
        // which does not cross again while it stays above: poll until it is back below.
        let now_used = used.read(&w.source);
        let over = limit.is_some_and(|l| now_used.is_some_and(|u| u.working_set > l));
        last_over = limit.is_some_and(|l| now_used.is_some_and(|u| u.usage > l));
        let stalled = p
            .mem_psi
            .is_some_and(|max| memory::pressure(&w.source).is_some_and(|now| now >= max));
        if over || stalled {
            tracing::debug!(over, stalled, "memory pressure: waking the sweep");
            pressure.wake.notify_one();
            // One wake per crossing: the sweep sets the next quiet time.
            pressure.pause_until(now_ms() + 60_000);
        }
    }
}
