//! Finishing what a reaper that died mid-teardown left: its journals, whose pids are re-checked
//! against the live system before any signal.

use crate::core::policy::TmuxId;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::{audit_line, finish, verify, Abort, Failure, ReapEnd};
use crate::adapters::clock::now_ms;
use crate::adapters::metrics::Metrics;
use crate::adapters::procs;
use crate::adapters::state::{AuditLine, Ended, Journal, StateDir};
use crate::adapters::tmux::{Listing, Tmux};
use crate::config::Config;
use crate::engine::context::{socket_path, Reaper};
use crate::engine::ownership::Ownership;

/// Finish the teardowns that a reaper left behind when it died (their journals remain and their
/// owner is gone). The session, if still there under the same name, is killed too. Called only
/// with a listing that was read (never an empty one standing for a tmux that failed).
///
/// The takeover of a dead reaper's mark and what follows it are one protocol whose order must
/// not change (see policy::fence and docs/teardown.md): [`recover_one`], step by step.
pub async fn recover(r: &Reaper, listing: &Listing, journals: Vec<Journal>) -> Vec<AuditLine> {
    let mut lines = Vec::new();
    if journals.is_empty() {
        return lines;
    }
    // A reaper that cannot see the server's processes as they are signals nothing: the journals
    // stay for a reaper that can.
    if listing.server_pid.is_some() {
        if let Err(why) = r
            .ownership
            .check_server_identity(listing.server_pid, listing.socket_path.as_deref())
        {
            tracing::warn!(why = %why, "reap journals left alone: this reaper cannot see the tmux server's processes");
            return lines;
        }
    }
    // Without the process table nothing can be told of the victims: leave the journals for the
    // next sweep rather than take every victim for gone.
    let table = match procs::table() {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "reap journals left for the next sweep");
            return lines;
        }
    };
    let rec = Recovery {
        cfg: &r.cfg,
        tmux: &r.tmux,
        state: &r.state,
        metrics: &r.metrics,
        ownership: &r.ownership,
        listing,
        table: &table,
    };
    for j in journals {
        if r.inflight.contains(j.tmux_id) {
            continue;
        }
        if let Some(line) = recover_one(&rec, &j).await {
            lines.push(line);
        }
    }
    lines
}

/// What finishing a dead reaper's journals uses: the handles, the listing it was decided on, the
/// process table read once.
struct Recovery<'a> {
    cfg: &'a Config,
    tmux: &'a Tmux,
    state: &'a StateDir,
    metrics: &'a Metrics,
    ownership: &'a Ownership,
    listing: &'a Listing,
    table: &'a [procs::Proc],
}

impl Recovery<'_> {
    /// The journal `j` is done with.
    fn remove(&self, j: &Journal) {
        if let Err(e) = self.state.remove_journal(j) {
            tracing::warn!(error = %e, "failed to remove the reap journal");
        }
    }
}

/// One dead reaper's journal `j`, finished: its audit line, if it ends with one.
async fn recover_one(rec: &Recovery<'_>, j: &Journal) -> Option<AuditLine> {
    let listing = rec.listing;
    // The session the journal names (its `$N`, under any name: one renamed since is the same
    // session), still there on the same server: it is the dead reaper's only while it still
    // carries its mark. A mark cleared since (the chat was used again) means the chat is no
    // longer its to take: drop the journal, signal nothing.
    let still = listing.server_pid.is_some()
        && j.server_pid == listing.server_pid
        && (listing.sessions.iter().any(|s| s.tmux_id == j.tmux_id)
            || listing.all_panes.iter().any(|&(n, _)| n == j.tmux_id));
    let held = listing
        .sessions
        .iter()
        .any(|s| s.tmux_id == j.tmux_id && s.holds_mark_of(&j.token));
    if still && !held {
        tracing::warn!(session = %j.session, "a reap journal whose session no longer carries its mark: dropped, nothing signalled");
        rec.remove(j);
        return None;
    }
    let t0 = Instant::now();
    // A journal written before the `before` hook whose tombstone does not carry its token:
    // the reaper died before its hook and its fence let it go on, so nothing was
    // signalled. Release the chat: its mark goes, the journal goes, nothing is signalled.
    if j.armed_by_tombstone && !tombstone_of(rec.state, j) {
        return released(rec, j, still, t0).await;
    }
    // The session still carries the dead reaper's mark: take it over (only while it is
    // still exactly that mark), so that no other reader clears it while we finish; what we
    // do not then hold is not ours to signal.
    let mine = rec.ownership.mark_owner().token(&super::nonce());
    let _live = rec.ownership.hold_token(&mine);
    let token = if still && held {
        take_over(rec, j, &mine).await?
    } else {
        j.token.clone()
    };
    finish_journal(rec, j, &token, t0).await
}

