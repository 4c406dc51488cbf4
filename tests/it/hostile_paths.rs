//! Hostile paths (issue #19, "also found"): a reap batch that panics, stdout that is a closed pipe
//! or a full device, ids too long for a file name, activity numbers that are not plain whole
//! numbers, a `before` hook that is configured but cannot be run, a `--once` summary that must add
//! up, and SIGHUP/SIGUSR1 sent to the daemon in the middle of a teardown.

use crate::common::*;

use std::process::Stdio;
use std::time::Instant;

/// A session the sweep reaps when nothing says otherwise: idle for hours, with a conversation id.
fn reapable(s: &Server, name: &str) -> u32 {
    let n = s.session(name, "sleep 100000");
    s.set(n, "@ccs_cid", &format!("conv-{name}"));
    s.idle_since(n, 10_000_000);
    n
}

/// The last lines of a log, for a failure message.
fn tail(p: &std::path::Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

// ---- stdout ----

/// Run ccs-reap with stdout a pipe whose reader has gone before anything is written (as
/// `ccs-reap status | head -c0` would be, and `| head -1` once its line is read).
fn into_closed_pipe(s: &Server, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = s
        .reap(env)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command has not listed tmux yet: the reader is gone before its first write.
    drop(c.stdout.take());
    Out::from(c.wait_with_output().unwrap())
}

/// A command that prints: its args, extra env, and the exit code it has anyway.
type Printing = (Vec<&'static str>, Vec<(&'static str, &'static str)>, i32);

/// Every command that prints, as a table.
fn printing_commands() -> Vec<Printing> {
    let reap = vec![
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "200"),
    ];
    vec![
        (vec!["status"], vec![], 0),
        (vec!["status", "--json"], vec![], 0),
        (vec!["--once", "--dry-run"], reap.clone(), 0),
        (vec!["--once", "--dry-run", "--json"], reap.clone(), 0),
        (vec!["reap", "--dry-run", "1"], vec![], 0),
        (vec!["reap", "--dry-run", "--json", "1"], vec![], 0),
        (vec!["turn", "end", "--json", "nope"], vec![], 4),
        (vec!["completions", "bash"], vec![], 0),
        (vec!["man"], vec![], 0),
        (vec!["--help"], vec![], 0),
        (vec!["status", "--help"], vec![], 0),
        (vec!["--version"], vec![], 0),
    ]
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let s = Server::new();
    reapable(&s, "ccs-1");
    for (args, env, code) in printing_commands() {
        let o = into_closed_pipe(&s, &args, &env);
        assert_eq!(o.code, code, "{args:?} into a closed pipe:\n{}", o.stderr);
        no_panic(&o);
        assert!(
            !o.stderr.contains("stdout"),
            "{args:?}: a closed pipe is not an error:\n{}",
            o.stderr
        );
    }
    assert!(s.has("ccs-1"), "only dry runs were asked for");
}

#[test]
fn a_stdout_that_cannot_be_written_exits_1_with_one_line() {
    let s = Server::new();
    reapable(&s, "ccs-1");
    for (args, env, _) in printing_commands() {
        let mut env = env.clone();
        env.push(("CCS_LOG", "off"));
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Out::from(
            s.reap(&env)
                .args(&args)
                .stdout(full)
                .stderr(Stdio::piped())
                .output()
                .unwrap(),
        );
        assert_eq!(o.code, 1, "{args:?} > /dev/full:\n{}", o.stderr);
        no_panic(&o);
        let lines: Vec<&str> = o.stderr.lines().filter(|l| l.contains("stdout")).collect();
        assert_eq!(
            lines.len(),
            1,
            "{args:?}: one line on stderr:\n{}",
            o.stderr
        );
        assert!(
            lines[0].starts_with("ccs-reap: failed to write to stdout"),
            "{args:?}: {}",
            o.stderr
        );
    }
}

#[test]
fn a_stderr_that_cannot_be_written_never_panics() {
    let s = Server::new();
    reapable(&s, "ccs-1");
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    for (args, env, code) in printing_commands() {
        // Logs (CCS_LOG=debug) and messages into a full stderr: dropped, never a panic.
        let o = s
            .reap(&env)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(full())
            .status()
            .unwrap();
        assert_eq!(o.code(), Some(code), "{args:?} 2> /dev/full");
        // Both full: the failed stdout still exits 1.
        let o = s
            .reap(&env)
            .args(&args)
            .stdout(full())
            .stderr(full())
            .status()
            .unwrap();
        assert_eq!(o.code(), Some(1), "{args:?} > /dev/full 2> /dev/full");
    }
}

// ---- a `before` hook that cannot be run ----

/// Write an executable `hook` script that logs each call, and return its path.
fn hook(s: &Server, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = s.path("hook");
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    path_str(&p)
}

/// The audit line of `name`, once there is one.
fn wait_for_line(s: &Server, name: &str, secs: f64) -> Option<serde_json::Value> {
    let mut line = None;
    wait_until(secs, || {
        line = s.audit_of(name).into_iter().next();
        line.is_some()
    });
    line
}

#[test]
fn a_before_hook_that_cannot_be_run_vetoes_the_reap() {
    let s = Server::new();
    let n = reapable(&s, "ccs-1");
    // Executable, so the configuration takes it, but its interpreter is gone: it cannot be run.
    let h = hook(&s, "#!/nonexistent/interpreter\nexit 0\n");
    let o = s.once(DONE, 200, &[("CCS_REAP_HOOK", h.as_str())]);
    assert!(
        s.has("ccs-1"),
        "the reap went on without its veto: {}",
        o.stderr
    );
    let lines = s.audit_of("ccs-1");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "aborted", "{}", lines[0]);
    let e = lines[0]["error"].as_str().unwrap();
    assert!(e.contains(&h) && e.contains("could not be run"), "{e}");
    assert_eq!(s.show(n, "@ccs_reaping"), None, "the mark was left");
}

