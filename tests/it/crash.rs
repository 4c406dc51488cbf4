//! No conversation lost when the tmux server dies (issue 24): the reaper's record of every chat's
//! last known conversation outlives the server, and each chat the server took with it is
//! tombstoned (`server-died`) for `spawn` to resume, on real tmux.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common::*;

/// Reaping on, nothing old enough to be reaped.
const ON: &[(&str, &str)] = &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)];

/// The three chats of most tests: id -> cid. Chat 3 has no `@ccs_cid`: its cid is only on the
/// command line its pane was started with.
const CHATS: [(&str, &str); 3] = [("1", "conv-one"), ("2", "conv-two"), ("3", "conv-three")];

/// A chat `ccs-<id>` running the fake claude on `--resume <cid>` in `<dir>/work-<id>`, with
/// `@ccs_cid` set when `opt` says so. Returns its `$N`.
fn chat_in(s: &Server, id: &str, cid: &str, opt: bool) -> u32 {
    let work = s.path(&format!("work-{id}"));
    std::fs::create_dir_all(&work).unwrap();
    let name = format!("ccs-{id}");
    let n = s.session(
        &name,
        &format!(
            "cd {} && FAKE_CLAUDE_PIDS={} exec {} --resume {cid}",
            work.display(),
            s.path(&format!("{name}.pids")).display(),
            fake_claude()
        ),
    );
    assert!(
        wait_until(10.0, || s.pids(&name).contains_key("claude")),
        "{name} did not start"
    );
    if opt {
        s.set(n, "@ccs_cid", cid);
    }
    n
}

fn three_chats(s: &Server) {
    for (id, cid) in CHATS {
        chat_in(s, id, cid, id != "3");
    }
}

fn known_path(s: &Server) -> PathBuf {
    s.studio().join("known.json")
}

/// The record: id -> entry.
fn known(s: &Server) -> HashMap<String, serde_json::Value> {
    known_in(&known_path(s))
}

