//! Records that do not lie (issue 29, item 5), on real tmux: a server start time that could not
//! be read (a reaper in another pid namespace) is "cannot tell", never another server; a state
//! file that is not a regular file is moved aside so the next write succeeds.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::*;

const ON: &[(&str, &str)] = &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)];

/// Chats `ccs-1` to `ccs-3`, each with a cid, and one sweep that records them.
fn three_recorded(s: &Server) {
    for id in ["1", "2", "3"] {
        let n = s.session(&format!("ccs-{id}"), "sleep 100000");
        s.set(n, "@ccs_cid", &format!("conv-{id}"));
    }
    s.once(DONE, 1000, &[]);
    assert_eq!(record(s).len(), 3, "{:?}", record(s));
}

fn known_path(s: &Server) -> PathBuf {
    s.studio().join("known.json")
}

fn record(s: &Server) -> HashMap<String, serde_json::Value> {
    let Ok(t) = std::fs::read_to_string(known_path(s)) else {
        return HashMap::new();
    };
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    v["chats"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Rewrite every entry's server start time as `start` (what a reaper in another pid namespace,
/// which cannot read the server's `/proc/<pid>/stat`, wrote before this fix).
fn set_start(s: &Server, start: serde_json::Value) {
    let p = known_path(s);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    for e in v["chats"].as_object_mut().unwrap().values_mut() {
        e["server"]["start"] = start.clone();
    }
    std::fs::write(&p, v.to_string()).unwrap();
}

fn lost_lines(s: &Server) -> Vec<serde_json::Value> {
    s.audit()
        .into_iter()
        .filter(|l| l["outcome"] == "lost")
        .collect()
}

#[test]
fn a_start_time_written_as_0_or_unknown_is_not_another_server() {
    for start in [serde_json::json!(0), serde_json::Value::Null] {
        let s = Server::new();
        three_recorded(&s);
        set_start(&s, start.clone());
        // The studio deletes chat 2 on purpose; the server lives on.
        s.ok(&["kill-session", "-t", "=ccs-2"]);
        let o = s.once(DONE, 1000, &[]);
        assert!(
            lost_lines(&s).is_empty(),
            "start {start}: {:?}\n{}",
            lost_lines(&s),
            o.stderr
        );
        assert!(
            s.tombstone("2").is_none(),
            "start {start}: chat 2 tombstoned"
        );
        assert!(s.tombstone("1").is_none() && s.tombstone("3").is_none());
        let k = record(&s);
        for id in ["1", "3"] {
            assert_eq!(k[id]["lost"], serde_json::Value::Null, "{id}: {k:?}");
            // Completed by the reaper that can read it: the server's real start time, never 0.
            let got = k[id]["server"]["start"].as_u64().unwrap_or(0);
            assert!(got > 0, "start {start}, chat {id}: {:?}", k[id]);
        }
        // Chat 2 was deleted before any reaper that could tell saw it again: kept, not lost.
        assert_ne!(k["2"]["lost"], serde_json::Value::Bool(true), "{k:?}");
        // `spawn 2` makes a fresh chat, no resurrection.
        s.run(&["spawn", "2", "--", "sleep", "100000"], ON);
        let cmd = s.ok(&["list-panes", "-t", "=ccs-2:", "-F", "#{pane_start_command}"]);
        assert!(
            !cmd.contains("--resume"),
            "start {start}: resurrected: {cmd}"
        );
    }
}

/// `--once` in a pid namespace of its own (`unshare --pid --fork --mount-proc`, as root): the
/// tmux server's pid is not in its `/proc`, so it cannot read the server's start time.
fn once_elsewhere(s: &Server) -> std::process::Output {
    let inner = s.reap(&[
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "1000"),
    ]);
    let mut c = std::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc"])
        .arg(inner.get_program())
        .arg("--once")
        .env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c.env("PATH", std::env::var("PATH").unwrap_or_default());
    let o = c.output().expect("unshare (util-linux) runs");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("unshare failed"),
        "this test needs root and unshare(1) to make a pid namespace (run the suite as root, or \
         skip it with --skip records::a_reaper_in_another_pid_namespace): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

#[test]
fn a_reaper_in_another_pid_namespace_writes_no_0_and_fools_no_other() {
    let s = Server::new();
    three_recorded(&s);
    let real = record(&s)["1"]["server"]["start"].as_u64().unwrap();
    assert!(real > 0);
    // A new chat, and chat 2 deleted on purpose; the blind reaper sweeps first.
    let n = s.session("ccs-4", "sleep 100000");
    s.set(n, "@ccs_cid", "conv-4");
    s.ok(&["kill-session", "-t", "=ccs-2"]);
    let o = once_elsewhere(&s);
    let err = String::from_utf8_lossy(&o.stderr);
    let text = std::fs::read_to_string(known_path(&s)).unwrap();
    assert!(!text.contains("\"start\":0"), "{text}\n{err}");
    let k = record(&s);
    assert!(
        k.contains_key("4"),
        "the blind reaper recorded no new chat: {k:?}\n{err}"
    );
    // The previous value kept for the chats it knew; the new one's marked unknown.
    assert_eq!(k["1"]["server"]["start"].as_u64(), Some(real), "{k:?}");
    assert_eq!(k["4"]["server"]["start"], serde_json::Value::Null, "{k:?}");
    assert!(lost_lines(&s).is_empty(), "{:?}\n{err}", lost_lines(&s));
    // Then a reaper that can see the server: nothing lost, nothing resurrected; the unknown
    // start completed, the deleted chat out of the record.
    s.once(DONE, 1000, &[]);
    assert!(lost_lines(&s).is_empty(), "{:?}", lost_lines(&s));
    assert!(s.tombstone("2").is_none());
    let k = record(&s);
    assert_eq!(k["4"]["server"]["start"].as_u64(), Some(real), "{k:?}");
    assert!(!k.contains_key("2"), "{k:?}");
}

/// Every name in `dir` starting with `stem.bad-`.
fn moved_aside(dir: &Path, stem: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{stem}.bad-"))
        })
        .map(|e| e.path())
        .collect()
}

