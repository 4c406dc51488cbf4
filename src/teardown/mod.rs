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
//! ([`stop_and_finish`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tracing::Instrument;

use crate::clock::{now_ms, rfc3339};
use crate::context::Reaper;
use crate::policy::{self, Decision, ReapReason, Session, Snapshot};
use crate::procs;
use crate::state::{AuditLine, Ended, Journal, ReapDirs, Tombstone};
use crate::tmux::Listing;

mod end;
mod finish;
mod reap_hooks;
mod recover;
mod unwind;

pub use end::{Abort, Failure, Finished, ReapEnd};
pub(crate) use finish::{audit_line, finish, verify};
use reap_hooks::{after_hooks, before_hooks};
pub use recover::recover;
use unwind::{test_panic, CatchUnwind, Progress};

/// Where each audit line of a batch goes as soon as its reap is over (`--once` prints it there):
/// once per line, after the line is written and the chat's journal removed.
pub type Sink<'a> = &'a (dyn Fn(&AuditLine) + Send + Sync);

/// Above this many chats finished together, their `kill-session`s are asked only for the sessions
/// still listed: fewer chain one call anyway, and a listing would be one more.
const LIST_ABOVE: usize = 48;

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

/// One reap under way.
struct Job {
    req: Request,
    line: AuditLine,
    /// The session as listed after the mark, once the re-check passed.
    fresh: Option<Session>,
    victims: Vec<procs::Victim>,
    ids: Vec<procs::Ident>,
    journal: Option<Journal>,
    /// Whether this reap is over (its end is known), before the signals.
    over: bool,
    /// How it ended, once it has.
    end: Option<ReapEnd>,
    /// A step past the signals that failed (`kill-session`): the reap ends failed.
    failure: Option<Failure>,
}

impl Job {
    /// The reap ends here, before its first signal.
    fn stop(&mut self, end: ReapEnd) {
        self.end = Some(end);
        self.over = true;
    }

    fn abort(&mut self, why: Abort) {
        self.stop(ReapEnd::Aborted(why));
    }

    fn fail(&mut self, why: Failure) {
        self.stop(ReapEnd::Failed(why));
    }