fn known_in(p: &Path) -> HashMap<String, serde_json::Value> {
    let Ok(t) = std::fs::read_to_string(p) else {
        return HashMap::new();
    };
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    v["chats"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().ino()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Kill the tmux server with `sig`, wait until it is gone, and start a new one on the same
/// socket (with a session that is not a chat).
fn crash_and_restart(s: &Server, sig: Signal) -> i32 {
    let old = s.server_pid();
    signal(old, sig).unwrap();
    assert!(
        wait_until(10.0, || !alive(old)),
        "the tmux server {old} survived {sig:?}"
    );
    // The panes' processes go with the server (SIGHUP); those that do not are not ours to stop.
    s.session("other", "sleep 100000");
    let new = s.server_pid();
    assert_ne!(new, old);
    old
}

/// The `lost` lines of the audit log, by chat id.
fn lost_lines(s: &Server) -> Vec<serde_json::Value> {
    s.audit()
        .into_iter()
        .filter(|l| l["outcome"] == "lost")
        .collect()
}

/// `spawn <id>` of the fake claude, as a studio would; then the command the new session runs.
fn spawn(s: &Server, id: &str) -> String {
    let name = format!("ccs-{id}");
    let fc = fake_claude();
    let pids = s.path(&format!("{name}.respawned.pids"));
    s.run(
        &[
            "spawn",
            id,
            "--",
            "env",
            &format!("FAKE_CLAUDE_PIDS={}", pids.display()),
            &fc,
        ],
        ON,
    );
    assert!(s.has(&name), "spawn {id} made no session");
    s.ok(&[
        "list-panes",
        "-t",
        &format!("={name}:"),
        "-F",
        "#{pane_start_command}|#{pane_current_path}",
    ])
}

/// After the crash: each chat has its `server-died` tombstone and one `lost` line, `status`
/// lists it, `turn begin` says respawn, and `spawn` resumes it with its own cid and cwd; once
/// back, `status` no longer lists it.
fn each_chat_comes_back(s: &Server, sweep: impl Fn()) {
    for (id, cid) in CHATS {
        let t = s
            .tombstone(id)
            .unwrap_or_else(|| panic!("chat {id}: no tombstone"));
        assert_eq!(t["reason"], "server-died", "{t}");
        assert_eq!(t["cid"], cid, "{t}");
        assert_eq!(t["cwd"], path_str(&s.path(&format!("work-{id}"))), "{t}");
        assert_eq!(
            mode(&s.studio().join("sessions").join(format!("{id}.json"))),
            0o600
        );
    }
    let lost = lost_lines(s);
    let mut ids: Vec<&str> = lost.iter().map(|l| l["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["1", "2", "3"], "{lost:?}");
    for l in &lost {
        assert_eq!(l["reason"], "server-died", "{l}");
        assert!(l["pids"].as_array().unwrap().is_empty(), "{l}");
        assert_eq!(l["term"], 0, "{l}");
    }
    let st = s.status(ON);
    let mut listed: Vec<&str> = st["lost"]
        .as_array()
        .unwrap_or_else(|| panic!("no lost in {st}"))
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, ["1", "2", "3"], "{st}");
    assert!(s
        .run_any(&["status"], ON)
        .stdout
        .contains("ccs-2 lost with its tmux server"));

    for (id, cid) in CHATS {
        s.run_expect(RESPAWN, &["turn", "begin", id], ON);
        let shown = spawn(s, id);
        assert!(shown.contains(&format!("--resume {cid}")), "{id}: {shown}");
        assert!(
            shown.contains(&path_str(&s.path(&format!("work-{id}")))),
            "{id}: {shown}"
        );
    }
    // Back: no more listed as lost, the record follows the new sessions, no new lost line.
    sweep();
    let st = s.status(ON);
    assert_eq!(st["lost"].as_array().map(Vec::len), Some(0), "{st}");
    let k = known(s);
    for (id, cid) in CHATS {
        assert_eq!(k[id]["cid"], cid);
        assert!(k[id].get("lost").is_none(), "{id}: {}", k[id]);
    }
    assert_eq!(lost_lines(s).len(), 3);
    // The turn goes through: the tombstone is used up.
    for (id, _) in CHATS {
        s.run(&["turn", "begin", id], ON);
        s.run(&["turn", "end", id], ON);
        assert!(s.tombstone(id).is_none(), "{id}");
    }
}

fn cron_shape(sig: Signal) {
    let s = Server::new();
    three_chats(&s);
    s.once(DONE, 1000, &[]);
    let k = known(&s);
    assert_eq!(k.len(), 3, "{k:?}");
    assert_eq!(k["3"]["cid"], "conv-three", "the cid of a command line");
    assert_eq!(mode(&known_path(&s)), 0o600);
    // Nothing changed: not written again.
    let ino = inode(&known_path(&s));
    s.once(DONE, 1000, &[]);
    assert_eq!(
        inode(&known_path(&s)),
        ino,
        "rewritten though nothing changed"
    );

    crash_and_restart(&s, sig);
    let o = s.once(DONE, 1000, &[]);
    // Each lost chat is one line on stdout, as docs/commands.md shows it.
    let lost: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("lost ccs-"))
        .collect();
    assert_eq!(lost.len(), 3, "{}", o.stdout);
    assert!(
        lost.iter()
            .all(|l| l.contains(": server-died, 0 processes")),
        "{lost:?}"
    );
    // Another run finds nothing new to lose.
    s.once(DONE, 1000, &[]);
    each_chat_comes_back(&s, || {
        s.once(DONE, 1000, &[]);
    });
}

#[test]
fn with_only_once_runs_each_chat_killed_with_the_server_comes_back_with_its_cid() {
    cron_shape(Signal::KILL);
}

#[test]
fn a_segfaulting_server_loses_no_conversation() {
    cron_shape(Signal::SEGV);
}

#[test]
fn with_the_daemon_each_chat_comes_back_with_its_cid() {
    let s = Server::new();
    three_chats(&s);
    let port = crate::common::http::free_port();
    let addr = format!("127.0.0.1:{port}");
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_INTERVAL_MS", "200"),
        ("CCS_METRICS_ADDR", addr.as_str()),
    ];
    let _d = KillOnDrop(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // `events`, following the audit log from before the crash.
    let events_out = s.path("events.out");
    let _ev = KillOnDrop(
        s.reap(&[])
            .arg("events")
            .stdout(std::fs::File::create(&events_out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_until(15.0, || known(&s).len() == 3),
        "the daemon did not record the chats"
    );
    crash_and_restart(&s, Signal::KILL);
    assert!(
        wait_until(15.0, || CHATS
            .iter()
            .all(|(id, _)| s.tombstone(id).is_some())),
        "the daemon did not tombstone the chats"
    );
    let lost_events = || {
        std::fs::read_to_string(&events_out)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains(r#""outcome":"lost""#) && l.contains(r#""reason":"server-died""#)
            })
            .count()
    };
    assert!(
        wait_until(10.0, || lost_events() == 3),
        "events printed {} lost lines",
        lost_events()
    );
    let key = r#"ccs_reap_reaps_total{reason="server-died",outcome="lost"}"#;
    let metric = || {
        crate::common::http::get(port, "/metrics", std::time::Duration::from_secs(2))
            .and_then(|r| crate::common::http::samples(&r.body).get(key).copied())
    };
    assert!(
        wait_until(10.0, || metric() == Some(3.0)),
        "{key} = {:?}",
        metric()
    );
    let before = std::fs::read_to_string(known_path(&s)).unwrap();
    each_chat_comes_back(&s, || {
        // A few sweeps of the daemon.
        assert!(
            wait_until(10.0, || std::fs::read_to_string(known_path(&s)).unwrap()
                != before
                && known(&s).values().all(|e| e.get("lost").is_none())),
            "the daemon did not see the chats back"
        );
    });
}

#[test]
fn the_daemon_started_after_the_crash_tombstones_the_chats_of_the_dead_server() {
    let s = Server::new();
    three_chats(&s);
    s.once(DONE, 1000, &[]);
    crash_and_restart(&s, Signal::KILL);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_INTERVAL_MS", "200"),
    ];
    let _d = KillOnDrop(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_until(15.0, || CHATS
            .iter()
            .all(|(id, _)| s.tombstone(id).is_some())),
        "the daemon did not tombstone the chats at start-up"
    );
    assert!(wait_until(5.0, || lost_lines(&s).len() == 3));
}

#[test]
fn a_chat_the_studio_killed_is_not_resurrected() {
    let s = Server::new();
    three_chats(&s);
    s.once(DONE, 1000, &[]);
    // The studio closes chat 2 on purpose; the server lives on.
    s.ok(&["kill-session", "-t", "=ccs-2"]);
    s.once(DONE, 1000, &[]);
    assert!(s.tombstone("2").is_none());
    assert!(!known(&s).contains_key("2"), "{:?}", known(&s));
    s.run_expect(RESPAWN, &["turn", "begin", "2"], ON);
    crash_and_restart(&s, Signal::KILL);
    s.once(DONE, 1000, &[]);
    assert!(s.tombstone("1").is_some() && s.tombstone("3").is_some());
    assert!(s.tombstone("2").is_none(), "a killed chat was resurrected");
    let lost: Vec<String> = lost_lines(&s)
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!lost.contains(&"2".to_string()), "{lost:?}");
    let o = spawn(&s, "2");
    assert!(!o.contains("--resume"), "{o}");
}

#[test]
fn a_reaped_chat_leaves_the_record_and_keeps_its_own_tombstone() {
    let s = Server::new();
    three_chats(&s);
    s.once(DONE, 1000, &[]);
    let sid = |name: &str| -> u32 {
        s.ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("={name}:"),
            "#{session_id}",
        ])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap()
    };
    // Chat 1 reaped, and a sweep after it: out of the record.
    s.idle_since(sid("ccs-1"), 10_000_000);
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-1"));
    s.once(DONE, 1000, &[]);
    assert!(!known(&s).contains_key("1"), "{:?}", known(&s));
    // Chat 2 reaped right before the crash: still in the record, its tombstone already there.
    s.idle_since(sid("ccs-2"), 10_000_000);
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-2"));
    crash_and_restart(&s, Signal::KILL);
    s.once(DONE, 1000, &[]);
    for id in ["1", "2"] {
        assert_eq!(s.tombstone(id).unwrap()["reason"], "idle", "{id}");
    }
    assert_eq!(s.tombstone("3").unwrap()["reason"], "server-died");
    let lost: Vec<String> = lost_lines(&s)
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(lost, ["3"]);
    let st = s.status(ON);
    assert_eq!(st["lost"].as_array().unwrap().len(), 1, "{st}");
    assert!(!known(&s).contains_key("2"));
}

