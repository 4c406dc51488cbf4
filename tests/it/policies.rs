//! Issue 6 on a real tmux: stuck turns, viewers that never leave, exited panes, and how every
//! session that ends is classified (`stopped`, `completed`, `failed`).

use crate::common::*;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A limit no test session ever reaches: reaping is on, the idle rule takes nothing young.
const FAR: &str = "86400000";

/// The one audit line of `name`, which must say it was reaped.
fn reaped_line(s: &Server, name: &str, o: &Out) -> serde_json::Value {
    let a = s.audit_of(name);
    assert_eq!(
        a.len(),
        1,
        "{name}: expected one audit line, got {a:?}\n{}",
        o.stderr
    );
    assert_eq!(a[0]["outcome"], "reaped", "{name}: {:?}", a[0]);
    a[0].clone()
}

// ---------------------------------------------------------------------------------------------
// Stuck turns
// ---------------------------------------------------------------------------------------------

#[test]
fn stuck_turn_by_wall_clock_is_reported_and_reaped_only_when_allowed() {
    let s = Server::new();
    let stuck = s.chat("ccs-1", "conv-stuck", "plain,daemon");
    s.idle_since(stuck, 10_000);
    // The end hook never fired: a turn that began an hour ago.
    s.set(stuck, "@ccs_turn", &(now_ms() - 3_600_000).to_string());
    // A healthy turn that began just now.
    let busy = s.chat("ccs-2", "conv-busy", "");
    s.idle_since(busy, 10_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    let pids = s.pids("ccs-1");

    let base = [
        ("CCS_ENGINE_IDLE_KILL_MS", FAR),
        ("CCS_ENGINE_STUCK_WALL_MS", "60000"),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    let by = by_name(&s.status(&base));
    assert_eq!(by["ccs-1"]["state"], "stuck", "{:?}", by["ccs-1"]);
    assert_eq!(by["ccs-1"]["action"], "keep");
    assert_eq!(by["ccs-2"]["state"], "busy", "{:?}", by["ccs-2"]);

    // Reported, not reaped, without CCS_ENGINE_REAP_STUCK.
    let o = s.sweep(DONE, &[], &base);
    assert!(s.has("ccs-1") && s.has("ccs-2"), "{}", o.stderr);
    assert!(s.audit().is_empty(), "{:?}", s.audit());
    s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", FAR),
            ("CCS_ENGINE_STUCK_WALL_MS", "60000"),
            ("CCS_ENGINE_REAP_STUCK", "0"),
        ],
    );
    assert!(
        s.has("ccs-1"),
        "reaped a stuck turn with CCS_ENGINE_REAP_STUCK=0"
    );

    // With it: the stuck one goes (reason stuck, stopped by us), the healthy turn stays.
    let mut env = base.to_vec();
    env.push(("CCS_ENGINE_REAP_STUCK", "1"));
    let o = s.sweep(DONE, &[], &env);
    assert!(!s.has("ccs-1"), "stuck turn not reaped: {}", o.stderr);
    assert!(s.has("ccs-2"), "a healthy turn was reaped: {}", o.stderr);
    let l = reaped_line(&s, "ccs-1", &o);
    assert_eq!(l["reason"], "stuck");
    assert_eq!(l["ended"], "stopped");
    assert_eq!(l["cid"], "conv-stuck");
    for (kind, pid) in &pids {
        assert!(!alive(*pid), "{kind} {pid} survived the stuck reap");
    }
    let t = s.tombstone("1").expect("tombstone");
    assert_eq!(t["cid"], "conv-stuck");
    assert_eq!(t["reason"], "stuck");
}

