//! Claude Code's own hooks: `ccs-reap claude-hook` reads one hook event (JSON on stdin) from the
//! claude running in a `<prefix><id>` pane and marks that chat's conversation id and turns, so a
//! plain `claude` in tmux is reapable without a studio. `ccs-reap claude-settings` prints (or
//! merges into a settings file) the `hooks` that run it.
//!
//! The event → action mapping is [`action`], pure. Where the hook runs is read from `TMUX` (the
//! server's socket, first) and `TMUX_PANE` ([`where_from`]): another server, another session or no
//! tmux at all is nothing to do. The hook never breaks claude: the caller turns every failure into
//! one line on stderr and exit 0; only [`HookOutcome::Blocked`] (a prompt typed into a chat that a reap
//! holds) is exit 2, which Claude Code documents as "block the prompt, show stderr to the user".

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::adapters::agent_proc;
use crate::adapters::clock::now_ms;
use crate::adapters::state::StateDir;
use crate::adapters::tmux::{PromptBegin, Tmux};
use crate::adapters::user_file;
use crate::agents::{FiredBy, HookAction};
use crate::config::{Config, Socket};
use crate::core::policy::{self, ReapReason, Session};
use crate::engine::commands;
use crate::engine::commands::CommandError;
use crate::engine::context::Reaper;

/// The fields of a hook event that matter here (Claude Code 2.1.332 sends more: `transcript_path`,
/// `cwd`, `prompt`, `last_assistant_message`, ...; they are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct HookInput {
    /// The event as sent, for the descriptor's mapping.
    #[serde(skip)]
    pub raw: serde_json::Value,
    #[serde(default)]
    pub hook_event_name: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// `SessionStart`: `startup`, `resume`, `clear` or `compact`.
    #[serde(default)]
    pub source: Option<String>,
    /// `PreCompact` / `PostCompact`: `manual` (`/compact`) or `auto` (inside a turn, or a
    /// summary computed in the background).
    #[serde(default)]
    pub trigger: Option<String>,
    /// `Stop`: the background tasks still running (a list).
    #[serde(default)]
    pub background_tasks: Option<serde_json::Value>,
}

impl HookInput {
    /// Parse one event.
    pub fn parse(text: &str) -> Result<HookInput, String> {
        let bad = |e: serde_json::Error| format!("the hook event is not valid JSON: {e}");
        let raw: serde_json::Value = serde_json::from_str(text).map_err(bad)?;
        let mut ev: HookInput = serde_json::from_value(raw.clone()).map_err(bad)?;
        ev.raw = raw;
        Ok(ev)
    }
}

/// Why an event is refused outright, said on stderr (one line): a `SessionStart` whose
/// `session_id` is longer than a cid may be ([`policy::MAX_ID_LEN`] bytes). `@ccs_cid` is left as
/// it is, so the known cid is kept.
pub fn refused(ev: &HookInput) -> Option<String> {
    let c = ev.session_id.as_deref()?;
    (ev.hook_event_name.as_deref() == Some("SessionStart") && c.len() > policy::MAX_ID_LEN).then(
        || {
            format!(
                "SessionStart with a session_id of {} bytes, more than the {} a conversation id may have: refused, @ccs_cid left alone",
                c.len(),
                policy::MAX_ID_LEN
            )
        },
    )
}

/// The action of one event (pure): Claude Code's descriptor maps it
/// ([`crate::agents::claude::hook_action`]), as it does for `hook --agent claude`.
pub fn action(ev: &HookInput) -> HookAction {
    crate::agents::claude::hook_action(&ev.raw)
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
    /// ([`crate::engine::room::wants_room`]): the caller makes it, outside the hook's own budget.
    NewChat {
        said: String,
        name: String,
        id: String,
    },
}

