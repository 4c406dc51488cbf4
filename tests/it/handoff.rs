//! No message dropped, no history lost: turn begin/end, the reap/turn race, spawn, manual reap.

use crate::common::wrapper::{path_with, shq};
use crate::common::*;
use std::process::Stdio;
use std::time::Duration;

const ON: &[(&str, &str)] = &[
    ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
    ("CCS_REAP_GRACE_MS", "1000"),
];

#[test]
fn turn_begin_and_end_hold_and_release_the_session() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    s.run(&["turn", "begin", "1"], ON);
    let t: i64 = s.show(n, "@ccs_turn").unwrap().parse().unwrap();
    assert!(now_ms() - t < 60_000);
    // A long-idle session in a turn is not reaped.
    s.sweep(DONE, &[], ON);
    assert!(s.has("ccs-1"));
    let before = now_ms();
    s.run(&["turn", "end", "1"], ON);
    assert_eq!(s.show(n, "@ccs_turn"), None);
    // The idle clock starts when the turn ends.
    let idle: i64 = s.show(n, "@ccs_idle").unwrap().parse().unwrap();
    assert!(idle >= before);
    // A missing session: begin and end both say "respawn it".
    s.run_expect(RESPAWN, &["turn", "begin", "2"], ON);
    s.run_expect(RESPAWN, &["turn", "end", "2"], ON);
    // ccs-1 exists, but "1" must not match "10" nor "10" match "1".
    s.run_expect(RESPAWN, &["turn", "begin", "10"], ON);
    // An odd id is an error that changes nothing.
    let o = s.run_any(&["turn", "begin", "1;kill-server"], ON);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("invalid session id"), "{}", o.stderr);
    assert!(s.has("ccs-1"));
}

#[test]
fn turn_begin_waits_for_a_reap_in_flight_then_says_respawn() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "");
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    let mut begin = KillOnDrop(
        s.reap(ON)
            .args(["turn", "begin", "1"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // It waits while the mark is there...
    assert!(
        !wait_until(0.5, || begin.0.try_wait().unwrap().is_some()),
        "turn begin did not wait for the reap"
    );
    assert_eq!(
        s.show(n, "@ccs_turn"),
        None,
        "a turn began on a session being reaped"
    );
    // ...and when the reap ends with the session gone, says "respawn it".
    s.ok(&["kill-session", "-t", &format!("${n}")]);
    assert!(wait_until(5.0, || begin.0.try_wait().unwrap().is_some()));
    assert_eq!(begin.0.wait().unwrap().code(), Some(4));

    // A reap that aborts (the mark cleared, the session kept) lets the turn begin.
    let m = s.chat("ccs-2", "c2", "");
    s.set(m, "@ccs_reaping", &now_ms().to_string());
    let mut begin = KillOnDrop(
        s.reap(ON)
            .args(["turn", "begin", "2"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(!wait_until(0.3, || begin.0.try_wait().unwrap().is_some()));
    s.unset(m, "@ccs_reaping");
    assert!(wait_until(5.0, || begin.0.try_wait().unwrap().is_some()));
    assert_eq!(begin.0.wait().unwrap().code(), Some(0));
    assert!(s.show(m, "@ccs_turn").is_some());
}

/// A reap and a turn begin racing on one session always end in one of two states.
#[test]
fn reap_and_turn_begin_race_has_exactly_two_outcomes() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15 ^ now_ms() as u64;
    let mut rand = move |max: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % max
    };
    let (mut turn_won, mut reap_won) = (0, 0);
    for i in 0..20 {
        let name = format!("ccs-r{i}");
        let id = format!("r{i}");
        // A helper that ignores SIGTERM keeps the teardown going for the grace after the pane
        // (and so the session) is gone: turn begin must still wait for the end of it.
        let n = s.chat(&name, &format!("cid-{i}"), "plain,stubborn");
        s.idle_since(n, 10_000_000);
        let (d1, d2) = (rand(40), rand(40));
        let env = [
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "300"),
        ];
        let mut reap = s.reap(&env);
        reap.args(["reap", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut begin = s.reap(&env);
        begin
            .args(["turn", "begin", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let t1 = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(d1));
            reap.status().unwrap().code()
        });
        let tomb = s.studio().join("sessions").join(format!("{id}.json"));
        let pids: Vec<i32> = s.pids(&name).values().copied().collect();
        let t2 = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(d2));
            let code = begin.status().unwrap().code();
            // What the studio would find at the very moment it is told to respawn.
            (code, tomb.exists(), pids.iter().all(|p| !alive(*p)))
        });
        let (rc, (bc, tomb_then, dead_then)) = (t1.join().unwrap(), t2.join().unwrap());
        if bc == Some(4) {
            assert!(
                tomb_then,
                "round {i}: told to respawn before the tombstone was written"
            );
            assert!(
                dead_then,
                "round {i}: told to respawn while the old tree was still alive"
            );
        }
        let alive_now = s.has(&name);
        match bc {
            Some(0) => {
                // The turn won: the session lives with its turn, the reap was refused or aborted.
                assert!(
                    alive_now,
                    "round {i}: turn began but the session is gone (reap rc {rc:?})"
                );
                assert!(s.show(n, "@ccs_turn").is_some(), "round {i}");
                assert_ne!(rc, Some(0), "round {i}: both won");
                turn_won += 1;
            }
            Some(4) => {
                // The reap won: the session is gone, its tombstone is there, nothing survives.
                assert!(
                    !alive_now,
                    "round {i}: told to respawn but the session lives"
                );
                assert_eq!(rc, Some(0), "round {i}");
                assert_eq!(
                    s.tombstone(&id).unwrap()["cid"],
                    format!("cid-{i}"),
                    "round {i}"
                );
                for (kind, pid) in s.pids(&name) {
                    assert!(!alive(pid), "round {i}: {kind} survived");
                }
                reap_won += 1;
            }
            other => panic!("round {i}: turn begin exited {other:?} (reap {rc:?})"),
        }
    }
    eprintln!("turn won {turn_won}, reap won {reap_won}");
}

