//! What a reap writes: how the session ended, its journal, its tombstone.

use super::ports::{ProcPort, TmuxPort};
use super::stage::{Facts, Reap, Stage};
use super::{now_ms, Batch, Failure};
use crate::adapters::proc_reads;
use crate::adapters::procs;
use crate::adapters::state::{Ended, Journal, ReapDirs, StateDir, StateError};
use crate::config::Config;
use crate::core::policy::TmuxId;
use crate::core::policy::{ReapReason, Session};
use crate::core::records::Tombstone;
use crate::engine::context::socket_path;

/// Why a reap's journal or tombstone was not written (the reap is then not attempted).
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    /// Writing it failed (the error names the file).
    #[error(transparent)]
    State(StateError),
    /// The state dir's reap directories could not be made (the error names them).
    #[error("{0}")]
    Dirs(String),
    #[error("no journal was written")]
    NoJournal,
}

impl WriteError {
    fn dirs(e: &StateError) -> WriteError {
        WriteError::Dirs(e.to_string())
    }
}

/// How the session ended, into its `facts`: `stopped` (we reaped it), or, for exited panes,
/// `completed`/`failed` with the exited pane's status.
pub(super) fn ended(s: &Session, reason: ReapReason, facts: &mut Facts) {
    if reason != ReapReason::Exited {
        facts.ended = Some(Ended::Stopped);
        return;
    }
    let p = s
        .panes
        .iter()
        .find(|p| p.dead_signal.is_some() || p.dead_status != Some(0))
        .or(s.panes.first());
    facts.exit_status = p.and_then(|p| p.dead_status);
    facts.exit_signal = p.and_then(|p| p.dead_signal);
    let clean = facts.exit_signal.is_none() && facts.exit_status == Some(0);
    facts.ended = Some(if clean {
        Ended::Completed
    } else {
        Ended::Failed
    });
}

/// The journals go down before the `before` hook runs: a reaper that dies or stalls from here
/// on leaves them, and their pids are what a later sweep finishes from (only once the tombstone
/// carries this reap's token: see [`write_tombstones`]). One name per chat (so that a dead
/// reaper's batch is finished chat by chat, and `turn begin` waits on its chat's alone), all of
/// the batch's written at once and made durable together (one `syncfs`, or an fsync each where
/// that cannot be trusted), the directory fsynced once; above 8, as batch files linked under
/// each chat's name (`atomic::write_many`, docs/files.md "Batch files"). A reap
/// whose journal cannot be written is not attempted.
pub(super) async fn write_journals<T: TmuxPort, P: ProcPort>(
    b: &Batch<'_, T, P>,
    dirs: &Result<ReapDirs, StateError>,
    jobs: &mut [Reap],
    tok: &str,
    server_pid: Option<u32>,
) {
    let (tmux, state) = (b.tmux, &b.h.state);
    let live: Vec<usize> = (0..jobs.len())
        .filter(|&i| matches!(jobs[i].stage, Stage::Checked { .. }))
        .collect();
    // The command lines the way back restarts (one tmux call for the batch).
    let going: Vec<TmuxId> = live.iter().map(|&i| jobs[i].n()).collect();
    // And their own environments (a studio's `CCS_CFG`): the same call.
    let kept = tmux.kept(&going).await;
    let journals: Vec<Journal> = live
        .iter()
        .map(|&i| {
            let k = kept.get(&jobs[i].n());
            journal(&jobs[i], tok, server_pid, k)
        })
        .collect();
    let written: Vec<Result<(), WriteError>> = match dirs {
        Ok(d) => {
            let refs: Vec<&Journal> = journals.iter().collect();
            state
                .write_journals_in(d, &refs)
                .into_iter()
                .map(|w| w.map_err(WriteError::State))
                .collect()
        }
        Err(e) => live.iter().map(|_| Err(WriteError::dirs(e))).collect(),
    };
    for ((i, jn), w) in live.into_iter().zip(journals).zip(written) {
        let j = &mut jobs[i];
        match w {
            Ok(()) => journaled(j, jn),
            Err(e) => j.fail(Failure::NotAttempted(e.to_string())),
        }
    }
}

/// From `Checked` to `Journaled`, holding `journal`.
fn journaled(j: &mut Reap, journal: Journal) {
    j.stage = match std::mem::replace(&mut j.stage, Stage::Asked) {
        Stage::Checked {
            token,
            fresh,
            ids,
            victims,
            facts,
        } => Stage::Journaled {
            token,
            fresh,
            ids,
            victims,
            journal: Box::new(journal),
            facts,
        },
        other => other,
    };
}

