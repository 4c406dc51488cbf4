//! The way back (issue 30): `spawn` brings a chat back from its tombstone and checks that the
//! agent is up before it answers 0; `resume <id>` (attach, or spawn then attach); `forget <id>`;
//! tombstones that age out. The rules of one agent (which flags, where its transcript is, what
//! its status file says) are its descriptor's (`crate::agents`); the I/O is here.

use parking_lot::Mutex;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::adapters::clock::now_ms;
use crate::adapters::metrics::Metrics;
use crate::adapters::state::{AuditLine, Outcome, StateDir, StateError, Tombstone};
use crate::adapters::tmux::TmuxError;
use crate::config::Config;
use crate::core::policy::{ReapReason, TmuxId};
use crate::core::time::rfc3339;
use crate::engine::context::Reaper;
use crate::engine::record::record;

mod look;
mod start;
pub use start::start;

/// Why the way back did not go through (the commands turn it into their error).
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("{0}")]
    Tmux(#[from] TmuxError),
    #[error("{0}")]
    State(#[from] StateError),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Gone(String),
    /// `spawn` made room first and there was none (why): the chat was not started.
    #[error("no room for a new chat: {0}")]
    NoRoom(String),
}

/// How long a resumed (or afresh started) agent must stay alive, with no other sign that it is
/// up, to count as up. The pinned Claude Code 2.1.332 gives up on a `--resume` whose
/// conversation it cannot find after 1.1-1.5 s (2.5-2.9 s on a loaded 2-core machine), and on a
/// `--session-id` already in use after 0.6-1.3 s (tests/e2e/NOTES.md, "The agent seam"); in
/// `claude_resume` with two real claudes on 2 cores it took 4.0-4.5 s, and once more than 6 s:
/// twice that. Its `SessionStart` hook or its status file says it is up much sooner (0.5-2.5 s).
pub const RESUME_SETTLE: Duration = Duration::from_secs(12);

/// How long any other command must live to count as started: one that dies at once (a typo, a
/// crash on start) takes tmux a moment to notice.
pub const SETTLE: Duration = Duration::from_millis(200);

/// What `spawn` starts, and from what.
pub struct Start<'a> {
    pub name: &'a str,
    pub id: &'a str,
    pub cwd: &'a Path,
    /// The command: as given after `--`, or replayed from the tombstone (`replayed`).
    pub cmd: &'a [String],
    pub replayed: bool,
    pub flag_cid: Option<&'a str>,
    pub tomb: Option<&'a Tombstone>,
    pub tomb_cid: Option<String>,
    /// The tombstone on disk when spawn read it (`tomb` may instead be one made from the last
    /// known conversation of a chat lost with its server): a failed start marks the tombstone
    /// only while this is still what is there.
    pub on_disk: Option<&'a Tombstone>,
    /// The caller wants a command that cannot be given the conversation started without it.
    pub new_conversation: bool,
    /// Make room for the chat first (`spawn` under a limit), once every check passed.
    pub room: Option<&'a dyn MakeRoom>,
}

/// What makes room for a chat just before it starts (`spawn` under a limit, given by its
/// caller): `Err(why)` when there is none, and the chat is not started.
pub trait MakeRoom: Send + Sync {
    fn make(&self) -> RoomFuture<'_>;
}

impl std::fmt::Debug for dyn MakeRoom + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MakeRoom")
    }
}

/// The room being made.
pub type RoomFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), NoRoomLeft>> + Send + 'a>>;

/// There is no room for the chat: what is left that cannot be taken (why).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoRoomLeft(pub String);

/// What `resume <id>` did before it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resumed {
    /// The chat was live.
    Live,
    /// It was asleep and was brought back from its tombstone.
    Spawned,
}

/// An audit line that is no reap: `outcome` for chat `id`, from its tombstone.
fn tomb_line(cfg: &Config, id: &str, t: Option<&Tombstone>, outcome: Outcome) -> AuditLine {
    let mut l = AuditLine::begin(
        rfc3339(now_ms()),
        &format!("{}{id}", cfg.prefix),
        id,
        TmuxId(0),
        t.and_then(|t| t.cid.clone()),
        t.map_or(ReapReason::Manual, |t| t.reason),
        None,
    );
    l.outcome = outcome;
    l
}

