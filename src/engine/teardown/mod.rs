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

use crate::adapters::clock::now_ms;
use crate::adapters::metrics::Metrics;
use crate::adapters::procs;
use crate::adapters::state::{AuditLine, Ended, Journal, ReapDirs, StateDir};
use crate::adapters::tmux::{Listing, Tmux};
use crate::config::Config;
use crate::core::policy::{self, Decision, ReapReason, Session};
use crate::core::protocol::Phase;
use crate::engine::context::Reaper;

mod finish;
mod late;
mod pane;
mod reap_hooks;
mod recover;
mod unwind;

pub(crate) use crate::core::reap_end::audit_line;
pub use crate::core::reap_end::{Abort, Failure, Finished, ReapEnd};
pub(crate) use finish::{finish, logged, verify};
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

/// The mark of a batch: its value (Unix ms, for people and the guarded tmux calls), its token,
/// and when it was set by this process's own monotonic clock (read before the test-and-set), on
/// which alone its lease is measured.
#[derive(Clone, Copy)]
struct Mark<'a> {
    at: i64,
    tok: &'a str,
    boot_ms: i64,
}

impl Mark<'_> {
    fn elapsed(&self) -> i64 {
        crate::adapters::clock::boot_ms().saturating_sub(self.boot_ms)
    }
}

/// The fence ([`policy::fence`]): one guarded tmux call tells which marks of the batch are still
/// exactly ours on sessions still called what the reap was decided for (and which chats no viewer has attached to since the mark, where the mark asked
/// for none); a reap whose mark changed, went, or ran out of time, or whose chat is now watched,
/// is aborted, nothing signalled.
async fn fence(
    cfg: &Config,
    tmux: &Tmux,
    metrics: &Metrics,
    jobs: &mut [Job],
    mark: Mark<'_>,
    unmark: &mut Vec<u32>,
) {
    let ns: Vec<(u32, &str, bool)> = jobs
        .iter()
        .filter(|j| !j.over)
        .map(|j| {
            let d = &j.req.decision;
            (j.n(), d.name.as_str(), !j.req.force && !d.override_viewers)
        })
        .collect();
    if ns.is_empty() {
        return;
    }
    let fence = match tmux
        .fence(&ns, mark.at, mark.tok, &pane::scopes(jobs))
        .await
    {
        Ok(f) => f,
        Err(e) => {
            metrics.tmux_errors.inc();
            for j in jobs.iter_mut().filter(|j| !j.over) {
                unmark.push(j.n());
                j.abort(Abort::FenceUnchecked(e.to_string()));
            }
            return;
        }
    };
    let (elapsed, lease) = (mark.elapsed(), cfg.lease());
    for j in jobs.iter_mut().filter(|j| !j.over) {
        if fence.taken_back.contains(&j.n()) {
            tracing::info!(session = %j.req.decision.name, tmux_id = %format!("${}", j.n()), "a prompt arrived before the fence: the chat was taken back, nothing signalled");
            unmark.push(j.n());
            j.abort(Abort::PromptArrived);
            continue;
        }
        let held = fence.held.contains(&j.n());
        if let Err(why) = lease.fence(held, elapsed) {
            tracing::warn!(session = %j.req.decision.name, tmux_id = %format!("${}", j.n()), why = why.as_str(), "fenced off: nothing signalled");
            unmark.push(j.n());
            j.abort(Abort::FencedOff(why));
        }
    }
}

/// The reaps still on whose agent's status file (read again, where the re-check read it) now says
/// a turn runs: aborted before the fence, nothing signalled. One small file a reap.
fn busy_by_agent_now(jobs: &mut [Job], unmark: &mut Vec<u32>) {
    for j in jobs.iter_mut().filter(|j| !j.over) {
        let Some(s) = j.fresh.as_ref() else {
            continue;
        };
        if s.agent_turn == policy::AgentTurn::NotRead {
            continue;
        }
        let now = crate::engine::agent_status::turn_of(s);
        if let Some(why) = policy::busy_by_agent(&now) {
            unmark.push(j.n());
            j.abort(Abort::Changed(policy::Changed {
                state: policy::State::Busy,
                why,
            }));
        }
    }
}

/// The reaps still on whose lease (the fence, the mark as held) has too little left to finish
/// under: aborted, nothing signalled. Returns their sessions.
fn lease_ran_out(cfg: &Config, jobs: &mut [Job], mark: Mark<'_>) -> Vec<u32> {
    let (elapsed, lease) = (mark.elapsed(), cfg.lease());
    let mut late = Vec::new();
    for j in jobs.iter_mut().filter(|j| !j.over) {
        if let Err(why) = lease.fence(true, elapsed) {
            tracing::warn!(session = %j.req.decision.name, why = why.as_str(), "fenced off right before the first signal: nothing signalled");
            late.push(j.n());
            j.abort(Abort::FencedOff(why));
        }
    }
    late
}

