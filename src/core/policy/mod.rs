//! The decision core: `decide(&Snapshot, now, &Policy) -> Vec<Decision>`.
//!
//! Pure on purpose: no clock, no tmux, no /proc, no files. Everything it needs is in the
//! [`Snapshot`] that the adapters read, so every rule of the contract is a row in a table test.
//! The reaper carries the decisions out; nothing here knows how.

pub mod chat_pane;
mod fence;
mod ids;
mod pressure;
mod recheck;
mod room;
mod types;

pub use fence::*;
pub use ids::*;
pub use recheck::*;
pub use room::{
    auto_need, mark_seen, plan as room_plan, room_limit, still_held, Need, Reservation, RoomAsk,
    RoomPlan, DEFAULT_NEED as ROOM_DEFAULT_NEED, HOLD_MS as ROOM_HOLD_MS,
    MARGIN_PCT as ROOM_MARGIN_PCT,
};
pub use types::*;

fn new(s: &Session, state: State, why: impl Into<String>) -> Decision {
    Decision {
        tmux_id: s.tmux_id,
        name: s.name.clone(),
        id: s.id.clone(),
        ruling: Ruling::Keep,
        state,
        why: why.into(),
        stamp_idle: None,
        stamp_if_unset: false,
        idle_ms: None,
        deadline_ms: None,
        cid: None,
        viewers: 0,
        turn_since_ms: None,
        override_turn: false,
        override_viewers: false,
        warn_for: None,
        warning: None,
    }
}

/// The number of clients that count as viewers under `policy`. Should tmux count more attached
/// clients than it listed, the unlisted ones count: they cannot be judged.
pub fn counted_viewers(s: &Session, now: i64, policy: &Policy) -> usize {
    // Viewers through a linked window or a session group are listed, never counted by tmux in
    // this session's `session_attached`.
    let own = s.clients.iter().filter(|c| c.through.is_none()).count();
    let unlisted = (s.attached as usize).saturating_sub(own);
    unlisted
        + s.clients
            .iter()
            .filter(|c| {
                if policy.orphan_viewers == OrphanViewers::Ignore
                    && c.control_mode
                    && c.orphaned == Some(true)
                {
                    return false;
                }
                if let Some(max) = policy.viewer_max_ms {
                    let since = c.activity_ms.max(c.created_ms);
                    if now.saturating_sub(since) >= max as i64 {
                        return false;
                    }
                }
                true
            })
            .count()
}

/// A debug build's check that `s.opts` is the parse of its raw `@` options: a session edited
/// after its listing without [`Session::reparse`] would be decided on stale options.
fn debug_assert_parsed(s: &Session) {
    debug_assert_eq!(
        s.opts,
        s.parse_options(),
        "session {}: opts is stale, a raw @ option was edited without Session::reparse",
        s.name
    );
}

/// Decide one session by rules 1-8 (the pressure rules come after, over all sessions).
///
/// Long (about 185 lines) on purpose: rules 1-8 in the order of docs/rules.md, each an early
/// return; read top to bottom it is the rule table.
fn decide_one(s: &Session, snap: &Snapshot, now: i64, p: &Policy) -> Decision {
    debug_assert_parsed(s);
    let o = &s.opts;
    // A `@ccs_cid` that is not a valid cid cannot be resumed (nor safely put on a command line).
    let cid = o.cid.clone().or_else(|| s.cmdline_cid.clone());

    // 1. Liveness unknown.
    if let Some(why) = snap.global_problem.as_ref().or(s.problem.as_ref()) {
        let mut d = new(s, State::Unknown, format!("liveness unknown: {why}"));
        d.cid = cid;
        return d;
    }
    let viewers = counted_viewers(s, now, p);
    let override_viewers = viewers < s.clients.len().max(s.attached as usize);
    // Anything in the session besides the chat's own pane, or a pane that is not the chat's.
    let not_alone = chat_pane::judge(s);

    // Exited panes: nothing runs, nothing can be lost. Classified only once the status is known.
    if p.reap_exited && !s.panes.is_empty() && s.panes.iter().all(|x| x.dead) {
        if let Some(kept) = kept_not_alone(s, &not_alone, &cid, viewers) {
            return kept;
        }
        let mut d = new(s, State::Exited, "every pane has exited");
        let known = cid.is_some();
        d.cid = cid;
        d.viewers = viewers;
        if !s.panes.iter().all(Pane::exit_known) {
            d.why = "every pane has exited; waiting for the exit status".into();
        } else if !known && !p.reap_without_cid {
            d.why = "every pane has exited; conversation id unknown: kept".into();
        } else if viewers == 0 {
            d.ruling = Ruling::Reap(ReapReason::Exited);
            d.override_turn = true;
            d.override_viewers = override_viewers;
        } else {
            d.why = "every pane has exited, but a viewer is attached".into();
        }
        return d;
    }

    // 2. A turn is running: by `@ccs_turn`, an activity file, or the agent's own status file
    // (one that cannot be trusted counts as running: a turn may be).
    let turn_set = o.turn.is_some();
    let turn_since = o.turn.and_then(|t| t.since);
    let in_file = snap.busy_ids.contains(&s.id);
    if !turn_set && !in_file {
        if let Some(why) = busy_by_agent(&s.agent_turn) {
            let mut d = new(s, State::Busy, why);
            d.cid = cid;
            d.viewers = viewers;
            return d;
        }
    }
    let mut stuck = None;
    if turn_set {
        let since = turn_since;
        if let (Some(wall), Some(since)) = (p.stuck_wall_ms, since) {
            if now.saturating_sub(since) >= wall as i64 {
                stuck = Some(format!(
                    "turn running for {} ms (limit {wall})",
                    now - since
                ));
            }
        }
        if let (Some(quiet), Some(out)) = (p.stuck_idle_ms, s.output_ms) {
            let from = since.map_or(out, |t| t.max(out));
            if stuck.is_none() && now.saturating_sub(from) >= quiet as i64 {
                stuck = Some(format!("turn silent for {} ms (limit {quiet})", now - from));
            }
        }
    }
    if turn_set || in_file {
        let reapable_stuck = stuck.is_some() && p.reap_stuck && !in_file && !o.pinned;
        if !reapable_stuck {
            let (state, why) = match &stuck {
                Some(w) => (State::Stuck, format!("stuck: {w}")),
                None if turn_set => (State::Busy, "a turn is running".to_string()),
                None => (State::Busy, "listed busy in an activity file".to_string()),
            };
            let mut d = new(s, state, why);
            d.cid = cid;
            d.viewers = viewers;
            d.turn_since_ms = turn_since;
            return d;
        }
    }

    // 3. A viewer is attached: keep and refresh the idle clock.
    if viewers > 0 {
        let mut d = new(s, State::Viewed, format!("{viewers} viewer(s) attached"));
        d.stamp_idle = Some(now);
        d.cid = cid;
        d.viewers = viewers;
        return d;
    }

    if let Some(kept) = kept_not_alone(s, &not_alone, &cid, viewers) {
        return kept;
    }

    if let Some(w) = stuck {
        // A stuck turn that may be reaped: the idle clock does not apply.
        let mut d = new(s, State::Stuck, format!("stuck: {w}"));
        d.turn_since_ms = turn_since;
        d.override_viewers = override_viewers;
        if cid.is_none() && !p.reap_without_cid {
            d.why = format!("stuck: {w}; conversation id unknown, kept");
            return d;
        }
        d.cid = cid;
        d.ruling = Ruling::Reap(ReapReason::Stuck);
        d.override_turn = true;
        return d;
    }

    // A pinned session is never reaped by the idle, memory, max-idle or stuck rules (exited
    // panes, above, are still cleaned up). Its clock runs as any other's.
    if o.pinned {
        let mut d = new(
            s,
            State::Pinned,
            "pinned (@ccs_pin): never reaped while it runs",
        );
        d.cid = cid;
        let since = match o.idle {
            Stamp::At(t) => Some(t),
            Stamp::Unset | Stamp::Garbage => None,
        };
        d.stamp_idle = match since {
            None => Some(now),
            Some(t) if t > now => Some(now),
            Some(_) => None,
        };
        d.stamp_if_unset = o.idle == Stamp::Unset;
        d.idle_ms = Some(since.map_or(0, |t| now.saturating_sub(t).max(0) as u64));
        return d;
    }

    // This session's own limit (`@ccs_idle_kill_ms`), else the policy's. Garbage counts as unset.
    let (idle_kill_ms, warning) = own_limit(&o.own_limit, p);

    // 4. No clock yet (or garbage): start it. Never kill on first sight.
    let Stamp::At(idle_since) = o.idle else {
        let why = if o.idle == Stamp::Unset {
            // True where the decision is only shown (`status`, `--dry-run`) as where a sweep
            // then writes the stamp: the decision itself writes nothing.
            "first sight: no idle clock yet (a sweep starts it)"
        } else {
            "idle stamp did not parse: a sweep restarts the idle clock"
        };
        let mut d = new(s, State::New, why);
        d.stamp_idle = Some(now);
        d.stamp_if_unset = o.idle == Stamp::Unset;
        d.cid = cid;
        d.idle_ms = Some(0);
        d.deadline_ms = idle_kill_ms.map(|k| now + k as i64);
        d.warning = warning;
        return d;
    };

    // 5. A stamp in the future is now, and is rewritten to now: kept as it is, it would hold
    // the session forever.
    let future = idle_since > now;
    let idle_since = idle_since.min(now);
    let idle_ms = (now - idle_since) as u64;

    // 6. Conversation id unknown.
    if cid.is_none() && !p.reap_without_cid {
        let mut d = new(
            s,
            State::NoCid,
            "conversation id unknown: kept so no history is lost",
        );
        d.idle_ms = Some(idle_ms);
        d.override_viewers = override_viewers;
        d.stamp_idle = future.then_some(now);
        d.warning = warning;
        return d;
    }

    // 6b. Turns unseen: nothing tells when a turn runs. Kept, or (opt-in) idle since its last
    // output.
    let (idle_since, idle_ms) = if turns_seen(s, o, snap) {
        (idle_since, idle_ms)
    } else if p.unseen_turns == UnseenTurns::Output {
        let since = s.output_ms.map_or(idle_since, |t| t.clamp(idle_since, now));
        (since, (now - since) as u64)
    } else {
        let mut d = new(s, State::Unseen, UNSEEN_WHY);
        d.cid = cid;
        d.idle_ms = Some(idle_ms);
        d.override_viewers = override_viewers;
        d.stamp_idle = future.then_some(now);
        d.warning = warning;
        return d;
    };
    let deadline_ms = idle_kill_ms.map(|k| idle_since + k as i64);

    let mut d = new(s, State::Idle, String::new());
    d.warning = warning;
    d.cid = cid;
    d.idle_ms = Some(idle_ms);
    d.stamp_idle = future.then_some(now);
    d.deadline_ms = deadline_ms;
    d.override_viewers = override_viewers;
    match idle_kill_ms {
        // 7. Idle long enough.
        Some(k) if idle_ms >= k => {
            d.state = State::Expired;
            d.ruling = Ruling::Reap(ReapReason::Idle);
            d.why = format!("idle for {idle_ms} ms (limit {k})");
        }
        // 8. Keep, with its deadline; warned once per idle period when it comes within
        // CCS_ENGINE_WARN_MS.
        Some(k) => {
            d.why = format!("idle for {idle_ms} ms, reaped in {} ms", k - idle_ms);
            let within = p.warn_ms.is_some_and(|w| k - idle_ms <= w);
            if within && o.warned != Some(idle_since) {
                d.warn_for = Some(idle_since);
            }
        }
        None => d.why = format!("idle for {idle_ms} ms"),
    }
    d
}

