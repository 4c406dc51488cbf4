//! The foundation on a real tmux: which sessions a sweep reaps, keeps, stamps, and never touches.

use crate::common::*;

/// SIGTERM to SIGKILL, in the sweeps of this file.
const GRACE: u64 = 2000;

#[test]
fn idle_session_is_reaped_with_tombstone_and_audit_line() {
    let s = Server::new();
    let n = s.chat("ccs-1", "conv-1", "plain");
    s.idle_since(n, 700_000);
    let pids = s.pids("ccs-1");
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-1"), "{}", o.stderr);
    for (kind, pid) in &pids {
        assert!(!alive(*pid), "{kind} {pid} survived");
    }
    let t = s.tombstone("1").expect("tombstone");
    assert_eq!(t["cid"], "conv-1");
    assert_eq!(t["reason"], "idle");
    let a = s.audit();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["outcome"], "reaped");
    assert_eq!(a[0]["session"], "ccs-1");
    assert_eq!(a[0]["tmux_id"], format!("${n}"));
    assert!(a[0]["idle_ms"].as_u64().unwrap() >= 700_000);
    assert!(o.stdout.contains("reaped ccs-1"), "{}", o.stdout);
}

#[test]
fn young_session_is_kept() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c", "");
    s.idle_since(n, 599_000);
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1"));
    assert!(s.audit().is_empty());
}

#[test]
fn busy_session_is_kept() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c", "");
    s.idle_since(n, 10_000_000);
    s.set(n, "@ccs_turn", &now_ms().to_string());
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1"));
}

#[test]
fn control_mode_client_keeps_the_session_and_refreshes_its_clock() {
    let mut s = Server::new();
    let n = s.chat("ccs-1", "c", "");
    s.idle_since(n, 10_000_000);
    s.attach_control("ccs-1");
    let before = now_ms();
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1"));
    let stamp: i64 = s.show(n, "@ccs_idle").unwrap().parse().unwrap();
    assert!(
        stamp >= before,
        "idle clock not refreshed: {stamp} < {before}"
    );
    // Detaching hands over a fresh clock: the next sweep keeps it.
    s.detach_all();
    assert!(wait_until(5.0, || !s.attached("ccs-1")));
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1"));
}

#[test]
fn first_sight_stamps_and_keeps() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c", "");
    assert_eq!(s.show(n, "@ccs_idle"), None);
    // Even with a limit of 1 ms nothing is killed on first sight.
    s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", "1")]);
    assert!(s.has("ccs-1"));
    assert!(s.show(n, "@ccs_idle").is_some());
    // A garbage stamp is restarted, not trusted.
    s.set(n, "@ccs_idle", "yesterday");
    s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", "1")]);
    assert!(s.has("ccs-1"));
    assert!(s.show(n, "@ccs_idle").unwrap().parse::<i64>().is_ok());
}

#[test]
fn foreign_names_are_never_touched() {
    let s = Server::new();
    let names = ["other", "ccs-", "xccs-1", "ccs-a b", "CCS-1"];
    let ids: Vec<u32> = names
        .iter()
        .map(|nm| s.session(nm, "sleep 100000"))
        .collect();
    for n in &ids {
        s.idle_since(*n, 10_000_000);
        s.set(*n, "@ccs_cid", "c");
    }
    s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", "1"),
            ("CCS_ENGINE_REAP_WITHOUT_CID", "1"),
        ],
    );
    let mut want: Vec<String> = names.iter().map(|x| x.to_string()).collect();
    want.sort();
    assert_eq!(s.names(), want);
    // And nothing was stamped on them: the idle stamps are what we set.
    for n in &ids {
        let v: i64 = s.show(*n, "@ccs_idle").unwrap().parse().unwrap();
        assert!(now_ms() - v >= 10_000_000);
    }
}

