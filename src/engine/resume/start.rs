//! `spawn`'s start: plan how the agent is started on its conversation (the command's, the
//! flag's or the tombstone's), make room, start it in a guarded `new-session` and watch that it
//! comes up; a start that fails is said, recorded and marked on the tombstone.

use std::time::{Duration, Instant};

use crate::adapters::agent_proc;
use crate::adapters::clock::now_ms;
use crate::adapters::procs;
use crate::adapters::state::{AuditLine, Ended, Outcome, StateDir, Tombstone};
use crate::adapters::tmux::{Created, Tmux, TmuxError};
use crate::agents::claude::is_uuid;
use crate::agents::{self, Agent, ArgvError, StartMode};
use crate::core::policy::ReapReason;
use crate::core::time::rfc3339;
use crate::engine::context::{socket_path, Handles};
use crate::engine::record::record;

use super::look::{held_elsewhere, transcript};
use super::{ResumeError, Start, RESUME_SETTLE, SETTLE};

/// How the agent is started: which agent, with what words, on which conversation.
struct Plan {
    agent: &'static Agent,
    /// The agent the command itself runs (not only the tombstone's word for it).
    runs: Option<&'static Agent>,
    /// Its environment as far as its files go ([`agent_env`]).
    env: Vec<(String, String)>,
    argv: Vec<String>,
    mode: Option<StartMode>,
    /// The conversation it is started on, when it goes with the command.
    cid: Option<String>,
    /// The command carried a conversation id of its own.
    own: bool,
}

/// Start the chat and check it is up. `Ok(false)`: a session of that name exists (a concurrent
/// spawn won).
pub async fn start(h: Handles<'_>, s: Start<'_>) -> Result<bool, ResumeError> {
    let p = plan(h, &s).await?;
    // Room last, just before the start: no chat is reaped for one that is refused.
    if let Some(room) = s.room {
        room.make().await.map_err(|e| ResumeError::NoRoom(e.0))?;
    }
    launch(h, &s, &p).await
}

/// How to start the agent, or why not: the conversation it is started on is held by no other
/// live agent, and goes with the command when it can.
async fn plan(h: Handles<'_>, s: &Start<'_>) -> Result<Plan, ResumeError> {
    let (agent, runs) = agent_of(s.cmd, s.tomb);
    let own = (agent.cid_in_argv)(s.cmd);
    let cid = own
        .clone()
        .or(s.flag_cid.map(String::from))
        .or(s.tomb_cid.clone());
    let failed_before = s
        .tomb
        .is_some_and(|t| t.start_failed.is_some() && t.cid == cid);
    // One conversation, one live agent: a second agent on it would write into the same
    // transcript, and the studio would not know which one answers.
    if let Some(c) = &cid {
        if let Some((other, pid)) = held_elsewhere(h.cfg, h.tmux, s.name, c).await? {
            return Err(ResumeError::Refused(format!(
                "conversation {c} is held by a live agent in {other} (pane pid {pid}): refusing to start a second one on it in {} (stop that one first, or start this chat afresh with another id)",
                s.name
            )));
        }
    }
    let env = agent_env(h.tmux, agent, s.cmd).await;
    let mut p = Plan {
        agent,
        runs,
        env,
        argv: s.cmd.to_vec(),
        mode: None,
        cid: None,
        own: own.is_some(),
    };
    let Some(c) = cid else {
        return Ok(p);
    };
    // Whether the conversation goes with the command (a new conversation with
    // --new-conversation does not: its agent's hook tells the new id).
    let carried = carry(h.state, s, &mut p, &c, failed_before)?;
    if carried && p.mode != Some(StartMode::FreshNewId) {
        p.cid = Some(c);
    }
    Ok(p)
}

/// Where the command comes from, for a refusal.
fn where_from(state: &StateDir, s: &Start<'_>) -> String {
    match (s.replayed, s.tomb) {
        (true, Some(_)) => format!(
            "the command line kept in {}",
            state.tombstone_path(s.id).display()
        ),
        _ => format!("the command {:?}", s.cmd),
    }
}

