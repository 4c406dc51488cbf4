//! `ccs-reap claude-hook` and `claude-settings` on a real tmux server: each hook event as Claude
//! Code 2.1.332 sends it, run the way claude runs it (inside a pane: `TMUX` and `TMUX_PANE` set),
//! and what it leaves on the session; the block of a prompt sent to a chat that a reap holds;
//! nothing done (and exit 0) outside tmux, on another server, in another session, on garbage or
//! on a stdin that never closes; and the printed settings' command run through a shell.

use crate::common::*;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CID: &str = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";

fn pane_of(s: &Server, n: u32) -> String {
    s.ok(&[
        "display-message",
        "-p",
        "-t",
        &format!("${n}:"),
        "#{pane_id}",
    ])
    .trim()
    .to_string()
}

/// `TMUX` as tmux sets it in a pane of `s`.
fn tmux_env(s: &Server) -> String {
    format!("{},{},0", s.sock.display(), s.server_pid())
}

/// Run `claude-hook` with `event` on stdin, from `pane` with `tmux` as `TMUX` (None: outside
/// tmux), and `env` on top of the test server's settings.
fn hook(s: &Server, tmux: Option<&str>, pane: &str, event: &str, env: &[(&str, &str)]) -> Out {
    let mut c = s.reap(env);
    c.arg("claude-hook")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = tmux {
        c.env("TMUX", t).env("TMUX_PANE", pane);
    }
    let mut child = c.spawn().unwrap();
    // A hook that has nothing to do (outside tmux, say) may exit before it reads its stdin: a
    // broken pipe here is its right, as it is Claude Code's to ignore.
    if let Err(e) = child.stdin.take().unwrap().write_all(event.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let o = Out::from(child.wait_with_output().unwrap());
    no_panic(&o);
    assert!(
        o.stdout.is_empty(),
        "claude-hook wrote on stdout: {}",
        o.stdout
    );
    o
}

fn ev(name: &str, extra: &str) -> String {
    format!(
        r#"{{"session_id":"{CID}","transcript_path":"/t/{CID}.jsonl","cwd":"/t","hook_event_name":"{name}"{extra}}}"#
    )
}

#[test]
fn each_event_marks_the_chat_whose_pane_it_runs_in() {
    let s = Server::new();
    let n = s.session("ccs-h1", "sleep 100000");
    let pane = pane_of(&s, n);
    let t = tmux_env(&s);
    let ok = |event: &str| {
        let o = hook(&s, Some(&t), &pane, event, &[]);
        assert_eq!(o.code, 0, "{event}: {}", o.stderr);
        assert!(o.stderr.is_empty(), "{event}: {}", o.stderr);
    };

    // SessionStart: the cid, and the idle clock starts with it (a known id never sits beside an
    // old clock, or none).
    let t0 = now_ms();
    ok(&ev("SessionStart", r#","source":"startup","model":"m""#));
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(CID));
    let idle0 = s.show(n, "@ccs_idle");
    assert!(
        idle0
            .as_deref()
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|v| v >= t0),
        "{idle0:?}"
    );
    // An invalid one is refused, the known one kept.
    let o = hook(
        &s,
        Some(&t),
        &pane,
        r#"{"hook_event_name":"SessionStart","session_id":"x;y","source":"clear"}"#,
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(CID));

    // UserPromptSubmit: a turn.
    assert_eq!(s.show(n, "@ccs_turn"), None);
    let t0 = now_ms();
    ok(&ev(
        "UserPromptSubmit",
        r#","prompt":"hello","permission_mode":"auto""#,
    ));
    let turn: i64 = s.show(n, "@ccs_turn").unwrap().parse().unwrap();
    assert!(turn >= t0, "{turn} < {t0}");

    // Stop with background work: still busy, the turn's start kept.
    ok(&ev(
        "Stop",
        r#","stop_hook_active":false,"last_assistant_message":"ok","background_tasks":[{"id":"b1","type":"bash"}]"#,
    ));
    assert_eq!(s.show(n, "@ccs_turn"), Some(turn.to_string()));
    assert_eq!(s.show(n, "@ccs_idle"), idle0);

    // Stop with none: the turn ends, the idle clock starts.
    ok(&ev(
        "Stop",
        r#","stop_hook_active":false,"last_assistant_message":"ok","background_tasks":[],"session_crons":[]"#,
    ));
    assert_eq!(s.show(n, "@ccs_turn"), None);
    let idle: i64 = s.show(n, "@ccs_idle").unwrap().parse().unwrap();
    assert!(idle >= turn);
    // Claude Code's background summary: a PreCompact (auto) with nothing after it, here after the
    // turn's Stop, leaves the chat idle.
    ok(&ev(
        "PreCompact",
        r#","trigger":"auto","custom_instructions":null"#,
    ));
    assert_eq!(s.show(n, "@ccs_turn"), None);
    assert_eq!(s.show(n, "@ccs_idle"), Some(idle.to_string()));

    // A `/compact`: busy from PreCompact to PostCompact (no Stop follows it).
    ok(&ev(
        "PreCompact",
        r#","trigger":"manual","custom_instructions":null"#,
    ));
    assert!(s.show(n, "@ccs_turn").is_some());
    ok(&ev("SessionStart", r#","source":"compact""#));
    assert!(s.show(n, "@ccs_turn").is_some());
    ok(&ev(
        "PostCompact",
        r#","trigger":"manual","compact_summary":"s""#,
    ));
    assert_eq!(s.show(n, "@ccs_turn"), None);

    // An automatic compaction inside a turn: its PostCompact leaves the turn to its Stop.
    ok(&ev("UserPromptSubmit", r#","prompt":"more""#));
    ok(&ev("PreCompact", r#","trigger":"auto""#));
    ok(&ev("PostCompact", r#","trigger":"auto""#));
    assert!(s.show(n, "@ccs_turn").is_some());

    // SessionEnd: the turn is cleared, the idle clock left as it was.
    let idle_before = s.show(n, "@ccs_idle");
    ok(&ev("SessionEnd", r#","reason":"other""#));
    assert_eq!(s.show(n, "@ccs_turn"), None);
    assert_eq!(s.show(n, "@ccs_idle"), idle_before);
    // And again, on nothing to clear.
    ok(&ev("SessionEnd", r#","reason":"other""#));

    // The cid reaches tmux as it is: a SessionStart of a new conversation (`/clear`).
    ok(&ev("SessionStart", r#","source":"clear""#).replace(CID, "new-conversation_2"));
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some("new-conversation_2"));
}

#[test]
fn turn_end_uses_up_the_tombstone_as_turn_end_does() {
    let s = Server::new();
    let n = s.session("ccs-h2", "sleep 100000");
    let pane = pane_of(&s, n);
    // A tombstone left by a reap, as `spawn` leaves it until a turn goes through.
    let fake = fake_claude();
    s.run(&["spawn", "h3", "--cid", CID, "--", &fake], &[]);
    s.run(&["reap", "h3", "--force"], &[("CCS_REAP_GRACE_MS", "500")]);
    assert!(s.tombstone("h3").is_some());
    // claude's Stop in h2 leaves h3's tombstone alone; h3's own Stop uses it up.
    let t = tmux_env(&s);
    let o = hook(
        &s,
        Some(&t),
        &pane,
        &ev("Stop", r#","background_tasks":[]"#),
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(s.tombstone("h3").is_some());
    s.run(&["spawn", "h3", "--", &fake], &[]);
    let n3: u32 = s
        .ok(&["display-message", "-p", "-t", "=ccs-h3:", "#{session_id}"])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap();
    let o = hook(&s, Some(&t), &pane_of(&s, n3), &ev("Stop", ""), &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        s.tombstone("h3").is_none(),
        "the tombstone survived the turn"
    );
    assert!(s.show(n3, "@ccs_idle").is_some());
}

#[test]
fn a_prompt_to_a_chat_a_reap_holds_is_blocked_with_one_line() {
    let s = Server::new();
    let n = s.session("ccs-h4", "sleep 100000");
    let pane = pane_of(&s, n);
    let t = tmux_env(&s);
    let prompt = ev("UserPromptSubmit", r#","prompt":"are you there""#);
    let fence = |tok: &str| {
        s.ok(&[
            "set-environment",
            "-t",
            &format!("${n}"),
            "CCS_REAP_FENCED",
            tok,
        ]);
    };

    // A live reap past its fence (its mark, its token, and the fence's own mark of that token):
    // blocked, exit 2, one line for the user; no turn marked; an audit line says so.
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    s.set_token(n, "f2_1_2_3_4_5_past");
    fence("f2_1_2_3_4_5_past");
    let t0 = Instant::now();
    let o = hook(&s, Some(&t), &pane, &prompt, &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("being reaped") && o.stderr.contains("h4"),
        "{}",
        o.stderr
    );
    assert!(
        !o.stderr.contains("-- claude"),
        "the way back names no agent's command: {}",
        o.stderr
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "it waited: {:?}",
        t0.elapsed()
    );
    assert_eq!(s.show(n, "@ccs_turn"), None);
    assert!(s.show(n, "@ccs_reaping").is_some());
    let lines = s.audit_of("ccs-h4");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "prompt-refused", "{lines:?}");
    // Stop and PreCompact do not mark a turn under a reap either (and never block).
    for e in [
        ev("PreCompact", r#","trigger":"auto""#),
        ev("Stop", r#","background_tasks":[1]"#),
    ] {
        let o = hook(&s, Some(&t), &pane, &e, &[]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert_eq!(s.show(n, "@ccs_turn"), None);
    }

    // The fence's mark of another reap's token, or none: this reap has not passed its fence, and
    // the prompt takes the chat back: the mark is cleared (that reap aborts at its fence), the
    // turn begins, the prompt goes through.
    for fenced in [Some("f2_1_2_3_4_5_other"), None] {
        s.set(n, "@ccs_reaping", &now_ms().to_string());
        s.set_token(n, "f2_1_2_3_4_5_live");
        match fenced {
            Some(tok) => fence(tok),
            None => {
                s.ok(&[
                    "set-environment",
                    "-u",
                    "-t",
                    &format!("${n}"),
                    "CCS_REAP_FENCED",
                ]);
            }
        }
        let o = hook(&s, Some(&t), &pane, &prompt, &[]);
        assert_eq!(o.code, 0, "{fenced:?}: {}", o.stderr);
        assert_eq!(s.show(n, "@ccs_reaping"), None, "{fenced:?}");
        assert!(s.show(n, "@ccs_turn").is_some(), "{fenced:?}");
        s.unset(n, "@ccs_turn");
    }

    // A mark left a day ago by a reaper nobody can find, never fenced: taken back as well (the
    // next sweep would have cleared it).
    s.set(n, "@ccs_reaping", &(now_ms() - 86_400_000).to_string());
    let o = hook(&s, Some(&t), &pane, &prompt, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(s.show(n, "@ccs_reaping"), None);
    assert!(s.show(n, "@ccs_turn").is_some());

    // No mark: a turn.
    s.unset(n, "@ccs_turn");
    let o = hook(&s, Some(&t), &pane, &prompt, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(s.show(n, "@ccs_turn").is_some());
}

#[test]
fn elsewhere_or_on_garbage_it_does_nothing_and_exits_0() {
    let s = Server::new();
    let n = s.session("ccs-h5", "sleep 100000");
    let other = s.session("notes", "sleep 100000");
    let pane = pane_of(&s, n);
    let t = tmux_env(&s);
    let start = ev("SessionStart", r#","source":"startup""#);
    let prompt = ev("UserPromptSubmit", r#","prompt":"x""#);
    let quiet = |o: Out, what: &str| {
        assert_eq!(o.code, 0, "{what}: {}", o.stderr);
        assert!(o.stderr.is_empty(), "{what}: {}", o.stderr);
    };

    // Outside tmux.
    quiet(hook(&s, None, &pane, &start, &[]), "outside tmux");
    // Another server's socket (the same pane id means nothing there).
    let s2 = Server::new();
    s2.session("ccs-h5", "sleep 100000");
    let t2 = format!("{},{},0", s2.sock.display(), s2.server_pid());
    quiet(hook(&s, Some(&t2), &pane, &start, &[]), "another server");
    // The configured socket's server, but a session that is not a chat.
    quiet(
        hook(&s, Some(&t), &pane_of(&s, other), &start, &[]),
        "another session",
    );
    quiet(
        hook(&s, Some(&t), &pane_of(&s, other), &prompt, &[]),
        "another session",
    );
    // The same chat under another prefix.
    quiet(
        hook(
            &s,
            Some(&t),
            &pane,
            &start,
            &[("CCS_SESSION_PREFIX", "chat-")],
        ),
        "another prefix",
    );
    // A pane id that is no pane id, or no pane.
    quiet(hook(&s, Some(&t), "=ccs-h5:", &start, &[]), "not a pane id");
    quiet(hook(&s, Some(&t), "%9999", &start, &[]), "no such pane");
    assert_eq!(s.show(n, "@ccs_cid"), None);
    assert_eq!(s.show(other, "@ccs_cid"), None);
    assert_eq!(s.show(n, "@ccs_turn"), None);
    assert_eq!(s.show(other, "@ccs_turn"), None);

    // Garbage and a bad setting: one line on stderr, exit 0.
    for (event, env) in [
        ("not json", vec![]),
        (r#"{"hook_event_name": 5}"#, vec![]),
        (start.as_str(), vec![("CCS_TMUX_TIMEOUT_MS", "soon")]),
    ] {
        let o = hook(&s, Some(&t), &pane, event, &env);
        assert_eq!(o.code, 0, "{event}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{event}: {}", o.stderr);
        assert!(
            o.stderr.starts_with("ccs-reap claude-hook: "),
            "{}",
            o.stderr
        );
    }
    // A dead server behind the socket: exit 0, quietly (nothing to mark).
    s2.ok(&["kill-server"]);
    quiet(hook(&s, Some(&t2), &pane, &start, &[]), "no server");
}

#[test]
fn it_never_waits_past_the_tmux_timeout() {
    let s = Server::new();
    let n = s.session("ccs-h6", "sleep 100000");
    let pane = pane_of(&s, n);
    let t = tmux_env(&s);
    // A stdin that never closes.
    let mut c = s.reap(&[("CCS_TMUX_TIMEOUT_MS", "300")]);
    c.arg("claude-hook")
        .env("TMUX", &t)
        .env("TMUX_PANE", &pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"hook_event_name\":").unwrap();
    let o = Out::from(child.wait_with_output().unwrap());
    let took = t0.elapsed();
    drop(stdin);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("within 300ms"), "{}", o.stderr);
    assert!(took < Duration::from_millis(2000), "took {took:?}");
    // A server that does not answer (stopped): the tmux call is given up on within the budget.
    let pid = s.server_pid();
    /// Wakes the server up however the test ends (a stopped server would hang the clean-up).
    struct Cont(i32);
    impl Drop for Cont {
        fn drop(&mut self) {
            let _ = signal(self.0, Signal::CONT);
        }
    }
    let cont = Cont(pid);
    signal(pid, Signal::STOP).unwrap();
    let t0 = Instant::now();
    let o = hook(
        &s,
        Some(&t),
        &pane,
        &ev("UserPromptSubmit", ""),
        &[("CCS_TMUX_TIMEOUT_MS", "300")],
    );
    let took = t0.elapsed();
    drop(cont);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("300ms"), "{}", o.stderr);
    assert!(took < Duration::from_millis(2000), "took {took:?}");
}

#[test]
fn the_printed_settings_run_the_hook_through_a_shell_with_their_settings() {
    let s = Server::new();
    let n = s.session("cc_x", "sleep 100000");
    let pane = pane_of(&s, n);
    // A prefix and a state dir that only the settings carry (and a quote in the state dir).
    let state = s.path("it's state");
    let o = s.run(
        &["claude-settings"],
        &[
            ("CCS_SESSION_PREFIX", "cc_"),
            ("CCS_REAP_STATE_DIR", state.to_str().unwrap()),
            ("CCS_TMUX_TIMEOUT_MS", "2s"),
        ],
    );
    let v = o.json();
    let hooks = v["hooks"].as_object().unwrap();
    for e in [
        "SessionStart",
        "UserPromptSubmit",
        "Stop",
        "PreCompact",
        "PostCompact",
        "SessionEnd",
    ] {
        assert_eq!(hooks[e][0]["hooks"][0]["type"], "command", "{e}");
    }
    let cmd = hooks["Stop"][0]["hooks"][0]["command"].as_str().unwrap();
    assert!(cmd.ends_with(" claude-hook"), "{cmd}");
    assert!(cmd.contains(&format!("'{BIN}'")), "{cmd}");
    assert!(cmd.contains("CCS_TMUX_TIMEOUT_MS='2000'"), "{cmd}");
    assert!(cmd.contains("CCS_SESSION_PREFIX='cc_'"), "{cmd}");

    // Run as claude runs it: through a shell, in the pane, with nothing of ccs-reap's in the
    // environment but what the command sets.
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("TMUX", tmux_env(&s))
        .env("TMUX_PANE", &pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin
                .take()
                .unwrap()
                .write_all(ev("SessionStart", r#","source":"startup""#).as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(CID));

    // --write: into a file with the user's own settings and hooks, twice.
    let f = s.path("settings.json");
    std::fs::write(
        &f,
        r#"{"permissions":{"allow":["Bash(ls)"]},"hooks":{"Stop":[{"hooks":[{"type":"command","command":"notify-send done"}]}]}}"#,
    )
    .unwrap();
    let w = |want_changed: bool| {
        let o = s.run(
            &["claude-settings", "--write", f.to_str().unwrap(), "--json"],
            &[],
        );
        assert_eq!(o.json()["changed"], want_changed, "{}", o.stdout);
        std::fs::read_to_string(&f).unwrap()
    };
    let first = w(true);
    let second = w(false);
    assert_eq!(first, second);
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["permissions"]["allow"][0], "Bash(ls)");
    let stop = v["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 2, "{stop:?}");
    assert_eq!(stop[0]["hooks"][0]["command"], "notify-send done");
    assert!(stop[1]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with(" claude-hook"));
    // A file that is not JSON is left alone, and said so.
    std::fs::write(&f, "{ not json").unwrap();
    let o = s.run_any(&["claude-settings", "--write", f.to_str().unwrap()], &[]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("not valid JSON"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "{ not json");
}

/// A `session_id` longer than a cid may be (200 bytes, the limit of ids) is refused with one line
/// on stderr, the known cid kept; and such a cid, set by hand, never reaches a tombstone.
#[test]
fn a_session_id_longer_than_a_cid_may_be_is_refused_and_the_known_cid_kept() {
    let s = Server::new();
    let n = s.session("ccs-h9", "sleep 100000");
    let pane = pane_of(&s, n);
    let t = tmux_env(&s);
    let o = hook(
        &s,
        Some(&t),
        &pane,
        &ev("SessionStart", r#","source":"startup""#),
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(CID));
    let long = "a".repeat(16_300);
    let event =
        format!(r#"{{"hook_event_name":"SessionStart","session_id":"{long}","source":"resume"}}"#);
    let o = hook(&s, Some(&t), &pane, &event, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains("16300 bytes"), "{}", o.stderr);
    assert_eq!(
        s.show(n, "@ccs_cid").as_deref(),
        Some(CID),
        "the known cid was not kept"
    );
    // Set by hand, it is no cid: the chat is kept as one whose conversation is unknown.
    s.set(n, "@ccs_cid", &"b".repeat(201));
    s.idle_since(n, 10_000_000);
    s.once(DONE, 200, &[]);
    assert!(
        s.has("ccs-h9"),
        "a chat was reaped on a cid too long to resume"
    );
    assert!(s.tombstone("h9").is_none());
}

/// `claude-settings --resume-threshold` (issue 43.9): the settings' `env` block gets the resume
/// threshold `spawn` sets for a claude it resumes, printed and written; the user's own variables
/// kept; without the flag, nothing of it.
#[test]
fn claude_settings_resume_threshold_puts_the_threshold_into_the_env_block() {
    let s = Server::new();
    let printed = s
        .run(&["claude-settings", "--resume-threshold"], &[])
        .json();
    assert_eq!(
        printed["env"]["CLAUDE_CODE_RESUME_THRESHOLD_MINUTES"], "1000000000",
        "{printed}"
    );
    assert!(printed["hooks"]["SessionStart"].is_array(), "{printed}");
    let plain = s.run(&["claude-settings"], &[]).json();
    assert!(plain.get("env").is_none(), "{plain}");
    let f = s.path("settings.json");
    std::fs::write(&f, r#"{"env":{"FOO":"bar"}}"#).unwrap();
    let file = f.to_str().unwrap();
    s.run(
        &["claude-settings", "--write", file, "--resume-threshold"],
        &[],
    );
    let first = std::fs::read_to_string(&f).unwrap();
    s.run(
        &["claude-settings", "--write", file, "--resume-threshold"],
        &[],
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), first);
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["env"]["FOO"], "bar");
    assert_eq!(
        v["env"]["CLAUDE_CODE_RESUME_THRESHOLD_MINUTES"],
        "1000000000"
    );
}
