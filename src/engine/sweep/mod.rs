//! One sweep, as named steps ([`sweep`]): observe, collect the exits tmux missed, recover a dead
//! reaper's journals, clear stale marks, stamp the idle clocks, warn, choose, start the batch,
//! report. `status` is a sweep that writes nothing.

use crate::core::policy::TmuxId;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::adapters::metrics::Metrics;
use crate::adapters::state::{self as st, AuditLine, Known, KnownChat, Outcome, StateDir};
use crate::adapters::tmux::{Listing, Tmux};

use crate::core::policy::{self, Action, Decision, Pane, ReapReason, Session, Snapshot};
use crate::core::report::{Summary, SweepReport};
use crate::core::time::rfc3339;
use crate::engine::context::{KnownChats, Reaper};
use crate::engine::inflight::InFlight;
use crate::engine::observe::{observe, Mode, Observation};
use crate::engine::ownership::Ownership;
use crate::engine::record::record;
use crate::engine::teardown;

/// Where a sweep's batch of reaps goes.
pub enum Batches<'a> {
    /// Awaited, and returned in the report (`--once`); each audit line (a dead reaper's
    /// teardowns finished, then the batch's) also handed to the sink, if any, as soon as its reap
    /// is over.
    Wait(Option<teardown::LineSink<'a>>),
    /// Spawned into the daemon's set, which joins them on shutdown; each is logged as it ends.
    Spawn(&'a mut JoinSet<()>),
}

/// One sweep, step by step as the rules read: collect the exits tmux missed, recover a dead
/// reaper's journals, clear stale marks, keep the known conversations, stamp the idle clocks,
/// warn, choose, start the batch, report. Its reaps go as one batch, awaited or spawned as
/// `batches` says.
///
/// Chats whose teardown a live reaper (another process, perhaps stalled) is running: its mark is
/// not stale, however old, and the session is not ours to start on. Journals whose owner is gone
/// are a dead reaper's: finished here, only on a listing that was read (an empty one standing for
/// a tmux that failed would hide the live sessions, and the server, from the checks); their lines
/// go to the sink as they end.
///
/// The sweep's reaps go as one batch (see `teardown`); the daemon's in a task of its own, in its
/// set: it sweeps on while a slow teardown runs. The guard takes the sessions out of the
/// in-flight set on every path. A batch that panics is caught and unwound by the teardown itself
/// (marks cleared, journals removed, each audit line written once).
pub async fn sweep(r: &Arc<Reaper>, batches: Batches<'_>) -> SweepReport {
    let t0 = Instant::now();
    let mut o = observe(r, Mode::Act).await;
    if !r.dry_run && collect_exits(&r.tmux, &r.metrics, &o.snap).await {
        o = observe(r, Mode::Act).await;
    }
    if o.listing.server_up == Some(false) {
        r.ownership.no_server();
    }
    let enabled = r.cfg.policy.enabled();
    let (live, dead) = journals_by_owner(&r.state, &r.ownership);
    let holds = Holds::of(r, &live);
    let mut reaps = Vec::new();
    if !r.dry_run {
        if o.snap.global_problem.is_none() {
            reaps = teardown::recover(r, &o.listing, dead).await;
            if let Batches::Wait(Some(sink)) = &batches {
                reaps.iter().for_each(sink);
            }
        }
        clear_stale_marks(&r.tmux, &r.state, &holds, &o.snap).await;
        // The last known conversation of every chat, and the chats a dead server took with it.
        // The daemon writes it beside the sweep: a pressure sweep never waits on its fsync.
        let later = matches!(batches, Batches::Spawn(_));
        reaps.extend(keep_known(&Keep::of(r), &o, later));
        // Tombstones past CCS_REAP_TOMBSTONE_MAX_AGE: at the first sweep, then hourly.
        crate::engine::resume::age_out(&r.cfg, &r.state, &r.metrics, &r.last_age_out);
    }

    let warn = enabled && !r.dry_run;
    if !r.dry_run {
        stamp_idle_clocks(&r.tmux, &r.metrics, &o.decisions, &o.snap.sessions, warn).await;
    }
    log_decisions(&o.decisions);
    if warn {
        warn_before_reaps(&r.state, &r.metrics, &o.decisions, o.now);
    }
    let (mut fates, mut reqs) = if enabled {
        choose(&holds, &o.decisions, &o.snap, o.listing.server_pid)
    } else {
        (HashMap::new(), Vec::new())
    };
    let recovered = not_again(&reaps, &mut reqs);
    // What this sweep saw of marks and journals it cannot check, kept for the next one (a sweep
    // that could not read tmux saw nothing, and forgets nothing).
    if o.snap.global_problem.is_none() {
        r.ownership.end_observation();
    }
    if !reqs.is_empty() {
        let ns: Vec<TmuxId> = reqs.iter().map(|q| q.decision.tmux_id).collect();
        let guard = r.inflight.hold(ns.clone());
        match batches {
            Batches::Wait(sink) => {
                let ends = teardown::reap_to(r, reqs, sink).await;
                drop(guard);
                ended(ns, ends, &mut fates, &mut reaps);
            }
            Batches::Spawn(set) => {
                let me = Arc::clone(r);
                set.spawn(async move {
                    let _guard = guard;
                    teardown::reap(&me, reqs).await;
                });
            }
        }
    }
    let summary = summarize(&o.decisions, &fates, recovered);
    let (lost, empty) = lost_and_empty(&r.known, &r.state, &o);
    let done = Done {
        reaps,
        summary,
        lost,
        empty,
    };
    let report = report(&Sayer::of(r), o, done, t0);
    r.metrics.record_sweep(&report);
    report
}

impl<'a> Holds<'a> {
    /// What holds a session from being started by this sweep, of `r`, and `live`.
    pub(crate) fn of(r: &'a Reaper, live: &'a HashSet<String>) -> Self {
        Holds {
            dry_run: r.dry_run,
            ownership: &r.ownership,
            inflight: &r.inflight,
            live,
        }
    }
}

impl<'a> Keep<'a> {
    /// The handles keeping the record of known chats uses, of `r`.
    fn of(r: &'a Reaper) -> Self {
        Keep {
            cfg: &r.cfg,
            state: &r.state,
            metrics: &r.metrics,
            known: &r.known,
        }
    }
}

impl<'a> Sayer<'a> {
    /// The handles a report uses, of `r`.
    fn of(r: &'a Reaper) -> Self {
        Sayer {
            cfg: &r.cfg,
            dry_run: r.dry_run,
            ownership: &r.ownership,
            watching: &r.watching,
        }
    }
}

/// A chat whose dead reaper's teardown this sweep just finished is gone: not reaped again on
/// the listing taken before (that would only abort with "gone", a second audit line). Returns
/// how many lines of finished teardowns there are.
fn not_again(reaps: &[AuditLine], reqs: &mut Vec<teardown::Request>) -> usize {
    let finished: HashSet<TmuxId> = reaps
        .iter()
        .filter(|l| l.outcome != Outcome::Lost)
        .map(|l| l.tmux_id)
        .collect();
    reqs.retain(|q| !finished.contains(&q.session.tmux_id));
    reaps.iter().filter(|l| l.outcome != Outcome::Lost).count()
}

/// An awaited batch (`--once`) is over: each line's outcome becomes its session's fate (one
/// line per request, in order), and the line joins `reaps`.
fn ended(
    ns: Vec<TmuxId>,
    ends: Vec<teardown::Finished>,
    fates: &mut HashMap<TmuxId, Fate>,
    reaps: &mut Vec<AuditLine>,
) {
    for (n, f) in ns.into_iter().zip(&ends) {
        fates.insert(n, Fate::Ended(f.end.outcome()));
    }
    reaps.extend(ends.into_iter().map(|f| f.line));
}

/// The chats lost with their server and not back, and whether the socket is `empty`, by the
/// record of known chats as the sweep left it.
fn lost_and_empty(known: &KnownChats, state: &StateDir, o: &Observation) -> (Vec<KnownChat>, bool) {
    known.peek(|k| {
        let empty = o.listing.server_up == Some(false)
            && match k {
                Some(k) => k.emptied.is_some(),
                None => state.read_known().is_ok_and(|k| k.emptied.is_some()),
            };
        (lost_chats(k, &o.snap), empty)
    })
}

/// Panes that are dead but whose exit status tmux has not collected (a missed SIGCHLD leaves
/// them so until another child of the server exits): make it collect. `true` when it did, and
/// the sweep must look again.
async fn collect_exits(tmux: &Tmux, metrics: &Metrics, snap: &Snapshot) -> bool {
    if !snap.sessions.iter().any(waiting_for_exit_status) {
        return false;
    }
    match tmux.collect_exits().await {
        Ok(()) => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            true
        }
        Err(e) => {
            metrics.tmux_errors.inc();
            tracing::warn!(error = %e, "failed to make tmux collect the exit status of dead panes");
            false
        }
    }
}

