//! What a reap writes: how the session ended, its journal, its tombstone.

use super::*;
use crate::engine::context::socket_path;

/// How the session ended: `stopped` (we reaped it), or, for exited panes, `completed`/`failed`
/// with the status recorded in the line.
pub(super) fn ended(s: &Session, reason: ReapReason, line: &mut AuditLine) -> Ended {
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

/// The journals go down before the `before` hook runs: a reaper that dies or stalls from here
/// on leaves them, and their pids are what a later sweep finishes from (only once the tombstone
/// carries this reap's token: see [`write_tombstones`]). One name per chat (so that a dead
/// reaper's batch is finished chat by chat, and `turn begin` waits on its chat's alone), all of
/// the batch's written at once and made durable together (one `syncfs`, or an fsync each where
/// that cannot be trusted), the directory fsynced once; above 8, as batch files linked under
/// each chat's name (`atomic::write_many`, docs/files.md "Batch files"). A reap
/// whose journal cannot be written is not attempted.
#[allow(clippy::too_many_arguments)]
pub(super) async fn write_journals(
    tmux: &Tmux,
    state: &StateDir,
    dirs: &Result<ReapDirs, crate::adapters::state::StateError>,
    jobs: &mut [Job],
    tok: &str,
    server_pid: Option<u32>,
    p: &mut Progress<'_>,
    unmark: &mut Vec<u32>,
) {
    let live: Vec<usize> = (0..jobs.len()).filter(|&i| !jobs[i].over).collect();
    // The command lines the way back restarts (one tmux call for the batch).
    let going: Vec<u32> = live.iter().map(|&i| jobs[i].n()).collect();
    // And their own environments (a studio's `CCS_CFG`): the same call.
    let kept = tmux.kept(&going).await;
    let journals: Vec<Journal> = live
        .iter()
        .map(|&i| {
            let k = kept.get(&jobs[i].n());
            journal(&jobs[i], tok, server_pid, k)
        })
        .collect();
    let written: Vec<Result<(), String>> = match dirs {
        Ok(d) => {
            let refs: Vec<&Journal> = journals.iter().collect();
            state
                .write_journals_in(d, &refs)
                .into_iter()
                .map(|w| w.map_err(|e| e.to_string()))
                .collect()
        }
        Err(e) => live.iter().map(|_| Err(e.to_string())).collect(),
    };
    for ((i, jn), w) in live.into_iter().zip(journals).zip(written) {
        let j = &mut jobs[i];
        match w {
            Ok(()) => {
                p.journal_written(i, jn.clone());
                j.journal = Some(jn);
            }
            Err(e) => {
                unmark.push(j.n());
                j.fail(Failure::NotAttempted(e));
            }
        }
    }
}

/// One reap's journal.
fn journal(
    j: &Job,
    tok: &str,
    server_pid: Option<u32>,
    kept: Option<&crate::adapters::tmux::Kept>,
) -> Journal {
    let argv = kept.and_then(|k| k.argv.as_ref());
    let d = &j.req.decision;
    let cwd = j.fresh.as_ref().and_then(|s| {
        s.panes.iter().find_map(|p| {
            std::fs::read_link(format!("/proc/{}/cwd", p.pid))
                .ok()
                .and_then(|p| p.to_str().map(str::to_string))
        })
    });
    let pane_pids: Vec<u32> = j
        .fresh
        .as_ref()
        .map(|s| s.panes.iter().map(|p| p.pid).collect())
        .unwrap_or_default();
    let argv = crate::engine::wayback::kept_argv(argv, &pane_pids);
    Journal {
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
    dirs: &Result<ReapDirs, crate::adapters::state::StateError>,
    jobs: &mut [Job],
    unmark: &mut Vec<u32>,
) {
    let mut live = Vec::new();
    let mut tombs = Vec::new();
    for (i, j) in jobs.iter_mut().enumerate().filter(|(_, j)| !j.over) {
        match tombstone(cfg, state, j) {
            Ok(t) => {
                live.push(i);
                tombs.push(t);
            }
            Err(e) => {
                unmark.push(j.n());
                j.fail(Failure::NotAttempted(e));
            }
        }
    }
    let written: Vec<Result<(), String>> = match dirs {
        Ok(d) => state
            .write_tombstones_in(d, &tombs)
            .into_iter()
            .map(|w| w.map_err(|e| e.to_string()))
            .collect(),
        Err(e) => live.iter().map(|_| Err(e.to_string())).collect(),
    };
    for (i, w) in live.into_iter().zip(written) {
        if let Err(e) = w {
            let j = &mut jobs[i];
            unmark.push(j.n());
            j.fail(Failure::NotAttempted(e));
        }
    }
}

/// One reap's tombstone, from its journal.
fn tombstone(
    cfg: &Config,
    state: &StateDir,
    j: &Job,
) -> Result<crate::core::records::Tombstone, String> {
    let Some(jn) = &j.journal else {
        return Err("no journal was written".into());
    };
    // The cleanup of exited panes has no living process to read a cwd or command line from:
    // it keeps those of the tombstone it replaces.
    let before = (j.req.reason == ReapReason::Exited && (jn.cwd.is_none() || jn.argv.is_none()))
        .then(|| state.read_tombstone(&jn.id).ok().flatten())
        .flatten();
    let mut tomb = jn.tombstone(&socket_path(cfg), now_ms());
    // The agent its command line runs, else its pane's start command's, else the one before.
    let start_command = j.fresh.as_ref().and_then(|s| s.panes.first());
    tomb.agent = crate::engine::wayback::agent_name(tomb.argv.as_deref())
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