/// A reaper stopped before its first signal: its mark released (when its session is `still`
/// there), its journal removed, nothing signalled; its `aborted` line. `None` when the mark
/// could not be cleared: the journal stays.
async fn released(rec: &Recovery<'_>, j: &Journal, still: bool, t0: Instant) -> Option<AuditLine> {
    tracing::warn!(session = %j.session, "a reaper stopped before its first signal: its mark is released, nothing signalled");
    if still {
        if let Err(e) = rec.tmux.clear_reaping_many(&[j.tmux_id], &j.token).await {
            tracing::warn!(error = %e, session = %j.session, "failed to clear the mark of a released reap: the journal stays");
            return None;
        }
    }
    let line = AuditLine::of_journal(j, now_ms());
    let line = audit_line(line, &ReapEnd::Aborted(Abort::Released));
    let line = finish(rec.state, rec.metrics, line, t0);
    rec.remove(j);
    Some(line)
}

/// Take over the dead reaper's mark on the journal's session, only while it is still exactly
/// that mark: the token to kill the session with (`mine`), or `None` when it changed (the
/// journal dropped, nothing signalled) or the call failed (the journal stays).
async fn take_over(rec: &Recovery<'_>, j: &Journal, mine: &str) -> Option<String> {
    let mark = rec
        .listing
        .sessions
        .iter()
        .find(|s| s.tmux_id == j.tmux_id)
        .map(|s| s.reaping.clone())
        .unwrap_or_default();
    match rec
        .tmux
        .take_over(j.tmux_id, mark.trim(), &j.token, now_ms(), mine)
        .await
    {
        Ok(true) => Some(mine.to_string()),
        Ok(false) => {
            tracing::warn!(session = %j.session, "the mark of a dead reaper's teardown changed before it could be taken over: dropped, nothing signalled");
            rec.remove(j);
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, session = %j.session, "failed to take over a dead reaper's mark: the journal stays");
            None
        }
    }
}

