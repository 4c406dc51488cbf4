//! The way back (issue 30): `spawn` brings a chat back from its tombstone and checks that the
//! agent is up before it answers 0; `resume <id>` (attach, or spawn then attach); `forget <id>`;
//! tombstones that age out. The rules of one agent (which flags, where its transcript is, what
//! its status file says) are its descriptor's (`crate::agents`); the I/O is here.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::adapters::agent_proc;
use crate::adapters::clock::now_ms;
use crate::adapters::metrics::Metrics;
use crate::adapters::procs;
use crate::adapters::state::{AuditLine, Ended, Outcome, StateDir, StateError, Tombstone};
use crate::adapters::tmux::{Created, Tmux, TmuxError};
use crate::agents::claude::is_uuid;
use crate::agents::{self, Agent, ArgvError, StartMode};
use crate::config::Config;
use crate::core::policy::ReapReason;
use crate::core::time::rfc3339;
use crate::engine::context::{socket_path, Reaper};
use crate::engine::record::record;

mod look;
use look::{held_elsewhere, transcript};

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
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// How the new agent was seen to be up, or not.
enum Verdict {
    Up(String),
    /// The session went altogether (a tmux server exiting as it was reached).
    Vanished,
    Died(Option<i32>),
}

/// The agent's environment as far as its files go (`HOME`, its [`Agent::env_vars`]): ours, then
/// the tmux server's global environment (what a new pane gets), then the `env` words of the
/// command.
async fn agent_env(tmux: &Tmux, agent: &Agent, cmd: &[String]) -> Vec<(String, String)> {
    let mut names = vec!["HOME"];
    names.extend(agent.env_vars);
    let mut env: Vec<(String, String)> = names
        .iter()
        .filter_map(|n| std::env::var(n).ok().map(|v| (n.to_string(), v)))
        .collect();
    let mut apply = |changes: Vec<(String, Option<String>)>| {
        for (k, v) in changes
            .into_iter()
            .filter(|(k, _)| names.contains(&k.as_str()))
        {
            env.retain(|(n, _)| *n != k);
            if let Some(v) = v {
                env.push((k, v));
            }
        }
    };
    apply(tmux.global_env(&names).await);
    apply(agents::argv_env(cmd));
    env
}

