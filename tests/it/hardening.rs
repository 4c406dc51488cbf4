//! Hostile and odd input on a real tmux: what others can write (tmux options, names, the state dir,
//! the command line) never makes ccs-reap touch what is not the chat's, mix up conversations, or
//! stop reaping the others. One test (or more) per class of the hardening issue.

use crate::common::*;

use std::path::Path;

/// SIGTERM to SIGKILL, in the sweeps of this file.
const GRACE: u64 = 1000;

fn start_command(s: &Server, name: &str) -> String {
    s.ok(&[
        "list-panes",
        "-t",
        &format!("={name}:"),
        "-F",
        "#{pane_start_command}",
    ])
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

// 1. Strings handed to tmux are never expanded by it.

/// Directory names and command words that tmux would expand or split if passed raw.
const HOSTILE: &[&str] = &[
    "C#Tools",
    "a#{session_name}b",
    "x#(touch pwned)y",
    "#T#S",
    "semi;",
    "q'uo\"te",
    "tab\there",
    "new\nline",
    "lead ;",
];

#[test]
fn spawn_passes_directories_and_words_to_tmux_literally() {
    let s = Server::new();
    for (i, name) in HOSTILE.iter().enumerate() {
        let dir = s.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let out = s.path(&format!("out{i}"));
        // The command prints its directory and its words, one per line.
        let script = format!(
            "pwd > {o}.pwd; for a in \"$@\"; do printf '%s\\n' \"$a\"; done > {o}.args; exec sleep 100000",
            o = out.display()
        );
        let id = format!("{i}");
        let o = s
            .reap(&[])
            .current_dir(s.dir.path())
            .args([
                "spawn",
                &id,
                "--cwd",
                &path_str(&dir),
                "--",
                "sh",
                "-c",
                &script,
                "x",
                name,
                ";",
                "-x",
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let pwd = s.path(&format!("out{i}.pwd"));
        assert!(wait_until(10.0, || pwd.exists()), "{name:?}: did not run");
        let args = s.path(&format!("out{i}.args"));
        assert!(wait_until(5.0, || std::fs::read_to_string(&args)
            .is_ok_and(|a| a.ends_with("-x\n"))));
        assert_eq!(
            std::fs::read_to_string(&pwd).unwrap(),
            format!("{}\n", dir.display()),
            "{name:?}: ran in another directory"
        );
        assert_eq!(
            std::fs::read_to_string(&args).unwrap(),
            format!("{name}\n;\n-x\n"),
            "{name:?}: the words were changed"
        );
    }
    for d in [
        s.dir.path(),
        Path::new("/"),
        Path::new(env!("CARGO_MANIFEST_DIR")),
    ] {
        assert!(!d.join("pwned").exists(), "#(...) ran in {}", d.display());
    }
}

#[test]
fn a_reaped_chat_comes_back_in_its_own_directory_with_its_own_conversation() {
    let s = Server::new();
    let dir = s.path("C#Tools #{pane_id};");
    std::fs::create_dir_all(&dir).unwrap();
    s.run(
        &[
            "spawn",
            "1",
            "--cwd",
            &path_str(&dir),
            "--",
            &fake_claude(),
            "--session-id",
            "conv-1",
        ],
        &[],
    );
    s.run(&["reap", "1"], &[]);
    assert_eq!(s.tombstone("1").unwrap()["cwd"], path_str(&dir));
    s.run(&["spawn", "1", "--", &fake_claude()], &[]);
    assert!(
        start_command(&s, "ccs-1").contains("--resume conv-1"),
        "{}",
        start_command(&s, "ccs-1")
    );
    let pane_pid: i32 = s
        .ok(&["list-panes", "-t", "=ccs-1:", "-F", "#{pane_pid}"])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        std::fs::read_link(format!("/proc/{pane_pid}/cwd")).unwrap(),
        dir
    );
}

#[test]
fn ids_and_cids_that_tmux_could_read_as_formats_or_flags_are_refused() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    for (args, what) in [
        (vec!["spawn", "a#{b}", "--", "sleep", "1000"], "session id"),
        (vec!["spawn", "a;", "--", "sleep", "1000"], "session id"),
        (
            vec![
                "spawn",
                "2",
                "--cid",
                "c#(touch pwned)",
                "--",
                "sleep",
                "1000",
            ],
            "conversation id",
        ),
        (
            vec![
                "spawn",
                "2",
                "--cid=--dangerously-skip-permissions",
                "--",
                "sleep",
                "1000",
            ],
            "conversation id",
        ),
        (vec!["turn", "begin", "1;kill-server"], "session id"),
        (vec!["reap", "#{session_name}"], "session id"),
    ] {
        let o = s.run_any(&args, &[]);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(what), "{args:?}: {}", o.stderr);
    }
    assert_eq!(s.names(), vec!["keeper".to_string()]);
    assert!(!s.dir.path().join("pwned").exists());
}