#[test]
fn a_before_hook_deleted_or_made_unexecutable_under_the_daemon_vetoes_its_reaps() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::new();
    let a = s.session("ccs-1", "sleep 100000");
    let b = s.session("ccs-2", "sleep 100000");
    for n in [a, b] {
        s.set(n, "@ccs_cid", &format!("conv-{n}"));
    }
    let h = hook(&s, "#!/bin/sh\nexit 0\n");
    let log = s.path("daemon.log");
    let mut d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_INTERVAL_MS", "100"),
            ("CCS_REAP_GRACE_MS", "200"),
            ("CCS_REAP_HOOK", h.as_str()),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    // The daemon has swept (first sight stamps the idle clock): the hook was fine at its start.
    assert!(
        wait_until(10.0, || s.show(a, "@ccs_idle").is_some()),
        "{}",
        tail(&log)
    );
    std::fs::remove_file(&h).unwrap();
    s.idle_since(a, 10_000_000);
    let l = wait_for_line(&s, "ccs-1", 10.0).unwrap_or_else(|| panic!("{}", tail(&log)));
    assert_eq!(l["outcome"], "aborted", "{l}");
    assert!(
        l["error"].as_str().unwrap().contains("could not be run"),
        "{l}"
    );
    // Back, but no longer executable.
    std::fs::write(&h, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o644)).unwrap();
    s.idle_since(b, 10_000_000);
    let l = wait_for_line(&s, "ccs-2", 10.0).unwrap_or_else(|| panic!("{}", tail(&log)));
    assert_eq!(l["outcome"], "aborted", "{l}");
    assert!(
        l["error"].as_str().unwrap().contains("could not be run"),
        "{l}"
    );
    assert!(s.has("ccs-1") && s.has("ccs-2"), "{}", tail(&log));
    signal(d.0.id() as i32, Signal::TERM).unwrap();
    let mut status = None;
    assert!(wait_until(10.0, || {
        status = d.0.try_wait().unwrap();
        status.is_some()
    }));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", tail(&log));
}

// ---- signals to the daemon ----

