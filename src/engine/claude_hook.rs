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

use std::path::Path;

use serde::Deserialize;

use crate::agents::HookAction;
use crate::config::Config;
use crate::core::policy;
use crate::engine::context::Handles;
use crate::engine::context::Reaper;
use crate::engine::hook_common::settings::{
    hook_command_with, merge_events, write_merged, SettingsError, SUBCOMMAND,
};
use crate::engine::hook_common::{act_on, HookError, NotHere};

pub use crate::engine::hook_common::settings::sh_quote;
pub use crate::engine::hook_common::{
    dry_run_of, reaped_because, valid_pane, where_from, HookOutcome,
};

/// A hook event that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("the hook event is not valid JSON: {0}")]
pub struct BadEvent(#[from] serde_json::Error);

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
    pub fn parse(text: &str) -> Result<HookInput, BadEvent> {
        let raw: serde_json::Value = serde_json::from_str(text)?;
        let mut ev: HookInput = serde_json::from_value(raw.clone())?;
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

pub use crate::core::policy::socket_of_tmux_env;

/// Act on one event from the pane `pane` (see [`where_from`]) of `r`'s server.
pub async fn act(r: &Reaper, ev: &HookInput, pane: &str) -> Result<HookOutcome, HookError> {
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
    act_on(Handles::of(r), &what, &s).await
}

/// What [`act`] would do with `ev` from pane `pane` (`Err`: why the hook does nothing before it
/// asks tmux, from [`where_from`]), said exactly and done not: the one line `claude-hook
/// --dry-run` prints. It reads the pane's session (one tmux call) and writes nothing.
pub async fn dry_run(r: &Reaper, ev: &HookInput, pane: Result<String, NotHere>) -> String {
    dry_run_of(&r.cfg, &r.tmux, action(ev), pane).await
}

// ---------------------------------------------------------------- settings

/// The hook events `claude-settings` wires, in the order they are written: Claude Code's
/// descriptor's ([`crate::agents::claude::HOOKS`]).
pub fn events() -> Vec<&'static str> {
    crate::agents::claude::HOOKS.wired()
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

/// The settings fragment: `{"hooks": {<event>: [{"hooks": [{"type": "command", ...}]}]}}`, as
/// Claude Code's descriptor writes it ([`crate::agents::claude::hook_settings`]).
pub fn fragment(command: &str) -> serde_json::Value {
    crate::agents::claude::hook_settings(command)
}

/// Merge our hooks into `settings` (a settings file's JSON): every other key, event and hook is
/// kept; our earlier entries (whatever binary or settings they named) are replaced by one group
/// per event, appended. Merging twice gives the same document.
pub fn merge(
    settings: serde_json::Value,
    command: &str,
) -> Result<serde_json::Value, SettingsError> {
    merge_events(settings, command, &events())
}

/// `claude-settings --write <file>`: merge into the file (created when missing) through
/// [`write_merged`], with `--resume-threshold` the resume environment too
/// ([`with_resume_env`]). `Ok(true)` when it changed.
pub fn write_settings(file: &Path, command: &str, resume_env: bool) -> Result<bool, SettingsError> {
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
pub fn with_resume_env(
    mut settings: serde_json::Value,
) -> Result<serde_json::Value, SettingsError> {
    let obj = settings.as_object_mut().ok_or(SettingsError::NotAnObject)?;
    let env = obj
        .entry("env")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or(SettingsError::KeyNotAnObject("env"))?;
    for (k, v) in crate::agents::claude::RESUME_ENV {
        env.insert((*k).to_string(), (*v).into());
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Socket;
    use crate::core::policy::ReapReason;
    use crate::engine::hook_common::blocked_reason;
    use crate::engine::hook_common::settings::{is_ours, our_group};

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
        assert_eq!(
            write_settings(&nested, cmd, false).map_err(|e| e.to_string()),
            Ok(true)
        );
        assert_eq!(
            write_settings(&nested, cmd, false).map_err(|e| e.to_string()),
            Ok(false)
        );
        assert_eq!(
            write_settings(&f, cmd, false).map_err(|e| e.to_string()),
            Ok(true)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(v, fragment(cmd));
        assert_eq!(
            write_settings(&f, cmd, false).map_err(|e| e.to_string()),
            Ok(false)
        );
        // Through a symlink, mode kept; garbage left alone.
        std::fs::write(&f, r#"{"env": {"A": "1"}}"#).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(
            write_settings(&link, cmd, false).map_err(|e| e.to_string()),
            Ok(true)
        );
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
        assert_eq!(
            write_settings(&f, cmd, true).map_err(|e| e.to_string()),
            Ok(true)
        );
        assert_eq!(
            write_settings(&f, cmd, true).map_err(|e| e.to_string()),
            Ok(false)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let (k, want) = crate::agents::claude::RESUME_ENV[0];
        assert_eq!(k, "CLAUDE_CODE_RESUME_THRESHOLD_MINUTES");
        assert_eq!(v["env"][k], want);
        assert_eq!(
            (v["env"]["A"].as_str(), v["model"].as_str()),
            (Some("1"), Some("opus"))
        );
        assert_eq!(
            write_settings(&f, cmd, false).map_err(|e| e.to_string()),
            Ok(false)
        );
        assert_eq!(with_resume_env(fragment(cmd)).unwrap()["env"][k], want);
        assert!(with_resume_env(serde_json::json!({"env": []})).is_err());
        std::fs::write(&f, r#"{"env": "x"}"#).unwrap();
        assert!(write_settings(&f, cmd, true).is_err());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), r#"{"env": "x"}"#);
    }
}