#[test]
fn prefix_targets_never_hit_a_longer_name() {
    // tmux resolves -t ccs-1 to ccs-10 by prefix; sessions are addressed by $id.
    let s = Server::new();
    let n10 = s.chat("ccs-10", "c10", "");
    let n1 = s.chat("ccs-1", "c1", "");
    s.idle_since(n1, 10_000_000);
    s.idle_since(n10, 10_000_000);
    s.set(n10, "@ccs_turn", &now_ms().to_string());
    s.once(DONE, GRACE, &[]);
    assert_eq!(s.names(), vec!["ccs-10".to_string()]);
    assert!(s.tombstone("1").is_some());
    assert!(s.tombstone("10").is_none());
}

#[test]
fn dry_run_writes_nothing_and_kills_nothing() {
    let s = Server::new();
    let fresh = s.chat("ccs-2", "c2", "");
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 10_000_000);
    let o = s.sweep(DONE, &["--dry-run"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(o.stdout.contains("would reap ccs-1"), "{}", o.stdout);
    assert!(s.has("ccs-1") && s.has("ccs-2"));
    assert_eq!(
        s.show(fresh, "@ccs_idle"),
        None,
        "dry run stamped a session"
    );
    assert!(!s.state_dir().join("reaped.jsonl").exists());
    // --json gives the decisions.
    let o = s.sweep(
        DONE,
        &["--dry-run", "--json"],
        &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)],
    );
    let j = o.json();
    let states: Vec<&str> = j["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["state"].as_str().unwrap())
        .collect();
    assert!(
        states.contains(&"expired") && states.contains(&"new"),
        "{states:?}"
    );
}

#[test]
fn cid_is_read_from_the_command_line_when_the_option_is_unset() {
    let s = Server::new();
    // Under the default shell the pane runs `sh -c '<command>'`, and claude is its child. The
    // command tmux recorded reads `from-argv-7;` (with the shell's `;`), no id: the id comes from
    // the running claude's command line, so the sweep starts once that claude runs (on tmux
    // 3.1c, about one sweep in 20 came before it).
    let pids = s.path("ccs-7.pids");
    let n = s.session(
        "ccs-7",
        &format!(
            "FAKE_CLAUDE_PIDS={} {} --session-id from-argv-7; true",
            pids.display(),
            fake_claude()
        ),
    );
    assert!(
        wait_until(10.0, || s.pids("ccs-7").contains_key("claude")),
        "the fake claude did not start"
    );
    s.idle_since(n, 10_000_000);
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-7"), "{}", o.stderr);
    assert_eq!(s.tombstone("7").unwrap()["cid"], "from-argv-7");
}

#[test]
fn unknown_cid_is_kept_unless_overridden() {
    let s = Server::new();
    // A claude that names no conversation (its turns seen by its status file).
    let pids = s.path("ccs-1.pids");
    let cmd = format!("FAKE_CLAUDE_PIDS={} exec {}", pids.display(), fake_claude());
    let n = s.session("ccs-1", &cmd);
    assert!(wait_until(10.0, || s.pids("ccs-1").len() == 1));
    s.idle_since(n, 10_000_000);
    s.once(DONE, GRACE, &[]);
    assert!(
        s.has("ccs-1"),
        "reaped a session whose history could not be resumed"
    );
    s.once(DONE, GRACE, &[("CCS_ENGINE_REAP_WITHOUT_CID", "1")]);
    assert!(!s.has("ccs-1"));
}