    fn n(&self) -> u32 {
        self.req.decision.tmux_id
    }
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

/// How long a teardown may still take once past the fence: the grace, the kills landing, and the
/// tmux calls that follow. A mark with less than this left under its owner's limit is not signalled
/// under.
fn rest_ms(r: &Reaper) -> i64 {
    r.cfg.lease_rest_ms()
}

/// The fence ([`policy::fence`]): one guarded tmux call tells which marks of the batch are still
/// exactly ours (and which chats no viewer has attached to since the mark, where the mark asked
/// for none); a reap whose mark changed, went, or ran out of time, or whose chat is now watched,
/// is aborted, nothing signalled.
async fn fence(r: &Reaper, jobs: &mut [Job], mark_at: i64, tok: &str, unmark: &mut Vec<u32>) {
    let ns: Vec<(u32, bool)> = jobs
        .iter()
        .filter(|j| !j.over)
        .map(|j| (j.n(), !j.req.force && !j.req.decision.override_viewers))
        .collect();
    if ns.is_empty() {
        return;
    }
    let held = match r.tmux.fence(&ns, mark_at, tok).await {
        Ok(h) => h,
        Err(e) => {
            r.metrics.tmux_errors.inc();
            for j in jobs.iter_mut().filter(|j| !j.over) {
                unmark.push(j.n());
                j.abort(Abort::FenceUnchecked(e.to_string()));
            }
            return;
        }
    };
    let now = now_ms();
    let limit = r.stale_after();
    let rest = rest_ms(r);
    for j in jobs.iter_mut().filter(|j| !j.over) {
        let held = held.contains(&j.n());
        if let Err(why) = policy::fence(held, mark_at, now, limit, rest) {
            tracing::warn!(session = %j.req.decision.name, tmux_id = %format!("${}", j.n()), why = why.as_str(), "fenced off: nothing signalled");
            unmark.push(j.n());
            j.abort(Abort::FencedOff(why));
        }
    }
}

/// The reaps still on whose lease ([`policy::fence`], the mark as held) has too little left to
/// finish under: aborted, nothing signalled. Returns their sessions.
fn lease_ran_out(r: &Reaper, jobs: &mut [Job], mark_at: i64) -> Vec<u32> {
    let (now, limit, rest) = (now_ms(), r.stale_after(), rest_ms(r));
    let mut late = Vec::new();
    for j in jobs.iter_mut().filter(|j| !j.over) {
        if let Err(why) = policy::fence(true, mark_at, now, limit, rest) {
            tracing::warn!(session = %j.req.decision.name, why = why.as_str(), "fenced off right before the first signal: nothing signalled");
            late.push(j.n());
            j.abort(Abort::FencedOff(why));
        }
    }
    late
}

/// Take back the journals of the reaps that stopped before their first signal (vetoed, fenced
/// off, or a tombstone that could not be written): the chat lives on.
fn release(r: &Reaper, jobs: &mut [Job], unmark: &[u32], p: &mut Progress) {
    for (i, j) in jobs.iter_mut().enumerate() {
        if !j.over || !unmark.contains(&j.n()) {
            continue;
        }
        let Some(jn) = j.journal.take() else {
            continue;
        };
        p.journal_removed(i);
        if let Err(e) = r.state.remove_journal(&jn) {
            tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal");
        }
    }
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
pub async fn reap_to(r: &Reaper, reqs: Vec<Request>, sink: Option<Sink<'_>>) -> Vec<Finished> {
    if reqs.is_empty() {
        return Vec::new();
    }
    let span = match reqs.as_slice() {
        [one] => {
            tracing::info_span!("reap", session = %one.decision.name, tmux_id = %format!("${}", one.decision.tmux_id), reason = one.reason.as_str())
        }
        many => tracing::info_span!("reap", sessions = many.len()),
    };
    let t0 = Instant::now();
    let mut progress = Progress::new(sink);
    let ran = {
        let batch = std::pin::pin!(reap_batch(r, reqs, &mut progress).instrument(span.clone()));
        CatchUnwind(batch).await
    };
    match ran {
        Ok(lines) => lines,
        Err(why) => progress.unwind(r, &why, t0).instrument(span).await,
    }
}

/// The protocol, step by step (docs/teardown.md): mark, re-check, victims, journals, hook, fence,
/// tombstones, signals, finish. Long (about 165 lines) on purpose: the order of the steps is the
/// protocol, and each step is a function of its own; what remains here is their order and the
/// phase timings between them.
async fn reap_batch(r: &Reaper, reqs: Vec<Request>, p: &mut Progress<'_>) -> Vec<Finished> {
    let t0 = Instant::now();
    let mut jobs: Vec<Job> = reqs
        .into_iter()
        .map(|req| {
            let line = AuditLine::of_decision(&req.decision, req.reason, now_ms());
            Job {
                req,
                line,
                fresh: None,
                victims: Vec::new(),
                ids: Vec::new(),
                journal: None,
                over: false,
                end: None,
                failure: None,
            }
        })
        .collect();
    p.begin(jobs.iter().map(|j| j.line.clone()).collect());

    // The audit line and the tombstone must be writable before anything is touched.
    if let Err(e) = r.state.check_writable() {
        tracing::error!(error = %e, "reap not attempted: the state dir cannot be written");
        for j in &mut jobs {
            j.fail(Failure::StateDirUnwritable(e.to_string()));
        }
        return p.finish_all(r, jobs, t0);
    }

    // 1. The marks: the atomic test-and-set, in the server. The token names us and our limit.
    let tok = r.mark_owner().token(&nonce());
    let _live = r.hold_token(&tok);
    let mark_at = now_ms();
    let items: Vec<(u32, bool, bool)> = jobs
        .iter()
        .map(|j| {
            let d = &j.req.decision;
            (
                d.tmux_id,
                !j.req.force && !d.override_turn,
                !j.req.force && !d.override_viewers,
            )
        })
        .collect();
    p.marked(&tok, items.iter().map(|i| i.0).collect());
    if let Err(e) = r.tmux.mark_reaping(&items, mark_at, &tok).await {
        r.metrics.tmux_errors.inc();
        // Some marks may have been set before it failed: take back ours (best effort).
        let all: Vec<u32> = jobs.iter().map(Job::n).collect();
        if let Err(e) = r.tmux.clear_reaping_many(&all, &tok).await {
            tracing::warn!(error = %e, "failed to clear reap marks after a failed marking");
        }
        for j in &mut jobs {
            j.fail(Failure::Mark(e.to_string()));
        }
        return p.finish_all(r, jobs, t0);
    }
    tracing::debug!(
        phase = "mark",
        ms = t0.elapsed().as_millis() as u64,
        "teardown"
    );
    // 2. The re-check, on one listing and one read of the activity files taken after the marks.
    let mut unmark: Vec<u32> = Vec::new();
    let listing = recheck(r, &mut jobs, &tok, &mut unmark).await;

    tracing::debug!(
        phase = "re-check",
        ms = t0.elapsed().as_millis() as u64,
        marked = jobs.iter().filter(|j| j.fresh.is_some()).count(),
        "teardown"
    );
    // 3. The victims: one scan of the process table for the whole batch.
    let listing = listing.unwrap_or_default();
    collect_victims(&mut jobs, &listing, &mut unmark);

    tracing::debug!(
        phase = "victims",
        ms = t0.elapsed().as_millis() as u64,
        "teardown"
    );
    // 4. The journals, before the hook: from here on a reaper that dies or stalls leaves a
    // journal, and its live mark keeps everyone else off the session.
    let dirs = r.state.reap_dirs();
    for (i, j) in jobs.iter_mut().enumerate().filter(|(_, j)| !j.over) {
        let written = match &dirs {
            Ok(d) => write_journal(r, d, j, &tok, listing.server_pid),
            Err(e) => Err(e.to_string()),
        };
        match written {
            Ok(()) => {
                if let Some(jn) = &j.journal {
                    p.journal_written(i, jn.clone());
                }
            }
            Err(e) => {
                unmark.push(j.n());
                j.fail(Failure::NotAttempted(e));
            }
        }
    }
    // The studio's hook may veto a reap before anything is touched.
    if let Some(hook) = &r.cfg.hook {
        before_hooks(r, hook, &mut jobs, &mut unmark).await;
    }
    // 5. The fence: every mark of the batch must still be exactly ours, with time left under it.
    // A reaper held up anywhere above (a stalled hook, a paused container) finds out here, and
    // signals nothing. Only then the tombstones (each a chat's cid, and for a reaper that finds
    // this journal after we died, the sign that this reap went past its fence): a reap stopped
    // at the fence writes none, so it never overwrites the tombstone of a reap that holds the
    // chat. Then at once the first signal.
    fence(r, &mut jobs, mark_at, &tok, &mut unmark).await;
    for j in jobs.iter_mut().filter(|j| !j.over) {
        let written = match &dirs {
            Ok(d) => write_tombstone(r, d, j, &tok),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = written {
            unmark.push(j.n());
            j.fail(Failure::NotAttempted(e));
        }
    }
    release(r, &mut jobs, &unmark, p);
    test_panic("journals");
    if !unmark.is_empty() {
        if let Err(e) = r.tmux.clear_reaping_many(&unmark, &tok).await {
            tracing::warn!(error = %e, "failed to clear reap marks");
        }
    }

    // The lease once more, right before the first signal: the tombstones' writes and the clears
    // above took time, and a reader that cannot see us (another pid namespace) clears our mark
    // once the lease runs out.
    let late = lease_ran_out(r, &mut jobs, mark_at);
    if !late.is_empty() {
        release(r, &mut jobs, &late, p);
        if let Err(e) = r.tmux.clear_reaping_many(&late, &tok).await {
            tracing::warn!(error = %e, "failed to clear reap marks");
        }
    }

    tracing::debug!(
        phase = "journals",
        ms = t0.elapsed().as_millis() as u64,
        "teardown"
    );
    // 6-9. Stop every tree of the batch together, one grace for all; each chat is finished as
    // soon as its tree is gone.
    stop_and_finish(r, &mut jobs, &tok, p, t0).await;
    tracing::debug!(
        phase = "stop",
        ms = t0.elapsed().as_millis() as u64,
        "teardown"
    );
    // The lines of the reaps that stopped before any signal (written here, not between the fence
    // and the first signal); every other line is written by now, and its journal removed.
    let lines = p.finish_all(r, jobs, t0);
    test_panic("audit");
    if let Some(hook) = &r.cfg.hook {
        after_hooks(r, hook, &lines).await;
    }
    tracing::debug!(
        phase = "audit",
        ms = t0.elapsed().as_millis() as u64,
        "teardown"
    );
    lines
}

/// Step 6: SIGTERM to every tree of the batch at once, then one grace for all, SIGKILL for what
/// is left ([`procs::stop_many`]). A chat is finished ([`finish_wave`]) as soon as none of its
/// victims lives: one whose processes die of the SIGTERM does not wait for another's grace.
/// The chats that end while the ones before them are being finished are finished together.
async fn stop_and_finish(
    r: &Reaper,
    jobs: &mut [Job],
    tok: &str,
    p: &mut Progress<'_>,
    t0: Instant,
) {
    let live: Vec<usize> = (0..jobs.len()).filter(|&i| !jobs[i].over).collect();
    if live.is_empty() {
        return;
    }
    // The victims move out of the jobs: the stop reads them while the finishing writes the jobs.
    let victims: Vec<Vec<procs::Victim>> = live
        .iter()
        .map(|&i| std::mem::take(&mut jobs[i].victims))
        .collect();
    let groups: Vec<&[procs::Victim]> = victims.iter().map(Vec::as_slice).collect();
    for &i in &live {
        p.signalled(i);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, procs::StopReport)>();
    let stopping = procs::stop_many(&groups, r.cfg.grace, move |g, rep| {
        // Only fails once the finishing is gone, which outlives the stop (unless it panicked).
        let _ = tx.send((live[g], rep.clone()));
    });
    let finishing = async {
        // Ends when the stop has told every group (and dropped the sender).
        while let Some(first) = rx.recv().await {
            let mut done = vec![first];
            while let Ok(more) = rx.try_recv() {
                done.push(more);
            }
            finish_wave(r, jobs, &done, tok, p, t0).await;
            test_panic("finished");
        }
    };
    let (_reports, ()) = tokio::join!(stopping, finishing);
}

/// Steps 7 to 9: finish the chats whose trees are gone (`done`: job and stop report), together: their
/// `kill-session`s, each only while the session carries our token, chained; the check that
/// nothing survived; then, per chat, its audit line, its journal removed (what `turn begin` and
/// `spawn` wait for) and its line delivered.
async fn finish_wave(
    r: &Reaper,
    jobs: &mut [Job],
    done: &[(usize, procs::StopReport)],
    tok: &str,
    p: &mut Progress<'_>,
    t0: Instant,
) {
    for (i, rep) in done {
        jobs[*i].line.term = rep.term;
        jobs[*i].line.kill = rep.kill;
    }
    // 7. A session usually goes with its pane's claude: asking for one that is gone is a no-op
    // (the command is checked in the server); only a large wave lists first, to ask for fewer.
    let mut targets: Vec<u32> = done.iter().map(|(i, _)| jobs[*i].n()).collect();
    if targets.len() > LIST_ABOVE {
        if let Ok(l) = r.tmux.list(&r.cfg.prefix).await {
            let present: HashSet<u32> = l.sessions.iter().map(|s| s.tmux_id).collect();
            targets.retain(|n| present.contains(n));
        }
    }
    if let Err(e) = r.tmux.kill_sessions(&targets, tok).await {
        r.metrics.tmux_errors.inc();
        for (i, _) in done {
            let j = &mut jobs[*i];
            if targets.contains(&j.n()) {
                j.failure = Some(Failure::KillSession(e.to_string()));
            }
        }
    }
    // 8. Nothing may survive. 9. The audit line, the journal, the line delivered.
    for (i, _) in done {
        let j = &mut jobs[*i];
        let end = verify(&mut j.line, &j.ids, j.failure.take());
        j.end = Some(end.clone());
        p.complete(r, *i, j.line.clone(), end, t0);
    }
    tracing::debug!(
        chats = done.len(),
        ms = t0.elapsed().as_millis() as u64,
        "teardown: chats finished as their trees went"
    );
}

/// Learn which sessions of the batch carry our mark (`token`), and re-check those on fresh data.
/// A session we do not hold is aborted; one we hold that no longer passes is aborted and queued
/// in `unmark`. Returns the fresh listing.
///
/// Long (about 90 lines) on purpose: the re-check's refusals in the order the fencing relies on
/// (server, presence, our mark, the name, then the fresh decision).
async fn recheck(
    r: &Reaper,
    jobs: &mut [Job],
    token: &str,
    unmark: &mut Vec<u32>,
) -> Option<Listing> {
    if jobs.iter().all(|j| j.over) {
        return None;
    }
    let fresh = match r.tmux.list(&r.cfg.prefix).await {
        Ok(l) if l.problems.is_empty() => Ok(l),
        Ok(l) => Err(l.problems.join("; ")),
        Err(e) => Err(e.to_string()),
    };
    let fresh = match fresh {
        Ok(l) => r.read_activity().await.map(|busy| (l, busy)),
        Err(e) => Err(e),
    };
    let (listing, busy) = match fresh {
        Ok(x) => x,
        Err(e) => {
            for j in jobs.iter_mut().filter(|j| !j.over) {
                unmark.push(j.n());
                j.abort(Abort::LivenessUnknown(e.clone()));
            }
            return None;
        }
    };
    let by_id: HashMap<u32, &Session> = listing.sessions.iter().map(|s| (s.tmux_id, s)).collect();
    for j in jobs.iter_mut().filter(|j| !j.over) {
        if j.req.server_pid.is_some() && j.req.server_pid != listing.server_pid {
            unmark.push(j.n());
            j.abort(Abort::ServerRestarted);
        }
    }
    let ignore_orphans = r.cfg.policy.orphan_viewers == policy::OrphanViewers::Ignore;
    for j in jobs.iter_mut().filter(|j| !j.over) {
        let old = &j.req.session;
        // Listed only under a name of ours: one renamed away may still carry our mark (the
        // clear is checked in the server, and is a no-op on a session that is gone).
        let Some(s) = by_id.get(&j.n()) else {
            unmark.push(j.n());
            j.abort(Abort::GoneOrRenamed);
            continue;
        };
        // The test-and-set left our mark only where all its conditions held. (A session we do
        // not hold is queued too: the clear is checked in the server, a no-op unless ours.)
        if !s.holds_mark_of(token) {
            unmark.push(j.n());
            j.abort(Abort::NotHeld);
            continue;
        }
        // Same `$N` and same name: a session renamed since it was listed (even to another name
        // of ours) is not the one this reap was decided for.
        if s.name != old.name {
            unmark.push(j.n());
            j.abort(Abort::Renamed);
            continue;
        }
        let mut s = (*s).clone();
        s.cmdline_cid = old.cmdline_cid.clone();
        s.mem_bytes = old.mem_bytes;
        if ignore_orphans {
            for c in &mut s.clients {
                c.orphaned = procs::orphaned(c.pid);
            }
        }
        let snap = Snapshot {
            busy_ids: busy.get(&s.id).cloned().into_iter().collect(),
            sessions: vec![s],
            ..Snapshot::default()
        };
        let Some(fresh) = policy::decide(&snap, now_ms(), &r.cfg.policy).pop() else {
            unmark.push(j.n());
            j.abort(Abort::NoFreshDecision);
            continue;
        };
        let d = &j.req.decision;
        if let Err(why) =
            policy::still_reapable(&fresh, d.idle_ms, j.req.reason, j.req.force, &r.cfg.policy)
        {
            unmark.push(j.n());
            j.abort(Abort::Changed(why));
            continue;
        }
        // The chat's cid as it is now (a studio may have set `@ccs_cid` since the sweep).
        if fresh.cid.is_some() {
            j.line.cid = fresh.cid.clone();
        }
        j.fresh = snap.sessions.into_iter().next();
    }
    Some(listing)
}

/// The victims of every session still to be reaped, from one scan of the process table, pinned.
fn collect_victims(jobs: &mut [Job], listing: &Listing, unmark: &mut Vec<u32>) {
    if jobs.iter().all(|j| j.over) {
        return;
    }
    let table = match procs::table() {
        Ok(t) => t,
        Err(e) => {
            for j in jobs.iter_mut().filter(|j| !j.over) {
                unmark.push(j.n());
                j.fail(Failure::ProcessTable(e.to_string()));
            }
            return;
        }
    };
    let live = jobs
        .iter()
        .filter(|j| !j.over)
        .filter_map(|j| j.fresh.as_ref());
    let members = procs::members_of(&table, live, listing);
    for j in jobs.iter_mut().filter(|j| !j.over) {
        let ids = members.get(&j.n()).map(Vec::as_slice).unwrap_or(&[]);
        j.victims = procs::pin(ids);
        // Every member, pinned or not: one that could not be pinned (/proc could not tell) and
        // still lives is a survivor, never a silent success.
        j.ids = ids.to_vec();
        let (rss, pss) = procs::memory(&j.ids);
        j.line.rss_bytes = rss;
        j.line.pss_bytes = pss;
        j.line.pids = j.ids.iter().map(|i| i.pid).collect();
        if let Some(s) = &j.fresh {
            j.line.ended = Some(ended(s, j.req.reason, &mut j.line));
        }
    }
}

/// How the session ended: `stopped` (we reaped it), or, for exited panes, `completed`/`failed`
/// with the status recorded in the line.
fn ended(s: &Session, reason: ReapReason, line: &mut AuditLine) -> Ended {
    if reason != ReapReason::Exited {
        return Ended::Stopped;
    }
    let p = s
        .panes
        .iter()
        .find(|p| p.dead_signal.is_some() || p.dead_status != Some(0))
        .or(s.panes.first());
    line.exit_status = p.and_then(|p| p.dead_status);
    line.exit_signal = p.and_then(|p| p.dead_signal);
    let clean = line.exit_signal.is_none() && line.exit_status == Some(0);
    if clean {
        Ended::Completed
    } else {
        Ended::Failed
    }
}

/// The journal goes down before the `before` hook runs: a reaper that dies or stalls from here
/// on leaves it, and its pids are what a later sweep finishes from (only once the tombstone
/// carries this reap's token: see [`write_tombstone`]).
fn write_journal(
    r: &Reaper,
    dirs: &ReapDirs,
    j: &mut Job,
    tok: &str,
    server_pid: Option<u32>,
) -> Result<(), String> {
    let d = &j.req.decision;
    let cwd = j.fresh.as_ref().and_then(|s| {
        s.panes.iter().find_map(|p| {
            std::fs::read_link(format!("/proc/{}/cwd", p.pid))
                .ok()
                .and_then(|p| p.to_str().map(str::to_string))
        })
    });
    let journal = Journal {
        id: d.id.clone(),
        session: d.name.clone(),
        tmux_id: d.tmux_id,
        cid: j.line.cid.clone(),
        reason: j.req.reason,
        idle_ms: d.idle_ms,
        cwd,
        started_at: j.line.at.clone(),
        owner: procs::myself(),
        victims: j.ids.clone(),
        server_pid,
        token: tok.to_string(),
        armed_by_tombstone: true,
        path: None,
    };
    r.state
        .write_journal_in(dirs, &journal)
        .map_err(|e| e.to_string())?;
    j.journal = Some(journal);
    Ok(())
}

/// The tombstone goes down after the fence, right before the first signal: the pane dies with
/// claude, so the session may vanish long before the teardown ends, and whoever sees it gone must
/// find the cid. It carries the reap's token: the sign that the reap went on past its fence.
fn write_tombstone(r: &Reaper, dirs: &ReapDirs, j: &mut Job, tok: &str) -> Result<(), String> {
    let Some(jn) = &j.journal else {
        return Err("no journal was written".into());
    };
    let tomb = Tombstone {
        id: jn.id.clone(),
        cid: j.line.cid.clone(),
        reaped_at: rfc3339(now_ms()),
        reason: j.req.reason,
        cwd: jn.cwd.clone(),
        session: Some(jn.session.clone()),
        socket: Some(r.socket_path()),
        token: Some(tok.to_string()),
    };
    r.state
        .write_tombstone_in(dirs, &tomb)
        .map_err(|e| e.to_string())?;
    Ok(())
}
