//! Room for a new chat (`ccs-reap room`, `spawn`, a session-start hook) and `max-live`: which
//! idle chats go, oldest idle first, so that one more chat fits under the memory limit in force
//! and within `CCS_ENGINE_MAX_LIVE`. Pure: the engine reads the world and the reservations of
//! earlier `room` calls, this decides.

use serde::{Deserialize, Serialize};

use super::{
    mem_limit, Action, Decision, HostMemory, Policy, ReapReason, Ruling, Snapshot, Stamp, State,
};

/// What a new chat is taken to need before any chat of this server was measured (`--need auto`
/// with nothing to take the median of): a Claude Code tree with one or two MCP servers.
pub const DEFAULT_NEED: u64 = 400 << 20;

/// Without `CCS_ENGINE_MEM_HIGH`, room is made under the cgroup's (or the host's) limit less this
/// share of it: the kernel reclaims and the OOM killer strikes near the limit, not at it.
pub const MARGIN_PCT: u64 = 10;

/// How long the room made for a chat is held for it (counted by later `room` calls) while the
/// chat has not been seen; once listed, its own memory counts instead, and what it has not grown
/// to yet stays held until this has passed.
pub const HOLD_MS: i64 = 30_000;

/// How much a new chat needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Need {
    Bytes(u64),
    /// The median footprint of this server's live chats, else [`DEFAULT_NEED`].
    Auto,
}

/// Room made earlier for a chat not grown yet: counted by every later `room` call until
/// `until_ms`, so that two calls never count the same free bytes twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The chat it was made for (`<id>`), when known.
    #[serde(default)]
    pub id: Option<String>,
    pub bytes: u64,
    pub until_ms: i64,
    /// Its chat was listed at a later call: once gone again (reaped, closed), nothing is held.
    #[serde(default)]
    pub seen: bool,
}

/// A request for room for one new chat.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomAsk {
    pub need: Need,
    /// The new chat's id (`spawn <id>`, the hook's own chat): never taken, and once listed its
    /// own memory counts against its need.
    pub for_id: Option<String>,
    /// The reservations of earlier calls still held.
    pub held: Vec<Reservation>,
}

/// What a room request found and decided, for the caller and `--json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomPlan {
    /// Bytes the new chat needs, and whether measured (`auto`).
    pub need_bytes: u64,
    pub need_auto: bool,
    /// The memory limit room is made under (`None`: none known, memory is not checked).
    pub limit_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    /// In use as the rules see it: used, less what the chats going hold, plus what is held.
    pub in_use_bytes: Option<u64>,
    /// Held by earlier calls, not in use yet.
    pub held_bytes: u64,
    pub held_chats: usize,
    /// Live chats (not going), and the limit.
    pub live: usize,
    pub max_live: Option<usize>,
    /// Memory in use once the chosen chats are gone, plus what is held and needed.
    pub projected_bytes: Option<u64>,
    /// Whether the new chat fits once the chosen chats are gone.
    pub fits: bool,
    /// A memory limit is in force but the memory in use is not known: the new chat's room
    /// cannot be told (it does not fit, and nothing is taken for it).
    pub memory_unknown: bool,
    /// Chats that cannot be taken, by state (`busy`, `viewed`, `pinned`, `young` under the floor,
    /// `warned`, ...), when it does not fit.
    pub left: std::collections::BTreeMap<String, usize>,
}

/// The median memory of the live chats measured (not going, not `for_id`).
pub fn auto_need(snap: &Snapshot, out: &[Decision], for_id: Option<&str>) -> Option<u64> {
    let mut m: Vec<u64> = snap
        .sessions
        .iter()
        .zip(out)
        .filter(|(s, d)| is_live(s, d) && Some(s.id.as_str()) != for_id)
        .filter_map(|(s, _)| s.mem_bytes.filter(|&b| b > 0))
        .collect();
    if m.is_empty() {
        return None;
    }
    m.sort_unstable();
    Some(m[m.len() / 2])
}

/// The limit room is made under: `CCS_ENGINE_MEM_HIGH`, else the limit less [`MARGIN_PCT`].
pub fn room_limit(p: &Policy, host: Option<HostMemory>) -> Option<u64> {
    if p.mem_high.is_some() {
        return mem_limit(p, host);
    }
    host?
        .limit_bytes
        .map(|l| l.saturating_sub(l / 100 * MARGIN_PCT))
}

fn going(s: &super::Session, d: &Decision) -> bool {
    d.action() == Action::Reap || s.is_marked()
}