#[test]
fn activity_files_mark_busy_and_a_bad_file_keeps_everything() {
    let s = Server::new();
    let n1 = s.chat("ccs-1", "c1", "");
    let n2 = s.chat("ccs-2", "c2", "");
    let n3 = s.chat("ccs-3", "c3", "");
    for n in [n1, n2, n3] {
        s.idle_since(n, 10_000_000);
    }
    let f = s.path("activity.json");
    let fs = path_str(&f);
    // Missing: everything kept, a warning names the file, and the sweep fails.
    let o = s.once(FAILED, GRACE, &[("CCS_ACTIVITY_FILES", &fs)]);
    assert!(o.stderr.contains(&fs), "{}", o.stderr);
    assert_eq!(s.names().len(), 3);
    // Malformed: the same.
    std::fs::write(&f, "{\"activeTasks\": [").unwrap();
    let o = s.once(FAILED, GRACE, &[("CCS_ACTIVITY_FILES", &fs)]);
    assert!(o.stderr.contains("malformed"), "{}", o.stderr);
    assert_eq!(s.names().len(), 3);
    // Valid: 1 busy by id string, 2 busy by object, 3 finished (terminal status): only 3 goes.
    std::fs::write(&f, r#"{"activeTasks": ["1"], "kanban": [{"sessionId": "2", "status": "running"}, {"id": "3", "status": "done"}]}"#).unwrap();
    s.once(DONE, GRACE, &[("CCS_ACTIVITY_FILES", &fs)]);
    assert_eq!(s.names(), vec!["ccs-1".to_string(), "ccs-2".to_string()]);
}

#[test]
fn disabled_changes_nothing() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c", "");
    s.idle_since(n, 10_000_000);
    let stamp = s.show(n, "@ccs_idle");
    for v in [None, Some(""), Some("0")] {
        let env: Vec<(&str, &str)> = v
            .map(|v| vec![("CCS_ENGINE_IDLE_KILL_MS", v)])
            .unwrap_or_default();
        for args in [&["--once"][..], &[][..]] {
            let o = s.run(args, &env);
            assert!(o.stderr.contains("disabled"), "{}", o.stderr);
        }
    }
    assert!(s.has("ccs-1"));
    assert_eq!(s.show(n, "@ccs_idle"), stamp);
}

#[test]
fn garbage_configuration_exits_2_naming_the_variable_and_touches_nothing() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c", "");
    s.idle_since(n, 10_000_000);
    let fresh = s.chat("ccs-2", "c", "");
    for (var, val) in [
        ("CCS_ENGINE_IDLE_KILL_MS", "ten minutes"),
        ("CCS_REAP_INTERVAL_MS", "-1"),
        ("CCS_REAP_GRACE_MS", "5 sec"),
        ("CCS_LOG", "info,=[x"),
        ("CCS_ENGINE_REAP_WITHOUT_CID", "perhaps"),
    ] {
        let o = s.sweep(CONFIG, &[], &[("CCS_ENGINE_IDLE_KILL_MS", "1"), (var, val)]);
        assert!(
            o.stderr.contains(var) && o.stderr.contains(val),
            "{}",
            o.stderr
        );
    }
    assert!(s.has("ccs-1"));
    assert_eq!(s.show(fresh, "@ccs_idle"), None);
}

#[test]
fn no_server_is_an_empty_world() {
    let s = Server::new();
    let o = s.sweep(DONE, &["--json"], &[("CCS_ENGINE_IDLE_KILL_MS", "1")]);
    assert_eq!(o.json()["sessions"].as_array().unwrap().len(), 0);
    s.run(&["status"], &[]);
}

#[test]
fn status_shows_every_session() {
    let mut s = Server::new();
    let n1 = s.chat("ccs-1", "conv-a", "plain");
    let n2 = s.chat("ccs-2", "conv-b", "");
    s.idle_since(n1, 1000);
    s.set(n2, "@ccs_turn", &now_ms().to_string());
    s.attach_control("ccs-2");
    let o = s.run(&["status"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(
        o.stdout.contains("ccs-1") && o.stdout.contains("conv-a") && o.stdout.contains("busy"),
        "{}",
        o.stdout
    );
    let by = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]));
    assert_eq!(by["ccs-1"]["state"], "idle");
    assert!(by["ccs-1"]["reap_at"]
        .as_str()
        .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()));
    assert_eq!(by["ccs-1"]["cid"], "conv-a");
    assert!(by["ccs-1"]["rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(by["ccs-2"]["state"], "busy");
    assert_eq!(by["ccs-2"]["viewer_list"][0]["control_mode"], true);
    // status writes nothing.
    assert_eq!(s.show(n2, "@ccs_idle"), None);
}

#[test]
fn daemon_reaps_on_schedule_stops_on_sigterm_and_holds_the_lock() {
    let s = Server::new();
    // A foreign session keeps the server up (a server with no session exits, and a new-session
    // racing with that exit can be lost with it).
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c", "");
    s.idle_since(n, 10_000_000);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_INTERVAL_MS", "100"),
    ];
    let log = std::fs::File::create(s.path("daemon.log")).unwrap();
    let mut d = KillOnDrop(
        s.reap(&env)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_until(10.0, || !s.has("ccs-1")),
        "the daemon did not reap"
    );
    // A second reaper on the same socket exits 3.
    let o = s.run_any(&[], &env);
    assert_eq!(o.code, 3, "{}", o.stderr);
    // A session that appears later is stamped by a later sweep.
    let m = s.chat("ccs-2", "c", "");
    assert!(wait_until(10.0, || s.show(m, "@ccs_idle").is_some()));
    signal(d.0.id() as i32, Signal::TERM).unwrap();
    let status = d.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(s.has("ccs-2"));
}