#[test]
fn a_reaping_mark_that_holds_a_format_or_a_command_is_cleared_as_text() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    let pwned = s.path("pwned");
    // A garbage mark is stale: cleared by the sweep, and never run or expanded.
    // (With a tab and a newline, so that it would also break the listing if listed raw.)
    let mark = format!(
        "#(touch {}) #{{session_name}}\tS\t$99\t0\t1\t1\t\tc99\t\t/s\tccs-99\n ; kill-server",
        pwned.display()
    );
    s.set(n, "@ccs_reaping", &mark);
    s.once(DONE, GRACE, &[]);
    assert!(!pwned.exists(), "a mark was run by tmux");
    // The next sweep decides it afresh: reaped.
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-1"), "{}", o.stderr);
    assert!(!pwned.exists());
}

// 2. Two studios that share a state dir never mix up their conversations.

#[test]
fn two_studios_sharing_a_state_dir_each_resume_their_own_conversation() {
    let a = Server::new();
    let b = Server::new();
    let shared = a.path("shared-state");
    let st = path_str(&shared);
    let env = [("CCS_REAP_STATE_DIR", st.as_str())];
    // Studio A: socket a, prefix ccs-. Studio B: socket b, same prefix and same chat ids.
    // Studio C: socket a again, prefix dev-.
    let na = a.chat("ccs-1", "conv-a", "");
    let nb = b.chat("ccs-1", "conv-b", "");
    let nc = a.chat("dev-1", "conv-c", "");
    a.idle_since(na, 10_000_000);
    b.idle_since(nb, 10_000_000);
    a.idle_since(nc, 10_000_000);
    let dev = [
        ("CCS_REAP_STATE_DIR", st.as_str()),
        ("CCS_SESSION_PREFIX", "dev-"),
    ];
    a.once(DONE, GRACE, &env);
    b.once(DONE, GRACE, &env);
    a.once(DONE, GRACE, &dev);
    assert!(!a.has("ccs-1") && !b.has("ccs-1") && !a.has("dev-1"));
    // Three tombstones, one per studio.
    for (srv, prefix, cid) in [
        (&a, "ccs-", "conv-a"),
        (&b, "ccs-", "conv-b"),
        (&a, "dev-", "conv-c"),
    ] {
        let t = srv.studio_in_for(&shared, prefix).join("sessions/1.json");
        let t: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&t).unwrap()).unwrap();
        assert_eq!(t["cid"], cid);
    }
    // Each spawn resumes its own studio's conversation, whatever order they come in.
    let claude = fake_claude();
    b.run(&["spawn", "1", "--", &claude], &env);
    a.run(&["spawn", "1", "--", &claude], &dev);
    a.run(&["spawn", "1", "--", &claude], &env);
    assert!(start_command(&b, "ccs-1").contains("--resume conv-b"));
    assert!(start_command(&a, "dev-1").contains("--resume conv-c"));
    assert!(start_command(&a, "ccs-1").contains("--resume conv-a"));
}