/// The reap journals in the state dir, split by their owner: the ids of the chats a live reaper
/// is tearing down, and the journals of dead reapers. An unreadable journal is left alone.
pub(crate) fn journals_by_owner(
    state: &StateDir,
    ownership: &Ownership,
) -> (HashSet<String>, Vec<st::Journal>) {
    let (live, dead): (Vec<_>, Vec<_>) = state
        .journals()
        .into_iter()
        .filter_map(|j| {
            j.map_err(|e| tracing::warn!(error = %e, "unreadable reap journal left alone"))
                .ok()
        })
        .partition(|j| ownership.journal_live(j, true));
    (live.into_iter().map(|j| j.id).collect(), dead)
}

/// Clear the reap marks whose owner cannot act any more (provably gone, or out of our sight and
/// seen by this reaper for longer than the limit it wrote: see `policy::mark_is_stale`), but
/// never one of ours in flight nor one a live reaper's journal names.
async fn clear_stale_marks(tmux: &Tmux, state: &StateDir, holds: &Holds<'_>, snap: &Snapshot) {
    let mut stale: Vec<(TmuxId, String, String, String)> = snap
        .sessions
        .iter()
        .filter(|s| {
            holds.ownership.mark_is_stale(s)
                && !holds.inflight.contains(s.tmux_id)
                && !holds.live.contains(&s.id)
        })
        .map(|s| (s.tmux_id, s.reaping.clone(), s.reaper.clone(), s.id.clone()))
        .collect();
    if stale.is_empty() {
        return;
    }
    // A journal still there after the recovery above (one it could not finish: the process
    // table unreadable, a tmux error) keeps its chat's mark: the dead reaper may have signalled
    // it, and the next sweep finishes that teardown first.
    let left: HashSet<String> = state
        .journals()
        .into_iter()
        .flatten()
        .map(|j| j.id)
        .collect();
    stale.retain(|(.., id)| !left.contains(id));
    for (n, v, tok, _) in stale {
        tracing::warn!(tmux_id = %n, reaping = %v, token = %tok, "clearing a stale reap mark (its reaper is gone)");
        if let Err(e) = tmux.clear_stale_reaping(n, &v, tok.trim()).await {
            tracing::warn!(tmux_id = %n, error = %e, "failed to clear a stale reap mark");
        }
    }
}