#[test]
fn spawn_resumes_from_the_tombstone_and_is_idempotent() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let work = s.path("work");
    std::fs::create_dir_all(&work).unwrap();
    let pids = s.path("ccs-5.pids");
    let n = s.session(
        "ccs-5",
        &format!(
            "cd {} && FAKE_CLAUDE_PIDS={} exec {} --session-id conv-5",
            work.display(),
            pids.display(),
            fake_claude()
        ),
    );
    assert!(wait_until(5.0, || s.pids("ccs-5").contains_key("claude")));
    s.idle_since(n, 10_000_000);
    s.sweep(DONE, &[], ON);
    assert!(!s.has("ccs-5"));
    let t = s.tombstone("5").unwrap();
    assert_eq!(t["cid"], "conv-5");
    assert_eq!(t["cwd"], path_str(&work));

    // The studio's next message: begin says 4, spawn brings it back with --resume.
    s.run_expect(RESPAWN, &["turn", "begin", "5"], ON);
    let fc = fake_claude();
    s.run(&["spawn", "5", "--", &fc, "--model", "x"], ON);
    assert!(s.has("ccs-5"));
    let shown = s.ok(&[
        "list-panes",
        "-t",
        "=ccs-5:",
        "-F",
        "#{pane_start_command} #{pane_current_path}",
    ]);
    assert!(shown.contains("--resume conv-5"), "{shown}");
    assert!(shown.contains(&path_str(&work)), "{shown}");
    let sid = s.ok(&["display-message", "-p", "-t", "=ccs-5:", "#{session_id}"]);
    let m: u32 = sid.trim().trim_start_matches('$').parse().unwrap();
    assert_eq!(s.show(m, "@ccs_cid").as_deref(), Some("conv-5"));
    // The tombstone serves until the chat has answered a turn.
    assert!(
        s.tombstone("5").is_some(),
        "the tombstone went before a turn"
    );
    s.run(&["turn", "end", "5"], &[]);
    assert!(s.tombstone("5").is_none(), "the tombstone was not used up");
    assert!(wait_until(5.0, || s
        .ok(&["capture-pane", "-p", "-t", "=ccs-5:"])
        .contains("conversation conv-5")));
    s.run(&["turn", "begin", "5"], ON);

    // Existing session: nothing happens.
    s.run(&["spawn", "5", "--", "sleep", "1"], ON);
    assert!(s
        .ok(&["list-panes", "-t", "=ccs-5:", "-F", "#{pane_start_command}"])
        .contains("conv-5"));
}

