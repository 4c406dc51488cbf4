//! The hook mapping Codex and Gemini CLI share: their payloads carry `hook_event_name` and
//! `session_id`, and each event means one thing (no background tasks, no compaction events).

use super::{HookAction, HookNames};
use crate::core::policy::valid_cid;

/// What one hook payload does, by the agent's [`HookNames`]: its session-start event sets the
/// cid (`session_id`), a turn-begin event begins a turn, a turn-end event ends it, its
/// session-end event clears it; anything else is nothing.
pub(crate) fn action_by_names(hooks: &HookNames, ev: &serde_json::Value) -> HookAction {
    if !ev.is_object() {
        return HookAction::Nothing("the hook event is not a JSON object".into());
    }
    let name = match ev.get("hook_event_name") {
        None | Some(serde_json::Value::Null) => "",
        Some(serde_json::Value::String(s)) => s.as_str(),
        Some(other) => return HookAction::Nothing(format!("hook_event_name {other} is not text")),
    };
    if name.is_empty() {
        return HookAction::Nothing("no hook_event_name in the event".into());
    }
    if name == hooks.session_start {
        return match ev.get("session_id") {
            Some(serde_json::Value::String(c)) if valid_cid(c) => HookAction::SetCid(c.clone()),
            Some(serde_json::Value::String(c)) => HookAction::Nothing(format!(
                "{name} with an invalid session_id {c:?}: @ccs_cid left alone"
            )),
            _ => HookAction::Nothing(format!("{name} without a session_id")),
        };
    }
    if hooks.turn_begin.contains(&name) {
        return HookAction::TurnBegin;
    }
    if hooks.turn_end.contains(&name) {
        return HookAction::TurnEnd;
    }
    if hooks.session_end == Some(name) {
        return HookAction::ClearTurn;
    }
    HookAction::Nothing(format!("event {name:?} is not one ccs-reap acts on"))
}

/// Claude's hook settings shape, which Codex's `hooks.json` and Gemini CLI's `settings.json`
/// share: `{"hooks": {<event>: [{"hooks": [{"type": "command", "command": ...}]}]}}`.
pub(crate) fn settings_by_names(hooks: &HookNames, command: &str) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for ev in hooks.wired() {
        out.insert(
            ev.to_string(),
            serde_json::json!([{ "hooks": [ { "type": "command", "command": command } ] }]),
        );
    }
    serde_json::json!({ "hooks": out })
}

/// `argv` split into (the words up to and including the program word, the words after it),
/// a one-word plain shell string split first.
pub(crate) fn split_at_program(
    agent: &super::Agent,
    argv: &[String],
) -> Result<(Vec<String>, Vec<String>), super::ArgvError> {
    if argv.is_empty() {
        return Err(super::ArgvError::Empty);
    }
    let words = super::words_of_shell_string(argv)?.unwrap_or_else(|| argv.to_vec());
    let at = super::program_index(agent, &words)?;
    Ok((words[..=at].to_vec(), words[at + 1..].to_vec()))
}

/// `$<var>`, else `$HOME/<dir>`, from the agent's environment, as an absolute path.
pub(crate) fn home_dir(
    env: &super::Env,
    var: &'static str,
    dir: &str,
) -> Result<std::path::PathBuf, super::PathError> {
    use super::PathError;
    let p = match super::env_get(env, var) {
        Some("") => return Err(PathError::EmptyVar { var }),
        Some(v) => std::path::PathBuf::from(v),
        None => match super::env_get(env, "HOME") {
            Some(h) if !h.is_empty() => std::path::Path::new(h).join(dir),
            _ => return Err(PathError::NoHome { var }),
        },
    };
    if !p.is_absolute() {
        return Err(PathError::NotAbsolute { what: var, path: p });
    }
    Ok(p)
}