/// Idle stamps, and (when `warn`) the `warned` marks of this sweep's warnings, in one batch.
async fn stamp_idle_clocks(
    tmux: &Tmux,
    metrics: &Metrics,
    decisions: &[Decision],
    sessions: &[Session],
    warn: bool,
) {
    // First sights: each written only while `@ccs_idle` is still unset (one guarded call per
    // session, chained), so a turn-end stamp the studio wrote since the listing stands. In the
    // same chain, the chats seen with their one pane and nothing recorded: that pane is recorded
    // as the chat's (`@ccs_pane`), so a pane swapped or moved in later is never taken for it
    // ([`policy::chat_pane`]); not for a chat this sweep reaps.
    let first: Vec<(TmuxId, i64)> = decisions
        .iter()
        .filter(|d| d.stamp_if_unset)
        .filter_map(|d| d.stamp_idle.map(|t| (d.tmux_id, t)))
        .collect();
    let panes: Vec<(TmuxId, policy::chat_pane::PaneRecord)> = decisions
        .iter()
        .zip(sessions)
        .filter(|(d, _)| d.action() != Action::Reap)
        .filter_map(|(_, s)| policy::chat_pane::to_record(s).map(|p| (s.tmux_id, p)))
        .collect();
    if !first.is_empty() || !panes.is_empty() {
        if let Err(e) = tmux.first_sight(&first, &panes).await {
            metrics.tmux_errors.inc();
            tracing::warn!(error = %e, count = first.len(), panes = panes.len(), "failed to write first-sight idle stamps and chat panes");
        }
    }
    let stamps: Vec<(TmuxId, &str, Option<String>)> = decisions
        .iter()
        .filter(|d| !d.stamp_if_unset)
        .filter_map(|d| {
            d.stamp_idle
                .map(|t| (d.tmux_id, "@ccs_idle", Some(t.to_string())))
        })
        .chain(decisions.iter().filter(|_| warn).filter_map(|d| {
            d.warn_for
                .map(|t| (d.tmux_id, "@ccs_warned", Some(t.to_string())))
        }))
        .collect();
    if stamps.is_empty() {
        return;
    }
    if let Err(e) = tmux.set_options(&stamps).await {
        metrics.tmux_errors.inc();
        tracing::warn!(error = %e, count = stamps.len(), "failed to write idle stamps");
    }
}