/// The dead reaper's teardown, finished under `token`: its victims re-checked and stopped, its
/// tombstone written again if missing, its session killed if it is the same one, its line.
/// `None` when the tombstone could not be written: the journal stays.
async fn finish_journal(
    rec: &Recovery<'_>,
    j: &Journal,
    token: &str,
    t0: Instant,
) -> Option<AuditLine> {
    let listing = rec.listing;
    tracing::warn!(session = %j.session, tmux_id = %j.tmux_id, "finishing a teardown left by a reaper that stopped mid-way");
    let same_server = j.server_pid.is_some() && listing.server_pid == j.server_pid;
    let pinned = journal_victims(rec.cfg, rec.table, j, listing, same_server);
    let victims = procs::pin(&pinned);
    let mut line = AuditLine::of_journal(j, now_ms());
    line.ended = Some(Ended::Stopped);
    line.pids = pinned.iter().map(|v| v.pid).collect();
    // The tombstone was written before the first signal; write it again only if it is
    // missing and no chat of that name has come back since.
    let back = listing
        .sessions
        .iter()
        .any(|s| s.name == j.session && (!same_server || s.tmux_id != j.tmux_id));
    if !back && rec.state.read_tombstone(&j.id).ok().flatten().is_none() {
        let mut tomb = j.tombstone(&socket_path(rec.cfg), now_ms());
        tomb.agent = crate::agents::agent_name(j.argv.as_deref());
        if let Err(e) = rec.state.write_tombstone(&tomb) {
            tracing::error!(error = %e, session = %j.session, "failed to write the tombstone: the journal stays");
            return None;
        }
    }
    let rep = procs::stop(&victims, rec.cfg.grace).await;
    line.term = rep.term;
    line.kill = rep.kill;
    // The session is killed only if it is the same one: same server, and it still carries
    // the dead reaper's token (checked in the server).
    let mut failure = None;
    if same_server {
        if let Err(e) = rec.tmux.kill_sessions(&[j.tmux_id], token).await {
            failure = Some(Failure::KillSession(e.to_string()));
        }
    }
    let end = verify(&mut line, &pinned, failure, procs::alive);
    let mut line = audit_line(line, &end);
    // A reap that went through says whose it was.
    line.error
        .get_or_insert_with(|| "completed after the reaper that began it stopped".into());
    let line = finish(rec.state, rec.metrics, line, t0);
    rec.remove(j);
    Some(line)
}

/// Whether the tombstone of the journal's chat carries the journal's token: the reap got past
/// its `before` hook and its fence, and may have signalled.
fn tombstone_of(state: &StateDir, j: &Journal) -> bool {
    matches!(state.read_tombstone(&j.id), Ok(Some(t)) if t.token.as_deref() == Some(j.token.as_str()))
}

/// A dead reaper's journal lists pids; none is signalled on its word alone (the file may have
/// been planted). Each is re-checked against the live system: see [`procs::journal_victims`].
/// The TMUX marker is looked for under the socket path the server reports now, and the ones we
/// would compute.
fn journal_victims(
    cfg: &Config,
    table: &[procs::Proc],
    j: &Journal,
    listing: &Listing,
    same_server: bool,
) -> Vec<procs::Ident> {
    let Some(server) = j.server_pid else {
        tracing::warn!(session = %j.session, "the journal names no tmux server: no process is signalled");
        return Vec::new();
    };
    let prot = procs::protected(table, listing.server_pid);
    let mut paths: Vec<String> = listing.socket_path.iter().cloned().collect();
    paths.push(cfg.socket.path().to_string_lossy().into_owned());
    paths.push(socket_path(cfg));
    let needles: Vec<Vec<u8>> = paths
        .iter()
        .map(|p| format!("TMUX={}", procs::tmux_env_value(p, server, j.tmux_id)).into_bytes())
        .collect();
    // Processes of live panes of every other session (of the journal's own, if it is still there
    // on the same server, its panes are fair game).
    let mut by: HashMap<TmuxId, Vec<u32>> = HashMap::new();
    for &(n, pid) in &listing.all_panes {
        if !(same_server && n == j.tmux_id) {
            by.entry(n).or_default().push(pid);
        }
    }
    let others: Vec<(TmuxId, Vec<u32>)> = by.into_iter().collect();
    let uid = rustix::process::getuid().as_raw();
    let scan = procs::Scan {
        table,
        tmux_env: None,
        uid,
        protected: &prot,
    };
    let exclude: HashSet<i32> = procs::members(scan, &others, &[])
        .into_values()
        .flatten()
        .map(|i| i.pid)
        .collect();
    let (kept, refused) = procs::journal_victims(scan, &j.victims, &needles, &exclude);
    for (id, why) in refused.iter().filter(|(_, w)| *w != "gone") {
        tracing::warn!(session = %j.session, pid = id.pid, why, "a pid of the journal is not signalled");
    }
    kept
}