/// `forget <id>`: remove a sleeping chat's tombstone (a malformed one too), with an audit line.
pub fn forget(r: &Reaper, id: &str) -> Result<Option<Tombstone>, ResumeError> {
    if let Some(why) = crate::core::policy::invalid_id_why(id) {
        return Err(ResumeError::Refused(why));
    }
    let path = r.state.tombstone_path(id);
    // Under the tombstone lock: a failing spawn marks the tombstone it read only while it is
    // still there, so no order of the two brings a forgotten chat back.
    let _lock = r.state.lock_tombstones()?;
    let t = match r.state.read_tombstone(id) {
        Ok(None) => {
            return Err(ResumeError::Gone(format!(
                "no tombstone for chat {id} ({})",
                path.display()
            )))
        }
        Ok(Some(t)) => Some(t),
        Err(e) => {
            tracing::warn!(error = %e, "forgetting a tombstone that does not read");
            None
        }
    };
    r.state.remove_tombstone(id)?;
    let mut l = tomb_line(&r.cfg, id, t.as_ref(), Outcome::Forgotten);
    l.error = Some(format!("tombstone {} removed by forget", path.display()));
    record(&r.state, &r.metrics, &l)?;
    Ok(t)
}

/// How often the sweep looks for tombstones past `CCS_REAP_TOMBSTONE_MAX_AGE`.
pub const AGE_OUT_EVERY: Duration = Duration::from_secs(3600);

/// Remove the tombstones past their age, each with an audit line (`aged-out`): at the first
/// sweep of this process and then once every [`AGE_OUT_EVERY`], never every sweep. Returns how
/// many went. `last`: when this process last looked (a handle of the reaper's).
pub fn age_out(
    cfg: &Config,
    state: &StateDir,
    metrics: &Metrics,
    last: &Mutex<Option<Instant>>,
) -> usize {
    {
        let mut last = last.lock();
        if last.is_some_and(|t| t.elapsed() < AGE_OUT_EVERY) {
            return 0;
        }
        *last = Some(Instant::now());
    }
    let max = cfg.tombstone_max_age;
    let mut n = 0;
    for (id, path) in state.aged_tombstones(max) {
        let t = state.read_tombstone(&id).ok().flatten();
        if let Err(e) = state.remove_tombstone(&id) {
            tracing::warn!(error = %e, "failed to remove an aged tombstone");
            continue;
        }
        let mut l = tomb_line(cfg, &id, t.as_ref(), Outcome::AgedOut);
        l.error = Some(format!(
            "tombstone {} unused for more than {max:?} (CCS_REAP_TOMBSTONE_MAX_AGE): removed",
            path.display()
        ));
        tracing::info!(id = %id, path = %path.display(), "tombstone aged out");
        let _ = record(state, metrics, &l);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::start::{agent_of, extra_env};
    use super::*;
    use crate::agents::{self, StartMode};

    fn w(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_agent_is_the_commands_else_the_tombstones_else_claude() {
        let tomb = |agent: Option<&str>| Tombstone {
            id: "1".into(),
            cid: None,
            reaped_at: String::new(),
            reason: ReapReason::Manual,
            cwd: None,
            session: None,
            socket: None,
            token: None,
            agent: agent.map(String::from),
            argv: None,
            start_failed: None,
            env: None,
            options: None,
        };
        let gem = tomb(Some("gemini"));
        let unknown = tomb(Some("vim"));
        let table: &[(&[&str], Option<&Tombstone>, &str, bool)] = &[
            (&["codex", "-m", "o3"], Some(&gem), "codex", true),
            (&["env", "X=1", "gemini"], None, "gemini", true),
            (&["claude"], None, "claude", true),
            (&["my-wrapper"], Some(&gem), "gemini", false),
            (&["my-wrapper"], Some(&unknown), "claude", false),
            (&["my-wrapper"], None, "claude", false),
        ];
        for (cmd, t, want, runs) in table {
            let (a, r) = agent_of(&w(cmd), *t);
            assert_eq!((a.name, r.is_some()), (*want, *runs), "{cmd:?}");
        }
    }

    #[test]
    fn the_start_environment_and_a_resumes() {
        let kv = |v: Vec<(String, String)>| {
            v.into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kv(extra_env(&agents::GEMINI, true, Some(StartMode::Resume))),
            ["GEMINI_CLI_NO_RELAUNCH=true"]
        );
        // Not given to a command that does not run the agent.
        assert!(extra_env(&agents::GEMINI, false, Some(StartMode::Fresh)).is_empty());
        assert!(extra_env(&agents::CLAUDE, true, Some(StartMode::Fresh)).is_empty());
        let resume: Vec<String> = agents::CLAUDE
            .resume_env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            kv(extra_env(&agents::CLAUDE, true, Some(StartMode::Resume))),
            resume
        );
        assert!(extra_env(&agents::CODEX, true, None).is_empty());
    }
}
