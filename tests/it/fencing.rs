//! Fencing, on a real tmux: a reaper that stalls past the stale limit, or two reapers whose
//! settings differ, never kill a chat that came back. The invariant each test checks, whatever
//! interleaving the machine gives it:
//!
//! - a `turn begin` that answered 0 is never followed by the death of that chat;
//! - otherwise (it answered 4) the chat's cid is in a tombstone;
//! - never two teardowns of one chat (at most one `reaped` line).

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};

use crate::common::*;

const HOUR: i64 = 3_600_000;

/// A `before` hook: `body` runs with `$LOG` set, after the decision on stdin is read.
fn hook(s: &Server, body: &str) -> String {
    let p = s.path("hook");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nLOG='{}'\ncat >/dev/null\n{body}",
            s.path("hook.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    path_str(&p)
}

/// Settings that make the stale limit short: grace 200 ms, tmux timeout 500 ms.
fn quick<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("CCS_REAP_GRACE_MS", "200"),
        ("CCS_TMUX_TIMEOUT_MS", "500"),
        ("CCS_REAP_INTERVAL_MS", "200"),
    ];
    v.extend_from_slice(extra);
    v
}

/// The stale limit a reaper of [`quick`] settings computes, hook or not (docs/teardown.md).
fn limit_ms(hook_timeout_ms: Option<i64>) -> i64 {
    3 * 200 + 3 * 500 + 2000 + hook_timeout_ms.unwrap_or(0)
}

