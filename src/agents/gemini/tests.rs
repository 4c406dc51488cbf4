use super::*;
use crate::agents::by_name;

fn words(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

const CID: &str = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";

#[test]
fn found_by_name() {
    assert_eq!(by_name("gemini").map(|a| a.display), Some("Gemini CLI"));
    assert_eq!(GEMINI.start_env, [("GEMINI_CLI_NO_RELAUNCH", "true")]);
    for (w, ok) in [
        ("gemini", true),
        ("/usr/bin/gemini", true),
        ("/x/node_modules/@google/gemini-cli/bundle/gemini.js", true),
        ("@google/gemini-cli@0.61.0", true),
        ("gemini-helper", false),
        ("--gemini", false),
    ] {
        assert_eq!(is_program_word(w), ok, "{w}");
    }
}

#[test]
fn hook_events_table() {
    let table: &[(serde_json::Value, HookAction)] = &[
        (
            serde_json::json!({"hook_event_name": "SessionStart", "session_id": CID, "source": "startup", "cwd": "/p", "transcript_path": "/t", "timestamp": "x"}),
            HookAction::SetCid(CID.into()),
        ),
        (
            serde_json::json!({"hook_event_name": "BeforeAgent", "session_id": CID, "prompt": "hi"}),
            HookAction::TurnBegin,
        ),
        (
            serde_json::json!({"hook_event_name": "AfterAgent", "session_id": CID, "prompt_response": "ok"}),
            HookAction::TurnEnd,
        ),
        (
            serde_json::json!({"hook_event_name": "SessionEnd", "session_id": CID, "reason": "exit"}),
            HookAction::ClearTurn,
        ),
    ];
    for (ev, want) in table {
        assert_eq!(hook_action(ev), *want, "{ev}");
    }
    for ev in [
        serde_json::json!({"hook_event_name": "SessionStart", "session_id": "a b"}),
        serde_json::json!({"hook_event_name": "BeforeTool", "session_id": CID}),
        serde_json::json!({"hook_event_name": "UserPromptSubmit"}),
        serde_json::json!({}),
    ] {
        assert!(matches!(hook_action(&ev), HookAction::Nothing(_)), "{ev}");
    }
    let s = hook_settings("C");
    assert_eq!(s["hooksConfig"]["enabled"], true);
    let events: Vec<&String> = s["hooks"].as_object().unwrap().keys().collect();
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(s["hooks"]["AfterAgent"][0]["hooks"][0]["command"], "C");
}

#[test]
fn resume_argv_table() {
    type Row<'a> = (
        &'a [&'a str],
        &'a str,
        bool,
        Result<(&'a [&'a str], StartMode), ()>,
    );
    let table: &[Row] = &[
        (
            &["gemini"],
            CID,
            true,
            Ok((&["gemini", "--resume", CID], StartMode::Resume)),
        ),
        (
            &["gemini"],
            CID,
            false,
            Ok((&["gemini", "--session-id", CID], StartMode::Fresh)),
        ),
        (
            &["gemini"],
            "not-a-uuid",
            false,
            Ok((&["gemini"], StartMode::FreshNewId)),
        ),
        (
            &["gemini", "-m", "gemini-2.5-flash", "--resume", "latest"],
            CID,
            true,
            Ok((
                &["gemini", "-m", "gemini-2.5-flash", "--resume", CID],
                StartMode::Resume,
            )),
        ),
        (
            &["gemini", "--session-id=old", "-r", "3", "--yolo"],
            CID,
            true,
            Ok((&["gemini", "--yolo", "--resume", CID], StartMode::Resume)),
        ),
        (
            &["gemini", "--resume", "--yolo"],
            CID,
            false,
            Ok((&["gemini", "--yolo", "--session-id", CID], StartMode::Fresh)),
        ),
        (
            &["env", "GEMINI_API_KEY=x", "gemini", "--", "--resume"],
            CID,
            true,
            Ok((
                &[
                    "env",
                    "GEMINI_API_KEY=x",
                    "gemini",
                    "--resume",
                    CID,
                    "--",
                    "--resume",
                ],
                StartMode::Resume,
            )),
        ),
        (
            &["gemini --yolo"],
            CID,
            true,
            Ok((&["gemini", "--yolo", "--resume", CID], StartMode::Resume)),
        ),
        (&["gemini \"$(x)\""], CID, true, Err(())),
        (&["codex"], CID, true, Err(())),
        (&["gemini"], "-bad", true, Err(())),
    ];
    for (argv, cid, exists, want) in table {
        let got = resume_argv(&words(argv), cid, *exists);
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
}

