//! The resume argv and the command line kept for a chat.

use super::*;

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
    use crate::agents::{argv_env, pane_words, plan_start, StartMode, Transcript, CLAUDE};
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
        (Some(Transcript::Resumable), false, StartMode::Resume),
        (None, false, StartMode::Resume),
        (Some(Transcript::Missing), false, StartMode::Fresh),
        (Some(Transcript::Resumable), true, StartMode::Fresh),
        (None, true, StartMode::Fresh),
    ];
    for (t, f, m) in modes {
        let p = plan_start(&CLAUDE, &w(&["claude", "--session-id", u]), u, t, f).unwrap();
        assert_eq!(p.mode, m, "{t:?} {f}");
    }
}