/// Take back the journals of the reaps that stopped before their first signal (vetoed, fenced
/// off, or a tombstone that could not be written): the chat lives on.
fn release(state: &StateDir, jobs: &mut [Job], unmark: &[u32], p: &mut Progress) {
    for (i, j) in jobs.iter_mut().enumerate() {
        if !j.over || !unmark.contains(&j.n()) {
            continue;
        }
        let Some(jn) = j.journal.take() else {
            continue;
        };
        p.journal_removed(i);
        if let Err(e) = state.remove_journal(&jn) {
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
        Err(why) => {
            progress
                .unwind(&r.tmux, &r.state, &r.metrics, &why, t0)
                .instrument(span)
                .await
        }
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
        return p.finish_all(&r.state, &r.metrics, jobs, t0);
    }

    // 1. The marks: the atomic test-and-set, in the server. The token names us and our limit.
    let tok = r.ownership.mark_owner().token(&nonce());
    let _live = r.ownership.hold_token(&tok);
    // The lease runs from before the mark, on our own clock.
    let mark_boot = crate::adapters::clock::boot_ms();
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
    let scopes = pane::scopes(&jobs);
    if let Err(e) = r.tmux.mark_reaping(&items, mark_at, &tok, &scopes).await {
        r.metrics.tmux_errors.inc();
        // Some marks may have been set before it failed: take back ours (best effort).
        let all: Vec<u32> = jobs.iter().map(Job::n).collect();
        if let Err(e) = r.tmux.clear_reaping_many(&all, &tok).await {
            tracing::warn!(error = %e, "failed to clear reap marks after a failed marking");
        }
        for j in &mut jobs {
            j.fail(Failure::Mark(e.to_string()));
        }
        return p.finish_all(&r.state, &r.metrics, jobs, t0);
    }
    phase_done(Phase::Mark, t0);
    // 2. The re-check, on one listing and one read of the activity files taken after the marks.
    let mut unmark: Vec<u32> = Vec::new();
    let listing = recheck(
        &r.cfg,
        &r.tmux,
        &r.watching,
        &r.ownership,
        &mut jobs,
        &tok,
        &mut unmark,
    )
    .await;
    pane::same_shape(&mut jobs, &mut unmark);

    tracing::debug!(
        phase = Phase::Recheck.name(),
        ms = t0.elapsed().as_millis() as u64,
        marked = jobs.iter().filter(|j| j.fresh.is_some()).count(),
        "teardown"
    );
    // 3. The victims: one scan of the process table for the whole batch.
    let listing = listing.unwrap_or_default();
    collect_victims(&r.ownership, &mut jobs, &listing, &mut unmark);
    let world = procs::World::of(&listing);
    let memory = MemoryRead::start(&jobs);

    phase_done(Phase::Victims, t0);
    // 4. The journals, before the hook: from here on a reaper that dies or stalls leaves a
    // journal, and its live mark keeps everyone else off the session.
    let dirs = r.state.reap_dirs();
    write_journals(
        &r.tmux,
        &r.state,
        &dirs,
        &mut jobs,
        &tok,
        listing.server_pid,
        p,
        &mut unmark,
    )
    .await;
    phase_done(Phase::Journal, t0);
    // The studio's hook may veto a reap before anything is touched.
    if let Some(hook) = &r.cfg.hook {
        before_hooks(&r.cfg, hook, &mut jobs, &mut unmark).await;
    }
    // The agents' own status files once more, right before the fence: a turn begun during the
    // hook (or since the re-check) by a chat no prompt hook wires is seen here.
    busy_by_agent_now(&mut jobs, &mut unmark);
    phase_done(Phase::Hook, t0);
    // 5. The fence: every mark of the batch must still be exactly ours, with time left under it.
    // A reaper held up anywhere above (a stalled hook, a paused container) finds out here, and
    // signals nothing. Only then the tombstones (each a chat's cid, and for a reaper that finds
    // this journal after we died, the sign that this reap went past its fence): a reap stopped
    // at the fence writes none, so it never overwrites the tombstone of a reap that holds the
    // chat. Then at once the first signal.
    let mark = Mark {
        at: mark_at,
        tok: &tok,
        boot_ms: mark_boot,
    };
    fence(&r.cfg, &r.tmux, &r.metrics, &mut jobs, mark, &mut unmark).await;
    phase_done(Phase::Fence, t0);
    write_tombstones(&r.cfg, &r.state, &dirs, &mut jobs, &mut unmark);
    release(&r.state, &mut jobs, &unmark, p);
    test_panic("journals");
    if !unmark.is_empty() {
        if let Err(e) = r.tmux.clear_reaping_many(&unmark, &tok).await {
            tracing::warn!(error = %e, "failed to clear reap marks");
        }
    }

    memory.into(&mut jobs).await;
    // The lease once more, right before the first signal: the tombstones' writes and the clears
    // above took time, and a reader that cannot see us (another pid namespace) clears our mark
    // once the lease runs out.
    let late = lease_ran_out(&r.cfg, &mut jobs, mark);
    if !late.is_empty() {
        release(&r.state, &mut jobs, &late, p);
        if let Err(e) = r.tmux.clear_reaping_many(&late, &tok).await {
            tracing::warn!(error = %e, "failed to clear reap marks");
        }
    }

    phase_done(Phase::Tombstone, t0);
    // 6-9. Stop every tree of the batch together, one grace for all; each chat is finished as
    // soon as its tree is gone.
    stop_and_finish(r, &mut jobs, &tok, p, t0, &world).await;
    phase_done(Phase::Signal, t0);
    // The lines of the reaps that stopped before any signal (written here, not between the fence
    // and the first signal); every other line is written by now, and its journal removed.
    let lines = p.finish_all(&r.state, &r.metrics, jobs, t0);
    test_panic("audit");
    if let Some(hook) = &r.cfg.hook {
        after_hooks(&r.cfg, hook, &lines).await;
    }
    phase_done(Phase::Finish, t0);
    lines
}

/// The memory of every chat's victims (the audit line's `rss_bytes` and `pss_bytes`), read on
/// the blocking pool while the journals, the fence and the tombstones are written, and taken
/// before the first signal: a `smaps_rollup` walks its process's page tables, 13 ms for 1 GB.
struct MemoryRead {
    of: Vec<usize>,
    read: tokio::task::JoinHandle<Vec<(u64, Option<u64>)>>,
}

impl MemoryRead {
    fn start(jobs: &[Job]) -> Self {
        let of: Vec<usize> = (0..jobs.len()).filter(|&i| !jobs[i].over).collect();
        let groups: Vec<Vec<procs::Ident>> = of.iter().map(|&i| jobs[i].ids.clone()).collect();
        let read = tokio::task::spawn_blocking(move || procs::memory_many(&groups));
        MemoryRead { of, read }
    }

    /// Into the audit lines (left at 0 and unknown if the read failed).
    async fn into(self, jobs: &mut [Job]) {
        match self.read.await {
            Ok(mem) => {
                for (&i, (rss, pss)) in self.of.iter().zip(mem) {
                    jobs[i].line.rss_bytes = rss;
                    jobs[i].line.pss_bytes = pss;
                }
            }
            Err(e) => tracing::warn!(error = %e, "the victims' memory could not be read"),
        }
    }
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
    world: &procs::World,
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
            finish_wave(r, jobs, &done, tok, p, t0, world).await;
            test_panic("finished");
        }
    };
    let (_reports, ()) = tokio::join!(stopping, finishing);
}