#[test]
fn a_tombstone_of_0_1_0_is_used_while_unambiguous_and_ignored_once_the_dir_is_shared() {
    let s = Server::new();
    let legacy = s.state_dir().join("sessions");
    std::fs::create_dir_all(&legacy).unwrap();
    let tomb = |cid: &str| {
        serde_json::json!({"id": "5", "cid": cid, "reaped_at": "2026-01-01T00:00:00Z",
                           "reason": "idle", "cwd": null})
        .to_string()
    };
    std::fs::write(legacy.join("5.json"), tomb("legacy-5")).unwrap();
    let claude = fake_claude();
    s.run(&["spawn", "5", "--", &claude], &[]);
    assert!(start_command(&s, "ccs-5").contains("--resume legacy-5"));
    s.run(&["turn", "end", "5"], &[]);
    assert!(
        !legacy.join("5.json").exists(),
        "the tombstone was not used up"
    );
    // Another studio shares the dir now: a 0.1.0 tombstone could be either's.
    s.ok(&["kill-session", "-t", "=ccs-5"]);
    std::fs::write(legacy.join("5.json"), tomb("legacy-5")).unwrap();
    std::fs::create_dir_all(s.state_dir().join("studios").join("someone-else@ccs-")).unwrap();
    let o = s.run(&["spawn", "5", "--", &claude], &[]);
    assert!(
        !start_command(&s, "ccs-5").contains("--resume"),
        "{}",
        start_command(&s, "ccs-5")
    );
    assert!(o.stderr.contains("cannot be told whose"), "{}", o.stderr);
}

// 4. Journals and tombstones are never trusted blindly; everything we write is private.

#[test]
fn a_journal_naming_a_live_session_that_no_longer_carries_its_mark_signals_nothing() {
    // A dead reaper's journal (planted, or left when its tombstone could not be written) names
    // ccs-1 on this very server, with ccs-1's own claude as victim: the claude carries ccs-1's
    // TMUX marker, so only the mark can tell. ccs-1 was used since (no `@ccs_reaping`): nothing
    // is killed, wherever else the journal's token may be found, and whatever its name now.
    for token_in in [
        "nowhere",
        "the global environment",
        "the session environment",
        "@ccs_reaper",
        "nowhere, and the session renamed",
    ] {
        journal_without_mark(token_in);
    }
}

