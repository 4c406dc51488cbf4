//! Google's Gemini CLI: what ccs-reap knows of it, measured against 0.61.0 (`../shared/DESIGN.md`,
//! "Agent CLIs"; `tests/e2e/NOTES.md`, "Codex and Gemini CLI").
//!
//! The id is told by `SessionStart` at launch, or chosen up front with `--session-id <uuid>`;
//! `gemini --resume <uuid>` brings the history back. By default gemini relaunches itself (a node
//! parent and a node child); `GEMINI_CLI_NO_RELAUNCH=true` keeps it one process, which exits on
//! SIGHUP, so ccs-reap sets it for every gemini it starts.

use std::path::{Path, PathBuf};

use super::claude::is_uuid;
use super::turns::{action_by_names, home_dir, settings_by_names, split_at_program};
use super::{
    base, Agent, ArgvError, Env, HookAction, HookNames, IdSource, PathError, ResumePlan, StartMode,
    Transcript,
};
use crate::core::policy::valid_cid;

/// Gemini CLI.
pub static GEMINI: Agent = Agent {
    name: "gemini",
    display: "Gemini CLI",
    id_sources: &[
        IdSource::Argv {
            flags: &["--session-id", "--resume", "-r"],
        },
        IdSource::Hook {
            event: "SessionStart",
            field: "session_id",
        },
    ],
    hooks: HOOKS,
    hook_action,
    is_program_word,
    cid_in_argv,
    resume_argv,
    bare_argv,
    transcript_path,
    transcript_glob: true,
    transcript_kind: Some(transcript_kind),
    cid_at_first_prompt: false,
    hooks_fix:
        "ccs-reap hook-settings --agent gemini --write ~/.gemini/settings.json, then restart gemini",
    env_vars: &[],
    status_path: None,
    parse_status: None,
    resume_env: &[],
    start_env: START_ENV,
    hook_settings,
    process_tree: "gemini runs on node; by default it relaunches itself: a node parent (about \
                   145 MB) waits on a node child (about 250 MB) that runs the chat, and in 3 of 9 \
                   kills both lived on as orphans (SIGTERM to the parent did nothing) until the \
                   child got a signal; with GEMINI_CLI_NO_RELAUNCH=true (set by ccs-reap for the \
                   chats it starts) it is one process that exits on SIGHUP",
};

/// Gemini CLI's hook events (0.61.0): `SessionEnd` fires on a kill only without the relaunch.
pub const HOOKS: HookNames = HookNames {
    session_start: "SessionStart",
    turn_begin: &["BeforeAgent"],
    turn_end: &["AfterAgent"],
    compact_begin: None,
    compact_end: None,
    session_end: Some("SessionEnd"),
};

/// One process instead of a parent waiting on a child.
pub const START_ENV: &[(&str, &str)] = &[("GEMINI_CLI_NO_RELAUNCH", "true")];

/// gemini's dir is `$HOME/.gemini`. (0.61.0 reads `GEMINI_CLI_HOME` in two ways, once as the
/// home that holds `.gemini`, once as `.gemini` itself: ccs-reap does not follow it.)
const HOME_VAR: &str = "HOME";

/// What one Gemini CLI hook payload does.
pub fn hook_action(ev: &serde_json::Value) -> HookAction {
    action_by_names(&HOOKS, ev)
}

/// `settings.json`'s fragment: the hooks (Claude's shape) and `hooksConfig.enabled`, without
/// which gemini runs none.
pub fn hook_settings(command: &str) -> serde_json::Value {
    let mut v = settings_by_names(&HOOKS, command);
    v["hooksConfig"] = serde_json::json!({ "enabled": true });
    v
}

/// Whether `w` starts Gemini CLI: basename `gemini`, a path through `gemini-cli/`
/// (`node .../gemini-cli/bundle/gemini.js`), or the npm package `@google/gemini-cli[@version]`.
pub fn is_program_word(w: &str) -> bool {
    let b = base(w);
    if b.starts_with('-') {
        return false;
    }
    b == "gemini"
        || w.contains("/gemini-cli/")
        || w == "@google/gemini-cli"
        || w.starts_with("@google/gemini-cli@")
}

/// The id flags: `--resume`/`-r` (whose value may be `latest` or an index) and `--session-id`.
fn id_flag(w: &str) -> Option<(&'static str, Option<&str>)> {
    for f in ["--resume", "--session-id"] {
        if w == f {
            return Some((f, None));
        }
        if let Some(v) = w.strip_prefix(f).and_then(|r| r.strip_prefix('=')) {
            return Some((f, Some(v)));
        }
    }
    (w == "-r").then_some(("--resume", None))
}

/// The words after the program word without their id flags, and the id values they named.
fn strip(rest: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut kept, mut ids) = (Vec::new(), Vec::new());
    let mut i = 0;
    while let Some(w) = rest.get(i) {
        if w == "--" {
            kept.extend(rest[i..].iter().cloned());
            break;
        }
        match id_flag(w) {
            Some((_, Some(v))) => ids.push(v.to_string()),
            Some((_, None)) => {
                if let Some(v) = rest.get(i + 1).filter(|v| !v.starts_with('-')) {
                    ids.push(v.clone());
                    i += 1;
                }
            }
            None => kept.push(w.clone()),
        }
        i += 1;
    }
    (kept, ids)
}

