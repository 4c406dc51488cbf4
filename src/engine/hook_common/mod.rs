//! What the hooks share (`claude-hook` and `hook --agent <name>`): the pane a hook runs in, the
//! typed action carried out on the chat's session, its dry-run sentence, and the settings that
//! wire the hooks ([`settings`]). Neither hook entry calls the other, nor the studio's commands:
//! both come here.

use std::path::PathBuf;

use crate::adapters::agent_proc;
use crate::adapters::clock::now_ms;
use crate::adapters::state::StateDir;
use crate::adapters::tmux::{PromptBegin, Tmux, TmuxError};
use crate::agents::{FiredBy, HookAction};
use crate::config::{Config, Socket};
use crate::core::policy::{self, socket_of_tmux_env, ReapReason, Session};
use crate::engine::context::Handles;
use crate::engine::own_pane;

pub mod settings;

/// Why a hook (or `turn end`) failed: tmux, or an id that names no chat.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{0}")]
    Tmux(#[from] TmuxError),
    #[error("{0}")]
    Refused(String),
}

/// Why a hook has no pane of ours to act on ([`where_from`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotHere {
    #[error("not inside tmux (TMUX unset)")]
    NoTmux,
    #[error("TMUX={0:?} does not parse")]
    BadTmux(String),
    #[error("TMUX_PANE unset")]
    NoPane,
    #[error("TMUX_PANE={0:?} is not a pane id (%<digits>)")]
    BadPane(String),
    #[error("this claude runs on another tmux server ({}), not {}", .here.display(), .ours.display())]
    OtherServer { here: PathBuf, ours: PathBuf },
}

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Acted on the chat (what).
    Done(String),
    /// Nothing to do here (why): not in tmux, another server, not a chat session, ...
    Skipped(String),
    /// `UserPromptSubmit` on a chat that a reap holds: block the prompt, with this reason.
    Blocked(String),
    /// Acted (what), on a new chat's session start that asks for room
    /// ([`wants_room`]): the caller makes it, outside the hook's own budget.
    NewChat {
        said: String,
        name: String,
        id: String,
    },
}