/// The words that carry conversation `c` to the agent (set in `p`), and whether it goes with
/// them; a chat that would come back as a new conversation is refused, said not done.
fn carry(
    state: &StateDir,
    s: &Start<'_>,
    p: &mut Plan,
    c: &str,
    failed_before: bool,
) -> Result<bool, ResumeError> {
    let agent = p.agent;
    let mut carried = true;
    // The agents' ids are UUIDs: another id names no transcript of theirs, and is passed on.
    let t = if is_uuid(c) {
        transcript(agent, &p.env, s.cwd, c)
    } else {
        None
    };
    let as_given = p.own && t.is_none() && !failed_before;
    if !as_given {
        match agents::plan_start(agent, s.cmd, c, t, failed_before) {
            Ok(planned) => {
                p.argv = planned.argv;
                p.mode = Some(planned.mode);
                carried = planned.mode != StartMode::FreshNewId;
            }
            Err(ArgvError::NoProgram { .. }) if !s.replayed && s.new_conversation => {
                tracing::warn!(session = s.name, cid = %c, "the command does not start {}: started as given, as a new conversation (--new-conversation)", agent.display);
                carried = false;
            }
            // The chat would come back as a new conversation: said, not done.
            Err(ArgvError::NoProgram { .. }) => {
                return Err(ResumeError::Refused(format!(
                    "{}: it does not start {}, so conversation {c} cannot be carried to it and the chat would come back as a new conversation; name the agent a launcher script runs (spawn {} --agent {} -- <command>), or say --new-conversation to start it without",
                    where_from(state, s),
                    agent.display,
                    s.id,
                    agent.name
                )))
            }
            Err(e) => {
                return Err(ResumeError::Refused(format!(
                    "{}: {e}",
                    where_from(state, s)
                )))
            }
        }
    }
    if carried && s.new_conversation {
        return Err(ResumeError::Refused(format!(
            "--new-conversation, but {} carries conversation {c}: drop --new-conversation (or `ccs-reap forget {}` first for a new one)",
            where_from(state, s),
            s.id
        )));
    }
    let why = if failed_before {
        "a resume from this tombstone failed before"
    } else {
        "it has no transcript (it never had a turn, or its transcript was cleaned up)"
    };
    let argv = &p.argv;
    if p.mode == Some(StartMode::Fresh) {
        tracing::warn!(session = s.name, cid = %c, "{why}: starting it afresh under the same id ({argv:?}); nothing is lost");
    }
    if p.mode == Some(StartMode::FreshNewId) {
        // The agent picks the new id; its own hook tells it, as for any new chat.
        tracing::warn!(session = s.name, cid = %c, agent = agent.name, "{why}: starting it afresh under a new id, which {} cannot be given ({argv:?})", agent.display);
    }
    Ok(carried)
}

/// One start as it goes: the plan, and when it began.
struct Attempt<'p> {
    plan: &'p Plan,
    t0: Instant,
}

