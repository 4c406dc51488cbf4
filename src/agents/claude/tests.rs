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
            HookAction::Busy,
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
    // The same answers as today's `claude_hook::action`, for every event it parses.
    use crate::engine::claude_hook::{action, Action, HookInput};
    let same = |a: &Action, b: &HookAction| match (a, b) {
        (Action::SetCid(x), HookAction::SetCid(y)) => x == y,
        (Action::TurnBegin, HookAction::TurnBegin)
        | (Action::TurnEnd, HookAction::TurnEnd)
        | (Action::Busy, HookAction::Busy)
        | (Action::ClearTurn, HookAction::ClearTurn)
        | (Action::CompactBegin, HookAction::CompactBegin)
        | (Action::CompactEnd, HookAction::CompactEnd)
        | (Action::Nothing(_), HookAction::Nothing(_)) => true,
        _ => false,
    };
    for json in table.iter().map(|(j, _)| j.as_str()).chain(nothing) {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let old = action(&HookInput::parse(json).unwrap());
        assert!(same(&old, &hook_action(&v)), "{json}: {old:?}");
    }
    // Not an object, or a name that is not text: nothing, never a panic.
    for json in ["[]", "\"Stop\"", "null", r#"{"hook_event_name":5}"#] {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert!(matches!(hook_action(&v), HookAction::Nothing(_)), "{json}");
    }
}

