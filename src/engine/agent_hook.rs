//! `ccs-reap hook --agent <name>`: any agent's hook event (JSON on stdin), mapped by the agent's
//! descriptor ([`crate::agents`]) to the typed actions `claude-hook` takes, and the agent recorded
//! in the chat's `@ccs_agent`; `ccs-reap hook-settings --agent <name>`: the agent's own hook
//! settings, printed or merged with the writer `claude-settings` uses
//! ([`write_merged`]).

use std::path::Path;

use crate::agents::{Agent, HookAction};
use crate::engine::context::Handles;
use crate::engine::context::Reaper;
use crate::engine::hook_common::settings::{
    hook_command_with, merge_events, write_merged, SettingsError,
};
use crate::engine::hook_common::{act_on, skipped_asleep, HookError, HookOutcome};

pub use crate::adapters::tmux::AGENT_OPTION;

/// The action of one payload, by `agent`'s rules (pure).
pub fn action(agent: &Agent, ev: &serde_json::Value) -> HookAction {
    (agent.hook_action)(ev)
}

/// Act on one payload from `pane` of `r`'s server, as `claude-hook` does; when it tells the
/// conversation id, the chat's `@ccs_agent` is set to `agent`'s name too.
pub async fn act(
    r: &Reaper,
    agent: &Agent,
    ev: &serde_json::Value,
    pane: &str,
) -> Result<HookOutcome, HookError> {
    let what = action(agent, ev);
    if let HookAction::Nothing(why) = what {
        return Ok(HookOutcome::Skipped(why));
    }
    let Some(s) = r.tmux.session_of_pane(pane, &r.cfg.prefix).await? else {
        return Ok(HookOutcome::Skipped(format!(
            "pane {pane} is not in a {}<id> session",
            r.cfg.prefix
        )));
    };
    // Nothing at all in a session asleep, not even its agent's name ([`crate::engine::hook_common::asleep`]).
    if let Some(said) = skipped_asleep(&s) {
        return Ok(said);
    }
    if matches!(what, HookAction::SetCid(_))
        && !r
            .tmux
            .set_named(&s.name, AGENT_OPTION, Some(agent.name))
            .await?
    {
        return Ok(HookOutcome::Skipped(format!("{} is gone", s.name)));
    }
    act_on(Handles::of(r), &what, &s).await
}

/// The words the hook command ends with: `claude-hook` for Claude Code (its settings stay what
/// `claude-settings` writes), `hook --agent <name>` for the others.
pub fn subcommand(agent: &Agent) -> Vec<&'static str> {
    if agent.name == crate::agents::CLAUDE.name {
        vec!["claude-hook"]
    } else {
        vec!["hook", "--agent", agent.name]
    }
}

/// The hook command for `agent`: settings as environment assignments, then this binary.
pub fn hook_command(agent: &Agent, bin: &Path, env: &[(String, String)]) -> String {
    hook_command_with(bin, env, &subcommand(agent))
}

/// Merge `agent`'s hooks into a settings document: every other key, event and hook kept, our
/// earlier entries replaced; Gemini CLI's `hooksConfig.enabled` set (its hooks run only then).
/// Merging twice gives the same document.
pub fn merge(
    agent: &Agent,
    settings: serde_json::Value,
    command: &str,
) -> Result<serde_json::Value, SettingsError> {
    let events = agent.hooks.wired();
    let mut v = merge_events(settings, command, &events)?;
    let fragment = (agent.hook_settings)(command);
    if let Some(cfg) = fragment.get("hooksConfig").and_then(|c| c.as_object()) {
        let obj = v.as_object_mut().ok_or(SettingsError::NotAnObject)?;
        let hc = obj
            .entry("hooksConfig")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
            .ok_or(SettingsError::KeyNotAnObject("hooksConfig"))?;
        for (k, val) in cfg {
            hc.insert(k.clone(), val.clone());
        }
    }
    Ok(v)
}

/// `hook-settings --agent <name> --write FILE`: [`merge`] into the file, with the writer
/// `claude-settings --write` uses. `Ok(true)` when it changed.
pub fn write_settings(agent: &Agent, file: &Path, command: &str) -> Result<bool, SettingsError> {
    write_merged(file, |v| merge(agent, v, command))
}

