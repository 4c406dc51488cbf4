//! Where Claude Code writes its transcripts and status files, and how they are read.

use super::*;

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