/// A daemon reaping at [`LIMIT`] every 100 ms with `grace_ms`, logging to `<dir>/daemon.log`.
fn daemon(s: &Server, grace_ms: &str, extra: &[(&str, &str)]) -> KillOnDrop {
    let mut env = vec![
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_INTERVAL_MS", "100"),
        ("CCS_REAP_GRACE_MS", grace_ms),
    ];
    env.extend_from_slice(extra);
    KillOnDrop(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(s.path("daemon.log")).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Wait up to `secs` for the daemon to exit; its exit code (`None`: still running, or a signal).
fn exit_of(d: &mut KillOnDrop, secs: f64) -> Option<std::process::ExitStatus> {
    let mut status = None;
    wait_until(secs, || {
        status = d.0.try_wait().unwrap();
        status.is_some()
    });
    status
}

#[test]
fn sigusr1_and_sighup_never_kill_the_daemon_mid_teardown() {
    let s = Server::new();
    let log = s.path("daemon.log");
    let journal = |id: &str| s.studio().join("reaping").join(format!("{id}.json"));
    // A helper that ignores SIGTERM: each teardown lasts its whole grace. The whole world is set
    // up before the daemon starts (a session created under a running daemon may be seen before
    // its stamp is written): the second chat waits pinned until its turn comes.
    let a = s.chat("ccs-1", "c1", "stubborn");
    s.idle_since(a, 10_000_000);
    let b = s.chat("ccs-2", "c2", "stubborn");
    s.set(b, "@ccs_pin", "1");
    s.idle_since(b, 10_000_000);
    let mut d = daemon(&s, "1500", &[]);
    assert!(
        wait_until(10.0, || journal("1").exists()),
        "no teardown started: {}",
        tail(&log)
    );
    // SIGUSR1 mid-teardown: ignored; the teardown ends as it would have.
    signal(d.0.id() as i32, Signal::USR1).unwrap();
    let l = wait_for_line(&s, "ccs-1", 10.0).unwrap_or_else(|| panic!("{}", tail(&log)));
    assert_eq!(l["outcome"], "reaped", "{l}");
    assert!(
        d.0.try_wait().unwrap().is_none(),
        "SIGUSR1 stopped the daemon: {}",
        tail(&log)
    );
    // SIGHUP mid-teardown: stops it like SIGTERM, once the teardown is finished.
    s.unset(b, "@ccs_pin");
    assert!(
        wait_until(10.0, || journal("2").exists()),
        "no second teardown started: {}",
        tail(&log)
    );
    let t0 = Instant::now();
    signal(d.0.id() as i32, Signal::HUP).unwrap();
    let status = exit_of(&mut d, 10.0);
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "SIGHUP did not stop the daemon gracefully ({status:?}): {}",
        tail(&log)
    );
    let l = &s.audit_of("ccs-2")[0];
    assert_eq!(l["outcome"], "reaped", "{l}");
    assert!(!s.has("ccs-2"));
    assert!(
        !journal("2").exists(),
        "the teardown was cut short after {:?}",
        t0.elapsed()
    );
    for (kind, pid) in s.pids("ccs-2") {
        assert!(!alive(pid), "ccs-2's {kind} survived");
    }
}

// ---- a batch that panics ----
// The panic switch left the binary (issue 46): a panic in each phase of the teardown is a row of
// the stand-in table in src/engine/teardown/tests.rs (marks cleared, journals removed, one
// `failed` line; a chat already signalled left marked, its journal kept, for the next sweep).

// ---- the `--once` summary ----

#[test]
fn the_once_summary_adds_up_and_a_reap_never_attempted_frees_nothing() {
    let s = Server::new();
    let fresh = s.session("ccs-1", "sleep 100000");
    s.set(fresh, "@ccs_cid", "conv-1");
    s.idle_since(fresh, 1000);
    reapable(&s, "ccs-2");
    // Held: another reaper's mark, fresh.
    let held = reapable(&s, "ccs-3");
    s.set(held, "@ccs_reaping", &now_ms().to_string());
    // Vetoed by the hook: aborted before any signal.
    reapable(&s, "ccs-4");
    let h = hook(
        &s,
        "#!/bin/sh\ncase \"$1:$(cat)\" in before:*'\"name\":\"ccs-4\"'*) exit 3 ;; esac\nexit 0\n",
    );
    let env = [("CCS_REAP_HOOK", h.as_str())];
    let o = s.once(DONE, 200, &env);
    let last = o.stdout.lines().last().unwrap_or_default().to_string();
    assert_eq!(
        last, "4 session(s), 1 kept, 1 reaped, 1 held by another reaper, 1 aborted",
        "{}",
        o.stdout
    );
    let vetoed = o
        .stdout
        .lines()
        .find(|l| l.starts_with("aborted ccs-4 "))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(
        vetoed.contains("nothing freed") && !vetoed.contains("B freed"),
        "a vetoed reap freed nothing: {vetoed}"
    );
    let reaped = o
        .stdout
        .lines()
        .find(|l| l.starts_with("reaped ccs-2 "))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(reaped.contains("B freed"), "{reaped}");
    assert!(s.has("ccs-1") && !s.has("ccs-2") && s.has("ccs-3") && s.has("ccs-4"));

    // The same with --json: the counts add up to the sessions seen.
    let held2 = reapable(&s, "ccs-5");
    s.set(held2, "@ccs_reaping", &now_ms().to_string());
    let o = s.sweep(
        DONE,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "200"),
            ("CCS_REAP_HOOK", h.as_str()),
        ],
    );
    let j = o.json();
    let sum = &j["summary"];
    let n = |k: &str| sum[k].as_u64().unwrap_or_else(|| panic!("{k} in {sum}"));
    assert_eq!(n("seen"), 4, "{sum}");
    assert_eq!(
        n("kept") + n("reaped") + n("held") + n("aborted") + n("failed"),
        n("seen"),
        "{sum}"
    );
    assert_eq!((n("held"), n("aborted")), (2, 1), "{sum}");
}