/// Start the planned agent in a guarded `new-session` (at most three times, while the new
/// session vanishes) and watch that it comes up.
async fn launch(h: Handles<'_>, s: &Start<'_>, p: &Plan) -> Result<bool, ResumeError> {
    let extra = extra_env(p.agent, p.runs.is_some(), p.mode);
    // The reaped session's own environment (a studio's `CCS_CFG`), set on the new one.
    let session_env = s.tomb.and_then(|t| t.env.clone()).unwrap_or_default();
    // And the studio's own `@` options.
    let options = s.tomb.and_then(|t| t.options.clone()).unwrap_or_default();
    let cid = p.cid.as_deref();
    let long = cid.is_some_and(is_uuid) && (p.mode.is_some() || p.own);
    let settle = if long { RESUME_SETTLE } else { SETTLE };
    let a = Attempt {
        plan: p,
        t0: Instant::now(),
    };
    for attempt in 1..=3 {
        let Some(c) = h
            .tmux
            .new_session_kept(
                s.name,
                s.cwd,
                &crate::adapters::tmux::Start {
                    env: &extra,
                    session_env: &session_env,
                    options: &options,
                    argv: &p.argv,
                    agent: p.runs.map(|a| a.name),
                    cid: None,
                },
            )
            .await?
        else {
            return Ok(false);
        };
        match verify(h.tmux, p, c, settle).await? {
            Verdict::Up(how) => {
                up(h.tmux, c, cid).await?;
                tracing::info!(session = s.name, cid, mode = ?p.mode, cwd = %s.cwd.display(), resumed = s.tomb.is_some(), ms = a.t0.elapsed().as_millis() as u64, "spawned: {how}");
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
            Verdict::Died(status) => return Err(failed(h, s, &a, c, status).await),
        }
    }
    Err(ResumeError::Refused(format!(
        "{} exited as soon as it was created (three times); the tombstone is kept",
        s.name
    )))
}

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

/// The agent of a start: the one the command runs (`Some` beside it), else the one the
/// tombstone names, else Claude Code.
pub(super) fn agent_of(
    cmd: &[String],
    tomb: Option<&Tombstone>,
) -> (&'static Agent, Option<&'static Agent>) {
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
pub(super) fn extra_env(
    agent: &Agent,
    runs_it: bool,
    mode: Option<StartMode>,
) -> Vec<(String, String)> {
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
async fn verify(tmux: &Tmux, p: &Plan, c: Created, settle: Duration) -> Result<Verdict, TmuxError> {
    let t0 = Instant::now();
    let mut dead_reads = 0;
    loop {
        let Some(probe) = tmux.probe(c.n).await? else {
            return Ok(Verdict::Vanished);
        };
        if probe.pane_dead {
            // `#{pane_dead_status}` can read empty on the first poll that sees the pane dead.
            if probe.dead_status.is_none() && dead_reads < 3 {
                dead_reads += 1;
                tokio::time::sleep(Duration::from_millis(30)).await;
                continue;
            }
            return Ok(Verdict::Died(probe.dead_status));
        }
        if let Some(cid) = p.cid.as_deref() {
            if probe.cid == cid {
                return Ok(Verdict::Up(
                    "its SessionStart hook set the conversation id".into(),
                ));
            }
            if status_names(p.agent, &p.env, c.pane_pid, cid) {
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
async fn failed(
    h: Handles<'_>,
    s: &Start<'_>,
    a: &Attempt<'_>,
    c: Created,
    status: Option<i32>,
) -> ResumeError {
    let (agent, cid, mode, argv, t0) = (a.plan.agent, &a.plan.cid, a.plan.mode, &a.plan.argv, a.t0);
    let lines = h.tmux.last_lines(c.n, 12).await.unwrap_or_default();
    tracing::debug!(session = s.name, screen = ?lines, "the dead pane's last lines");
    if let Err(e) = h.tmux.kill_n(c.n).await {
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
    let _ = record(h.state, h.metrics, &line);
    let mut next = String::new();
    if let Some(cid) = &cid {
        let mut t = s.tomb.cloned().unwrap_or_else(|| Tombstone {
            session: Some(s.name.to_string()),
            socket: Some(socket_path(h.cfg)),
            ..Tombstone::new(s.id, now_ms(), reason)
        });
        t.cid = Some(cid.clone());
        t.cwd = s.cwd.to_str().map(String::from).or(t.cwd);
        t.argv = (agent.bare_argv)(argv).ok().or(t.argv);
        t.agent = agents::agent_name(t.argv.as_deref()).or(t.agent);
        t.start_failed = Some(last.clone());
        let path = h.state.tombstone_path(s.id);
        // Only the tombstone this spawn read is marked: one that a `forget` removed meanwhile
        // stays removed (and one that another command rewrote stays as it wrote it).
        next = match h.state.write_tombstone_if(s.on_disk, &t) {
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
