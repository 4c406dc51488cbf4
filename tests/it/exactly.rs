//! Exactly the chat (issue 49), on a real tmux: a reap takes the chat's own agent and nothing
//! else, and nobody watching it through tmux loses it. Each shape tmux gives its users (a viewer
//! through a linked window or a session group; a pane split beside the chat, a window opened in
//! its session; a pane swapped, joined, moved or broken out; a window moved in or out) is kept or
//! reaped as docs/rules.md says, beside a control chat that is reaped in the same sweep.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};

use crate::common::*;

/// SIGTERM to SIGKILL, in the sweeps of this file.
const GRACE: u64 = 1000;
const HOUR: i64 = 3_600_000;

/// The chat under test (`ccs-1`) and the control (`ccs-2`), both idle for an hour, and a
/// session of the user's own (`mine`, running a `sleep`). The chats' panes are recorded as
/// theirs by a first sweep that keeps everything (`record`).
struct World {
    s: Server,
    chat: u32,
}

fn world(record: bool) -> World {
    let s = Server::new();
    let chat = s.chat("ccs-1", "c1", "");
    let control = s.chat("ccs-2", "c2", "");
    s.session("mine", "sleep 100000");
    s.idle_since(chat, HOUR);
    s.idle_since(control, HOUR);
    if record {
        // A sweep that keeps all: ccs-reap has now seen the chats and recorded their panes.
        s.once(DONE, GRACE, &[("CCS_ENGINE_IDLE_KILL_MS", "86400000")]);
        for n in [chat, control] {
            let rec = s.show(n, "@ccs_pane").expect("the chat's pane is recorded");
            assert_eq!(rec, pane_of(&s, &format!("${n}:")), "{rec}");
        }
    }
    World { s, chat }
}

/// `%N:pid` of the active pane of `target`.
fn pane_of(s: &Server, target: &str) -> String {
    s.ok(&[
        "display-message",
        "-p",
        "-t",
        target,
        "#{pane_id}:#{pane_pid}",
    ])
    .trim()
    .to_string()
}

/// The pid of the pane `target`.
fn pid_of(s: &Server, target: &str) -> i32 {
    s.ok(&["display-message", "-p", "-t", target, "#{pane_pid}"])
        .trim()
        .parse()
        .unwrap()
}

impl World {
    /// The agent of `name` (the fake claude's own pid).
    fn agent(&self, name: &str) -> i32 {
        self.s.pids(name)["claude"]
    }

    /// One sweep at the ordinary limit.
    fn sweep(&self) -> Out {
        self.s.once(DONE, GRACE, &[])
    }

    /// The control was reaped in the sweep: gone, its agent dead, one audit line.
    fn control_reaped(&self, o: &Out) {
        assert!(!self.s.has("ccs-2"), "the control was kept: {}", o.stderr);
        let agent = self.agent("ccs-2");
        assert!(
            wait_until(5.0, || !alive(agent)),
            "the control's agent lives"
        );
        let a = self.s.audit_of("ccs-2");
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0]["outcome"], "reaped", "{a:?}");
    }

    /// `ccs-1` is kept in `state`, its WHY containing `word`, and no audit line says otherwise.
    fn kept(&self, state: &str, word: &str) -> serde_json::Value {
        assert!(self.s.has("ccs-1"), "the chat was reaped");
        assert!(self.s.audit_of("ccs-1").is_empty(), "{:?}", self.s.audit());
        let j = self.s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
        let row = by_name(&j)["ccs-1"].clone();
        assert_eq!(row["state"], state, "{row}");
        assert_eq!(row["action"], "keep", "{row}");
        let why = row["why"].as_str().unwrap_or_default();
        assert!(why.contains(word), "{word:?} not in {why:?}");
        row
    }
}

/// A client attached to `dash`, whose current window is the chat's window linked there, is a
/// viewer of the chat: kept, its clock refreshed. Once it looks at another window of `dash`, it
/// no longer counts, and the chat is reaped: its agent, not `dash`'s own pane.
#[test]
fn a_viewer_through_a_linked_window_keeps_the_chat() {
    let mut w = world(false);
    let s = &w.s;
    s.ok(&["link-window", "-s", "=ccs-1:0", "-t", "=mine:5"]);
    s.ok(&["select-window", "-t", "=mine:5"]);
    let mine = pid_of(s, "=mine:0");
    w.s.attach_control("mine");
    let before = now_ms();
    let o = w.sweep();
    w.control_reaped(&o);
    let row = w.kept("viewed", "viewer");
    assert_eq!(row["viewers"], 1, "{row}");
    let stamp: i64 = w.s.show(w.chat, "@ccs_idle").unwrap().parse().unwrap();
    assert!(
        stamp >= before,
        "the clock was not refreshed: {stamp} < {before}"
    );
    assert!(alive(w.agent("ccs-1")));

    // The client looks at `mine`'s own window: the chat's window has no viewer.
    w.s.ok(&["select-window", "-t", "=mine:0"]);
    w.s.idle_since(w.chat, HOUR);
    let agent = w.agent("ccs-1");
    let o = w.sweep();
    assert!(!w.s.has("ccs-1"), "{}", o.stderr);
    assert!(
        wait_until(5.0, || !alive(agent)),
        "the chat's agent lives on"
    );
    assert_eq!(w.s.audit_of("ccs-1")[0]["outcome"], "reaped");
    assert!(alive(mine), "the viewer's own pane was signalled");
    assert!(w.s.has("mine"));
}

