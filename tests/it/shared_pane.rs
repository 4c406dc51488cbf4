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
    // Asleep since the reap's mark (its Unix ms).
    let at: i64 = s.show(n, "@ccs_asleep").unwrap().parse().unwrap();
    assert!((now_ms() - HOUR..=now_ms()).contains(&at), "{at}");
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

/// A `SessionStart` of conversation `cid`, as Claude Code sends it.
fn start_event(cid: &str) -> String {
    format!(
        r#"{{"session_id":"{cid}","transcript_path":"/t/{cid}.jsonl","cwd":"/t","hook_event_name":"SessionStart","source":"startup"}}"#
    )
}

/// An agent named `claude` (as the hook's ancestors show it) that fires its hook with
/// `events[i - 1]` once [`fire`] tells it to, then sleeps. Returns its directory (where
/// `hook.log` gathers what the hook said, at debug) and the script.
fn agent(s: &Server, events: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = s.path("agent");
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = String::from("#!/bin/sh\n");
    for (i, ev) in events.iter().enumerate() {
        let evf = dir.join(format!("ev{}", i + 1));
        std::fs::write(&evf, ev).unwrap();
        script += &format!(
            "while [ ! -e '{d}/go{i}' ]; do sleep 0.05; done\nenv CCS_TMUX_SOCKET_PATH='{sock}' CCS_REAP_STATE_DIR='{state}' CCS_LOG=debug '{bin}' claude-hook <'{evf}' >>'{d}/hook.log' 2>&1\necho {i} >>'{d}/done'\n",
            d = dir.display(),
            i = i + 1,
            evf = evf.display(),
            sock = s.sock.display(),
            state = s.state_dir().display(),
            bin = BIN,
        );
    }
    script += "exec sleep 100000\n";
    let path = dir.join("claude");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, path)
}

/// Let the agent of [`agent`] fire its `i`-th event, and wait until its hook has run.
fn fire(dir: &std::path::Path, i: u32) {
    std::fs::write(dir.join(format!("go{i}")), "").unwrap();
    assert!(
        wait_until(20.0, || std::fs::read_to_string(dir.join("done"))
            .is_ok_and(|d| d.lines().count() as u32 >= i)),
        "the agent's hook {i} did not run: {}",
        std::fs::read_to_string(dir.join("hook.log")).unwrap_or_default()
    );
}

/// The chat's agent's hook records its pane as the chat's where none is (a session shared
/// before any sweep, which a sweep cannot record) or where the recorded one is gone, never over
/// a recorded pane still there; a hook run by anyone else with the user's pane in `TMUX_PANE`
/// records nothing.
#[test]
fn the_agents_hook_records_its_own_pane_and_nothing_forged() {
    let s = Server::new();
    let ev = start_event("c1");
    let (dir, agent) = agent(&s, &[&ev, &ev, &ev, &ev, &ev]);
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

    let fire = |i: u32| fire(&dir, i);
    // 1. Nothing recorded: the agent's own pane is.
    fire(1);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(chat.as_str()));
    // 2. A recorded pane still there (the user's, say) is left as it is.
    s.set(n, "@ccs_pane", &theirs);
    fire(2);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(theirs.as_str()));
    // 3. A recorded pane that is gone, while another pane lives in the session: what is left
    // may be anyone's, so nothing is recorded over it.
    s.set(n, "@ccs_pane", "%999:1");
    fire(3);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some("%999:1"));
    // 4. The agent's pane alone, but the recorded pane lives on in another session (the chat's
    // pane swapped or moved out): not recorded either.
    s.ok(&["kill-pane", "-t", &theirs_id]);
    s.session("mine", "sleep 100015");
    let moved = show(&s, "=mine:0.0", "#{pane_id}:#{pane_pid}");
    s.set(n, "@ccs_pane", &moved);
    fire(4);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(moved.as_str()));
    // 5. The agent's pane alone, the recorded one gone from the server: the agent's own is.
    s.set(n, "@ccs_pane", "%999:1");
    fire(5);
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some(chat.as_str()));
}