/// A `tmux` first on PATH that passes every call on and, after a `new-session`, waits (up to 5 s)
/// until the session `name` is gone. Returns the PATH to run the reaper with.
fn gone_before_spawn_looks(s: &Server, name: &str) -> String {
    let bin = s.tmux_wrapper(&format!(
        r#""$REAL" "$@"; rc=$?
case " $* " in *" new-session "*)
  i=0
  while "$REAL" -S "$SOCK" has-session -t {target} 2>/dev/null && [ $i -lt 250 ]; do
    sleep 0.02; i=$((i+1))
  done
esac
exit $rc
"#,
        target = shq(&format!("={name}")),
    ));
    path_with(&bin)
}

#[test]
fn spawn_flags_and_concurrent_spawns() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let fc = fake_claude();
    // --cid names the conversation; a command with its own --session-id is left alone.
    s.run(&["spawn", "6", "--cid", "given", "--", &fc], ON);
    assert!(s
        .ok(&["list-panes", "-t", "=ccs-6:", "-F", "#{pane_start_command}"])
        .contains("--resume given"));
    s.run(&["spawn", "7", "--", &fc, "--session-id", "own"], ON);
    let cmd = s.ok(&["list-panes", "-t", "=ccs-7:", "-F", "#{pane_start_command}"]);
    assert!(
        cmd.contains("--session-id own") && !cmd.contains("--resume"),
        "{cmd}"
    );
    // The command's own id wins over --cid: it is what claude runs.
    s.run(
        &[
            "spawn",
            "10",
            "--cid",
            "other",
            "--",
            &fc,
            "--session-id",
            "own10",
        ],
        ON,
    );
    let sid = s.ok(&["display-message", "-p", "-t", "=ccs-10:", "#{session_id}"]);
    let n10: u32 = sid.trim().trim_start_matches('$').parse().unwrap();
    assert_eq!(s.show(n10, "@ccs_cid").as_deref(), Some("own10"));
    // A session that dies at once: exit 1, and the tombstone is kept for the next try. "At once"
    // is before spawn looks; how soon tmux drops the session of a pane that exited differs by
    // version (3.5a often still lists it a few ms later), so the `tmux` in front of the real one
    // returns from new-session only when the session is gone.
    let tombs = s.studio().join("sessions");
    std::fs::create_dir_all(&tombs).unwrap();
    std::fs::write(
        tombs.join("11.json"),
        r#"{"id":"11","cid":"keep-me","reaped_at":"x","reason":"idle","cwd":null}"#,
    )
    .unwrap();
    let path = gone_before_spawn_looks(&s, "ccs-11");
    let o = s.run_any(
        &["spawn", "11", "--", "false"],
        &[ON, &[("PATH", &path)]].concat(),
    );
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(s.tombstone("11").unwrap()["cid"], "keep-me");
    // Bad input changes nothing.
    s.run_expect(FAILED, &["spawn", "a b", "--", &fc], ON);
    assert_eq!(
        s.run_any(&["spawn", "8", "--cid", "x;y", "--", &fc], ON)
            .code,
        1
    );
    s.run_expect(
        FAILED,
        &["spawn", "8", "--cwd", "/nonexistent/dir", "--", &fc],
        ON,
    );
    assert!(!s.has("ccs-8"));
    // Five spawns of one id at once: one session.
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let mut c = s.reap(ON);
            c.args(["spawn", "9", "--", &fc])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            std::thread::spawn(move || c.status().unwrap().code())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), Some(0));
    }
    assert_eq!(s.names().iter().filter(|n| *n == "ccs-9").count(), 1);
}

