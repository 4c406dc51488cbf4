//! The teardown: a batch of reaps, however many, at the cost of a few shared steps.
//!
//! For every session of the batch, in order: the atomic test-and-set of `@ccs_reaping` in the tmux
//! server, a re-check on data taken after the marks, the victims collected and pinned as (pid,
//! start time), the journal and tombstone written, SIGTERM, the grace, SIGKILL, `kill-session`,
//! the check that nothing survived, and one audit line. What the sessions of a batch share is done
//! once for all of them: one process-table scan (ppid tree, session ids, `TMUX` markers), one fresh
//! listing and one read of the activity files for the re-check, one grace, and the marks, clears
//! and `kill-session`s chained into as few tmux calls as the argv budget allows. A dead reaper's
//! journals are finished here too ([`recover`]).
//!
//! Each chat ends on its own: one whose tree is gone after the SIGTERM is finished at once
//! (`kill-session`, the check, its audit line, its journal removed, its line delivered), while
//! the batch goes on waiting out the grace for the chats with survivors
//! ([`signal::stop_and_finish`]).

use crate::core::policy::TmuxId;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tracing::Instrument;

use crate::adapters::clock::now_ms;
use crate::adapters::state::AuditLine;
use crate::core::policy::{Decision, ReapReason, Session};
use crate::core::protocol::Phase;
use crate::engine::context::Reaper;

mod fence;
mod finish;
mod late_look;
mod pane;
mod ports;
mod reap_hooks;
mod recheck;
mod recover;
mod signal;
mod stage;
#[cfg(test)]
mod standin;
#[cfg(test)]
mod tests;
mod unwind;
mod write;

pub(crate) use crate::core::reap_end::audit_line;
pub use crate::core::reap_end::{Abort, Failure, Finished, ReapEnd};
use fence::{busy_by_agent_now, lease_ran_out, release, Mark};
pub(crate) use finish::{finish, logged, verify};
use ports::{Host, ProcPort, TmuxPort};
use reap_hooks::{after_hooks, before_hooks};
use recheck::{collect_victims, recheck};
pub use recover::recover;
use stage::{Lines, Reap, Stage};
use write::{write_journals, write_tombstones};

/// Where each audit line of a batch goes as soon as its reap is over (`--once` prints it there):
/// once per line, after the line is written and the chat's journal removed.
pub type LineSink<'a> = &'a (dyn Fn(&AuditLine) + Send + Sync);

/// One reap asked for: the decision and the session as the sweep saw them.
#[derive(Debug, Clone)]
pub struct Request {
    pub decision: Decision,
    pub session: Session,
    pub reason: ReapReason,
    /// `reap --force`, or the cleanup of exited panes: no re-check, and the test-and-set leaves
    /// out what the decision overrides.
    pub force: bool,
    /// The tmux server's pid in the listing the decision was made on, when known: a session of a
    /// server started since (which may reuse `$N` and the name) is never acted on.
    pub server_pid: Option<u32>,
}

static TOKENS: AtomicU64 = AtomicU64::new(0);

/// What makes one reap's token unique among this reaper's: a counter and the clock (the owner's
/// pid and start time, in the token too, set it apart from every other reaper's).
fn nonce() -> String {
    let n = TOKENS.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{n}x{t}")
}

/// The reaper's handles a batch uses.
pub(crate) struct Hands<'a> {
    pub cfg: &'a crate::config::Config,
    pub state: &'a crate::adapters::state::StateDir,
    pub metrics: &'a crate::adapters::metrics::Metrics,
    pub ownership: &'a crate::engine::ownership::Ownership,
    pub watching: &'a crate::engine::watching::Watching,
    pub known: &'a crate::engine::context::KnownChats,
}

impl<'a> Hands<'a> {
    pub(crate) fn of(r: &'a Reaper) -> Self {
        Hands {
            cfg: &r.cfg,
            state: &r.state,
            metrics: &r.metrics,
            ownership: &r.ownership,
            watching: &r.watching,
            known: &r.known,
        }
    }
}

/// What a batch runs with: the reaper's handles, the two ports, where its lines go.
pub(crate) struct Batch<'a, T, P> {
    pub h: Hands<'a>,
    pub tmux: &'a T,
    pub procs: &'a P,
    pub lines: Lines<'a>,
}

/// Reap a batch of sessions. Returns how each request ended and its audit line, in order, each
/// line also appended to the audit log once.
///
/// A batch that panics is caught here: its marks are cleared, its journals removed (so `turn
/// begin` and `spawn` do not wait on a reaper that is alive but no longer tearing down), and each
/// request whose audit line was not written yet gets one, `failed`; a line already written is
/// never contradicted by a second.
pub async fn reap(r: &Reaper, reqs: Vec<Request>) -> Vec<Finished> {
    reap_to(r, reqs, None).await
}