/// A studio that wires nothing (issue 43.1): its claude names its conversation on the command
/// line, no hook, no `turn` command, no activity file. Claude Code's own status file is then what
/// tells a turn: `busy` keeps the chat however long it has sat "idle" by the clock, `idle` lets
/// it be reaped; an agent with no status file at all is `unseen` and kept (43.2), unless
/// `CCS_ENGINE_UNSEEN_TURNS=output`.
#[test]
fn a_chat_wired_by_nothing_is_kept_while_its_status_file_says_busy() {
    let s = Server::new();
    let start = |name: &str, status: &str, cid: &str| {
        let pids = s.path(&format!("{name}.pids"));
        let cmd = format!(
            "FAKE_CLAUDE_STATUS={status} FAKE_CLAUDE_PIDS={} exec {} --session-id {cid}",
            pids.display(),
            fake_claude()
        );
        let n = s.session(name, &cmd);
        assert!(wait_until(10.0, || !s.pids(name).is_empty()));
        s.idle_since(n, 10_000_000);
        n
    };
    start("ccs-busy", "busy", "cid-busy");
    start("ccs-wait", "waiting", "cid-wait");
    start("ccs-idle", "idle", "cid-idle");
    // No status file: a claude-like launcher (its command line names the conversation) whose
    // process then keeps none.
    let blind = s.path("blind-claude");
    std::fs::write(&blind, "#!/bin/sh\nexec sleep 100000\n").unwrap();
    std::fs::set_permissions(&blind, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let n = s.session(
        "ccs-blind",
        &format!("exec {} --session-id cid-blind", blind.display()),
    );
    s.idle_since(n, 10_000_000);
    let j = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    let by = by_name(&j);
    assert_eq!(by["ccs-busy"]["state"], "busy", "{j}");
    assert!(
        by["ccs-busy"]["why"]
            .as_str()
            .unwrap()
            .contains("status file"),
        "{j}"
    );
    assert_eq!(by["ccs-wait"]["state"], "busy", "{j}");
    assert_eq!(by["ccs-idle"]["state"], "expired", "{j}");
    assert_eq!(by["ccs-blind"]["state"], "unseen", "{j}");
    assert_eq!(by["ccs-blind"]["cid"], "cid-blind", "{j}");

    let o = s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-busy"), "a busy chat was reaped: {}", o.stderr);
    assert!(
        s.has("ccs-wait"),
        "a chat at a dialog was reaped: {}",
        o.stderr
    );
    assert!(!s.has("ccs-idle"), "{}", o.stderr);
    assert_eq!(s.tombstone("idle").unwrap()["cid"], "cid-idle");
    // No audit line for the busy ones: they were never tried (no mark, no abort).
    assert!(s.audit_of("ccs-busy").is_empty());
    assert!(
        s.has("ccs-blind"),
        "an unseen chat was reaped: {}",
        o.stderr
    );
    // Opted in: judged by its pane's own output, none since it started.
    s.ok(&[
        "set-option",
        "-t",
        &format!("${n}:"),
        "@ccs_idle_kill_ms",
        "1",
    ]);
    assert!(wait_until(5.0, || {
        s.once(DONE, GRACE, &[("CCS_ENGINE_UNSEEN_TURNS", "output")]);
        !s.has("ccs-blind")
    }));
    assert!(s.has("ccs-busy"));
}

/// A studio that keeps no spare session: its tmux server exits with its last chat. Reaping that
/// chat is not an outage (issue 43.7): the daemon's `/healthz` stays 200 and it never warns of
/// a missing server, `status` calls the socket `empty` and lists the chat asleep with its real
/// reason (not `server-died`), and `--once` says so at INFO, no warning.
#[test]
fn the_last_reap_empties_the_server_and_that_is_no_outage() {
    use crate::common::http::{free_port, get};
    use std::time::Duration;
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = s.path("daemon.log");
    let _d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "500"),
            ("CCS_REAP_INTERVAL_MS", "100"),
            ("CCS_METRICS_ADDR", addr.as_str()),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    let daemon_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(wait_until(20.0, || !s.has("ccs-1")), "{}", daemon_log());
    // The server went with its last session; the daemon sweeps on.
    assert!(wait_until(10.0, || !s.sock.exists()
        || s.tmux(&["list-sessions"]).status.code() != Some(0)));
    assert!(
        wait_until(10.0, || daemon_log()
            .contains("exited after its last chat was reaped")),
        "{}",
        daemon_log()
    );
    // Several sweeps later: healthy, and no word of a missing server.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(800) {
        let h = get(port, "/healthz", Duration::from_secs(2)).expect("healthz answers");
        assert!(
            h.status.contains(" 200"),
            "{} {}\n{}",
            h.status,
            h.body,
            daemon_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !daemon_log().contains("nothing is reaped until one listens"),
        "{}",
        daemon_log()
    );
    // `status`: empty, the chat asleep with its real reason.
    let j = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert_eq!(j["tmux_server_up"], false, "{j}");
    assert_eq!(j["tmux_server_empty"], true, "{j}");
    assert_eq!(j["lost"].as_array().map(Vec::len), Some(0), "{j}");
    let asleep = j["asleep"].as_array().unwrap();
    assert_eq!(asleep.len(), 1, "{j}");
    assert_eq!(asleep[0]["reason"], "idle", "{j}");
    let o = s.once(DONE, 500, &[]);
    assert!(o.stderr.contains("(empty)"), "{}", o.stderr);
    assert!(
        !o.stderr.contains("warning: no tmux server"),
        "{}",
        o.stderr
    );
    // A server that was never there stays loud.
    let other = Server::new();
    let o = other.once(DONE, 500, &[]);
    assert!(o.stderr.contains("warning: no tmux server"), "{}", o.stderr);
}

