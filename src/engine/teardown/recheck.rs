//! The re-check right before acting: which sessions of the batch carry our mark, re-checked on
//! fresh data, and their victims collected.

use super::*;
use crate::engine::ownership::Ownership;
use crate::engine::watching::Watching;

/// Learn which sessions of the batch carry our mark (`token`), and re-check those on fresh data.
/// A session we do not hold is aborted; one we hold that no longer passes is aborted and queued
/// in `unmark`. Returns the fresh listing.
///
/// Long (about 90 lines) on purpose: the re-check's refusals in the order the fencing relies on
/// (server, presence, our mark, the name, then the fresh decision).
pub(super) async fn recheck(
    cfg: &Config,
    tmux: &Tmux,
    watching: &Watching,
    ownership: &Ownership,
    jobs: &mut [Job],
    token: &str,
    unmark: &mut Vec<u32>,
) -> Option<Listing> {
    if jobs.iter().all(|j| j.over) {
        return None;
    }
    // The same look as a sweep's; any part missing is liveness unknown.
    let look = crate::engine::observe::look(cfg, tmux, watching).await;
    let fresh = match look.listing {
        Ok(l) if l.problems.is_empty() => look.busy.map(|busy| (l, busy)),
        Ok(l) => Err(l.problems.join("; ")),
        Err(e) => Err(e.to_string()),
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
    let ignore_orphans = cfg.policy.orphan_viewers == policy::OrphanViewers::Ignore;
    // The agents' status files are found by the pids tmux lists: read only where this reaper
    // sees the server's processes (else the victims' step refuses the reap, saying why).
    let sees = ownership
        .check_sight(listing.server_pid, listing.socket_path.as_deref())
        .is_ok();
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
        // The agent's own status file, read again: a turn it began since the sweep keeps it.
        if sees {
            s.agent_turn = crate::engine::agent_status::turn_of(&s);
        }
        let by_file = !cfg.activity_files.is_empty();
        let Some((fresh, s)) = policy::decide_session(s, &busy, by_file, now_ms(), &cfg.policy)
        else {
            unmark.push(j.n());
            j.abort(Abort::NoFreshDecision);
            continue;
        };
        let d = &j.req.decision;
        if let Err(why) =
            policy::still_reapable(&fresh, d.idle_ms, j.req.reason, j.req.force, &cfg.policy)
        {
            unmark.push(j.n());
            j.abort(Abort::Changed(why));
            continue;
        }
        // The chat's cid as it is now (a studio may have set `@ccs_cid` since the sweep).
        if fresh.cid.is_some() {
            j.line.cid = fresh.cid.clone();
        }
        j.fresh = Some(s);
    }
    Some(listing)
}

/// The victims of every session still to be reaped, from one scan of the process table, pinned.
/// (Their memory is read beside the journals: [`super::MemoryRead`].)
pub(super) fn collect_victims(
    ownership: &Ownership,
    jobs: &mut [Job],
    listing: &Listing,
    unmark: &mut Vec<u32>,
) {
    if jobs.iter().all(|j| j.over) {
        return;
    }
    // The pids tmux lists name its processes here only in its own pid namespace: proven once
    // for the batch, before anything is collected, let alone signalled.
    if let Err(why) = ownership.check_sight(listing.server_pid, listing.socket_path.as_deref()) {
        for j in jobs.iter_mut().filter(|j| !j.over) {
            unmark.push(j.n());
            j.fail(Failure::NotAttempted(format!(
                "this reaper cannot see the tmux server's processes: {why}"
            )));
        }
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
        j.line.pids = j.ids.iter().map(|i| i.pid).collect();
        if let Some(s) = &j.fresh {
            j.line.ended = Some(ended(s, j.req.reason, &mut j.line));
        }
    }
}
