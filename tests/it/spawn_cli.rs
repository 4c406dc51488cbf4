//! `spawn`'s edges (issue 44): an id that starts with `-` can be said (`spawn -- -1 --
//! <command>`), the ids that look like flags are ids after `--` for every command; a `forget`
//! while a `spawn` waits for its agent stays forgotten when the spawn fails.

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