/// A studio that tags each chat's session environment (`CCS_CFG`) and kills a session whose tag
/// is missing gets back, from `spawn`, a session with its own environment as it left it (issue
/// 43.5): the tombstone keeps it (tmux's `TMUX*` and ccs-reap's own aside), `spawn` (and
/// `resume`) sets it on the new session in the call that creates it.
#[test]
fn a_resumed_chat_keeps_its_studios_session_environment() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-8", "conv-8", "");
    for (k, v) in [("CCS_CFG", "h1 #{x} $HOME;x"), ("STUDIO_CHAT", "8")] {
        s.ok(&["set-environment", "-t", &format!("${n}"), k, v]);
    }
    // And its own `@` options, as a studio keeps a chat's title there.
    s.set(n, "@studio_title", "Chat \"eight\" #{x} $HOME");
    s.idle_since(n, 10_000_000);
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-8"), "{}", o.stderr);
    let t = s.tombstone("8").unwrap();
    assert_eq!(t["env"]["CCS_CFG"], "h1 #{x} $HOME;x", "{t}");
    assert_eq!(t["env"]["STUDIO_CHAT"], "8", "{t}");
    assert!(
        t["env"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("TMUX") && !k.starts_with("CCS_REAP_")),
        "{t}"
    );
    s.run(&["spawn", "8", "--", &fake_claude()], &[]);
    assert!(s.has("ccs-8"));
    let env = s.ok(&["show-environment", "-t", "=ccs-8"]);
    assert!(env.lines().any(|l| l == "CCS_CFG=h1 #{x} $HOME;x"), "{env}");
    assert!(env.lines().any(|l| l == "STUDIO_CHAT=8"), "{env}");
    assert_eq!(
        t["options"]["@studio_title"], "Chat \"eight\" #{x} $HOME",
        "{t}"
    );
    assert!(t["options"].get("@ccs_cid").is_none(), "{t}");
    let title = s.ok(&["show-options", "-v", "-t", "=ccs-8:", "@studio_title"]);
    assert_eq!(title.trim_end(), "Chat \"eight\" #{x} $HOME");
}

