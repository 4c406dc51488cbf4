//! Teardown with real processes: nothing of a reaped session survives, nothing else is touched.

use crate::common::*;
use std::time::Instant;

#[test]
fn the_whole_tree_goes_including_setsid_daemons_and_term_ignorers() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain,stubborn,daemon");
    s.idle_since(n, 10_000_000);
    let pids = s.pids("ccs-1");
    assert_eq!(pids.len(), 4, "{pids:?}");
    s.once(DONE, 1000, &[]);
    for (kind, pid) in &pids {
        assert!(!alive(*pid), "{kind} ({pid}) survived the reap");
    }
    let line = &s.audit()[0];
    assert_eq!(line["outcome"], "reaped", "{line}");
    // Every one was found and pinned, and SIGTERM went to all of them.
    let listed: Vec<i64> = line["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap())
        .collect();
    for (kind, pid) in &pids {
        assert!(
            listed.contains(&(*pid as i64)),
            "{kind} {pid} not among the victims {listed:?}"
        );
    }
    // SIGTERM went to every one still alive: claude, the stubborn one and the setsid daemon at
    // least (the plain child may already have died of the SIGHUP of its closing pty).
    assert!(line["term"].as_u64().unwrap() >= 3, "{line}");
    // Only the one that ignores SIGTERM needed SIGKILL, after the grace.
    assert_eq!(line["kill"], 1, "{line}");
    assert!(line["took_ms"].as_u64().unwrap() >= 1000, "{line}");
    assert!(line["rss_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_polite_tree_does_not_wait_for_the_grace() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    let t = Instant::now();
    s.once(DONE, 20_000, &[]);
    let line = &s.audit()[0];
    assert_eq!(line["outcome"], "reaped");
    assert_eq!(line["kill"], 0, "{line}");
    assert!(
        t.elapsed().as_millis() < 10_000,
        "waited for the grace: {:?}",
        t.elapsed()
    );
}

#[test]
fn the_teardown_takes_its_steps_in_the_cores_protocol_order() {
    use ccs_reap::core::protocol::Phase;
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    let out = s.sweep(
        DONE,
        &["-v"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "20000"),
            ("CCS_LOG", "warn,ccs_reap::engine::teardown=debug"),
        ],
    );
    assert_eq!(s.audit()[0]["outcome"], "reaped", "{}", out.stderr);
    // Each step's DEBUG line, in the order the teardown logged them.
    let seen: Vec<&str> = out
        .stderr
        .lines()
        .filter_map(|l| l.split("phase=\"").nth(1)?.split('"').next())
        .collect();
    let want: Vec<&str> = Phase::ORDER.iter().map(|p| p.name()).collect();
    assert_eq!(seen, want, "{}", out.stderr);
}

#[test]
fn strangers_and_other_sessions_are_never_signalled() {
    let s = Server::new();
    let victim = s.chat("ccs-1", "c1", "plain,daemon");
    s.idle_since(victim, 10_000_000);
    let busy = s.chat("ccs-2", "c2", "plain,stubborn,daemon");
    s.idle_since(busy, 10_000_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    // A process of the same uid whose TMUX names another session number of this server, and one
    // with no TMUX at all.
    let sock = path_str(&s.sock);
    let mut near_miss = KillOnDrop(
        std::process::Command::new("sleep")
            .arg("100000")
            .env("TMUX", format!("{sock},1,{}", victim + 100))
            .spawn()
            .unwrap(),
    );
    let mut plain = KillOnDrop(
        std::process::Command::new("sleep")
            .arg("100000")
            .env_remove("TMUX")
            .spawn()
            .unwrap(),
    );
    s.once(DONE, 500, &[]);
    assert!(!s.has("ccs-1"));
    for (kind, pid) in s.pids("ccs-1") {
        assert!(!alive(pid), "ccs-1 {kind} survived");
    }
    for (kind, pid) in s.pids("ccs-2") {
        assert!(alive(pid), "ccs-2 {kind} ({pid}) was signalled");
    }
    assert!(
        near_miss.0.try_wait().unwrap().is_none(),
        "a stranger was killed"
    );
    assert!(
        plain.0.try_wait().unwrap().is_none(),
        "a stranger was killed"
    );
}

#[test]
fn reaps_of_one_sweep_run_concurrently() {
    let s = Server::new();
    let names: Vec<String> = (1..=8).map(|i| format!("ccs-{i}")).collect();
    for nm in &names {
        let n = s.chat(nm, &format!("c{nm}"), "stubborn");
        s.idle_since(n, 10_000_000);
    }
    let t = Instant::now();
    let o = s.sweep(
        DONE,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "1000"),
        ],
    );
    let took = t.elapsed();
    assert!(s.names().is_empty(), "{:?}", s.names());
    for nm in &names {
        for (kind, pid) in s.pids(nm) {
            assert!(!alive(pid), "{nm} {kind} survived");
        }
    }
    // One after another this would be at least 8 graces.
    assert!(
        took.as_millis() < 6000,
        "8 reaps with a 1 s grace took {took:?}"
    );
    assert_eq!(o.json()["reaps"].as_array().unwrap().len(), 8);
}

