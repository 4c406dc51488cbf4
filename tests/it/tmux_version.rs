//! The start-up check of the tmux version: a `tmux` first on PATH that says it is 2.9 makes every
//! command that talks to tmux exit 2, naming the version and the minimum, after that one `tmux -V`
//! and nothing else; a version that cannot be told is warned about and the command goes on.

use crate::common::wrapper::{path_with, shq};
use crate::common::*;

use std::path::PathBuf;

/// `<dir>/bin/tmux`: logs its arguments to `<dir>/calls`, answers `-V` with `version`, and passes
/// every other call to the real tmux. Returns the PATH to run the reaper with.
fn fake_tmux(s: &Server, version: &str) -> String {
    let bin = s.tmux_wrapper(&format!(
        "echo \"$*\" >>{calls}\n[ \"$1\" = -V ] && {{ echo {version}; exit 0; }}\nexec \"$REAL\" \"$@\"\n",
        calls = shq(&path_str(&calls(s))),
        version = shq(version),
    ));
    path_with(&bin)
}

fn calls(s: &Server) -> PathBuf {
    s.path("calls")
}

fn logged(s: &Server) -> Vec<String> {
    std::fs::read_to_string(calls(s))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_tmux_older_than_the_minimum_is_refused_before_anything_runs() {
    let s = Server::new();
    let path = fake_tmux(&s, "tmux 2.9");
    let on = [("CCS_ENGINE_IDLE_KILL_MS", "1"), ("PATH", path.as_str())];
    let commands: &[&[&str]] = &[
        &[],
        &["--once"],
        &["--once", "--dry-run"],
        &["status"],
        &["status", "--json"],
        &["turn", "begin", "1"],
        &["turn", "end", "1"],
        &["spawn", "1", "--", "sleep", "100000"],
        &["reap", "1", "--force"],
    ];
    for args in commands {
        let _ = std::fs::remove_file(calls(&s));
        let o = s.run_any(args, &on);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(
            o.stderr
                .contains("tmux 2.9 (`tmux -V`) is too old: ccs-reap needs tmux 3.1c or newer"),
            "{args:?}: {}",
            o.stderr
        );
        // One `tmux -V`, nothing else: no session, no state dir.
        assert_eq!(logged(&s), ["-V"], "{args:?}");
        assert!(!s.state_dir().exists(), "{args:?}");
        if args.contains(&"--json") {
            let j = o.json();
            assert_eq!(j["ok"], false, "{j}");
            assert!(j["error"].as_str().unwrap().contains("3.1c"), "{j}");
        } else {
            assert_eq!(o.stdout, "", "{args:?}");
        }
    }
    assert!(s.names().is_empty(), "{:?}", s.names());
}

#[test]
fn commands_that_do_not_talk_to_tmux_never_ask_its_version() {
    let s = Server::new();
    let path = fake_tmux(&s, "tmux 2.9");
    // Reaping disabled: the daemon does nothing, and says so, without asking tmux.
    s.run(&[], &[("PATH", path.as_str())]);
    assert_eq!(logged(&s), Vec::<String>::new());
    // `--once` looks at the server even then (it warns when none listens, issue 31.8), so it
    // asks the version first, as every command that talks to tmux does, and refuses this one.
    let o = s.run_any(&["--once"], &[("PATH", path.as_str())]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("too old"), "{}", o.stderr);
}

#[test]
fn a_version_that_cannot_be_told_is_warned_about_and_the_command_goes_on() {
    let mut s = Server::new();
    let n = s.session("ccs-1", "sleep 100000");
    s.set(n, "@ccs_cid", "c1");
    s.attach_control("ccs-1");
    let path = fake_tmux(&s, "tmux openbsd-7.5");
    let o = s.run(&["status", "--json"], &[("PATH", path.as_str())]);
    assert!(
        o.stderr.contains("cannot tell the tmux version") && o.stderr.contains("openbsd-7.5"),
        "{}",
        o.stderr
    );
    assert_eq!(o.json()["sessions"][0]["state"], "viewed", "{}", o.stdout);
    let calls = logged(&s);
    assert_eq!(calls[0], "-V");
    assert!(calls.len() > 1, "{calls:?}");
}
