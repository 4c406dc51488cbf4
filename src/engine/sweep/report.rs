//! What a sweep says: its report, and the chats asleep that `status` lists.

use std::collections::HashSet;
use std::time::Instant;

use super::Done;
use crate::adapters::state::{KnownChat, StateDir};
use crate::config::Config;
use crate::core::policy::{self, Decision, Snapshot, State};
use crate::core::report::{SessionReport, SweepReport, ViewerReport};
use crate::core::time::rfc3339;
use crate::engine::observe::Observation;
use crate::engine::ownership::Ownership;
use crate::engine::watching::Watching;

/// The chats that are asleep: a tombstone, and no live session (nor one lost with its server,
/// which `status` lists apart), newest first. One listing of the tombstones' dir.
pub(super) fn asleep(
    state: &StateDir,
    cfg: &Config,
    snap: &Snapshot,
    lost: &[KnownChat],
) -> Vec<crate::core::report::Asleep> {
    let live: HashSet<&str> = snap
        .sessions
        .iter()
        .map(|s| s.id.as_str())
        .chain(lost.iter().map(|c| c.id.as_str()))
        .collect();
    let (tombs, unreadable) = state.readable_tombstones();
    if let Some((n, e)) = unreadable {
        tracing::warn!(
            unreadable = n,
            "{n} unreadable tombstone(s) not listed; the first: {e}"
        );
    }
    let mut out: Vec<_> = tombs
        .into_iter()
        .filter(|t| !live.contains(t.id.as_str()))
        .map(|t| crate::core::report::Asleep::of(&t, &cfg.prefix))
        .collect();
    let at = |a: &crate::core::report::Asleep| {
        chrono::DateTime::parse_from_rfc3339(&a.reaped_at)
            .map_or(i64::MIN, |t| t.timestamp_millis())
    };
    out.sort_by_key(|a| (std::cmp::Reverse(at(a)), a.id.clone()));
    out
}

/// The handles a report uses.
pub(super) struct Sayer<'a> {
    pub cfg: &'a Config,
    pub dry_run: bool,
    pub ownership: &'a Ownership,
    pub watching: &'a Watching,
}

/// What a sweep (or `status`) says: what it observed `o`, what it `done`, since `t0`.
pub(super) fn report(v: &Sayer<'_>, o: Observation, done: Done, t0: Instant) -> SweepReport {
    let Observation {
        snap,
        listing,
        decisions,
        now,
    } = o;
    let tmux_server_up = listing.server_up;
    let Done {
        reaps,
        summary,
        lost,
        empty,
    } = done;
    let room = policy::room_plan(&snap, &decisions, &v.cfg.policy);
    let sessions = sessions(decisions, &snap, now);
    let total_rss_bytes = sessions.iter().filter_map(|s| s.rss_bytes).sum();
    let total_pss_bytes = if sessions.iter().all(|s| s.pss_bytes.is_some()) {
        Some(sessions.iter().filter_map(|s| s.pss_bytes).sum())
    } else {
        None
    };
    SweepReport {
        at: rfc3339(now),
        dry_run: v.dry_run,
        enabled: v.cfg.policy.enabled(),
        error: snap.global_problem.clone(),
        socket_path: v.cfg.socket.path().to_string_lossy().into_owned(),
        tmux_server_up,
        tmux_server_empty: empty,
        blind: (tmux_server_up == Some(true))
            .then(|| v.ownership.blind())
            .flatten(),
        sessions,
        host: snap.host,
        watching: snap.host.and(v.watching.watched()).map(|w| w.to_string()),
        total_rss_bytes,
        total_pss_bytes,
        reaps,
        summary,
        lost,
        asleep: Vec::new(),
        gauge: crate::core::report::Gauge {
            mem_threshold_bytes: crate::core::policy::mem_limit(&v.cfg.policy, snap.host),
            stall_pct: snap.stall_pct,
            stall_threshold_pct: v.cfg.policy.mem_psi,
            new_chat_bytes: room.need_bytes,
            room_limit_bytes: room.limit_bytes,
            room_bytes: room
                .limit_bytes
                .zip(room.in_use_bytes)
                .map(|(l, u)| l.saturating_sub(u)),
            live_chats: room.live,
            max_live: room.max_live,
        },
        took_ms: t0.elapsed().as_millis() as u64,
    }
}

/// Each session's report, the biggest idle sessions first, then the rest by size.
fn sessions(decisions: Vec<Decision>, snap: &Snapshot, now: i64) -> Vec<SessionReport> {
    let mut sessions: Vec<SessionReport> = decisions
        .into_iter()
        .zip(&snap.sessions)
        .map(|(d, s)| SessionReport {
            tmux_target: s.tmux_target(),
            turn: (!s.turn.is_empty()).then(|| s.turn.clone()),
            rss_bytes: s.mem_rss,
            pss_bytes: s.mem_pss,
            viewer_list: s
                .clients
                .iter()
                .map(|c| ViewerReport {
                    pid: c.pid,
                    control_mode: c.control_mode,
                    attached_ms: now.saturating_sub(c.created_ms).max(0) as u64,
                    idle_ms: now.saturating_sub(c.activity_ms).max(0) as u64,
                    orphaned: c.orphaned,
                    through: c.through,
                })
                .collect(),
            agent: crate::agents::of_panes(&s.panes).map(|a| a.name),
            cid_at_first_prompt: crate::agents::of_panes(&s.panes)
                .is_some_and(|a| a.cid_at_first_prompt),
            decision: d,
        })
        .collect();
    sessions.sort_by_key(|r| {
        let idle = matches!(
            r.decision.state,
            State::Idle | State::Expired | State::NoCid | State::Exited
        );
        (
            !idle,
            std::cmp::Reverse(r.pss_bytes.or(r.rss_bytes).unwrap_or(0)),
            r.decision.tmux_id,
        )
    });
    sessions
}
