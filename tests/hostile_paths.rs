//! Hostile paths (issue #19, "also found"): a reap batch that panics, stdout that is a closed pipe
//! or a full device, ids too long for a file name, activity numbers that are not plain whole
//! numbers, a `before` hook that is configured but cannot be run, a `--once` summary that must add
//! up, and SIGHUP/SIGUSR1 sent to the daemon in the middle of a teardown.

mod common;
use common::*;

use std::process::Stdio;
#[allow(unused_imports)]
use std::time::{Duration, Instant};

/// A session the sweep reaps when nothing says otherwise: idle for hours, with a conversation id.
fn reapable(s: &Server, name: &str) -> u32 {
    let n = s.session(name, "sleep 100000");
    s.set(n, "@ccs_cid", &format!("conv-{name}"));
    s.idle_since(n, 10_000_000);
    n
}

/// The last lines of a log, for a failure message.
#[allow(dead_code)]
fn tail(p: &std::path::Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

// ---- stdout ----

/// Run ccs-reap with stdout a pipe whose reader has gone before anything is written (as
/// `ccs-reap status | head -c0` would be, and `| head -1` once its line is read).
fn into_closed_pipe(s: &Server, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = s
        .reap(env)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command has not listed tmux yet: the reader is gone before its first write.
    drop(c.stdout.take());
    Out::from(c.wait_with_output().unwrap())
}

/// Every command that prints, as a table: (args, extra env, the exit code it has anyway).
fn printing_commands() -> Vec<(Vec<&'static str>, Vec<(&'static str, &'static str)>, i32)> {
    let reap = vec![
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "200"),
    ];
    vec![
        (vec!["status"], vec![], 0),
        (vec!["status", "--json"], vec![], 0),
        (vec!["--once", "--dry-run"], reap.clone(), 0),
        (vec!["--once", "--dry-run", "--json"], reap.clone(), 0),
        (vec!["reap", "--dry-run", "1"], vec![], 0),
        (vec!["reap", "--dry-run", "--json", "1"], vec![], 0),
        (vec!["turn", "end", "--json", "nope"], vec![], 4),
        (vec!["completions", "bash"], vec![], 0),
        (vec!["man"], vec![], 0),
    ]
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let s = Server::new();
    reapable(&s, "ccs-1");
    for (args, env, code) in printing_commands() {
        let o = into_closed_pipe(&s, &args, &env);
        assert_eq!(o.code, code, "{args:?} into a closed pipe:\n{}", o.stderr);
        no_panic(&o);
        assert!(
            !o.stderr.contains("stdout"),
            "{args:?}: a closed pipe is not an error:\n{}",
            o.stderr
        );
    }
    assert!(s.has("ccs-1"), "only dry runs were asked for");
}

#[test]
fn a_stdout_that_cannot_be_written_exits_1_with_one_line() {
    let s = Server::new();
    reapable(&s, "ccs-1");
    for (args, env, _) in printing_commands() {
        let mut env = env.clone();
        env.push(("CCS_LOG", "off"));
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Out::from(
            s.reap(&env)
                .args(&args)
                .stdout(full)
                .stderr(Stdio::piped())
                .output()
                .unwrap(),
        );
        assert_eq!(o.code, 1, "{args:?} > /dev/full:\n{}", o.stderr);
        no_panic(&o);
        let lines: Vec<&str> = o.stderr.lines().filter(|l| l.contains("stdout")).collect();
        assert_eq!(
            lines.len(),
            1,
            "{args:?}: one line on stderr:\n{}",
            o.stderr
        );
        assert!(
            lines[0].starts_with("ccs-reap: failed to write to stdout"),
            "{args:?}: {}",
            o.stderr
        );
    }
}
