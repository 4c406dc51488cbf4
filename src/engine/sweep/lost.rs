//! Chats lost with their tmux server: which are lost, the record of known chats kept, their
//! tombstones and audit lines, and the server identity (pid, start, boot) they are judged by.

use super::*;
use crate::adapters::proc_reads::{self, ProcSeen};
use crate::config::Config;
use crate::engine::context::{socket_path, KnownChats};

/// The chats `plan` takes for lost with their server that were reaped before it went (a reap's
/// tombstone of the same conversation is there: this reaper took them, and the server exited
/// with its last session): not lost, and out of the record; `status` lists them asleep with
/// their real reason. Returns how many.
pub(super) fn settle_reaped(state: &StateDir, plan: &mut st::Plan) -> usize {
    let reaped: Vec<String> = plan
        .known
        .lost()
        .filter(|c| {
            matches!(state.read_tombstone(&c.id), Ok(Some(t))
                if t.cid.as_deref() == Some(c.cid.as_str()) && t.reason != ReapReason::ServerDied)
        })
        .map(|c| c.id.clone())
        .collect();
    for id in &reaped {
        plan.known.chats.remove(id);
        plan.lost.retain(|c| &c.id != id);
    }
    if !reaped.is_empty() {
        plan.changed = true;
    }
    reaped.len()
}

/// Whether the socket is `empty`: no server, and the last one exited right after this reaper
/// took its last chats ([`Known::emptied`]). Updates the record: set when `reaped` chats of a
/// gone server were settled and none was lost with it, unset once a server answers.
pub(super) fn mark_emptied(plan: &mut st::Plan, up: Option<bool>, reaped: usize, now: i64) -> bool {
    match up {
        Some(true) if plan.known.emptied.is_some() => {
            plan.known.emptied = None;
            plan.changed = true;
        }
        // Chats lost with it after all: the server did not only go with its last chat.
        Some(false) if !plan.lost.is_empty() && plan.known.emptied.is_some() => {
            plan.known.emptied = None;
            plan.changed = true;
        }
        Some(false) if reaped > 0 && plan.lost.is_empty() && plan.known.emptied.is_none() => {
            plan.known.emptied = Some(now);
            plan.changed = true;
        }
        _ => {}
    }
    up == Some(false) && plan.known.emptied.is_some()
}

/// The chats of `known` lost with their server whose session is not there (yet).
pub(super) fn lost_chats(known: Option<&Known>, snap: &Snapshot) -> Vec<KnownChat> {
    let here: HashSet<&str> = snap.sessions.iter().map(|s| s.id.as_str()).collect();
    known
        .into_iter()
        .flat_map(Known::lost)
        .filter(|c| !here.contains(c.id.as_str()))
        .cloned()
        .collect()
}

/// The identity of the tmux server of `pid`: its start time from `/proc/<pid>/stat` (unknown,
/// never 0, when it cannot be read: another pid namespace) and this boot's id.
pub(crate) fn server_id(pid: u32) -> st::ServerId {
    st::ServerId {
        pid,
        start: proc_reads::start_time(pid),
        boot: proc_reads::boot_id().to_string(),
    }
}

/// Whether the recorded server `s` still runs: `Some(false)` when it is gone (another boot, no
/// such process, a zombie, another start time), `None` when /proc cannot tell.
pub(crate) fn server_living(s: &st::ServerId) -> Option<bool> {
    let boot = proc_reads::boot_id();
    if !s.boot.is_empty() && !boot.is_empty() && s.boot != boot {
        return Some(false);
    }
    // A start time never read: the server's pid was not visible here (another pid namespace).
    let start = s.start?;
    match proc_reads::seen(s.pid) {
        ProcSeen::Dead | ProcSeen::NotFound => Some(false),
        ProcSeen::Running { start: now } => Some(now == start),
        ProcSeen::Unknown => None,
    }
}

