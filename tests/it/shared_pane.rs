//! A shared session reaped by its chat's pane (issue 49, `CCS_ENGINE_SHARED_SESSION=pane`), and
//! the chat's pane recorded by its agent's own hook (49.2), on a real tmux: the reap takes the
//! chat's own pane and process tree (its setsid'd daemon found by its `TMUX_PANE`), never the
//! user's pane, window or setsid'd process beside it; the session stays, marked asleep, so
//! `turn begin` answers "respawn" and `resume`/`spawn` refuse with why until what is left goes;
//! the fence re-checks the pane and its viewers; and a hook records its pane only when the
//! agent that fired it runs in that very pane, never on a `TMUX_PANE` anyone could set.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Stdio};

use crate::common::*;

const GRACE: u64 = 1000;
const HOUR: i64 = 3_600_000;
const PANE: (&str, &str) = ("CCS_ENGINE_SHARED_SESSION", "pane");

/// `#{fmt}` of `target`.
fn show(s: &Server, target: &str, fmt: &str) -> String {
    s.ok(&["display-message", "-p", "-t", target, fmt])
        .trim()
        .to_string()
}

/// The pane ids of session `name`, every window.
fn panes(s: &Server, name: &str) -> Vec<String> {
    s.ok(&[
        "list-panes",
        "-s",
        "-t",
        &format!("={name}:"),
        "-F",
        "#{pane_id}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// The chat `ccs-1` (a fake claude with a child and a setsid'd daemon), seen once by a sweep
/// that keeps it (its pane recorded), then shared by the user: a pane split beside it running a
/// `sleep` that starts a setsid'd `sleep` of its own (out of the pane's tree and session, found
/// only by its environment, like the chat's daemon), and a window of the user's. Returns the
/// server, the chat's `$N`, the chat's pids, and the user's three pids.
fn shared_chat() -> (Server, u32, Vec<(String, i32)>, Vec<i32>) {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain,daemon");
    s.once(DONE, GRACE, &[("CCS_ENGINE_IDLE_KILL_MS", "86400000")]);
    assert_eq!(
        s.show(n, "@ccs_pane").as_deref(),
        Some(show(&s, "=ccs-1:", "#{pane_id}:#{pane_pid}").as_str())
    );
    let escaped = s.path("mine.pids");
    s.ok(&[
        "split-window",
        "-d",
        "-t",
        "=ccs-1:0",
        &format!(
            "(setsid sh -c 'echo user $$ >>{}; exec sleep 100011' &) ; exec sleep 100010",
            escaped.display()
        ),
    ]);
    s.ok(&["new-window", "-d", "-t", "=ccs-1:1", "sleep 100012"]);
    assert!(
        wait_until(10.0, || pids_in(&escaped).len() == 1),
        "the user's setsid'd sleep did not start"
    );
    let user = vec![
        show(&s, "=ccs-1:0.1", "#{pane_pid}").parse().unwrap(),
        pids_in(&escaped)[0],
        show(&s, "=ccs-1:1", "#{pane_pid}").parse().unwrap(),
    ];
    s.idle_since(n, HOUR);
    let chat = s.pid_list("ccs-1");
    (s, n, chat, user)
}

/// With the setting, the idle chat of a shared session is reaped by its own pane: its whole tree
/// (the daemon too) dies, its pane goes, its tombstone keeps its cid; the user's pane, window and
/// setsid'd process live on, and so does the session, marked asleep and unmarked. `turn begin`
/// answers "respawn"; `resume` and `spawn` refuse, saying why; once the user's panes are gone,
/// `spawn` brings the chat back with its conversation. Without the setting (the control) it is
/// kept, `shared`.
#[test]
fn a_shared_session_is_reaped_by_its_chats_pane_alone_with_the_setting() {
    // Garbage is refused, with what is accepted.
    let s = Server::new();
    let o = s.sweep(CONFIG, &[], &[("CCS_ENGINE_SHARED_SESSION", "session")]);
    assert!(o.stderr.contains("keep or pane"), "{}", o.stderr);
    drop(s);

    let (s, n, chat, user) = shared_chat();
    let chat_pane = s.show(n, "@ccs_pane").unwrap();
    let chat_id = chat_pane.split(':').next().unwrap().to_string();
    // The control: the default keeps it, shared, nothing signalled.
    let o = s.once(DONE, GRACE, &[]);
    assert!(s.audit_of("ccs-1").is_empty(), "{}", o.stderr);
    let row = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]))["ccs-1"].clone();
    assert_eq!(row["state"], "shared", "{row}");
    let row = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT), PANE]))["ccs-1"].clone();
    assert_eq!(row["state"], "expired", "{row}");
    assert!(
        row["why"]
            .as_str()
            .unwrap_or("")
            .contains("shared session: only the chat's pane"),
        "{row}"
    );

    let o = s.once(DONE, GRACE, &[PANE]);
    let a = s.audit_of("ccs-1");
    assert_eq!(a.len(), 1, "{a:?} {}", o.stderr);
    assert_eq!(a[0]["outcome"], "reaped", "{a:?}");
    for (kind, pid) in &chat {
        assert!(
            wait_until(5.0, || !alive(*pid)),
            "the chat's {kind} {pid} survived"
        );
    }
    for pid in &user {
        assert!(alive(*pid), "the user's process {pid} was signalled");
    }
    assert!(s.has("ccs-1"), "the session went with the chat's pane");
    let left = panes(&s, "ccs-1");
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!left.contains(&chat_id), "the chat's pane stays: {left:?}");
    assert_eq!(s.show(n, "@ccs_asleep").as_deref(), Some("1"));
    assert_eq!(s.show(n, "@ccs_reaping"), None);
    assert_eq!(s.tombstone("1").unwrap()["cid"], "c1");

    // What is left is the user's: a studio's `turn begin` is told to respawn, and `resume` and
    // `spawn` refuse to start the chat in it, saying why.
    s.run_expect(RESPAWN, &["turn", "begin", "1"], &[]);
    for args in [vec!["resume", "1"], vec!["spawn", "1"]] {
        let o = s.run_expect(FAILED, &args, &[]);
        assert!(
            o.stderr.contains("no longer holds its chat") && o.stderr.contains("kill-session"),
            "{args:?}: {}",
            o.stderr
        );
    }
    assert_eq!(panes(&s, "ccs-1").len(), 2);
    for pid in &user {
        assert!(alive(*pid), "the user's process {pid} was signalled");
    }
    // Nothing of the user's is left: the chat comes back with its conversation, from its
    // tombstone (this chat's own command line was not `spawn`'s to keep: the studio gives it).
    s.ok(&["kill-session", "-t", "=ccs-1"]);
    s.run(&["spawn", "1", "--", &fake_claude()], &[]);
    assert!(s.has("ccs-1"));
    let start = show(&s, "=ccs-1:", "#{pane_start_command}");
    assert!(
        start.contains("--resume") && start.contains("c1"),
        "{start}"
    );
}

