//! What a reap writes: how the session ended, its journal, its tombstone.

use super::*;

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

/// The journal goes down before the `before` hook runs: a reaper that dies or stalls from here
/// on leaves it, and its pids are what a later sweep finishes from (only once the tombstone
/// carries this reap's token: see [`write_tombstone`]).
pub(super) fn write_journal(
    r: &Reaper,
    dirs: &ReapDirs,
    j: &mut Job,
    tok: &str,
    server_pid: Option<u32>,
    argv: Option<&Vec<String>>,
) -> Result<(), String> {
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
        argv,
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
pub(super) fn write_tombstone(r: &Reaper, dirs: &ReapDirs, j: &mut Job) -> Result<(), String> {
    let Some(jn) = &j.journal else {
        return Err("no journal was written".into());
    };
    // The cleanup of exited panes has no living process to read a cwd or command line from:
    // it keeps those of the tombstone it replaces.
    let before = (j.req.reason == ReapReason::Exited && (jn.cwd.is_none() || jn.argv.is_none()))
        .then(|| r.state.read_tombstone(&jn.id).ok().flatten())
        .flatten();
    let mut tomb = jn.tombstone(&r.socket_path(), now_ms());
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
    }
    r.state
        .write_tombstone_in(dirs, &tomb)
        .map_err(|e| e.to_string())?;
    Ok(())
}