/// Each decision at debug level, and what a session's own settings had ignored as a warning.
fn log_decisions(decisions: &[Decision]) {
    for d in decisions {
        tracing::debug!(session = %d.name, tmux_id = %d.tmux_id, decision = ?d.action(), state = d.state.as_str(), reason = %d.why, idle_ms = d.idle_ms, "decided");
        if let Some(w) = &d.warning {
            tracing::warn!(session = %d.name, "{w}");
        }
    }
}

/// `warned`: one audit line (and event) per idle period, `CCS_ENGINE_WARN_MS` before the reap.
fn warn_before_reaps(state: &StateDir, metrics: &Metrics, decisions: &[Decision], now: i64) {
    for d in decisions.iter().filter(|d| d.warn_for.is_some()) {
        let mut l = AuditLine::of_decision(d, ReapReason::Idle, now);
        l.outcome = Outcome::Warned;
        l.reap_at = d.deadline_ms.map(rfc3339);
        tracing::info!(session = %d.name, reap_at = l.reap_at.as_deref(), "warned: this chat will be reaped soon");
        let _ = record(state, metrics, &l);
    }
}

/// What keeps a session decided `Reap` from being started here: a dry run, a live reaper's
/// journal (`live`: the chats' ids), a mark that holds, a batch of ours in flight.
#[derive(Clone, Copy)]
pub(crate) struct Holds<'a> {
    pub dry_run: bool,
    pub ownership: &'a Ownership,
    pub inflight: &'a InFlight,
    pub live: &'a HashSet<String>,
}