/// A `before` hook that waits for a gate file, for a sweep with the setting: the reap stands
/// between its decision and its fence until the test opens it.
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
            PANE,
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

/// The fence of a reap by the chat's pane re-reads that pane and its viewers in the server: the
/// chat's pane swapped out for the user's, or a client come to watch the session, between the
/// decision and the first signal, stops the reap; nothing is signalled, the session is whole.
#[test]
fn the_fence_stops_a_pane_reap_swapped_or_watched_since_the_decision() {
    for shape in ["swap", "watch"] {
        let (mut s, _n, chat, user) = shared_chat();
        s.session("mine", "sleep 100013");
        let (mut reaper, gate) = gated_reaper(&s);
        match shape {
            "swap" => {
                s.ok(&["swap-pane", "-d", "-s", "=mine:0.0", "-t", "=ccs-1:0.0"]);
            }
            _ => {
                s.attach_control("ccs-1");
            }
        }
        std::fs::write(&gate, "").unwrap();
        let mut code = None;
        assert!(wait_until(30.0, || {
            code = reaper.try_wait().unwrap().map(|st| st.code().unwrap_or(-1));
            code.is_some()
        }));
        assert!(matches!(code, Some(0 | 1)), "{shape}: exited {code:?}");
        for (kind, pid) in &chat {
            assert!(alive(*pid), "{shape}: the chat's {kind} was signalled");
        }
        for pid in &user {
            assert!(alive(*pid), "{shape}: the user's {pid} was signalled");
        }
        assert_eq!(panes(&s, "ccs-1").len(), 3, "{shape}");
        let lines = s.audit_of("ccs-1");
        assert!(
            lines.iter().any(|l| l["outcome"] == "aborted"
                && l["error"].as_str().unwrap_or("").contains("fenced off")),
            "{shape}: {lines:?}"
        );
        s.detach_all();
    }
}