/// Whether a session holds a chat: not one marked `@ccs_asleep` (its chat reaped from its own
/// pane, the session lived on), nor one whose recorded pane is gone (`foreign`; `shared`
/// without it: the user's panes only). A shared session holding the chat's recorded pane (or with none recorded)
/// holds a chat.
fn holds_chat(s: &super::Session, d: &Decision) -> bool {
    if super::chat_pane::asleep(s).is_some() {
        return false;
    }
    match d.state {
        State::Foreign => false,
        State::Shared => match super::chat_pane::PaneRecord::parse(&s.chat_pane) {
            Some(r) => s
                .panes
                .iter()
                .chain(&s.set_aside)
                .any(|p| super::chat_pane::PaneRecord::of(p) == Some(r)),
            None => s.chat_pane.trim().is_empty(),
        },
        _ => true,
    }
}

/// A live chat, as `max-live` and room count them: a chat, not going.
fn is_live(s: &super::Session, d: &Decision) -> bool {
    !going(s, d) && holds_chat(s, d)
}

/// Whether a chat may be taken for room or `max-live`: idle and kept, not going, past the floor,
/// not warned for this idle period (its user was told when it goes), not the new chat itself,
/// not a chat another call made room for (held: under `CCS_ENGINE_MIN_IDLE_MS=0`, a chat just
/// started may be idle already).
fn takeable(s: &super::Session, d: &Decision, p: &Policy, ask: Option<&RoomAsk>) -> bool {
    let for_id = ask.and_then(|a| a.for_id.as_deref());
    let held = ask.is_some_and(|a| a.held.iter().any(|r| r.id.as_deref() == Some(&s.id)));
    let o = &s.opts;
    let warned = matches!((o.idle, o.warned), (Stamp::At(t), Some(w)) if t == w);
    d.state == State::Idle
        && d.action() == Action::Keep
        && !s.is_marked()
        && d.idle_ms.unwrap_or(0) >= p.min_idle_ms
        && !warned
        && Some(s.id.as_str()) != for_id
        && !held
}

/// Why a chat could not be taken, as `left` counts it.
fn why_left(s: &super::Session, d: &Decision, p: &Policy) -> &'static str {
    let o = &s.opts;
    if d.state == State::Idle && d.idle_ms.unwrap_or(0) < p.min_idle_ms {
        "young"
    } else if d.state == State::Idle
        && matches!((o.idle, o.warned), (Stamp::At(t), Some(w)) if t == w)
    {
        "warned"
    } else {
        d.state.as_str()
    }
}

/// The candidates, oldest idle first (ties: the lower `$N`).
fn candidates(snap: &Snapshot, out: &[Decision], p: &Policy) -> Vec<usize> {
    let mut c: Vec<usize> = (0..out.len())
        .filter(|&i| takeable(&snap.sessions[i], &out[i], p, snap.room.as_ref()))
        .collect();
    c.sort_by_key(|&i| {
        (
            std::cmp::Reverse(out[i].idle_ms.unwrap_or(0)),
            out[i].tmux_id,
        )
    });
    c
}

/// `max-live`: beyond `CCS_ENGINE_MAX_LIVE` live chats, the oldest idle past the floor go.
pub(super) fn max_live_rule(snap: &Snapshot, out: &mut [Decision], p: &Policy) {
    let Some(max) = p.max_live else { return };
    let mut live = (0..out.len())
        .filter(|&i| is_live(&snap.sessions[i], &out[i]))
        .count();
    let total = live;
    for i in candidates(snap, out, p) {
        if live <= max {
            break;
        }
        let d = &mut out[i];
        d.state = State::Expired;
        d.ruling = Ruling::Reap(ReapReason::MaxLive);
        d.why = format!("{total} live chats, at most {max}: oldest idle goes first");
        // A chat reaped from its own pane leaves its session asleep, no chat: one fewer too.
        live = live.saturating_sub(1);
    }
}