/// What the user must still do for the hooks to run, if anything (Codex's trust, Gemini CLI's
/// folder trust): said, never done for them.
pub fn trust_note(agent: &Agent, file: Option<&Path>) -> Option<String> {
    match agent.name {
        "codex" => Some(crate::agents::codex::trust_note(
            file.unwrap_or(Path::new("$CODEX_HOME/hooks.json")),
        )),
        "gemini" => Some(crate::agents::gemini::TRUST_NOTE.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::{CLAUDE, CODEX, GEMINI};

    #[test]
    fn each_agent_maps_to_the_typed_actions() {
        let cid = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";
        let table: &[(&Agent, &str, HookAction)] = &[
            (&CLAUDE, "SessionStart", HookAction::SetCid(cid.into())),
            (&CLAUDE, "UserPromptSubmit", HookAction::TurnBegin),
            (&CLAUDE, "Stop", HookAction::TurnEnd),
            (&CLAUDE, "SessionEnd", HookAction::ClearTurn),
            (&CODEX, "SessionStart", HookAction::SetCid(cid.into())),
            (&CODEX, "UserPromptSubmit", HookAction::TurnBegin),
            (&CODEX, "Stop", HookAction::TurnEnd),
            (&GEMINI, "SessionStart", HookAction::SetCid(cid.into())),
            (&GEMINI, "BeforeAgent", HookAction::TurnBegin),
            (&GEMINI, "AfterAgent", HookAction::TurnEnd),
            (&GEMINI, "SessionEnd", HookAction::ClearTurn),
        ];
        for (a, ev, want) in table {
            let p = serde_json::json!({"hook_event_name": ev, "session_id": cid});
            assert_eq!(action(a, &p), *want, "{} {ev}", a.name);
        }
        // Another agent's turn events are nothing here.
        let p = serde_json::json!({"hook_event_name": "BeforeAgent", "session_id": cid});
        assert!(matches!(action(&CODEX, &p), HookAction::Nothing(_)));
    }

    #[test]
    fn merge_is_idempotent_keeps_theirs_and_enables_gemini_hooks() {
        let cmd = "CCS_SESSION_PREFIX='ccs-' '/bin/ccs-reap' hook --agent gemini";
        let theirs = serde_json::json!({
            "model": {"name": "gemini-2.5-flash"},
            "hooksConfig": {"notifications": false},
            "hooks": {
                "AfterAgent": [ { "hooks": [ { "type": "command", "command": "notify-send done" } ] } ],
                "BeforeAgent": [ { "hooks": [ { "type": "command", "command": "'/old/ccs-reap' hook --agent gemini" } ] } ]
            }
        });
        let once = merge(&GEMINI, theirs.clone(), cmd).unwrap();
        assert_eq!(merge(&GEMINI, once.clone(), cmd).unwrap(), once);
        assert_eq!(once["model"], theirs["model"]);
        assert_eq!(once["hooksConfig"]["enabled"], true);
        assert_eq!(once["hooksConfig"]["notifications"], false);
        let after = once["hooks"]["AfterAgent"].as_array().unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(after[0], theirs["hooks"]["AfterAgent"][0]);
        assert_eq!(once["hooks"]["BeforeAgent"].as_array().unwrap().len(), 1);
        assert_eq!(once["hooks"]["BeforeAgent"][0]["hooks"][0]["command"], cmd);
        for ev in GEMINI.hooks.wired() {
            assert!(once["hooks"][ev].is_array(), "{ev}");
        }
        // Codex: Claude's shape, no hooksConfig.
        let c = merge(&CODEX, serde_json::json!({}), "X hook --agent codex").unwrap();
        assert_eq!(c, (CODEX.hook_settings)("X hook --agent codex"));
        assert!(merge(&GEMINI, serde_json::json!({"hooksConfig": 1}), cmd).is_err());
        assert!(merge(&CODEX, serde_json::json!([]), cmd).is_err());
    }

    #[test]
    fn write_settings_keeps_mode_and_refuses_garbage() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("codex/hooks.json");
        let cmd = "'/bin/ccs-reap' hook --agent codex";
        assert_eq!(
            write_settings(&CODEX, &f, cmd).map_err(|e| e.to_string()),
            Ok(true)
        );
        assert_eq!(
            write_settings(&CODEX, &f, cmd).map_err(|e| e.to_string()),
            Ok(false)
        );
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            write_settings(&CODEX, &f, "'/new/ccs-reap' hook --agent codex")
                .map_err(|e| e.to_string()),
            Ok(true)
        );
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 1);
        std::fs::write(&f, "{ nope").unwrap();
        assert!(write_settings(&CODEX, &f, cmd).is_err());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{ nope");
        // A FIFO is not written.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(write_settings(&CODEX, &fifo, cmd).is_err());
        assert_eq!(subcommand(&CLAUDE), ["claude-hook"]);
        assert_eq!(subcommand(&GEMINI), ["hook", "--agent", "gemini"]);
        assert!(trust_note(&CODEX, Some(&f))
            .unwrap()
            .contains("--dangerously-bypass-hook-trust"));
    }
}
