//! `ccs-reap room`: free memory for one new chat before it starts. One look at the world with a
//! [`RoomAsk`] decided by the core (the room and `max-live` rules beside the others), its reaps
//! carried out by the same fenced teardown as a sweep's, under the studio's room lock; the room
//! made is held for the new chat ([`Reservation`]) so that the next call does not count the same
//! free bytes again.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::adapters::clock::now_ms;
use crate::adapters::state::{Outcome, StateDir};
use crate::core::policy::{self, Need, ReapReason, Reservation, RoomAsk, RoomPlan, ROOM_HOLD_MS};
use crate::engine::context::Reaper;
use crate::engine::observe::{observe_with, Mode};
use crate::engine::resume::NoRoomLeft;
use crate::engine::sweep::{choose, journals_by_owner, Holds};
use crate::engine::teardown;

/// How long a `room` call waits for the ones before it.
pub const LOCK_WAIT: Duration = Duration::from_secs(60);

/// How long a session-start hook waits for them: the agent waits on its hook (Claude Code gives a
/// hook 60 s by default), and a chat that gets no room is started anyway.
pub const HOOK_LOCK_WAIT: Duration = Duration::from_secs(20);

/// One request for room.
#[derive(Debug, Clone)]
pub struct RoomCall {
    pub need: Need,
    /// The new chat's id, when known.
    pub for_id: Option<String>,
    /// `spawn`: a chat that is live already needs no room.
    pub skip_if_live: bool,
    /// How long to wait for the room lock.
    pub lock_wait: Duration,
}

/// Reaps in at most this many looks: again only when a reap it started did not end `reaped` (a
/// chat that became busy in between: another may be taken in its place); after the last of
/// them, one more look only tells whether the room is there.
const ROUNDS: usize = 3;

/// One chat reaped for room.
#[derive(Debug, Clone, Serialize)]
pub struct Freed {
    pub session: String,
    pub id: String,
    pub reason: ReapReason,
    /// What its tree held at the teardown (PSS where readable, else RSS).
    pub bytes: u64,
}

/// What a `room` call did.
#[derive(Debug, Clone, Serialize)]
pub struct RoomDone {
    /// The room as the last look saw it, the chats it chose counted as gone.
    pub plan: RoomPlan,
    pub freed: Vec<Freed>,
    pub freed_bytes: u64,
    /// Reaps that did not end `reaped` (the chat changed before its fence, or failed).
    pub not_reaped: usize,
    pub took_ms: u64,
}

/// Why no room was made.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    /// Only chats that may not be taken are left (busy, viewed, pinned, warned, under the
    /// floor, ...): the new chat does not fit. Nothing was taken for it.
    #[error("no room for a new chat of {} bytes: {}", .0.plan.need_bytes, left(&.0.plan))]
    NoRoom(Box<RoomDone>),
    #[error("other room calls held the room lock {0} all the time this one could wait")]
    Locked(String),
    #[error("{0}")]
    State(#[from] crate::adapters::state::StateError),
    #[error("liveness unknown, nothing taken: {0}")]
    Unknown(String),
    /// A memory limit is in force (this many bytes) but the memory in use could not be read.
    #[error("the memory in use could not be read, under a limit of {0} bytes: whether a new chat fits cannot be told, nothing taken")]
    MemoryUnknown(u64),
}

/// What is left that cannot be taken, for the refusal.
pub fn left(p: &RoomPlan) -> String {
    let mut why = Vec::new();
    if let (Some(b), Some(l)) = (p.projected_bytes, p.limit_bytes) {
        if b > l {
            why.push(format!("{b} bytes would be in use, above the limit of {l}"));
        }
    }
    if let Some(m) = p.max_live {
        if p.live + p.held_chats + 1 > m {
            why.push(format!(
                "{} live chats and {} held, at most {m}",
                p.live, p.held_chats
            ));
        }
    }
    let kinds: Vec<String> = p.left.iter().map(|(k, n)| format!("{n} {k}")).collect();
    why.push(format!(
        "only chats that may not be taken are left: {}",
        if kinds.is_empty() {
            "none".into()
        } else {
            kinds.join(", ")
        }
    ));
    why.join("; ")
}