/// A chat reaped by its pane (the session asleep), then the user's own `claude` started in
/// the pane left over: its hooks are the session's own agent's, the recorded pane is gone and
/// the session is one pane, yet it is never taken for the chat: nothing is recorded, its cid
/// does not replace the chat's, no turn or idle mark is set, and a sweep on the stale clock
/// keeps the session (it would kill the user's pane, and write the user's cid into the chat's
/// tombstone, the way back to the chat's conversation).
#[test]
fn the_users_agent_in_an_asleep_session_is_never_taken_for_the_chat() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.once(DONE, GRACE, &[("CCS_ENGINE_IDLE_KILL_MS", "86400000")]);
    let recorded = s.show(n, "@ccs_pane").expect("the chat's pane recorded");
    let (start, prompt, stop) = (
        start_event("c2"),
        r#"{"session_id":"c2","hook_event_name":"UserPromptSubmit","prompt":"hi"}"#,
        r#"{"session_id":"c2","hook_event_name":"Stop"}"#,
    );
    let (dir, agent) = agent(&s, &[&start, prompt, stop, &start]);
    s.ok(&["split-window", "-d", "-t", "=ccs-1:0", &path_str(&agent)]);
    let user: i32 = show(&s, "=ccs-1:0.1", "#{pane_pid}").parse().unwrap();
    s.idle_since(n, HOUR);
    let o = s.once(DONE, GRACE, &[PANE]);
    assert_eq!(s.audit_of("ccs-1").len(), 1, "{}", o.stderr);
    assert!(s.show(n, "@ccs_asleep").is_some());
    assert_eq!(panes(&s, "ccs-1").len(), 1);
    let cid_asleep = s.show(n, "@ccs_cid");
    for i in 1..=3 {
        fire(&dir, i);
    }
    let (pane, cid, turn) = (
        s.show(n, "@ccs_pane"),
        s.show(n, "@ccs_cid"),
        s.show(n, "@ccs_turn"),
    );
    // The stale clock: whatever the setting, the sweep keeps what is left, and says why.
    s.idle_since(n, HOUR);
    for env in [vec![PANE], vec![]] {
        let o = s.once(DONE, GRACE, &env);
        assert_eq!(s.audit_of("ccs-1").len(), 1, "{env:?}: {}", o.stderr);
        assert!(alive(user), "{env:?}: the user's pane was killed");
        assert!(s.has("ccs-1"));
    }
    let row = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT), PANE]))["ccs-1"].clone();
    assert_eq!(row["state"], "shared", "{row}");
    assert!(
        row["why"].as_str().unwrap_or("").starts_with("asleep: "),
        "{row}"
    );
    assert_eq!(s.tombstone("1").unwrap()["cid"], "c1");
    assert_eq!(pane.as_deref(), Some(recorded.as_str()));
    assert_eq!((cid, turn), (cid_asleep, None));
    // What the hook says it does there: nothing, and why.
    let tmux = format!("{},{},{n}", s.sock.display(), s.server_pid());
    let pane = show(&s, "=ccs-1:", "#{pane_id}");
    let mut c = s.reap(&[]);
    c.args(["claude-hook", "--dry-run"])
        .env("TMUX", &tmux)
        .env("TMUX_PANE", &pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    {
        use std::io::Write;
        let _ = child.stdin.take().unwrap().write_all(start.as_bytes());
    }
    let said = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).into_owned();
    assert!(
        said.contains(
            "nothing: ccs-1 is no longer the chat's: it sleeps since its chat's pane was reaped"
        ),
        "{said}"
    );
    // Nor with the record cleared (by hand): an empty record on one pane alone would be the
    // agent's to fill, but not in a session asleep.
    s.unset(n, "@ccs_pane");
    fire(&dir, 4);
    assert_eq!(s.show(n, "@ccs_pane"), None);
}