/// Whether `pane` is a tmux pane id, `%<digits>` (nothing else is ever passed to tmux).
pub fn valid_pane(pane: &str) -> bool {
    pane.strip_prefix('%')
        .is_some_and(|d| !d.is_empty() && d.len() <= 10 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The pane this hook runs in, when it runs on `socket`'s server: `Ok(pane)`, or why not.
pub fn where_from(
    socket: &Socket,
    tmux: Option<&str>,
    pane: Option<&str>,
) -> Result<String, NotHere> {
    let tmux = tmux.filter(|t| !t.is_empty()).ok_or(NotHere::NoTmux)?;
    let path = socket_of_tmux_env(tmux).ok_or_else(|| NotHere::BadTmux(tmux.to_string()))?;
    let pane = pane.filter(|p| !p.is_empty()).ok_or(NotHere::NoPane)?;
    if !valid_pane(pane) {
        return Err(NotHere::BadPane(pane.to_string()));
    }
    let here = Socket::Path(PathBuf::from(path)).canonical_path();
    let ours = socket.canonical_path();
    if here != ours {
        return Err(NotHere::OtherServer { here, ours });
    }
    Ok(pane.to_string())
}

/// Why a chat is reaped, as said to its user: the reason its reap journal names, if found.
pub fn reaped_because(reason: Option<ReapReason>) -> &'static str {
    match reason {
        Some(ReapReason::Idle) => "because it sat idle past CCS_ENGINE_IDLE_KILL_MS",
        Some(ReapReason::MaxIdle) => {
            "because more idle chats were kept than CCS_ENGINE_MAX_IDLE allows"
        }
        Some(ReapReason::Memory) => "to free memory (the memory is over its threshold)",
        Some(ReapReason::Bloat) => "because it holds more memory than CCS_ENGINE_SESSION_MEM_MAX",
        Some(ReapReason::Stuck) => "because its turn looked stuck",
        Some(ReapReason::Exited) => "because its panes have exited",
        Some(ReapReason::Manual) => "on request (ccs-reap reap)",
        Some(ReapReason::ServerDied) => "because its tmux server is gone",
        Some(ReapReason::Room) => "to make room for a new chat (ccs-reap room)",
        Some(ReapReason::MaxLive) => "because more chats were live than CCS_ENGINE_MAX_LIVE allows",
        None => "now",
    }
}

/// The one line said to the user whose prompt was blocked, with the reason of the reap.
pub(crate) fn blocked_reason(id: &str, reason: Option<ReapReason>) -> String {
    format!(
        "ccs-reap: this chat ({id}) is being reaped {}, so the prompt was not sent; \
         it resumes with its history once respawned (ccs-reap resume {id}, or the studio's next message)",
        reaped_because(reason)
    )
}

/// The reason of the reap under way on session `name`, from its journal (written before its
/// first signal; `None` if none is found yet).
fn reap_reason_of(state: &StateDir, name: &str) -> Option<ReapReason> {
    state
        .journals()
        .into_iter()
        .flatten()
        .find(|j| j.session == name)
        .map(|j| j.reason)
}

/// What a hook would do with `what` from pane `pane` (`Err`: why it does nothing before it asks
/// tmux, from [`where_from`]), said exactly and done not: the one line a hook's `--dry-run` prints
/// (`claude-hook`, `hook --agent <name>`). It reads the pane's session (one tmux call).
pub async fn dry_run_of(
    cfg: &Config,
    tmux: &Tmux,
    what: HookAction,
    pane: Result<String, NotHere>,
) -> String {
    let pane = match (pane, &what) {
        (Err(why), _) => return format!("nothing: {why}"),
        (Ok(_), HookAction::Nothing(why)) => return format!("nothing: {why}"),
        (Ok(p), _) => p,
    };
    let s = match tmux.session_of_pane(&pane, &cfg.prefix).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return format!(
                "nothing: this pane ({pane}) is not in a `{}<id>` session (or it, or the server at {}, is gone)",
                cfg.prefix,
                cfg.socket.canonical_path().display()
            )
        }
        Err(e) => return format!("nothing: tmux failed: {e}"),
    };
    if !matches!(what, HookAction::Nothing(_)) {
        if let Some(why) = not_the_chats_agent(&s).or_else(|| asleep(&s)) {
            return format!("nothing: {why}");
        }
    }
    let name = &s.name;
    let held = s.is_marked();
    let turn = !s.turn.trim().is_empty();
    match what {
        HookAction::SetCid(c) => format!(
            "would set @ccs_cid of {name} to {c} and start its idle clock (@ccs_idle = now)"
        ),
        HookAction::TurnBegin if held => format!(
            "would take {name} back and begin a turn if the reap that holds it (@ccs_reaping is set) has not passed its fence, else would block the prompt (exit 2)"
        ),
        HookAction::TurnBegin => format!("would begin a turn on {name} (@ccs_turn = now)"),
        HookAction::TurnEnd => format!(
            "would end the turn on {name}: @ccs_turn cleared, its idle clock started (@ccs_idle = now){}",
            if held {
                ""
            } else {
                ", and its tombstone, if any, removed as used"
            }
        ),
        HookAction::Busy if held || turn => format!(
            "nothing: {name} is {} (a Stop with background work only marks an idle chat busy)",
            if held { "held by a reap" } else { "already busy (@ccs_turn set)" }
        ),
        HookAction::Busy => format!("would mark {name} busy (@ccs_turn = now)"),
        HookAction::CompactBegin if held || turn => format!(
            "nothing: {name} is {} (a manual compaction marks only an idle chat busy)",
            if held { "held by a reap" } else { "already busy: the compaction runs inside that turn" }
        ),
        HookAction::CompactBegin => format!(
            "would mark {name} busy for a manual compaction (@ccs_turn and @ccs_compact = now)"
        ),
        HookAction::CompactEnd => format!(
            "would end the turn on {name} if the compaction began it (@ccs_compact set), else nothing: the running turn's own end closes it"
        ),
        HookAction::ClearTurn => format!("would clear the turn on {name} (@ccs_turn unset; its idle clock left alone)"),
        HookAction::Nothing(why) => format!("nothing: {why}"),
    }
}