#[test]
fn stuck_turn_by_silence_follows_window_activity() {
    let s = Server::new();
    // A pane that prints nothing during its "turn".
    let silent = s.session("ccs-1", "sleep 100000");
    // A pane that prints all the time: a healthy turn, however long.
    let chatty = s.session("ccs-2", "while :; do echo tick; sleep 0.1; done");
    for (n, cid) in [(silent, "c-silent"), (chatty, "c-chatty")] {
        s.set(n, "@ccs_cid", cid);
        s.idle_since(n, 10_000);
        s.set(n, "@ccs_turn", &(now_ms() - 600_000).to_string());
    }
    let base = [
        ("CCS_ENGINE_IDLE_KILL_MS", FAR),
        ("CCS_ENGINE_STUCK_IDLE_MS", "2000"),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    // window_activity has one-second resolution: the silent pane is stuck within ~2-3 s.
    let mut last = None;
    assert!(
        wait_until(10.0, || {
            let by = by_name(&s.status(&base));
            let ok = by["ccs-1"]["state"] == "stuck";
            last = Some(by);
            ok
        }),
        "the silent pane never became stuck: {last:?}"
    );
    let by = by_name(&s.status(&base));
    assert_eq!(by["ccs-1"]["state"], "stuck", "{:?}", by["ccs-1"]);
    assert_eq!(
        by["ccs-2"]["state"], "busy",
        "a pane that prints was judged stuck: {:?}",
        by["ccs-2"]
    );

    // Not reaped without CCS_ENGINE_REAP_STUCK.
    s.sweep(DONE, &[], &base);
    assert!(s.has("ccs-1"));

    let mut env = base.to_vec();
    env.push(("CCS_ENGINE_REAP_STUCK", "1"));
    let o = s.sweep(DONE, &[], &env);
    assert!(
        !s.has("ccs-1"),
        "silent stuck turn not reaped: {}",
        o.stderr
    );
    assert!(s.has("ccs-2"), "a printing turn was reaped: {}", o.stderr);
    let l = reaped_line(&s, "ccs-1", &o);
    assert_eq!(l["reason"], "stuck");
    assert_eq!(l["cid"], "c-silent");
}

#[test]
fn short_stuck_idle_limit_warns_at_start_up() {
    let s = Server::new();
    s.session("ccs-1", "sleep 100000");
    for args in [&["status"][..], &["--once"][..]] {
        let o = s.run(
            args,
            &[
                ("CCS_ENGINE_IDLE_KILL_MS", FAR),
                ("CCS_ENGINE_STUCK_IDLE_MS", "60000"),
            ],
        );
        let warn = o
            .stderr
            .lines()
            .find(|l| l.contains("CCS_ENGINE_STUCK_IDLE_MS"))
            .unwrap_or_else(|| panic!("{args:?}: no start-up warning:\n{}", o.stderr));
        assert!(warn.contains("WARN"), "{warn}");
        assert!(warn.contains("compaction"), "{warn}");
    }
    // At three minutes or more: no warning.
    let o = s.run(
        &["status"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", FAR),
            ("CCS_ENGINE_STUCK_IDLE_MS", "180000"),
        ],
    );
    assert!(
        !o.stderr.contains("CCS_ENGINE_STUCK_IDLE_MS"),
        "warned at 3 minutes: {}",
        o.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// Viewers that never leave
// ---------------------------------------------------------------------------------------------

/// A control-mode client whose parent is gone: started from a subshell that exits at once, so the
/// client is reparented (to pid 1 here). Its stdin is a `sleep` that never writes; that sleep's pid
/// is recorded so the test can end it.
struct Orphan {
    client: u32,
    sleeper: i32,
}

impl Drop for Orphan {
    fn drop(&mut self) {
        if self.sleeper > 1 && cmdline(self.sleeper).starts_with("sleep ") {
            let _ = signal(self.sleeper, Signal::KILL);
        }
    }
}

fn clients_of(s: &Server, name: &str) -> Vec<u32> {
    let o = s.tmux(&[
        "list-clients",
        "-t",
        &format!("={name}"),
        "-F",
        "#{client_pid}",
    ]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn attach_orphan(s: &Server, name: &str) -> Orphan {
    let before = clients_of(s, name);
    let pidfile: PathBuf = s.path(&format!("orphan-{name}.sleeper"));
    let st = Command::new("sh")
        .arg("-c")
        .arg(r#"(sh -c 'echo $$ > "$1"; exec sleep 60' inner "$1" | tmux -S "$2" -C attach -t "$3" >/dev/null 2>&1 &)"#)
        .arg("sh")
        .arg(&pidfile)
        .arg(&s.sock)
        .arg(format!("={name}"))
        .env_remove("TMUX")
        .env_remove("TMUX_PANE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let mut client = None;
    assert!(
        wait_until(10.0, || {
            client = clients_of(s, name)
                .into_iter()
                .find(|c| !before.contains(c));
            client.is_some()
        }),
        "the orphaned control client did not attach"
    );
    let o = Orphan {
        client: client.unwrap(),
        sleeper: wait_pid(&pidfile, 5.0).expect("the sleeper's pid file"),
    };
    // Its parent, the subshell, is gone.
    let ppid = stat(o.client as i32).expect("the client's /proc stat").ppid;
    assert_ne!(
        ppid,
        std::process::id() as i32,
        "the client was not orphaned"
    );
    o
}

#[test]
fn orphaned_control_client_keeps_by_default_and_is_ignored_on_request() {
    let mut s = Server::new();
    let n = s.chat("ccs-1", "conv-1", "plain,daemon");
    s.idle_since(n, 10_000_000);
    let pids = s.pids("ccs-1");
    let orphan = attach_orphan(&s, "ccs-1");
    // A viewer whose parent (this test) is alive.
    let m = s.chat("ccs-2", "conv-2", "");
    s.idle_since(m, 10_000_000);
    let live = s.attach_control("ccs-2");

    // status shows each viewer: pid, control mode, attached for, orphaned or not.
    let by = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]));
    let v1 = by["ccs-1"]["viewer_list"].as_array().unwrap();
    assert_eq!(v1.len(), 1, "{v1:?}");
    assert_eq!(v1[0]["pid"], orphan.client);
    assert_eq!(v1[0]["control_mode"], true);
    assert_eq!(v1[0]["orphaned"], true, "{v1:?}");
    assert!(v1[0]["attached_ms"].as_u64().is_some(), "{v1:?}");
    let v2 = by["ccs-2"]["viewer_list"].as_array().unwrap();
    assert_eq!(v2.len(), 1, "{v2:?}");
    assert_eq!(v2[0]["pid"], live);
    assert_eq!(v2[0]["control_mode"], true);
    assert_eq!(v2[0]["orphaned"], false, "{v2:?}");
    assert_eq!(by["ccs-1"]["state"], "viewed");
    assert_eq!(by["ccs-2"]["state"], "viewed");

    // Default: every client counts, the orphan too.
    let o = s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert!(s.has("ccs-1") && s.has("ccs-2"), "{}", o.stderr);
    assert!(s.audit().is_empty());
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_ENGINE_ORPHAN_VIEWERS", "count"),
        ],
    );
    assert!(s.has("ccs-1"), "{}", o.stderr);

    // The sweeps above refreshed the idle clocks (viewed): expire them again.
    s.idle_since(n, 10_000_000);
    s.idle_since(m, 10_000_000);
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_ENGINE_ORPHAN_VIEWERS", "ignore"),
            ("CCS_REAP_GRACE_MS", "2000"),
        ],
    );
    assert!(
        !s.has("ccs-1"),
        "an idle session held only by an orphaned viewer was kept: {}",
        o.stderr
    );
    assert!(
        s.has("ccs-2"),
        "a viewer with a live parent was ignored: {}",
        o.stderr
    );
    let l = reaped_line(&s, "ccs-1", &o);
    assert_eq!(l["reason"], "idle");
    assert_eq!(l["ended"], "stopped");
    for (kind, pid) in &pids {
        assert!(!alive(*pid), "{kind} {pid} survived");
    }
    // The live viewer still holds ccs-2, and its clock was refreshed.
    let stamp: i64 = s.show(m, "@ccs_idle").unwrap().parse().unwrap();
    assert!(
        now_ms() - stamp < 60_000,
        "viewed session's clock not refreshed"
    );
    drop(orphan);
}