/// Why a chat is `unseen` (`status`, the decision's reason).
pub const UNSEEN_WHY: &str = "turns unseen: no hook, turn command or studio has reported this chat (no @ccs_cid, no @ccs_turns), its agent writes no status file, and no activity file is configured: kept, as a turn may be running";

/// How to make an `unseen` chat's turns seen (`status`, `doctor`).
pub const UNSEEN_FIX: &str = "wire the agent's hooks (ccs-reap claude-settings --write ~/.claude/settings.json, or hook-settings for codex and gemini) and restart it, or set CCS_ENGINE_UNSEEN_TURNS=output to judge it by its pane's output";

/// Whether anything tells when this chat's turns run: activity files (every chat's), a running
/// `@ccs_turn`, a valid `@ccs_cid` (set by a hook, the studio or `spawn`: they report turns),
/// `@ccs_turns` (a `turn` command or an agent's hook reported one), or the agent's own status
/// file, trusted. A status file not read yet counts as seen: the reaper
/// reads it before it acts on the decision.
fn turns_seen(s: &Session, o: &Options, snap: &Snapshot) -> bool {
    snap.turns_by_file
        || o.turn.is_some()
        || o.cid.is_some()
        || !s.turns_by.trim().is_empty()
        || matches!(s.agent_turn, AgentTurn::NotRead | AgentTurn::Seen { .. })
}

/// Why the agent's own status file keeps a chat busy: it says `busy`, `waiting` or `shell`, or
/// it cannot be trusted (a turn may be running). `None`: not read, none, or idle.
pub fn busy_by_agent(t: &AgentTurn) -> Option<String> {
    match t {
        AgentTurn::Seen {
            pid,
            busy: true,
            state,
        } => Some(format!(
            "a turn is running by the agent's status file (pid {pid}: {state})"
        )),
        AgentTurn::Untrusted(why) => Some(format!(
            "the agent's status file cannot be trusted, a turn may be running: {why}"
        )),
        _ => None,
    }
}

/// Whether a decision hinges on the agent's status file, not read yet: a chat about to be
/// reaped, or (`for_status`) one whose turns are otherwise unseen.
pub fn needs_agent_turn(d: &Decision, s: &Session, for_status: bool) -> bool {
    s.agent_turn == AgentTurn::NotRead
        && (d.action() == Action::Reap
            || (for_status
                && !valid_cid(s.cid.trim())
                && s.turn.trim().is_empty()
                && s.turns_by.trim().is_empty()))
}

/// A shared session judged as its chat's pane alone (`CCS_ENGINE_SHARED_SESSION=pane`): its WHY
/// says that a reap takes that pane only.
fn pane_only_why(s: &Session, mut d: Decision) -> Decision {
    if let Some(r) = s.pane_only {
        d.why = format!(
            "{}; shared session: only the chat's pane %{} (pid {}) is judged and taken, its {} other pane(s) left alone",
            d.why,
            r.id,
            r.pid,
            s.set_aside.len()
        );
    }
    d
}

/// A session that is not the chat's pane alone ([`chat_pane::judge`]): kept, with what is there.
fn kept_not_alone(
    s: &Session,
    not_alone: &Option<(State, String)>,
    cid: &Option<String>,
    viewers: usize,
) -> Option<Decision> {
    let (state, why) = not_alone.as_ref()?;
    let mut d = new(s, *state, why.clone());
    d.cid = cid.clone();
    d.viewers = viewers;
    Some(d)
}

/// The longest time in ms a limit may name (100 years): anything longer is garbage, so that no
/// sum with a time stamp can overflow.
pub const MAX_MS: u64 = 100 * 365 * 24 * 3_600_000;

impl Session {
    /// Sets [`Session::opts`] from the raw `@` options: done once where the session is built from
    /// tmux's answer, and again by whoever edits a raw field after that.
    pub fn reparse(&mut self) {
        self.opts = self.parse_options();
    }

    /// The session with [`Session::opts`] set from its raw `@` options ([`Session::reparse`]).
    pub fn parsed(mut self) -> Self {
        self.reparse();
        self
    }

    /// Its `@` options, parsed from the raw strings (what [`Session::opts`] holds once set).
    pub fn parse_options(&self) -> Options {
        let idle = self.idle.trim();
        let own = self.idle_kill_ms.trim();
        Options {
            idle: match parse_ms(idle) {
                Some(t) => Stamp::At(t),
                None if idle.is_empty() => Stamp::Unset,
                None => Stamp::Garbage,
            },
            turn: (!self.turn.trim().is_empty()).then(|| Turn {
                since: parse_ms(&self.turn),
            }),
            cid: valid_cid(self.cid.trim()).then(|| self.cid.trim().to_string()),
            pinned: pinned(self),
            own_limit: if own.is_empty() {
                OwnLimit::Unset
            } else {
                match crate::core::units::parse_duration(own)
                    .map(|d| d.ms)
                    .filter(|&k| k <= MAX_MS)
                {
                    Some(k) => OwnLimit::Ms(k),
                    None => OwnLimit::Garbage(own.to_string()),
                }
            },
            warned: parse_ms(&self.warned),
            mark: match parse_ms(&self.reaping) {
                Some(at) => MarkState::At {
                    at,
                    owner: MarkOwner::from_token(&self.reaper),
                },
                None if !self.is_marked() => MarkState::Free,
                None => MarkState::Garbage,
            },
        }
    }
}

