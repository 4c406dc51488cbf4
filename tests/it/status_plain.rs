//! `status` as a plain user reads it, on a real tmux server (issues 30.1 and 31.6): the chats
//! asleep after the live ones with the command that brings each back, rows by time to reap, no
//! countdown where none runs (first sight, no cid: with the fix), the memory gauge, and nothing
//! written by a look.

use crate::common::*;

#[test]
fn status_lists_asleep_chats_orders_rows_and_says_how_to_fix_a_no_cid_chat() {
    let s = Server::new();
    // (A server left with no session exits, and its chats would read as lost with it.)
    s.server_that_stays_up();
    let limit = [("CCS_ENGINE_IDLE_KILL_MS", "30m")];
    // 1. A chat idle past the limit, reaped by a sweep: asleep.
    let a = s.chat("ccs-gone", "cid-gone-1", "");
    s.idle_since(a, 40 * 60_000);
    s.once(DONE, 2000, &[]);
    assert!(!s.has("ccs-gone"));
    assert!(s.tombstone("gone").is_some());

    // 2. Live: one idle 20 min, one idle 5 min, one with no cid, one never stamped.
    let early = s.chat("ccs-early", "cid-early-1", "");
    s.idle_since(early, 20 * 60_000);
    let late = s.chat("ccs-late", "cid-late-1", "");
    s.idle_since(late, 5 * 60_000);
    let nocid = s.session("ccs-nocid", "sleep 1000");
    s.idle_since(nocid, 10 * 60_000);
    let fresh = s.chat("ccs-fresh", "cid-fresh-1", "");

    let j = s.status(&limit);
    let asleep = j["asleep"].as_array().expect("an asleep list");
    assert_eq!(asleep.len(), 1, "{j}");
    let z = &asleep[0];
    assert_eq!(z["state"], "asleep");
    assert_eq!(z["id"], "gone");
    assert_eq!(z["session"], "ccs-gone");
    assert_eq!(z["cid"], "cid-gone-1");
    assert_eq!(z["reason"], "idle");
    assert_eq!(z["command"], "ccs-reap resume gone");
    assert!(z["reaped_at"].is_string() && z.get("cwd").is_some(), "{z}");

    let out = s.run(&["status"], &limit).stdout;
    let lines: Vec<&str> = out.lines().collect();
    for l in &lines {
        assert!(l.chars().count() <= 80, "wider than 80: {l:?}\n{out}");
    }
    let row = |name: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row {name}:\n{out}"))
    };
    // By time to reap: the one reaped first comes first; no countdown after.
    assert!(row("ccs-early") < row("ccs-late"), "{out}");
    assert!(row("ccs-late") < row("ccs-nocid"), "{out}");
    assert!(row("ccs-late") < row("ccs-fresh"), "{out}");
    // The asleep one after the live ones, with its way back.
    let gone = row("ccs-gone");
    assert!(gone > row("ccs-fresh") && gone > row("ccs-nocid"), "{out}");
    assert!(lines[gone].contains("asleep") && lines[gone].contains("ccs-reap resume gone"));
    // No countdown where none runs; the fix for no-cid; no claim of a write.
    for name in ["ccs-nocid", "ccs-fresh"] {
        let cells: Vec<&str> = lines[row(name)].split_whitespace().collect();
        assert_eq!(cells[3], "-", "{name}: {out}");
    }
    assert!(out.contains("SessionStart hook has not run"), "{out}");
    assert!(out.contains("claude-settings --write"), "{out}");
    assert!(!out.contains("clock started"), "{out}");
    assert_eq!(s.show(fresh, "@ccs_idle"), None, "status wrote a stamp");
    assert!(out.contains("1 asleep"), "{out}");
}

#[test]
fn the_memory_gauge_says_a_rule_is_over_with_nothing_to_take() {
    let s = Server::new();
    // Busy chats only: nothing idle to take.
    let n = s.chat("ccs-busy", "cid-busy-1", "");
    s.set(n, "@ccs_turn", &now_ms().to_string());
    let out = s
        .run(
            &["status"],
            &[
                ("CCS_ENGINE_IDLE_KILL_MS", "30m"),
                ("CCS_ENGINE_MEM_HIGH", "1M"),
            ],
        )
        .stdout;
    assert!(out.contains("memory "), "{out}");
    assert!(out.contains("threshold 1.0 MiB"), "{out}");
    assert!(out.contains("with nothing to take"), "{out}");
    let j = s.status(&[
        ("CCS_ENGINE_IDLE_KILL_MS", "30m"),
        ("CCS_ENGINE_MEM_HIGH", "1M"),
    ]);
    assert_eq!(j["mem_threshold_bytes"], 1 << 20, "{j}");
}