/// Steps 7 to 9: finish the chats whose trees are gone (`done`: job and stop report), together: their
/// `kill-session`s, each only while the session carries our token, chained; the late look (what
/// the chats started after their victims were collected, ended: one scan of the process table
/// for the whole wave, [`late::end_late`]); the check that nothing survived; then, per chat, its
/// audit line, its journal removed (what `turn begin` and `spawn` wait for) and its line
/// delivered.
async fn finish_wave(
    r: &Reaper,
    jobs: &mut [Job],
    done: &[(usize, procs::StopReport)],
    tok: &str,
    p: &mut Progress<'_>,
    t0: Instant,
    world: &procs::World,
) {
    for (i, rep) in done {
        jobs[*i].line.term = rep.term;
        jobs[*i].line.kill = rep.kill;
    }
    // 7. A session usually goes with its pane's claude: asking for one that is gone is a no-op
    // (the command is checked in the server); only a large wave lists first, to ask for fewer.
    let mut targets: Vec<u32> = done.iter().map(|(i, _)| jobs[*i].n()).collect();
    if targets.len() > LIST_ABOVE {
        if let Ok(l) = r.tmux.list(&r.cfg.prefix, procs::exit_collected).await {
            let present: HashSet<u32> = l.sessions.iter().map(|s| s.tmux_id).collect();
            targets.retain(|n| present.contains(n));
        }
    }
    tracing::debug!(
        chats = done.len(),
        present = targets.len(),
        "teardown: kill-session for the sessions still there"
    );
    let mut left = None;
    let scopes = pane::scopes(jobs);
    match r.tmux.kill_sessions_left(&targets, tok, &scopes).await {
        Ok(n) => left = n,
        Err(e) => {
            r.metrics.tmux_errors.inc();
            for (i, _) in done {
                let j = &mut jobs[*i];
                if targets.contains(&j.n()) {
                    j.failure = Some(Failure::KillSession(e.to_string()));
                }
            }
        }
    }
    // 8. Nothing may survive: not even what was born after the victims' scan.
    late::end_late(jobs, done, world).await;
    // A server whose last sessions these were exits with them (tmux's `exit-empty`): the
    // socket is then `empty`, not an outage (read in the kills' own call).
    if !targets.is_empty() && left == Some(0) {
        finish::server_emptied(r, now_ms());
    }
    // 9. The audit lines (appended together), the journals, the lines delivered.
    let mut ended = Vec::with_capacity(done.len());
    for (i, _) in done {
        let j = &mut jobs[*i];
        let end = verify(&mut j.line, &j.ids, j.failure.take());
        j.end = Some(end.clone());
        ended.push((*i, j.line.clone(), end));
    }
    p.complete_many(&r.state, &r.metrics, ended, t0);
    tracing::debug!(
        chats = done.len(),
        ms = t0.elapsed().as_millis() as u64,
        "teardown: chats finished as their trees went"
    );
}

mod recheck;
use recheck::*;

mod write;
use write::*;
