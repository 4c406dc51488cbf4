//! `spawn`'s edges (issue 44): an id that starts with `-` can be said (`spawn -- -1 --
//! <command>`), the ids that look like flags are ids after `--` for every command; a `forget`
//! while a `spawn` waits for its agent stays forgotten when the spawn fails; a launcher script
//! named as its agent's (`spawn --agent claude -- <script>`) carries the conversation, kept in the
//! tombstone, and a command that cannot carry it is refused unless `--new-conversation`.

use crate::common::*;

#[test]
fn an_id_that_starts_with_a_dash_goes_after_a_first_double_dash() {
    let s = Server::new();
    // Before it could be said: `spawn -- -1` took `-1` as the command and wanted an id.
    let o = s.run(
        &[
            "spawn",
            "--json",
            "--cid=conv-1",
            "--new-conversation",
            "--",
            "-1",
            "--",
            "sh",
            "-c",
            "exec sleep 100000",
        ],
        &[],
    );
    assert_eq!(o.json()["result"], "spawned", "{}", o.stdout);
    assert!(s.has("ccs--1"), "{:?}", s.names());
    // The other commands take it after `--` as well; `-h` there is an id, not the help.
    let o = s.run(&["turn", "begin", "--", "-1"], &[]);
    assert!(!o.stdout.contains("Usage"), "{}", o.stdout);
    s.run(&["turn", "end", "--", "-1"], &[]);
    s.run_expect(RESPAWN, &["turn", "begin", "--", "-h"], &[]);
    // Anything but the id alone between the two `--` is refused with the form to use.
    let o = s.run_expect(CONFIG, &["spawn", "--", "-2", "sh"], &[]);
    assert!(
        o.stderr.contains("spawn -- -2 -- <command>"),
        "{}",
        o.stderr
    );
    assert!(!s.has("ccs--2"));
    let o = s.run_expect(CONFIG, &["spawn"], &[]);
    assert!(o.stderr.contains("needs a chat id"), "{}", o.stderr);
}

/// A stand-in `claude` that stays up until `<dir>/go` exists, then says a last line and exits 1.
fn failing_claude(s: &Server) -> String {
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    let go = s.path("go");
    std::fs::write(
        &claude,
        format!(
            "#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.05; done\necho 'cannot resume'\nexit 1\n",
            go.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path_str(&claude)
}

#[test]
fn a_forget_while_spawn_waits_for_its_agent_stays_forgotten_when_the_spawn_fails() {
    const CID: &str = "5e0c1f2a-3b4d-4c5e-8f6a-7b8c9d0e1f2a";
    let s = Server::new();
    // The studio's server stays up (its other chats), as it does in use.
    s.session("other", "sleep 100000");
    let n = s.chat("ccs-1", CID, "");
    s.idle_since(n, 10_000_000);
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-1"));
    assert!(s.tombstone("1").is_some(), "no tombstone to begin with");
    let claude = failing_claude(&s);
    let spawn = s
        .reap(&[])
        .args(["spawn", "1", "--", &claude])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(10.0, || s.has("ccs-1")),
        "the agent did not start"
    );
    let o = s.run(&["forget", "1"], &[]);
    assert!(o.stdout.contains("forgot chat 1"), "{}", o.stdout);
    std::fs::write(s.path("go"), "").unwrap();
    let o: Out = spawn.wait_with_output().unwrap().into();
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("changed while the agent started"),
        "{}",
        o.stderr
    );
    // Forgotten stays forgotten: no tombstone, and status lists no conversation of chat 1.
    assert!(s.tombstone("1").is_none(), "the tombstone came back");
    let st = s.status(&[]);
    assert!(!st.to_string().contains(CID), "{st}");
}

