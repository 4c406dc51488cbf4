//! What studios ask of a reaper, on a real tmux: pins, per-chat limits, hooks around a reap, a
//! warning before one, and bloated sessions. (LIMIT, the global idle limit, is 10 minutes.)

use crate::common::*;

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

const HOUR: i64 = 3_600_000;

fn reaped(s: &Server, name: &str) -> bool {
    s.audit_of(name).iter().any(|l| l["outcome"] == "reaped")
}

#[test]
fn a_pinned_chat_is_never_reaped_until_unpinned_but_its_exited_panes_are_cleaned() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 2 * HOUR);
    let o = s.run(&["pin", "1", "--json"], &[]);
    assert_eq!(o.json()["result"], "pinned");
    assert_eq!(s.show(n, "@ccs_pin").as_deref(), Some("1"));
    // Idle past the limit, and under memory pressure with no floor: kept.
    s.once(DONE, 1000, &[]);
    s.once(
        DONE,
        1000,
        &[
            ("CCS_ENGINE_MEM_HIGH", "1K"),
            ("CCS_ENGINE_MIN_IDLE_MS", "0"),
        ],
    );
    assert!(s.has("ccs-1"), "a pinned chat was reaped");
    let j = s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert_eq!(by_name(&j)["ccs-1"]["state"], "pinned");
    // Unpinned: the rules apply again.
    s.run(&["unpin", "1"], &[]);
    assert_eq!(s.show(n, "@ccs_pin"), None);
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-1") && reaped(&s, "ccs-1"));
    // A session that is gone: exit 4.
    s.run_expect(RESPAWN, &["pin", "9"], &[]);
    // Exited panes of a pinned session are still cleaned up.
    let m = s.remain_on_exit("ccs-2", "exit 3");
    s.set(m, "@ccs_pin", "yes");
    s.set(m, "@ccs_cid", "c2");
    assert!(wait_until(10.0, || s
        .ok(&["list-panes", "-t", "=ccs-2:", "-F", "#{pane_dead}"])
        .trim()
        == "1"));
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-2"), "exited panes of a pinned chat were kept");
    // `pin 0` means unpinned.
    let k = s.chat("ccs-3", "c3", "");
    s.idle_since(k, 2 * HOUR);
    s.set(k, "@ccs_pin", "0");
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-3"));
}

#[test]
fn each_chat_can_have_its_own_idle_limit_and_garbage_counts_as_unset() {
    let s = Server::new();
    // (name, @ccs_idle_kill_ms, idle for, reaped)
    let table: &[(&str, &str, i64, bool)] = &[
        ("ccs-1", "60000", 120_000, true), // its own minute: gone after two
        ("ccs-2", "86400000", 2 * HOUR, false), // its own day: kept after two hours
        ("ccs-3", "soon", 2 * HOUR, true), // garbage: the global 10 minutes
        ("ccs-4", "0", 2 * HOUR, false),   // 0: never by idle
        ("ccs-5", "", 120_000, false),     // none: the global 10 minutes
    ];
    for (name, limit, idle, _) in table {
        let n = s.chat(name, &format!("c{}", &name[4..]), "");
        if !limit.is_empty() {
            s.set(n, "@ccs_idle_kill_ms", limit);
        }
        s.idle_since(n, *idle);
    }
    let o = s.once(DONE, 1000, &[]);
    for (name, limit, _, gone) in table {
        assert_eq!(!s.has(name), *gone, "{name} ({limit:?}): {}", o.stderr);
    }
    assert!(
        o.stderr.contains("ccs-3") && o.stderr.contains("\"soon\""),
        "no warning names the garbage: {}",
        o.stderr
    );
}

