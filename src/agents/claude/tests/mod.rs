//! Claude Code's descriptor: its hook events, the program word, and (in the submodules) the
//! resume argv and the files Claude Code writes.

use super::*;
use crate::agents::{by_name, program_index, ALL};

fn words(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn env(a: &[(&str, &str)]) -> Vec<(String, String)> {
    a.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const CID: &str = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";

mod argv;
mod paths;

#[test]
fn descriptor_is_found_by_name() {
    assert_eq!(by_name("claude").map(|a| a.display), Some("Claude Code"));
    assert!(by_name("Claude").is_none());
    assert!(by_name("Codex").is_none());
    let names: Vec<&str> = ALL.iter().map(|a| a.name).collect();
    assert_eq!(names, ["claude", "codex", "gemini"]);
    assert!(CLAUDE.id_sources.contains(&IdSource::Hook {
        event: "SessionStart",
        field: "session_id"
    }));
}

#[test]
fn hook_events_map_as_claude_hook_does() {
    let table: &[(String, HookAction)] = &[
        (
            format!(
                r#"{{"hook_event_name":"SessionStart","session_id":"{CID}","source":"startup"}}"#
            ),
            HookAction::SetCid(CID.into()),
        ),
        (
            format!(
                r#"{{"hook_event_name":"SessionStart","session_id":"{CID}","source":"resume"}}"#
            ),
            HookAction::SetCid(CID.into()),
        ),
        (
            format!(
                r#"{{"hook_event_name":"SessionStart","session_id":"{CID}","source":"compact"}}"#
            ),
            HookAction::SetCid(CID.into()),
        ),
        (
            r#"{"hook_event_name":"UserPromptSubmit","prompt":"hi","session_id":"x"}"#.into(),
            HookAction::TurnBegin,
        ),
        (
            r#"{"hook_event_name":"Stop","background_tasks":[],"last_assistant_message":"ok"}"#
                .into(),
            HookAction::TurnEnd,
        ),
        (r#"{"hook_event_name":"Stop"}"#.into(), HookAction::TurnEnd),
        (
            r#"{"hook_event_name":"Stop","background_tasks":null}"#.into(),
            HookAction::TurnEnd,
        ),
        (
            r#"{"hook_event_name":"Stop","background_tasks":[{"id":"b1"}]}"#.into(),
            HookAction::Busy,
        ),
        (
            r#"{"hook_event_name":"Stop","background_tasks":{"b1":1}}"#.into(),
            HookAction::Busy,
        ),
        (
            r#"{"hook_event_name":"PreCompact","trigger":"manual"}"#.into(),
            HookAction::CompactBegin,
        ),
        (
            r#"{"hook_event_name":"PreCompact","trigger":"auto"}"#.into(),
            HookAction::Nothing("an automatic compaction runs inside its turn, or in the background (a precomputed summary, which no PostCompact or Stop follows): it marks nothing".into()),
        ),
        (
            r#"{"hook_event_name":"PostCompact","trigger":"manual"}"#.into(),
            HookAction::CompactEnd,
        ),
        (
            r#"{"hook_event_name":"SessionEnd","reason":"other"}"#.into(),
            HookAction::ClearTurn,
        ),
    ];
    let nothing = [
        r#"{"hook_event_name":"SessionStart","session_id":"-rf"}"#,
        r#"{"hook_event_name":"SessionStart","session_id":"a b"}"#,
        r#"{"hook_event_name":"SessionStart","session_id":"x;touch /tmp/p"}"#,
        r#"{"hook_event_name":"SessionStart","session_id":""}"#,
        r#"{"hook_event_name":"SessionStart","session_id":null}"#,
        r#"{"hook_event_name":"SessionStart"}"#,
        r#"{"hook_event_name":"PostCompact","trigger":"auto"}"#,
        r#"{"hook_event_name":"PostCompact"}"#,
        r#"{"hook_event_name":"Notification","notification_type":"idle_prompt"}"#,
        r#"{"session_id":"abc"}"#,
        r#"{}"#,
    ];
    for (json, want) in table {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(hook_action(&v), *want, "{json}");
    }
    for json in nothing {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert!(matches!(hook_action(&v), HookAction::Nothing(_)), "{json}");
    }
    // Not an object, or a name that is not text: nothing, never a panic.
    for json in ["[]", "\"Stop\"", "null", r#"{"hook_event_name":5}"#] {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert!(matches!(hook_action(&v), HookAction::Nothing(_)), "{json}");
    }
}

#[test]
fn every_wired_event_means_something_to_the_mapping() {
    let cmd = "'/bin/ccs-reap' claude-hook";
    let settings = hook_settings(cmd);
    for ev in HOOKS.wired() {
        assert_eq!(settings["hooks"][ev][0]["hooks"][0]["command"], cmd, "{ev}");
        let v = serde_json::json!({"hook_event_name": ev, "session_id": CID, "trigger": "manual"});
        assert!(!matches!(hook_action(&v), HookAction::Nothing(_)), "{ev}");
    }
}

#[test]
fn program_word_behind_launchers() {
    let table: &[(&[&str], Option<usize>)] = &[
        (&["claude"], Some(0)),
        (&["/usr/local/bin/claude", "--model", "x"], Some(0)),
        (&["fake-claude"], Some(0)),
        (&["claude.exe"], Some(0)),
        (&["env", "-u", "CLAUDECODE", "claude", "-x"], Some(3)),
        (
            &["/usr/bin/env", "-uCLAUDECODE", "A=1", "B=", "claude"],
            Some(4),
        ),
        (&["env", "-i", "--unset=X", "--", "claude"], Some(4)),
        (&["env", "-C", "/tmp", "claude"], Some(3)),
        (&["npx", "claude"], Some(1)),
        (&["npx", "-y", "@anthropic-ai/claude-code"], Some(2)),
        (
            &["npx", "--yes", "@anthropic-ai/claude-code@2.1.332", "-c"],
            Some(2),
        ),
        (
            &["npx", "-p", "@anthropic-ai/claude-code", "claude"],
            Some(3),
        ),
        (&["env", "A=1", "npx", "claude"], Some(3)),
        (
            &["node", "/x/node_modules/@anthropic-ai/claude-code/cli.js"],
            Some(1),
        ),
        (
            &["node", "--max-old-space-size=4096", "/x/claude-code/cli.js"],
            Some(2),
        ),
        (&["bash", "-c", "claude"], None),
        (&["sh", "claude"], None),
        (&["env", "-S", "claude --resume x"], None),
        (&["env", "-Sclaude"], None),
        (&["npx", "-c", "claude"], None),
        (&["node", "-e", "require('claude')"], None),
        (&["node", "/x/other.js", "claude"], None),
        (&["env", "-u"], None),
        (&["env"], None),
        (&["--claude"], None),
        (&["vim", "claude"], None),
    ];
    for (argv, want) in table {
        assert_eq!(program_index(&CLAUDE, &words(argv)).ok(), *want, "{argv:?}");
    }
}