/// A client attached to a session grouped with the chat's (`new-session -t ccs-1`) is a viewer:
/// kept. Once it leaves, the chat is reaped, its agent with it.
#[test]
fn a_viewer_from_a_grouped_session_keeps_the_chat() {
    let mut w = world(false);
    w.s.ok(&["new-session", "-d", "-t", "=ccs-1", "-s", "view"]);
    w.s.attach_control("view");
    assert!(!w.s.attached("ccs-1"));
    let o = w.sweep();
    w.control_reaped(&o);
    w.kept("viewed", "viewer");
    let agent = w.agent("ccs-1");
    assert!(alive(agent));

    w.s.detach_all();
    assert!(wait_until(5.0, || !w.s.attached("view")));
    w.s.idle_since(w.chat, HOUR);
    let o = w.sweep();
    assert!(!w.s.has("ccs-1"), "{}", o.stderr);
    assert!(
        wait_until(5.0, || !alive(agent)),
        "the chat's agent lives on"
    );
    assert_eq!(w.s.audit_of("ccs-1")[0]["outcome"], "reaped");
}

/// A pane the user split beside the chat: the session is `shared`, kept, nothing in it signalled.
#[test]
fn a_pane_split_beside_the_chat_keeps_it_shared() {
    let w = world(true);
    w.s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100001"]);
    let theirs = pid_of(&w.s, "=ccs-1:0.1");
    let o = w.sweep();
    w.control_reaped(&o);
    w.kept("shared", "runs `sleep`");
    assert!(alive(theirs) && alive(w.agent("ccs-1")));
    // `doctor` names it, with its WHY (a note: nothing to fix).
    let j =
        w.s.run_any(
            &["doctor", "--json"],
            &[
                ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
                ("CLAUDE_CONFIG_DIR", ""),
            ],
        )
        .json();
    let check = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "chat-panes")
        .cloned()
        .unwrap_or_else(|| panic!("no chat-panes check: {j}"));
    assert_eq!(check["verdict"], "note", "{check}");
    let msg = check["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("ccs-1 (shared: ") && msg.contains("`sleep`"),
        "{check}"
    );
}

/// A window the user opened in the chat's session: `shared`, named by its index.
#[test]
fn a_window_opened_in_the_chats_session_keeps_it_shared() {
    let w = world(false);
    w.s.ok(&["new-window", "-d", "-t", "=ccs-1:1", "sleep 100001"]);
    let theirs = pid_of(&w.s, "=ccs-1:1");
    let o = w.sweep();
    w.control_reaped(&o);
    w.kept("shared", "window 1 (pane %");
    w.kept("shared", &format!("(pid {theirs}), not the chat's"));
    assert!(alive(theirs) && alive(w.agent("ccs-1")));
}

/// `swap-pane` between the chat's session and the user's, after ccs-reap has seen the chat: the
/// chat's session shows the user's shell, which is `foreign`, kept; the agent, now in the user's
/// session, is not touched either.
#[test]
fn a_pane_swapped_in_is_foreign_and_kept() {
    let w = world(true);
    let theirs = pid_of(&w.s, "=mine:0");
    w.s.ok(&["swap-pane", "-d", "-s", "=mine:0.0", "-t", "=ccs-1:0.0"]);
    assert_eq!(pid_of(&w.s, "=ccs-1:0"), theirs);
    let o = w.sweep();
    w.control_reaped(&o);
    w.kept("foreign", "swapped or moved");
    assert!(alive(theirs), "the user's pane was signalled");
    assert!(alive(w.agent("ccs-1")), "the chat's agent was signalled");
}