/// The room rule: with a [`RoomAsk`] in the snapshot, the oldest idle chats past the floor go
/// (reason `room`) until the new chat fits; none at all when it cannot fit (the studio is told,
/// and may queue it, with every idle chat still there).
pub(super) fn room_rule(snap: &Snapshot, out: &mut [Decision], p: &Policy) {
    if snap.room.is_none() {
        return;
    }
    if !p.enabled() {
        // The sweep's rules are off (a cgroup limit alone): room does nothing the daemon would
        // not, only its own rule acts.
        for d in out.iter_mut().filter(|d| d.action() == Action::Reap) {
            d.ruling = Ruling::Keep;
            d.why = format!(
                "{} (not reaped: reaping is off, room takes only idle chats)",
                d.why
            );
        }
    }
    let mut plan = plan(snap, out, p);
    let mut chosen = Vec::new();
    for i in candidates(snap, out, p) {
        if plan.fits {
            break;
        }
        chosen.push(i);
        plan.live = plan.live.saturating_sub(1);
        let Some(mem) = snap.sessions[i].mem_bytes else {
            // Its size not known, it frees nothing known: memory still short, room stops here
            // (as the memory rule takes at most one such chat), and so takes none.
            plan.fits = fits(&plan);
            if !mem_fits(&plan) {
                break;
            }
            continue;
        };
        plan.projected_bytes = plan.projected_bytes.map(|b| b.saturating_sub(mem));
        plan.fits = fits(&plan);
    }
    if !plan.fits {
        return;
    }
    for i in chosen {
        let d = &mut out[i];
        d.state = State::Expired;
        d.ruling = Ruling::Reap(ReapReason::Room);
        d.why = format!(
            "room for a new chat of {} bytes: oldest idle goes first",
            plan.need_bytes
        );
    }
}

fn fits(p: &RoomPlan) -> bool {
    mem_fits(p) && p.max_live.is_none_or(|m| p.live + p.held_chats < m)
}

fn mem_fits(p: &RoomPlan) -> bool {
    match (p.projected_bytes, p.limit_bytes) {
        (Some(b), Some(l)) => b <= l,
        // A limit, and the memory in use unknown: it cannot be told.
        (None, Some(_)) => false,
        _ => true,
    }
}

/// What the reservations of chats not yet started (or not yet grown) hold: their bytes not yet
/// in use, and how many are not listed yet. The new chat's own reservation (its `spawn`'s, or a
/// `spawn` asked again) is its need, not counted here.
fn held(snap: &Snapshot, ask: &RoomAsk) -> (u64, usize) {
    let listed = |id: &str| snap.sessions.iter().find(|s| s.id == id);
    let (mut held_bytes, mut held_chats) = (0u64, 0usize);
    for r in ask
        .held
        .iter()
        .filter(|r| r.id.is_none() || r.id != ask.for_id)
    {
        match r.id.as_deref().and_then(listed) {
            Some(s) => held_bytes += r.bytes.saturating_sub(s.mem_bytes.unwrap_or(0)),
            // Its chat came and went: its memory went with it.
            None if r.seen => {}
            None => {
                held_bytes += r.bytes;
                held_chats += 1;
            }
        }
    }
    (held_bytes, held_chats)
}

/// Where room stands on these decisions (the chats they reap counted as gone): what `room` says,
/// and what `status`, `doctor` and the metrics show (without an ask: `auto` for one more chat).
pub fn plan(snap: &Snapshot, out: &[Decision], p: &Policy) -> RoomPlan {
    let default_ask = RoomAsk {
        need: Need::Auto,
        for_id: None,
        held: Vec::new(),
    };
    let ask = snap.room.as_ref().unwrap_or(&default_ask);
    let for_id = ask.for_id.as_deref();
    let (need_bytes, need_auto) = match ask.need {
        Need::Bytes(b) => (b, false),
        Need::Auto => (auto_need(snap, out, for_id).unwrap_or(DEFAULT_NEED), true),
    };
    let listed = |id: &str| snap.sessions.iter().find(|s| s.id == id);
    // The new chat itself, once listed, holds part of its need already.
    let own = for_id.and_then(listed);
    let need_left = need_bytes.saturating_sub(own.and_then(|s| s.mem_bytes).unwrap_or(0));
    let (held_bytes, held_chats) = held(snap, ask);
    let freed: u64 = snap
        .sessions
        .iter()
        .zip(out)
        .filter(|(s, d)| going(s, d))
        .map(|(s, _)| s.mem_bytes.unwrap_or(0))
        .sum();
    let used = snap.host.map(|h| h.used_bytes);
    let own_live = own.is_some_and(|s| {
        snap.sessions
            .iter()
            .zip(out)
            .any(|(o, d)| o.tmux_id == s.tmux_id && is_live(o, d))
    });
    let live = snap
        .sessions
        .iter()
        .zip(out)
        .filter(|(s, d)| is_live(s, d))
        .count()
        // The new chat, once listed and live, is among the live: asked for, not counted twice.
        .saturating_sub(usize::from(own_live));
    let limit_bytes = room_limit(p, snap.host);
    let mut plan = RoomPlan {
        need_bytes,
        need_auto,
        limit_bytes,
        used_bytes: used,
        in_use_bytes: used.map(|u| u.saturating_sub(freed) + held_bytes),
        held_bytes,
        held_chats,
        live,
        max_live: p.max_live,
        projected_bytes: used.map(|u| u.saturating_sub(freed) + held_bytes + need_left),
        fits: false,
        memory_unknown: limit_bytes.is_some() && used.is_none(),
        left: Default::default(),
    };
    plan.fits = fits(&plan);
    if !plan.fits {
        for (s, d) in snap.sessions.iter().zip(out) {
            if is_live(s, d) && Some(s.id.as_str()) != for_id {
                *plan.left.entry(why_left(s, d, p).to_string()).or_default() += 1;
            }
        }
    }
    plan
}