/// The sessions decided `Reap` that this sweep starts, and what became of each one decided so:
/// a dry run only says it would; one another reap holds (a live reaper's journal, a mark that
/// holds, a batch of ours in flight) is not ours to start. A stale mark was cleared before, and
/// the test-and-set decides. Those started are put in the in-flight set here.
pub(crate) fn choose(
    holds: &Holds<'_>,
    decisions: &[Decision],
    snap: &Snapshot,
    server_pid: Option<u32>,
) -> (HashMap<TmuxId, Fate>, Vec<teardown::Request>) {
    let Holds {
        dry_run,
        ownership,
        inflight,
        live,
    } = *holds;
    let mut fates: HashMap<TmuxId, Fate> = HashMap::new();
    let mut reqs = Vec::new();
    for (d, s) in decisions.iter().zip(&snap.sessions) {
        if d.action() != Action::Reap {
            continue;
        }
        let Some(reason) = d.reap_reason() else {
            continue;
        };
        if dry_run {
            tracing::info!(session = %d.name, tmux_id = %d.tmux_id, reason = reason.as_str(), idle_ms = d.idle_ms, "would reap (dry run)");
            fates.insert(d.tmux_id, Fate::WouldReap);
            continue;
        }
        let held = live.contains(&s.id) || ownership.mark_holds(s);
        if held {
            tracing::debug!(session = %d.name, "another reap holds this session");
            fates.insert(d.tmux_id, Fate::Held);
            continue;
        }
        if !inflight.insert(d.tmux_id) {
            fates.insert(d.tmux_id, Fate::Held);
            continue;
        }
        fates.insert(d.tmux_id, Fate::Started);
        reqs.push(teardown::Request {
            decision: d.clone(),
            session: s.clone(),
            reason,
            force: false,
            server_pid,
        });
    }
    (fates, reqs)
}

/// `status`: decide and measure everything, write nothing.
pub async fn status(r: &Arc<Reaper>) -> SweepReport {
    let t0 = Instant::now();
    let o = observe(r, Mode::Status).await;
    let fates = o
        .decisions
        .iter()
        .filter(|d| d.action() == Action::Reap)
        .map(|d| (d.tmux_id, Fate::WouldReap))
        .collect();
    let summary = summarize(&o.decisions, &fates, 0);
    // What the next sweep would record (nothing is written): the chats lost with a server.
    let old = match r.state.read_known() {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(error = %e, "the record of last known conversations is unreadable");
            Known::default()
        }
    };
    let mut plan = plan_known(old, &o.snap, &o.listing, &o.decisions, o.now);
    // As the next sweep will see it (nothing is written): chats reaped before their server went
    // are asleep, not lost, and a server that went with them leaves the socket `empty`.
    let reaped = settle_reaped(&r.state, &mut plan);
    let empty = mark_emptied(&mut plan, o.listing.server_up, reaped, o.now);
    let lost = lost_chats(Some(&plan.known), &o.snap);
    let asleep = asleep(&r.state, &r.cfg, &o.snap, &lost);
    let done = Done {
        reaps: Vec::new(),
        summary,
        lost,
        empty,
    };
    let mut rep = report(&Sayer::of(r), o, done, t0);
    rep.asleep = asleep;
    rep
}

/// What a sweep did: its reaps' audit lines and what became of each session.
struct Done {
    reaps: Vec<AuditLine>,
    summary: Summary,
    /// Chats lost with their tmux server and not back yet.
    lost: Vec<KnownChat>,
    /// The socket is `empty` (the server exited with the last chat this reaper took).
    empty: bool,
}

/// What became of a session the sweep decided to reap.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fate {
    /// Another reap holds it (another reaper, or a batch of ours still in flight).
    Held,
    /// A dry run, or `status`: it would be reaped.
    WouldReap,
    /// Handed to a batch (the daemon's: the outcome comes later).
    Started,
    /// Its batch ended with this outcome.
    Ended(Outcome),
}

/// Every session counted once: kept (not to be reaped, or not acted on), or its fate.
fn summarize(decisions: &[Decision], fates: &HashMap<TmuxId, Fate>, recovered: usize) -> Summary {
    let mut s = Summary {
        seen: decisions.len(),
        recovered,
        ..Summary::default()
    };
    for d in decisions {
        let fate = (d.action() == Action::Reap)
            .then(|| fates.get(&d.tmux_id))
            .flatten();
        let count = match fate {
            None => &mut s.kept,
            Some(Fate::Held) => &mut s.held,
            Some(Fate::WouldReap) => &mut s.would_reap,
            Some(Fate::Started) => &mut s.started,
            Some(Fate::Ended(Outcome::Reaped)) => &mut s.reaped,
            Some(Fate::Ended(Outcome::Aborted)) => &mut s.aborted,
            // `failed`, and any outcome a batch should not end with.
            Some(Fate::Ended(_)) => &mut s.failed,
        };
        *count += 1;
    }
    s
}

