//! The re-check right before acting: which sessions of the batch carry our mark, re-checked on
//! fresh data, and their victims collected.

use crate::core::policy::TmuxId;
use std::collections::{HashMap, HashSet};

use super::ports::{ProcPort, TmuxPort};
use super::stage::{Facts, Reap, Stage};
use super::write::ended;
use super::{now_ms, Abort, Batch, Failure};
use crate::adapters::procs;
use crate::adapters::tmux::Listing;
use crate::core::policy::{self, Session};
use crate::engine::watching::ActivityError;

/// Learn which sessions of the batch carry our mark (`token`), and re-check those on fresh data.
/// A reap that no longer passes is aborted (its mark given back by the release: the clear is
/// checked in the server, a no-op on a mark not ours); one that passes is `Checked`
/// ([`check_one`]). Returns the fresh listing.
pub(super) async fn recheck<T: TmuxPort, P: ProcPort>(
    b: &Batch<'_, T, P>,
    jobs: &mut [Reap],
    token: &str,
) -> Option<Listing> {
    if jobs.iter().all(|j| !j.stage.is_on()) {
        return None;
    }
    let cfg = &b.h.cfg;
    // The same look as a sweep's ([`crate::engine::observe::look`]); any part missing is
    // liveness unknown.
    let mut listing = b.tmux.list(&cfg.prefix).await;
    if let Ok(l) = listing.as_mut() {
        crate::engine::observe::judge_shared(cfg, l);
    }
    let busy = match &listing {
        Ok(_) => b.h.watching.read_activity(cfg).await,
        Err(_) => Err(ActivityError::NoListing),
    };
    let fresh = match listing {
        Ok(l) if l.problems.is_empty() => busy.map(|busy| (l, busy)).map_err(|e| e.to_string()),
        Ok(l) => Err(l.problems.join("; ")),
        Err(e) => Err(e.to_string()),
    };
    let (listing, busy) = match fresh {
        Ok(x) => x,
        Err(e) => {
            for j in jobs.iter_mut().filter(|j| j.stage.is_on()) {
                j.abort(Abort::LivenessUnknown(e.clone()));
            }
            return None;
        }
    };
    for j in jobs.iter_mut().filter(|j| j.stage.is_on()) {
        if j.request.server_pid.is_some() && j.request.server_pid != listing.server_pid {
            j.abort(Abort::ServerRestarted);
        }
    }
    let look = Fresh {
        cfg,
        by_id: listing.sessions.iter().map(|s| (s.tmux_id, s)).collect(),
        busy: &busy,
        // The agents' status files are found by the pids tmux lists: read only where this
        // reaper sees the server's processes (else the victims' step refuses the reap, saying
        // why).
        sees: b
            .procs
            .server_identity(listing.server_pid, listing.socket_path.as_deref())
            .is_ok(),
        token,
    };
    for j in jobs.iter_mut().filter(|j| j.stage.is_on()) {
        check_one(&look, j);
    }
    Some(listing)
}

/// What the re-check of each reap reads: the fresh listing by session, the ids the activity files
/// mark running, whether this reaper sees the server's processes, and our token.
struct Fresh<'a> {
    cfg: &'a crate::config::Config,
    by_id: HashMap<TmuxId, &'a Session>,
    busy: &'a HashSet<String>,
    sees: bool,
    token: &'a str,
}

/// Re-check one reap on fresh data: its refusals in the order the fencing relies on (presence,
/// our mark, the name, then the fresh decision). One that passes is `Checked`.
fn check_one(f: &Fresh<'_>, j: &mut Reap) {
    let old = &j.request.session;
    // Listed only under a name of ours: one renamed away may still carry our mark (the clear is
    // checked in the server, and is a no-op on a session that is gone).
    let Some(s) = f.by_id.get(&j.n()) else {
        return j.abort(Abort::GoneOrRenamed);
    };
    // The test-and-set left our mark only where all its conditions held. (A session we do not
    // hold is given back too: the clear is checked in the server, a no-op unless ours.)
    if !s.holds_mark_of(f.token) {
        return j.abort(Abort::NotHeld);
    }
    // Same `$N` and same name: a session renamed since it was listed (even to another name of
    // ours) is not the one this reap was decided for.
    if s.name != old.name {
        return j.abort(Abort::Renamed);
    }
    let mut s = (*s).clone();
    s.cmdline_cid = old.cmdline_cid.clone();
    s.mem_bytes = old.mem_bytes;
    if f.cfg.policy.orphan_viewers == policy::OrphanViewers::Ignore {
        for c in &mut s.clients {
            c.orphaned = procs::orphaned(c.pid);
        }
    }
    // The agent's own status file, read again: a turn it began since the sweep keeps it.
    if f.sees {
        s.agent_turn = crate::engine::agent_status::turn_of(&s);
    }
    let (cfg, by_file) = (f.cfg, !f.cfg.activity_files.is_empty());
    let Some((fresh, s)) = policy::decide_session(s, f.busy, by_file, now_ms(), &cfg.policy) else {
        return j.abort(Abort::NoFreshDecision);
    };
    let (d, req) = (&j.request.decision, &j.request);
    if let Err(why) = policy::still_reapable(&fresh, d.idle_ms, req.reason, req.force, &cfg.policy)
    {
        return j.abort(Abort::Changed(why));
    }
    if let Stage::Marked { token } = &j.stage {
        j.stage = Stage::Checked {
            token: token.clone(),
            fresh: Box::new(s),
            ids: Vec::new(),
            victims: Vec::new(),
            // The chat's cid as it is now (a studio may have set `@ccs_cid` since the sweep).
            facts: Facts {
                cid: fresh.cid,
                ..Facts::default()
            },
        };
    }
}

/// The victims of every session still to be reaped, from one scan of the process table, pinned.
/// (Their memory is read beside the journals: [`super::signal::MemoryRead`].)
pub(super) fn collect_victims(procs: &impl ProcPort, jobs: &mut [Reap], listing: &Listing) {
    if jobs.iter().all(|j| !j.stage.is_on()) {
        return;
    }
    // The pids tmux lists name its processes here only in its own pid namespace: proven once
    // for the batch, before anything is collected, let alone signalled.
    if let Err(why) = procs.server_identity(listing.server_pid, listing.socket_path.as_deref()) {
        for j in jobs.iter_mut().filter(|j| j.stage.is_on()) {
            j.fail(Failure::NotAttempted(format!(
                "this reaper cannot see the tmux server's processes: {why}"
            )));
        }
        return;
    }
    let members = {
        let live: Vec<&Session> = jobs.iter().filter_map(|j| j.stage.fresh()).collect();
        procs.members(&live, listing)
    };
    let members = match members {
        Ok(m) => m,
        Err(e) => {
            for j in jobs.iter_mut().filter(|j| j.stage.is_on()) {
                j.fail(Failure::ProcessTable(e.to_string()));
            }
            return;
        }
    };
    for j in jobs.iter_mut() {
        let n = j.n();
        let reason = j.request.reason;
        let Stage::Checked {
            fresh,
            ids,
            victims,
            facts,
            ..
        } = &mut j.stage
        else {
            continue;
        };
        let found = members.get(&n).map(Vec::as_slice).unwrap_or(&[]);
        *victims = procs.pin(found);
        // Every member, pinned or not: one that could not be pinned (/proc could not tell) and
        // still lives is a survivor, never a silent success.
        *ids = found.to_vec();
        facts.pids = ids.iter().map(|i| i.pid).collect();
        ended(fresh, reason, facts);
    }
}
