//! One sweep: observe, decide, write the idle stamps, finish a dead reaper's teardowns, and hand
//! the sessions to reap to the teardown as one batch. `status` is a sweep that writes nothing.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::{now_ms, rfc3339};
use crate::observe::{observe, Mode, Observation};
use crate::policy::{self, Action, Decision, Pane, ReapReason, Session, Snapshot, State};
use crate::procs;
use crate::reaper::Reaper;
use crate::report::{SessionReport, SweepReport, ViewerReport};
use crate::state::{AuditLine, Outcome};
use crate::teardown;

/// Sessions whose reap is in flight, taken out of the set when this drops (on every path).
struct Inflight {
    r: Arc<Reaper>,
    ns: Vec<u32>,
}

impl Drop for Inflight {
    fn drop(&mut self) {
        let mut set = self.r.inflight();
        for n in &self.ns {
            set.remove(n);
        }
    }
}

/// One sweep. With `wait`, reaps are awaited and returned in the report; without, they run on
/// in the background (the daemon) and are logged as they finish.
pub async fn sweep(r: &Arc<Reaper>, wait: bool) -> SweepReport {
    let t0 = Instant::now();
    let mut o = observe(r, Mode::Act).await;
    let enabled = r.cfg.policy.enabled();

    // Panes that are dead but whose exit status tmux has not collected (a missed SIGCHLD
    // leaves them so until another child of the server exits): make it collect, look again.
    if !r.dry_run && o.snap.sessions.iter().any(waiting_for_exit_status) {
        match r.tmux.collect_exits().await {
            Ok(()) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                o = observe(r, Mode::Act).await;
            }
            Err(e) => {
                r.metrics.tmux_errors.inc();
                tracing::warn!(error = %e, "failed to make tmux collect the exit status of dead panes");
            }
        }
    }

    // Finish teardowns and clear stale reaping marks left by a reaper that died mid-way.
    // Chats whose teardown a live reaper (another process, perhaps stalled) is running: its
    // mark is not stale, however old, and the session is not ours to start on.
    // Journals whose owner is gone are a dead reaper's: finished below.
    let Observation {
        snap,
        listing,
        decisions,
        now,
    } = o;
    let (live, dead): (Vec<_>, Vec<_>) = r
        .state
        .journals()
        .into_iter()
        .filter_map(|j| {
            j.map_err(|e| tracing::warn!(error = %e, "unreadable reap journal left alone"))
                .ok()
        })
        .partition(|j| procs::alive(j.owner));
    let live: HashSet<String> = live.into_iter().map(|j| j.id).collect();
    let mut reaps = Vec::new();
    if !r.dry_run {
        // Only on a listing that was read: an empty one standing for a tmux that failed would
        // hide the live sessions (and the server) from the checks.
        if snap.global_problem.is_none() {
            reaps = teardown::recover(r, &listing, dead).await;
        }
        let stale: Vec<(u32, String)> = snap
            .sessions
            .iter()
            .filter(|s| {
                policy::mark_is_stale(&s.reaping, now, r.stale_after())
                    && !r.is_inflight(s.tmux_id)
                    && !live.contains(&s.id)
            })
            .map(|s| (s.tmux_id, s.reaping.clone()))
            .collect();
        for (n, v) in stale {
            tracing::warn!(tmux_id = %format!("${n}"), reaping = %v, "clearing a stale reap mark (a reaper stopped mid-teardown)");
            if let Err(e) = r.tmux.clear_stale_reaping(n, &v).await {
                tracing::warn!(tmux_id = %format!("${n}"), error = %e, "failed to clear a stale reap mark");
            }
        }
    }

    // Idle stamps, and the `warned` marks of this sweep's warnings, batched.
    let warn = enabled && !r.dry_run;
    let stamps: Vec<(u32, &str, Option<String>)> = decisions
        .iter()
        .filter_map(|d| {
            d.stamp_idle
                .map(|t| (d.tmux_id, "@ccs_idle", Some(t.to_string())))
        })
        .chain(decisions.iter().filter(|_| warn).filter_map(|d| {
            d.warn_for
                .map(|t| (d.tmux_id, "@ccs_warned", Some(t.to_string())))
        }))
        .collect();
    if !r.dry_run && !stamps.is_empty() {
        if let Err(e) = r.tmux.set_options(&stamps).await {
            r.metrics.tmux_errors.inc();
            tracing::warn!(error = %e, count = stamps.len(), "failed to write idle stamps");
        }
    }

    for d in &decisions {
        tracing::debug!(session = %d.name, tmux_id = %format!("${}", d.tmux_id), decision = ?d.action, state = d.state.as_str(), reason = %d.why, idle_ms = ?d.idle_ms, "decided");
        if let Some(w) = &d.warning {
            tracing::warn!(session = %d.name, "{w}");
        }
    }

    // `warned`: one audit line (and event) per idle period, CCS_ENGINE_WARN_MS before the reap.
    if warn {
        for d in decisions.iter().filter(|d| d.warn_for.is_some()) {
            let mut l = AuditLine::begin(
                rfc3339(now),
                &d.name,
                &d.id,
                d.tmux_id,
                d.cid.clone(),
                ReapReason::Idle,
                d.idle_ms,
            );
            l.outcome = Outcome::Warned;
            l.reap_at = d.deadline_ms.map(rfc3339);
            tracing::info!(session = %d.name, reap_at = ?l.reap_at, "warned: this chat will be reaped soon");
            if let Err(e) = r.state.append_audit(&l) {
                tracing::error!(error = %e, session = %d.name, "failed to append the warned line");
            }
            r.metrics.record_reap(&l);
        }
    }

    let mut reqs = Vec::new();
    if enabled {
        for (d, s) in decisions.iter().zip(&snap.sessions) {
            if d.action != Action::Reap {
                continue;
            }
            let Some(reason) = d.reap_reason else {
                continue;
            };
            if r.dry_run {
                tracing::info!(session = %d.name, tmux_id = %format!("${}", d.tmux_id), reason = reason.as_str(), idle_ms = ?d.idle_ms, "would reap (dry run)");
                continue;
            }
            // Another reaper (a manual `reap`) holds it: not ours to start. A stale mark was
            // cleared above, and the test-and-set decides.
            let held = live.contains(&s.id) || policy::mark_holds(&s.reaping, now, r.stale_after());
            if held {
                tracing::debug!(session = %d.name, "another reap holds this session");
                continue;
            }
            if !r.inflight().insert(d.tmux_id) {
                continue;
            }
            reqs.push(teardown::Request {
                decision: d.clone(),
                session: s.clone(),
                reason,
                force: false,
                server_pid: listing.server_pid,
            });
        }
    }

    // The sweep's reaps go as one batch (see `teardown`), in a task of its own: the daemon
    // sweeps on while a slow teardown runs. The guard takes the sessions out of the in-flight
    // set on every path, a panic included; a batch that panicked is reported as failed.
    if !reqs.is_empty() {
        let guard = Inflight {
            r: Arc::clone(r),
            ns: reqs.iter().map(|q| q.decision.tmux_id).collect(),
        };
        let me = Arc::clone(r);
        let asked = reqs.clone();
        let task = tokio::spawn(async move {
            let _guard = guard;
            teardown::reap(&me, reqs).await
        });
        let me = Arc::clone(r);
        let done = async move {
            match task.await {
                Ok(lines) => lines,
                Err(e) => {
                    tracing::error!(error = %e, reaps = asked.len(), "a reap task failed");
                    asked
                        .iter()
                        .map(|q| {
                            let d = &q.decision;
                            let mut l = AuditLine::begin(
                                rfc3339(now_ms()),
                                &d.name,
                                &d.id,
                                d.tmux_id,
                                d.cid.clone(),
                                q.reason,
                                d.idle_ms,
                            );
                            l.outcome = Outcome::Failed;
                            l.error = Some(format!("the reap task failed: {e}"));
                            teardown::finish(&me, l, Instant::now())
                        })
                        .collect()
                }
            }
        };
        if wait {
            reaps.extend(done.await);
        } else {
            tokio::spawn(done);
        }
    }

    let report = report(r, &snap, listing.server_up, decisions, now, reaps, t0);
    r.metrics.record_sweep(&report);
    report
}