// ---- ids too long for a file name ----

/// The longest id (docs/commands.md), and one byte more.
const MAX_ID: usize = 200;

#[test]
fn every_command_refuses_an_id_longer_than_the_maximum() {
    let s = Server::new();
    let long = "7".repeat(MAX_ID + 1);
    let claude = fake_claude();
    let table: Vec<Vec<&str>> = vec![
        vec!["spawn", &long, "--cid", "conv-1", "--", &claude],
        vec!["turn", "begin", &long],
        vec!["turn", "end", &long],
        vec!["pin", &long],
        vec!["unpin", &long],
        vec!["reap", &long],
        vec!["reap", "--force", &long],
    ];
    for args in table {
        let o = s
            .run_any(&args, &[])
            .expect_exit(FAILED, &format!("{:?}", &args[..2]));
        assert!(
            o.stderr.contains("at most 200 bytes"),
            "{:?}: {}",
            &args[..2],
            o.stderr
        );
    }
    assert!(
        s.names().iter().all(|n| n.len() < MAX_ID),
        "{:?}",
        s.names()
    );
}

#[test]
fn the_longest_id_spawn_accepts_is_reaped_and_resumed() {
    let s = Server::new();
    let id = "a".repeat(MAX_ID);
    let name = format!("ccs-{id}");
    let pids = s.path("long.pids");
    // Words, as a studio passes them (a shell string could not be given the conversation).
    let env = format!("FAKE_CLAUDE_PIDS={}", pids.display());
    let fc = fake_claude();
    let cmd = ["env", env.as_str(), fc.as_str()];
    let spawn = |extra: &[&str]| {
        let mut a = vec!["spawn", id.as_str()];
        a.extend_from_slice(extra);
        a.push("--");
        a.extend_from_slice(&cmd);
        s.run_any(&a, &[])
    };
    spawn(&["--cid", "conv-long"]).expect_exit(DONE, "spawn");
    assert!(s.has(&name));
    let n: u32 = s
        .ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("={name}:"),
            "#{session_id}",
        ])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap();
    s.idle_since(n, 10_000_000);
    s.once(DONE, 200, &[]);
    assert!(!s.has(&name), "the longest id was not reaped");
    assert_eq!(s.audit_of(&name)[0]["outcome"], "reaped");
    assert_eq!(s.tombstone(&id).unwrap()["cid"], "conv-long");
    // Back, resuming its conversation.
    spawn(&[]).expect_exit(DONE, "spawn again");
    assert!(s.has(&name));
}

#[test]
fn a_listed_session_whose_id_is_too_long_is_kept_with_one_warning_never_a_failed_sweep() {
    let s = Server::new();
    let long = format!("ccs-{}", "7".repeat(MAX_ID + 50));
    let n = reapable(&s, &long);
    reapable(&s, "ccs-1");
    // --once, twice: exit 0, the long one kept, no audit line for it, one warning a run.
    for _ in 0..2 {
        let o = s.once(DONE, 200, &[]);
        assert!(s.has(&long), "{}", o.stderr);
        let warnings = o
            .stderr
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("250 bytes"))
            .count();
        assert_eq!(warnings, 1, "{}", o.stderr);
    }
    assert!(!s.has("ccs-1"), "the others are reaped as usual");
    assert_eq!(s.audit_of(&long), Vec::<serde_json::Value>::new());
    // status shows it, kept, saying why.
    let st = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    let row = &by_name(&st)[&long];
    assert_eq!(row["action"], "keep", "{row}");
    assert!(row["why"].as_str().unwrap().contains("250 bytes"), "{row}");
    // The daemon says it once, however many sweeps.
    let log = s.path("daemon.log");
    let mut d = daemon(&s, "200", &[]);
    let sweeps = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" sweep "))
            .count()
    };
    assert!(wait_until(10.0, || sweeps() >= 4), "{}", tail(&log));
    signal(d.0.id() as i32, Signal::TERM).unwrap();
    assert_eq!(exit_of(&mut d, 10.0).and_then(|s| s.code()), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("WARN") && l.contains("250 bytes"))
            .count(),
        1,
        "{}",
        tail(&log)
    );
    assert!(s.has(&long) && s.show(n, "@ccs_reaping").is_none());
}