#[test]
fn cid_in_argv_and_paths() {
    let table: &[(&[&str], Option<&str>)] = &[
        (&["gemini", "--resume", CID], Some(CID)),
        (&["gemini", "--session-id", CID], Some(CID)),
        (&["gemini", &format!("--session-id={CID}")], Some(CID)),
        (&["gemini", "--resume", "latest"], None),
        (&["gemini", "-r", "2"], None),
        (&["gemini"], None),
    ];
    for (argv, want) in table {
        assert_eq!(cid_in_argv(&words(argv)).as_deref(), *want, "{argv:?}");
    }
    let env = |a: &[(&str, &str)]| -> Vec<(String, String)> {
        a.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        transcript_path(&env(&[("HOME", "/h")]), Path::new("/p"), CID),
        Ok(PathBuf::from(
            "/h/.gemini/tmp/*/chats/session-*-537d40fb.jsonl"
        ))
    );
    assert!(transcript_path(&env(&[]), Path::new("/p"), CID).is_err());
    assert!(transcript_path(&env(&[("HOME", "")]), Path::new("/p"), CID).is_err());
    assert_eq!(
        settings_file(&env(&[("HOME", "/h")])),
        Ok(PathBuf::from("/h/.gemini/settings.json"))
    );
}

#[test]
fn bare_argv_table_replays_as_the_command_would() {
    let table: &[(&[&str], Option<&[&str]>)] = &[
        (&["gemini"], Some(&["gemini"])),
        (
            &["gemini", "-m", "gemini-2.5-flash", "--resume", "latest"],
            Some(&["gemini", "-m", "gemini-2.5-flash"]),
        ),
        (
            &[
                "env",
                "GEMINI_CLI_NO_RELAUNCH=true",
                "gemini",
                "--session-id",
                CID,
            ],
            Some(&["env", "GEMINI_CLI_NO_RELAUNCH=true", "gemini"]),
        ),
        (
            &[
                "gemini",
                "--session-id=old",
                "-r",
                "3",
                "--yolo",
                "--",
                "-x",
            ],
            Some(&["gemini", "--yolo", "--", "-x"]),
        ),
        (&["codex"], None),
        (&[], None),
    ];
    for (argv, want) in table {
        let got = bare_argv(&words(argv));
        match want {
            Some(w) => {
                assert_eq!(got, Ok(words(w)), "{argv:?}");
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

/// Issue 43.8: the session file Gemini CLI 0.61.0 writes at launch (this one as the real CLI
/// wrote it, in `agents_e2e`), and what `--resume` and `--session-id` make of a file, by the
/// CLI's own rules: only a file with a resumable message is resumed; any file of the id keeps
/// `--session-id` from taking it again.
#[test]
fn a_session_file_with_no_user_message_is_unused_and_starts_afresh_under_a_new_id() {
    let launch = format!(
        "{{\"sessionId\":\"{CID}\",\"projectHash\":\"8b58\",\"startTime\":\"2026-12-05T11:37:29.135Z\",\"lastUpdated\":\"2026-12-05T11:37:29.135Z\",\"kind\":\"main\"}}\n\
         {{\"$set\":{{\"messages\":[{{\"id\":\"d049\",\"timestamp\":\"2026-12-05T11:37:29.135Z\",\"type\":\"user\",\"content\":[{{\"text\":\"<session_context>\\nThis is the Gemini CLI.\\n</session_context>\"}}]}}],\"lastUpdated\":\"2026-12-05T11:37:29.135Z\"}}}}\n"
    );
    let user = |id: &str, text: &str| {
        serde_json::json!({"id": id, "type": "user", "content": [{"text": text}]}).to_string()
    };
    let turn = format!(
        "{launch}{}\n{}\n",
        user("m1", "remember MANGO"),
        serde_json::json!({"id": "m2", "type": "gemini", "content": "ECHO: remember MANGO"})
    );
    let other = "00000000-07a9-49a2-a899-e9b200b7a0a5";
    let table: Vec<(&str, String, &str, Transcript)> = vec![
        ("written at launch", launch.clone(), CID, Transcript::Unused),
        ("the metadata line alone", launch.lines().next().unwrap().into(), CID, Transcript::Unused),
        ("after one turn", turn.clone(), CID, Transcript::Resumable),
        ("another conversation's file", turn.clone(), other, Transcript::Missing),
        ("a user message alone", format!("{launch}{}\n", user("m1", "hi")), CID, Transcript::Resumable),
        ("slash commands only", format!("{launch}{}\n{}\n", user("m1", "/help"), user("m2", "  ?")), CID, Transcript::Unused),
        ("hook context only", format!("{launch}{}\n", user("m1", "<hook_context>x</hook_context>")), CID, Transcript::Unused),
        ("an info message only", format!("{launch}{}\n", serde_json::json!({"id": "i", "type": "info", "content": "hello"})), CID, Transcript::Unused),
        ("a gemini tool call", format!("{launch}{}\n", serde_json::json!({"id": "g", "type": "gemini", "content": "", "toolCalls": [{"name": "x"}]})), CID, Transcript::Resumable),
        ("the turn rewound away", format!("{turn}{}\n", serde_json::json!({"$rewindTo": "m1"})), CID, Transcript::Unused),
        ("a rewind to an unknown id clears all", format!("{turn}{}\n", serde_json::json!({"$rewindTo": "zz"})), CID, Transcript::Unused),
        ("a rewind keeps what came before", format!("{turn}{}\n", serde_json::json!({"$rewindTo": "m2"})), CID, Transcript::Resumable),
        ("a sub-agent's file", turn.replace("\"main\"", "\"subagent\""), CID, Transcript::Unused),
        ("garbage", "not json\n{\n".into(), CID, Transcript::Missing),
        ("no projectHash, no legacy record", format!("{{\"sessionId\":\"{CID}\"}}\n{}\n", user("m1", "hi")), CID, Transcript::Missing),
        ("a legacy .json record with a turn", serde_json::json!({"sessionId": CID, "messages": [{"id": "1", "type": "user", "content": "hi"}]}).to_string(), CID, Transcript::Resumable),
        ("a legacy .json record without one", serde_json::json!({"sessionId": CID, "messages": []}).to_string(), CID, Transcript::Unused),
        ("a torn last line", format!("{turn}{{\"id\":\"m3\",\"ty"), CID, Transcript::Resumable),
    ];
    for (name, text, cid, want) in &table {
        assert_eq!(transcript_kind(text, cid), *want, "{name}");
    }
    // The way back: an unused file starts afresh under a new id (no id flag: gemini picks it,
    // its SessionStart tells it), whatever was tried before; a resumable one is resumed; none,
    // the same id chosen up front.
    let cmd = words(&[
        "env",
        "GEMINI_CLI_NO_RELAUNCH=true",
        "gemini",
        "-m",
        "x",
        "--resume",
        CID,
    ]);
    for failed_before in [false, true] {
        let p =
            crate::agents::plan_start(&GEMINI, &cmd, CID, Some(Transcript::Unused), failed_before)
                .unwrap();
        assert_eq!(p.mode, StartMode::FreshNewId);
        assert_eq!(
            p.argv,
            words(&["env", "GEMINI_CLI_NO_RELAUNCH=true", "gemini", "-m", "x"])
        );
    }
    let p =
        crate::agents::plan_start(&GEMINI, &cmd, CID, Some(Transcript::Resumable), false).unwrap();
    assert_eq!(
        (p.mode, p.argv.last().unwrap().as_str()),
        (StartMode::Resume, CID)
    );
    let p =
        crate::agents::plan_start(&GEMINI, &cmd, CID, Some(Transcript::Missing), false).unwrap();
    assert_eq!(p.mode, StartMode::Fresh);
    assert!(
        crate::agents::plan_start(&GEMINI, &cmd, "-x", Some(Transcript::Unused), false).is_err()
    );
}