#[test]
fn a_session_held_by_another_reap_is_not_reaped_twice() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    s.set_token(n, "someone-else");
    s.once(DONE, 500, &[]);
    assert!(s.has("ccs-1"));
    assert!(s.audit().iter().all(|l| l["outcome"] != "reaped"));
    // The other reaper's mark is left alone.
    assert_eq!(s.token(n).as_deref(), Some("someone-else"));
}

#[test]
fn a_stale_mark_from_a_dead_reaper_is_cleared_and_the_session_re_decided() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    // An hour old by the clock of whoever wrote it, with a token that names no owner: its age is
    // never read off the writer's time, only measured by the reader, which must see it
    // unchanged for its own limit (3 x 200 + 3 x 500 + 2000 ms here) first, across `--once` runs
    // (the state dir keeps what it saw).
    s.set(n, "@ccs_reaping", &(now_ms() - 3_600_000).to_string());
    s.set_token(n, "dead");
    let quick = [("CCS_TMUX_TIMEOUT_MS", "500")];
    s.once(DONE, 200, &quick);
    assert!(
        s.has("ccs-1"),
        "a mark of an unknown owner was cleared at first sight"
    );
    assert!(s.show(n, "@ccs_reaping").is_some());
    std::thread::sleep(std::time::Duration::from_millis(4400));
    s.once(DONE, 200, &quick);
    // That sweep clears the mark; the reap it decided on the same snapshot may have lost the
    // test-and-set to the mark it was clearing. The next sweep certainly reaps.
    if s.has("ccs-1") {
        assert_eq!(s.show(n, "@ccs_reaping"), None);
        s.once(DONE, 200, &quick);
    }
    assert!(!s.has("ccs-1"));
    assert!(s.audit().iter().any(|l| l["outcome"] == "reaped"));
}

#[test]
fn a_garbage_mark_does_not_block_a_session_forever() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    s.set(n, "@ccs_reaping", "not a time");
    s.once(DONE, 500, &[]);
    if s.has("ccs-1") {
        assert_eq!(s.show(n, "@ccs_reaping"), None);
        s.once(DONE, 500, &[]);
    }
    assert!(!s.has("ccs-1"));
}

#[test]
fn sigterm_during_a_teardown_finishes_it_first() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "stubborn");
    s.idle_since(n, 10_000_000);
    let log = std::fs::File::create(s.path("daemon.log")).unwrap();
    let mut d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "1500"),
            ("CCS_REAP_INTERVAL_MS", "100"),
        ])
        .stderr(log)
        .spawn()
        .unwrap(),
    );
    // The teardown is under way once its journal is there (written before the first signal;
    // the session itself may vanish at once, with claude's pane).
    let journal = s.studio().join("reaping").join("1.json");
    assert!(
        wait_until(10.0, || journal.exists()),
        "the teardown did not start"
    );
    signal(d.0.id() as i32, Signal::TERM).unwrap();
    let status = d.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // By the time it exited, the reap was complete.
    assert!(!s.has("ccs-1"));
    for (kind, pid) in s.pids("ccs-1") {
        assert!(!alive(pid), "{kind} survived");
    }
    assert_eq!(s.audit()[0]["outcome"], "reaped");
    assert!(s.tombstone("1").is_some());
}

#[test]
fn a_reaper_killed_mid_teardown_leaves_a_state_the_next_sweep_completes() {
    reaper_killed_mid_teardown(false);
}

/// The same, with the mark as an earlier version left it: its token in `@ccs_reaper`.
#[test]
fn a_teardown_left_by_an_earlier_version_is_completed_too() {
    reaper_killed_mid_teardown(true);
}