/// A reaper run in the background, killed (and resumed, should it be stopped) on Drop.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        let _ = signal(pid, Signal::CONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ccs-reap --once` in the background, reaping at [`LIMIT`] with the `before` hook `hook`
/// (killed past `timeout_ms`); its log goes to `a.log`.
fn reaper_with_hook(s: &Server, hook: &str, timeout_ms: &str) -> Reaper {
    let env = quick(&[
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_HOOK", hook),
        ("CCS_REAP_HOOK_TIMEOUT_MS", timeout_ms),
    ]);
    let log = std::fs::File::create(s.path("a.log")).unwrap();
    Reaper(
        s.reap(&env)
            .arg("--once")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

/// `ccs-reap turn begin 1`, in the background.
fn turn_begin(s: &Server) -> Child {
    s.reap(&[])
        .args(["turn", "begin", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_exit(c: &mut Child, secs: f64) -> i32 {
    let mut code = None;
    let done = wait_until(secs, || match c.try_wait().unwrap() {
        Some(st) => {
            code = Some(st.code().unwrap_or(-1));
            true
        }
        None => false,
    });
    if !done {
        let _ = c.kill();
        panic!("a process did not exit within {secs} s");
    }
    code.unwrap()
}

/// The invariant, once every reaper is done and `turn begin` answered `answer`.
fn check_invariant(s: &Server, answer: i32, pids: &[(String, i32)]) {
    let reaped = s
        .audit_of("ccs-1")
        .iter()
        .filter(|l| l["outcome"] == "reaped")
        .count();
    assert!(
        reaped <= 1,
        "two teardowns of one chat: {:?}",
        s.audit_of("ccs-1")
    );
    match answer {
        0 => {
            for (kind, pid) in pids {
                assert!(
                    alive(*pid),
                    "turn begin answered 0, then the chat's {kind} ({pid}) was killed: {:?}",
                    s.audit_of("ccs-1")
                );
            }
            assert!(s.has("ccs-1"), "turn begin answered 0, then the chat went");
        }
        4 => {
            let t = s
                .tombstone("1")
                .expect("the chat was reaped without a tombstone");
            assert_eq!(t["cid"], "c1", "{t}");
        }
        other => panic!("turn begin answered {other}"),
    }
}

/// A reaper stopped (SIGSTOP) inside its `before` hook, past every stale limit, while another
/// `--once` runs, a viewer attaches and `turn begin` is called; then SIGCONT.
#[test]
fn a_reaper_stopped_in_its_hook_past_the_limit_never_kills_a_chat_that_came_back() {
    let mut s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    let pids = s.pid_list("ccs-1");
    // The hook stops its reaper (its parent), as a paused container or a debugger would.
    // (Only `before`: the `after` hook runs the same program.)
    let h = hook(
        &s,
        "[ \"$1\" = before ] || exit 0\necho stopping >>\"$LOG\"\nkill -STOP $PPID\nexit 0\n",
    );
    let mut a = reaper_with_hook(&s, &h, "500");
    let a_pid = a.0.id() as i32;
    assert!(
        wait_until(20.0, || stat(a_pid).is_some_and(|st| st.state == 'T')),
        "the first reaper never stopped in its hook"
    );
    let mark: i64 = s.show(n, "@ccs_reaping").unwrap().parse().unwrap();
    // Past both reapers' limits, whoever computes them.
    let past = limit_ms(Some(500)).max(limit_ms(None)) + 300;
    assert!(wait_until(30.0, || now_ms() - mark > past));
    // Another reaper, whose own idle limit keeps the chat (so it would only clear a stale mark).
    let b = s.sweep(
        DONE_OR_FAILED,
        &[],
        &quick(&[("CCS_ENGINE_IDLE_KILL_MS", "86400000")]),
    );
    no_panic(&b);
    // A viewer comes, and the studio sends a message.
    s.attach_control("ccs-1");
    let mut turn = turn_begin(&s);
    // Let `turn begin` answer if it is going to (it answers at once when no mark holds).
    let _ = wait_until(1.5, || turn.try_wait().unwrap().is_some());
    // The first reaper goes on.
    signal(a_pid, Signal::CONT).unwrap();
    let a_code = wait_exit(&mut a.0, 30.0);
    assert!(matches!(a_code, 0 | 1), "the first reaper exited {a_code}");
    let answer = wait_exit(&mut turn, 120.0);
    check_invariant(&s, answer, &pids);
    // Here the chat is watched and came back: it lives, and the first reaper says why it stopped.
    assert_eq!(answer, 0, "turn begin answered {answer}");
    let lines = s.audit_of("ccs-1");
    assert!(
        lines.iter().any(|l| l["outcome"] == "aborted"
            && l["error"].as_str().unwrap_or("").contains("fenced off")),
        "{lines:?}"
    );
}

/// A reaper with a slow `before` hook beside one without: each computes another stale limit, and
/// the one without must not take the other's live mark for stale.
#[test]
fn a_reaper_with_a_slow_hook_beside_one_without_never_kills_a_turn_that_began() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    let pids = s.pid_list("ccs-1");
    let gate = s.path("gate");
    let h = hook(
        &s,
        &format!(
            "echo waiting >>\"$LOG\"\nwhile [ ! -e '{}' ]; do sleep 0.05; done\nexit 0\n",
            gate.display()
        ),
    );
    let mut a = reaper_with_hook(&s, &h, "20000");
    assert!(
        wait_until(20.0, || std::fs::read_to_string(s.path("hook.log"))
            .is_ok_and(|l| l.contains("waiting"))),
        "the hook never ran"
    );
    let mark: i64 = s.show(n, "@ccs_reaping").unwrap().parse().unwrap();
    // Past the limit of the reaper without a hook (not the other's).
    assert!(wait_until(30.0, || now_ms() - mark > limit_ms(None) + 300));
    let b = s.sweep(
        DONE_OR_FAILED,
        &[],
        &quick(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]),
    );
    no_panic(&b);
    let mut turn = turn_begin(&s);
    let _ = wait_until(1.5, || turn.try_wait().unwrap().is_some());
    std::fs::write(&gate, "").unwrap();
    let a_code = wait_exit(&mut a.0, 30.0);
    assert!(matches!(a_code, 0 | 1), "the first reaper exited {a_code}");
    let answer = wait_exit(&mut turn, 120.0);
    check_invariant(&s, answer, &pids);
    // The first reaper held its mark all along: it reaped, and `turn begin` waited for it.
    assert_eq!(answer, 4, "turn begin answered {answer}");
    assert_eq!(
        s.audit_of("ccs-1")
            .iter()
            .filter(|l| l["outcome"] == "reaped")
            .count(),
        1
    );
}

/// A reap that overrides a turn (a stuck one) marks the chat while `@ccs_turn` is set; a `turn
/// end` arriving then must not take the tombstone the reap has just written.
#[test]
fn turn_end_keeps_the_tombstone_while_a_reap_mark_is_on_the_chat() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    let dir = s.studio().join("sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let tomb = serde_json::json!({
        "id": "1", "cid": "c1", "reaped_at": "2026-01-01T00:00:00Z", "reason": "stuck",
        "cwd": null, "token": "f1_1_1_1_1_x"
    });
    std::fs::write(dir.join("1.json"), tomb.to_string()).unwrap();
    s.set(n, "@ccs_turn", &now_ms().to_string());
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    s.run(&["turn", "end", "1"], &[]);
    assert!(
        s.tombstone("1").is_some(),
        "turn end took a reap's tombstone"
    );
    assert_eq!(s.show(n, "@ccs_turn"), None);
    // No mark: the turn went through on a chat that lives, and the tombstone has served.
    s.unset(n, "@ccs_reaping");
    s.run(&["turn", "end", "1"], &[]);
    assert!(s.tombstone("1").is_none(), "the used tombstone stayed");
}

/// A prompt hook (claude's `UserPromptSubmit`, as the pane runs it) that arrives after a reap's
/// mark but before its fence (the reap held up in a slow `before` hook, the documented way to warn
/// the user) takes the chat back: the prompt goes through (exit 0, a turn), the reap aborts at its
/// fence with "a prompt arrived" and signals nothing (issue 43.4).
#[test]
fn a_prompt_that_arrives_before_the_fence_wins_and_the_reap_aborts() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    let pids = s.pid_list("ccs-1");
    let gate = s.path("gate");
    let h = hook(
        &s,
        &format!(
            "[ \"$1\" = before ] || exit 0\necho waiting >>\"$LOG\"\nwhile [ ! -e '{}' ]; do sleep 0.05; done\nexit 0\n",
            gate.display()
        ),
    );
    let mut a = reaper_with_hook(&s, &h, "20000");
    assert!(
        wait_until(20.0, || std::fs::read_to_string(s.path("hook.log"))
            .is_ok_and(|l| l.contains("waiting"))),
        "the hook never ran"
    );
    assert!(s.show(n, "@ccs_reaping").is_some());
    // The prompt, from the chat's pane.
    let pane = s
        .ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("${n}:"),
            "#{pane_id}",
        ])
        .trim()
        .to_string();
    let mut c = s.reap(&[]);
    c.arg("claude-hook")
        .env("TMUX", format!("{},{},0", s.sock.display(), s.server_pid()))
        .env("TMUX_PANE", &pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"session_id":"c1","hook_event_name":"UserPromptSubmit","prompt":"hi"}"#)
        .unwrap();
    let o = Out::from(child.wait_with_output().unwrap());
    assert_eq!(o.code, 0, "the prompt was not let through: {}", o.stderr);
    assert!(s.show(n, "@ccs_turn").is_some());
    assert_eq!(s.show(n, "@ccs_reaping"), None);
    std::fs::write(&gate, "").unwrap();
    let code = wait_exit(&mut a.0, 30.0);
    assert!(matches!(code, 0 | 1), "the reaper exited {code}");
    assert!(s.has("ccs-1"));
    for (kind, pid) in &pids {
        assert!(alive(*pid), "the chat's {kind} ({pid}) was signalled");
    }
    let lines = s.audit_of("ccs-1");
    assert!(
        lines.iter().any(|l| l["outcome"] == "aborted"
            && l["error"]
                .as_str()
                .unwrap_or("")
                .contains("a prompt arrived")),
        "{lines:?}\n{}",
        std::fs::read_to_string(s.path("a.log")).unwrap_or_default()
    );
    assert!(lines.iter().all(|l| l["outcome"] != "reaped"), "{lines:?}");
    assert!(
        s.tombstone("1").is_none(),
        "a tombstone of a reap that never signalled"
    );
}