/// The reservations after a look at `snap`: those whose chat is listed are marked seen (once gone
/// again, they hold nothing).
pub fn mark_seen(held: Vec<Reservation>, snap: &Snapshot) -> Vec<Reservation> {
    held.into_iter()
        .map(|mut r| {
            let id = r.id.as_deref();
            r.seen |= id.is_some_and(|id| snap.sessions.iter().any(|s| s.id == id));
            r
        })
        .collect()
}

/// The reservations still held at `now`: none past its time, and none held longer than
/// [`HOLD_MS`] from now (written before the clock was stepped back: it would hold too long).
pub fn still_held(held: Vec<Reservation>, now: i64) -> Vec<Reservation> {
    held.into_iter()
        .filter(|r| r.until_ms > now && r.until_ms <= now.saturating_add(HOLD_MS))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const MIB: u64 = 1 << 20;

    /// An idle chat, idle for `idle_s` seconds, holding `mib` MiB.
    fn chat(id: u32, idle_s: i64, mib: u64) -> Session {
        Session {
            tmux_id: TmuxId(id),
            name: format!("ccs-{id}"),
            id: id.to_string(),
            idle: (NOW - idle_s * 1000).to_string(),
            cid: format!("cid-{id}"),
            mem_bytes: Some(mib * MIB),
            panes: vec![Pane {
                pid: 100 + id,
                dead: false,
                dead_status: None,
                dead_signal: None,
                exit_unreported: false,
                start_command: String::new(),
                id: Some(100 + id),
                window: Some(id),
                window_index: Some(0),
            }],
            ..Session::default()
        }
    }

    fn busy(mut s: Session) -> Session {
        s.turn = NOW.to_string();
        s
    }

    fn snap(
        sessions: Vec<Session>,
        used_mib: u64,
        limit_mib: u64,
        ask: Option<RoomAsk>,
    ) -> Snapshot {
        Snapshot {
            sessions,
            host: Some(HostMemory {
                used_bytes: used_mib * MIB,
                limit_bytes: Some(limit_mib * MIB),
            }),
            room: ask,
            ..Snapshot::default()
        }
        .reparsed()
    }

    fn ask(need_mib: u64) -> Option<RoomAsk> {
        Some(RoomAsk {
            need: Need::Bytes(need_mib * MIB),
            for_id: None,
            held: Vec::new(),
        })
    }

    /// The ids reaped, with their reason.
    fn reaped(out: &[Decision]) -> Vec<(String, ReapReason)> {
        out.iter()
            .filter(|d| d.action() == Action::Reap)
            .filter_map(|d| Some((d.id.clone(), d.reap_reason()?)))
            .collect()
    }

    #[test]
    fn room_takes_the_oldest_idle_until_the_new_chat_fits_and_nothing_when_it_cannot() {
        let p = Policy::default();
        // Limit 1000 MiB less 10 %: 900. Three idle chats of 100 MiB (3 the oldest), 800 used.
        let three = || vec![chat(1, 600, 100), chat(2, 300, 100), chat(3, 900, 100)];
        let room = |r: Vec<(&str, ReapReason)>| -> Vec<(String, ReapReason)> {
            r.into_iter().map(|(i, r)| (i.to_string(), r)).collect()
        };
        type Row = (&'static str, Snapshot, Vec<(String, ReapReason)>, bool);
        let table: Vec<Row> = vec![
            (
                "fits already",
                snap(three(), 500, 1000, ask(100)),
                room(vec![]),
                true,
            ),
            (
                "one goes, the oldest",
                snap(three(), 800, 1000, ask(150)),
                room(vec![("3", ReapReason::Room)]),
                true,
            ),
            (
                "two go",
                snap(three(), 800, 1000, ask(250)),
                room(vec![("1", ReapReason::Room), ("3", ReapReason::Room)]),
                true,
            ),
            (
                "cannot fit: none taken",
                snap(three(), 800, 1000, ask(500)),
                room(vec![]),
                false,
            ),
            (
                "only busy chats: none taken",
                snap(
                    vec![busy(chat(1, 600, 100)), busy(chat(2, 600, 100))],
                    850,
                    1000,
                    ask(100),
                ),
                room(vec![]),
                false,
            ),
            (
                "the floor holds: a chat idle 10 s is not taken",
                snap(vec![chat(1, 10, 300)], 850, 1000, ask(100)),
                room(vec![]),
                false,
            ),
            (
                "held room counts: one more goes",
                {
                    let mut a = ask(100).unwrap();
                    a.held = vec![Reservation {
                        id: None,
                        bytes: 150 * MIB,
                        until_ms: NOW + 1,
                        seen: false,
                    }];
                    snap(three(), 800, 1000, Some(a))
                },
                room(vec![("1", ReapReason::Room), ("3", ReapReason::Room)]),
                true,
            ),
            (
                "no ask: nothing",
                snap(three(), 999, 1000, None),
                room(vec![]),
                true,
            ),
        ];
        for (what, s, want, fits) in table {
            let out = decide(&s, NOW, &p);
            assert_eq!(reaped(&out), want, "{what}");
            if s.room.is_some() {
                assert_eq!(plan(&s, &out, &p).fits, fits, "{what}");
            }
        }
    }

    #[test]
    fn a_warned_pinned_or_viewed_chat_is_never_taken_and_left_says_why() {
        let p = Policy::default();
        let mut warned = chat(1, 600, 100);
        warned.warned = warned.idle.clone();
        let mut pinned = chat(2, 600, 100);
        pinned.pin = "1".into();
        let young = chat(3, 5, 100);
        let b = busy(chat(4, 600, 100));
        let s = snap(vec![warned, pinned, young, b], 880, 1000, ask(100));
        let out = decide(&s, NOW, &p);
        assert!(reaped(&out).is_empty());
        let pl = plan(&s, &out, &p);
        assert!(!pl.fits);
        let left: Vec<(&str, usize)> = pl.left.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            left,
            vec![("busy", 1), ("pinned", 1), ("warned", 1), ("young", 1)]
        );
    }

    #[test]
    fn max_live_at_a_sweep_and_in_room() {
        let p = Policy {
            max_live: Some(2),
            ..Policy::default()
        };
        let sessions = vec![
            busy(chat(1, 900, 1)),
            chat(2, 600, 1),
            chat(3, 300, 1),
            chat(4, 10, 1),
        ];
        // A sweep: 4 live, at most 2: the two oldest idle past the floor (2, 3); 4 is young.
        let s = Snapshot {
            sessions: sessions.clone(),
            ..Snapshot::default()
        }
        .reparsed();
        let got = reaped(&decide(&s, NOW, &p));
        assert_eq!(
            got,
            vec![
                ("2".into(), ReapReason::MaxLive),
                ("3".into(), ReapReason::MaxLive)
            ]
        );
        // Room within the limit: 3 live counted after max-live took 2... with max 3, room for
        // one more takes the oldest idle.
        let p3 = Policy {
            max_live: Some(3),
            ..Policy::default()
        };
        let s = Snapshot {
            sessions: sessions.clone(),
            room: ask(1),
            ..Snapshot::default()
        }
        .reparsed();
        let got = reaped(&decide(&s, NOW, &p3));
        assert_eq!(
            got,
            vec![
                ("2".into(), ReapReason::MaxLive),
                ("3".into(), ReapReason::Room)
            ]
        );
        // The new chat already listed (the hook's): it is not counted twice, never taken.
        let mut a = ask(1).unwrap();
        a.for_id = Some("4".into());
        let s = Snapshot {
            sessions: vec![chat(2, 600, 1), chat(4, 900, 1)],
            room: Some(a),
            ..Snapshot::default()
        }
        .reparsed();
        assert_eq!(
            reaped(&decide(
                &s,
                NOW,
                &Policy {
                    max_live: Some(2),
                    ..Policy::default()
                }
            )),
            vec![]
        );
        assert_eq!(
            reaped(&decide(
                &s,
                NOW,
                &Policy {
                    max_live: Some(1),
                    ..Policy::default()
                }
            )),
            // Beyond the limit already: max-live takes it, in the same decision.
            vec![("2".into(), ReapReason::MaxLive)]
        );
    }

    #[test]
    fn auto_is_the_median_of_the_live_chats_else_the_default() {
        let p = Policy::default();
        let s = snap(
            vec![chat(1, 600, 100), chat(2, 600, 300), chat(3, 600, 200)],
            0,
            1000,
            None,
        );
        let out = decide(&s, NOW, &p);
        assert_eq!(auto_need(&s, &out, None), Some(200 * MIB));
        let empty = snap(vec![], 0, 1000, None);
        assert_eq!(plan(&empty, &[], &p).need_bytes, DEFAULT_NEED);
        assert!(plan(&empty, &[], &p).need_auto);
        // CCS_ENGINE_MEM_HIGH is the limit when set; else the limit less the margin.
        let h = Some(HostMemory {
            used_bytes: 0,
            limit_bytes: Some(1000 * MIB),
        });
        assert_eq!(room_limit(&p, h), Some(900 * MIB));
        let hi = Policy {
            mem_high: Some(MemThreshold::Bytes(500 * MIB)),
            ..Policy::default()
        };
        assert_eq!(room_limit(&hi, h), Some(500 * MIB));
        assert_eq!(room_limit(&p, None), None);
    }

    #[test]
    fn reservations_of_a_listed_chat_count_what_it_has_not_grown_to() {
        let p = Policy::default();
        let mut a = ask(100).unwrap();
        a.held = vec![
            Reservation {
                id: Some("9".into()),
                bytes: 300 * MIB,
                until_ms: NOW + 1,
                seen: false,
            },
            Reservation {
                id: Some("8".into()),
                bytes: 300 * MIB,
                until_ms: NOW + 1,
                seen: false,
            },
        ];
        let s = snap(vec![chat(9, 0, 100)], 100, 1000, Some(a));
        let pl = plan(&s, &decide(&s, NOW, &p), &p);
        assert_eq!(pl.held_bytes, 200 * MIB + 300 * MIB);
        assert_eq!(pl.held_chats, 1);
        // Chat 9 was seen; once it is gone (reaped), its room holds nothing; 8, never seen, does.
        let held = mark_seen(s.room.clone().unwrap().held, &s);
        assert_eq!(
            held.iter().map(|r| r.seen).collect::<Vec<_>>(),
            [true, false]
        );
        let mut a = ask(100).unwrap();
        a.held = held;
        let s = snap(vec![], 100, 1000, Some(a));
        let pl = plan(&s, &decide(&s, NOW, &p), &p);
        assert_eq!((pl.held_bytes, pl.held_chats), (300 * MIB, 1));
        let gone = still_held(
            vec![Reservation {
                id: None,
                bytes: 1,
                until_ms: NOW,
                seen: false,
            }],
            NOW,
        );
        assert!(gone.is_empty());
    }
}

