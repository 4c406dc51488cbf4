//! `spawn`'s command line (issue 44): an id that starts with `-` can be said (`spawn -- -1 --
//! <command>`), and the ids that look like flags are ids after `--` for every command.

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