fn reaper_killed_mid_teardown(legacy: bool) {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "stubborn,daemon");
    s.idle_since(n, 10_000_000);
    if legacy {
        // The session outlives its claude, so the next sweep finds it with its mark.
        s.ok(&[
            "set-option",
            "-t",
            &format!("${n}:"),
            "remain-on-exit",
            "on",
        ]);
    }
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "100000"),
        ("CCS_REAP_INTERVAL_MS", "100"),
        ("CCS_TMUX_TIMEOUT_MS", "300"),
    ];
    let mut d = KillOnDrop(
        s.reap(&env)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Wait until the teardown is under way: its journal is written before the first signal.
    let journal = s.studio().join("reaping").join("1.json");
    assert!(
        wait_until(10.0, || journal.exists()),
        "the teardown did not start"
    );
    let stubborn = s.pids("ccs-1")["stubborn"];
    assert!(
        wait_until(10.0, || !alive(s.pids("ccs-1")["claude"])),
        "SIGTERM was not sent"
    );
    d.0.kill().unwrap();
    d.0.wait().unwrap();
    // Its grace is 100 s: the helper that ignores SIGTERM is still there, and so is the journal.
    assert!(alive(stubborn));
    assert!(journal.exists());
    if legacy {
        // Where an earlier version kept the token: `@ccs_reaper`, not the environment.
        assert!(s.has("ccs-1"), "the session went with its claude");
        let token = s.token(n).expect("the reap's token");
        s.set(n, "@ccs_reaper", &token);
        s.ok(&[
            "set-environment",
            "-u",
            "-t",
            &format!("${n}"),
            "CCS_REAP_TOKEN",
        ]);
        assert_eq!(s.token(n), None);
    }
    // The next sweep finishes the job.
    s.once(DONE, 100, &[]);
    assert!(!s.has("ccs-1"));
    for (kind, pid) in s.pids("ccs-1") {
        assert!(!alive(pid), "{kind} survived");
    }
    assert!(!journal.exists());
    assert_eq!(s.tombstone("1").unwrap()["cid"], "c1");
    let lines = s.audit();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "reaped");
}

#[test]
fn the_daemon_keeps_sweeping_during_a_slow_teardown_and_never_starts_it_twice() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "stubborn");
    s.idle_since(n, 10_000_000);
    let _d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "4000"),
            ("CCS_REAP_INTERVAL_MS", "100"),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap(),
    );
    let journal = s.studio().join("reaping").join("1.json");
    assert!(
        wait_until(10.0, || journal.exists()),
        "the teardown did not start"
    );
    // While ccs-1's stubborn helper holds its 4 s grace, a new chat is seen and stamped.
    let m = s.chat("ccs-2", "c2", "");
    assert!(
        wait_until(2.0, || s.show(m, "@ccs_idle").is_some()),
        "sweeps stopped during the teardown"
    );
    assert!(
        journal.exists(),
        "the teardown was already over: the test proves nothing"
    );
    // It ends once, with one audit line, although some 30 sweeps saw it due meanwhile.
    assert!(wait_until(15.0, || !journal.exists()));
    let lines = s.audit_of("ccs-1");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "reaped");
    assert_eq!(lines[0]["kill"], 1);
}

#[test]
fn a_journal_left_by_a_reaper_of_an_older_server_never_touches_a_new_session() {
    let s = Server::new();
    // A new server whose ccs-1 is `$0` again, in a turn, with its own conversation.
    let n = s.chat("ccs-1", "new-cid", "plain");
    assert_eq!(n, 0);
    s.idle_since(n, 10_000_000);
    s.set(n, "@ccs_turn", &now_ms().to_string());
    // The journal of a reaper that died mid-teardown of the old server's `$0` ccs-1.
    let dir = s.studio().join("reaping");
    std::fs::create_dir_all(&dir).unwrap();
    let journal = serde_json::json!({
        "id": "1", "session": "ccs-1", "tmux_id": 0, "cid": "old-cid", "reason": "idle",
        "idle_ms": 1, "cwd": null, "started_at": "2026-01-01T00:00:00Z",
        "owner": {"pid": 99_999_999, "start": 1}, "victims": [],
        "server_pid": 1, "token": "r1x0x0"
    });
    std::fs::write(dir.join("1.json"), journal.to_string()).unwrap();
    s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(
        !dir.join("1.json").exists(),
        "the journal was not dealt with"
    );
    assert!(s.has("ccs-1"), "a busy session of a new server was killed");
    for (kind, pid) in s.pids("ccs-1") {
        assert!(alive(pid), "{kind} was signalled");
    }
    assert!(
        s.tombstone("1").is_none(),
        "the old cid was written back over a chat that came back"
    );
}