#[cfg(test)]
mod review_tests {
    //! The review of issue 47: what counts as live, whose reservations count, what is never
    //! taken, and what room may do when the sweep's rules are off.
    use super::super::*;
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const MIB: u64 = 1 << 20;

    fn pane(id: u32) -> Pane {
        Pane {
            pid: 100 + id,
            dead: false,
            dead_status: None,
            dead_signal: None,
            exit_unreported: false,
            start_command: String::new(),
            id: Some(100 + id),
            window: Some(id),
            window_index: Some(0),
        }
    }

    /// An idle chat whose own pane is recorded, idle for `idle_s` seconds, holding `mib` MiB.
    fn chat(id: u32, idle_s: i64, mib: u64) -> Session {
        Session {
            tmux_id: TmuxId(id),
            name: format!("ccs-{id}"),
            id: id.to_string(),
            idle: (NOW - idle_s * 1000).to_string(),
            cid: format!("cid-{id}"),
            chat_pane: format!("%{}:{}", 100 + id, 100 + id),
            mem_bytes: Some(mib * MIB),
            panes: vec![pane(id)],
            ..Session::default()
        }
    }

    /// A session that holds no chat: its recorded pane is gone (reaped from its pane, asleep),
    /// what is left is the user's (one pane: `foreign`; two: `shared`).
    fn asleep(id: u32, panes: u32) -> Session {
        let mut s = chat(id, 900, 1);
        s.panes = (0..panes).map(|k| pane(50 + id * 10 + k)).collect();
        s
    }