#[test]
fn a_failed_listing_is_not_a_dead_server() {
    let s = Server::new();
    three_chats(&s);
    s.once(DONE, 1000, &[]);
    // A tmux that fails (not "no server"): nothing is concluded.
    let w = s.path("bin");
    std::fs::create_dir_all(&w).unwrap();
    let tmux = w.join("tmux");
    std::fs::write(&tmux, "#!/bin/sh\necho 'server busy' >&2\nexit 1\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmux, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:{}", w.display(), std::env::var("PATH").unwrap());
    s.once(DONE_OR_FAILED, 1000, &[("PATH", path.as_str())]);
    assert!(CHATS.iter().all(|(id, _)| s.tombstone(id).is_none()));
    assert!(lost_lines(&s).is_empty());
    assert_eq!(known(&s).len(), 3);
}

#[test]
fn two_studios_on_one_state_dir_keep_their_own() {
    let a = Server::new();
    let b = Server::new();
    let shared = a.state_dir();
    let sd = path_str(&shared);
    chat_in(&a, "1", "a-one", true);
    chat_in(&b, "1", "b-one", true);
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = vec![("CCS_REAP_STATE_DIR", sd.as_str())];
        v.extend_from_slice(extra);
        v
    };
    a.once(DONE, 1000, &with(&[]));
    b.once(DONE, 1000, &with(&[]));
    assert_eq!(
        known_in(&a.studio_in(&shared).join("known.json"))["1"]["cid"],
        "a-one"
    );
    assert_eq!(
        known_in(&b.studio_in(&shared).join("known.json"))["1"]["cid"],
        "b-one"
    );
    crash_and_restart(&a, Signal::KILL);
    crash_and_restart(&b, Signal::KILL);
    a.once(DONE, 1000, &with(&[]));
    b.once(DONE, 1000, &with(&[]));
    for (s, cid) in [(&a, "a-one"), (&b, "b-one")] {
        let t: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(s.studio_in(&shared).join("sessions").join("1.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(t["cid"], cid);
        s.run(&["spawn", "1", "--", &fake_claude()], &with(&[]));
        let shown = s.ok(&["list-panes", "-t", "=ccs-1:", "-F", "#{pane_start_command}"]);
        assert!(shown.contains(&format!("--resume {cid}")), "{shown}");
    }
}

#[test]
fn a_chat_spawned_before_any_sweep_saw_the_crash_still_resumes() {
    let s = Server::new();
    three_chats(&s);
    s.once(DONE, 1000, &[]);
    crash_and_restart(&s, Signal::KILL);
    // The studio's next message comes before the next `--once`: no tombstone yet.
    assert!(s.tombstone("1").is_none());
    s.run_expect(RESPAWN, &["turn", "begin", "1"], ON);
    let shown = spawn(&s, "1");
    assert!(shown.contains("--resume conv-one"), "{shown}");
    assert!(shown.contains(&path_str(&s.path("work-1"))), "{shown}");
    // The next sweep: 1 is back on its conversation (no tombstone needed), 2 and 3 are lost;
    // one line each.
    s.once(DONE, 1000, &[]);
    assert!(s.tombstone("1").is_none());
    assert!(s.tombstone("2").is_some() && s.tombstone("3").is_some());
    let lost = lost_lines(&s);
    assert_eq!(lost.len(), 3, "{lost:?}");
    let one: Vec<_> = lost.iter().filter(|l| l["id"] == "1").collect();
    assert_eq!(one.len(), 1);
    assert!(
        one[0]["error"]
            .as_str()
            .unwrap()
            .contains("back on its conversation"),
        "{}",
        one[0]
    );
    let st = s.status(ON);
    let listed: Vec<&str> = st["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(!listed.contains(&"1"), "{st}");
    // A chat the studio killed and respawns at once, on a live server, is not resumed.
    s.once(DONE, 1000, &[]);
    s.ok(&["kill-session", "-t", "=ccs-1"]);
    let shown = spawn(&s, "1");
    assert!(!shown.contains("--resume"), "{shown}");
}