fn journal_without_mark(token_in: &str) {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.set(n, "@ccs_turn", &now_ms().to_string());
    let mut name = "ccs-1";
    match token_in {
        "the global environment" => {
            s.ok(&["set-environment", "-g", "CCS_REAP_TOKEN", "r1x0x0"]);
        }
        "the session environment" => s.set_token(n, "r1x0x0"),
        "@ccs_reaper" => s.set(n, "@ccs_reaper", "r1x0x0"),
        "nowhere, and the session renamed" => {
            s.ok(&["rename-session", "-t", "=ccs-1", "renamed"]);
            name = "renamed";
        }
        _ => {}
    }
    let claude = s.pids("ccs-1")["claude"];
    let dir = s.studio().join("reaping");
    std::fs::create_dir_all(&dir).unwrap();
    let journal = serde_json::json!({
        "id": "1", "session": "ccs-1", "tmux_id": n, "cid": "c1", "reason": "idle",
        "idle_ms": 1, "cwd": null, "started_at": "2026-01-01T00:00:00Z",
        "owner": {"pid": 99_999_999, "start": 1},
        "victims": [{"pid": claude, "start": stat(claude).unwrap().start}],
        "server_pid": s.server_pid(), "token": "r1x0x0"
    });
    std::fs::write(dir.join("1.json"), journal.to_string()).unwrap();
    let o = s.once(DONE, GRACE, &[]);
    assert!(
        s.has(name),
        "token in {token_in}: a busy session was killed by a journal"
    );
    for (kind, pid) in s.pids("ccs-1") {
        assert!(
            alive(pid),
            "token in {token_in}: {kind} was signalled on a journal's word"
        );
    }
    assert!(!dir.join("1.json").exists(), "the journal was not dropped");
    assert!(
        o.stderr.contains("no longer carries its mark"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_planted_journal_signals_no_stranger_and_deletes_nothing_outside_the_state_dir() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    // A process of ours that is no chat's, and a file outside the state dir.
    let stranger = KillOnDrop(
        std::process::Command::new("sleep")
            .arg("100000")
            .spawn()
            .unwrap(),
    );
    let spid = stranger.0.id() as i32;
    let start = stat(spid).unwrap().start;
    let outside = s.path("precious.json");
    std::fs::write(&outside, "{}").unwrap();
    let server = s.server_pid();
    let claude = s.pids("ccs-1")["claude"];
    let dir = s.studio().join("reaping");
    std::fs::create_dir_all(&dir).unwrap();
    let journal = |id: &str, victims: serde_json::Value| {
        serde_json::json!({
            "id": id, "session": format!("ccs-{id}"), "tmux_id": 77, "cid": "c", "reason": "idle",
            "idle_ms": 1, "cwd": null, "started_at": "2026-01-01T00:00:00Z",
            "owner": {"pid": 99_999_999, "start": 1}, "victims": victims,
            "server_pid": server, "token": "r1x0x0"
        })
        .to_string()
    };
    // Lists the stranger, the chat of another session, and the server itself.
    std::fs::write(
        dir.join("9.json"),
        journal(
            "9",
            serde_json::json!([
                {"pid": spid, "start": start},
                {"pid": claude, "start": stat(claude).unwrap().start},
                {"pid": server, "start": stat(server).unwrap().start},
            ]),
        ),
    )
    .unwrap();
    // Names a file outside the state dir as its id.
    std::fs::write(
        dir.join("8.json"),
        journal("../../../precious", serde_json::json!([])),
    )
    .unwrap();
    let o = s.once(DONE, GRACE, &[]);
    assert!(
        alive(spid),
        "a stranger listed in a planted journal was signalled"
    );
    assert!(alive(claude), "another session's claude was signalled");
    assert!(s.has("ccs-1") && s.show(n, "@ccs_idle").is_some());
    assert!(outside.exists(), "a file outside the state dir was deleted");
    assert!(o.stderr.contains("is not signalled"), "{}", o.stderr);
    assert!(o.stderr.contains("8.json"), "{}", o.stderr);
    assert!(
        dir.join("8.json").exists(),
        "an invalid journal is left for a human"
    );
}

#[test]
fn the_state_dir_is_private_whatever_the_umask_and_another_users_is_refused() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    // umask 0: what we write must still be 0700 / 0600.
    let o = std::process::Command::new("sh")
        .args(["-c", "umask 000; exec \"$0\" --once", BIN])
        .envs(std::env::vars().filter(|(k, _)| !k.starts_with("CCS_")))
        .env_remove("TMUX")
        .env("CCS_TMUX_SOCKET_PATH", &s.sock)
        .env("CCS_REAP_STATE_DIR", s.state_dir())
        .env("CCS_ENGINE_IDLE_KILL_MS", LIMIT)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!s.has("ccs-1"));
    let st = s.state_dir();
    for d in [
        st.clone(),
        st.join("studios"),
        s.studio(),
        s.studio().join("sessions"),
        s.studio().join("reaping"),
    ] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    for f in [st.join("reaped.jsonl"), s.studio().join("sessions/1.json")] {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    // A state dir that belongs to someone else: nothing is touched.
    let theirs = if rustix::process::geteuid().is_root() {
        let p = s.path("theirs");
        std::fs::create_dir(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        p
    } else {
        std::path::PathBuf::from("/usr")
    };
    let n = s.chat("ccs-2", "c2", "");
    s.idle_since(n, 10_000_000);
    let th = path_str(&theirs);
    let o = s.once(FAILED, GRACE, &[("CCS_REAP_STATE_DIR", th.as_str())]);
    assert!(s.has("ccs-2"), "reaped with a state dir of another user");
    assert!(alive(s.pids("ccs-2")["claude"]));
    assert!(
        o.stdout.contains("not by us") || o.stderr.contains("not by us"),
        "{}",
        o.stderr
    );
}

// 5. A conversation id never starts with '-'.

#[test]
fn flag_like_conversation_ids_never_reach_claude() {
    let s = Server::new();
    // From @ccs_cid: unknown (rule 6), kept.
    let n = s.session("ccs-1", "sleep 100000");
    s.idle_since(n, 10_000_000);
    s.set(n, "@ccs_cid", "--dangerously-skip-permissions");
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1"), "reaped with a flag for a cid");
    let one = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]))
        .remove("ccs-1")
        .expect("ccs-1 in status");
    assert_eq!(one["state"], "no-cid", "{one}");
    assert!(one["cid"].is_null());
    // From a command line: unknown too.
    let n = s.session("ccs-2", &format!("exec {} --resume -r", fake_claude()));
    s.idle_since(n, 10_000_000);
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-2"));
    // From a tombstone: spawn refuses, naming the file, and starts nothing.
    let t = s.studio().join("sessions");
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(
        t.join("3.json"),
        r#"{"id":"3","cid":"--dangerously-skip-permissions","reaped_at":"t","reason":"idle","cwd":null}"#,
    )
    .unwrap();
    let o = s.run_any(&["spawn", "3", "--", &fake_claude()], &[]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("3.json"), "{}", o.stderr);
    assert!(!s.has("ccs-3"));
}