    fn ask(need: Need, for_id: Option<&str>, held: Vec<Reservation>) -> Option<RoomAsk> {
        Some(RoomAsk {
            need,
            for_id: for_id.map(String::from),
            held,
        })
    }

    fn held(id: Option<&str>, mib: u64) -> Reservation {
        Reservation {
            id: id.map(String::from),
            bytes: mib * MIB,
            until_ms: NOW + 1,
            seen: false,
        }
    }

    fn reaped(out: &[Decision]) -> Vec<(String, ReapReason)> {
        out.iter()
            .filter(|d| d.action() == Action::Reap)
            .filter_map(|d| Some((d.id.clone(), d.reap_reason()?)))
            .collect()
    }

    fn with(p: Policy, f: impl FnOnce(&mut Policy)) -> Policy {
        let mut p = p;
        f(&mut p);
        p
    }

    #[test]
    fn review_rows() {
        let max = |n| {
            with(Policy::default(), |p| {
                p.max_live = Some(n);
                p.shared_session = SharedSession::Pane;
            })
        };
        let mem = |used: u64| HostMemory {
            used_bytes: used * MIB,
            limit_bytes: Some(1000 * MIB),
        };
        let exited = {
            let mut s = chat(7, 900, 1);
            s.panes[0].dead = true;
            s.panes[0].dead_status = Some(0);
            s
        };
        let floor0 = |p: Policy| with(p, |p| p.min_idle_ms = 0);
        type Row = (
            &'static str,
            Policy,
            Snapshot,
            Vec<(&'static str, ReapReason)>,
            Option<(bool, usize)>,
        );
        let s = |sessions: Vec<Session>, host: Option<HostMemory>, room: Option<RoomAsk>| {
            Snapshot {
                sessions,
                host,
                room,
                ..Snapshot::default()
            }
            .reparsed()
        };
        let table: Vec<Row> = vec![
            (
                "1: an asleep session (its pane reaped, one user pane left) is no live chat",
                max(2),
                s(
                    vec![chat(1, 900, 1), chat(2, 600, 1), asleep(3, 1)],
                    None,
                    None,
                ),
                vec![],
                None,
            ),
            (
                "1: nor is one with two user panes left (shared, its recorded pane gone)",
                max(2),
                s(
                    vec![chat(1, 900, 1), chat(2, 600, 1), asleep(3, 2)],
                    None,
                    None,
                ),
                vec![],
                None,
            ),
            (
                "1: a session marked @ccs_asleep is no chat, whatever its record names",
                max(2),
                s(
                    vec![
                        chat(1, 900, 1),
                        chat(2, 600, 1),
                        Session {
                            asleep: NOW.to_string(),
                            ..chat(3, 900, 1)
                        },
                    ],
                    None,
                    None,
                ),
                vec![],
                None,
            ),
            (
                "1: room within max-live: asleep sessions are not counted, nothing goes",
                max(3),
                s(
                    vec![chat(1, 900, 1), chat(2, 600, 1), asleep(3, 1), asleep(4, 2)],
                    None,
                    ask(Need::Bytes(MIB), None, vec![]),
                ),
                vec![],
                Some((true, 2)),
            ),
            (
                "1: auto need is the median of the chats, not of asleep sessions",
                Policy::default(),
                s(
                    vec![chat(1, 900, 100), asleep(3, 1), asleep(4, 1)],
                    Some(mem(0)),
                    ask(Need::Auto, None, vec![]),
                ),
                vec![],
                Some((true, 1)),
            ),
            (
                "2: the hook's own chat does not count its own spawn's reservation",
                Policy::default(),
                s(
                    vec![chat(1, 900, 100), chat(9, 0, 50)],
                    Some(mem(800)),
                    ask(
                        Need::Bytes(150 * MIB),
                        Some("9"),
                        vec![held(Some("9"), 150)],
                    ),
                ),
                vec![],
                Some((true, 1)),
            ),
            (
                "2: a spawn asked again does not count its own earlier reservation",
                max(2),
                s(
                    vec![chat(1, 900, 1)],
                    None,
                    ask(Need::Bytes(MIB), Some("9"), vec![held(Some("9"), 1)]),
                ),
                vec![],
                Some((true, 1)),
            ),
            (
                "2: nor its bytes",
                Policy::default(),
                s(
                    vec![chat(1, 900, 100)],
                    Some(mem(700)),
                    ask(
                        Need::Bytes(150 * MIB),
                        Some("9"),
                        vec![held(Some("9"), 150)],
                    ),
                ),
                vec![],
                Some((true, 1)),
            ),
            (
                "9: floor 0: a chat inside another's reservation is never taken",
                floor0(max(2)),
                s(
                    vec![chat(8, 5, 1), chat(1, 0, 1)],
                    None,
                    ask(Need::Bytes(MIB), None, vec![held(Some("8"), 1)]),
                ),
                vec![("1", ReapReason::Room)],
                Some((true, 1)),
            ),
            (
                "9: the hook's own chat, going (exited), is not taken off the live count again",
                floor0(max(1)),
                s(
                    vec![exited.clone()],
                    None,
                    ask(Need::Bytes(MIB), Some("7"), vec![]),
                ),
                vec![("7", ReapReason::Exited)],
                Some((true, 0)),
            ),
            (
                "9: floor 0: the hook's own chat is never taken",
                floor0(max(1)),
                s(
                    vec![chat(9, 5, 1), chat(1, 0, 1)],
                    None,
                    ask(Need::Bytes(MIB), Some("9"), vec![]),
                ),
                // Two live chats, at most one: max-live takes the other one, never the new.
                vec![("1", ReapReason::MaxLive)],
                Some((true, 0)),
            ),
            (
                "10: rules off (a cgroup limit alone): room does not reap the exited chat",
                Policy::default(),
                s(
                    vec![chat(1, 900, 100), exited.clone()],
                    Some(mem(500)),
                    ask(Need::Bytes(100 * MIB), None, vec![]),
                ),
                vec![],
                Some((true, 2)),
            ),
            (
                "11: a chat of unknown size frees nothing known: room for memory stops at it",
                Policy::default(),
                s(
                    vec![
                        Session {
                            mem_bytes: None,
                            ..chat(1, 900, 100)
                        },
                        chat(2, 600, 100),
                        chat(3, 300, 100),
                    ],
                    Some(mem(800)),
                    ask(Need::Bytes(150 * MIB), None, vec![]),
                ),
                vec![],
                Some((false, 3)),
            ),
            (
                "11: sizes do not matter to max-live alone",
                max(2),
                s(
                    vec![
                        Session {
                            mem_bytes: None,
                            ..chat(1, 900, 100)
                        },
                        chat(2, 600, 100),
                    ],
                    None,
                    ask(Need::Bytes(150 * MIB), None, vec![]),
                ),
                vec![("1", ReapReason::Room)],
                Some((true, 1)),
            ),
            (
                "12: a limit known, the memory in use not: no room, nothing taken",
                with(Policy::default(), |p| {
                    p.mem_high = Some(MemThreshold::Bytes(900 * MIB))
                }),
                s(
                    vec![chat(1, 900, 100)],
                    None,
                    ask(Need::Bytes(100 * MIB), None, vec![]),
                ),
                vec![],
                Some((false, 1)),
            ),
        ];
        // Every row is run, and every row that fails is said.
        let mut failed = Vec::new();
        for (what, p, snap, want, plan_want) in table {
            let run = std::panic::catch_unwind(|| {
                let out = decide(&snap, NOW, &p);
                let want: Vec<(String, ReapReason)> =
                    want.into_iter().map(|(i, r)| (i.to_string(), r)).collect();
                assert_eq!(reaped(&out), want, "{what}");
                if let Some((fits, live)) = plan_want {
                    let pl = plan(&snap, &out, &p);
                    assert_eq!((pl.fits, pl.live), (fits, live), "{what}: {pl:?}");
                    if what.contains("median") {
                        assert_eq!(pl.need_bytes, 100 * MIB, "{what}");
                    }
                    if what.starts_with("12") {
                        assert!(pl.memory_unknown, "{what}");
                    }
                }
            });
            if run.is_err() {
                failed.push(what);
            }
        }
        assert!(failed.is_empty(), "rows failed: {failed:#?}");
    }

    #[test]
    fn a_reservation_from_beyond_the_hold_is_dropped() {
        let r = |until_ms| Reservation {
            until_ms,
            ..held(None, 1)
        };
        let kept = still_held(vec![r(NOW + HOLD_MS), r(NOW + HOLD_MS + 1), r(NOW)], NOW);
        assert_eq!(kept, vec![r(NOW + HOLD_MS)]);
    }
}
