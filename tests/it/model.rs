//! The handoff protocol, model-checked with Stateright: every interleaving of two reapers, one
//! chat, the studio (`turn begin` / `turn end` / `spawn`), one viewer and the clock, explored
//! breadth first, against the properties the reaper promises.
//!
//! The tmux server is the shared state; each of its commands is one atomic step, as tmux runs a
//! command list with no other client's command in between. A reaper's sweep and teardown are a
//! sequence of steps (observe, clear stale marks, decide and mark, re-check, journal, hook,
//! fence, tombstone, signal, finish); between any two of them it may stall for any number of
//! clock ticks (the clock is an actor of its own), or die. A dead reaper's journal is finished
//! by the other one's next sweep.
//!
//! Where the code decides, the model calls the code's own pure functions: `policy::decide` and
//! `policy::still_reapable` (the decision and the re-check, on a `Session` built from the model's
//! server), `policy::mark_is_stale` / `mark_holds` (with the owner parsed from a real token by
//! `MarkOwner::from_token`), `policy::fence`, and `policy::handoff` (`turn begin`'s answer). What
//! is the model's own (docs/teardown.md, "The model"): the order of the steps, the atomic tmux
//! commands (the test-and-set, the guarded clears, the takeover, `turn begin`'s guarded set),
//! and what a signal does (the chat's processes die, and tmux destroys a session whose pane died).
//!
//! `Rules::Today` is the protocol before fencing (a mark judged by the reader's own limit, the
//! journal after the hook, no fence): the checker must find the interleaving that kills a chat
//! whose turn began. `Rules::Fenced` is the protocol the code runs: no property may fail.
//!
//! `cargo test --test it model::` checks bounded depths (each under a minute on 2 cores);
//! `scripts/model-check` runs the full state space (`CCS_MODEL_DEPTH=0`).