// 6. A process of another session is never a victim.

#[test]
fn a_window_moved_to_another_session_survives_the_reap_of_its_first_session() {
    let s = Server::new();
    s.session("other", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "");
    // A second window of ccs-1 (its processes carry TMUX=...,<ccs-1's number>), moved away.
    let pidfile = s.path("moved.pid");
    s.ok(&[
        "new-window",
        "-d",
        "-t",
        &format!("${n}:"),
        &format!(
            "sh -c 'sleep 100000 & echo $! > {}; wait'",
            pidfile.display()
        ),
    ]);
    let child = wait_pid(&pidfile, 10.0).expect("the moved window's pid file");
    // `$!` is written as soon as the shell forks: until the child's exec has laid out its new
    // stack, its /proc environ reads empty, so the marker is waited for, not read once.
    assert!(
        wait_until(10.0, || environ_has(child, "TMUX=")),
        "the moved window's process {child} does not carry TMUX"
    );
    s.ok(&["move-window", "-s", &format!("${n}:1"), "-t", "=other:"]);
    s.idle_since(n, 10_000_000);
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-1"), "{}", o.stderr);
    assert!(!alive(s.pids("ccs-1")["claude"]), "{}", o.stderr);
    assert!(
        alive(child),
        "a process of another session's window was killed: {}",
        o.stderr
    );
    assert_eq!(
        s.ok(&["list-windows", "-t", "=other", "-F", "x"])
            .lines()
            .count(),
        2,
        "{}",
        o.stderr
    );
}

// 7. The chat's cid is its own claude's, never a deeper one's.

#[test]
fn a_cid_of_a_claude_below_the_chats_claude_is_never_taken() {
    let s = Server::new();
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // The chat's claude (a new conversation: no id) runs a sub-agent claude with its own id.
    let sub = bin.join("sub-claude");
    std::fs::write(&sub, "#!/bin/sh\nsleep 100000\n").unwrap();
    let top = bin.join("claude");
    std::fs::write(
        &top,
        format!("#!/bin/sh\n{} --resume deep-conv &\nwait\n", sub.display()),
    )
    .unwrap();
    for f in [&sub, &top] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let n = s.session("ccs-1", &top.display().to_string());
    assert!(
        wait_until(10.0, || !procs_with(&["deep-conv"]).is_empty()),
        "the sub-agent did not start"
    );
    s.idle_since(n, 10_000_000);
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1"), "reaped under a sub-agent's conversation id");
    let one = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]))
        .remove("ccs-1")
        .expect("ccs-1 in status");
    assert!(one["cid"].is_null(), "{one}");
    assert_eq!(one["state"], "no-cid");
}