/// Start the chat and check it is up. `Ok(false)`: a session of that name exists (a concurrent
/// spawn won).
///
/// About 90 lines: the start is one guarded `new-session` and the look that it came up, with the
/// tombstone's argv, the agent's words and the options set in between; kept on one screen so that
/// what is written before the check and what after reads in its order.
pub async fn start(r: &Reaper, s: Start<'_>) -> Result<bool, ResumeError> {
    let (agent, runs) = agent_of(s.cmd, s.tomb);
    let own = (agent.cid_in_argv)(s.cmd);
    let mut cid = own
        .clone()
        .or(s.flag_cid.map(String::from))
        .or(s.tomb_cid.clone());
    let failed_before = s
        .tomb
        .is_some_and(|t| t.start_failed.is_some() && t.cid == cid);
    let where_from = || match (s.replayed, s.tomb) {
        (true, Some(_)) => format!(
            "the command line kept in {}",
            r.state.tombstone_path(s.id).display()
        ),
        _ => format!("the command {:?}", s.cmd),
    };
    // One conversation, one live agent: a second agent on it would write into the same
    // transcript, and the studio would not know which one answers.
    if let Some(c) = &cid {
        if let Some((other, pid)) = held_elsewhere(r, s.name, c).await? {
            return Err(ResumeError::Refused(format!(
                "conversation {c} is held by a live agent in {other} (pane pid {pid}): refusing to start a second one on it in {} (stop that one first, or start this chat afresh with another id)",
                s.name
            )));
        }
    }
    let env = agent_env(&r.tmux, agent, s.cmd).await;
    let mut mode = None;
    // Whether the conversation goes with the command (a new conversation with
    // --new-conversation does not: its agent's hook tells the new id).
    let mut carried = true;
    let mut argv = s.cmd.to_vec();
    if let Some(c) = &cid {
        // The agents' ids are UUIDs: another id names no transcript of theirs, and is passed on.
        let t = if is_uuid(c) {
            transcript(agent, &env, s.cwd, c)
        } else {
            None
        };
        let as_given = own.is_some() && t.is_none() && !failed_before;
        if !as_given {
            match agents::plan_start(agent, s.cmd, c, t, failed_before) {
                Ok(p) => {
                    argv = p.argv;
                    mode = Some(p.mode);
                    carried = p.mode != StartMode::FreshNewId;
                }
                Err(ArgvError::NoProgram { .. }) if !s.replayed && s.new_conversation => {
                    tracing::warn!(session = s.name, cid = %c, "the command does not start {}: started as given, as a new conversation (--new-conversation)", agent.display);
                    carried = false;
                }
                // The chat would come back as a new conversation: said, not done.
                Err(ArgvError::NoProgram { .. }) => {
                    return Err(ResumeError::Refused(format!(
                        "{}: it does not start {}, so conversation {c} cannot be carried to it and the chat would come back as a new conversation; name the agent a launcher script runs (spawn {} --agent {} -- <command>), or say --new-conversation to start it without",
                        where_from(),
                        agent.display,
                        s.id,
                        agent.name
                    )))
                }
                Err(e) => return Err(ResumeError::Refused(format!("{}: {e}", where_from()))),
            }
        }
        if carried && s.new_conversation {
            return Err(ResumeError::Refused(format!(
                "--new-conversation, but {} carries conversation {c}: drop --new-conversation (or `ccs-reap forget {}` first for a new one)",
                where_from(),
                s.id
            )));
        }
        let why = if failed_before {
            "a resume from this tombstone failed before"
        } else {
            "it has no transcript (it never had a turn, or its transcript was cleaned up)"
        };
        if mode == Some(StartMode::Fresh) {
            tracing::warn!(session = s.name, cid = %c, "{why}: starting it afresh under the same id ({argv:?}); nothing is lost");
        }
        if mode == Some(StartMode::FreshNewId) {
            // The agent picks the new id; its own hook tells it, as for any new chat.
            tracing::warn!(session = s.name, cid = %c, agent = agent.name, "{why}: starting it afresh under a new id, which {} cannot be given ({argv:?})", agent.display);
        }
    }
    if mode == Some(StartMode::FreshNewId) || !carried {
        cid = None;
    }
    let extra = extra_env(agent, runs.is_some(), mode);
    // The reaped session's own environment (a studio's `CCS_CFG`), set on the new one.
    let session_env = s
        .tomb
        .as_ref()
        .and_then(|t| t.env.clone())
        .unwrap_or_default();
    // And the studio's own `@` options.
    let options = s
        .tomb
        .as_ref()
        .and_then(|t| t.options.clone())
        .unwrap_or_default();
    // Room last, just before the start: no chat is reaped for one that is refused.
    if let Some(room) = s.room {
        room.make().await.map_err(ResumeError::NoRoom)?;
    }
    let long = cid.as_deref().is_some_and(is_uuid) && (mode.is_some() || own.is_some());
    let settle = if long { RESUME_SETTLE } else { SETTLE };
    let t0 = Instant::now();
    for attempt in 1..=3 {
        let Some(c) = r
            .tmux
            .new_session_kept(
                s.name,
                s.cwd,
                &crate::adapters::tmux::Start {
                    env: &extra,
                    session_env: &session_env,
                    options: &options,
                    argv: &argv,
                    agent: runs.map(|a| a.name),
                    cid: None,
                },
            )
            .await?
        else {
            return Ok(false);
        };
        match verify(&r.tmux, agent, &env, c, cid.as_deref(), settle).await? {
            Verdict::Up(how) => {
                up(&r.tmux, c, cid.as_deref()).await?;
                tracing::info!(session = s.name, cid = cid.as_deref(), mode = ?mode, cwd = %s.cwd.display(), resumed = s.tomb.is_some(), ms = t0.elapsed().as_millis() as u64, "spawned: {how}");
                return Ok(true);
            }
            Verdict::Vanished => {
                tracing::warn!(
                    session = s.name,
                    attempt,
                    "the new session vanished (a tmux server exiting?): trying again"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Verdict::Died(status) => {
                return Err(failed(r, &s, agent, c, cid, mode, status, &argv, t0).await);
            }
        }
    }
    Err(ResumeError::Refused(format!(
        "{} exited as soon as it was created (three times); the tombstone is kept",
        s.name
    )))
}

/// The agent of a start: the one the command runs (`Some` beside it), else the one the
/// tombstone names, else Claude Code.
fn agent_of(cmd: &[String], tomb: Option<&Tombstone>) -> (&'static Agent, Option<&'static Agent>) {
    let runs = agents::of_argv(cmd);
    let agent = runs
        .or_else(|| {
            tomb.and_then(|t| t.agent.as_deref())
                .and_then(agents::by_name)
        })
        .unwrap_or(&agents::CLAUDE);
    (agent, runs)
}

/// The environment the agent is started with: its start environment when the command runs it
/// (Gemini CLI: one process, not two), then a resume's ([`Agent::resume_env`]).
fn extra_env(agent: &Agent, runs_it: bool, mode: Option<StartMode>) -> Vec<(String, String)> {
    let start_env = if runs_it { agent.start_env } else { &[] };
    let resume_env = if mode == Some(StartMode::Resume) {
        agent.resume_env
    } else {
        &[]
    };
    start_env
        .iter()
        .chain(resume_env)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Watch the new session until the agent is up (its hook set the cid, its status file names the
/// conversation, or it lived past `settle`) or its pane died.
async fn verify(
    tmux: &Tmux,
    agent: &Agent,
    env: &[(String, String)],
    c: Created,
    cid: Option<&str>,
    settle: Duration,
) -> Result<Verdict, TmuxError> {
    let t0 = Instant::now();
    let mut dead_reads = 0;
    loop {
        let Some(p) = tmux.probe(c.n).await? else {
            return Ok(Verdict::Vanished);
        };
        if p.pane_dead {
            // `#{pane_dead_status}` can read empty on the first poll that sees the pane dead.
            if p.dead_status.is_none() && dead_reads < 3 {
                dead_reads += 1;
                tokio::time::sleep(Duration::from_millis(30)).await;
                continue;
            }
            return Ok(Verdict::Died(p.dead_status));
        }
        if let Some(cid) = cid {
            if p.cid == cid {
                return Ok(Verdict::Up(
                    "its SessionStart hook set the conversation id".into(),
                ));
            }
            if status_names(agent, env, c.pane_pid, cid) {
                return Ok(Verdict::Up("its status file names the conversation".into()));
            }
        }
        if t0.elapsed() >= settle {
            return Ok(Verdict::Up(format!("alive after {settle:?}")));
        }
        let step = if settle > SETTLE { 100 } else { 20 };
        tokio::time::sleep(Duration::from_millis(step)).await;
    }
}

/// Whether the agent's own status file, for the pane's process or one of its children (a
/// one-word command runs under `sh -c`), names conversation `cid` and is that live process's.
fn status_names(agent: &Agent, env: &[(String, String)], pane_pid: u32, cid: &str) -> bool {
    let (Some(path_of), Some(parse)) = (agent.status_path, agent.parse_status) else {
        return false;
    };
    let mut pids = vec![pane_pid];
    pids.extend(procs::children(pane_pid));
    pids.into_iter().any(|pid| {
        let Ok(p) = path_of(env, pid) else {
            return false;
        };
        // As every file another process could plant: never waited on (a FIFO), never read
        // past its cap (a huge file).
        let Ok(Some(text)) = agent_proc::read_small_file(&p) else {
            return false;
        };
        let Ok(st) = parse(&text) else {
            return false;
        };
        st.session_id == cid && procs::start_time(pid).is_some_and(|t| st.is_of(pid, t))
    })
}

/// The agent is up: its pane goes when it exits again, and the chat carries its cid.
async fn up(tmux: &Tmux, c: Created, cid: Option<&str>) -> Result<(), TmuxError> {
    tmux.set_on(c.n, true, "remain-on-exit", None).await?;
    if let Some(cid) = cid {
        let set = tmux.probe(c.n).await?.is_some_and(|p| !p.cid.is_empty());
        if !set {
            tmux.set_on(c.n, false, "@ccs_cid", Some(cid)).await?;
        }
    }
    Ok(())
}

/// A start that failed: the agent's last line read from its dead pane, the session killed, an
/// audit line (`resume-failed`), the tombstone marked so that the next spawn does not try the
/// same way again; the error says all of it.
#[allow(clippy::too_many_arguments)]
async fn failed(
    r: &Reaper,
    s: &Start<'_>,
    agent: &Agent,
    c: Created,
    cid: Option<String>,
    mode: Option<StartMode>,
    status: Option<i32>,
    argv: &[String],
    t0: Instant,
) -> ResumeError {
    let lines = r.tmux.last_lines(c.n, 12).await.unwrap_or_default();
    tracing::debug!(session = s.name, screen = ?lines, "the dead pane's last lines");
    if let Err(e) = r.tmux.kill_n(c.n).await {
        tracing::warn!(session = s.name, error = %e, "failed to kill the dead session");
    }
    let last = lines
        .last()
        .cloned()
        .unwrap_or_else(|| "(nothing on its screen)".into());
    let reason = s.tomb.map_or(ReapReason::Manual, |t| t.reason);
    let mut line = AuditLine::begin(
        rfc3339(now_ms()),
        s.name,
        s.id,
        c.n,
        cid.clone(),
        reason,
        None,
    );
    line.outcome = Outcome::ResumeFailed;
    line.ended = Some(Ended::Failed);
    line.exit_status = status;
    line.took_ms = t0.elapsed().as_millis() as u64;
    line.error = Some(last.clone());
    let _ = record(&r.state, &r.metrics, &line);
    let mut next = String::new();
    if let Some(cid) = &cid {
        let mut t = s.tomb.cloned().unwrap_or_else(|| Tombstone {
            session: Some(s.name.to_string()),
            socket: Some(socket_path(&r.cfg)),
            ..Tombstone::new(s.id, now_ms(), reason)
        });
        t.cid = Some(cid.clone());
        t.cwd = s.cwd.to_str().map(String::from).or(t.cwd);
        t.argv = (agent.bare_argv)(argv).ok().or(t.argv);
        t.agent = agent_name(t.argv.as_deref()).or(t.agent);
        t.start_failed = Some(last.clone());
        let path = r.state.tombstone_path(s.id);
        // Only the tombstone this spawn read is marked: one that a `forget` removed meanwhile
        // stays removed (and one that another command rewrote stays as it wrote it).
        next = match r.state.write_tombstone_if(s.on_disk, &t) {
            Ok(false) => format!(
                "; the tombstone {} changed while the agent started (forgotten, or written by another command): left as it is",
                path.display()
            ),
            Ok(true) if mode == Some(StartMode::Fresh) => format!(
                "; a fresh start under the same id failed too: `ccs-reap forget {}` drops the tombstone {}",
                s.id,
                path.display()
            ),
            Ok(true) => format!(
                "; the tombstone {} is marked: the next spawn starts it afresh under the same id",
                path.display()
            ),
            Err(e) => format!("; the tombstone could not be marked: {e}"),
        };
    }
    let status = status.map_or(String::new(), |st| format!(" with status {st}"));
    ResumeError::Refused(format!(
        "{}: the agent exited{status} {:.1} s after it was started ({argv:?}): \"{last}\"{next}",
        s.name,
        t0.elapsed().as_secs_f64()
    ))
}

/// The command line a reaped chat's tombstone keeps: what `spawn` ran it with (`@ccs_argv`),
/// else its pane process's (`sh -c '<cmd>'` is `<cmd>`), without its own id flags (by the
/// descriptor of the agent it runs); `None` when neither starts an agent.
pub fn kept_argv(option: Option<&Vec<String>>, pane_pids: &[u32]) -> Option<Vec<String>> {
    let bare = |a: &[String]| (agents::of_argv(a)?.bare_argv)(a).ok();
    if let Some(a) = option.and_then(|a| bare(a)) {
        return Some(a);
    }
    let words_of = |pid: u32| {
        let words = agents::pane_words(&procs::cmdline(pid as i32)?);
        bare(&words)
    };
    // The pane's own process (`exec claude ...`, or `sh -c '<words>'` that splits plainly); else
    // the agent it started (a studio's `sh -c` string with quoting in it: the agent's own argv,
    // as the kernel holds it, needs no shell to read).
    pane_pids.iter().find_map(|&pid| words_of(pid)).or_else(|| {
        pane_pids
            .iter()
            .flat_map(|&pid| procs::children(pid))
            .find_map(words_of)
    })
}

/// The name of the agent a kept command line runs, for the tombstone.
pub fn agent_name(argv: Option<&[String]>) -> Option<String> {
    agents::of_argv(argv?).map(|a| a.name.to_string())
}

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
        0,
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

static LAST_AGE_OUT: Mutex<Option<Instant>> = Mutex::new(None);

/// Remove the tombstones past their age, each with an audit line (`aged-out`): at the first
/// sweep of this process and then once every [`AGE_OUT_EVERY`], never every sweep. Returns how
/// many went.
pub fn age_out(cfg: &Config, state: &StateDir, metrics: &Metrics) -> usize {
    {
        let Ok(mut last) = LAST_AGE_OUT.lock() else {
            return 0;
        };
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
    use super::*;

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