/// `join-pane` (and its alias `move-pane`) of the user's pane into the chat's window: `shared`.
#[test]
fn a_pane_joined_or_moved_in_keeps_the_chat_shared() {
    for verb in ["join-pane", "move-pane"] {
        let w = world(true);
        let theirs = pid_of(&w.s, "=mine:0");
        w.s.ok(&["split-window", "-d", "-t", "=mine:0", "sleep 100002"]);
        w.s.ok(&[verb, "-d", "-s", "=mine:0.1", "-t", "=ccs-1:0"]);
        let moved = pid_of(&w.s, "=ccs-1:0.1");
        let o = w.sweep();
        w.control_reaped(&o);
        w.kept("shared", "runs `sleep`");
        assert!(
            alive(moved) && alive(theirs),
            "{verb}: a user's pane was signalled"
        );
        assert!(alive(w.agent("ccs-1")), "{verb}");
    }
}

/// The chat's pane taken out of its session (`join-pane`/`move-pane` into the user's window,
/// `break-pane` into a window of the user's session), beside a window or a pane of the user's that
/// stays in the chat's session: what is left is not the chat (`foreign`), and neither it nor the
/// agent (now in `mine`) is signalled.
#[test]
fn the_chats_pane_taken_out_leaves_a_foreign_session() {
    for verb in ["join-pane", "move-pane", "break-pane"] {
        let w = world(true);
        // What stays: a window of the user's; for `break-pane`, a pane of the user's beside the
        // chat's (tmux 3.1c cannot break a window's only pane out).
        let theirs = if verb == "break-pane" {
            w.s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100003"]);
            pid_of(&w.s, "=ccs-1:0.1")
        } else {
            w.s.ok(&["new-window", "-d", "-t", "=ccs-1:1", "sleep 100003"]);
            pid_of(&w.s, "=ccs-1:1")
        };
        let to = if verb == "break-pane" {
            "=mine:"
        } else {
            "=mine:0"
        };
        w.s.ok(&[verb, "-d", "-s", "=ccs-1:0.0", "-t", to]);
        let o = w.sweep();
        w.control_reaped(&o);
        w.kept("foreign", "swapped or moved");
        assert!(alive(theirs), "{verb}");
        assert!(
            alive(w.agent("ccs-1")),
            "{verb}: the agent, moved out, was signalled"
        );
    }
}

/// `break-pane` of a pane split beside the chat into a window of its own, in the chat's session:
/// still `shared`.
#[test]
fn a_pane_broken_out_into_its_own_window_keeps_the_chat_shared() {
    let w = world(true);
    w.s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100004"]);
    w.s.ok(&["break-pane", "-d", "-s", "=ccs-1:0.1", "-t", "=ccs-1:"]);
    assert_eq!(
        w.s.ok(&[
            "display-message",
            "-p",
            "-t",
            "=ccs-1:",
            "#{session_windows}"
        ])
        .trim(),
        "2"
    );
    let o = w.sweep();
    w.control_reaped(&o);
    w.kept("shared", "runs `sleep`");
    assert!(alive(w.agent("ccs-1")));
}

/// `move-window` of the user's window into the chat's session: `shared`; and of the chat's
/// window out into the user's session, beside a window of the user's left in the chat's:
/// `foreign`. Nothing of either is signalled.
#[test]
fn a_window_moved_in_or_out_keeps_the_chat() {
    let w = world(true);
    let theirs = pid_of(&w.s, "=mine:0");
    w.s.ok(&["new-window", "-d", "-t", "=mine:1", "sleep 100005"]);
    w.s.ok(&["move-window", "-d", "-s", "=mine:0", "-t", "=ccs-1:3"]);
    let o = w.sweep();
    w.control_reaped(&o);
    w.kept("shared", "runs `sleep`");
    assert!(alive(theirs));

    // Out: the chat's window goes to `mine`; the user's window stays in the chat's session.
    w.s.ok(&["move-window", "-d", "-s", "=ccs-1:0", "-t", "=mine:7"]);
    w.s.idle_since(w.chat, HOUR);
    let o = w.s.once(DONE, GRACE, &[]);
    assert!(w.s.has("ccs-1"), "{}", o.stderr);
    w.kept("foreign", "swapped or moved");
    assert!(alive(theirs), "the user's window was signalled");
    assert!(
        alive(w.agent("ccs-1")),
        "the agent, moved out, was signalled"
    );
}

/// A `before` hook that waits for a gate file: the reap stands between its decision and its
/// fence until the test opens it.
fn gated_reaper(s: &Server) -> (Child, std::path::PathBuf) {
    let gate = s.path("gate");
    let hook = s.path("hook");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat >/dev/null\n[ \"$1\" = before ] || exit 0\necho waiting >>'{}'\nwhile [ ! -e '{}' ]; do sleep 0.05; done\nexit 0\n",
            s.path("hook.log").display(),
            gate.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hook = path_str(&hook);
    let child = s
        .reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "500"),
            ("CCS_REAP_HOOK", &hook),
            ("CCS_REAP_HOOK_TIMEOUT_MS", "20000"),
        ])
        .arg("--once")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(20.0, || std::fs::read_to_string(s.path("hook.log"))
            .is_ok_and(|l| l.contains("waiting"))),
        "the hook never ran"
    );
    (child, gate)
}