/// [`reap`], each audit line also handed to `sink` as soon as its reap is over (a chat whose tree
/// died at the SIGTERM long before one that waits out the grace), each once, panic or not.
pub async fn reap_to(r: &Reaper, reqs: Vec<Request>, sink: Option<LineSink<'_>>) -> Vec<Finished> {
    let host = Host {
        ownership: &r.ownership,
    };
    reap_with(Hands::of(r), &r.tmux, &host, reqs, sink).await
}

/// [`reap_to`] through the ports `tmux` and `procs`. The reaps are owned here, outside the panic
/// boundary: a batch that panics leaves them at the stage it reached, and each gives back what it
/// holds ([`unwind::unwind`]).
pub(crate) async fn reap_with<'a>(
    h: Hands<'a>,
    tmux: &'a impl TmuxPort,
    procs: &'a impl ProcPort,
    reqs: Vec<Request>,
    sink: Option<LineSink<'a>>,
) -> Vec<Finished> {
    if reqs.is_empty() {
        return Vec::new();
    }
    let span = match reqs.as_slice() {
        [one] => {
            tracing::info_span!("reap", session = %one.decision.name, tmux_id = %one.decision.tmux_id, reason = one.reason.as_str())
        }
        many => tracing::info_span!("reap", sessions = many.len()),
    };
    let mut reaps: Vec<Reap> = reqs
        .into_iter()
        .map(|req| {
            let line = AuditLine::of_decision(&req.decision, req.reason, now_ms());
            Reap::asked(req, line)
        })
        .collect();
    let lines = Lines {
        state: h.state,
        metrics: h.metrics,
        sink,
        t0: Instant::now(),
    };
    let b = Batch {
        h,
        tmux,
        procs,
        lines,
    };
    let ran = AssertUnwindSafe(reap_batch(&b, &mut reaps).instrument(span.clone()))
        .catch_unwind()
        .await;
    if let Err(p) = ran {
        let why = unwind::panic_message(p.as_ref());
        unwind::unwind(tmux, &b.lines, b.h.metrics, &mut reaps, &why)
            .instrument(span)
            .await;
    }
    reaps
        .into_iter()
        .filter_map(|j| match j.stage {
            Stage::Ended { finished, .. } => Some(finished),
            _ => None,
        })
        .collect()
}

/// The protocol, step by step (docs/teardown.md): mark, re-check, victims, journals, hook, fence,
/// tombstones, signals, finish. The order of the steps is the protocol, and each step is a
/// function of its own; what remains here is their order and the phase timings between them.
async fn reap_batch<T: TmuxPort, P: ProcPort>(b: &Batch<'_, T, P>, reaps: &mut [Reap]) {
    let (r, t0) = (&b.h, b.lines.t0);
    // The audit line and the tombstone must be writable before anything is touched.
    if let Err(e) = r.state.check_writable() {
        tracing::error!(error = %e, "reap not attempted: the state dir cannot be written");
        for j in reaps.iter_mut() {
            j.fail(Failure::StateDirUnwritable(e.to_string()));
        }
        return b.lines.end_all(reaps);
    }

    // 1. The marks: the atomic test-and-set, in the server. The token names us and our limit.
    let tok = r.ownership.mark_owner().token(&nonce());
    let _live = r.ownership.hold_token(&tok);
    // The lease runs from before the mark, on our own clock.
    let mark = Mark {
        boot_ms: crate::adapters::clock::boot_ms(),
        at: now_ms(),
        tok: &tok,
    };
    if !mark_all(b, reaps, mark).await {
        return b.lines.end_all(reaps);
    }
    phase_done(Phase::Mark, t0);
    // 2. The re-check, on one listing and one read of the activity files taken after the marks.
    let listing = recheck(b, reaps, &tok).await;
    pane::same_shape(reaps);
    tracing::debug!(
        phase = Phase::Recheck.name(),
        ms = t0.elapsed().as_millis() as u64,
        marked = reaps.iter().filter(|j| j.stage.fresh().is_some()).count(),
        "teardown"
    );
    // 3. The victims: one scan of the process table for the whole batch.
    let listing = listing.unwrap_or_default();
    collect_victims(b.procs, reaps, &listing);
    let world = crate::adapters::procs::World::of(&listing);
    let memory = signal::MemoryRead::start(b.procs, reaps);
    phase_done(Phase::Victims, t0);
    // 4. The journals, before the hook: from here on a reaper that dies or stalls leaves a
    // journal, and its live mark keeps everyone else off the session.
    let dirs = r.state.reap_dirs();
    write_journals(b, &dirs, reaps, &tok, listing.server_pid).await;
    phase_done(Phase::Journal, t0);
    // The studio's hook may veto a reap before anything is touched.
    if let Some(hook) = &r.cfg.hook {
        before_hooks(r.cfg, hook, reaps).await;
    }
    // The agents' own status files once more, right before the fence: a turn begun during the
    // hook (or since the re-check) by a chat no prompt hook wires is seen here.
    busy_by_agent_now(reaps);
    phase_done(Phase::Hook, t0);
    // 5. The fence: every mark of the batch must still be exactly ours, with time left under it.
    // A reaper held up anywhere above (a stalled hook, a paused container) finds out here, and
    // signals nothing. Only then the tombstones (each a chat's cid, and for a reaper that finds
    // this journal after we died, the sign that this reap went past its fence): a reap stopped
    // at the fence writes none, so it never overwrites the tombstone of a reap that holds the
    // chat. Then at once the first signal.
    fence::fence(b, reaps, mark).await;
    phase_done(Phase::Fence, t0);
    write_tombstones(r.cfg, r.state, &dirs, reaps);
    release(b.tmux, r.state, reaps, &tok).await;
    memory.into(reaps).await;
    // The lease once more, right before the first signal: the tombstones' writes and the clears
    // above took time, and a reader that cannot see us (another pid namespace) clears our mark
    // once the lease runs out.
    lease_ran_out(r.cfg, reaps, mark);
    release(b.tmux, r.state, reaps, &tok).await;
    phase_done(Phase::Tombstone, t0);
    // 6-9. Stop every tree of the batch together, one grace for all; each chat is finished as
    // soon as its tree is gone.
    signal::stop_and_finish(b, reaps, &tok, &world).await;
    phase_done(Phase::Signal, t0);
    end_batch(b, reaps).await;
    phase_done(Phase::Finish, t0);
}

