//! The studio's commands: `turn begin`/`turn end` around each message, `spawn` to bring a chat
//! (back), and `reap <id>` to reap one now. Each is a free function over the shared context.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::adapters::clock::now_ms;
use crate::adapters::procs;
use crate::adapters::state::{AuditLine, StateDir, Tombstone};
use crate::adapters::tmux::TmuxError;
use crate::config::Config;
use crate::core::policy::{
    self, Changed, Handoff, Policy, ReapReason, Session, Snapshot, TurnSeen,
};
use crate::engine::context::Handles;
use crate::engine::context::{socket_path, Reaper};
use crate::engine::hook_common::{end_turn, HookError};
use crate::engine::observe::{find_cids, observe_with, Mode, Observation};
use crate::engine::ownership::Ownership;
use crate::engine::resume::{self, Resumed};
use crate::engine::teardown::{self, Abort, Failure, Finished, ReapEnd};

/// The failure of a one-session command (`reap <id>`), for exit codes.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{0}")]
    Tmux(#[from] TmuxError),
    #[error("{0}")]
    State(#[from] crate::adapters::state::StateError),
    #[error("{0}")]
    Refused(String),
    /// `reap <id>` without `--force`: the session is not reapable now: it is `why.state`, for
    /// the reason `why.why` (e.g. busy: a turn is running).
    #[error("refusing to reap {name}: it is {} ({}); --force overrides", why.state.as_str(), why.why)]
    NotReapable { name: String, why: Changed },
    /// The reap stopped before its first signal.
    #[error("reap of {name} aborted: {why}")]
    Aborted { name: String, why: Abort },
    /// The reap failed.
    #[error("reap of {name} failed: {why}")]
    Failed { name: String, why: Failure },
    #[error("{0}")]
    Gone(String),
    /// `spawn` made room first and there was none (why): nothing was started.
    #[error("no room for a new chat: {0}")]
    NoRoom(String),
}

impl From<HookError> for CommandError {
    fn from(e: HookError) -> Self {
        match e {
            HookError::Tmux(e) => CommandError::Tmux(e),
            HookError::Refused(m) => CommandError::Refused(m),
        }
    }
}

impl From<resume::ResumeError> for CommandError {
    fn from(e: resume::ResumeError) -> Self {
        use resume::ResumeError as W;
        match e {
            W::Tmux(e) => CommandError::Tmux(e),
            W::State(e) => CommandError::State(e),
            W::Refused(m) => CommandError::Refused(m),
            W::Gone(m) => CommandError::Gone(m),
            W::NoRoom(m) => CommandError::NoRoom(m),
        }
    }
}

/// What `reap <id>` did.
#[derive(Debug)]
pub enum ReapNow {
    Reaped(Box<AuditLine>),
    /// `--dry-run`: it would have been reaped (why).
    WouldReap(String),
}

/// Reap one session now (a batch of one). Returns how it ended and the audit line it wrote (or
/// tried to).
async fn reap_one(r: &Reaper, req: teardown::Request) -> Finished {
    let (d, reason) = (req.decision.clone(), req.reason);
    let mut ends = teardown::reap(r, vec![req]).await;
    ends.pop().unwrap_or_else(|| {
        let end = ReapEnd::Aborted(Abort::NotReached);
        let line = AuditLine::of_decision(&d, reason, now_ms());
        Finished {
            line: teardown::audit_line(line, &end),
            end,
        }
    })
}

/// `reap <id> [--force]`: one session now, whatever its idle age.
pub async fn reap_now(r: &Arc<Reaper>, id: &str, force: bool) -> Result<ReapNow, CommandError> {
    let name = name_of(&r.cfg, id)?;
    // The sweep's one look and decision, with this session looked at closely (its cid, its
    // agent's status file); the teardown re-checks it on fresh data before it acts.
    let Observation {
        snap,
        listing,
        decisions,
        ..
    } = observe_with(r, Mode::Act, None, Some(&name)).await;
    if let Some(e) = &snap.global_problem {
        if !force {
            return Err(CommandError::Refused(format!(
                "refusing to reap {name}: liveness unknown: {e}"
            )));
        }
    }
    let Some((d, s)) = decisions
        .into_iter()
        .zip(snap.sessions)
        .find(|(_, s)| s.name == name)
    else {
        return Err(CommandError::Gone(format!("no session {name}")));
    };
    let reason = ReapReason::Manual;
    if let Err(why) = policy::still_reapable(&d, d.idle_ms, reason, force, &r.cfg.policy) {
        return Err(CommandError::NotReapable { name, why });
    }
    if r.dry_run {
        return Ok(ReapNow::WouldReap(format!(
            "dry run: would reap {name} ({})",
            d.why
        )));
    }
    if !r.inflight.insert(d.tmux_id) {
        return Err(CommandError::Refused(format!(
            "{name} is already being reaped"
        )));
    }
    let req = teardown::Request {
        decision: d,
        session: s,
        reason,
        force,
        server_pid: listing.server_pid,
    };
    let tmux_id = req.decision.tmux_id;
    let Finished { end, line } = reap_one(r, req).await;
    r.inflight.remove(tmux_id);
    match end {
        ReapEnd::Reaped => Ok(ReapNow::Reaped(Box::new(line))),
        ReapEnd::Aborted(why) => Err(CommandError::Aborted { name, why }),
        ReapEnd::Failed(why) => Err(CommandError::Failed { name, why }),
    }
}

fn name_of(cfg: &Config, id: &str) -> Result<String, CommandError> {
    if let Some(why) = policy::invalid_id_why(id) {
        return Err(CommandError::Refused(why));
    }
    Ok(format!("{}{id}", cfg.prefix))
}

/// How long `turn begin` and `spawn` wait for a reap in flight ([`policy::Lease::wait_ms`]).
fn reap_wait(cfg: &Config) -> Duration {
    let ms = cfg.lease().wait_ms(cfg.interval.as_millis() as i64);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// `turn begin <id>`: `Ok(true)` the turn is marked; `Ok(false)` the session is gone or was
/// reaped while we waited: respawn it.
pub async fn turn_begin(r: &Reaper, id: &str) -> Result<bool, CommandError> {
    let name = name_of(&r.cfg, id)?;
    let deadline = Instant::now() + reap_wait(&r.cfg);
    let mut logged = false;
    loop {
        // Gone may mean "its pane died in a teardown that is still running".
        let seen = r.tmux.turn_begin(&name, now_ms()).await?;
        let running = seen == TurnSeen::Gone && teardown_running(&r.state, &r.ownership, id);
        // The answer is the core's (`policy::handoff`), the rule the model of the protocol checks.
        match policy::handoff(seen, running, Instant::now() >= deadline) {
            Handoff::Go => return Ok(true),
            Handoff::Respawn => return Ok(false),
            Handoff::TimedOut if seen == TurnSeen::Marked => {
                return Err(CommandError::Refused(format!(
                    "{name} is still marked as being reaped after {:?}; the next sweep clears a stale mark",
                    reap_wait(&r.cfg)
                )))
            }
            Handoff::TimedOut => {
                return Err(CommandError::Refused(format!(
                    "the teardown of {name} is still running after {:?}",
                    reap_wait(&r.cfg)
                )))
            }
            Handoff::Wait => {
                if !logged {
                    tracing::info!(session = %name, "a reap is in flight: waiting for it to finish");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Whether a live reaper's teardown of chat `id` is under way: its journal is there, and its
/// owner alive.
fn teardown_running(state: &StateDir, ownership: &Ownership, id: &str) -> bool {
    state
        .journals()
        .into_iter()
        .flatten()
        .any(|j| j.id == id && ownership.journal_live(&j, false))
}

/// Wait while a live reaper's teardown of chat `id` is under way (its journal is there and
/// its owner alive). When this returns, the old tree is gone and the tombstone written.
async fn wait_for_teardown(
    cfg: &Config,
    state: &StateDir,
    ownership: &Ownership,
    id: &str,
    deadline: Instant,
) -> Result<(), CommandError> {
    loop {
        if !teardown_running(state, ownership, id) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CommandError::Refused(format!(
                "the teardown of {}{id} is still running after {:?}",
                cfg.prefix,
                reap_wait(cfg)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `turn end <id>`: `Ok(false)` when the session is gone.
pub async fn turn_end(r: &Reaper, id: &str) -> Result<bool, CommandError> {
    Ok(end_turn(Handles::of(r), id).await?)
}

/// `spawn <id> [--cid C] [--cwd D] [-- <cmd...>]`: with no command, the one its tombstone
/// keeps is replayed (as words). Returns whether a session was created; `Ok(true)` only once the
/// agent is up (see [`resume::start`]).
pub async fn spawn(
    r: &Reaper,
    id: &str,
    cmd: &[String],
    ask: SpawnAsk<'_>,
) -> Result<bool, CommandError> {
    let name = name_of(&r.cfg, id)?;
    // The command names its agent (`--agent`): run as `env CCS_REAP_AGENT=<name> <command>`.
    let named;
    let cmd = match ask.agent {
        Some(a) if !cmd.is_empty() => {
            named = crate::agents::named::name(cmd, a).map_err(CommandError::Refused)?;
            &named[..]
        }
        _ => cmd,
    };
    let cid = ask.cid;
    if let Some(c) = cid {
        if !policy::valid_cid(c) {
            return Err(CommandError::Refused(format!(
                "invalid conversation id {c:?}: expected letters, digits, '_' and '-', not starting with '-'"
            )));
        }
    }
    let deadline = Instant::now() + reap_wait(&r.cfg);
    let Some(server) = make_way(r, &name, deadline).await? else {
        return Ok(false);
    };
    wait_for_teardown(&r.cfg, &r.state, &r.ownership, id, deadline).await?;
    let on_disk = r.state.read_tombstone(id)?;
    let mut tomb = on_disk.clone();
    let own = crate::agents::of_argv(cmd).and_then(|a| (a.cid_in_argv)(cmd));
    if tomb.is_none() && cid.is_none() && own.is_none() {
        tomb = lost_before_a_sweep(&r.cfg, &r.state, id, &server);
    }
    let tomb_cid = tomb_cid(&name, tomb.as_ref());
    let replayed = cmd.is_empty();
    let cmd: Vec<String> = if replayed {
        replay(&r.state, id, tomb.as_ref(), ask.agent)?
    } else {
        cmd.to_vec()
    };
    // A name that is no agent's, or two names at once, is refused before anything starts.
    crate::agents::named::check(&cmd).map_err(CommandError::Refused)?;
    let cwd = spawn_cwd(ask.cwd, tomb.as_ref())?;
    // The tombstone stays until the chat has answered a turn (`turn end`): a claude that fails
    // after start (a bad resume, an auth error) must not take the cid with it.
    resume::start(
        Handles::of(r),
        resume::Start {
            name: &name,
            id,
            cwd: &cwd,
            cmd: &cmd,
            replayed,
            flag_cid: cid,
            tomb: tomb.as_ref(),
            tomb_cid,
            on_disk: on_disk.as_ref(),
            new_conversation: ask.new_conversation,
            room: ask.room,
        },
    )
    .await
    .map_err(CommandError::from)
}

/// The tombstone's conversation id, when it is a valid one (one that is not is warned about).
fn tomb_cid(name: &str, tomb: Option<&Tombstone>) -> Option<String> {
    tomb.and_then(|t| t.cid.clone()).filter(|c| {
        let ok = policy::valid_cid(c);
        if !ok {
            tracing::warn!(session = %name, cid = %c, "the tombstone's conversation id is not a valid id: ignored");
        }
        ok
    })
}

/// The command `spawn <id>` with none replays: the one chat `id`'s tombstone keeps, named for
/// `agent` (`--agent`) when given.
fn replay(
    state: &StateDir,
    id: &str,
    tomb: Option<&Tombstone>,
    agent: Option<&str>,
) -> Result<Vec<String>, CommandError> {
    let path = state.tombstone_path(id);
    match tomb.map(|t| t.argv.clone()) {
        None => Err(CommandError::Refused(format!(
            "spawn {id} needs a command after --: there is no tombstone {} to replay",
            path.display()
        ))),
        Some(None) => {
            let why = tomb.map_or("", |t| t.why_no_argv());
            Err(CommandError::Refused(format!(
                "the tombstone {} keeps no command line ({why}): give the command after --",
                path.display()
            )))
        }
        Some(Some(a)) => match agent {
            Some(name) => crate::agents::named::name(&a, name).map_err(CommandError::Refused),
            None => Ok(a),
        },
    }
}

/// What `spawn` is asked beyond its id and command.
#[derive(Debug, Default)]
pub struct SpawnAsk<'a> {
    /// `--cid C`: the conversation to start the chat on.
    pub cid: Option<&'a str>,
    /// `--cwd D`: the new session's directory.
    pub cwd: Option<PathBuf>,
    /// `--agent NAME`: the agent the command runs (a launcher script of the studio's).
    pub agent: Option<&'a str>,
    /// `--new-conversation`: a command that cannot be given the conversation starts without it,
    /// where `spawn` would otherwise refuse.
    pub new_conversation: bool,
    /// Make room for the chat first, once every check passed (a limit in force, no `--no-room`).
    pub room: Option<&'a dyn resume::MakeRoom>,
}

/// `resume <id>`: a live chat is left as it is; an asleep one is spawned from its tombstone.
pub async fn resume(r: &Reaper, id: &str) -> Result<Resumed, CommandError> {
    let name = format!("{}{id}", r.cfg.prefix);
    if let Some(why) = crate::core::policy::invalid_id_why(id) {
        return Err(CommandError::Refused(why));
    }
    let live = r
        .tmux
        .find(&name, &r.cfg.prefix, procs::exit_collected)
        .await?
        .is_some_and(|s| s.panes.iter().any(|p| !p.dead));
    if live {
        if let Some(why) = crate::engine::own_pane::asleep_why(&r.tmux, &r.state, id, &name).await?
        {
            return Err(CommandError::Refused(why));
        }
        return Ok(Resumed::Live);
    }
    if r.state.read_tombstone(id)?.is_none() {
        return Err(CommandError::Gone(format!(
            "no chat {id}: {name} is not running and there is no tombstone {}",
            r.state.tombstone_path(id).display()
        )));
    }
    Ok(if spawn(r, id, &[], SpawnAsk::default()).await? {
        Resumed::Spawned
    } else {
        Resumed::Live
    })
}

/// Make way for `spawn`: an existing session is left alone (`None`), unless it is being reaped
/// (then wait for the reap, until `deadline`) or all its panes are dead (then clean it up first,
/// as a sweep would, and respawn). Returns the server as seen once the name is free.
async fn make_way(
    r: &Reaper,
    name: &str,
    deadline: Instant,
) -> Result<Option<crate::adapters::state::ServerView>, CommandError> {
    loop {
        let listing = r.tmux.list(&r.cfg.prefix, procs::exit_collected).await?;
        let server_pid = listing.server_pid;
        let view = crate::adapters::state::ServerView {
            up: listing.server_up,
            current: server_pid.map(crate::engine::sweep::server_id),
        };
        match listing.sessions.into_iter().find(|s| s.name == name) {
            None => return Ok(Some(view)),
            Some(s) if s.is_marked() => {
                if Instant::now() >= deadline {
                    return Err(CommandError::Refused(format!(
                        "{name} is still being reaped"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(s) if !s.panes.is_empty() && s.panes.iter().all(|p| p.dead) => {
                let end = match dead_request(&r.cfg.policy, &s, server_pid) {
                    Some(req) => reap_one(r, req).await.end,
                    None => ReapEnd::Aborted(Abort::NoFreshDecision),
                };
                if end != ReapEnd::Reaped
                    && r.tmux
                        .find(name, &r.cfg.prefix, procs::exit_collected)
                        .await?
                        .is_some()
                {
                    return Err(CommandError::Refused(format!(
                        "{name} has exited but could not be cleaned up: {}",
                        end.error().unwrap_or_default()
                    )));
                }
            }
            Some(_) => {
                let id = name.strip_prefix(r.cfg.prefix.as_str()).unwrap_or(name);
                if let Some(why) =
                    crate::engine::own_pane::asleep_why(&r.tmux, &r.state, id, name).await?
                {
                    return Err(CommandError::Refused(why));
                }
                return Ok(None);
            }
        }
    }
}

/// The new session's directory: `--cwd`, else the tombstone's while it is a directory, else the
/// current one; it must be a directory.
fn spawn_cwd(cwd: Option<PathBuf>, tomb: Option<&Tombstone>) -> Result<PathBuf, CommandError> {
    let cwd = match cwd {
        Some(d) => d,
        None => tomb
            .and_then(|t| t.cwd.as_ref())
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .map_or_else(
                || {
                    std::env::current_dir().map_err(|e| {
                        CommandError::Refused(format!("failed to read the current directory: {e}"))
                    })
                },
                Ok,
            )?,
    };
    if !cwd.is_dir() {
        return Err(CommandError::Refused(format!(
            "--cwd {} is not a directory",
            cwd.display()
        )));
    }
    Ok(cwd)
}

/// A chat with no tombstone whose tmux server died before any sweep saw it go: its entry in
/// the record of last known conversations, as the tombstone the next sweep would write (only
/// read here: the sweep writes the audit line, and finds the chat back on its conversation).
fn lost_before_a_sweep(
    cfg: &Config,
    state: &StateDir,
    id: &str,
    server: &crate::adapters::state::ServerView,
) -> Option<Tombstone> {
    let known = state
        .read_known()
        .map_err(
            |e| tracing::warn!(error = %e, "the record of last known conversations is unreadable"),
        )
        .ok()?;
    let e = known.chats.get(id)?;
    if e.lost
        || !crate::adapters::state::server_gone(e, server, crate::engine::sweep::server_living)
    {
        return None;
    }
    tracing::warn!(session = %e.session, cid = %e.cid, server_pid = e.server.pid, "its tmux server died before a sweep saw it: resuming its last known conversation");
    Some(e.lost_tombstone(&socket_path(cfg), now_ms()))
}

/// `pin <id>` / `unpin <id>`: set `@ccs_pin` (to 1) or clear it. `Ok(false)` when the session
/// is gone.
pub async fn pin(r: &Reaper, id: &str, on: bool) -> Result<bool, CommandError> {
    let name = name_of(&r.cfg, id)?;
    let done = r
        .tmux
        .set_named(&name, "@ccs_pin", on.then_some("1"))
        .await?;
    if done {
        tracing::info!(session = %name, pinned = on, "{}", if on { "pinned" } else { "unpinned" });
    }
    Ok(done)
}

/// The reap that cleans up a session whose panes have all exited (for `spawn`): the exited
/// reap, even before tmux has its exit status (`None`: the core gave it no decision).
fn dead_request(
    policy: &Policy,
    s: &Session,
    server_pid: Option<u32>,
) -> Option<teardown::Request> {
    let mut snap = Snapshot {
        sessions: vec![s.clone()],
        ..Snapshot::default()
    };
    find_cids(&mut snap, &[s.tmux_id].into_iter().collect());
    let policy = Policy {
        reap_exited: true,
        ..policy.clone()
    };
    // The one session put in above, its cid looked up.
    let s = snap.sessions.swap_remove(0);
    let (mut d, s) = policy::decide_session(s, &Default::default(), false, now_ms(), &policy)?;
    d.override_turn = true;
    Some(teardown::Request {
        decision: d,
        session: s,
        reason: ReapReason::Exited,
        force: true,
        server_pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reap_that_did_not_go_through_is_a_typed_error_with_the_text_it_always_had() {
        let name = "ccs-1".to_string();
        let e = CommandError::Aborted {
            name: name.clone(),
            why: Abort::GoneOrRenamed,
        };
        assert!(matches!(
            &e,
            CommandError::Aborted {
                why: Abort::GoneOrRenamed,
                ..
            }
        ));
        assert_eq!(
            e.to_string(),
            "reap of ccs-1 aborted: the session is gone or was renamed"
        );
        let e = CommandError::Failed {
            name: name.clone(),
            why: Failure::Survivors(vec![42]),
        };
        assert_eq!(
            e.to_string(),
            "reap of ccs-1 failed: processes survived: [42]"
        );
        let e = CommandError::NotReapable {
            name,
            why: Changed {
                state: policy::State::Busy,
                why: "a turn is running".into(),
            },
        };
        assert_eq!(
            e.to_string(),
            "refusing to reap ccs-1: it is busy (a turn is running); --force overrides"
        );
    }
}