#[test]
fn a_known_json_that_is_a_directory_fifo_or_symlink_is_moved_aside_and_written() {
    for kind in ["directory", "fifo", "symlink"] {
        let s = Server::new();
        three_recorded(&s);
        let p = known_path(&s);
        std::fs::remove_file(&p).unwrap();
        match kind {
            "directory" => std::fs::create_dir(&p).unwrap(),
            "fifo" => rustix::fs::mknodat(
                rustix::fs::CWD,
                &p,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap(),
            _ => std::os::unix::fs::symlink("/nonexistent/known.json", &p).unwrap(),
        }
        let o = s.once(DONE, 1000, &[]);
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(
            m.is_file(),
            "{kind}: known.json is still not a file\n{}",
            o.stderr
        );
        assert_eq!(record(&s).len(), 3, "{kind}");
        let aside = moved_aside(&s.studio(), "known.json");
        assert_eq!(aside.len(), 1, "{kind}: {aside:?}");
        assert!(o.stderr.contains("moved aside"), "{kind}: {}", o.stderr);
        // The next sweep is quiet: nothing left to move.
        let o = s.once(DONE, 1000, &[]);
        assert!(!o.stderr.contains("moved aside"), "{kind}: {}", o.stderr);
    }
}

#[test]
fn a_tombstone_path_that_is_a_directory_is_moved_aside_and_the_reap_goes_on() {
    let s = Server::new();
    let n = s.session("ccs-1", "sleep 100000");
    s.set(n, "@ccs_cid", "conv-1");
    s.once(DONE, 1000, &[]);
    let sessions = s.studio().join("sessions");
    std::fs::create_dir_all(sessions.join("1.json")).unwrap();
    s.idle_since(n, 10_000_000);
    let o = s.once(DONE, 1000, &[]);
    assert!(!s.has("ccs-1"), "not reaped\n{}", o.stderr);
    assert_eq!(s.tombstone("1").unwrap()["cid"], "conv-1");
    assert_eq!(moved_aside(&sessions, "1.json").len(), 1);
}