/// A studio's launcher script: it runs the fake claude with its own words and ours.
fn launcher(s: &Server) -> String {
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let run = bin.join("run-studio.sh");
    std::fs::write(
        &run,
        format!(
            "#!/bin/sh\nFAKE_CLAUDE_PIDS={} exec {} \"$@\"\n",
            s.path("ccs-1.pids").display(),
            fake_claude()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path_str(&run)
}

fn start_command(s: &Server, name: &str) -> String {
    s.ok(&[
        "list-panes",
        "-t",
        &format!("={name}:"),
        "-F",
        "#{pane_start_command}",
    ])
}

#[test]
fn a_launcher_script_named_as_its_agents_carries_the_conversation_and_keeps_it() {
    let s = Server::new();
    s.session("other", "sleep 100000");
    let n = s.chat("ccs-1", "conv-1", "");
    s.idle_since(n, 10_000_000);
    s.once(DONE, 1000, &[]);
    assert_eq!(s.tombstone("1").unwrap()["cid"], "conv-1");
    let run = launcher(&s);
    // Unnamed, the script cannot be given the conversation: refused, loudly, nothing started.
    let o = s.run_expect(FAILED, &["spawn", "1", "--", &run, "--model", "x"], &[]);
    assert!(
        o.stderr.contains("cannot be carried") && o.stderr.contains("--agent claude"),
        "{}",
        o.stderr
    );
    assert!(!s.has("ccs-1"));
    assert_eq!(s.tombstone("1").unwrap()["cid"], "conv-1");
    // A name that is no agent's, or another agent's than the command runs: refused.
    let o = s.run_expect(
        FAILED,
        &["spawn", "1", "--agent", "claudee", "--", &run],
        &[],
    );
    assert!(o.stderr.contains("no agent ccs-reap knows"), "{}", o.stderr);
    let o = s.run_expect(
        FAILED,
        &["spawn", "1", "--agent", "codex", "--", &fake_claude()],
        &[],
    );
    assert!(
        o.stderr.contains("runs Claude Code's program"),
        "{}",
        o.stderr
    );
    assert!(!s.has("ccs-1"));
    // Named: the script gets the conversation as claude would.
    s.run(
        &[
            "spawn", "1", "--agent", "claude", "--", &run, "--model", "x",
        ],
        &[],
    );
    let cmd = start_command(&s, "ccs-1");
    assert!(
        cmd.contains("CCS_REAP_AGENT=claude")
            && cmd.contains("run-studio.sh")
            && cmd.contains("--resume conv-1"),
        "{cmd}"
    );
    assert!(wait_until(5.0, || s
        .ok(&["capture-pane", "-p", "-t", "=ccs-1:"])
        .contains("conversation conv-1")));
    // Reaped again: the tombstone keeps the script, named, and its agent; the replay carries
    // the conversation once more.
    s.run(&["turn", "end", "1"], &[]);
    let n = s
        .ok(&["display-message", "-p", "-t", "=ccs-1:", "#{session_id}"])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap();
    s.idle_since(n, 10_000_000);
    s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-1"));
    let t = s.tombstone("1").unwrap();
    assert_eq!(t["agent"], "claude", "{t}");
    assert_eq!(
        t["argv"],
        serde_json::json!(["env", "CCS_REAP_AGENT=claude", run, "--model", "x"]),
        "{t}"
    );
    s.run(&["spawn", "1"], &[]);
    let cmd = start_command(&s, "ccs-1");
    assert!(
        cmd.contains("run-studio.sh") && cmd.contains("--resume conv-1"),
        "{cmd}"
    );
}

#[test]
fn new_conversation_starts_what_cannot_carry_it_and_is_refused_where_it_would_mean_two_things() {
    let s = Server::new();
    s.session("other", "sleep 100000");
    let n = s.chat("ccs-1", "conv-1", "");
    s.idle_since(n, 10_000_000);
    s.once(DONE, 1000, &[]);
    // A command that carries the conversation with --new-conversation: refused, with the way.
    let o = s.run_expect(
        FAILED,
        &["spawn", "1", "--new-conversation", "--", &fake_claude()],
        &[],
    );
    assert!(
        o.stderr.contains("carries conversation conv-1") && o.stderr.contains("forget"),
        "{}",
        o.stderr
    );
    assert!(!s.has("ccs-1"));
    // One that cannot: started as given, as a new conversation (no cid set for it).
    s.run(
        &["spawn", "1", "--new-conversation", "--", "sleep", "100000"],
        &[],
    );
    assert!(s.has("ccs-1"));
    let n = s
        .ok(&["display-message", "-p", "-t", "=ccs-1:", "#{session_id}"])
        .trim()
        .trim_start_matches('$')
        .parse()
        .unwrap();
    assert_eq!(s.show(n, "@ccs_cid"), None);
}