#[test]
fn a_tombstone_that_cannot_be_written_stops_the_reap_before_any_signal() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    // A tombstone that cannot be written: the studio's `sessions/` made immutable (as root,
    // `chattr +i`; a directory at the tombstone's path no longer does, since a state file that
    // is not a regular file is moved aside).
    let sessions = s.studio().join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    struct Mutable(std::path::PathBuf);
    impl Drop for Mutable {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        }
    }
    let ok = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&sessions)
        .status()
        .is_ok_and(|st| st.success());
    let _undo = Mutable(sessions.clone());
    assert!(
        ok,
        "this test needs root and chattr (e2fsprogs) on a file system with the immutable \
         attribute (ext4, xfs, btrfs); skip it with --skip teardown::a_tombstone_that_cannot_be_written"
    );
    s.once(FAILED, 500, &[]);
    assert!(s.has("ccs-1"));
    for (kind, pid) in s.pids("ccs-1") {
        assert!(
            alive(pid),
            "{kind} was signalled although the cid could not be kept"
        );
    }
    let line = &s.audit()[0];
    assert_eq!(line["outcome"], "failed");
    assert!(
        line["error"].as_str().unwrap().contains("not attempted"),
        "{line}"
    );
    assert_eq!(s.show(n, "@ccs_reaping"), None, "the mark was left");
    assert!(!s.studio().join("reaping").join("1.json").exists());
}

/// Issue #20, item 4: in one `--once` batch, a chat whose tree dies at the SIGTERM is finished at
/// once (session gone, tombstone and audit line written, `turn begin` released, its line printed),
/// while a TERM-ignoring chat of the same batch still waits out its grace.
#[test]
fn a_polite_chat_does_not_wait_for_a_stubborn_one_of_its_batch() {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let polite = s.chat("ccs-1", "c1", "");
    let stubborn = s.chat("ccs-2", "c2", "stubborn");
    s.idle_since(polite, 10_000_000);
    s.idle_since(stubborn, 10_000_000);
    let stubborn_pid = s.pids("ccs-2")["stubborn"];
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "4000"),
    ];
    let err = std::fs::File::create(s.path("once.err")).unwrap();
    let mut once = KillOnDrop(
        s.reap(&env)
            .arg("--once")
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap(),
    );
    // Its stdout, line by line, as it comes.
    let (tx, lines) = mpsc::channel::<String>();
    let stdout = once.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // Both tombstones are written right before the first signal: the batch is past its fence.
    assert!(
        wait_until(10.0, || s.tombstone("1").is_some()
            && s.tombstone("2").is_some()),
        "the batch did not get to its signals"
    );
    let t = Instant::now();
    let mut begin = KillOnDrop(
        s.reap(&env)
            .args(["turn", "begin", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut code = None;
    let answered = wait_until(3.5, || {
        code = begin.0.try_wait().unwrap().map(|st| st.code());
        code.is_some()
    });
    let took = t.elapsed();
    assert!(
        answered && took < Duration::from_millis(1500),
        "turn begin on the polite chat waited {took:?} for the stubborn one's grace"
    );
    assert_eq!(code, Some(Some(4)), "turn begin must say: respawn it");
    assert_eq!(s.tombstone("1").unwrap()["cid"], "c1");
    assert!(!s.has("ccs-1"));
    let polite_lines = s.audit_of("ccs-1");
    assert_eq!(polite_lines.len(), 1, "{polite_lines:?}");
    assert_eq!(polite_lines[0]["outcome"], "reaped", "{}", polite_lines[0]);
    assert_eq!(polite_lines[0]["kill"], 0, "{}", polite_lines[0]);
    // Meanwhile the stubborn one is still in its grace, and `--once` still running...
    assert!(alive(stubborn_pid), "the stubborn helper was killed early");
    assert!(s.audit_of("ccs-2").is_empty(), "{:?}", s.audit_of("ccs-2"));
    assert!(once.0.try_wait().unwrap().is_none(), "--once already ended");
    // ...yet the polite reap's line is printed already.
    let first = lines
        .recv_timeout(Duration::from_secs(2))
        .expect("--once printed nothing before its batch ended");
    assert!(first.starts_with("reaped ccs-1 "), "{first}");
    assert!(once.0.try_wait().unwrap().is_none(), "--once already ended");

    // The stubborn one ends after its grace, with a SIGKILL; then the summary.
    let mut rest = Vec::new();
    while let Ok(l) = lines.recv_timeout(Duration::from_secs(15)) {
        rest.push(l);
    }
    let st = once.0.wait().unwrap();
    assert_eq!(
        st.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(s.path("once.err")).unwrap_or_default()
    );
    assert!(rest[0].starts_with("reaped ccs-2 "), "{rest:?}");
    assert!(rest[0].contains("kill 1"), "{rest:?}");
    assert_eq!(
        rest.len(),
        2,
        "one line per reap, then the summary: {rest:?}"
    );
    assert!(rest[1].contains("2 reaped"), "{rest:?}");
    assert!(!alive(stubborn_pid));
    let line = &s.audit_of("ccs-2")[0];
    assert_eq!(line["outcome"], "reaped", "{line}");
    assert!(line["took_ms"].as_u64().unwrap() >= 4000, "{line}");
    assert_eq!(
        s.audit().len(),
        2,
        "one audit line per reap: {:?}",
        s.audit()
    );
}
