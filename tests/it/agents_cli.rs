//! `hook --agent <name>` and `hook-settings --agent <name>` on a real tmux server, without the
//! agents themselves (their end to end is `agents_e2e`): a Codex or Gemini CLI payload acts on
//! the chat of its pane and records the agent; `--dry-run` says what it would do and changes
//! nothing; an unknown agent never fails the hook; `hook-settings` takes `--socket` and
//! `--prefix` as `claude-settings` does and refuses bad ones with nothing written; `--agent
//! claude` is `claude-settings`.

use crate::common::*;

use std::io::Write;
use std::process::Stdio;

const CID: &str = "019ad5c2-8f0e-7a31-b2c4-5e6f7a8b9c0d";

/// `ccs-reap <args>` with `event` on stdin, from `pane` of `s`.
fn hook(s: &Server, pane: &str, args: &[&str], event: &str) -> Out {
    let t = format!("{},{},0", s.sock.display(), s.server_pid());
    let mut c = s.reap(&[]);
    c.args(args)
        .env("TMUX", &t)
        .env("TMUX_PANE", pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(event.as_bytes());
    let o = Out::from(child.wait_with_output().unwrap());
    no_panic(&o);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    o
}

#[test]
fn an_agents_hook_acts_on_its_chat_and_a_dry_run_changes_nothing() {
    let s = Server::new();
    let chat = s.session("ccs-x", "sleep 100000");
    let pane = s
        .ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("${chat}:"),
            "#{pane_id}",
        ])
        .trim()
        .to_string();
    let start = format!(r#"{{"hook_event_name":"SessionStart","session_id":"{CID}"}}"#);
    let before = r#"{"hook_event_name":"BeforeAgent","prompt":"hi"}"#;

    // A dry run says what it would do and does nothing.
    let o = hook(
        &s,
        &pane,
        &["hook", "--agent", "gemini", "--dry-run"],
        before,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("would begin a turn on ccs-x"),
        "{}",
        o.stderr
    );
    let o = hook(
        &s,
        &pane,
        &["hook", "--agent", "codex", "--dry-run"],
        &start,
    );
    assert!(
        o.stderr
            .contains(&format!("would set @ccs_cid of ccs-x to {CID}")),
        "{}",
        o.stderr
    );
    assert_eq!(s.show(chat, "@ccs_turn"), None);
    assert_eq!(s.show(chat, "@ccs_cid"), None);
    assert_eq!(s.show(chat, "@ccs_agent"), None);

    // Codex's SessionStart: the id and the agent; Gemini CLI's BeforeAgent: a turn.
    let o = hook(&s, &pane, &["hook", "--agent", "codex"], &start);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(s.show(chat, "@ccs_cid").as_deref(), Some(CID));
    assert_eq!(s.show(chat, "@ccs_agent").as_deref(), Some("codex"));
    let o = hook(&s, &pane, &["hook", "--agent", "gemini"], before);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(s.show(chat, "@ccs_turn").is_some());
    // Codex's own turn events are not Gemini CLI's.
    let o = hook(
        &s,
        &pane,
        &["hook", "--agent", "codex", "--dry-run"],
        r#"{"hook_event_name":"AfterAgent"}"#,
    );
    assert!(
        o.stderr.contains("nothing: event \"AfterAgent\""),
        "{}",
        o.stderr
    );

    // An unknown agent never fails the hook: one line, exit 0, nothing done.
    let o = hook(&s, &pane, &["hook", "--agent", "nope"], &start);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("no agent \"nope\""), "{}", o.stderr);
}

/// `hook-settings` with no socket setting, `args` after it.
fn settings(s: &Server, args: &[&str]) -> Out {
    let mut c = s.reap(&[]);
    c.env_remove("CCS_TMUX_SOCKET_PATH")
        .env_remove("TMUX")
        .arg("hook-settings")
        .args(args);
    let o = Out::from(c.output().unwrap());
    no_panic(&o);
    o
}

#[test]
fn hook_settings_take_socket_and_prefix_and_refuse_bad_ones() {
    let s = Server::new();
    let o = settings(
        &s,
        &[
            "--agent",
            "codex",
            "--socket",
            "/tmp/other-sock",
            "--prefix",
            "my-",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cmd = o.json()["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cmd.ends_with(" hook --agent codex"), "{cmd}");
    assert!(
        cmd.contains("CCS_TMUX_SOCKET_PATH='/tmp/other-sock'"),
        "{cmd}"
    );
    assert!(cmd.contains("CCS_SESSION_PREFIX='my-'"), "{cmd}");
    assert!(o.stderr.contains("Hooks need review"), "{}", o.stderr);
    // No socket chosen: the default, said.
    let o = settings(&s, &["--agent", "gemini"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("the default"), "{}", o.stderr);
    assert_eq!(o.json()["hooksConfig"]["enabled"], true);
    // Claude Code's are claude-settings'.
    let o = settings(&s, &["--agent", "claude", "--socket", "/tmp/s"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cmd = o.json()["hooks"]["SessionStart"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cmd.ends_with(" claude-hook"), "{cmd}");

    // Bad input: exit 2, nothing written.
    let file = s.path("hooks.json");
    let f = file.to_string_lossy().into_owned();
    for bad in [
        vec!["--agent", "nope", "--write", &f],
        vec!["--agent", "codex", "--socket", "rel/sock", "--write", &f],
        vec!["--agent", "gemini", "--prefix", "x y", "--write", &f],
    ] {
        let o = settings(&s, &bad);
        assert_eq!(o.code, 2, "{bad:?}: {}{}", o.stdout, o.stderr);
        assert!(!file.exists(), "{bad:?} wrote the file");
    }
}