#[test]
fn settings_fragment_is_claude_settings_one() {
    assert_eq!(HOOKS.wired(), crate::engine::claude_hook::EVENTS);
    for cmd in [
        "'/bin/ccs-reap' claude-hook",
        "A='x y' '/opt/my bin/ccs-reap' claude-hook",
    ] {
        assert_eq!(
            hook_settings(cmd),
            crate::engine::claude_hook::fragment(cmd),
            "{cmd}"
        );
    }
    // Every wired event means something to the mapping.
    for ev in HOOKS.wired() {
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

#[test]
fn resume_argv_table() {
    use StartMode::{Fresh, Resume};
    let u = CID;
    // (command, transcript exists, want argv, want mode)
    let table: &[(&[&str], bool, &[&str], StartMode)] = &[
        (&["claude"], true, &["claude", "--resume", u], Resume),
        (&["claude"], false, &["claude", "--session-id", u], Fresh),
        (
            &["claude", "--model", "opus", "--mcp-config", "/m.json"],
            true,
            &[
                "claude",
                "--model",
                "opus",
                "--mcp-config",
                "/m.json",
                "--resume",
                u,
            ],
            Resume,
        ),
        // Its own pair, in every spelling, replaced.
        (
            &["claude", "--resume", "old"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--resume=old", "-x"],
            false,
            &["claude", "-x", "--session-id", u],
            Fresh,
        ),
        (
            &["claude", "-r", "old", "-x"],
            true,
            &["claude", "-x", "--resume", u],
            Resume,
        ),
        (
            &["claude", "-rold"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--session-id", u],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--session-id", u],
            false,
            &["claude", "--session-id", u],
            Fresh,
        ),
        (
            &["claude", "--session-id=old"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--continue", "-v"],
            true,
            &["claude", "-v", "--resume", u],
            Resume,
        ),
        (
            &["claude", "-c"],
            false,
            &["claude", "--session-id", u],
            Fresh,
        ),
        (
            &["claude", "--resume", "old", "--fork-session"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        // An old value with odd characters goes with its flag, whatever it holds.
        (
            &["claude", "--resume", "a;rm -rf ~", "-x"],
            true,
            &["claude", "-x", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--resume=$(id)"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--session-id", "ü\n"],
            false,
            &["claude", "--session-id", u],
            Fresh,
        ),
        // Several, and both kinds at once.
        (
            &[
                "claude",
                "-c",
                "--resume",
                "a",
                "--session-id",
                "b",
                "-r",
                "c",
            ],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        // A `--resume` with no value (the picker): the flag alone goes, the next flag stays.
        (
            &["claude", "--resume"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--resume", "--model", "x"],
            true,
            &["claude", "--model", "x", "--resume", u],
            Resume,
        ),
        (
            &["claude", "-r", "-c"],
            false,
            &["claude", "--session-id", u],
            Fresh,
        ),
        // `--session-id` takes its value even when it looks like a flag; `--` is never a value.
        (
            &["claude", "--session-id", "-x"],
            true,
            &["claude", "--resume", u],
            Resume,
        ),
        (
            &["claude", "--session-id", "--", "hi"],
            true,
            &["claude", "--resume", u, "--", "hi"],
            Resume,
        ),
        // `--`: the rest is positional, left alone, and the new flags go before it.
        (
            &["claude", "-x", "--", "--resume", "old"],
            true,
            &["claude", "-x", "--resume", u, "--", "--resume", "old"],
            Resume,
        ),
        // The value of another option is text, even when it reads like a resume flag.
        (
            &[
                "claude",
                "--append-system-prompt",
                "--resume",
                "--model",
                "-c",
            ],
            true,
            &[
                "claude",
                "--append-system-prompt",
                "--resume",
                "--model",
                "-c",
                "--resume",
                u,
            ],
            Resume,
        ),
        (
            &["claude", "--name", "-r", "--settings", "-c"],
            false,
            &[
                "claude",
                "--name",
                "-r",
                "--settings",
                "-c",
                "--session-id",
                u,
            ],
            Fresh,
        ),
        // A short cluster with a value-taking flag first keeps its value (`-dr`: debug "r").
        (
            &["claude", "-dr"],
            true,
            &["claude", "-dr", "--resume", u],
            Resume,
        ),
        // A positional prompt stays where it was.
        (
            &["claude", "hello there"],
            true,
            &["claude", "hello there", "--resume", u],
            Resume,
        ),
        // Launchers kept as they were.
        (
            &[
                "env",
                "-u",
                "CLAUDECODE",
                "claude",
                "--resume",
                "old",
                "--model",
                "m",
            ],
            true,
            &[
                "env",
                "-u",
                "CLAUDECODE",
                "claude",
                "--model",
                "m",
                "--resume",
                u,
            ],
            Resume,
        ),
        (
            &["/opt/claude/bin/claude", "-r", "old"],
            false,
            &["/opt/claude/bin/claude", "--session-id", u],
            Fresh,
        ),
        (
            &["npx", "claude", "-c"],
            true,
            &["npx", "claude", "--resume", u],
            Resume,
        ),
        // Words before the program are the launcher's, never stripped.
        (
            &["env", "-u", "--resume", "claude"],
            true,
            &["env", "-u", "--resume", "claude", "--resume", u],
            Resume,
        ),
        // A one-word shell string of plain words: rewritten as words.
        (
            &["claude --model opus --resume old"],
            true,
            &["claude", "--model", "opus", "--resume", u],
            Resume,
        ),
    ];
    for (argv, exists, want, mode) in table {
        let got = resume_argv(&words(argv), u, *exists);
        assert_eq!(
            got,
            Ok(ResumePlan {
                argv: words(want),
                mode: *mode
            }),
            "{argv:?} (transcript: {exists})"
        );
        // Rewriting the answer again gives the same answer (nothing piles up).
        let again = resume_argv(&words(want), u, *exists).unwrap();
        assert_eq!(again.argv, words(want), "again: {want:?}");
    }
}

#[test]
fn resume_argv_refuses() {
    let u = CID;
    let bad_cid = ["", "-rf", "a b", "x;rm -rf /", "$(id)", "ü"];
    for c in bad_cid {
        assert_eq!(
            resume_argv(&words(&["claude"]), c, true),
            Err(ArgvError::BadCid(c.into())),
            "{c:?}"
        );
    }
    let table: &[&[&str]] = &[
        &[],
        &["bash", "-c", "claude --resume x"],
        &["vim"],
        &["claude --model 'opus'"],
        &["claude --resume x; rm -rf ~"],
        &["claude $(echo -c)"],
        &["env", "-S", "claude -c"],
        &["claude", "-pc"],
        &["claude", "-vr", "x"],
    ];
    for argv in table {
        assert!(resume_argv(&words(argv), u, true).is_err(), "{argv:?}");
    }
    // What each says.
    assert_eq!(resume_argv(&[], u, true), Err(ArgvError::Empty));
    assert!(matches!(
        resume_argv(&words(&["claude", "-pc"]), u, true),
        Err(ArgvError::Combined { word, .. }) if word == "-pc"
    ));
    assert!(matches!(
        resume_argv(&words(&["claude --model 'opus'"]), u, true),
        Err(ArgvError::ShellString(_))
    ));
}

#[test]
fn resume_argv_of_a_cid_that_is_no_uuid() {
    // `--session-id` takes only a UUID: a fresh start of such a cid gets no id flag.
    let plan = resume_argv(&words(&["claude", "--resume", "my-chat"]), "my-chat", false).unwrap();
    assert_eq!(plan.argv, words(&["claude"]));
    assert_eq!(plan.mode, StartMode::FreshNewId);
    let plan = resume_argv(&words(&["claude"]), "my-chat", true).unwrap();
    assert_eq!(plan.argv, words(&["claude", "--resume", "my-chat"]));
    for (s, ok) in [
        (CID, true),
        ("537D40FB-07A9-49A2-A899-E9B200B7A0A5", true),
        ("537d40fb07a949a2a899e9b200b7a0a5", false),
        ("537d40fb-07a9-49a2-a899-e9b200b7a0a", false),
        ("537d40fb-07a9-49a2-a899-e9b200b7a0ag", false),
        ("537d40fb-07a9-49a2-a899-e9b200b7a0a5-0", false),
        ("", false),
    ] {
        assert_eq!(is_uuid(s), ok, "{s:?}");
    }
}

#[test]
fn cid_in_argv_table() {
    let table: &[(&[&str], Option<&str>)] = &[
        (&["claude"], None),
        (&["claude", "--resume", "abc-1"], Some("abc-1")),
        (&["claude", "--resume=abc"], Some("abc")),
        (&["claude", "-r", "abc"], Some("abc")),
        (&["claude", "-rabc"], Some("abc")),
        (&["claude", "--session-id", "u-u"], Some("u-u")),
        (&["claude", "--session-id=u"], Some("u")),
        (&["env", "-u", "CLAUDECODE", "claude", "-r", "e"], Some("e")),
        (&["claude --resume abc"], Some("abc")),
        (&["claude", "--resume"], None),
        (&["claude", "--resume", "--verbose"], None),
        (&["claude", "--resume", "a;rm"], None),
        (&["claude", "--session-id", "-x"], None),
        (&["claude", "--", "--resume", "x"], None),
        // `--resume` is the prompt's text there, and `x` a positional argument.
        (&["claude", "--append-system-prompt", "--resume", "x"], None),
        (
            &["claude", "--append-system-prompt", "--resume", "-r", "x"],
            Some("x"),
        ),
        (&["claude", "--append-system-prompt", "--resume"], None),
        (&["claude", "--model", "-r", "y"], None),
        (&["claude", "--resume", "a", "--resume", "b"], Some("b")),
        (&["node", "-r", "esm", "app.js"], None),
        (&["vim", "--resume", "x"], None),
    ];
    for (argv, want) in table {
        assert_eq!(cid_in_argv(&words(argv)).as_deref(), *want, "{argv:?}");
    }
}

#[test]
fn slug_as_claude_code_2_1_332_writes_it() {
    // Each row seen on disk with the real claude (tests/e2e/NOTES.md).
    let long = format!(
        "/tmp/ccs-lab.JyjC9f/{}/{}",
        "x".repeat(120),
        "y".repeat(100)
    );
    let long_slug = format!(
        "-tmp-ccs-lab-JyjC9f-{}-{}-69qztj",
        "x".repeat(120),
        "y".repeat(200 - 20 - 120 - 1)
    );
    let table: &[(&str, &str)] = &[
        ("/tmp/ccs-e2e.Wo35TG/proj", "-tmp-ccs-e2e-Wo35TG-proj"),
        (
            "/tmp/ccs-lab.JyjC9f/p.dot_under sp",
            "-tmp-ccs-lab-JyjC9f-p-dot-under-sp",
        ),
        // é, 日 and 本 are one UTF-16 unit each, 🙂 two.
        ("/tmp/ccs-lab.JyjC9f/é日本🙂", "-tmp-ccs-lab-JyjC9f------"),
        ("/tmp/ccs-lab.JyjC9f/real", "-tmp-ccs-lab-JyjC9f-real"),
        (&long, &long_slug),
        ("/", "-"),
    ];
    for (cwd, want) in table {
        assert_eq!(project_slug(cwd), *want, "{cwd}");
    }
    assert_eq!(long_slug.len(), 200 + 1 + "69qztj".len());
    // Exactly 200 is kept whole; 201 is cut and hashed.
    let p200 = format!("/{}", "a".repeat(199));
    assert_eq!(project_slug(&p200), format!("-{}", "a".repeat(199)));
    let p201 = format!("/{}", "a".repeat(200));
    assert!(project_slug(&p201).starts_with(&format!("-{}-", "a".repeat(199))));
    assert_ne!(
        project_slug(&p201),
        project_slug(&format!("/{}b", "a".repeat(199)))
    );
    assert_eq!(base36(0), "0");
    assert_eq!(base36(35), "z");
    assert_eq!(base36(36), "10");
    // i32::MIN's absolute value, as JavaScript's Math.abs gives it.
    assert_eq!(base36(i64::from(i32::MIN).unsigned_abs()), "zik0zk");
}

#[test]
fn transcript_and_status_paths() {
    let cwd = Path::new("/home/u/my.proj");
    type Row<'a> = (&'a [(&'a str, &'a str)], Result<&'a str, PathError>);
    let table: &[Row] = &[
        (
            &[("HOME", "/home/u")],
            Ok("/home/u/.claude/projects/-home-u-my-proj/C.jsonl"),
        ),
        (
            &[("HOME", "/home/u"), ("CLAUDE_CONFIG_DIR", "/cfg")],
            Ok("/cfg/projects/-home-u-my-proj/C.jsonl"),
        ),
        // The project name override: only with CLAUDE_CONFIG_DIR, only a plain name.
        (
            &[
                ("CLAUDE_CONFIG_DIR", "/cfg"),
                ("CLAUDE_CODE_PROJECT_DIR_NAME", "my_proj-1"),
            ],
            Ok("/cfg/projects/my_proj-1/C.jsonl"),
        ),
        (
            &[
                ("HOME", "/h"),
                ("CLAUDE_CODE_PROJECT_DIR_NAME", "my_proj-2"),
            ],
            Ok("/h/.claude/projects/-home-u-my-proj/C.jsonl"),
        ),
        (
            &[
                ("CLAUDE_CONFIG_DIR", "/cfg"),
                ("CLAUDE_CODE_PROJECT_DIR_NAME", "../x"),
            ],
            Ok("/cfg/projects/-home-u-my-proj/C.jsonl"),
        ),
        (
            &[
                ("CLAUDE_CONFIG_DIR", "/cfg"),
                ("CLAUDE_CODE_PROJECT_DIR_NAME", "NUL"),
            ],
            Ok("/cfg/projects/-home-u-my-proj/C.jsonl"),
        ),
        // The last of a repeated variable wins, as in env(1).
        (
            &[("HOME", "/a"), ("HOME", "/b")],
            Ok("/b/.claude/projects/-home-u-my-proj/C.jsonl"),
        ),
        (
            &[],
            Err(PathError::NoHome {
                var: "CLAUDE_CONFIG_DIR",
            }),
        ),
        (
            &[("HOME", "")],
            Err(PathError::NoHome {
                var: "CLAUDE_CONFIG_DIR",
            }),
        ),
        (
            &[("HOME", "/h"), ("CLAUDE_CONFIG_DIR", "")],
            Err(PathError::EmptyVar {
                var: "CLAUDE_CONFIG_DIR",
            }),
        ),
        (
            &[("HOME", "rel")],
            Err(PathError::NotAbsolute {
                what: "HOME",
                path: PathBuf::from("rel/.claude"),
            }),
        ),
    ];
    for (e, want) in table {
        let got = transcript_path(&env(e), cwd, "C");
        assert_eq!(got, want.clone().map(PathBuf::from), "{e:?}");
    }
    let e = env(&[("HOME", "/h")]);
    assert_eq!(
        transcript_path(&e, Path::new("rel"), "C"),
        Err(PathError::NotAbsolute {
            what: "the cwd",
            path: PathBuf::from("rel")
        })
    );
    for c in ["", "../x", "a/b", "-rf", "a.b"] {
        assert_eq!(
            transcript_path(&e, cwd, c),
            Err(PathError::BadCid(c.into())),
            "{c:?}"
        );
    }
    {
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff"));
        assert!(matches!(
            transcript_path(&e, odd, "C"),
            Err(PathError::NotUtf8 { .. })
        ));
    }
    assert_eq!(
        status_path(&e, 14904),
        Ok(PathBuf::from("/h/.claude/sessions/14904.json"))
    );
    assert_eq!(
        status_path(&env(&[("CLAUDE_CONFIG_DIR", "/cfg")]), 7),
        Ok(PathBuf::from("/cfg/sessions/7.json"))
    );
    assert!(status_path(&[], 7).is_err());
}

/// A status file as claude 2.1.332 wrote it (only the cwd's temp name changed).
const REAL: &str = r#"{"pid":14904,"sessionId":"a398562a-a63f-4ac1-b8d3-b412deff30d0","cwd":"/tmp/ccs-lab.gpnYPC/proj","startedAt":1796160292286,"procStart":"37441","version":"2.1.332","peerProtocol":1,"peerFeatures":["notify_idle","reply_across_default_dirs","artifact_yield"],"kind":"interactive","entrypoint":"cli","pidDomain":"linux:3d1219c7c4c5404aaa1f6d2a48adfda4:pid:[4026531836]","asksForConvertedSkills":null,"messagingSocketPath":"/tmp/ccs-lab.gpnYPC/tmp/cc-socks/14904.sock","name":"proj-7c","nameSource":"derived","nameSince":1796160292286,"status":"idle","updatedAt":1796160292584,"statusUpdatedAt":1796160292584}"#;

#[test]
fn status_file_parses_and_refuses() {
    let s = parse_status(REAL).unwrap();
    assert_eq!(
        s,
        AgentStatus {
            pid: 14904,
            proc_start: 37441,
            session_id: "a398562a-a63f-4ac1-b8d3-b412deff30d0".into(),
            state: AgentState::Idle,
            version: "2.1.332".into(),
            cwd: "/tmp/ccs-lab.gpnYPC/proj".into(),
        }
    );
    assert!(s.is_of(14904, 37441));
    assert!(!s.is_of(14904, 37442));
    assert!(!s.is_of(14905, 37441));
    for (status, state, busy) in [
        ("idle", AgentState::Idle, false),
        ("busy", AgentState::Busy, true),
        ("waiting", AgentState::Waiting, true),
        ("shell", AgentState::Shell, true),
    ] {
        let t = REAL.replace(r#""status":"idle""#, &format!(r#""status":"{status}""#));
        let got = parse_status(&t).unwrap().state;
        assert_eq!(got, state);
        assert_eq!(got.keeps_busy(), busy, "{status}");
    }
    let with = |from: &str, to: &str| {
        assert!(REAL.contains(from), "{from}");
        REAL.replace(from, to)
    };
    // A torn read, as seen once in 2.1.332's in-place rewrite: new text, then the old tail.
    let torn = format!(
        "{},\"status\":\"idle\",\"updatedAt\":1}}",
        &REAL[..REAL.find(",\"status\"").unwrap()]
    );
    let torn = torn.replacen(
        ",\"status\":\"idle\",\"updatedAt\":1}",
        "}\"status\":\"idle\"}",
        1,
    );
    let table: Vec<(String, &str)> = vec![
        (String::new(), "garbage"),
        ("not json".into(), "garbage"),
        ("[]".into(), "garbage"),
        (REAL[..REAL.len() / 2].to_string(), "garbage"),
        (torn, "garbage"),
        (format!("{REAL}\"status\":\"busy\"}}"), "garbage"),
        (with(r#""pid":14904"#, r#""pid":"14904""#), "garbage"),
        (with(r#""pid":14904"#, r#""pid":-1"#), "garbage"),
        (with(r#""pid":14904,"#, ""), "garbage"),
        (
            with(r#""procStart":"37441""#, r#""procStart":37441"#),
            "garbage",
        ),
        (with(r#""status":"idle""#, r#""status":null"#), "garbage"),
        (
            with(r#""version":"2.1.332""#, r#""version":"3.0.1""#),
            "version",
        ),
        (
            with(r#""version":"2.1.332""#, r#""version":"2.2.0""#),
            "version",
        ),
        (
            with(r#""version":"2.1.332""#, r#""version":"2.1""#),
            "version",
        ),
        (
            with(r#""version":"2.1.332""#, r#""version":"2.1.3-beta""#),
            "version",
        ),
        (with(r#""version":"2.1.332""#, r#""version":"""#), "version"),
        (
            with(r#""status":"idle""#, r#""status":"thinking""#),
            "state",
        ),
        (with(r#""status":"idle""#, r#""status":"Idle""#), "state"),
        (with(r#""pid":14904"#, r#""pid":1"#), "field"),
        (with(r#""pid":14904"#, r#""pid":0"#), "field"),
        (with(r#""procStart":"37441""#, r#""procStart":"""#), "field"),
        (
            with(r#""procStart":"37441""#, r#""procStart":"12x""#),
            "field",
        ),
        (
            with(r#""procStart":"37441""#, r#""procStart":"-5""#),
            "field",
        ),
        (
            with(
                r#""procStart":"37441""#,
                r#""procStart":"99999999999999999999999""#,
            ),
            "field",
        ),
        (
            with(
                "a398562a-a63f-4ac1-b8d3-b412deff30d0\",\"cwd",
                "-rf\",\"cwd",
            ),
            "field",
        ),
        (
            with(
                "a398562a-a63f-4ac1-b8d3-b412deff30d0\",\"cwd",
                "a b\",\"cwd",
            ),
            "field",
        ),
    ];
    for (text, kind) in &table {
        let got = parse_status(text);
        let ok = matches!(
            (&got, *kind),
            (Err(StatusError::Garbage(_)), "garbage")
                | (Err(StatusError::UnknownVersion(_)), "version")
                | (Err(StatusError::UnknownState(_)), "state")
                | (Err(StatusError::BadField { .. }), "field")
        );
        assert!(ok, "{text:?}: {got:?}, want {kind}");
    }
    for (v, ok) in [
        ("2.1.332", true),
        ("2.1.0", true),
        ("2.1.9999", true),
        ("2.1", false),
        ("2.1.x", false),
        ("2.1.332.1", false),
        ("12.1.3", false),
        ("2.10.3", false),
    ] {
        assert_eq!(known_status_version(v), ok, "{v}");
    }
}

#[test]
fn resume_env_names_the_threshold() {
    assert_eq!(
        CLAUDE.resume_env,
        &[("CLAUDE_CODE_RESUME_THRESHOLD_MINUTES", "1000000000")]
    );
    for (k, v) in CLAUDE.resume_env {
        assert!(k.starts_with("CLAUDE_CODE_"), "{k}");
        assert!(v.parse::<u64>().is_ok(), "{v}");
    }
}

#[test]
fn the_kept_command_line_drops_the_chats_own_id_and_replays() {
    use crate::agents::{argv_env, pane_words, plan_start, StartMode, CLAUDE};
    let w = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let u = "0b3c6a8e-1d2f-4a5b-9c7d-0123456789ab";
    // (command, kept)
    let table: &[(&[&str], &[&str])] = &[
        (
            &[
                "env",
                "-u",
                "CLAUDECODE",
                "claude",
                "--model",
                "opus",
                "--resume",
                u,
            ],
            &["env", "-u", "CLAUDECODE", "claude", "--model", "opus"],
        ),
        (
            &["claude", "--session-id", u, "--", "x"],
            &["claude", "--", "x"],
        ),
        (&["claude --model x -r abc"], &["claude", "--model", "x"]),
    ];
    for (cmd, kept) in table {
        assert_eq!(bare_argv(&w(cmd)).unwrap(), w(kept), "{cmd:?}");
    }
    assert!(bare_argv(&w(&["bash"])).is_err());
    assert!(bare_argv(&w(&["claude 'x'"])).is_err());
    assert_eq!(
        pane_words(&w(&["sh", "-c", "claude --x"])),
        w(&["claude --x"])
    );
    assert_eq!(pane_words(&w(&["claude", "--x"])), w(&["claude", "--x"]));
    assert_eq!(
        argv_env(&w(&["env", "-u", "A", "B=1", "claude", "C=2"])),
        vec![
            ("A".to_string(), None),
            ("B".to_string(), Some("1".to_string()))
        ]
    );
    assert!(argv_env(&w(&["claude", "B=1"])).is_empty());
    // (transcript, failed before, mode)
    let modes = [
        (Some(true), false, StartMode::Resume),
        (None, false, StartMode::Resume),
        (Some(false), false, StartMode::Fresh),
        (Some(true), true, StartMode::Fresh),
        (None, true, StartMode::Fresh),
    ];
    for (t, f, m) in modes {
        let p = plan_start(&CLAUDE, &w(&["claude", "--session-id", u]), u, t, f).unwrap();
        assert_eq!(p.mode, m, "{t:?} {f}");
    }
}
