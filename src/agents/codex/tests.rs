use super::*;
use crate::agents::{by_name, of_argv, ALL};

fn words(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

const CID: &str = "019ad5c2-8f0e-7a31-b2c4-5e6f7a8b9c0d";

#[test]
fn found_by_name_and_by_command() {
    assert_eq!(by_name("codex").map(|a| a.display), Some("Codex CLI"));
    assert!(ALL.iter().any(|a| a.name == "codex"));
    let table: &[(&[&str], Option<&str>)] = &[
        (&["codex"], Some("codex")),
        (&["/opt/bin/codex", "--model", "o3"], Some("codex")),
        (&["env", "A=1", "codex"], Some("codex")),
        (&["npx", "-y", "@openai/codex@0.169.0"], Some("codex")),
        (
            &["node", "/x/node_modules/@openai/codex/bin/codex.js"],
            Some("codex"),
        ),
        (&["codex --model o3"], Some("codex")),
        (&["claude"], Some("claude")),
        (&["gemini"], Some("gemini")),
        (&["vim"], None),
        (&["--codex"], None),
    ];
    for (argv, want) in table {
        assert_eq!(of_argv(&words(argv)).map(|a| a.name), *want, "{argv:?}");
    }
}

#[test]
fn hook_events_table() {
    let table: &[(serde_json::Value, HookAction)] = &[
        (
            serde_json::json!({"hook_event_name": "SessionStart", "session_id": CID, "source": "startup"}),
            HookAction::SetCid(CID.into()),
        ),
        (
            serde_json::json!({"hook_event_name": "SessionStart", "session_id": CID, "source": "resume"}),
            HookAction::SetCid(CID.into()),
        ),
        (
            serde_json::json!({"hook_event_name": "UserPromptSubmit", "session_id": CID, "turn_id": "t1", "prompt": "hi"}),
            HookAction::TurnBegin,
        ),
        (
            serde_json::json!({"hook_event_name": "Stop", "session_id": CID, "turn_id": "t1", "last_assistant_message": "ok"}),
            HookAction::TurnEnd,
        ),
    ];
    for (ev, want) in table {
        assert_eq!(hook_action(ev), *want, "{ev}");
    }
    for ev in [
        serde_json::json!({"hook_event_name": "SessionStart", "session_id": "-rf"}),
        serde_json::json!({"hook_event_name": "SessionStart"}),
        serde_json::json!({"hook_event_name": "PreToolUse", "session_id": CID}),
        serde_json::json!({"hook_event_name": "SessionEnd", "session_id": CID}),
        serde_json::json!({"hook_event_name": 5}),
        serde_json::json!({"session_id": CID}),
        serde_json::json!([1]),
    ] {
        assert!(matches!(hook_action(&ev), HookAction::Nothing(_)), "{ev}");
    }
    assert_eq!(HOOKS.wired(), ["SessionStart", "UserPromptSubmit", "Stop"]);
    let s = hook_settings("X hook --agent codex");
    assert_eq!(
        s["hooks"]["Stop"][0]["hooks"][0],
        serde_json::json!({"type": "command", "command": "X hook --agent codex"})
    );
    assert_eq!(s["hooks"].as_object().map(|o| o.len()), Some(3));
}

#[test]
fn resume_argv_table() {
    type Row<'a> = (&'a [&'a str], bool, Result<(&'a [&'a str], StartMode), ()>);
    let table: &[Row] = &[
        (
            &["codex"],
            true,
            Ok((&["codex", "resume", CID], StartMode::Resume)),
        ),
        (&["codex"], false, Ok((&["codex"], StartMode::FreshNewId))),
        (
            &["codex", "--dangerously-bypass-hook-trust", "-m", "o3"],
            true,
            Ok((
                &[
                    "codex",
                    "resume",
                    CID,
                    "--dangerously-bypass-hook-trust",
                    "-m",
                    "o3",
                ],
                StartMode::Resume,
            )),
        ),
        // A former resume, its id, --last: dropped; a prompt: dropped.
        (
            &["codex", "resume", "old-id", "--last"],
            true,
            Ok((&["codex", "resume", CID], StartMode::Resume)),
        ),
        (
            &["codex", "-c", "model=\"o3\"", "fix the bug"],
            true,
            Ok((
                &["codex", "resume", CID, "-c", "model=\"o3\""],
                StartMode::Resume,
            )),
        ),
        (
            &["env", "CODEX_HOME=/h", "codex"],
            true,
            Ok((
                &["env", "CODEX_HOME=/h", "codex", "resume", CID],
                StartMode::Resume,
            )),
        ),
        (
            &["codex --model o3"],
            true,
            Ok((
                &["codex", "resume", CID, "--model", "o3"],
                StartMode::Resume,
            )),
        ),
        (&["codex", "exec", "do it"], true, Err(())),
        (&["codex", "review"], true, Err(())),
        (&["claude"], true, Err(())),
        (&[], true, Err(())),
        (&["codex; rm -rf /"], true, Err(())),
    ];
    for (argv, exists, want) in table {
        let got = resume_argv(&words(argv), CID, *exists);
        match want {
            Ok((a, m)) => assert_eq!(
                got,
                Ok(ResumePlan {
                    argv: words(a),
                    mode: *m
                }),
                "{argv:?}"
            ),
            Err(()) => assert!(got.is_err(), "{argv:?}: {got:?}"),
        }
    }
    assert!(resume_argv(&words(&["codex"]), "-x", true).is_err());
}

#[test]
fn cid_in_argv_table() {
    let table: &[(&[&str], Option<&str>)] = &[
        (&["codex", "resume", CID], Some(CID)),
        (&["codex", "-m", "resume", "x"], None),
        (
            &[
                "codex",
                "--model",
                "o3",
                "resume",
                CID,
                "--dangerously-bypass-hook-trust",
            ],
            Some(CID),
        ),
        (&["codex"], None),
        (&["codex", "resume", "--last"], None),
        (&["codex", "hello"], None),
    ];
    for (argv, want) in table {
        assert_eq!(cid_in_argv(&words(argv)).as_deref(), *want, "{argv:?}");
    }
}

#[test]
fn transcript_path_table() {
    let env = |a: &[(&str, &str)]| -> Vec<(String, String)> {
        a.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let cwd = Path::new("/p");
    assert_eq!(
        transcript_path(&env(&[("HOME", "/h")]), cwd, CID),
        Ok(PathBuf::from(format!(
            "/h/.codex/sessions/*/*/*/rollout-*-{CID}.jsonl"
        )))
    );
    assert_eq!(
        transcript_path(&env(&[("HOME", "/h"), ("CODEX_HOME", "/c")]), cwd, CID),
        Ok(PathBuf::from(format!(
            "/c/sessions/*/*/*/rollout-*-{CID}.jsonl"
        )))
    );
    assert!(transcript_path(&env(&[("CODEX_HOME", "")]), cwd, CID).is_err());
    assert!(transcript_path(&env(&[("CODEX_HOME", "rel")]), cwd, CID).is_err());
    assert!(transcript_path(&env(&[]), cwd, CID).is_err());
    assert!(transcript_path(&env(&[("HOME", "/h")]), cwd, "../x").is_err());
    assert_eq!(
        hooks_file(&env(&[("CODEX_HOME", "/c")])),
        Ok(PathBuf::from("/c/hooks.json"))
    );
    assert!(trust_note(Path::new("/c/hooks.json")).contains(BYPASS_TRUST_FLAG));
}

#[test]
fn bare_argv_table_replays_as_the_command_would() {
    let table: &[(&[&str], Option<&[&str]>)] = &[
        (&["codex"], Some(&["codex"])),
        (
            &["codex", "resume", "old-id", "--last", "-m", "o3"],
            Some(&["codex", "-m", "o3"]),
        ),
        (
            &["env", "CODEX_HOME=/h", "codex", "fix the bug"],
            Some(&["env", "CODEX_HOME=/h", "codex"]),
        ),
        (
            &["codex --dangerously-bypass-hook-trust"],
            Some(&["codex", "--dangerously-bypass-hook-trust"]),
        ),
        (&["codex", "exec", "do it"], None),
        (&["claude"], None),
        (&[], None),
    ];
    for (argv, want) in table {
        let got = bare_argv(&words(argv));
        match want {
            Some(w) => {
                assert_eq!(got, Ok(words(w)), "{argv:?}");
                // Replayed, the kept line comes back as the command itself would.
                for exists in [true, false] {
                    assert_eq!(
                        resume_argv(&words(w), CID, exists),
                        resume_argv(&words(argv), CID, exists),
                        "{argv:?}"
                    );
                }
            }
            None => assert!(got.is_err(), "{argv:?}: {got:?}"),
        }
    }
}