/// A prompt hook: the turn begins, taking the chat back from a reap that has not passed its
/// fence (that reap aborts there, nothing signalled); a reap past its fence refuses the prompt,
/// with an audit line (`prompt-refused`). Each step is a test-and-set in the server
/// ([`Tmux::prompt_begin`]): judged in the very call that acts, never from an earlier read.
async fn prompt(h: Handles<'_>, s: &Session) -> Result<HookOutcome, HookError> {
    let name = &s.name;
    let mut got = h.tmux.prompt_begin(name, now_ms()).await?;
    if got == PromptBegin::Unsettled {
        got = h.tmux.prompt_begin(name, now_ms()).await?;
    }
    match got {
        PromptBegin::Started => Ok(HookOutcome::Done(format!("turn begun on {name}"))),
        PromptBegin::TakenBack => {
            tracing::info!(session = %name, "a prompt took the chat back from a reap that had not signalled: the reap aborts at its fence");
            Ok(HookOutcome::Done(format!(
                "turn begun on {name}: taken back from a reap that had not signalled"
            )))
        }
        PromptBegin::Gone => Ok(HookOutcome::Skipped(format!("{name} is gone"))),
        PromptBegin::Refused | PromptBegin::Unsettled => {
            let reason = reap_reason_of(h.state, name);
            let mut l = crate::adapters::state::AuditLine::begin(
                crate::core::time::rfc3339(now_ms()),
                name,
                &s.id,
                s.tmux_id,
                policy::valid_cid(s.cid.trim()).then(|| s.cid.trim().to_string()),
                reason.unwrap_or(ReapReason::Manual),
                None,
            );
            l.outcome = crate::adapters::state::Outcome::PromptRefused;
            l.error = Some("a prompt arrived after the reap's fence: refused".into());
            if let Err(e) = crate::engine::record::record(h.state, h.metrics, &l) {
                tracing::warn!(session = %name, error = %e, "failed to write the prompt-refused audit line");
            }
            Ok(HookOutcome::Blocked(blocked_reason(&s.id, reason)))
        }
    }
}

/// Why this hook must do nothing because the agent that fired it is not the chat's own (a
/// `claude -p` or `gemini -p` that the chat's agent started inherits its `TMUX_PANE`, and with it
/// the chat): `None` when it is the chat's own, or no agent is among the hook's ancestors.
pub(crate) fn not_the_chats_agent(s: &Session) -> Option<String> {
    let pane = s.panes.first()?;
    match crate::agents::fired_by(&agent_proc::ancestors(64), pane.pid) {
        FiredBy::Own | FiredBy::NoAgent => None,
        FiredBy::Nested { why, .. } => Some(format!(
            "fired by an agent that is not {}'s own: {why}",
            s.name
        )),
    }
}

/// Why no hook may act on session `s` (`Some`): its chat was reaped from its own pane while the
/// session lived on (`@ccs_asleep`), so what runs there now (a `claude` the user started in a
/// pane left over, say) is not the chat: recording its pane, its cid, its turns or its idle
/// clock would make the user's pane a chat again, reaped with the session, and its cid would
/// overwrite the chat's tombstone.
pub(crate) fn asleep(s: &Session) -> Option<String> {
    (!s.asleep.trim().is_empty()).then(|| {
        format!(
            "{} is no longer the chat's: it sleeps since its chat's pane was reaped (@ccs_asleep); nothing marked",
            s.name
        )
    })
}

/// [`asleep`], said at debug: the hook does nothing, and its exit is 0.
pub(crate) fn skipped_asleep(s: &Session) -> Option<HookOutcome> {
    let why = asleep(s)?;
    tracing::debug!(session = %s.name, "{why}");
    Some(HookOutcome::Skipped(why))
}