#[test]
fn viewer_without_input_past_the_limit_no_longer_counts() {
    let mut s = Server::new();
    // Keeps the server up when ccs-1 goes: reaping the last session has its own test below.
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "conv-1", "plain");
    s.idle_since(n, 10_000_000);
    let t_attach = now_ms();
    s.attach_control("ccs-1");

    // A limit the client has not reached: it counts, and the sweep keeps the session.
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_ENGINE_VIEWER_MAX_MS", "3600000"),
        ],
    );
    assert!(s.has("ccs-1"), "{}", o.stderr);

    // A 3 s limit: counted at first, discounted once it has passed. tmux gives client_created
    // and client_activity in whole seconds, so the age seen can be up to 1 s more than the truth.
    s.idle_since(n, 10_000_000);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_ENGINE_VIEWER_MAX_MS", "3000"),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    let by = by_name(&s.status(&env));
    if now_ms() - t_attach < 1500 {
        assert_eq!(
            by["ccs-1"]["state"], "viewed",
            "a viewer attached under a second ago was discounted: {:?}",
            by["ccs-1"]
        );
    }
    assert!(wait_until(10.0, || {
        let by = by_name(&s.status(&env));
        by["ccs-1"]["state"] != "viewed"
    }));
    let waited = now_ms() - t_attach;
    assert!(
        waited >= 1900,
        "discounted after {waited} ms, limit 3000 ms"
    );
    let by = by_name(&s.status(&env));
    let v = by["ccs-1"]["viewer_list"].as_array().unwrap();
    assert_eq!(
        v.len(),
        1,
        "status must still list the discounted viewer: {v:?}"
    );
    assert_eq!(v[0]["control_mode"], true);
    assert!(v[0]["attached_ms"].as_u64().unwrap() >= 2000, "{v:?}");

    let o = s.sweep(DONE, &[], &env);
    assert!(
        !s.has("ccs-1"),
        "a viewer without input past CCS_ENGINE_VIEWER_MAX_MS still held the session: {}",
        o.stderr
    );
    assert_eq!(reaped_line(&s, "ccs-1", &o)["reason"], "idle");
}