/// Make room for one new chat (`for_id`: its id, when known).
pub async fn room(r: &Reaper, call: RoomCall) -> Result<RoomDone, RoomError> {
    let t0 = Instant::now();
    let lock_path = r.state.studio_dir().join("room.lock");
    let state = r.state.clone();
    let lock_wait = call.lock_wait;
    let _lock = tokio::task::spawn_blocking(move || state.lock_room(lock_wait))
        .await
        .map_err(|e| RoomError::Locked(format!("{} ({e})", lock_path.display())))??
        .ok_or_else(|| RoomError::Locked(lock_path.display().to_string()))?;
    let held = match r.state.read_room() {
        Ok(h) => policy::still_held(h, now_ms()),
        Err(e) => {
            tracing::warn!(error = %e, "the room held for earlier new chats is unreadable: counted as none");
            Vec::new()
        }
    };
    finish_dead_reapers(r).await;
    let made = match rounds(r, &call, held, t0).await? {
        Rounds::Live(done) => return Ok(done),
        Rounds::Made(m) => m,
    };
    let Some(plan) = made.plan else {
        return Err(RoomError::Unknown("no look was taken".into()));
    };
    let done = RoomDone {
        freed_bytes: made.freed.iter().map(|f| f.bytes).sum(),
        freed: made.freed,
        not_reaped: made.not_reaped,
        took_ms: t0.elapsed().as_millis() as u64,
        plan,
    };
    hold(&r.state, done, made.held, call.for_id)
}

/// What the rounds of looks and reaps came to.
enum Rounds {
    /// `spawn`'s chat is live already: no room needed.
    Live(RoomDone),
    Made(Made),
}

/// The room the rounds made: the last plan, the chats freed, the reaps that did not end
/// `reaped`, and the room held for new chats as last seen.
struct Made {
    plan: Option<RoomPlan>,
    freed: Vec<Freed>,
    not_reaped: usize,
    held: Vec<Reservation>,
}

/// [`ROUNDS`] looks that may reap, then at most one that only tells: a plan is returned as made
/// only when every reap it counted ended `reaped`.
async fn rounds(
    r: &Reaper,
    call: &RoomCall,
    held: Vec<Reservation>,
    t0: Instant,
) -> Result<Rounds, RoomError> {
    let ask = RoomAsk {
        need: call.need,
        for_id: call.for_id.clone(),
        held: held.clone(),
    };
    let mut m = Made {
        plan: None,
        freed: Vec::new(),
        not_reaped: 0,
        held,
    };
    for round in 0..=ROUNDS {
        let o = observe_with(r, Mode::Act, Some(ask.clone()), None).await;
        if let Some(e) = &o.snap.global_problem {
            return Err(RoomError::Unknown(e.clone()));
        }
        m.held = policy::mark_seen(std::mem::take(&mut m.held), &o.snap);
        let mut p = policy::room_plan(&o.snap, &o.decisions, &r.cfg.policy);
        if p.memory_unknown {
            return Err(RoomError::MemoryUnknown(p.limit_bytes.unwrap_or(0)));
        }
        let listed = |id: &str| o.snap.sessions.iter().any(|s| s.id == id && !s.is_marked());
        if call.skip_if_live && m.freed.is_empty() && call.for_id.as_deref().is_some_and(listed) {
            return Ok(Rounds::Live(RoomDone {
                plan: RoomPlan { fits: true, ..p },
                freed: Vec::new(),
                freed_bytes: 0,
                not_reaped: 0,
                took_ms: t0.elapsed().as_millis() as u64,
            }));
        }
        let (live, _) = journals_by_owner(&r.state, &r.ownership);
        let holds = Holds {
            dry_run: false,
            ownership: &r.ownership,
            inflight: &r.inflight,
            live: &live,
        };
        let (_, reqs) = choose(&holds, &o.decisions, &o.snap, o.listing.server_pid);
        if reqs.is_empty() {
            m.plan = Some(p);
            break;
        }
        if round == ROUNDS {
            // Reaps still wanted after the last round: the room was not made.
            p.fits = false;
            if m.not_reaped > 0 {
                let k = "not reaped (changed before its reap)".to_string();
                *p.left.entry(k).or_default() += m.not_reaped;
            }
            m.plan = Some(p);
            break;
        }
        m.plan = Some(p);
        let before = m.not_reaped;
        reap_round(r, reqs, &mut m).await;
        if m.not_reaped == before {
            break;
        }
    }
    Ok(Rounds::Made(m))
}

/// One round's reaps, carried out by the fenced teardown: each chat reaped counted freed, each
/// other not reaped.
async fn reap_round(r: &Reaper, reqs: Vec<teardown::Request>, m: &mut Made) {
    let guard = r
        .inflight
        .hold(reqs.iter().map(|q| q.decision.tmux_id).collect());
    let ends = teardown::reap_to(r, reqs, None).await;
    drop(guard);
    for f in ends {
        if f.end.outcome() != Outcome::Reaped {
            m.not_reaped += 1;
            continue;
        }
        let l = &f.line;
        m.freed.push(Freed {
            session: l.session.clone(),
            id: l.id.clone(),
            reason: l.reason,
            bytes: l.pss_bytes.unwrap_or(l.rss_bytes),
        });
    }
}