#[test]
fn manual_reap_refuses_busy_viewed_and_unknown_cid_without_force() {
    let mut s = Server::new();
    s.session("keeper", "sleep 100000");
    let busy = s.chat("ccs-1", "c1", "");
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    s.chat("ccs-2", "c2", "");
    s.attach_control("ccs-2");
    s.session("ccs-3", "sleep 100000");
    let young = s.chat("ccs-4", "c4", "plain");
    s.idle_since(young, 10);
    for id in ["1", "2", "3"] {
        let o = s.run_any(&["reap", id], ON);
        assert_eq!(o.code, 1, "{id}: {}", o.stderr);
        assert!(o.stderr.contains("refusing"), "{}", o.stderr);
        assert!(s.has(&format!("ccs-{id}")));
    }
    // A cid found on the command line is enough, even on first sight.
    let argv_only = s.session(
        "ccs-5",
        &format!("exec {} --session-id from-argv", fake_claude()),
    );
    assert_eq!(s.show(argv_only, "@ccs_idle"), None);
    s.run(&["reap", "5"], ON);
    assert_eq!(s.tombstone("5").unwrap()["cid"], "from-argv");
    // A dry run says so, exits 0 and touches nothing.
    let o = s.run(&["reap", "4", "--dry-run"], ON);
    assert!(o.stdout.contains("would reap ccs-4"), "{}", o.stdout);
    assert!(s.has("ccs-4"));
    // Whatever its idle age, an idle one goes.
    s.run(&["reap", "4"], ON);
    assert!(!s.has("ccs-4"));
    assert_eq!(s.audit().last().unwrap()["reason"], "manual");
    // --force takes the busy one.
    s.run(&["reap", "1", "--force"], ON);
    assert!(!s.has("ccs-1"));
    let last = s.audit().last().unwrap().clone();
    assert_eq!(
        (last["reason"].as_str(), last["outcome"].as_str()),
        (Some("manual"), Some("reaped"))
    );
    // A missing session is an error.
    s.run_expect(FAILED, &["reap", "42"], ON);
}

#[test]
fn an_exited_pane_says_respawn_and_spawn_brings_the_chat_back() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    // claude exits on its own; the session stays (remain-on-exit), with no @ccs_cid: the cid is
    // in the pane's start command only.
    let n = s.remain_on_exit(
        "ccs-1",
        &format!(
            "{} --session-id dead-conv --helpers nothing </dev/null",
            fake_claude()
        ),
    );
    assert!(wait_until(10.0, || s
        .ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("${n}:"),
            "#{pane_dead}"
        ])
        .trim()
        == "1"));
    // The studio's next message: begin says 4 (a dead pane cannot take it)...
    s.run_expect(RESPAWN, &["turn", "begin", "1"], ON);
    // ...and spawn cleans the dead session up and resumes the conversation.
    s.run(&["spawn", "1", "--", &fake_claude()], ON);
    let cmd = s.ok(&[
        "list-panes",
        "-t",
        "=ccs-1:",
        "-F",
        "#{pane_dead} #{pane_start_command}",
    ]);
    assert!(
        cmd.starts_with('0') && cmd.contains("--resume dead-conv"),
        "{cmd}"
    );
    let line = s
        .audit()
        .into_iter()
        .find(|l| l["session"] == "ccs-1")
        .unwrap();
    assert_eq!(
        (line["reason"].as_str(), line["outcome"].as_str()),
        (Some("exited"), Some("reaped")),
        "{line}"
    );
    s.run(&["turn", "begin", "1"], ON);
}
