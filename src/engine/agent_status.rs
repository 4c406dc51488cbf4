//! One more source of truth beside the hooks: the agent's own per-process status file (Claude
//! Code's `<config dir>/sessions/<pid>.json`, see `crate::agents`). An interrupted turn (Escape
//! during a reply, at a permission dialog or during a foreground tool) fires no hook, so
//! `@ccs_turn` would stay set until the next prompt's `Stop`; the status file turns `idle` within
//! half a second. A chat busy by `@ccs_turn` for longer than [`TURN_FLOOR_MS`] whose agent says
//! `idle` has its turn ended (`@ccs_turn` cleared and the idle clock started, only while
//! `@ccs_turn` is still the value listed); `busy`, `shell` and `waiting` keep it busy, as does a
//! file that cannot be trusted (missing, unreadable, torn, of an unknown version, or not the live
//! process's: its `pid` and `procStart` are checked against `/proc`).
//!
//! Only candidates are read (a few files per sweep, never the process table): the cost is linear
//! in the chats that have been busy longer than the floor.

use crate::adapters::agent_proc;
use crate::agents::{self, Agent, AgentState};
use crate::core::policy::{AgentTurn, Decision, Session, Snapshot, State};

/// How long a turn must have run before the status file is read: a prompt just submitted is
/// `busy` in the file only 0.3-0.6 s after its hook set `@ccs_turn` (measured, 2.1.332), and a
/// read in that window must not end it.
pub const TURN_FLOOR_MS: i64 = 10_000;

/// The sessions (indices into `snap.sessions`) whose agent's status file is worth reading: busy
/// by `@ccs_turn` alone (not by an activity file), with a turn value of plain digits that began at
/// least [`TURN_FLOOR_MS`] before `now`.
pub fn candidates(snap: &Snapshot, decisions: &[Decision], now: i64) -> Vec<usize> {
    decisions
        .iter()
        .zip(&snap.sessions)
        .enumerate()
        .filter(|(_, (d, s))| {
            let turn = s.turn.trim();
            d.state == State::Busy
                && !snap.busy_ids.contains(&s.id)
                && !turn.is_empty()
                && turn.bytes().all(|b| b.is_ascii_digit())
                && d.turn_since_ms
                    .is_some_and(|t| now.saturating_sub(t) >= TURN_FLOOR_MS)
        })
        .map(|(i, _)| i)
        .collect()
}

/// What the status file of a session's agent says, when it can be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSeen {
    /// The agent's pid (the pane's process, or its child).
    pub pid: u32,
    pub state: AgentState,
}

/// Why a status file is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotUsed {
    /// It says nothing of this process: another process's (a reused pid), a version whose
    /// format is not known, or a file or environment this reaper may not read. As if there were
    /// none.
    NotThis(String),
    /// Torn or garbage, read twice: it may say `busy` at the next read.
    Torn(String),
}

impl std::fmt::Display for NotUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotUsed::NotThis(w) | NotUsed::Torn(w) => f.write_str(w),
        }
    }
}

/// The agent of one of `s`'s live panes (the pane's process or one of its children, this user's
/// only) and its status file, checked: `Ok(None)` when no pane runs an agent that writes one, or
/// it has not written it (yet); `Err` why the file is not used.
pub fn read(s: &Session) -> Result<Option<StatusSeen>, NotUsed> {
    for pane in s.panes.iter().filter(|p| !p.dead) {
        for p in agent_proc::pane_and_children(pane.pid) {
            let Some(agent) = agent_of(&p.argv) else {
                continue;
            };
            let (Some(path_of), Some(parse)) = (agent.status_path, agent.parse_status) else {
                continue;
            };
            let env = agent_proc::environ(p.pid).ok_or_else(|| {
                NotUsed::NotThis(format!(
                    "the environment of {} (pid {}) is unreadable",
                    agent.name, p.pid
                ))
            })?;
            let path = path_of(&env, p.pid).map_err(|e| NotUsed::NotThis(e.to_string()))?;
            // Rewritten in place: a read may catch the new text with the old one's tail. Once more
            // at once, then the next sweep.
            let mut last = NotUsed::Torn(String::new());
            for _ in 0..2 {
                let Some(text) = agent_proc::read_small_file(&path)
                    .map_err(|e| NotUsed::NotThis(e.to_string()))?
                else {
                    return Ok(None);
                };
                match parse(&text) {
                    Ok(st) => {
                        let now = agent_proc::start_time(p.pid);
                        if now.is_none_or(|t| !st.is_of(p.pid, t)) {
                            return Err(NotUsed::NotThis(format!(
                                "{} is stale: it names pid {} started at {}, not the live process",
                                path.display(),
                                st.pid,
                                st.proc_start
                            )));
                        }
                        return Ok(Some(StatusSeen {
                            pid: p.pid,
                            state: st.state,
                        }));
                    }
                    Err(e @ agents::StatusError::UnknownVersion(_)) => {
                        return Err(NotUsed::NotThis(format!("{}: {e}", path.display())))
                    }
                    Err(e) => last = NotUsed::Torn(format!("{}: {e}", path.display())),
                }
            }
            return Err(last);
        }
    }
    Ok(None)
}

/// What the status file of `s`'s agent says of its turn, as the decision reads it
/// ([`AgentTurn`]): read as [`read`] reads it.
pub fn turn_of(s: &Session) -> AgentTurn {
    match read(s) {
        Ok(Some(seen)) => AgentTurn::Seen {
            pid: seen.pid,
            busy: seen.state.keeps_busy(),
            state: format!("{:?}", seen.state).to_lowercase(),
        },
        Ok(None) => AgentTurn::NoFile,
        // Says nothing of this process: as if there were no file (its why in the log).
        Err(NotUsed::NotThis(why)) => {
            tracing::debug!(session = %s.name, why = %why, "the agent's status file is not used");
            AgentTurn::NoFile
        }
        Err(NotUsed::Torn(why)) => AgentTurn::Untrusted(why),
    }
}

/// The agent whose program `argv` runs (its first word, or the second after an interpreter).
fn agent_of(argv: &[String]) -> Option<&'static Agent> {
    agents::ALL
        .iter()
        .copied()
        .find(|a| argv.iter().take(2).any(|w| (a.is_program_word)(w)))
}