/// The conversation id a command line passes to gemini: the last `--resume`/`-r`/`--session-id`
/// value that is a UUID (`--resume latest` or `--resume 3` names no id).
pub fn cid_in_argv(argv: &[String]) -> Option<String> {
    let (_, rest) = split_at_program(&GEMINI, argv).ok()?;
    strip(&rest).1.into_iter().rev().find(|v| is_uuid(v))
}

/// The command that brings back `cid`: the command without its own id flags, then
/// `--resume <cid>` when the transcript exists, else `--session-id <cid>` (a new chat with the
/// same id) when `cid` is a UUID, else no id flag ([`StartMode::FreshNewId`]).
pub fn resume_argv(
    argv: &[String],
    cid: &str,
    transcript_exists: bool,
) -> Result<ResumePlan, ArgvError> {
    if !valid_cid(cid) {
        return Err(ArgvError::BadCid(cid.to_string()));
    }
    let (mut out, rest) = split_at_program(&GEMINI, argv)?;
    let (kept, _) = strip(&rest);
    let (flags, mode) = if transcript_exists {
        (vec!["--resume", cid], StartMode::Resume)
    } else if is_uuid(cid) {
        (vec!["--session-id", cid], StartMode::Fresh)
    } else {
        (vec![], StartMode::FreshNewId)
    };
    let dd = kept.iter().position(|w| w == "--").unwrap_or(kept.len());
    out.extend(kept[..dd].iter().cloned());
    out.extend(flags.into_iter().map(String::from));
    out.extend(kept[dd..].iter().cloned());
    Ok(ResumePlan { argv: out, mode })
}

/// The command line as a tombstone keeps it: without its own `--resume`/`-r`/`--session-id`.
pub fn bare_argv(argv: &[String]) -> Result<Vec<String>, ArgvError> {
    let (mut out, rest) = split_at_program(&GEMINI, argv)?;
    out.extend(strip(&rest).0);
    Ok(out)
}

/// Where `cid`'s transcript lives, as a glob (see [`Agent::transcript_glob`]):
/// `$HOME/.gemini/tmp/*/chats/session-*-<first 8 of cid>.jsonl` (the project directory's name is gemini's own choice, kept in
/// `~/.gemini/projects.json`). The 8 characters are not the whole id: a caller that must be
/// sure reads the file's `sessionId`.
pub fn transcript_path(env: &Env, _cwd: &Path, cid: &str) -> Result<PathBuf, PathError> {
    if !valid_cid(cid) {
        return Err(PathError::BadCid(cid.to_string()));
    }
    let home = home_dir(env, HOME_VAR, "")?;
    let id8: String = cid.chars().take(8).collect();
    Ok(home
        .join(".gemini")
        .join("tmp")
        .join("*")
        .join("chats")
        .join(format!("session-*-{id8}.jsonl")))
}

/// What a Gemini CLI session file (its text) holds of conversation `cid`, by 0.61.0's own rules
/// (`bundle/chunk-JDPZ4CE3.js`: `loadConversationRecord`, `isResumableMessageRecord`;
/// `chunk-2YTYPKEZ.js`: `getAllSessionFiles`, `SessionSelector.sessionExists`):
///
/// - the file is a conversation's when its metadata (`sessionId` and `projectHash`, from a
///   metadata line or a `$set`; else the whole file as a legacy JSON record with a `sessionId`)
///   names `cid` exactly: then `--session-id <cid>` is refused ("Session ID ... already exists");
/// - `--resume <cid>` lists it only when a message left after the rewinds (`$rewindTo`; a
///   `$set` of `messages` replaces them all) is resumable, and the file is no sub-agent's
///   (`kind: "subagent"`): a `user` message whose text (trimmed) is not empty and does not start
///   with `/`, `?`, `<session_context>` or `<hook_context>`, or a `gemini` message with text,
///   tool calls or thoughts ([`Transcript::Resumable`]);
/// - else nothing was said in it ([`Transcript::Unused`]): gemini writes the file at launch,
///   with its metadata line alone.
///
/// A file of another conversation (the file name holds only the first 8 characters of the id),
/// or none that parses, is [`Transcript::Missing`].
pub fn transcript_kind(text: &str, cid: &str) -> Transcript {
    use serde_json::Value;
    let (meta, messages) = replay(text);
    let kinds = messages.kinds;
    let truthy = |v: Option<&Value>| {
        !matches!(v, None | Some(Value::Null) | Some(Value::Bool(false)))
            && v.and_then(Value::as_str) != Some("")
    };
    let (session, resumable, kind) =
        if truthy(meta.get("sessionId")) && truthy(meta.get("projectHash")) {
            (
                meta.get("sessionId").cloned(),
                kinds.values().any(|r| *r),
                meta.get("kind").cloned(),
            )
        } else {
            // A legacy `.json` record: the whole file, one object with a `sessionId`.
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(o)) if o.contains_key("sessionId") => (
                    o.get("sessionId").cloned(),
                    o.get("messages")
                        .and_then(Value::as_array)
                        .is_some_and(|m| m.iter().any(is_resumable)),
                    o.get("kind").cloned(),
                ),
                _ => return Transcript::Missing,
            }
        };
    if session.as_ref().and_then(Value::as_str) != Some(cid) {
        return Transcript::Missing;
    }
    if resumable && kind.as_ref().and_then(Value::as_str) != Some("subagent") {
        Transcript::Resumable
    } else {
        Transcript::Unused
    }
}