/// Carry out the action `what` on the chat's session `s`, as the hook that mapped it.
pub(crate) async fn act_on(
    h: Handles<'_>,
    what: &HookAction,
    s: &Session,
) -> Result<HookOutcome, HookError> {
    let name = &s.name;
    if !matches!(what, HookAction::Nothing(_)) {
        if let Some(why) = not_the_chats_agent(s) {
            return Ok(HookOutcome::Skipped(why));
        }
        if let Some(said) = skipped_asleep(s) {
            return Ok(said);
        }
        own_pane::record(h.tmux, s).await;
    }
    match what {
        HookAction::Nothing(why) => Ok(HookOutcome::Skipped(why.clone())),
        HookAction::SetCid(c) => Ok(if h.tmux.set_cid_now(name, c, now_ms()).await? {
            let said = format!("@ccs_cid of {name} = {c}, its idle clock started");
            if wants_room(&h.cfg.policy, s) {
                HookOutcome::NewChat {
                    said,
                    name: name.clone(),
                    id: s.id.clone(),
                }
            } else {
                HookOutcome::Done(said)
            }
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::TurnBegin => prompt(h, s).await,
        HookAction::TurnEnd => Ok(if end_turn(h, &s.id).await? {
            HookOutcome::Done(format!("turn ended on {name}"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::Busy => Ok(if h.tmux.mark_busy(name, now_ms()).await? {
            HookOutcome::Done(format!("{name} kept busy"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::CompactBegin => Ok(if h.tmux.mark_compact(name, now_ms()).await? {
            HookOutcome::Done(format!("{name} kept busy (a compaction)"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::CompactEnd => match h.tmux.end_compact(name).await? {
            Some(true) => Ok(if end_turn(h, &s.id).await? {
                HookOutcome::Done(format!("turn ended on {name} (its compaction ended)"))
            } else {
                HookOutcome::Skipped(format!("{name} is gone"))
            }),
            Some(false) => Ok(HookOutcome::Skipped(format!(
                "the compaction ran inside a turn already running on {name}: that turn's own end closes it"
            ))),
            None => Ok(HookOutcome::Skipped(format!("{name} is gone"))),
        },
        HookAction::ClearTurn => Ok(if h.tmux.set_named(name, "@ccs_turn", None).await? {
            HookOutcome::Done(format!("turn cleared on {name}"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
    }
}

/// `turn end <id>` (the studio's, and a hook's turn end): `Ok(false)` when the session is gone.
pub(crate) async fn end_turn(h: Handles<'_>, id: &str) -> Result<bool, HookError> {
    if let Some(why) = policy::invalid_id_why(id) {
        return Err(HookError::Refused(why));
    }
    let name = format!("{}{id}", h.cfg.prefix);
    let Some(marked) = h.tmux.turn_end(&name, now_ms()).await? else {
        return Ok(false);
    };
    // A turn went through on the (respawned) chat: its tombstone has served. (The audit log
    // keeps the history; a failure to remove it only leaves a cid that is still right.) Not while
    // a reap mark is on the chat: a reap that overrides the turn (a stuck one) may have written
    // the tombstone it will be resumed from.
    if !marked {
        if let Err(e) = h.state.remove_tombstone(id) {
            tracing::warn!(session = %name, error = %e, "failed to remove the used tombstone");
        }
    }
    Ok(true)
}

/// Whether a limit is in force that `spawn` makes room under by default: a memory rule, or
/// `CCS_ENGINE_MAX_LIVE`.
pub fn in_force(p: &policy::Policy) -> bool {
    p.mem_high.is_some() || p.max_live.is_some()
}

/// Whether a session-start hook on `s` is a new chat's that asks for room: a limit in force, and
/// no conversation id before the hook (not a resume, not a `/clear` of a known one).
pub fn wants_room(p: &policy::Policy, s: &policy::Session) -> bool {
    in_force(p) && !policy::valid_cid(s.cid.trim())
}