// ---------------------------------------------------------------------------------------------
// Exited panes
// ---------------------------------------------------------------------------------------------

/// (dead, dead_status, dead_signal, pane_pid) of a session's first pane.
fn pane(s: &Server, n: u32) -> (bool, String, String, i32) {
    let o = s.ok(&[
        "display-message",
        "-p",
        "-t",
        &format!("${n}:"),
        "#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{pane_pid}",
    ]);
    let f: Vec<&str> = o.trim_end_matches('\n').split('\t').collect();
    (
        f[0] == "1",
        f[1].to_string(),
        f[2].to_string(),
        f[3].parse().unwrap_or(0),
    )
}

/// A session kept after its command `cmd` exits (see [`Server::remain_on_exit`]), its cid set,
/// its idle clock started just now.
fn kept_on_exit(s: &Server, name: &str, cid: &str, cmd: &str) -> u32 {
    let n = s.remain_on_exit(name, cmd);
    s.set(n, "@ccs_cid", cid);
    s.idle_since(n, 0);
    n
}

/// Whether this tmux says which signal killed a pane: `#{pane_dead_signal}` came with 3.3. Before,
/// a pane killed by a signal shows neither a status nor a signal once its exit is collected.
fn reports_signals() -> bool {
    use ccs_reap::adapters::tmux::version::{parse, Reported, Version};
    let out = Command::new("tmux").arg("-V").output().unwrap();
    match parse(&String::from_utf8_lossy(&out.stdout)) {
        Reported::Release(v) => {
            v >= Version {
                major: 3,
                minor: 3,
                letter: None,
            }
        }
        _ => true,
    }
}