/// One reap's journal.
fn journal(
    j: &Reap,
    tok: &str,
    server_pid: Option<u32>,
    kept: Option<&crate::adapters::tmux::Kept>,
) -> Journal {
    let argv = kept.and_then(|k| k.argv.as_ref());
    let d = &j.request.decision;
    let cwd = j
        .stage
        .fresh()
        .and_then(|s| s.panes.iter().find_map(|p| proc_reads::cwd(p.pid)));
    let pane_pids: Vec<u32> = j
        .stage
        .fresh()
        .map(|s| s.panes.iter().map(|p| p.pid).collect())
        .unwrap_or_default();
    let argv = crate::agents::kept_argv(
        argv,
        &pane_pids,
        |pid| procs::cmdline(pid as i32),
        procs::children,
    );
    Journal {
        id: d.id.clone(),
        session: d.name.clone(),
        tmux_id: d.tmux_id,
        cid: j
            .stage
            .facts()
            .and_then(|f| f.cid.clone())
            .or_else(|| j.line.cid.clone()),
        reason: j.request.reason,
        idle_ms: d.idle_ms,
        cwd,
        started_at: j.line.at.clone(),
        owner: procs::myself(),
        victims: j.stage.ids().to_vec(),
        server_pid,
        token: tok.to_string(),
        armed_by_tombstone: true,
        argv,
        env: kept.map(|k| &k.env).filter(|e| !e.is_empty()).cloned(),
        options: kept.map(|k| &k.options).filter(|o| !o.is_empty()).cloned(),
        path: None,
    }
}

/// The tombstones go down after the fence, right before the first signal: the pane dies with
/// claude, so the session may vanish long before the teardown ends, and whoever sees it gone must
/// find the cid. Each carries the reap's token: the sign that the reap went on past its fence.
/// One name per chat (what `spawn` reads by id), the batch's written together and durable
/// before this returns; a reap whose tombstone cannot be written is not attempted.
pub(super) fn write_tombstones(
    cfg: &Config,
    state: &StateDir,
    dirs: &Result<ReapDirs, StateError>,
    jobs: &mut [Reap],
) {
    let mut live = Vec::new();
    let mut tombs = Vec::new();
    for (i, j) in jobs.iter_mut().enumerate().filter(|(_, j)| j.stage.is_on()) {
        match tombstone(cfg, state, j) {
            Ok(t) => {
                live.push(i);
                tombs.push(t);
            }
            Err(e) => j.fail(Failure::NotAttempted(e.to_string())),
        }
    }
    let written: Vec<Result<(), WriteError>> = match dirs {
        Ok(d) => state
            .write_tombstones_in(d, &tombs)
            .into_iter()
            .map(|w| w.map_err(WriteError::State))
            .collect(),
        Err(e) => live.iter().map(|_| Err(WriteError::dirs(e))).collect(),
    };
    for ((i, w), t) in live.into_iter().zip(written).zip(tombs) {
        let j = &mut jobs[i];
        match w {
            Ok(()) => super::fence::fenced(j, t),
            Err(e) => j.fail(Failure::NotAttempted(e.to_string())),
        }
    }
}

/// One reap's tombstone, from its journal.
fn tombstone(cfg: &Config, state: &StateDir, j: &Reap) -> Result<Tombstone, WriteError> {
    let Stage::Journaled { journal: jn, .. } = &j.stage else {
        return Err(WriteError::NoJournal);
    };
    // The cleanup of exited panes has no living process to read a cwd or command line from:
    // it keeps those of the tombstone it replaces.
    let before = (j.request.reason == ReapReason::Exited
        && (jn.cwd.is_none() || jn.argv.is_none()))
    .then(|| state.read_tombstone(&jn.id).ok().flatten())
    .flatten();
    let mut tomb = jn.tombstone(&socket_path(cfg), now_ms());
    // The agent its command line runs, else its pane's start command's, else the one before.
    let start_command = j.stage.fresh().and_then(|s| s.panes.first());
    tomb.agent = crate::agents::agent_name(tomb.argv.as_deref())
        .or_else(|| {
            start_command
                .and_then(|p| crate::agents::of_start_command(&p.start_command))
                .map(|a| a.name.to_string())
        })
        .or_else(|| before.as_ref().and_then(|b| b.agent.clone()));
    if let Some(b) = before {
        tomb.cwd = tomb.cwd.or(b.cwd);
        tomb.argv = tomb.argv.or(b.argv);
        tomb.env = tomb.env.or(b.env);
        tomb.options = tomb.options.or(b.options);
    }
    Ok(tomb)
}