/// The room made is held for the new chat (`for_id`) and the reservations written (either way:
/// the chats seen since are marked); no room is [`RoomError::NoRoom`].
fn hold(
    state: &StateDir,
    done: RoomDone,
    mut held: Vec<Reservation>,
    for_id: Option<String>,
) -> Result<RoomDone, RoomError> {
    if done.plan.fits {
        // One reservation a chat: the newest (a spawn asked again replaces its own).
        held.retain(|h| h.id.is_none() || h.id != for_id);
        held.push(Reservation {
            id: for_id,
            bytes: done.plan.need_bytes,
            until_ms: now_ms() + ROOM_HOLD_MS,
            seen: false,
        });
    }
    let written = state.write_room(&held);
    if !done.plan.fits {
        // No room stays no room: an unwritable file must not turn it into an error the caller
        // starts the chat on anyway.
        if let Err(e) = written {
            tracing::warn!(error = %e, "the room held for new chats could not be written");
        }
        return Err(RoomError::NoRoom(Box::new(done)));
    }
    written?;
    tracing::info!(
        need_bytes = done.plan.need_bytes,
        freed = done.freed.len(),
        freed_bytes = done.freed_bytes,
        took_ms = done.took_ms,
        "room made for a new chat"
    );
    Ok(done)
}

/// A teardown a dead reaper left half-way (its journal, its mark) is finished first, as a sweep
/// does before its look: its chat is going, and room counts it gone. A look of its own only when
/// there is such a journal.
async fn finish_dead_reapers(r: &Reaper) {
    let (_, dead) = journals_by_owner(&r.state, &r.ownership);
    if dead.is_empty() {
        return;
    }
    let o = observe_with(r, Mode::Status, None, None).await;
    if o.snap.global_problem.is_some() {
        return;
    }
    let done = teardown::recover(r, &o.listing, dead).await;
    if !done.is_empty() {
        tracing::info!(
            finished = done.len(),
            "teardowns a dead reaper left half-way finished before room"
        );
    }
}

/// `spawn`'s room (`auto`, for its id), made once every check of the spawn passed, just before
/// the chat starts: `Err(why)` when there is no room (the chat is not started). A room that
/// could not be asked (the lock held all the time it waited, the state dir, the memory in use
/// unreadable) is warned about and the chat starts: room is a help, never a new way to fail.
pub async fn before_start(r: &Reaper, id: &str) -> Result<(), NoRoomLeft> {
    let call = RoomCall {
        need: Need::Auto,
        for_id: Some(id.to_string()),
        skip_if_live: true,
        lock_wait: LOCK_WAIT,
    };
    match room(r, call).await {
        Ok(d) => {
            if !d.freed.is_empty() {
                tracing::info!(session = %id, freed = d.freed.len(), freed_bytes = d.freed_bytes, "room made before spawn");
            }
            Ok(())
        }
        Err(RoomError::NoRoom(d)) => Err(NoRoomLeft(left(&d.plan))),
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "room for this new chat could not be made: spawning anyway");
            Ok(())
        }
    }
}

pub use crate::engine::hook_common::{in_force, wants_room};

/// A new chat's session-start hook ([`wants_room`]): room for it at once (`auto`, for its own id),
/// instead of waiting for the next sweep or pressure crossing. What was done, for the hook's line.
/// Run after the hook's own bounded work, never cut short by it: a teardown is never dropped
/// half-way.
pub async fn on_session_start(r: &Reaper, name: &str, id: &str) -> String {
    let call = RoomCall {
        need: Need::Auto,
        for_id: Some(id.to_string()),
        skip_if_live: false,
        lock_wait: HOOK_LOCK_WAIT,
    };
    match room(r, call).await {
        Ok(d) => format!(
            "room made: {} chat(s) reaped, {} bytes, in {} ms",
            d.freed.len(),
            d.freed_bytes,
            d.took_ms
        ),
        Err(RoomError::NoRoom(d)) => {
            let why = left(&d.plan);
            tracing::warn!(session = %name, "no room for this new chat: {why}");
            format!("no room: {why}")
        }
        Err(e) => {
            tracing::warn!(session = %name, error = %e, "room for this new chat could not be made");
            format!("room not made: {e}")
        }
    }
}