/// The lines of the reaps that stopped before any signal (written here, not between the fence
/// and the first signal); every other line is written by now, and its journal removed. Then the
/// studio's `after` hook.
async fn end_batch<T: TmuxPort, P: ProcPort>(b: &Batch<'_, T, P>, reaps: &mut [Reap]) {
    b.lines.end_all(reaps);
    if let Some(hook) = &b.h.cfg.hook {
        let ends: Vec<Finished> = reaps.iter().filter_map(|j| j.finished().cloned()).collect();
        after_hooks(b.h.cfg, hook, &ends).await;
    }
}

/// Step 1, the marks: the atomic test-and-set of every reap's session, in the server, with
/// `mark`'s time and token (the token names us and our limit); every reap is then `Marked`.
/// Returns false if the call failed: the marks it may have set are taken back (best effort) and
/// every reap fails.
async fn mark_all<T: TmuxPort, P: ProcPort>(
    b: &Batch<'_, T, P>,
    reaps: &mut [Reap],
    mark: Mark<'_>,
) -> bool {
    let token: stage::Token = Arc::from(mark.tok);
    let items: Vec<(TmuxId, bool, bool)> = reaps
        .iter()
        .map(|j| {
            let d = &j.request.decision;
            let force = j.request.force;
            (
                d.tmux_id,
                !force && !d.override_turn,
                !force && !d.override_viewers,
            )
        })
        .collect();
    for j in reaps.iter_mut() {
        j.stage = Stage::Marked {
            token: token.clone(),
        };
    }
    let scopes = pane::scopes(reaps);
    let Err(e) = b
        .tmux
        .mark_reaping(&items, mark.at, mark.tok, &scopes)
        .await
    else {
        return true;
    };
    b.h.metrics.tmux_errors.inc();
    // Some marks may have been set before it failed: take back ours (best effort).
    let all: Vec<TmuxId> = reaps.iter().map(Reap::n).collect();
    if let Err(e) = b.tmux.clear_reaping_many(&all, mark.tok).await {
        tracing::warn!(error = %e, "failed to clear reap marks after a failed marking");
    }
    for j in reaps.iter_mut() {
        j.stage = Stage::Asked;
        j.fail(Failure::Mark(e.to_string()));
    }
    false
}

/// The DEBUG line that ends a step of the protocol: its name and the milliseconds since the batch
/// began (scripts/bench-mass reads them; tests/it/teardown.rs checks their order is the core's).
fn phase_done(p: Phase, t0: Instant) {
    tracing::debug!(
        phase = p.name(),
        ms = t0.elapsed().as_millis() as u64,
        "teardown"
    );
}