/// One conversation, one live agent (issue 43.6): `spawn` refuses, naming the session and its
/// pid, a conversation that a live agent of another session holds; `status` and `doctor` flag two
/// sessions that hold one conversation (a studio's own respawn beside a `resume`).
#[test]
fn one_conversation_is_held_by_one_live_agent() {
    let s = Server::new();
    let a = s.chat("ccs-a", "conv-1", "");
    let pane = s.pane_pid(a);
    let o = s.run_any(
        &["spawn", "b", "--cid", "conv-1", "--", &fake_claude()],
        &[],
    );
    assert_ne!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("ccs-a") && o.stderr.contains(&pane.to_string()),
        "{}",
        o.stderr
    );
    assert!(!s.has("ccs-b"));
    // Another conversation: fine.
    s.run(
        &["spawn", "c", "--cid", "conv-2", "--", &fake_claude()],
        &[],
    );
    assert!(s.has("ccs-c"));
    // A second session on conv-1 that no ccs-reap started: flagged.
    s.chat("ccs-d", "conv-1", "");
    let o = s.run(&["status"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(
        o.stdout
            .contains("two live agents hold conversation conv-1 (ccs-a, ccs-d)"),
        "{}",
        o.stdout
    );
    let o = s.run_any(&["doctor"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(
        o.stdout
            .contains("conversation conv-1 is held by ccs-a and ccs-d"),
        "{}{}",
        o.stdout,
        o.stderr
    );
    assert_ne!(o.code, 0, "doctor says healthy: {}", o.stdout);
}

/// A studio that reports turns with `turn begin`/`turn end` but names the conversation only on
/// its agent's command line (no `@ccs_cid`), its agent keeping no status file: its turns are seen
/// (`@ccs_turns`, written once by the `turn` commands), so the chat is reaped when idle, not kept
/// as `unseen` (the demo's shape).
#[test]
fn turns_reported_by_turn_commands_are_seen_whatever_the_cid_came_from() {
    let s = Server::new();
    let blind = s.path("blind-claude");
    std::fs::write(&blind, "#!/bin/sh\nexec sleep 100000\n").unwrap();
    std::fs::set_permissions(&blind, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let n = s.session(
        "ccs-t",
        &format!("exec {} --session-id cid-t", blind.display()),
    );
    let j = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert_eq!(by_name(&j)["ccs-t"]["state"], "new", "{j}");
    s.idle_since(n, 10_000_000);
    let j = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert_eq!(by_name(&j)["ccs-t"]["state"], "unseen", "{j}");
    s.run(&["turn", "begin", "t"], &[]);
    s.run(&["turn", "end", "t"], &[]);
    assert_eq!(s.show(n, "@ccs_turns").as_deref(), Some("1"));
    s.idle_since(n, 10_000_000);
    let o = s.once(DONE, GRACE, &[]);
    assert!(!s.has("ccs-t"), "{}", o.stderr);
    assert_eq!(s.tombstone("t").unwrap()["cid"], "cid-t");
}