/// `status`: decide and measure everything, write nothing.
pub async fn status(r: &Arc<Reaper>) -> SweepReport {
    let t0 = Instant::now();
    let o = observe(r, Mode::Status).await;
    report(
        r,
        &o.snap,
        o.listing.server_up,
        o.decisions,
        o.now,
        Vec::new(),
        t0,
    )
}

fn report(
    r: &Reaper,
    snap: &Snapshot,
    tmux_server_up: Option<bool>,
    decisions: Vec<Decision>,
    now: i64,
    reaps: Vec<AuditLine>,
    t0: Instant,
) -> SweepReport {
    let mut sessions: Vec<SessionReport> = decisions
        .into_iter()
        .zip(&snap.sessions)
        .map(|(d, s)| SessionReport {
            tmux_target: s.tmux_target(),
            turn: (!s.turn.is_empty()).then(|| s.turn.clone()),
            rss_bytes: s.mem_rss,
            pss_bytes: s.mem_pss,
            viewer_list: s
                .clients
                .iter()
                .map(|c| ViewerReport {
                    pid: c.pid,
                    control_mode: c.control_mode,
                    attached_ms: now.saturating_sub(c.created_ms).max(0) as u64,
                    idle_ms: now.saturating_sub(c.activity_ms).max(0) as u64,
                    orphaned: c.orphaned,
                })
                .collect(),
            decision: d,
        })
        .collect();
    // The biggest idle sessions first, then the rest by size.
    sessions.sort_by_key(|r| {
        let idle = matches!(
            r.decision.state,
            State::Idle | State::Expired | State::NoCid | State::Exited
        );
        (
            !idle,
            std::cmp::Reverse(r.pss_bytes.or(r.rss_bytes).unwrap_or(0)),
            r.decision.tmux_id,
        )
    });
    let total_rss_bytes = sessions.iter().filter_map(|s| s.rss_bytes).sum();
    let total_pss_bytes = if sessions.iter().all(|s| s.pss_bytes.is_some()) {
        Some(sessions.iter().filter_map(|s| s.pss_bytes).sum())
    } else {
        None
    };
    SweepReport {
        at: rfc3339(now),
        dry_run: r.dry_run,
        enabled: r.cfg.policy.enabled(),
        error: snap.global_problem.clone(),
        socket_path: r.cfg.socket.path().to_string_lossy().into_owned(),
        tmux_server_up,
        sessions,
        host: snap.host,
        watching: snap.host.and(r.watched()).map(|w| w.to_string()),
        total_rss_bytes,
        total_pss_bytes,
        reaps,
        took_ms: t0.elapsed().as_millis() as u64,
    }
}

/// Every pane is dead, and at least one exit status is not known yet.
fn waiting_for_exit_status(s: &Session) -> bool {
    !s.panes.is_empty() && s.panes.iter().all(|p| p.dead) && !s.panes.iter().all(Pane::exit_known)
}