fn wait_exit(c: &mut Child) -> i32 {
    let mut code = None;
    assert!(wait_until(30.0, || {
        code = c.try_wait().unwrap().map(|st| st.code().unwrap_or(-1));
        code.is_some()
    }));
    code.unwrap_or(-1)
}

/// The fence re-reads every viewer and the chat's shape in the server: a client that comes to
/// watch through a session group, or a pane split beside the chat, between the decision and the
/// first signal, stops the reap; nothing is signalled.
#[test]
fn the_fence_stops_a_reap_watched_from_a_group_or_shared_since_the_decision() {
    for shape in ["group", "split"] {
        let mut s = Server::new();
        let n = s.chat("ccs-1", "c1", "");
        s.idle_since(n, HOUR);
        let agent = s.pids("ccs-1")["claude"];
        let (mut reaper, gate) = gated_reaper(&s);
        let mut theirs = None;
        match shape {
            "group" => {
                s.ok(&["new-session", "-d", "-t", "=ccs-1", "-s", "view"]);
                s.attach_control("view");
            }
            _ => {
                s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100006"]);
                theirs = Some(pid_of(&s, "=ccs-1:0.1"));
            }
        }
        std::fs::write(&gate, "").unwrap();
        let code = wait_exit(&mut reaper);
        assert!(matches!(code, 0 | 1), "{shape}: the reaper exited {code}");
        assert!(s.has("ccs-1"), "{shape}: the chat was reaped");
        assert!(alive(agent), "{shape}: the agent was signalled");
        assert!(
            theirs.is_none_or(alive),
            "{shape}: the user's pane was signalled"
        );
        let lines = s.audit_of("ccs-1");
        assert!(
            lines.iter().any(|l| l["outcome"] == "aborted"
                && l["error"].as_str().unwrap_or("").contains("fenced off")),
            "{shape}: {lines:?}"
        );
        s.detach_all();
    }
}

/// `spawn` records the new session's pane as the chat's, so even a chat that was never swept is
/// known by its pane: swapped before the first sweep, it is `foreign`, kept.
#[test]
fn spawn_records_the_chats_pane_at_once() {
    let s = Server::new();
    s.session("mine", "sleep 100000");
    s.run(&["spawn", "1", "--", &fake_claude(), "--resume", "c1"], &[]);
    let n: u32 = s
        .ok(&["display-message", "-p", "-t", "=ccs-1:", "#{session_id}"])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap();
    assert_eq!(
        s.show(n, "@ccs_pane").as_deref(),
        Some(pane_of(&s, "=ccs-1:").as_str())
    );
    s.idle_since(n, HOUR);
    let theirs = pid_of(&s, "=mine:0");
    s.ok(&["swap-pane", "-d", "-s", "=mine:0.0", "-t", "=ccs-1:0.0"]);
    s.once(DONE, GRACE, &[]);
    assert!(s.has("ccs-1") && alive(theirs));
    let row = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]))["ccs-1"].clone();
    assert_eq!(row["state"], "foreign", "{row}");
}

/// A pane split beside the chat after its fence, while the teardown waits out the grace for a
/// helper that ignores SIGTERM: neither the late look nor `kill-session` touches it (the session
/// is left with it), and the chat's own tree is gone.
#[test]
fn a_pane_split_beside_the_chat_during_its_teardown_is_never_signalled() {
    let s = Server::new();
    s.session("mine", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "stubborn");
    // The session outlives its agent's SIGTERM (as `spawn` makes them): the pane stays, dead.
    s.ok(&["set-option", "-w", "-t", "=ccs-1:0", "remain-on-exit", "on"]);
    s.idle_since(n, HOUR);
    let chat = s.pids("ccs-1");
    let mut reaper = s
        .reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "3000"),
        ])
        .arg("--once")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The tombstone is written past the fence, right before the first signal.
    assert!(
        wait_until(20.0, || s.tombstone("1").is_some()),
        "the reap never passed its fence"
    );
    s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100007"]);
    let theirs = pid_of(&s, "=ccs-1:0.1");
    let code = wait_exit(&mut reaper);
    assert!(matches!(code, 0 | 1), "the reaper exited {code}");
    assert!(
        alive(theirs),
        "the pane split during the teardown was signalled"
    );
    assert!(s.has("ccs-1"), "kill-session took the user's pane");
    for (kind, pid) in &chat {
        assert!(
            wait_until(5.0, || !alive(*pid)),
            "the chat's {kind} {pid} survived"
        );
    }
}