fn hook(s: &Server, body: &str) -> String {
    let p = s.path("hook");
    std::fs::write(
        &p,
        format!("#!/bin/sh\nLOG='{}'\n{body}", s.path("hook.log").display()),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    path_str(&p)
}

#[test]
fn a_hook_before_can_veto_a_reap_and_the_hook_after_gets_the_audit_line() {
    let s = Server::new();
    let a = s.chat("ccs-1", "c1", "plain");
    let b = s.chat("ccs-2", "c2", "plain");
    s.idle_since(a, HOUR);
    s.idle_since(b, HOUR);
    // `before` vetoes ccs-1 (its decision names it on stdin); every call is logged with its stdin.
    let h = hook(
        &s,
        r#"in=$(cat)
printf '%s %s\n' "$1" "$in" >>"$LOG"
case "$1:$in" in before:*'"name":"ccs-1"'*) exit 3 ;; esac
exit 0
"#,
    );
    let o = s.once(DONE, 1000, &[("CCS_REAP_HOOK", h.as_str())]);
    assert!(s.has("ccs-1"), "a vetoed reap went on: {}", o.stderr);
    for (kind, pid) in s.pids("ccs-1") {
        assert!(alive(pid), "ccs-1's {kind} was signalled despite the veto");
    }
    let l = &s.audit_of("ccs-1")[0];
    assert_eq!(l["outcome"], "aborted");
    assert!(l["error"].as_str().unwrap().contains(&h), "{l}");
    assert!(!s.has("ccs-2") && reaped(&s, "ccs-2"));
    let log = std::fs::read_to_string(s.path("hook.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("before ")).count(),
        2,
        "{log}"
    );
    // `after` got both audit lines, as JSON.
    let after: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("after "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    assert_eq!(after.len(), 2, "{log}");
    assert!(after
        .iter()
        .any(|l| l["session"] == "ccs-2" && l["outcome"] == "reaped"));
    assert!(after
        .iter()
        .any(|l| l["session"] == "ccs-1" && l["outcome"] == "aborted"));
}

#[test]
fn a_hook_that_hangs_is_killed_and_the_reap_goes_on() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, HOUR);
    // Each hook starts a child of its own, then hangs.
    let h = hook(
        &s,
        "sleep 100000 </dev/null >/dev/null 2>&1 &\necho \"$1 $$ $!\" >>\"$LOG\"\nexec sleep 100000\n",
    );
    let t = Instant::now();
    s.once(
        DONE,
        1000,
        &[
            ("CCS_REAP_HOOK", h.as_str()),
            ("CCS_REAP_HOOK_TIMEOUT_MS", "300"),
        ],
    );
    assert!(
        t.elapsed().as_secs_f64() < 8.0,
        "the sweep waited on the hook"
    );
    assert!(!s.has("ccs-1") && reaped(&s, "ccs-1"));
    // Both hooks ran and were killed, each with the child it started: nothing is left.
    let log = std::fs::read_to_string(s.path("hook.log")).unwrap();
    for l in log.lines() {
        for pid in l.split_whitespace().skip(1) {
            let pid: i32 = pid.parse().unwrap();
            assert!(
                wait_until(5.0, || !alive(pid)),
                "{pid} of hook {l} was left running"
            );
        }
    }
    assert_eq!(log.lines().count(), 2, "{log}");
}

#[test]
fn a_warning_goes_out_once_before_an_idle_reap() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    let far = s.chat("ccs-2", "c2", "");
    // 10-minute limit, warned 2 minutes before: ccs-1 has 1 minute left, ccs-2 nine.
    s.idle_since(n, 540_000);
    s.idle_since(far, 60_000);
    let env = [("CCS_ENGINE_WARN_MS", "120000")];
    s.once(DONE, 1000, &env);
    s.once(DONE, 1000, &env);
    let warned: Vec<serde_json::Value> = s
        .audit()
        .into_iter()
        .filter(|l| l["outcome"] == "warned")
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0]["session"], "ccs-1");
    assert!(warned[0]["reap_at"].is_string(), "{}", warned[0]);
    assert!(s.has("ccs-1"), "warned is not reaped");
    // A new idle period (a turn came and went) is warned again when its time comes.
    s.idle_since(n, 550_000);
    s.once(DONE, 1000, &env);
    let n_warned = s
        .audit()
        .iter()
        .filter(|l| l["outcome"] == "warned")
        .count();
    assert_eq!(n_warned, 2);
}

#[test]
fn a_bloated_idle_session_is_reaped_and_comes_back_small_with_its_history() {
    let s = Server::new();
    let fat = s.session(
        "ccs-1",
        "exec python3 -c 'import time; b = b\"x\" * (60 << 20); time.sleep(100000)'",
    );
    s.set(fat, "@ccs_cid", "fat-conv");
    let thin = s.chat("ccs-2", "c2", "");
    for n in [fat, thin] {
        s.idle_since(n, 5_000);
    }
    // Wait until it holds its memory.
    let pid = s.pane_pid(fat);
    assert!(wait_until(10.0, || {
        std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|m| m.split_whitespace().nth(1)?.parse::<u64>().ok())
            .is_some_and(|pages| pages * 4096 > 50 << 20)
    }));
    let env = [
        ("CCS_ENGINE_SESSION_MEM_MAX", "30M"),
        ("CCS_ENGINE_MIN_IDLE_MS", "1000"),
    ];
    s.once(DONE, 1000, &env);
    assert!(!s.has("ccs-1"), "the bloated session was kept");
    assert!(s.has("ccs-2"), "a small session was taken");
    assert_eq!(s.audit_of("ccs-1")[0]["reason"], "bloat");
    s.run(&["spawn", "1", "--", &fake_claude()], &[]);
    let cmd = s.ok(&["list-panes", "-t", "=ccs-1:", "-F", "#{pane_start_command}"]);
    assert!(cmd.contains("--resume fat-conv"), "{cmd}");
}