/// The next record of last known conversations ([`st::plan`]) given the last one and this
/// sweep's look at the server. The cwd is read only for the entries made afresh.
pub(super) fn plan_known(
    old: Known,
    snap: &Snapshot,
    listing: &Listing,
    decisions: &[Decision],
    now: i64,
) -> st::Plan {
    let view = st::ServerView {
        up: listing.server_up,
        current: listing.server_pid.map(server_id),
    };
    let seen: Vec<st::ChatSeen> = decisions
        .iter()
        .zip(&snap.sessions)
        .filter(|(_, s)| crate::core::policy::valid_id(&s.id))
        .map(|(d, s)| {
            let mut e = st::ChatSeen {
                id: &s.id,
                session: &s.name,
                tmux_id: s.tmux_id,
                // `@ccs_cid`, or the one found on a command line; else the command tmux started
                // the pane with (a string, no /proc: cheap every sweep).
                cid: d.cid.as_deref().map(Cow::Borrowed).or_else(|| {
                    s.panes
                        .iter()
                        .find_map(|p| crate::core::policy::cid_from_argv(&[&p.start_command]))
                        .map(Cow::Owned)
                }),
                cwd: None,
            };
            if e.cid.is_some() && st::needs_cwd(&old, &e, view.current.as_ref()) {
                e.cwd = s
                    .panes
                    .iter()
                    .filter(|p| !p.dead)
                    .find_map(|p| proc_reads::cwd(p.pid));
            }
            e
        })
        .collect();
    st::plan(old, &seen, &view, server_living, now)
}

/// The handles keeping the record of known chats uses.
pub(super) struct Keep<'a> {
    pub cfg: &'a Config,
    pub state: &'a StateDir,
    pub metrics: &'a Metrics,
    pub known: &'a KnownChats,
}

/// Keep the record of every chat's last known conversation (`known.json`: read once, then kept
/// in memory; written only when it changed; with `later`, written on a blocking thread while the
/// sweep goes on), and tombstone the chats a dead or replaced tmux server took with it: reason
/// `server-died`, one `lost` audit line each. Nothing is signalled: their processes went with
/// the server. Returns the audit lines.
pub(super) fn keep_known(k: &Keep<'_>, o: &Observation, later: bool) -> Vec<AuditLine> {
    if o.listing.server_up.is_none() {
        return Vec::new();
    }
    let t0 = Instant::now();
    let load = || {
        k.state.read_known().unwrap_or_else(|e| {
            tracing::warn!(error = %e, path = %k.state.known_path().display(), "the record of last known conversations is unreadable: starting a new one");
            Known::default()
        })
    };
    k.known.update(load, |old| {
        let read_us = t0.elapsed().as_micros() as u64;
        let mut plan = plan_known(old, &o.snap, &o.listing, &o.decisions, o.now);
        let lines = settle(k, &mut plan, o.listing.server_up, o.now);
        let written = plan.changed;
        if written && later {
            k.known.write_later(k.state, plan.known.clone());
        } else if written {
            if let Err(e) = k.state.write_known(&plan.known) {
                tracing::warn!(error = %e, "failed to write the record of last known conversations");
            }
        }
        // What keeping the record costs a sweep (scripts/bench reads this line).
        tracing::debug!(
            entries = plan.known.chats.len(),
            written,
            lost = lines.len(),
            read_us,
            took_us = t0.elapsed().as_micros() as u64,
            "known conversations kept"
        );
        (plan.known, lines)
    })
}

/// The chats of `plan` reaped before their server went settled, the socket's emptiness marked,
/// the lost chats tombstoned: their audit lines, recorded.
fn settle(k: &Keep<'_>, plan: &mut st::Plan, up: Option<bool>, now: i64) -> Vec<AuditLine> {
    let reaped = settle_reaped(k.state, plan);
    let was = plan.known.emptied.is_some();
    if mark_emptied(plan, up, reaped, now) && !was {
        tracing::info!(socket = %socket_path(k.cfg), chats = reaped, "the tmux server exited after its last chat was reaped: the socket is empty until the studio starts a chat (not an outage)");
    }
    let mut lines = if plan.lost.is_empty() {
        Vec::new()
    } else {
        tombstone_lost(k.state, &socket_path(k.cfg), plan, now)
    };
    lines.extend(respawned_lines(plan, now));
    for l in &lines {
        let _ = record(k.state, k.metrics, l);
    }
    lines
}