// 8. One hostile value never stops the others from being decided.

#[test]
fn tabs_and_newlines_in_one_sessions_values_neither_break_nor_forge_other_rows() {
    let s = Server::new();
    let good = s.chat("ccs-1", "c1", "");
    s.idle_since(good, 10_000_000);
    // A session of ours whose every option is hostile, and a foreign one that tries to forge a
    // viewer of ccs-1 and a phantom ccs-99.
    let bad = s.session("ccs-2", "sleep 100000");
    let forged_client = format!("x\nC\t${good}\t4242\t1\t1\t1");
    let forged_session = "y\nS\t$99\t0\t1\t1\t\tc99\t\t/s\tccs-99";
    for (opt, v) in [
        ("@ccs_cid", "a\tb\nc"),
        ("@ccs_idle", "1\t2"),
        ("@ccs_turn", ""),
        ("@ccs_reaping", ""),
    ] {
        if !v.is_empty() {
            s.set(bad, opt, v);
        }
    }
    // The reap token's column too: from the session's environment, else `@ccs_reaper`.
    s.set_token(bad, &forged_client);
    let other = s.session("other", "sleep 100000");
    s.set(other, "@ccs_cid", &forged_client);
    s.set(other, "@ccs_idle", forged_session);
    s.set(other, "@ccs_reaper", forged_session);
    // A session name with a tab and a newline, where tmux allows one.
    let _ = s.tmux(&["new-session", "-d", "-s", "ccs-3\tx\ny", "sleep 100000"]);
    let j = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(j["error"].is_null(), "{j}");
    let by = by_name(&j);
    assert!(!by.contains_key("ccs-99"), "a row was forged: {j}");
    assert_eq!(by["ccs-1"]["viewers"], 0, "{j}");
    assert_eq!(by["ccs-1"]["state"], "expired", "{j}");
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-1"), "the others were not decided: {}", o.stderr);
    assert!(s.has("ccs-2") && s.has("other"));
}

// 9. --json always prints JSON; a future idle stamp is rewritten to now.

#[test]
fn json_is_json_for_every_command_and_outcome() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    let env = [("CCS_ENGINE_IDLE_KILL_MS", LIMIT)];
    for (args, want) in [
        (vec!["reap", "1", "--dry-run", "--json"], 0),
        (vec!["reap", "9", "--json"], 1),
        (vec!["reap", "bad id", "--json"], 1),
        (vec!["turn", "begin", "9", "--json"], 4),
        (vec!["turn", "end", "9", "--json"], 4),
        (vec!["status", "--json"], 0),
        (vec!["--once", "--dry-run", "--json"], 0),
    ] {
        let o = s
            .run_any(&args, &env)
            .expect_exit(&[want], &format!("{args:?}"));
        let v: serde_json::Value = serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {:?}", o.stdout));
        assert!(v.is_object(), "{args:?}: {v}");
    }
    let o = s.run(&["reap", "1", "--dry-run", "--json"], &env);
    assert_eq!(o.json()["would_reap"], true);
    assert!(s.has("ccs-1"));
    let o = s.run_any(&["turn", "begin", "9", "--json"], &env);
    assert_eq!((o.code, o.json()["result"].as_str()), (4, Some("gone")));
}

#[test]
fn an_idle_stamp_in_the_future_is_rewritten_to_now() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    let future = now_ms() + 100 * 86_400_000;
    s.set(n, "@ccs_idle", &future.to_string());
    let before = now_ms();
    s.once(DONE, GRACE, &[]);
    let stamp: i64 = s.show(n, "@ccs_idle").unwrap().parse().unwrap();
    assert!(
        stamp >= before && stamp <= now_ms(),
        "the future stamp was kept: {stamp}"
    );
}