impl Snapshot {
    /// The snapshot with every session's [`Session::opts`] set from its raw `@` options
    /// ([`Session::reparse`]): for a snapshot built by hand, as the tests build theirs.
    pub fn reparsed(mut self) -> Self {
        self.sessions.iter_mut().for_each(Session::reparse);
        self
    }
}

/// Whether `@ccs_pin` holds the session: set, and not `0`.
pub fn pinned(s: &Session) -> bool {
    let v = s.pin.trim();
    !v.is_empty() && v != "0"
}

/// The idle limit that applies to `s`: its `@ccs_idle_kill_ms` (`0` = never by idle; a bare
/// number is ms, or with a unit: `90s`, `30m`, `1h`, `2d`, see [`crate::core::units::parse_duration`]),
/// else the policy's; with a warning when the option is garbage. Reaping must be on (the policy's limit or
/// a pressure rule) for a session's own limit to count: it never turns reaping on by itself.
fn own_limit(own: &OwnLimit, p: &Policy) -> (Option<u64>, Option<String>) {
    match own {
        OwnLimit::Unset => (p.idle_kill_ms, None),
        OwnLimit::Ms(_) if !p.enabled() => (None, None),
        OwnLimit::Ms(0) => (None, None),
        OwnLimit::Ms(k) => (Some(*k), None),
        OwnLimit::Garbage(raw) => (
            p.idle_kill_ms,
            Some(format!(
                "@ccs_idle_kill_ms {raw:?} is not a duration ({}; at most 100 years): the global limit applies",
                crate::core::units::DURATION_HINT
            )),
        ),
    }
}

/// The memory threshold in bytes: `CCS_ENGINE_MEM_HIGH` as a size, or as a share of the
/// watched limit (none without a limit).
pub fn mem_limit(policy: &Policy, host: Option<HostMemory>) -> Option<u64> {
    match (policy.mem_high, host) {
        (Some(MemThreshold::Bytes(b)), _) => Some(b),
        (Some(MemThreshold::Percent(pc)), Some(h)) => {
            h.limit_bytes.map(|l| (l as f64 * pc / 100.0) as u64)
        }
        _ => None,
    }
}

/// Decide one session on its own, on fresh data: what the re-check before a reap and the reap of
/// an exited chat ask. `busy`: the ids the activity files mark running. The pressure rules see no
/// other session (they rank a sweep's candidates, which a lone session is not).
pub fn decide_session(
    s: Session,
    busy: &std::collections::HashSet<String>,
    turns_by_file: bool,
    now: i64,
    policy: &Policy,
) -> Option<(Decision, Session)> {
    let snap = Snapshot {
        busy_ids: busy.get(&s.id).cloned().into_iter().collect(),
        sessions: vec![s],
        turns_by_file,
        ..Snapshot::default()
    };
    let d = decide(&snap, now, policy).pop()?;
    let s = snap.sessions.into_iter().next()?;
    Some((d, s))
}