/// Wait until the pane is dead with its exit status known (on a tmux before 3.3, a pane killed
/// by a signal: until the server has reaped its process). tmux 3.3a sometimes misses a pane's
/// SIGCHLD (see `dead_pane_whose_exit_status_tmux_missed_is_still_cleaned_up`): the status then
/// stays unknown until another child of the server exits, so after a moment this fixture makes
/// one (`run-shell -b true`). The tests that use it are about classification, not about that.
fn wait_dead(s: &Server, n: u32) {
    let mut last = None;
    let t0 = now_ms();
    let mut nudged = false;
    let signals = reports_signals();
    let server: i32 = s
        .ok(&["display-message", "-p", "#{pid}"])
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(10.0, || {
            let p = pane(s, n);
            let collected = || stat(p.3).is_none_or(|st| st.ppid != server);
            let ok = p.0 && (!p.1.is_empty() || !p.2.is_empty() || (!signals && collected()));
            if p.0 && !ok && !nudged && now_ms() - t0 > 300 {
                s.ok(&["run-shell", "-b", "true"]);
                nudged = true;
            }
            last = Some(p);
            ok
        }),
        "${n}: the pane did not die with a known status: {last:?}"
    );
}

const EXITED_ENV: [(&str, &str); 2] = [
    ("CCS_ENGINE_IDLE_KILL_MS", FAR),
    ("CCS_REAP_GRACE_MS", "2000"),
];