/// Tombstone each chat `plan` says a dead or replaced server took with it (reason
/// `server-died`, for `spawn` to resume), unless a tombstone of its conversation is there
/// already; returns one `lost` audit line each. A chat whose tombstone cannot be written is not
/// marked lost: the next sweep tries again.
pub(super) fn tombstone_lost(
    state: &StateDir,
    socket: &str,
    plan: &mut st::Plan,
    now: i64,
) -> Vec<AuditLine> {
    let mut lines = Vec::new();
    for c in &plan.lost {
        let gone = format!(
            "the tmux server (pid {}) it lived on died or was replaced",
            c.server.pid
        );
        match state.read_tombstone(&c.id) {
            // Tombstoned as lost by another reaper (a `--once` beside the daemon): listed, no
            // second line.
            Ok(Some(t))
                if t.cid.as_deref() == Some(c.cid.as_str())
                    && t.reason == ReapReason::ServerDied =>
            {
                continue;
            }
            // Reaped already: the reap's tombstone serves; nothing is lost.
            Ok(Some(t)) if t.cid.as_deref() == Some(c.cid.as_str()) => {
                tracing::info!(session = %c.session, cid = %c.cid, "{gone}; its tombstone is already there");
                plan.known.chats.remove(&c.id);
                plan.changed = true;
                continue;
            }
            _ => {}
        }
        let t = c.lost_tombstone(socket, now);
        if let Err(e) = state.write_tombstone(&t) {
            // Not marked lost: the next sweep tries again.
            tracing::error!(session = %c.session, cid = %c.cid, error = %e, "{gone}: failed to write its tombstone");
            if let Some(k) = plan.known.chats.get_mut(&c.id) {
                k.lost = false;
            }
            continue;
        }
        let mut l = lost_line(c, now);
        l.error = Some(format!("{gone}; tombstoned for spawn to resume"));
        tracing::warn!(session = %c.session, cid = %c.cid, server_pid = c.server.pid, "lost with its tmux server: tombstoned (server-died), spawn resumes it");
        lines.push(l);
    }
    lines
}

/// A `lost` line for chat `c` (reason `server-died`): nothing signalled, its error to be said.
pub(super) fn lost_line(c: &KnownChat, now: i64) -> AuditLine {
    let mut l = AuditLine::begin(
        rfc3339(now),
        &c.session,
        &c.id,
        c.tmux_id,
        Some(c.cid.clone()),
        ReapReason::ServerDied,
        None,
    );
    l.outcome = Outcome::Lost;
    l
}

/// The `lost` audit lines of the chats whose server went but which were already back as a new
/// session before a sweep saw them go: on their conversation, or respawned afresh.
pub(super) fn respawned_lines(plan: &st::Plan, now: i64) -> Vec<AuditLine> {
    let mut lines = Vec::new();
    for st::Respawned { chat: c, resumed } in &plan.respawned {
        let mut l = lost_line(c, now);
        let gone = format!(
            "the tmux server (pid {}) it lived on died or was replaced",
            c.server.pid
        );
        l.error = Some(if *resumed {
            tracing::warn!(session = %c.session, cid = %c.cid, "lost with its tmux server, and already back on its conversation");
            format!("{gone}; it was back on its conversation before a sweep saw it")
        } else {
            tracing::warn!(session = %c.session, cid = %c.cid, "lost with its tmux server and already respawned afresh: its old conversation is in the audit line");
            format!(
                "{gone}, and the chat was respawned on another conversation before a sweep saw it: resume the old one by hand (claude --resume {})",
                c.cid
            )
        });
        lines.push(l);
    }
    lines
}