pub use crate::core::policy::socket_of_tmux_env;

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
) -> Result<String, String> {
    let tmux = tmux
        .filter(|t| !t.is_empty())
        .ok_or("not inside tmux (TMUX unset)")?;
    let path = socket_of_tmux_env(tmux).ok_or_else(|| format!("TMUX={tmux:?} does not parse"))?;
    let pane = pane.filter(|p| !p.is_empty()).ok_or("TMUX_PANE unset")?;
    if !valid_pane(pane) {
        return Err(format!("TMUX_PANE={pane:?} is not a pane id (%<digits>)"));
    }
    let here = Socket::Path(PathBuf::from(path)).canonical_path();
    let ours = socket.canonical_path();
    if here != ours {
        return Err(format!(
            "this claude runs on another tmux server ({}), not {}",
            here.display(),
            ours.display()
        ));
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
fn blocked_reason(id: &str, reason: Option<ReapReason>) -> String {
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

/// Act on one event from the pane `pane` (see [`where_from`]) of `r`'s server.
pub async fn act(r: &Reaper, ev: &HookInput, pane: &str) -> Result<HookOutcome, CommandError> {
    let what = action(ev);
    if let HookAction::Nothing(why) = what {
        return Ok(HookOutcome::Skipped(why));
    }
    let Some(s) = r.tmux.session_of_pane(pane, &r.cfg.prefix).await? else {
        return Ok(HookOutcome::Skipped(format!(
            "pane {pane} is not in a {}<id> session",
            r.cfg.prefix
        )));
    };
    act_on(r, &what, &s).await
}

/// What [`act`] would do with `ev` from pane `pane` (`Err`: why the hook does nothing before it
/// asks tmux, from [`where_from`]), said exactly and done not: the one line `claude-hook
/// --dry-run` prints. It reads the pane's session (one tmux call) and writes nothing.
pub async fn dry_run(r: &Reaper, ev: &HookInput, pane: Result<String, String>) -> String {
    dry_run_of(&r.cfg, &r.tmux, action(ev), pane).await
}

/// [`dry_run`] of an action already mapped (any agent's: `hook --agent <name> --dry-run`).
pub async fn dry_run_of(
    cfg: &Config,
    tmux: &Tmux,
    what: HookAction,
    pane: Result<String, String>,
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
async fn prompt(r: &Reaper, s: &Session) -> Result<HookOutcome, CommandError> {
    let name = &s.name;
    let mut got = r.tmux.prompt_begin(name, now_ms()).await?;
    if got == PromptBegin::Unsettled {
        got = r.tmux.prompt_begin(name, now_ms()).await?;
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
            let reason = reap_reason_of(&r.state, name);
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
            if let Err(e) = crate::engine::record::record(&r.state, &r.metrics, &l) {
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

pub(crate) async fn act_on(
    r: &Reaper,
    what: &HookAction,
    s: &Session,
) -> Result<HookOutcome, CommandError> {
    let name = &s.name;
    if !matches!(what, HookAction::Nothing(_)) {
        if let Some(why) = not_the_chats_agent(s) {
            return Ok(HookOutcome::Skipped(why));
        }
        if let Some(said) = skipped_asleep(s) {
            return Ok(said);
        }
        crate::engine::own_pane::record(r, s).await;
    }
    match what {
        HookAction::Nothing(why) => Ok(HookOutcome::Skipped(why.clone())),
        HookAction::SetCid(c) => Ok(if r.tmux.set_cid_now(name, c, now_ms()).await? {
            let said = format!("@ccs_cid of {name} = {c}, its idle clock started");
            if crate::engine::room::wants_room(&r.cfg.policy, s) {
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
        HookAction::TurnBegin => prompt(r, s).await,
        HookAction::TurnEnd => Ok(if commands::turn_end(r, &s.id).await? {
            HookOutcome::Done(format!("turn ended on {name}"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::Busy => Ok(if r.tmux.mark_busy(name, now_ms()).await? {
            HookOutcome::Done(format!("{name} kept busy"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::CompactBegin => Ok(if r.tmux.mark_compact(name, now_ms()).await? {
            HookOutcome::Done(format!("{name} kept busy (a compaction)"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
        HookAction::CompactEnd => match r.tmux.end_compact(name).await? {
            Some(true) => Ok(if commands::turn_end(r, &s.id).await? {
                HookOutcome::Done(format!("turn ended on {name} (its compaction ended)"))
            } else {
                HookOutcome::Skipped(format!("{name} is gone"))
            }),
            Some(false) => Ok(HookOutcome::Skipped(format!(
                "the compaction ran inside a turn already running on {name}: that turn's own end closes it"
            ))),
            None => Ok(HookOutcome::Skipped(format!("{name} is gone"))),
        },
        HookAction::ClearTurn => Ok(if r.tmux.set_named(name, "@ccs_turn", None).await? {
            HookOutcome::Done(format!("turn cleared on {name}"))
        } else {
            HookOutcome::Skipped(format!("{name} is gone"))
        }),
    }
}

// ---------------------------------------------------------------- settings

/// The hook events `claude-settings` wires, in the order they are written: Claude Code's
/// descriptor's ([`crate::agents::claude::HOOKS`]).
pub fn events() -> Vec<&'static str> {
    crate::agents::claude::HOOKS.wired()
}

/// The subcommand word a hook command ends with: how `--write` knows its own entries.
const SUBCOMMAND: &str = "claude-hook";

/// `s` quoted for a POSIX shell (Claude Code runs a hook's command through one): single quotes,
/// a `'` inside as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The settings the hook must see, as `VAR=value` pairs, resolved where `claude-settings` runs:
/// the socket (always as a path: a socket name is resolved through `TMUX_TMPDIR` and the uid,
/// which claude's environment may not share), the prefix, the state dir, the tmux timeout, and
/// the settings that set how long a reap mark holds (for the block), when they are set.
pub fn hook_env(cfg: &Config, env: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "CCS_TMUX_SOCKET_PATH".to_string(),
            cfg.socket.canonical_path().to_string_lossy().into_owned(),
        ),
        ("CCS_SESSION_PREFIX".to_string(), cfg.prefix.clone()),
        (
            "CCS_REAP_STATE_DIR".to_string(),
            cfg.state_dir.to_string_lossy().into_owned(),
        ),
        (
            "CCS_TMUX_TIMEOUT_MS".to_string(),
            cfg.tmux_timeout.as_millis().to_string(),
        ),
    ];
    for var in [
        "CCS_REAP_GRACE_MS",
        "CCS_REAP_HOOK",
        "CCS_REAP_HOOK_TIMEOUT_MS",
    ] {
        if let Some((_, v)) = env.iter().find(|(k, v)| k == var && !v.trim().is_empty()) {
            out.push((var.to_string(), v.clone()));
        }
    }
    out
}

/// The hook's command: `VAR='value' ... '<binary>' claude-hook`. Settings go as environment
/// assignments, not flags: a flag that an older or newer binary does not know would make clap
/// exit 2, and exit 2 on `UserPromptSubmit` blocks every prompt.
pub fn hook_command(bin: &Path, env: &[(String, String)]) -> String {
    hook_command_with(bin, env, &[SUBCOMMAND])
}

/// [`hook_command`] ending in other words of ours (`hook --agent codex`), never a user's value.
pub(crate) fn hook_command_with(bin: &Path, env: &[(String, String)], sub: &[&str]) -> String {
    let mut words: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k}={}", sh_quote(v)))
        .collect();
    words.push(sh_quote(&bin.to_string_lossy()));
    words.extend(sub.iter().map(|w| w.to_string()));
    words.join(" ")
}

fn our_group(command: &str) -> serde_json::Value {
    serde_json::json!({ "hooks": [ { "type": "command", "command": command } ] })
}

/// The settings fragment: `{"hooks": {<event>: [{"hooks": [{"type": "command", ...}]}]}}`, as
/// Claude Code's descriptor writes it ([`crate::agents::claude::hook_settings`]).
pub fn fragment(command: &str) -> serde_json::Value {
    crate::agents::claude::hook_settings(command)
}

/// Whether a hook entry's command is one of ours (any settings, any binary path).
fn is_ours(hook: &serde_json::Value) -> bool {
    hook.get("command")
        .and_then(|c| c.as_str())
        .is_some_and(|c| c.trim_end().ends_with(&format!(" {SUBCOMMAND}")))
}

/// Merge our hooks into `settings` (a settings file's JSON): every other key, event and hook is
/// kept; our earlier entries (whatever binary or settings they named) are replaced by one group
/// per event, appended. Merging twice gives the same document.
pub fn merge(settings: serde_json::Value, command: &str) -> Result<serde_json::Value, String> {
    merge_events(settings, command, &events())
}

/// `claude-settings --write <file>`: merge into the file (created when missing) through
/// [`write_merged`], with `--resume-threshold` the resume environment too
/// ([`with_resume_env`]). `Ok(true)` when it changed.
pub fn write_settings(file: &Path, command: &str, resume_env: bool) -> Result<bool, String> {
    write_merged(file, |v| {
        let v = merge(v, command)?;
        if resume_env {
            with_resume_env(v)
        } else {
            Ok(v)
        }
    })
}

/// `claude-settings --resume-threshold`: the settings' `env` block given what `spawn` sets for a
/// claude it resumes (`CLAUDE_CODE_RESUME_THRESHOLD_MINUTES`, [`crate::agents::claude::RESUME_ENV`]),
/// so that a studio's own `claude --resume` shows no "resume from summary" dialog. Every other
/// variable of the block is kept; one that is not a JSON object is refused.
pub fn with_resume_env(mut settings: serde_json::Value) -> Result<serde_json::Value, String> {
    let obj = settings
        .as_object_mut()
        .ok_or("the settings are not a JSON object")?;
    let env = obj
        .entry("env")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or("\"env\" is not a JSON object")?;
    for (k, v) in crate::agents::claude::RESUME_ENV {
        env.insert((*k).to_string(), (*v).into());
    }
    Ok(settings)
}

/// Whether a hook entry's command is one of ours, by any of our hook subcommands
/// (`claude-hook`, `hook --agent <name>`).
pub(crate) fn is_ours_any(hook: &serde_json::Value) -> bool {
    is_ours(hook)
        || hook
            .get("command")
            .and_then(|c| c.as_str())
            .is_some_and(|c| {
                let c = c.trim_end();
                c.rsplit_once(" hook --agent ")
                    .is_some_and(|(_, a)| !a.is_empty() && !a.contains(' '))
            })
}

/// [`merge`] for the events `events`, our entries known by [`is_ours_any`].
pub(crate) fn merge_events(
    mut settings: serde_json::Value,
    command: &str,
    events: &[&str],
) -> Result<serde_json::Value, String> {
    let obj = settings
        .as_object_mut()
        .ok_or("the settings are not a JSON object")?;
    let hooks = obj
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or("\"hooks\" is not a JSON object")?;
    for ev in events {
        let groups = hooks
            .entry((*ev).to_string())
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .ok_or_else(|| format!("\"hooks\".{ev:?} is not a list"))?;
        for g in groups.iter_mut() {
            if let Some(list) = g.get_mut("hooks").and_then(|h| h.as_array_mut()) {
                list.retain(|h| !is_ours_any(h));
            }
        }
        groups.retain(|g| {
            g.get("hooks")
                .and_then(|h| h.as_array())
                .is_none_or(|l| !l.is_empty())
        });
        groups.push(our_group(command));
    }
    Ok(settings)
}

/// Merge into a JSON settings file with `f` (the document, `{}` when the file is missing or
/// empty) and replace it through [`user_file`], the way `claude-settings --write` does: garbage
/// is left alone; an unchanged document is not written; a symlink is followed (the file it names
/// is written, the link kept); its owner, group and mode are kept (0600 for a new file); a FIFO,
/// socket or device, a file with other hard links and a file that cannot be written back are
/// refused, left alone. `Ok(true)` when it changed.
pub fn write_merged(
    file: &Path,
    merge: impl FnOnce(serde_json::Value) -> Result<serde_json::Value, String>,
) -> Result<bool, String> {
    let f = user_file::read(file).map_err(|e| e.to_string())?;
    let target = f.path.display();
    let current = match f.text.as_deref().map(str::trim) {
        None | Some("") => serde_json::json!({}),
        Some(t) => serde_json::from_str(t)
            .map_err(|e| format!("{target} is not valid JSON ({e}): left alone"))?,
    };
    let merged = merge(current.clone()).map_err(|e| format!("{target}: {e}: left alone"))?;
    if f.text.is_some() && merged == current {
        return Ok(false);
    }
    let mut text = serde_json::to_string_pretty(&merged)
        .map_err(|e| format!("failed to encode the settings: {e}"))?;
    text.push('\n');
    user_file::replace(&f, text.as_bytes()).map_err(|e| e.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(json: &str) -> HookInput {
        HookInput::parse(json).unwrap()
    }

    #[test]
    fn the_blocked_prompt_says_why_the_chat_is_reaped() {
        // (reason in the journal, said, never said)
        let table = [
            (Some(ReapReason::Idle), "idle past", "memory"),
            (Some(ReapReason::Memory), "to free memory", "idle"),
            (
                Some(ReapReason::Bloat),
                "CCS_ENGINE_SESSION_MEM_MAX",
                "idle",
            ),
            (
                Some(ReapReason::MaxIdle),
                "CCS_ENGINE_MAX_IDLE",
                "free memory",
            ),
            (None, "being reaped now", "memory"),
        ];
        for (reason, said, not) in table {
            let m = blocked_reason("7", reason);
            assert!(m.contains(said) && !m.contains(not), "{reason:?}: {m}");
            assert!(m.contains("ccs-reap resume 7"), "{m}");
        }
    }

    #[test]
    fn event_to_action_table() {
        let cid = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";
        let table: &[(&str, HookAction)] = &[
            (
                &format!(
                    r#"{{"hook_event_name":"SessionStart","session_id":"{cid}","source":"startup"}}"#
                ),
                HookAction::SetCid(cid.into()),
            ),
            (
                &format!(
                    r#"{{"hook_event_name":"SessionStart","session_id":"{cid}","source":"resume"}}"#
                ),
                HookAction::SetCid(cid.into()),
            ),
            (
                &format!(
                    r#"{{"hook_event_name":"SessionStart","session_id":"{cid}","source":"compact"}}"#
                ),
                HookAction::SetCid(cid.into()),
            ),
            (
                r#"{"hook_event_name":"UserPromptSubmit","prompt":"hi","session_id":"x"}"#,
                HookAction::TurnBegin,
            ),
            (
                r#"{"hook_event_name":"Stop","background_tasks":[],"last_assistant_message":"ok"}"#,
                HookAction::TurnEnd,
            ),
            (r#"{"hook_event_name":"Stop"}"#, HookAction::TurnEnd),
            (
                r#"{"hook_event_name":"Stop","background_tasks":null}"#,
                HookAction::TurnEnd,
            ),
            (
                r#"{"hook_event_name":"Stop","background_tasks":[{"id":"b1"}]}"#,
                HookAction::Busy,
            ),
            (
                r#"{"hook_event_name":"Stop","background_tasks":{"b1":1}}"#,
                HookAction::Busy,
            ),
            (
                r#"{"hook_event_name":"PreCompact","trigger":"manual"}"#,
                HookAction::CompactBegin,
            ),
            (
                r#"{"hook_event_name":"PreCompact","trigger":"auto"}"#,
                HookAction::Nothing("an automatic compaction runs inside its turn, or in the background (a precomputed summary, which no PostCompact or Stop follows): it marks nothing".into()),
            ),
            (
                r#"{"hook_event_name":"PostCompact","trigger":"manual"}"#,
                HookAction::CompactEnd,
            ),
            (
                r#"{"hook_event_name":"SessionEnd","reason":"other"}"#,
                HookAction::ClearTurn,
            ),
        ];
        for (json, want) in table {
            assert_eq!(action(&ev(json)), *want, "{json}");
        }
        // Nothing: an invalid or missing cid, an automatic compaction's end, unknown events.
        for json in [
            r#"{"hook_event_name":"SessionStart","session_id":"-rf"}"#,
            r#"{"hook_event_name":"SessionStart","session_id":"a b"}"#,
            r#"{"hook_event_name":"SessionStart","session_id":"x;touch /tmp/p"}"#,
            r#"{"hook_event_name":"SessionStart","session_id":""}"#,
            r#"{"hook_event_name":"SessionStart"}"#,
            r#"{"hook_event_name":"PostCompact","trigger":"auto"}"#,
            r#"{"hook_event_name":"Notification"}"#,
            r#"{"session_id":"abc"}"#,
            r#"{}"#,
        ] {
            assert!(
                matches!(action(&ev(json)), HookAction::Nothing(_)),
                "{json}: {:?}",
                action(&ev(json))
            );
        }
        assert!(HookInput::parse("not json").is_err());
        assert!(HookInput::parse(r#"{"hook_event_name":5}"#).is_err());
    }

    #[test]
    fn tmux_env_and_pane() {
        let table: &[(&str, Option<&str>)] = &[
            ("/tmp/tmux-0/default,123,0", Some("/tmp/tmux-0/default")),
            ("/tmp/a,b/sock,99,4", Some("/tmp/a,b/sock")),
            ("/tmp/sock,1", None),
            (",1,2", None),
            ("", None),
        ];
        for (env, want) in table {
            assert_eq!(socket_of_tmux_env(env), *want, "{env:?}");
        }
        for (p, ok) in [
            ("%0", true),
            ("%123", true),
            ("%", false),
            ("1", false),
            ("%1;", false),
            ("%-1", false),
            ("%1 ", false),
            ("%99999999999", false),
        ] {
            assert_eq!(valid_pane(p), ok, "{p:?}");
        }
    }

    #[test]
    fn where_from_compares_the_canonical_socket() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let sock = Socket::Path(real.join("s"));
        let via_link = format!("{}/link/s,10,0", dir.path().display());
        assert_eq!(
            where_from(&sock, Some(&via_link), Some("%3")),
            Ok("%3".into())
        );
        let other = format!("{}/real/t,10,0", dir.path().display());
        assert!(where_from(&sock, Some(&other), Some("%3")).is_err());
        assert!(where_from(&sock, None, Some("%3")).is_err());
        assert!(where_from(&sock, Some(""), Some("%3")).is_err());
        assert!(where_from(&sock, Some(&via_link), None).is_err());
        assert!(where_from(&sock, Some(&via_link), Some("=ccs-1:")).is_err());
    }

    #[test]
    fn command_quotes_every_value() {
        let env = vec![
            (
                "CCS_TMUX_SOCKET_PATH".to_string(),
                "/tmp/it's here/s".to_string(),
            ),
            ("CCS_SESSION_PREFIX".to_string(), "ccs-".to_string()),
            (
                "CCS_REAP_STATE_DIR".to_string(),
                "/x/$(touch p)`y`".to_string(),
            ),
        ];
        let c = hook_command(Path::new("/opt/my bin/ccs-reap"), &env);
        assert_eq!(
            c,
            r#"CCS_TMUX_SOCKET_PATH='/tmp/it'\''s here/s' CCS_SESSION_PREFIX='ccs-' CCS_REAP_STATE_DIR='/x/$(touch p)`y`' '/opt/my bin/ccs-reap' claude-hook"#
        );
        // What a shell makes of it: the values, literally.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(c.replace("'/opt/my bin/ccs-reap' claude-hook", "env"))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.contains("CCS_TMUX_SOCKET_PATH=/tmp/it's here/s\n"),
            "{out}"
        );
        assert!(
            out.contains("CCS_REAP_STATE_DIR=/x/$(touch p)`y`\n"),
            "{out}"
        );
    }

    #[test]
    fn merge_keeps_everything_else_and_is_idempotent() {
        let cmd = "CCS_SESSION_PREFIX='ccs-' '/bin/ccs-reap' claude-hook";
        let theirs = serde_json::json!({
            "model": "opus",
            "hooks": {
                "Stop": [ { "hooks": [ { "type": "command", "command": "notify-send done" } ] } ],
                "PreToolUse": [ { "matcher": "Bash", "hooks": [ { "type": "command", "command": "audit" } ] } ],
                "SessionStart": [ { "hooks": [
                    { "type": "command", "command": "echo hi" },
                    { "type": "command", "command": "'/old/ccs-reap' claude-hook" }
                ] } ],
                "SessionEnd": [ { "hooks": [ { "type": "command", "command": "'/old/ccs-reap' claude-hook" } ] } ]
            }
        });
        let once = merge(theirs.clone(), cmd).unwrap();
        let twice = merge(once.clone(), cmd).unwrap();
        assert_eq!(once, twice);
        assert_eq!(once["model"], "opus");
        assert_eq!(once["hooks"]["PreToolUse"], theirs["hooks"]["PreToolUse"]);
        let stop = once["hooks"]["Stop"].as_array().unwrap();
        assert_eq!(stop.len(), 2);
        assert_eq!(stop[0], theirs["hooks"]["Stop"][0]);
        assert_eq!(stop[1], our_group(cmd));
        // The old binary's entry is gone, the user's own kept; a group of ours alone removed.
        let start = once["hooks"]["SessionStart"].as_array().unwrap();
        assert_eq!(start.len(), 2, "{start:?}");
        assert_eq!(start[0]["hooks"].as_array().unwrap().len(), 1);
        assert_eq!(start[0]["hooks"][0]["command"], "echo hi");
        assert_eq!(once["hooks"]["SessionEnd"].as_array().unwrap().len(), 1);
        for e in events() {
            let n = once["hooks"][e]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["hooks"].as_array().unwrap())
                .filter(|h| is_ours(h))
                .count();
            assert_eq!(n, 1, "{e}");
        }
        // From nothing: the fragment itself.
        assert_eq!(merge(serde_json::json!({}), cmd).unwrap(), fragment(cmd));
        // Not ours to fix.
        assert!(merge(serde_json::json!([]), cmd).is_err());
        assert!(merge(serde_json::json!({"hooks": []}), cmd).is_err());
        assert!(merge(serde_json::json!({"hooks": {"Stop": {}}}), cmd).is_err());
    }

    #[test]
    fn write_settings_merges_in_place() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("settings.json");
        let cmd = "'/bin/ccs-reap' claude-hook";
        // Created when missing, its directory too.
        let nested = dir.path().join("proj/.claude/settings.json");
        assert_eq!(write_settings(&nested, cmd, false), Ok(true));
        assert_eq!(write_settings(&nested, cmd, false), Ok(false));
        assert_eq!(write_settings(&f, cmd, false), Ok(true));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(v, fragment(cmd));
        assert_eq!(write_settings(&f, cmd, false), Ok(false));
        // Through a symlink, mode kept; garbage left alone.
        std::fs::write(&f, r#"{"env": {"A": "1"}}"#).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(write_settings(&link, cmd, false), Ok(true));
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(v["env"]["A"], "1");
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&f, "{ nope").unwrap();
        assert!(write_settings(&f, cmd, false).is_err());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{ nope");
    }

    /// `claude-settings --resume-threshold` (issue 43.9): the resume threshold `spawn` gives a
    /// claude it resumes, in the settings' `env` block, the user's other variables kept; twice
    /// changes nothing; without the flag an existing one is left alone.
    #[test]
    fn the_resume_threshold_goes_into_the_env_block_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("settings.json");
        let cmd = "'/bin/ccs-reap' claude-hook";
        std::fs::write(&f, r#"{"env": {"A": "1"}, "model": "opus"}"#).unwrap();
        assert_eq!(write_settings(&f, cmd, true), Ok(true));
        assert_eq!(write_settings(&f, cmd, true), Ok(false));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let (k, want) = crate::agents::claude::RESUME_ENV[0];
        assert_eq!(k, "CLAUDE_CODE_RESUME_THRESHOLD_MINUTES");
        assert_eq!(v["env"][k], want);
        assert_eq!(
            (v["env"]["A"].as_str(), v["model"].as_str()),
            (Some("1"), Some("opus"))
        );
        assert_eq!(write_settings(&f, cmd, false), Ok(false));
        assert_eq!(with_resume_env(fragment(cmd)).unwrap()["env"][k], want);
        assert!(with_resume_env(serde_json::json!({"env": []})).is_err());
        std::fs::write(&f, r#"{"env": "x"}"#).unwrap();
        assert!(write_settings(&f, cmd, true).is_err());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), r#"{"env": "x"}"#);
    }
}