/// After a reap by pane, the user closes every pane but one of their own: the session is one
/// pane, not the chat's, and asleep. The sweep never judges it a chat again: kept, `shared`,
/// with WHY "asleep: ..." (when, and what to do), whatever its clock and the setting.
#[test]
fn an_asleep_session_left_with_one_user_pane_is_kept() {
    let (s, n, _chat, user) = shared_chat();
    let o = s.once(DONE, GRACE, &[PANE]);
    assert_eq!(s.audit_of("ccs-1").len(), 1, "{}", o.stderr);
    let at = s.show(n, "@ccs_asleep").expect("asleep");
    // The user closes their window: their split pane is all that is left.
    s.ok(&["kill-window", "-t", "=ccs-1:1"]);
    assert_eq!(panes(&s, "ccs-1").len(), 1);
    // Even with a record that names the pane left and a cid (written by anyone: a `claude` of
    // the user's there, once): still asleep, kept, the chat's tombstone left as it is.
    let left = show(&s, "=ccs-1:", "#{pane_id}:#{pane_pid}");
    s.set(n, "@ccs_pane", &left);
    s.set(n, "@ccs_cid", "c9");
    s.idle_since(n, HOUR);
    for env in [vec![PANE], vec![]] {
        let o = s.once(DONE, GRACE, &env);
        assert_eq!(s.audit_of("ccs-1").len(), 1, "{env:?}: {}", o.stderr);
        assert!(alive(user[0]), "{env:?}: the user's pane was killed");
        assert!(s.has("ccs-1"), "{env:?}");
    }
    let row = by_name(&s.status(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]))["ccs-1"].clone();
    assert_eq!(row["state"], "shared", "{row}");
    let why = row["why"].as_str().unwrap_or("");
    assert!(
        why.starts_with("asleep: its chat's pane was reaped at ")
            && why.contains("kill-session")
            && !why.contains("unknown"),
        "{at}: {row}"
    );
    s.run_expect(RESPAWN, &["turn", "begin", "1"], &[]);
    assert_eq!(s.tombstone("1").unwrap()["cid"], "c1");
}

/// The pane record's own test-and-set, on a real tmux (so on every tmux of the matrix): the
/// hook's read and its write are two moments, so the server itself refuses the write on a
/// session asleep, and over a recorded pane gone while another pane lives in the session; it
/// writes once the session is that pane alone.
#[test]
fn the_servers_own_test_refuses_the_record_asleep_or_shared() {
    use ccs_reap::adapters::tmux::{Socket, Tmux};
    use ccs_reap::core::policy::chat_pane::PaneRecord;
    let s = Server::new();
    let n = s.session("ccs-1", "sleep 100016");
    let own = PaneRecord::parse(&show(&s, "=ccs-1:", "#{pane_id}:#{pane_pid}")).unwrap();
    let tmux = Tmux::new(
        Socket::Path(s.sock.clone()),
        std::time::Duration::from_secs(10),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let record = || {
        rt.block_on(tmux.record_own_pane(ccs_reap::core::policy::TmuxId(n), &own))
            .unwrap()
    };
    // Asleep, nothing recorded, one pane: refused.
    s.set(n, "@ccs_asleep", "1700000000000");
    assert!(!record());
    assert_eq!(s.show(n, "@ccs_pane"), None);
    s.unset(n, "@ccs_asleep");
    // The recorded pane gone, another pane beside: refused.
    s.set(n, "@ccs_pane", "%999:1");
    s.ok(&["split-window", "-d", "-t", "=ccs-1:0", "sleep 100017"]);
    assert!(!record());
    assert_eq!(s.show(n, "@ccs_pane").as_deref(), Some("%999:1"));
    // Alone again: written.
    s.ok(&["kill-pane", "-t", "=ccs-1:0.1"]);
    assert!(record());
    assert_eq!(s.show(n, "@ccs_pane"), Some(own.value()));
}