/// Decide every session of the snapshot. One decision per session, in snapshot order: each
/// session by its own rules ([`decide_one`]), then the pressure rules in their order (max-idle,
/// max-live, bloat, then memory and its stall, then room), each over the same ranked candidates
/// and the memory freed so far.
pub fn decide(snap: &Snapshot, now: i64, policy: &Policy) -> Vec<Decision> {
    let mut out: Vec<Decision> = snap
        .sessions
        .iter()
        .map(|s| pane_only_why(s, decide_one(s, snap, now, policy)))
        .collect();
    if snap.global_problem.is_some() {
        return out;
    }
    let eligible = pressure::eligible(snap, &out);
    pressure::max_idle_rule(&mut out, &eligible, policy);
    room::max_live_rule(snap, &mut out, policy);
    pressure::bloat_rule(snap, &mut out, &eligible, policy);
    pressure::memory_rule(snap, &mut out, &eligible, policy);
    room::room_rule(snap, &mut out, policy);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_case::test_case;
    use Action::{Keep, Reap};
    use State::{Busy, Exited, Expired, Foreign, Idle, New, NoCid, Shared, Stuck, Unknown, Viewed};

    const NOW: i64 = 1_800_000_000_000;
    const LIMIT: u64 = 600_000;

    fn pol() -> Policy {
        Policy {
            idle_kill_ms: Some(LIMIT),
            ..Policy::default()
        }
    }

    fn sess(id: u32) -> Session {
        Session {
            tmux_id: TmuxId(id),
            name: format!("ccs-{id}"),
            id: id.to_string(),
            idle: (NOW - 1000).to_string(),
            cid: format!("cid-{id}"),
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

    /// A pane whose process has exited, with what tmux knows of how.
    fn dead(status: Option<i32>, signal: Option<i32>) -> Pane {
        Pane {
            pid: 1,
            dead: true,
            dead_status: status,
            dead_signal: signal,
            exit_unreported: false,
            start_command: String::new(),
            id: None,
            window: None,
            window_index: None,
        }
    }

    fn client(control: bool) -> Client {
        Client {
            pid: 9,
            control_mode: control,
            created_ms: NOW - 10,
            activity_ms: NOW - 10,
            orphaned: Some(false),
            window: None,
            through: None,
        }
    }

    /// [`super::decide`] on a hand-built snapshot, whose raw `@` options a test may edit after
    /// building it: parsed first ([`Snapshot::reparsed`]), as the listing parses them.
    fn decide(snap: &Snapshot, now: i64, p: &Policy) -> Vec<Decision> {
        super::decide(&snap.clone().reparsed(), now, p)
    }

    fn one(s: Session, p: &Policy) -> Decision {
        let snap = Snapshot {
            sessions: vec![s],
            ..Snapshot::default()
        };
        decide(&snap, NOW, p).remove(0)
    }

    type Edit = fn(&mut Session, &mut Snapshot, &mut Policy);

    /// Rule 2 by the agent's status file, and rule 6b: which chats' turns are seen. The chat is
    /// long idle with a cid; each row changes where its cid comes from and what tells its turns.
    #[test]
    fn turns_by_the_status_file_and_unseen_turns() {
        fn seen(busy: bool) -> AgentTurn {
            AgentTurn::Seen {
                pid: 7,
                busy,
                state: if busy { "busy" } else { "idle" }.into(),
            }
        }
        // A cid only on the command line, as a studio that wires nothing starts its claude.
        fn argv_cid(s: &mut Session) {
            s.cid.clear();
            s.cmdline_cid = Some("cid-from-argv".into());
        }
        let table: &[(&str, Edit, Action, State)] = &[
            (
                "@ccs_cid set: seen, reaped",
                |_, _, _| (),
                Action::Reap,
                State::Expired,
            ),
            (
                "@ccs_cid set, status file busy: kept busy",
                |s, _, _| s.agent_turn = seen(true),
                Action::Keep,
                State::Busy,
            ),
            (
                "@ccs_cid set, status file torn: kept busy",
                |s, _, _| s.agent_turn = AgentTurn::Untrusted("torn".into()),
                Action::Keep,
                State::Busy,
            ),
            (
                "argv cid, status file not read yet: reaped, pending the read",
                |s, _, _| argv_cid(s),
                Action::Reap,
                State::Expired,
            ),
            (
                "argv cid, status file idle: reaped",
                |s, _, _| {
                    argv_cid(s);
                    s.agent_turn = seen(false);
                },
                Action::Reap,
                State::Expired,
            ),
            (
                "argv cid, status file busy: kept busy",
                |s, _, _| {
                    argv_cid(s);
                    s.agent_turn = seen(true);
                },
                Action::Keep,
                State::Busy,
            ),
            (
                "argv cid, no status file: unseen",
                |s, _, _| {
                    argv_cid(s);
                    s.agent_turn = AgentTurn::NoFile;
                },
                Action::Keep,
                State::Unseen,
            ),
            (
                "argv cid, no status file, activity files configured: reaped",
                |s, snap, _| {
                    argv_cid(s);
                    s.agent_turn = AgentTurn::NoFile;
                    snap.turns_by_file = true;
                },
                Action::Reap,
                State::Expired,
            ),
            (
                "unseen, by output: old output, reaped",
                |s, _, p| {
                    argv_cid(s);
                    s.agent_turn = AgentTurn::NoFile;
                    s.output_ms = Some(NOW - LIMIT as i64 - 5);
                    p.unseen_turns = UnseenTurns::Output;
                },
                Action::Reap,
                State::Expired,
            ),
            (
                "unseen, by output: recent output, kept idle",
                |s, _, p| {
                    argv_cid(s);
                    s.agent_turn = AgentTurn::NoFile;
                    s.output_ms = Some(NOW - 1000);
                    p.unseen_turns = UnseenTurns::Output;
                },
                Action::Keep,
                State::Idle,
            ),
            (
                "unseen, no cid at all: no-cid first",
                |s, _, _| {
                    s.cid.clear();
                    s.agent_turn = AgentTurn::NoFile;
                },
                Action::Keep,
                State::NoCid,
            ),
        ];
        for (name, edit, action, state) in table {
            let mut s = sess(1);
            s.idle = "1000".into();
            let mut snap = Snapshot::default();
            let mut p = pol();
            edit(&mut s, &mut snap, &mut p);
            snap.sessions = vec![s];
            let d = decide(&snap, NOW, &p).remove(0);
            assert_eq!(
                (d.action(), d.state),
                (*action, *state),
                "{name}: {}",
                d.why
            );
        }
        // The pressure rules never take an unseen chat, and a manual reap refuses one.
        let mut s = sess(1);
        s.idle = "1000".into();
        argv_cid(&mut s);
        s.agent_turn = AgentTurn::NoFile;
        let p = Policy {
            idle_kill_ms: None,
            max_idle: Some(0),
            ..Policy::default()
        };
        let d = one(s, &p);
        assert_eq!((d.action(), d.state), (Action::Keep, State::Unseen));
        assert!(still_reapable(&d, d.idle_ms, ReapReason::Manual, false, &p).is_err());
    }

    /// Long idle: the idle clock set far in the past (rule 8 reaps it, unless a row's change
    /// keeps it).
    fn old(s: &mut Session) {
        s.idle = "1000".into();
    }

    /// Rules 1-8 and their edges, one row each: the action, the state, whether the idle clock is
    /// stamped (to now), and what the row changes of a young chat with a cid.
    #[test_case(Reap, Expired, false, |s, _, _| s.idle = (NOW - LIMIT as i64).to_string() ; "idle exactly at the limit: reaped")]
    #[test_case(Keep, Idle, false, |s, _, _| s.idle = (NOW - LIMIT as i64 + 1).to_string() ; "one ms before the limit: kept")]
    #[test_case(Reap, Expired, false, |s, _, _| old(s) ; "long idle: reaped")]
    #[test_case(Keep, Idle, false, |_, _, _| {} ; "young: kept")]
    #[test_case(Keep, Unknown, false, |s, n, _| { old(s); n.global_problem = Some("tmux failed".into()) } ; "1 tmux error: kept")]
    #[test_case(Keep, Unknown, false, |s, _, _| { old(s); s.problem = Some("row".into()) } ; "1 bad row: kept")]
    #[test_case(Keep, Busy, false, |s, _, _| { old(s); s.turn = "5".into() } ; "2 turn via option: kept")]
    #[test_case(Keep, Busy, false, |s, _, _| { old(s); s.turn = "x".into() } ; "2 garbage turn still busy")]
    #[test_case(Keep, Busy, false, |s, n, _| { old(s); n.busy_ids.insert(s.id.clone()); } ; "2 busy via activity file")]
    #[test_case(Keep, Viewed, true, |s, _, _| { old(s); s.attached = 1; s.clients = vec![client(true)] } ; "3 control-mode client: kept, clock refreshed")]
    #[test_case(Keep, Viewed, true, |s, _, _| { old(s); s.attached = 1; s.clients = vec![client(false)] } ; "3 terminal client: kept")]
    #[test_case(Reap, Expired, false, |s, _, _| { old(s); s.clients = vec![] } ; "3 no client: reaped")]
    #[test_case(Keep, New, true, |s, _, _| s.idle = String::new() ; "4 first sight: stamped, kept")]
    #[test_case(Keep, New, true, |s, _, _| s.idle = "yesterday".into() ; "4 unparseable stamp: restamped")]
    #[test_case(Keep, New, true, |s, _, _| s.idle = "-5".into() ; "4 negative stamp: restamped")]
    #[test_case(Keep, Idle, true, |s, _, _| s.idle = (NOW + 10_000_000).to_string() ; "5 future stamp: now, kept, rewritten to now")]
    #[test_case(Keep, NoCid, false, |s, _, _| { old(s); s.cid = String::new() } ; "6 no cid: kept")]
    #[test_case(Reap, Expired, false, |s, _, p| { old(s); s.cid = String::new(); p.reap_without_cid = true } ; "6 no cid, override: reaped")]
    #[test_case(Reap, Expired, false, |s, _, _| { old(s); s.cid = String::new(); s.cmdline_cid = Some("c".into()) } ; "6 cid from the command line")]
    #[test_case(Keep, Idle, false, |s, _, p| { old(s); p.idle_kill_ms = None } ; "off: never reaped")]
    #[test_case(Keep, Exited, false, |s, _, _| { s.cid = String::new(); s.panes[0] = dead(Some(0), None) } ; "exited, cid unknown: kept")]
    #[test_case(Keep, NoCid, false, |s, _, _| { old(s); s.cid = "x;rm -rf".into(); } ; "garbage @ccs_cid is no cid")]
    #[test_case(Reap, Exited, false, |s, _, _| s.panes[0] = dead(Some(0), None) ; "exited 0: cleaned")]
    #[test_case(Keep, Exited, false, |s, _, _| s.panes[0] = dead(None, None) ; "exited, status unknown yet: kept")]
    #[test_case(Reap, Exited, false, |s, _, _| s.panes[0] = Pane { exit_unreported: true, ..dead(None, None) } ; "exited by a signal tmux < 3.3 cannot name: cleaned")]
    #[test_case(Keep, Shared, false, |s, _, _| { old(s); s.panes.push(dead(Some(1), None)) } ; "one pane of two exited: shared, kept")]
    #[test_case(Keep, Shared, false, |s, _, _| s.panes = vec![dead(Some(1), None), dead(Some(0), None)] ; "every pane of two exited: shared, kept")]
    #[test_case(Reap, Expired, false, |s, _, _| { old(s); s.chat_pane = format!("%{}:{}", s.panes[0].pid, s.panes[0].pid) } ; "the recorded pane alone, long idle: reaped")]
    #[test_case(Keep, Shared, false, |s, _, _| { old(s); s.panes.push(Pane { id: Some(7), window_index: Some(1), ..s.panes[0].clone() }) } ; "a window beside the chat, long idle: shared, kept")]
    #[test_case(Keep, Foreign, false, |s, _, _| { old(s); s.chat_pane = "%7:7".into() } ; "another pane than the recorded one, long idle: foreign, kept")]
    #[test_case(Keep, Viewed, true, |s, _, _| { old(s); s.panes.push(s.panes[0].clone()); s.clients = vec![client(false)] } ; "shared but watched: viewed, the clock refreshed")]
    #[test_case(Keep, Viewed, true, |s, _, _| { old(s); s.clients = vec![Client { through: Some(TmuxId(9)), ..client(false) }] } ; "a viewer through a linked window or a group: kept, the clock refreshed")]
    #[test_case(Reap, Exited, false, |s, _, _| { s.turn = "5".into(); s.panes[0] = dead(None, Some(9)) } ; "exited while busy: cleaned")]
    #[test_case(Keep, Exited, false, |s, _, _| { s.clients = vec![client(false)]; s.panes[0] = dead(Some(0), None) } ; "exited but viewed: kept")]
    #[test_case(Keep, Idle, false, |s, _, p| { p.reap_exited = false; s.panes[0] = dead(Some(0), None) } ; "exited, cleanup off: normal rules")]
    fn rules_table(action: Action, state: State, stamps: bool, edit: Edit) {
        let mut s = sess(1);
        let mut snap = Snapshot::default();
        let mut p = pol();
        edit(&mut s, &mut snap, &mut p);
        snap.sessions = vec![s];
        let d = decide(&snap, NOW, &p).remove(0);
        assert_eq!(
            (d.action(), d.state, d.stamp_idle.is_some()),
            (action, state, stamps),
            "{d:?}"
        );
        if stamps {
            assert_eq!(d.stamp_idle, Some(NOW));
        }
        if d.action() == Action::Reap {
            assert!(d.reap_reason().is_some());
        }
    }

    #[test]
    fn future_stamp_counts_as_now() {
        let mut s = sess(1);
        s.idle = (NOW + 5_000).to_string();
        let d = one(s, &pol());
        assert_eq!(d.idle_ms, Some(0));
        assert_eq!(d.deadline_ms, Some(NOW + LIMIT as i64));
        // ...and is rewritten to now (kept, it would hold the session forever), also when the
        // cid is unknown; a stamp in the past is left alone.
        assert_eq!(d.stamp_idle, Some(NOW));
        let mut s = sess(1);
        s.idle = (NOW + 5_000).to_string();
        s.cid = String::new();
        assert_eq!(one(s, &pol()).stamp_idle, Some(NOW));
        let mut s = sess(1);
        s.idle = (NOW - 5_000).to_string();
        assert_eq!(one(s, &pol()).stamp_idle, None);
    }

    #[test]
    fn cids_never_start_with_a_dash() {
        for (c, ok) in [
            ("abc", true),
            ("a-b_c9", true),
            ("9", true),
            ("-", false),
            ("--dangerously-skip-permissions", false),
            ("-r", false),
            ("", false),
            ("a b", false),
            ("a\tb", false),
        ] {
            assert_eq!(valid_cid(c), ok, "{c:?}");
        }
        // A flag-like @ccs_cid is unknown (rule 6): kept, never put on a command line.
        let mut s = sess(1);
        s.idle = (NOW - LIMIT as i64 - 1).to_string();
        s.cid = "--dangerously-skip-permissions".into();
        let d = one(s, &pol());
        assert_eq!((d.state, d.cid), (State::NoCid, None));
    }

    #[test]
    fn a_session_decided_on_its_own_is_decided_as_in_a_snapshot_of_it_alone() {
        let busy: std::collections::HashSet<String> = ["1".to_string(), "9".to_string()].into();
        let none = std::collections::HashSet::new();
        // (session, busy ids, the state)
        let table = [
            (sess(1), &none, State::Idle),
            (sess(1), &busy, State::Busy),
            (sess(2), &busy, State::Idle),
        ];
        for (s, b, want) in table {
            let snap = Snapshot {
                busy_ids: b.iter().filter(|i| **i == s.id).cloned().collect(),
                sessions: vec![s.clone()],
                ..Snapshot::default()
            };
            let whole = decide(&snap, NOW, &pol()).pop().unwrap();
            let (d, back) = decide_session(s.clone().parsed(), b, false, NOW, &pol()).unwrap();
            assert_eq!(d.state, want, "{}", s.name);
            assert_eq!(
                (d.state, d.action(), d.why),
                (whole.state, whole.action(), whole.why)
            );
            assert_eq!(back.tmux_id, s.tmux_id);
        }
    }

    #[test]
    fn deadline_and_idle_age() {
        let mut s = sess(1);
        s.idle = (NOW - 1000).to_string();
        let d = one(s, &pol());
        assert_eq!(d.idle_ms, Some(1000));
        assert_eq!(d.deadline_ms, Some(NOW - 1000 + LIMIT as i64));
        assert_eq!(d.cid.as_deref(), Some("cid-1"));
    }

    fn two_hours_in_a_turn(s: &mut Session) {
        s.turn = (NOW - 7_200_000).to_string();
    }

    /// A turn begun `turn_ms` ago whose pane printed last `output_ms` ago, under a silence limit
    /// of 10 minutes whose stuck turns are reaped.
    fn silence(s: &mut Session, p: &mut Policy, turn_ms: i64, output_ms: i64) {
        s.turn = (NOW - turn_ms).to_string();
        s.output_ms = Some(NOW - output_ms);
        p.stuck_idle_ms = Some(600_000);
        p.reap_stuck = true;
    }

    /// Long idle, watched by `c` alone.
    fn viewer(s: &mut Session, c: Client) {
        s.idle = "1000".into();
        s.clients = vec![c];
    }

    /// A client whose tmux client process is gone (control mode or a terminal).
    fn orphan(control: bool) -> Client {
        Client {
            orphaned: Some(true),
            ..client(control)
        }
    }

    /// A control-mode client attached `attached_ms` ago, its last input `input_ms` ago.
    fn since(attached_ms: i64, input_ms: i64) -> Client {
        Client {
            created_ms: NOW - attached_ms,
            activity_ms: NOW - input_ms,
            ..client(true)
        }
    }

    type E = fn(&mut Session, &mut Policy);

    /// Stuck turns, orphaned and long-attached viewers, one row each: the action, the state, the
    /// reap's reason, and what the row changes of a young chat with a cid.
    #[test_case(Keep, Busy, None, |s, _| two_hours_in_a_turn(s) ; "long turn, no wall limit: busy")]
    #[test_case(Keep, Stuck, None, |s, p| { two_hours_in_a_turn(s); p.stuck_wall_ms = Some(3_600_000) } ; "long turn over wall limit: stuck, reported")]
    #[test_case(Reap, Stuck, Some(ReapReason::Stuck), |s, p| { two_hours_in_a_turn(s); p.stuck_wall_ms = Some(3_600_000); p.reap_stuck = true } ; "stuck and reap_stuck: reaped")]
    #[test_case(Keep, Busy, None, |s, p| { s.turn = (NOW - 1000).to_string(); p.stuck_wall_ms = Some(3_600_000); p.reap_stuck = true } ; "turn under wall limit: busy")]
    #[test_case(Reap, Stuck, Some(ReapReason::Stuck), |s, p| { silence(s, p, 900_000, 700_000) } ; "silent turn: stuck")]
    #[test_case(Keep, Busy, None, |s, p| { silence(s, p, 900_000, 1000) } ; "turn printing: busy")]
    #[test_case(Keep, Busy, None, |s, p| { silence(s, p, 1000, 900_000) } ; "silence counts from the turn start")]
    #[test_case(Keep, Viewed, None, |s, p| { two_hours_in_a_turn(s); s.clients = vec![client(false)]; p.stuck_wall_ms = Some(1); p.reap_stuck = true } ; "stuck but viewed: kept")]
    #[test_case(Keep, Stuck, None, |s, p| { two_hours_in_a_turn(s); s.cid.clear(); p.stuck_wall_ms = Some(1); p.reap_stuck = true } ; "stuck, no cid: kept")]
    #[test_case(Keep, Viewed, None, |s, _| viewer(s, orphan(true)) ; "orphan control client counted by default")]
    #[test_case(Reap, Expired, Some(ReapReason::Idle), |s, p| { viewer(s, orphan(true)); p.orphan_viewers = OrphanViewers::Ignore } ; "orphan control client ignored")]
    #[test_case(Keep, Viewed, None, |s, p| { viewer(s, orphan(false)); p.orphan_viewers = OrphanViewers::Ignore } ; "orphan terminal client still counts")]
    #[test_case(Keep, Viewed, None, |s, p| { viewer(s, client(true)); p.orphan_viewers = OrphanViewers::Ignore } ; "live control client counts when ignoring orphans")]
    #[test_case(Reap, Expired, Some(ReapReason::Idle), |s, p| { viewer(s, since(100_000, 100_000)); p.viewer_max_ms = Some(50_000) } ; "viewer idle past max: ignored")]
    #[test_case(Keep, Viewed, None, |s, p| { viewer(s, since(100_000, 10)); p.viewer_max_ms = Some(50_000) } ; "viewer with recent input: counts")]
    fn stuck_and_viewer_policies(
        action: Action,
        state: State,
        reason: Option<ReapReason>,
        edit: E,
    ) {
        let mut s = sess(1);
        let mut p = pol();
        edit(&mut s, &mut p);
        let d = one(s, &p);
        assert_eq!(
            (d.action(), d.state, d.reap_reason()),
            (action, state, reason),
            "{d:?}"
        );
        if d.reap_reason() == Some(ReapReason::Stuck) {
            assert!(d.override_turn);
        }
    }

    /// A discounted viewer is an override of a tmux fact.
    #[test]
    fn a_discounted_viewer_is_an_override() {
        let mut s = sess(1);
        s.attached = 1;
        viewer(&mut s, orphan(true));
        let d = one(
            s,
            &Policy {
                orphan_viewers: OrphanViewers::Ignore,
                ..pol()
            },
        );
        assert!(d.override_viewers && !d.override_turn);
    }

    fn idle_sessions(ages: &[(u32, i64, u64)]) -> Snapshot {
        Snapshot {
            sessions: ages
                .iter()
                .map(|&(id, age, mem)| Session {
                    idle: (NOW - age).to_string(),
                    mem_bytes: Some(mem),
                    ..sess(id)
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    fn reaped(d: &[Decision]) -> Vec<(u32, ReapReason)> {
        let mut v: Vec<_> = d
            .iter()
            .filter(|d| d.action() == Action::Reap)
            .map(|d| (d.tmux_id.get(), d.reap_reason().unwrap()))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    #[test]
    fn max_idle_keeps_the_newest() {
        let p = Policy {
            idle_kill_ms: None,
            max_idle: Some(2),
            min_idle_ms: 60_000,
            ..Policy::default()
        };
        // ids 1..5 idle 500 s, 400 s, 300 s, 200 s, 30 s (under the floor).
        let snap = idle_sessions(&[
            (1, 500_000, 1),
            (2, 400_000, 1),
            (3, 300_000, 1),
            (4, 200_000, 1),
            (5, 30_000, 1),
        ]);
        let d = decide(&snap, NOW, &p);
        // 5 eligible, keep 2: the 3 oldest go; all are past the floor.
        assert_eq!(
            reaped(&d),
            vec![
                (1, ReapReason::MaxIdle),
                (2, ReapReason::MaxIdle),
                (3, ReapReason::MaxIdle)
            ]
        );
        // Under the floor nothing goes even when over the cap.
        let snap = idle_sessions(&[(1, 30_000, 1), (2, 20_000, 1), (3, 10_000, 1)]);
        assert_eq!(reaped(&decide(&snap, NOW, &p)), vec![]);
        // Ties on age: the lower tmux id (older session) goes first.
        let snap = idle_sessions(&[(7, 100_000, 1), (3, 100_000, 1)]);
        let p1 = Policy {
            max_idle: Some(1),
            ..p.clone()
        };
        assert_eq!(
            reaped(&decide(&snap, NOW, &p1)),
            vec![(3, ReapReason::MaxIdle)]
        );
    }

    #[test]
    fn sessions_being_reaped_are_not_taken_twice_and_count_as_freed() {
        let p = Policy {
            idle_kill_ms: None,
            mem_high: Some(MemThreshold::Bytes(1000)),
            min_idle_ms: 60_000,
            ..Policy::default()
        };
        let mut snap = idle_sessions(&[(1, 500_000, 300), (2, 400_000, 300), (3, 300_000, 300)]);
        snap.host = Some(HostMemory {
            used_bytes: 1500,
            limit_bytes: None,
        });
        // Without a reap in flight: 1 and 2 go (1500 -> 1200 -> 900).
        assert_eq!(
            reaped(&decide(&snap, NOW, &p)),
            vec![(1, ReapReason::Memory), (2, ReapReason::Memory)]
        );
        // 1 is being reaped (a watcher-started sweep before its memory is freed): only 2 goes.
        snap.sessions[0].reaping = (NOW - 100).to_string();
        assert_eq!(
            reaped(&decide(&snap, NOW, &p)),
            vec![(2, ReapReason::Memory)]
        );
        // 1 and 2 in flight: the projection is under the limit already.
        snap.sessions[1].reaping = (NOW - 100).to_string();
        assert_eq!(reaped(&decide(&snap, NOW, &p)), vec![]);
    }

    #[test]
    fn a_memory_stall_past_the_psi_limit_takes_the_oldest_idle() {
        let p = Policy {
            idle_kill_ms: None,
            mem_psi: Some(10.0),
            min_idle_ms: 60_000,
            ..Policy::default()
        };
        let mut snap = idle_sessions(&[(1, 500_000, 300), (2, 400_000, 300), (3, 30_000, 300)]);
        // (stall %, reaped)
        type Row = (Option<f64>, Vec<(u32, ReapReason)>);
        let table: &[Row] = &[
            (None, vec![]),
            (Some(9.9), vec![]),
            (Some(10.0), vec![(1, ReapReason::Memory)]),
            (Some(80.0), vec![(1, ReapReason::Memory)]),
        ];
        for (stall, want) in table {
            snap.stall_pct = *stall;
            assert_eq!(&reaped(&decide(&snap, NOW, &p)), want, "{stall:?}");
        }
        // Never one under the floor, even stalled.
        let snap = Snapshot {
            stall_pct: Some(50.0),
            ..idle_sessions(&[(3, 30_000, 300)])
        };
        assert_eq!(reaped(&decide(&snap, NOW, &p)), vec![]);
    }

    #[test]
    fn pins_own_limits_warnings_and_bloat() {
        let p = Policy {
            warn_ms: Some(120_000),
            session_mem_max: Some(1000),
            min_idle_ms: 60_000,
            ..pol()
        };
        type Edit = fn(&mut Session);
        // (what, edit, state, reaped for, warned)
        let table: &[(&str, Edit, State, Option<ReapReason>, bool)] = &[
            (
                "idle past the limit",
                |s| s.idle = (NOW - 700_000).to_string(),
                State::Expired,
                Some(ReapReason::Idle),
                false,
            ),
            (
                "pinned past the limit",
                |s| {
                    s.idle = (NOW - 700_000).to_string();
                    s.pin = "1".into()
                },
                State::Pinned,
                None,
                false,
            ),
            (
                "pin 0 is no pin",
                |s| {
                    s.idle = (NOW - 700_000).to_string();
                    s.pin = "0".into()
                },
                State::Expired,
                Some(ReapReason::Idle),
                false,
            ),
            (
                "pinned and busy: busy",
                |s| {
                    s.pin = "x".into();
                    s.turn = NOW.to_string()
                },
                State::Busy,
                None,
                false,
            ),
            (
                "pinned and bloated",
                |s| {
                    s.idle = (NOW - 300_000).to_string();
                    s.pin = "1".into();
                    s.mem_bytes = Some(5000)
                },
                State::Pinned,
                None,
                false,
            ),
            (
                "own limit, past it",
                |s| {
                    s.idle = (NOW - 120_000).to_string();
                    s.idle_kill_ms = "60000".into()
                },
                State::Expired,
                Some(ReapReason::Idle),
                false,
            ),
            (
                "own limit with a unit, past it",
                |s| {
                    s.idle = (NOW - 120_000).to_string();
                    s.idle_kill_ms = "1m".into()
                },
                State::Expired,
                Some(ReapReason::Idle),
                false,
            ),
            (
                "own limit with a unit, under it",
                |s| {
                    s.idle = (NOW - 700_000).to_string();
                    s.idle_kill_ms = "1h".into()
                },
                State::Idle,
                None,
                false,
            ),
            (
                "own limit, under it",
                |s| {
                    s.idle = (NOW - 700_000).to_string();
                    s.idle_kill_ms = "86400000".into()
                },
                State::Idle,
                None,
                false,
            ),
            (
                "own limit 0: never by idle",
                |s| {
                    s.idle = (NOW - 7_000_000).to_string();
                    s.idle_kill_ms = "0".into()
                },
                State::Idle,
                None,
                false,
            ),
            (
                "own limit garbage: the global one",
                |s| {
                    s.idle = (NOW - 700_000).to_string();
                    s.idle_kill_ms = "soon".into()
                },
                State::Expired,
                Some(ReapReason::Idle),
                false,
            ),
            (
                "within the warning",
                |s| s.idle = (NOW - 500_000).to_string(),
                State::Idle,
                None,
                true,
            ),
            (
                "within, already warned for this period",
                |s| {
                    s.idle = (NOW - 500_000).to_string();
                    s.warned = (NOW - 500_000).to_string()
                },
                State::Idle,
                None,
                false,
            ),
            (
                "within, warned for an older period",
                |s| {
                    s.idle = (NOW - 500_000).to_string();
                    s.warned = (NOW - 900_000).to_string()
                },
                State::Idle,
                None,
                true,
            ),
            (
                "bloated past the floor",
                |s| {
                    s.idle = (NOW - 70_000).to_string();
                    s.mem_bytes = Some(5000)
                },
                State::Expired,
                Some(ReapReason::Bloat),
                false,
            ),
            (
                "bloated under the floor",
                |s| {
                    s.idle = (NOW - 10_000).to_string();
                    s.mem_bytes = Some(5000)
                },
                State::Idle,
                None,
                false,
            ),
            (
                "not bloated",
                |s| {
                    s.idle = (NOW - 70_000).to_string();
                    s.mem_bytes = Some(900)
                },
                State::Idle,
                None,
                false,
            ),
        ];
        for (what, edit, state, reason, warned) in table {
            let mut s = sess(1);
            edit(&mut s);
            let d = decide(
                &Snapshot {
                    sessions: vec![s],
                    ..Snapshot::default()
                },
                NOW,
                &p,
            )
            .remove(0);
            assert_eq!(
                (d.state, d.reap_reason(), d.warn_for.is_some()),
                (*state, *reason, *warned),
                "{what}: {d:?}"
            );
        }
        let mut s = sess(1);
        s.idle_kill_ms = "soon".into();
        let d = decide(
            &Snapshot {
                sessions: vec![s],
                ..Snapshot::default()
            },
            NOW,
            &p,
        )
        .remove(0);
        assert!(d.warning.unwrap().contains("\"soon\""));
    }

    #[test]
    fn memory_pressure_projection() {
        let p = Policy {
            idle_kill_ms: None,
            mem_high: Some(MemThreshold::Bytes(1000)),
            min_idle_ms: 60_000,
            ..Policy::default()
        };
        let mut snap = idle_sessions(&[
            (1, 500_000, 300),
            (2, 400_000, 300),
            (3, 300_000, 300),
            (4, 30_000, 300),
        ]);
        // 1500 used, limit 1000: reaping 1 (300) leaves 1200, 2 leaves 900: stop.
        snap.host = Some(HostMemory {
            used_bytes: 1500,
            limit_bytes: None,
        });
        assert_eq!(
            reaped(&decide(&snap, NOW, &p)),
            vec![(1, ReapReason::Memory), (2, ReapReason::Memory)]
        );
        // Never reached: nothing.
        snap.host = Some(HostMemory {
            used_bytes: 900,
            limit_bytes: None,
        });
        assert_eq!(reaped(&decide(&snap, NOW, &p)), vec![]);
        // Always exceeded: every eligible one, never the young one (4), in age order.
        snap.host = Some(HostMemory {
            used_bytes: 1 << 40,
            limit_bytes: None,
        });
        assert_eq!(
            reaped(&decide(&snap, NOW, &p)),
            vec![
                (1, ReapReason::Memory),
                (2, ReapReason::Memory),
                (3, ReapReason::Memory)
            ]
        );
        // A percentage needs a limit.
        let pc = Policy {
            mem_high: Some(MemThreshold::Percent(50.0)),
            ..p.clone()
        };
        snap.host = Some(HostMemory {
            used_bytes: 1400,
            limit_bytes: Some(2000),
        });
        assert_eq!(
            reaped(&decide(&snap, NOW, &pc)),
            vec![(1, ReapReason::Memory), (2, ReapReason::Memory)]
        );
        // Idle reaps count in the projection first.
        let both = Policy {
            idle_kill_ms: Some(450_000),
            ..p.clone()
        };
        snap.host = Some(HostMemory {
            used_bytes: 1250,
            limit_bytes: None,
        });
        assert_eq!(
            reaped(&decide(&snap, NOW, &both)),
            vec![(1, ReapReason::Idle)]
        );
    }

    #[test]
    fn pressure_never_takes_busy_viewed_unstamped_or_unknown() {
        let p = Policy {
            idle_kill_ms: None,
            mem_high: Some(MemThreshold::Bytes(1)),
            max_idle: Some(0),
            min_idle_ms: 0,
            ..Policy::default()
        };
        let mut snap = idle_sessions(&[
            (1, 500_000, 10),
            (2, 500_000, 10),
            (3, 500_000, 10),
            (4, 500_000, 10),
            (5, 500_000, 10),
        ]);
        snap.sessions[0].turn = "1".into();
        snap.sessions[1].clients = vec![client(true)];
        snap.sessions[2].idle = String::new();
        snap.sessions[3].cid = String::new();
        snap.host = Some(HostMemory {
            used_bytes: 1 << 40,
            limit_bytes: None,
        });
        assert_eq!(
            reaped(&decide(&snap, NOW, &p)),
            vec![(5, ReapReason::MaxIdle)]
        );
        snap.global_problem = Some("x".into());
        assert_eq!(reaped(&decide(&snap, NOW, &p)), vec![]);
    }

    #[test]
    fn cid_from_command_lines() {
        let table: &[(&[&str], Option<&str>)] = &[
            (&["claude", "--resume", "abc-1"], Some("abc-1")),
            (&["claude", "--resume=abc"], Some("abc")),
            (&["claude", "--session-id", "u-u"], Some("u-u")),
            (&["claude", "--session-id=u"], Some("u")),
            (&["claude", "-r", "x1"], Some("x1")),
            (
                &[
                    "sh",
                    "-c",
                    "exec claude --model x --resume 'c9' --mcp-config m.json",
                ],
                Some("c9"),
            ),
            (&["claude", "--resume"], None),
            (&["claude", "--resume", "--verbose"], None),
            (&["claude"], None),
            (&["claude", "--resume", "a;rm"], None),
            (&["python3", "server.py", "-r", "esm"], None),
            (&["node", "-r", "esm", "x.js"], None),
            (&["sh", "-c", "node -r esm mcp.js --resume zz"], None),
            (
                &[
                    "node",
                    "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js",
                    "--resume",
                    "z",
                ],
                Some("z"),
            ),
            (&["/opt/bin/claude", "-r", "q1"], Some("q1")),
            (
                &["\"/work/scripts/fake-claude", "--resume", "c-1\""],
                Some("c-1"),
            ),
        ];
        for (argv, want) in table {
            assert_eq!(cid_from_argv(argv).as_deref(), *want, "{argv:?}");
        }
    }

    #[test]
    fn which_processes_are_claude() {
        let table: &[(&[&str], bool)] = &[
            (&["claude", "--resume", "a"], true),
            (&["/usr/local/bin/claude"], true),
            (
                &[
                    "node",
                    "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js",
                ],
                true,
            ),
            (
                &["/bin/sh", "/work/scripts/fake-claude", "--resume", "x"],
                true,
            ),
            (&["sh", "-c", "exec claude --resume x"], false),
            (&["node", "mcp.js", "--claude"], false),
            (&["bash"], false),
        ];
        for (argv, want) in table {
            assert_eq!(is_claude_process(argv), *want, "{argv:?}");
        }
        for argv in [
            &["claude", "--resume", "-x"][..],
            &["claude", "--resume=--dangerously-skip-permissions"],
            &["claude", "--session-id", "-"],
        ] {
            assert_eq!(cid_from_argv(argv), None, "{argv:?}");
        }
    }

    #[test]
    fn the_re_check_before_a_reap() {
        use ReapReason::*;
        let p = Policy {
            min_idle_ms: 1000,
            ..pol()
        };
        let d = |state: State, reason: Option<ReapReason>, idle: Option<u64>, cid: bool| {
            let mut d = new(&sess(1), state, "why");
            d.ruling = reason.map_or(Ruling::Keep, Ruling::Reap);
            d.idle_ms = idle;
            d.cid = cid.then(|| "c".to_string());
            d
        };
        // (fresh decision, idle age decided on, reason, force, allowed)
        let table: &[(Decision, Option<u64>, ReapReason, bool, bool)] = &[
            (
                d(State::Expired, Some(Idle), Some(9), true),
                Some(9),
                Idle,
                false,
                true,
            ),
            (
                d(State::Busy, None, None, true),
                Some(9),
                Idle,
                false,
                false,
            ),
            (
                d(State::Viewed, None, None, true),
                Some(9),
                Idle,
                false,
                false,
            ),
            (d(State::Busy, None, None, true), Some(9), Idle, true, true),
            (
                d(State::Idle, None, Some(5000), true),
                Some(4000),
                Memory,
                false,
                true,
            ),
            // Its clock restarted since (a short turn): not the session chosen.
            (
                d(State::Idle, None, Some(3000), true),
                Some(4000),
                Memory,
                false,
                false,
            ),
            // Under the floor now.
            (
                d(State::Idle, None, Some(500), true),
                Some(400),
                MaxIdle,
                false,
                false,
            ),
            (
                d(State::Viewed, None, Some(5000), true),
                Some(4000),
                MaxIdle,
                false,
                false,
            ),
            (
                d(State::Stuck, Some(Stuck), None, true),
                None,
                Stuck,
                false,
                true,
            ),
            (d(State::Busy, None, None, true), None, Stuck, false, false),
            (
                d(State::Exited, Some(Exited), None, true),
                None,
                Exited,
                false,
                true,
            ),
            (
                d(State::Idle, None, Some(1), true),
                None,
                Manual,
                false,
                true,
            ),
            (
                d(State::NoCid, None, Some(1), false),
                None,
                Manual,
                false,
                false,
            ),
            (
                d(State::Idle, None, Some(1), false),
                None,
                Manual,
                false,
                false,
            ),
            (
                d(State::Viewed, None, None, true),
                None,
                Manual,
                false,
                false,
            ),
        ];
        for (i, (fresh, decided, reason, force, ok)) in table.iter().enumerate() {
            let got = still_reapable(fresh, *decided, *reason, *force, &p);
            assert_eq!(got.is_ok(), *ok, "row {i}: {got:?}");
        }
    }

    /// The contract of `opts`: parsed once, where the session is built from tmux's answer. An
    /// edit of a raw field changes nothing the rules read until [`Session::reparse`]; and a debug
    /// build's `decide` refuses a session whose `opts` is not the parse of its raw fields, so no
    /// test (nor caller) decides on stale options unseen.
    #[test]
    fn a_raw_option_edited_counts_only_once_reparsed() {
        let mut s = sess(1).parsed();
        let before = s.opts.clone();
        assert_eq!(before, s.parse_options());
        s.idle = String::new();
        s.pin = "1".into();
        assert_eq!(s.opts, before, "an edit alone leaves the parse as it was");
        s.reparse();
        assert_eq!((s.opts.idle, s.opts.pinned), (Stamp::Unset, true));
        // The listing parses: what tmux said is what `opts` holds.
        assert_eq!(Session::default().opts, Session::default().parse_options());
        if cfg!(debug_assertions) {
            let mut stale = sess(1).parsed();
            stale.turn = "5".into();
            let snap = Snapshot {
                sessions: vec![stale],
                ..Snapshot::default()
            };
            let decided = std::panic::catch_unwind(|| super::decide(&snap, NOW, &pol()));
            assert!(decided.is_err(), "decide read a stale session");
        }
    }

    #[test]
    fn options_are_parsed_once_as_the_rules_read_them() {
        let o = |f: &dyn Fn(&mut Session)| {
            let mut s = Session::default();
            f(&mut s);
            s.parse_options()
        };
        let none = o(&|_| {});
        assert_eq!(none.idle, Stamp::Unset);
        assert_eq!(none.turn, None);
        assert_eq!(none.cid, None);
        assert!(!none.pinned);
        assert_eq!(none.own_limit, OwnLimit::Unset);
        assert_eq!(none.warned, None);
        assert_eq!(none.mark, MarkState::Free);
        // The mark and the owner its token names; an earlier version's token names none.
        let owner = MarkOwner {
            pid: 42,
            start: 7,
            pidns: 9,
            timens: Some(3),
            limit_ms: 1000,
        };
        let marked = o(&|s| {
            s.reaping = "1700000000002".into();
            s.reaper = owner.token("n1");
        });
        assert_eq!(
            marked.mark,
            MarkState::At {
                at: 1_700_000_000_002,
                owner: Some(owner)
            }
        );
        let old = o(&|s| {
            s.reaping = "1700000000002".into();
            s.reaper = "r42x0x0".into();
        });
        assert_eq!(
            old.mark,
            MarkState::At {
                at: 1_700_000_000_002,
                owner: None
            }
        );
        assert_eq!(o(&|s| s.reaping = "#{x}".into()).mark, MarkState::Garbage);
        let set = o(&|s| {
            s.idle = " 1700000000000 ".into();
            s.turn = "1700000000001".into();
            s.cid = " abc-1 ".into();
            s.pin = "1".into();
            s.idle_kill_ms = "30m".into();
            s.warned = "1700000000000".into();
        });
        assert_eq!(set.idle, Stamp::At(1_700_000_000_000));
        assert_eq!(
            set.turn,
            Some(Turn {
                since: Some(1_700_000_000_001)
            })
        );
        assert_eq!(set.cid.as_deref(), Some("abc-1"));
        assert!(set.pinned);
        assert_eq!(set.own_limit, OwnLimit::Ms(1_800_000));
        assert_eq!(set.warned, Some(1_700_000_000_000));
        // Garbage: a turn that runs all the same, a clock that restarts, a cid never used, a
        // pin of `0`, a limit that is not a duration.
        let odd = o(&|s| {
            s.idle = "soon".into();
            s.turn = "yes".into();
            s.cid = "-rf".into();
            s.pin = "0".into();
            s.idle_kill_ms = " 1h30m ".into();
        });
        assert_eq!(odd.idle, Stamp::Garbage);
        assert_eq!(odd.turn, Some(Turn { since: None }));
        assert_eq!(odd.cid, None);
        assert!(!odd.pinned);
        assert_eq!(odd.own_limit, OwnLimit::Garbage("1h30m".into()));
    }

    #[test]
    fn reap_marks() {
        // (mark, observed for, stale, holds), 1000 ms to go stale: a mark's own time (the
        // writer's clock) plays no part, only how long this reader has seen it.
        let past = &*Box::leak((NOW - 100_000).to_string().into_boxed_str());
        let future = &*Box::leak((NOW + 5000).to_string().into_boxed_str());
        let table: &[(&str, Option<i64>, bool, bool)] = &[
            ("", Some(5000), false, false),
            ("  ", None, false, false),
            (past, None, false, true),
            (past, Some(1000), false, true),
            (past, Some(1001), true, false),
            (future, Some(1001), true, false),
            (future, Some(10), false, true),
            ("not a time", None, true, false),
            ("#{session_name}", None, true, false),
        ];
        for (mark, obs, stale, holds) in table {
            // A mark of an earlier version (no owner in its token): the reader's limit.
            let seen = OwnerSeen::Unknowable;
            assert_eq!(
                mark_is_stale(mark, None, seen, *obs, 1000),
                *stale,
                "{mark:?}"
            );
            assert_eq!(mark_holds(mark, None, seen, *obs, 1000), *holds, "{mark:?}");
        }
    }

    #[test]
    fn which_sessions_need_a_command_line_cid() {
        let d = |state: State| new(&sess(1), state, "");
        let with = |cid: &str| {
            let mut s = sess(1);
            s.cid = cid.into();
            s
        };
        // (state, @ccs_cid, for status, wanted)
        let table: &[(State, &str, bool, bool)] = &[
            (State::NoCid, "", false, true),
            (State::Stuck, "", false, true),
            (State::Exited, "", false, true),
            (State::Idle, "", false, false),
            (State::Busy, "", false, false),
            (State::Busy, "", true, true),
            (State::NoCid, "good-cid", false, false),
            (State::NoCid, "-flag", false, true),
            (State::Idle, "good", true, false),
        ];
        for (state, cid, status, want) in table {
            assert_eq!(
                needs_cmdline_cid(&d(*state), &with(cid), *status),
                *want,
                "{state:?} {cid:?} {status}"
            );
        }
    }

    #[test]
    fn ms_parsing() {
        for (s, want) in [
            ("123", Some(123)),
            (" 5 ", Some(5)),
            ("", None),
            ("0", None),
            ("1e3", None),
            ("-1", None),
            ("12a", None),
        ] {
            assert_eq!(parse_ms(s), want, "{s:?}");
        }
    }

    #[test]
    fn ids() {
        for (s, ok) in [
            ("1", true),
            ("a_B-9", true),
            ("", false),
            ("a b", false),
            ("é", false),
            ("a.b", false),
            (&"a".repeat(MAX_ID_LEN), true),
            (&"a".repeat(MAX_ID_LEN + 1), false),
            (&"7".repeat(300), false),
        ] {
            assert_eq!(valid_id(s), ok, "{s:?}");
            assert_eq!(invalid_id_why(s).is_none(), ok, "{s:?}");
        }
        // The longest id's files (and their temp names, `.<id>.json.<pid>` with the largest pid)
        // fit in a file name.
        let id = "a".repeat(MAX_ID_LEN);
        assert!(format!(".{id}.json.{}", 4_194_304).len() <= 255);
        // A cid has the id limit (a longer one could not be resumed: `claude --resume <cid>`).
        assert!(valid_cid(&"c".repeat(MAX_ID_LEN)));
        assert!(!valid_cid(&"c".repeat(MAX_ID_LEN + 1)));
    }
}