/// The chat's agent's hook records its pane as the chat's where none is (a session shared
/// before any sweep, which a sweep cannot record) or where the recorded one is gone, never over
/// a recorded pane still there; a hook run by anyone else with the user's pane in `TMUX_PANE`
/// records nothing.
#[test]
fn the_agents_hook_records_its_own_pane_and_nothing_forged() {
    let s = Server::new();
    let dir = s.path("agent");
    std::fs::create_dir_all(&dir).unwrap();
    // An agent named `claude` (as the hook's ancestors show it), firing SessionStart when told.
    let agent = dir.join("claude");
    let ev = r#"{"session_id":"c1","transcript_path":"/t/c1.jsonl","cwd":"/t","hook_event_name":"SessionStart","source":"startup"}"#;
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nfor i in 1 2 3; do\n  while [ ! -e '{d}/go'$i ]; do sleep 0.05; done\n  printf '%s' '{ev}' | env CCS_TMUX_SOCKET_PATH='{sock}' CCS_REAP_STATE_DIR='{state}' CCS_LOG=debug '{bin}' claude-hook >>'{d}/hook.log' 2>&1\n  echo $i >>'{d}/done'\ndone\nexec sleep 100000\n",
            d = dir.display(),
            sock = s.sock.display(),
            state = s.state_dir().display(),
            bin = BIN,
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let n = s.session("ccs-1", &path_str(&agent));
    let chat = show(&s, "=ccs-1:0.0", "#{pane_id}:#{pane_pid}");
    s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100014"]);
    let theirs_id = show(&s, "=ccs-1:0.1", "#{pane_id}");
    let theirs = show(&s, "=ccs-1:0.1", "#{pane_id}:#{pane_pid}");
    // A sweep cannot record a pane in a session it first sees shared.
    s.once(DONE, GRACE, &[("CCS_ENGINE_IDLE_KILL_MS", "86400000")]);
    assert_eq!(s.show(n, "@ccs_pane"), None);
    // A hook run by hand from the user's pane (its `TMUX_PANE` set by whoever ran it): nothing.
    let tmux = format!("{},{},{n}", s.sock.display(), s.server_pid());
    let mut c = s.reap(&[]);
    c.arg("claude-hook")
        .env("TMUX", &tmux)
        .env("TMUX_PANE", &theirs_id)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    {
        use std::io::Write;
        let _ = child.stdin.take().unwrap().write_all(ev.as_bytes());
    }
    child.wait().unwrap();
    assert_eq!(
        s.show(n, "@ccs_pane"),
        None,
        "a forged TMUX_PANE was recorded"
    );

    let fire = |i: u32| {
        std::fs::write(dir.join(format!("go{i}")), "").unwrap();
        assert!(
            wait_until(20.0, || std::fs::read_to_string(dir.join("done"))
                .is_ok_and(|d| d.lines().count() as u32 >= i)),
            "the agent's hook {i} did not run: {}",
            std::fs::read_to_string(dir.join("hook.log")).unwrap_or_default()
        );
    };
    // 1. Nothing recorded: the agent's own pane is.
    fire(1);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(chat.as_str()));
    // 2. A recorded pane still there (the user's, say) is left as it is.
    s.set(n, "@ccs_pane", &theirs);
    fire(2);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(theirs.as_str()));
    // 3. A recorded pane that is gone is replaced by the agent's own.
    s.set(n, "@ccs_pane", "%999:1");
    fire(3);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(chat.as_str()));
}