mod lost;
pub(crate) use lost::*;
mod report;
use report::*;

/// Every pane is dead, and at least one exit status is not known yet.
fn waiting_for_exit_status(s: &Session) -> bool {
    !s.panes.is_empty() && s.panes.iter().all(|p| p.dead) && !s.panes.iter().all(Pane::exit_known)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::State;

    fn decision(n: TmuxId, action: Action) -> Decision {
        Decision {
            tmux_id: n,
            name: format!("ccs-{}", n.get()),
            id: n.get().to_string(),
            ruling: match action {
                Action::Reap => crate::core::policy::Ruling::Reap(ReapReason::Idle),
                Action::Keep => crate::core::policy::Ruling::Keep,
            },
            state: State::Idle,
            why: String::new(),
            stamp_idle: None,
            stamp_if_unset: false,
            idle_ms: None,
            deadline_ms: None,
            cid: None,
            viewers: 0,
            turn_since_ms: None,
            override_turn: false,
            override_viewers: false,
            warn_for: None,
            warning: None,
        }
    }

    #[test]
    fn every_session_is_counted_once_and_the_counts_add_up() {
        use Action::{Keep, Reap};
        // (decision, fate) per session; the summary wanted.
        type Row = (&'static [(Action, Option<Fate>)], usize, Summary);
        let table: &[Row] = &[
            (&[], 0, Summary::default()),
            (
                &[(Keep, None), (Keep, None)],
                0,
                Summary {
                    seen: 2,
                    kept: 2,
                    ..Summary::default()
                },
            ),
            (
                &[
                    (Keep, None),
                    (Reap, Some(Fate::Ended(Outcome::Reaped))),
                    (Reap, Some(Fate::Held)),
                    (Reap, Some(Fate::Ended(Outcome::Aborted))),
                    (Reap, Some(Fate::Ended(Outcome::Failed))),
                ],
                1,
                Summary {
                    seen: 5,
                    kept: 1,
                    reaped: 1,
                    held: 1,
                    aborted: 1,
                    failed: 1,
                    recovered: 1,
                    ..Summary::default()
                },
            ),
            // Decided, not acted on (reaping off, no reason): kept. A fate on a kept session
            // (cannot happen) does not count it twice.
            (
                &[(Reap, None), (Keep, Some(Fate::Held))],
                0,
                Summary {
                    seen: 2,
                    kept: 2,
                    ..Summary::default()
                },
            ),
            (
                &[(Reap, Some(Fate::WouldReap)), (Reap, Some(Fate::Started))],
                0,
                Summary {
                    seen: 2,
                    would_reap: 1,
                    started: 1,
                    ..Summary::default()
                },
            ),
        ];
        for (rows, recovered, want) in table {
            let decisions: Vec<Decision> = rows
                .iter()
                .enumerate()
                .map(|(i, (a, _))| decision(TmuxId(i as u32), *a))
                .collect();
            let fates: HashMap<TmuxId, Fate> = rows
                .iter()
                .enumerate()
                .filter_map(|(i, (_, f))| f.map(|f| (TmuxId(i as u32), f)))
                .collect();
            let got = summarize(&decisions, &fates, *recovered);
            assert_eq!(&got, want, "{rows:?}");
            assert_eq!(
                got.kept
                    + got.reaped
                    + got.held
                    + got.aborted
                    + got.failed
                    + got.would_reap
                    + got.started,
                got.seen,
                "{rows:?}"
            );
        }
    }
}