/// A chat that no prompt hook wires (its cid on its command line, its turns told only by Claude
/// Code's status file) whose turn begins while the reap waits in its `before` hook: the status
/// file is read again right before the fence, and the reap aborts, nothing signalled (issue 43.1,
/// found through the stand-in studio).
#[test]
fn a_turn_told_only_by_the_status_file_during_the_hook_stops_the_reap() {
    let s = Server::new();
    let pids = s.path("ccs-1.pids");
    let n = s.session(
        "ccs-1",
        &format!(
            "FAKE_CLAUDE_PIDS={} exec {} --session-id c1",
            pids.display(),
            fake_claude()
        ),
    );
    assert!(wait_until(10.0, || s.pids("ccs-1").contains_key("claude")));
    s.idle_since(n, HOUR);
    let claude = s.pids("ccs-1")["claude"];
    let status = s
        .path("claude-config")
        .join(format!("sessions/{claude}.json"));
    assert!(status.is_file(), "the fake claude keeps no status file");
    // The hook turns the status busy, as claude does 0.3-0.6 s after a prompt is typed.
    let h = hook(
        &s,
        &format!(
            "[ \"$1\" = before ] || exit 0\nsed -i 's/\"status\":\"idle\"/\"status\":\"busy\"/' '{}'\nexit 0\n",
            status.display()
        ),
    );
    let mut a = reaper_with_hook(&s, &h, "20000");
    let code = wait_exit(&mut a.0, 30.0);
    assert!(matches!(code, 0 | 1), "the reaper exited {code}");
    assert!(
        std::fs::read_to_string(&status)
            .unwrap()
            .contains("\"busy\""),
        "the hook did not run"
    );
    assert!(s.has("ccs-1"), "a chat busy by its status file was reaped");
    assert!(alive(claude));
    let lines = s.audit_of("ccs-1");
    assert!(
        lines.iter().any(|l| l["outcome"] == "aborted"
            && l["error"].as_str().unwrap_or("").contains("status file")),
        "{lines:?}\n{}",
        std::fs::read_to_string(s.path("a.log")).unwrap_or_default()
    );
}