#[test]
fn exited_pane_is_cleaned_up_at_once_with_its_lingering_helper() {
    let s = Server::new();
    let pids = s.path("ccs-1.pids");
    // claude starts a setsid'd helper, then exits (stdin at EOF); the pane's shell exits 3.
    let cmd = format!(
        "FAKE_CLAUDE_PIDS={} {} --resume conv-x --helpers daemon </dev/null; exit 3",
        pids.display(),
        fake_claude()
    );
    let n = kept_on_exit(&s, "ccs-1", "conv-exited", &cmd);
    wait_dead(&s, n);
    let helper = *s
        .pids("ccs-1")
        .get("daemon")
        .expect("the helper did not start");
    assert!(alive(helper), "the helper should outlive the pane");
    assert!(s.has("ccs-1"), "remain-on-exit did not keep the session");
    // A live session next to it, idle for a moment only: untouched.
    let young = s.chat("ccs-2", "conv-live", "");
    s.idle_since(young, 1000);

    let by = by_name(&s.status(&EXITED_ENV));
    assert_eq!(by["ccs-1"]["state"], "exited", "{:?}", by["ccs-1"]);

    // The idle clock started just now: only the exited rule can take it.
    let o = s.sweep(DONE, &[], &EXITED_ENV);
    assert!(
        !s.has("ccs-1"),
        "the dead pane's session was kept: {}",
        o.stderr
    );
    assert!(s.has("ccs-2"), "{}", o.stderr);
    let l = reaped_line(&s, "ccs-1", &o);
    assert_eq!(l["reason"], "exited", "{l:?}");
    assert_eq!(l["ended"], "failed", "{l:?}");
    assert_eq!(l["exit_status"], 3, "{l:?}");
    assert!(l["exit_signal"].is_null(), "{l:?}");
    assert_eq!(l["cid"], "conv-exited");
    assert!(
        wait_until(3.0, || !alive(helper)),
        "the lingering helper {helper} survived the cleanup"
    );
    assert!(
        l["pids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_i64() == Some(helper as i64)),
        "the helper is not among the audit line's pids: {l:?}"
    );
    let t = s.tombstone("1").expect("tombstone");
    assert_eq!(t["cid"], "conv-exited", "{t:?}");
    assert_eq!(t["reason"], "exited");
}

#[test]
fn every_ending_is_classified_completed_failed_or_stopped() {
    let s = Server::new();
    // A foreign session keeps the server up while the last chat goes (see the test below).
    s.session("keeper", "sleep 100000");
    let ok = kept_on_exit(&s, "ccs-1", "conv-ok", "exit 0");
    let killed = kept_on_exit(&s, "ccs-2", "conv-killed", "exec sleep 100000");
    // A normal idle reap, for contrast.
    let idle = s.chat("ccs-3", "conv-idle", "plain");
    s.idle_since(idle, 100_000_000);
    wait_dead(&s, ok);
    let mut pid = 0;
    assert!(wait_until(5.0, || {
        pid = pane(&s, killed).3;
        cmdline(pid).starts_with("sleep ")
    }));
    signal(pid, Signal::TERM).unwrap();
    wait_dead(&s, killed);

    let o = s.sweep(DONE, &[], &EXITED_ENV);
    assert_eq!(s.names(), vec!["keeper".to_string()], "{}", o.stderr);

    let l = reaped_line(&s, "ccs-1", &o);
    assert_eq!(
        (l["reason"].as_str(), l["ended"].as_str()),
        (Some("exited"), Some("completed")),
        "{l:?}"
    );
    assert_eq!(l["exit_status"], 0, "{l:?}");
    assert_eq!(s.tombstone("1").unwrap()["cid"], "conv-ok");

    let l = reaped_line(&s, "ccs-2", &o);
    assert_eq!(
        (l["reason"].as_str(), l["ended"].as_str()),
        (Some("exited"), Some("failed")),
        "{l:?}"
    );
    if reports_signals() {
        assert_eq!(l["exit_signal"], 15, "{l:?}");
    } else {
        // No #{pane_dead_signal} before tmux 3.3: failed, by a signal it cannot name.
        assert!(
            l["exit_signal"].is_null() && l["exit_status"].is_null(),
            "{l:?}"
        );
    }
    assert_eq!(s.tombstone("2").unwrap()["cid"], "conv-killed");

    let l = reaped_line(&s, "ccs-3", &o);
    assert_eq!(
        (l["reason"].as_str(), l["ended"].as_str()),
        (Some("idle"), Some("stopped")),
        "{l:?}"
    );
    assert!(
        l["exit_status"].is_null() && l["exit_signal"].is_null(),
        "{l:?}"
    );
}

#[test]
fn dead_pane_whose_exit_status_tmux_missed_is_still_cleaned_up() {
    // tmux 3.3a sometimes misses the SIGCHLD of a pane that exits on its own (about one exit in
    // five on this machine): the pane shows dead, its process stays a zombie of the server, and
    // #{pane_dead_status} stays empty until another child of the server happens to exit. A
    // session left so must still be cleaned up by the sweeps, not kept "waiting for the exit
    // status" for good (the idle rule never sees it either).
    //
    // The miss cannot be forced from outside tmux (a server started with SIGCHLD blocked never
    // collects anything, which is another case), so the test tries up to 60 exits. Where none is
    // missed, it says so on the test's stderr, uncaptured, and checks only the other half: an
    // exit that tmux did collect, cleaned up by the same sweeps with the same outcome.
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let server_pid = s.server_pid();
    s.ok(&["set-option", "-g", "remain-on-exit", "on"]);
    let (mut missed, mut collected) = (None, None);
    for i in 0..60 {
        let name = format!("ccs-{i}");
        let n = s.session(&name, "exit 3");
        assert!(wait_until(5.0, || pane(&s, n).0), "{name} did not exit");
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (dead, status, signal, pid) = pane(&s, n);
        let zombie = stat(pid).is_some_and(|st| st.state == 'Z' && st.ppid == server_pid);
        if dead && status.is_empty() && signal.is_empty() && zombie {
            missed = Some((name, n, i));
            break;
        }
        if collected.is_none() && dead && status == "3" {
            // Collected normally: the first one is kept for the check made in any case.
            collected = Some((name, n, i));
            continue;
        }
        // (kill-session of a dead pane makes no child exit, so it cannot collect anything for
        // the next one.)
        s.ok(&["kill-session", "-t", &format!("${n}")]);
    }
    if missed.is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "NOTE dead_pane_whose_exit_status_tmux_missed_is_still_cleaned_up: tmux collected \
             every exit status in 60 tries, so its main check (a missed SIGCHLD) did NOT run; \
             only the cleanup of an exit tmux collected was checked"
        );
    }
    let ours: Vec<&(String, u32, i32)> = missed.iter().chain(collected.iter()).collect();
    assert!(
        !ours.is_empty(),
        "no session of ccs-0..59 was left to sweep"
    );
    for (_, n, id) in &ours {
        s.set(*n, "@ccs_cid", &format!("conv-{id}"));
        s.idle_since(*n, 0);
    }
    // Give the sweeps two chances ("a moment"), no more.
    for _ in 0..2 {
        s.sweep(DONE, &[], &EXITED_ENV);
        if ours.iter().all(|(name, ..)| !s.has(name)) {
            break;
        }
    }
    for (name, n, id) in &ours {
        let what = if missed.as_ref().is_some_and(|(m, ..)| m == name) {
            "a dead pane whose exit status tmux has not collected"
        } else {
            "a dead pane whose exit status tmux collected"
        };
        assert!(
            !s.has(name),
            "{what} ({name}) was kept for good: {:?}",
            pane(&s, *n)
        );
        let l = s.audit_of(name);
        assert_eq!(l.len(), 1, "{name}: {l:?}");
        assert_eq!(l[0]["outcome"], "reaped", "{name}: {l:?}");
        assert_eq!(l[0]["reason"], "exited", "{name}: {l:?}");
        assert_eq!(l[0]["exit_status"], 3, "{name}: {l:?}");
        assert_eq!(l[0]["ended"], "failed", "{name}: {l:?}");
        assert_eq!(
            s.tombstone(&id.to_string()).unwrap()["cid"],
            format!("conv-{id}")
        );
    }
    assert!(s.has("keeper"));
}