use ccs_reap::core::policy::{
    self, Action as Act, Decision, FenceFail, Handoff, MarkOwner, OwnerSeen, Pane, Policy,
    ReapReason, Session, Snapshot, TurnSeen,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

/// Milliseconds at tick 0 (any time after 1970: the idle stamps must parse).
const BASE: i64 = 1_700_000_000_000;
/// One tick of the model's clock.
const TICK: i64 = 1000;
/// The reapers.
const N: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rules {
    /// Before fencing: stale by the reader's own limit, journal after the hook, no fence.
    Today,
    /// The code's: the owner in the mark, journal before the hook, the fence, takeover.
    Fenced,
}

/// The protocol's parameters.
#[derive(Clone, Debug)]
pub struct Protocol {
    pub rules: Rules,
    /// Each reaper's stale limit in ticks, as it computes it from its own settings (reaper 0
    /// runs a `before` hook, so its limit includes the hook's timeout; reaper 1 has none).
    pub limits: [i64; N],
    /// What a teardown needs after the fence (the grace and the calls that follow), in ticks.
    pub rest: i64,
    /// How long `turn begin` waits for a held chat, in ticks.
    pub deadline: i64,
    /// The clock stops here (a bound on the state space; marks still grow old up to it).
    pub max_time: i64,
    /// Sweeps per reaper, `turn begin`s by the studio, attaches by the viewer.
    pub sweeps: u8,
    pub turns: u8,
    pub attaches: u8,
    /// Whether a reaper may die.
    pub deaths: bool,
    /// The reapers live in different pid namespaces (cannot see each other's liveness).
    pub cross_ns: bool,
}

impl Protocol {
    pub fn new(rules: Rules) -> Protocol {
        Protocol {
            rules,
            limits: [4, 2],
            rest: 1,
            deadline: 6,
            max_time: 7,
            sweeps: 1,
            turns: 1,
            attaches: 1,
            deaths: true,
            cross_ns: false,
        }
    }
}

/// A mark's token, as the model knows it: which reaper, which reap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tok {
    pub owner: u8,
    pub nonce: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mark {
    pub at: i64,
    pub tok: Tok,
}

/// The chat's tmux session, as the server holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Chat {
    /// Which chat this is: 0 the first, 1 the one `spawn` made after it went (a new `$N`).
    pub gen: u8,
    pub mark: Option<Mark>,
    pub turn: bool,
    pub idle_since: i64,
    pub attached: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Journal {
    pub tok: Tok,
    pub gen: u8,
    /// When it was written (its age counts where its owner cannot be checked).
    pub at: i64,
    /// Written before the hook: finished by another reaper only if the tombstone has `tok`.
    pub armed_by_tombstone: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tombstone {
    pub gen: u8,
    pub tok: Tok,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Between sweeps.
    Idle,
    /// Listed the server (`seen`); a dead reaper's journal may be finished now.
    Observed,
    /// Took over a dead reaper's mark (or found its chat gone): about to signal what it left.
    Recovering(Journal, Option<Mark>),
    /// Stale marks cleared: deciding, then the test-and-set.
    Cleared,
    Marked,
    Rechecked,
    Journaled,
    Hooked,
    Fenced,
    Tombstoned,
    Signalled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reaper {
    pub pc: Pc,
    pub alive: bool,
    pub sweeps_left: u8,
    /// The chat as the last listing showed it, and when.
    pub seen: Option<(Chat, i64)>,
    /// The mark of the reap under way.
    pub mark: Option<Mark>,
    pub nonce: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Studio {
    Idle,
    /// `turn begin` asked at tick `since`, waiting for an answer.
    Waiting {
        since: i64,
    },
    /// It answered 0: the turn runs (on chat `gen`).
    Turn {
        gen: u8,
    },
    /// It answered 4: respawn.
    Respawn,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct St {
    pub now: i64,
    pub chat: Option<Chat>,
    pub spawned: u8,
    pub journals: [Option<Journal>; N],
    pub tombstone: Option<Tombstone>,
    pub reapers: [Reaper; N],
    pub studio: Studio,
    pub turns_left: u8,
    pub attaches_left: u8,
    // What happened, for the properties.
    /// A chat was signalled while a turn that `turn begin` answered 0 for ran on it.
    pub killed_a_turn: bool,
    /// A chat was signalled with no tombstone of it.
    pub signalled_without_tombstone: bool,
    /// Two reapers began their own teardown of one chat.
    pub torn_down_twice: bool,
    /// `spawn` found no tombstone for a chat that was reaped.
    pub lost_a_conversation: bool,
    /// Teardowns begun (own, not a dead reaper's finished), per chat.
    pub teardowns: [u8; 2],
    pub reaped_idle: bool,
    pub answered_in_time: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Tick,
    Observe(usize),
    Recover(usize),
    RecoverSignal(usize),
    ClearStale(usize),
    DecideAndMark(usize),
    Recheck(usize),
    Journal(usize),
    Hook(usize),
    Tombstone(usize),
    Fence(usize),
    Signal(usize),
    Finish(usize),
    Die(usize),
    TurnBegin,
    TurnAsk,
    TurnEnd,
    Spawn,
    Attach,
    Detach,
}

fn ms(t: i64) -> i64 {
    BASE + t * TICK
}

fn pid(i: usize) -> i32 {
    100 + i as i32
}

impl Protocol {
    /// The token a reaper writes: the code's format (owner, limit), or an earlier version's.
    fn token(&self, t: Tok) -> String {
        let i = t.owner as usize;
        match self.rules {
            Rules::Fenced => MarkOwner {
                pid: pid(i),
                start: 7,
                pidns: if self.cross_ns { 10 + i as u64 } else { 10 },
                limit_ms: self.limits[i] * TICK,
            }
            .token(&t.nonce.to_string()),
            Rules::Today => format!("r{}x{}x0", pid(i), t.nonce),
        }
    }

    /// The chat as `policy` sees it: a `Session` built from the server's state.
    fn session(&self, c: &Chat, now: i64) -> Session {
        let _ = now;
        Session {
            tmux_id: c.gen as u32,
            name: "ccs-1".into(),
            id: "1".into(),
            attached: c.attached as u32,
            idle: ms(c.idle_since).to_string(),
            turn: if c.turn {
                ms(0).to_string()
            } else {
                String::new()
            },
            cid: format!("c{}", c.gen),
            reaping: c.mark.map(|m| ms(m.at).to_string()).unwrap_or_default(),
            reaper: c.mark.map(|m| self.token(m.tok)).unwrap_or_default(),
            panes: vec![Pane {
                pid: 10,
                dead: false,
                dead_status: None,
                dead_signal: None,
                exit_unreported: false,
                start_command: "claude".into(),
            }],
            ..Session::default()
        }
    }

    fn policy(&self) -> Policy {
        Policy {
            idle_kill_ms: Some(TICK as u64),
            ..Policy::default()
        }
    }

    fn decide(&self, c: &Chat, now: i64) -> Option<Decision> {
        let snap = Snapshot {
            sessions: vec![self.session(c, now)],
            ..Snapshot::default()
        };
        policy::decide(&snap, ms(now), &self.policy()).pop()
    }

    /// What reader `me` can tell of the owner of `m`.
    fn owner_seen(&self, s: &St, me: usize, m: &Mark) -> OwnerSeen {
        self.seen_tok(s, me, m.tok)
    }

    /// What reader `me` can tell of the owner of the reap with token `t` (the studio's commands
    /// live in reaper 0's pid namespace).
    fn seen_tok(&self, s: &St, me: usize, t: Tok) -> OwnerSeen {
        let Some(o) = MarkOwner::from_token(&self.token(t)) else {
            return OwnerSeen::Unknowable;
        };
        let i = (o.pid - 100) as usize;
        if self.cross_ns && i != me {
            return OwnerSeen::Unknowable;
        }
        if s.reapers[i].alive {
            OwnerSeen::Alive
        } else {
            OwnerSeen::Gone
        }
    }

    fn owner(&self, m: &Mark) -> Option<MarkOwner> {
        MarkOwner::from_token(&self.token(m.tok))
    }

    /// Whether reader `me` takes journal `j` for a teardown under way: the code's rule
    /// (`policy::journal_owner_live`, with the owner its token names); before fencing, the
    /// owner's pid looked up as it is.
    fn journal_live(&self, s: &St, me: usize, j: &Journal) -> bool {
        match (self.rules, MarkOwner::from_token(&self.token(j.tok))) {
            (Rules::Fenced, Some(o)) => policy::journal_owner_live(
                self.seen_tok(s, me, j.tok),
                (s.now - j.at) * TICK,
                o.limit_ms,
            ),
            _ => s.reapers[j.tok.owner as usize].alive,
        }
    }

    /// A journal of a teardown under way, as reader `me` judges it (the sweep's `live` set, and
    /// what `turn begin` / `spawn` wait for).
    fn teardown_running(&self, s: &St, me: usize) -> bool {
        (0..N).any(|k| s.journals[k].is_some_and(|j| self.journal_live(s, me, &j)))
    }

    fn stale(&self, s: &St, me: usize, m: &Mark, seen_at: i64) -> bool {
        let seen = self.owner_seen(s, me, m);
        let owner = self.owner(m);
        policy::mark_is_stale(
            &ms(m.at).to_string(),
            owner.as_ref(),
            seen,
            ms(seen_at),
            self.limits[me] * TICK,
        ) && !self.teardown_running(s, me)
    }

    fn holds(&self, s: &St, me: usize, m: &Mark, seen_at: i64) -> bool {
        let seen = self.owner_seen(s, me, m);
        let owner = self.owner(m);
        self.teardown_running(s, me)
            || policy::mark_holds(
                &ms(m.at).to_string(),
                owner.as_ref(),
                seen,
                ms(seen_at),
                self.limits[me] * TICK,
            )
    }

    /// A dead reaper's journal, for reaper `me` to finish.
    fn dead_journal(&self, s: &St, me: usize) -> Option<(usize, Journal)> {
        (0..N).filter(|&k| k != me).find_map(|k| {
            s.journals[k]
                .filter(|j| !self.journal_live(s, me, j))
                .map(|j| (k, j))
        })
    }

    /// The chat's processes get their signal: they die, and tmux destroys the session.
    fn signal(&self, s: &mut St, gen: u8, own: bool) {
        if let Some(c) = s.chat.filter(|c| c.gen == gen) {
            if matches!(s.studio, Studio::Turn { gen: g } if g == gen) || c.turn {
                s.killed_a_turn = true;
            }
            s.chat = None;
        }
        if !matches!(s.tombstone, Some(t) if t.gen == gen) {
            s.signalled_without_tombstone = true;
        }
        if own {
            let n = &mut s.teardowns[gen as usize];
            *n += 1;
            if *n > 1 {
                s.torn_down_twice = true;
            }
        }
        if gen == 0 {
            s.reaped_idle = true;
        }
    }

    /// Abort reaper `i`'s reap before any signal: its mark cleared (only while it is its own),
    /// its journal and tombstone taken back, the sweep over.
    fn abort(&self, s: &mut St, i: usize) {
        let r = s.reapers[i];
        if let (Some(c), Some(m)) = (s.chat.as_mut(), r.mark) {
            if c.mark == Some(m) {
                c.mark = None;
            }
        }
        if let Some(m) = r.mark {
            if s.tombstone.is_some_and(|t| t.tok == m.tok) {
                s.tombstone = None;
            }
        }
        s.journals[i] = None;
        end_sweep(&mut s.reapers[i]);
    }
}

fn end_sweep(r: &mut Reaper) {
    r.pc = Pc::Idle;
    r.seen = None;
    r.mark = None;
    r.sweeps_left = r.sweeps_left.saturating_sub(1);
}

impl Model for Protocol {
    type State = St;
    type Action = Step;

    fn init_states(&self) -> Vec<St> {
        let r = Reaper {
            pc: Pc::Idle,
            alive: true,
            sweeps_left: self.sweeps,
            seen: None,
            mark: None,
            nonce: 0,
        };
        vec![St {
            now: 0,
            chat: Some(Chat {
                gen: 0,
                mark: None,
                turn: false,
                idle_since: -5,
                attached: false,
            }),
            spawned: 0,
            journals: [None; N],
            tombstone: None,
            reapers: [r; N],
            studio: Studio::Idle,
            turns_left: self.turns,
            attaches_left: self.attaches,
            killed_a_turn: false,
            signalled_without_tombstone: false,
            torn_down_twice: false,
            lost_a_conversation: false,
            teardowns: [0; 2],
            reaped_idle: false,
            answered_in_time: false,
        }]
    }

    fn actions(&self, s: &St, out: &mut Vec<Step>) {
        if s.now < self.max_time {
            out.push(Step::Tick);
        }
        for (i, r) in s.reapers.iter().enumerate() {
            if !r.alive {
                continue;
            }
            let step = match r.pc {
                Pc::Idle if r.sweeps_left > 0 => Some(Step::Observe(i)),
                Pc::Idle => None,
                Pc::Observed if self.dead_journal(s, i).is_some() => Some(Step::Recover(i)),
                Pc::Observed => Some(Step::ClearStale(i)),
                Pc::Recovering(..) => Some(Step::RecoverSignal(i)),
                Pc::Cleared => Some(Step::DecideAndMark(i)),
                Pc::Marked => Some(Step::Recheck(i)),
                Pc::Rechecked => Some(match self.rules {
                    Rules::Fenced => Step::Journal(i),
                    Rules::Today => Step::Hook(i),
                }),
                Pc::Journaled => Some(Step::Hook(i)),
                Pc::Hooked => Some(match self.rules {
                    Rules::Fenced => Step::Fence(i),
                    // Today: journal and tombstone together, after the hook, and no fence.
                    Rules::Today => Step::Journal(i),
                }),
                Pc::Fenced => Some(Step::Tombstone(i)),
                Pc::Tombstoned => Some(Step::Signal(i)),
                Pc::Signalled => Some(Step::Finish(i)),
            };
            out.extend(step);
            if self.deaths && r.pc != Pc::Idle {
                out.push(Step::Die(i));
            }
        }
        match s.studio {
            Studio::Idle if s.turns_left > 0 => out.push(Step::TurnBegin),
            Studio::Waiting { .. } => out.push(Step::TurnAsk),
            Studio::Turn { .. } => out.push(Step::TurnEnd),
            Studio::Respawn => out.push(Step::Spawn),
            Studio::Idle => {}
        }
        if let Some(c) = s.chat {
            if !c.attached && s.attaches_left > 0 {
                out.push(Step::Attach);
            }
            if c.attached {
                out.push(Step::Detach);
            }
        }
    }

    fn next_state(&self, last: &St, step: Step) -> Option<St> {
        let mut s = last.clone();
        let now = s.now;
        match step {
            Step::Tick => s.now += 1,
            Step::Observe(i) => {
                let r = &mut s.reapers[i];
                r.seen = s.chat.map(|c| (c, now));
                r.pc = Pc::Observed;
            }
            Step::Recover(i) => self.recover(&mut s, i),
            Step::RecoverSignal(i) => {
                if let Pc::Recovering(j, mine) = s.reapers[i].pc {
                    self.signal(&mut s, j.gen, false);
                    // kill-session, only while it carries the mark we took over.
                    if let (Some(c), Some(m)) = (s.chat, mine) {
                        if c.mark == Some(m) {
                            s.chat = None;
                        }
                    }
                    let k = j.tok.owner as usize;
                    s.journals[k] = None;
                    s.reapers[i].pc = Pc::Observed;
                }
            }
            Step::ClearStale(i) => {
                // Each stale mark is cleared only while it is still the one listed (value and
                // token, checked in the server); its owner's liveness is looked up now.
                let seen = s.reapers[i].seen;
                if let (Some((sc, at)), Some(c)) = (seen, s.chat) {
                    if let Some(m) = sc.mark {
                        if c.gen == sc.gen && c.mark == Some(m) && self.stale(&s, i, &m, at) {
                            if let Some(c) = s.chat.as_mut() {
                                c.mark = None;
                            }
                        }
                    }
                }
                s.reapers[i].pc = Pc::Cleared;
            }
            Step::DecideAndMark(i) => self.decide_and_mark(&mut s, i),
            Step::Recheck(i) => self.recheck(&mut s, i),
            Step::Journal(i) => {
                let r = &mut s.reapers[i];
                let (Some(m), Some((c, _))) = (r.mark, r.seen) else {
                    return None;
                };
                s.journals[i] = Some(Journal {
                    tok: m.tok,
                    gen: c.gen,
                    at: now,
                    armed_by_tombstone: self.rules == Rules::Fenced,
                });
                match self.rules {
                    Rules::Fenced => r.pc = Pc::Journaled,
                    Rules::Today => {
                        s.tombstone = Some(Tombstone {
                            gen: c.gen,
                            tok: m.tok,
                        });
                        r.pc = Pc::Tombstoned;
                    }
                }
            }
            Step::Hook(i) => s.reapers[i].pc = Pc::Hooked,
            Step::Tombstone(i) => {
                let r = &mut s.reapers[i];
                let (Some(m), Some((c, _))) = (r.mark, r.seen) else {
                    return None;
                };
                s.tombstone = Some(Tombstone {
                    gen: c.gen,
                    tok: m.tok,
                });
                r.pc = Pc::Tombstoned;
            }
            Step::Fence(i) => self.fence(&mut s, i),
            Step::Signal(i) => {
                let (c, _) = s.reapers[i].seen?;
                self.signal(&mut s, c.gen, true);
                s.reapers[i].pc = Pc::Signalled;
            }
            Step::Finish(i) => {
                // kill-session (a no-op: the session went with its pane), the audit line, the
                // journal removed, the mark gone with the session.
                s.journals[i] = None;
                end_sweep(&mut s.reapers[i]);
            }
            Step::Die(i) => s.reapers[i].alive = false,
            Step::TurnBegin => {
                s.turns_left -= 1;
                s.studio = Studio::Waiting { since: now };
                return Some(self.turn_ask(s));
            }
            Step::TurnAsk => return Some(self.turn_ask(s)),
            Step::TurnEnd => {
                if let (Studio::Turn { gen }, Some(c)) = (s.studio, s.chat.as_mut()) {
                    if c.gen == gen {
                        c.turn = false;
                        c.idle_since = now;
                    }
                }
                s.studio = Studio::Idle;
            }
            Step::Spawn => {
                // `spawn` waits while a teardown runs, then creates the chat again, resuming the
                // tombstone's conversation.
                if self.teardown_running(&s, 0) || s.chat.is_some_and(|c| c.mark.is_some()) {
                    return None;
                }
                if s.chat.is_none() {
                    if s.tombstone.is_none() {
                        s.lost_a_conversation = true;
                    }
                    s.spawned += 1;
                    s.chat = Some(Chat {
                        gen: s.spawned.min(1),
                        mark: None,
                        turn: false,
                        idle_since: now,
                        attached: false,
                    });
                }
                s.studio = Studio::Idle;
            }
            Step::Attach => {
                if let Some(c) = s.chat.as_mut() {
                    c.attached = true;
                    s.attaches_left -= 1;
                }
            }
            Step::Detach => {
                if let Some(c) = s.chat.as_mut() {
                    c.attached = false;
                    c.idle_since = now;
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a chat is never signalled while a turn that began runs",
                |_, s: &St| !s.killed_a_turn,
            ),
            Property::always(
                "a reaped chat's cid is in a tombstone before its first signal",
                |_, s: &St| !s.signalled_without_tombstone,
            ),
            Property::always("a chat is never torn down twice", |_, s: &St| {
                !s.torn_down_twice
            }),
            Property::always(
                "spawn finds the conversation of a reaped chat",
                |_, s: &St| !s.lost_a_conversation,
            ),
            Property::sometimes("an idle chat is reaped", |_, s: &St| s.reaped_idle),
            Property::sometimes("turn begin answers within its deadline", |_, s: &St| {
                s.answered_in_time
            }),
        ]
    }
}

impl Protocol {
    fn recover(&self, s: &mut St, i: usize) {
        let Some((k, j)) = self.dead_journal(s, i) else {
            return;
        };
        let now = s.now;
        let chat = s.chat.filter(|c| c.gen == j.gen);
        let held = chat.is_some_and(|c| c.mark.is_some_and(|m| m.tok == j.tok));
        match self.rules {
            Rules::Today => {
                if chat.is_some() && !held {
                    s.journals[k] = None;
                } else {
                    s.reapers[i].pc = Pc::Recovering(j, chat.and_then(|c| c.mark));
                }
            }
            Rules::Fenced => {
                let armed = !j.armed_by_tombstone || s.tombstone.is_some_and(|t| t.tok == j.tok);
                if !armed {
                    // Stopped before its first signal: release the chat.
                    if let Some(c) = s.chat.as_mut().filter(|c| held && c.gen == j.gen) {
                        c.mark = None;
                    }
                    s.journals[k] = None;
                } else if chat.is_some() && !held {
                    s.journals[k] = None;
                } else if held {
                    // Take the mark over (compare-and-set), then signal under our own.
                    let r = &mut s.reapers[i];
                    r.nonce += 1;
                    let mine = Mark {
                        at: now,
                        tok: Tok {
                            owner: i as u8,
                            nonce: r.nonce,
                        },
                    };
                    if let Some(c) = s.chat.as_mut() {
                        c.mark = Some(mine);
                    }
                    s.reapers[i].pc = Pc::Recovering(j, Some(mine));
                } else {
                    // The chat is gone: its leftovers are signalled, no session to protect.
                    s.reapers[i].pc = Pc::Recovering(j, None);
                }
            }
        }
    }

    fn decide_and_mark(&self, s: &mut St, i: usize) {
        let now = s.now;
        let Some((seen, at)) = s.reapers[i].seen else {
            end_sweep(&mut s.reapers[i]);
            return;
        };
        let d = self.decide(&seen, at);
        let reap = d.is_some_and(|d| d.action == Act::Reap);
        let held = seen.mark.is_some_and(|m| self.holds(s, i, &m, at));
        if !reap || held {
            end_sweep(&mut s.reapers[i]);
            return;
        }
        // The test-and-set, in the server: same session, no mark, no turn, no client.
        let r = &mut s.reapers[i];
        match s.chat.as_mut() {
            Some(c) if c.gen == seen.gen && c.mark.is_none() && !c.turn && !c.attached => {
                r.nonce += 1;
                let m = Mark {
                    at: now,
                    tok: Tok {
                        owner: i as u8,
                        nonce: r.nonce,
                    },
                };
                c.mark = Some(m);
                r.mark = Some(m);
                r.pc = Pc::Marked;
            }
            _ => end_sweep(r),
        }
    }

    fn recheck(&self, s: &mut St, i: usize) {
        let now = s.now;
        let r = s.reapers[i];
        let (Some(m), Some((seen, _))) = (r.mark, r.seen) else {
            return;
        };
        let ok = match s.chat {
            Some(c) if c.gen == seen.gen && c.mark == Some(m) => {
                let decided = self.decide(&seen, r.seen.map_or(now, |x| x.1));
                let fresh = self.decide(&c, now);
                match (decided, fresh) {
                    (Some(d), Some(f)) => policy::still_reapable(
                        &f,
                        d.idle_ms,
                        ReapReason::Idle,
                        false,
                        &self.policy(),
                    )
                    .is_ok(),
                    _ => false,
                }
            }
            _ => false,
        };
        if ok {
            s.reapers[i].pc = Pc::Rechecked;
        } else {
            self.abort(s, i);
        }
    }

    fn fence(&self, s: &mut St, i: usize) {
        let r = s.reapers[i];
        let (Some(m), Some((seen, _))) = (r.mark, r.seen) else {
            return;
        };
        // One guarded tmux call: exactly our mark, and no client attached since.
        let held = s
            .chat
            .is_some_and(|c| c.gen == seen.gen && c.mark == Some(m) && !c.attached);
        let ok = policy::fence(
            held,
            ms(m.at),
            ms(s.now),
            self.limits[i] * TICK,
            self.rest * TICK,
        );
        match ok {
            Ok(()) if self.cross_ns => {
                // Across pid namespaces the lease is all that protects the mark: the model
                // assumes no stall longer than `rest` between the fence and the first signal
                // (the tombstones' writes between them), so the three are one step.
                s.tombstone = Some(Tombstone {
                    gen: seen.gen,
                    tok: m.tok,
                });
                self.signal(s, seen.gen, true);
                s.reapers[i].pc = Pc::Signalled;
            }
            Ok(()) => s.reapers[i].pc = Pc::Fenced,
            Err(FenceFail::MarkLost | FenceFail::LeaseExpired) => self.abort(s, i),
        }
    }

    /// One `turn begin` call: the guarded set in the server, then the code's answer.
    fn turn_ask(&self, mut s: St) -> St {
        let Studio::Waiting { since } = s.studio else {
            return s;
        };
        let seen = match s.chat.as_mut() {
            Some(c) if c.mark.is_none() => {
                c.turn = true;
                TurnSeen::Started
            }
            Some(_) => TurnSeen::Marked,
            None => TurnSeen::Gone,
        };
        let past = s.now - since > self.deadline;
        match policy::handoff(seen, self.teardown_running(&s, 0), past) {
            Handoff::Go => {
                let gen = s.chat.map_or(0, |c| c.gen);
                s.studio = Studio::Turn { gen };
                s.answered_in_time = true;
            }
            Handoff::Respawn => {
                s.studio = Studio::Respawn;
                s.answered_in_time = true;
            }
            Handoff::Wait => {}
            Handoff::TimedOut => s.studio = Studio::Idle,
        }
        s
    }
}

/// Check `p` breadth first (up to `depth` steps, 0 for all; stopping at the first discovery of
/// `stop_at` when given) and return the checker.
fn check(p: Protocol, depth: usize, stop_at: Option<&'static str>) -> impl Checker<Protocol> {
    let b = p.checker().threads(2);
    let b = if depth > 0 {
        b.target_max_depth(depth)
    } else {
        b
    };
    let b = match stop_at {
        Some(name) => b.finish_when(HasDiscoveries::AnyOf([name].into_iter().collect())),
        None => b,
    };
    let t0 = std::time::Instant::now();
    let c = b.spawn_bfs().join();
    eprintln!(
        "{} unique states, max depth {}, {:.1} s",
        c.unique_state_count(),
        c.max_depth(),
        t0.elapsed().as_secs_f64()
    );
    c
}

fn depth() -> usize {
    match std::env::var("CCS_MODEL_DEPTH") {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            panic!("CCS_MODEL_DEPTH={v:?}: expected a whole number of steps (0 for all)")
        }),
        Err(_) => 16,
    }
}

const KILLS_A_TURN: &str = "a chat is never signalled while a turn that began runs";

#[test]
fn todays_rules_kill_a_chat_whose_turn_began() {
    // Breadth first to the first counterexample, whatever its depth: the shortest one.
    let c = check(Protocol::new(Rules::Today), 0, Some(KILLS_A_TURN));
    let path = c
        .discovery(KILLS_A_TURN)
        .expect("the model of the rules before fencing must find the counterexample");
    let steps: Vec<Step> = path.clone().into_actions();
    eprintln!("counterexample ({} steps): {steps:?}", steps.len());
    // The interleaving of the issue: reaper 0 (the one with a hook, the longer limit) marks the
    // chat and stalls in its hook; reaper 1 takes the mark for stale by its own limit and clears
    // it; `turn begin` answers 0; reaper 0 goes on and signals the chat.
    let pos = |want: Step| steps.iter().position(|s| *s == want);
    let marked = pos(Step::DecideAndMark(0)).expect("reaper 0 marks");
    let hook = pos(Step::Hook(0)).expect("reaper 0 runs its hook");
    let cleared = pos(Step::ClearStale(1)).expect("reaper 1 clears the mark");
    let signal = pos(Step::Signal(0)).expect("reaper 0 signals");
    assert!(
        marked < cleared && cleared < signal && hook < signal,
        "{steps:?}"
    );
    assert!(steps.contains(&Step::TurnBegin), "{steps:?}");
}

#[test]
fn the_fenced_protocol_keeps_every_promise() {
    let c = check(Protocol::new(Rules::Fenced), depth(), None);
    c.assert_properties();
}

#[test]
fn the_fenced_protocol_keeps_every_promise_across_pid_namespaces() {
    let mut p = Protocol::new(Rules::Fenced);
    p.cross_ns = true;
    let c = check(p, depth(), None);
    c.assert_properties();
}
