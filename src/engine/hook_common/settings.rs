//! The hooks' settings, shared by `claude-settings` and `hook-settings --agent <name>`: the hook
//! command's words, our entries known in any settings file, and the merge and write of a
//! settings file.

use std::path::Path;

use crate::adapters::user_file;

/// Why a settings document or file was not merged (the text is what the user sees).
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("the settings are not a JSON object")]
    NotAnObject,
    /// A key of the settings (`"env"`, `"hooks"`, `"hooksConfig"`) that is not a JSON object.
    #[error("{0:?} is not a JSON object")]
    KeyNotAnObject(&'static str),
    /// An event's entry under `"hooks"` that is not a list.
    #[error("\"hooks\".{0:?} is not a list")]
    EventNotAList(String),
    #[error("{file} is not valid JSON ({why}): left alone")]
    NotJson {
        file: String,
        why: serde_json::Error,
    },
    /// The merge refused the document of `file`.
    #[error("{file}: {why}: left alone")]
    Refused {
        file: String,
        why: Box<SettingsError>,
    },
    #[error("failed to encode the settings: {0}")]
    Encode(serde_json::Error),
    /// The file could not be read or replaced (the user file's own words).
    #[error("{0}")]
    File(String),
}

/// The subcommand word a hook command ends with: how `--write` knows its own entries.
pub(crate) const SUBCOMMAND: &str = "claude-hook";

/// `s` quoted for a POSIX shell (Claude Code runs a hook's command through one): single quotes,
/// a `'` inside as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The hook command ending in other words of ours (`hook --agent codex`), never a user's value.
pub(crate) fn hook_command_with(bin: &Path, env: &[(String, String)], sub: &[&str]) -> String {
    let mut words: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k}={}", sh_quote(v)))
        .collect();
    words.push(sh_quote(&bin.to_string_lossy()));
    words.extend(sub.iter().map(|w| w.to_string()));
    words.join(" ")
}

pub(crate) fn our_group(command: &str) -> serde_json::Value {
    serde_json::json!({ "hooks": [ { "type": "command", "command": command } ] })
}

/// Whether a hook entry's command is one of ours (any settings, any binary path).
pub(crate) fn is_ours(hook: &serde_json::Value) -> bool {
    hook.get("command")
        .and_then(|c| c.as_str())
        .is_some_and(|c| c.trim_end().ends_with(&format!(" {SUBCOMMAND}")))
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

/// Merge our hooks (`command`) into `settings` for the events `events`, our entries known by [`is_ours_any`].
pub(crate) fn merge_events(
    mut settings: serde_json::Value,
    command: &str,
    events: &[&str],
) -> Result<serde_json::Value, SettingsError> {
    let obj = settings.as_object_mut().ok_or(SettingsError::NotAnObject)?;
    let hooks = obj
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or(SettingsError::KeyNotAnObject("hooks"))?;
    for ev in events {
        let groups = hooks
            .entry((*ev).to_string())
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .ok_or_else(|| SettingsError::EventNotAList((*ev).to_string()))?;
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
    merge: impl FnOnce(serde_json::Value) -> Result<serde_json::Value, SettingsError>,
) -> Result<bool, SettingsError> {
    let f = user_file::read(file).map_err(|e| SettingsError::File(e.to_string()))?;
    let target = f.path.display();
    let current = match f.text.as_deref().map(str::trim) {
        None | Some("") => serde_json::json!({}),
        Some(t) => serde_json::from_str(t).map_err(|why| SettingsError::NotJson {
            file: target.to_string(),
            why,
        })?,
    };
    let merged = merge(current.clone()).map_err(|why| SettingsError::Refused {
        file: target.to_string(),
        why: Box::new(why),
    })?;
    if f.text.is_some() && merged == current {
        return Ok(false);
    }
    let mut text = serde_json::to_string_pretty(&merged).map_err(SettingsError::Encode)?;
    text.push('\n');
    user_file::replace(&f, text.as_bytes()).map_err(|e| SettingsError::File(e.to_string()))?;
    Ok(true)
}