/// The messages a JSONL transcript holds after its rewinds, in order (as gemini's listing keeps
/// them), and whether each is resumable.
#[derive(Default)]
struct Messages {
    ids: Vec<String>,
    kinds: std::collections::HashMap<String, bool>,
}

impl Messages {
    fn add(&mut self, m: &serde_json::Value) {
        if let Some(id) = m.get("id").and_then(serde_json::Value::as_str) {
            self.ids.push(id.to_string());
            self.kinds.insert(id.to_string(), is_resumable(m));
        }
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.kinds.clear();
    }

    /// `$rewindTo`: the message `to` and every one after it go (all of them when `to` is not
    /// there).
    fn rewind_to(&mut self, to: &str) {
        match self.ids.iter().position(|i| i == to) {
            Some(at) => {
                for gone in self.ids.split_off(at) {
                    self.kinds.remove(&gone);
                }
            }
            None => self.clear(),
        }
    }
}

/// A JSONL transcript read line by line: its metadata (the metadata lines and `$set`s, merged)
/// and its messages after the rewinds.
fn replay(text: &str) -> (serde_json::Map<String, serde_json::Value>, Messages) {
    use serde_json::{Map, Value};
    let mut meta: Map<String, Value> = Map::new();
    let mut messages = Messages::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(Value::Object(r)) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(to) = r.get("$rewindTo").and_then(Value::as_str) {
            messages.rewind_to(to);
        } else if r.get("id").is_some_and(Value::is_string) {
            messages.add(&Value::Object(r));
        } else if let Some(Value::Object(set)) = r.get("$set") {
            if let Some(Value::Array(msgs)) = set.get("messages") {
                messages.clear();
                for m in msgs {
                    messages.add(m);
                }
            }
            meta.extend(set.clone());
        } else if r.get("sessionId").is_some_and(Value::is_string)
            && r.get("projectHash").is_some_and(Value::is_string)
        {
            if let Some(Value::Array(msgs)) = r.get("messages") {
                for m in msgs {
                    messages.add(m);
                }
            }
            meta.extend(r);
        }
    }
    (meta, messages)
}

/// Whether gemini resumes one message record (`isResumableMessageRecord`).
fn is_resumable(m: &serde_json::Value) -> bool {
    let text = m.get("content").map(part_text).unwrap_or_default();
    let text = text.trim();
    let len = |k: &str| match m.get(k) {
        Some(serde_json::Value::Array(a)) => a.len(),
        Some(serde_json::Value::String(s)) => s.len(),
        _ => 0,
    };
    match m.get("type").and_then(serde_json::Value::as_str) {
        Some("user") => {
            !(text.is_empty()
                || text.starts_with('/')
                || text.starts_with('?')
                || text.starts_with("<session_context>")
                || text.starts_with("<hook_context>"))
        }
        Some("gemini") => !text.is_empty() || len("toolCalls") > 0 || len("thoughts") > 0,
        _ => false,
    }
}

/// A message's content as text, as gemini reads it to judge it (`partToString`, verbose): a
/// string, the parts of an array joined, a part's `text`, or a marker for a part that is no text
/// (a function call, a thought, data).
fn part_text(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(part_text).collect(),
        Value::Object(o) => {
            const MARKED: [&str; 8] = [
                "videoMetadata",
                "thought",
                "codeExecutionResult",
                "executableCode",
                "fileData",
                "functionCall",
                "functionResponse",
                "inlineData",
            ];
            if MARKED.iter().any(|k| o.contains_key(*k)) {
                return "[part]".into();
            }
            match o.get("text") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            }
        }
        _ => String::new(),
    }
}

/// Where `hook-settings --agent gemini --write` writes by default: `~/.gemini/settings.json`.
pub fn settings_file(env: &Env) -> Result<PathBuf, PathError> {
    Ok(home_dir(env, HOME_VAR, "")?
        .join(".gemini")
        .join("settings.json"))
}

/// What a user must know: gemini's folder-trust dialog blocks every hook until it is answered.
pub const TRUST_NOTE: &str = "Gemini CLI runs no hook in a folder it does not trust: answer its \
    folder-trust dialog once (or set security.folderTrust.enabled = false in settings.json \
    yourself); ccs-reap never writes that for you.";

#[cfg(test)]
mod tests;