#[test]
fn exited_pane_waits_for_a_viewer_to_leave() {
    // Nothing is lost by cleaning up a dead pane, but someone is looking at it: they see why it died.
    let mut s = Server::new();
    let n = kept_on_exit(&s, "ccs-1", "conv-v", "exit 7");
    wait_dead(&s, n);
    s.attach_control("ccs-1");
    let o = s.sweep(DONE, &[], &EXITED_ENV);
    assert!(s.has("ccs-1"), "{}", o.stderr);
    s.detach_all();
    assert!(wait_until(5.0, || clients_of(&s, "ccs-1").is_empty()));
    let o = s.sweep(DONE, &[], &EXITED_ENV);
    assert!(!s.has("ccs-1"), "{}", o.stderr);
    let l = reaped_line(&s, "ccs-1", &o);
    assert_eq!(l["exit_status"], 7);
    assert_eq!(l["ended"], "failed");
}

// ---------------------------------------------------------------------------------------------
// A server left without sessions
// ---------------------------------------------------------------------------------------------

#[test]
fn reaping_the_last_session_of_a_server_is_reaped_not_failed() {
    // The pane's claude dies on SIGTERM, tmux closes the session on its own, and kill-session
    // then finds a server with no session at all: the session is gone, the reap succeeded.
    let s = Server::new();
    s.server_that_stays_up();
    let n = s.chat("ccs-1", "conv-last", "plain");
    s.idle_since(n, 10_000_000);
    let pids = s.pids("ccs-1");
    // Either code here: a failed reap's exit 1 is checked last, after the audit line says why.
    let o = s.sweep(
        DONE_OR_FAILED,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "2000"),
        ],
    );
    assert!(!s.has("ccs-1"));
    for (kind, pid) in &pids {
        assert!(!alive(*pid), "{kind} {pid} survived");
    }
    let l = s.audit_of("ccs-1");
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(
        l[0]["outcome"], "reaped",
        "a complete reap was logged as {}: {:?}",
        l[0]["outcome"], l[0]["error"]
    );
    assert_eq!(l[0]["ended"], "stopped");
    assert_eq!(o.code, 0, "--once reported a failed reap: {}", o.stderr);
}

#[test]
fn turn_begin_on_a_server_without_sessions_says_respawn() {
    let s = Server::new();
    s.server_that_stays_up();
    let o = s.run_any(&["turn", "begin", "1"], &[]);
    assert_eq!(
        o.code, 4,
        "turn begin on a gone session must exit 4 (respawn): {}",
        o.stderr
    );
}
