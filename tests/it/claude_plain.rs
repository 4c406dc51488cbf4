//! The hooks path for a plain tmux user (issue 30, item 7), on a real tmux server:
//! `claude-settings` run inside tmux takes the socket from `$TMUX` (set in the child's
//! environment to the private server's value), says on stderr which socket it wrote when it had
//! to take the default, takes `--socket` and `--prefix` and refuses bad ones; `claude-hook
//! --dry-run` says exactly what the hook would do, nothing in a session that is not
//! `<prefix><id>`, and changes nothing.

use crate::common::*;

use std::io::Write;
use std::process::Stdio;

const CID: &str = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";

/// `claude-settings` with no socket setting (only `extra`), `tmux` as `TMUX` if any.
fn settings(s: &Server, tmux: Option<&str>, args: &[&str], extra: &[(&str, &str)]) -> Out {
    let mut c = s.reap(&[]);
    c.env_remove("CCS_TMUX_SOCKET_PATH")
        .envs(extra.iter().copied())
        .arg("claude-settings")
        .args(args);
    if let Some(t) = tmux {
        c.env("TMUX", t);
    }
    let o = Out::from(c.output().unwrap());
    no_panic(&o);
    o
}

fn command_of(o: &Out) -> String {
    let j = o.json();
    j["hooks"]["SessionStart"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap_or_else(|| panic!("no command in {j}"))
        .to_string()
}

#[test]
fn claude_settings_inside_tmux_takes_the_socket_from_tmux() {
    let s = Server::new();
    s.session("plain", "sleep 100000");
    let sock = std::fs::canonicalize(&s.sock).unwrap();
    let t = format!("{},{},0", s.sock.display(), s.server_pid());

    // Inside tmux: $TMUX's socket, and nothing said.
    let o = settings(&s, Some(&t), &[], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cmd = command_of(&o);
    assert!(
        cmd.contains(&format!("CCS_TMUX_SOCKET_PATH='{}'", sock.display())),
        "{cmd}"
    );
    assert!(!o.stderr.contains("the default"), "{}", o.stderr);

    // Outside tmux: the default, said on stderr with the way to choose another.
    let o = settings(&s, None, &[], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("the default"), "{}", o.stderr);
    assert!(o.stderr.contains("--socket"), "{}", o.stderr);
    assert!(!command_of(&o).contains(&format!("CCS_TMUX_SOCKET_PATH='{}'", sock.display())));

    // --socket and --prefix win; a configured socket wins over $TMUX.
    let o = settings(
        &s,
        Some(&t),
        &["--socket", "/tmp/other-sock", "--prefix", "my-"],
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cmd = command_of(&o);
    assert!(
        cmd.contains("CCS_TMUX_SOCKET_PATH='/tmp/other-sock'"),
        "{cmd}"
    );
    assert!(cmd.contains("CCS_SESSION_PREFIX='my-'"), "{cmd}");
    let o = settings(
        &s,
        Some(&t),
        &[],
        &[("CCS_TMUX_SOCKET_PATH", "/tmp/configured")],
    );
    assert!(command_of(&o).contains("CCS_TMUX_SOCKET_PATH='/tmp/configured'"));

    // Bad input: exit 2, nothing written.
    let file = s.path("settings.json");
    let f = file.to_string_lossy().into_owned();
    for bad in [
        vec!["--socket", "rel/sock", "--write", &f],
        vec!["--socket", "a b", "--write", &f],
        vec!["--prefix", "x y", "--write", &f],
        vec!["--prefix", "", "--write", &f],
    ] {
        let o = settings(&s, Some(&t), &bad, &[]);
        assert_eq!(o.code, 2, "{bad:?}: {}{}", o.stdout, o.stderr);
        assert!(!file.exists(), "{bad:?} wrote the file");
    }
}

/// `claude-hook --dry-run` with `event` from `pane` of `s`.
fn dry_run(s: &Server, pane: &str, event: &str) -> Out {
    let t = format!("{},{},0", s.sock.display(), s.server_pid());
    let mut c = s.reap(&[]);
    c.args(["--dry-run", "claude-hook"])
        .env("TMUX", &t)
        .env("TMUX_PANE", pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(event.as_bytes());
    let o = Out::from(child.wait_with_output().unwrap());
    no_panic(&o);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    o
}

#[test]
fn claude_hook_dry_run_says_exactly_what_the_hook_would_do() {
    let s = Server::new();
    let plain = s.session("plain", "sleep 100000");
    let chat = s.session("ccs-x", "sleep 100000");
    let pane = |n: u32| {
        s.ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("${n}:"),
            "#{pane_id}",
        ])
        .trim()
        .to_string()
    };
    let prompt = r#"{"hook_event_name":"UserPromptSubmit","prompt":"hi"}"#;
    let start = format!(r#"{{"hook_event_name":"SessionStart","session_id":"{CID}"}}"#);

    let o = dry_run(&s, &pane(plain), prompt);
    assert!(
        o.stderr
            .contains("nothing: this pane (%0) is not in a `ccs-<id>` session"),
        "{}",
        o.stderr
    );
    let o = dry_run(&s, &pane(chat), prompt);
    assert!(
        o.stderr.contains("would begin a turn on ccs-x"),
        "{}",
        o.stderr
    );
    let o = dry_run(&s, &pane(chat), &start);
    assert!(
        o.stderr
            .contains(&format!("would set @ccs_cid of ccs-x to {CID}")),
        "{}",
        o.stderr
    );
    s.set(chat, "@ccs_reaping", &now_ms().to_string());
    let o = dry_run(&s, &pane(chat), prompt);
    assert!(o.stderr.contains("would block the prompt"), "{}", o.stderr);
    let o = dry_run(&s, &pane(chat), r#"{"hook_event_name":"Notification"}"#);
    assert!(
        o.stderr.contains("nothing: event \"Notification\""),
        "{}",
        o.stderr
    );
    // A dry run changes nothing.
    assert_eq!(s.show(chat, "@ccs_turn"), None);
    assert_eq!(s.show(chat, "@ccs_cid"), None);
}
