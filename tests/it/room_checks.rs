//! The review of issue 47 on a real tmux: `spawn` makes room only once its own checks passed;
//! with the sweep's rules off, `room` reaps nothing the daemon would not.

use crate::common::*;

fn reaps(s: &Server) -> Vec<String> {
    s.audit()
        .iter()
        .map(|l| format!("{} {}", l["session"], l["reason"]))
        .collect()
}

#[test]
fn spawn_refused_by_its_own_checks_reaps_nothing_for_room() {
    let s = Server::new();
    let old = s.chat("ccs-1", "c1", "");
    s.idle_since(old, 900_000);
    // One live at most: a new chat would need ccs-1 to go.
    let env = [("CCS_ENGINE_MAX_LIVE", "1"), ("CCS_REAP_GRACE_MS", "2000")];
    let cmd = format!("exec {} --resume c3", fake_claude());
    // An invalid --cid, and no command with no tombstone to replay: refused, nothing reaped.
    let o = s.run_expect(
        FAILED,
        &["spawn", "3", "--cid=a;b", "--", "sh", "-c", &cmd],
        &env,
    );
    assert!(o.stderr.contains("invalid conversation id"), "{}", o.stderr);
    let o = s.run_expect(FAILED, &["spawn", "3"], &env);
    assert!(o.stderr.contains("tombstone"), "{}", o.stderr);
    assert_eq!(reaps(&s), Vec::<String>::new());
    assert_eq!(s.names(), ["ccs-1"]);
    // A spawn that passes its checks makes the room, then starts.
    s.run(&["spawn", "3", "--", "sh", "-c", &cmd], &env);
    assert_eq!(reaps(&s), ["\"ccs-1\" \"room\""]);
    assert_eq!(s.names(), ["ccs-3"]);
}

#[test]
fn with_the_sweeps_rules_off_room_reaps_no_exited_chat() {
    let s = Server::new();
    let n = s.remain_on_exit("ccs-1", "exit 3");
    s.set(n, "@ccs_cid", "c1");
    s.idle_since(n, 0);
    assert!(
        wait_until(10.0, || {
            let g = s.status(&[]);
            g["sessions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["state"] == "exited"))
        }),
        "ccs-1 never showed exited"
    );
    // A cgroup limit alone, plenty of room: the rules are off, so room takes nothing.
    let cg = s.path("cg");
    std::fs::create_dir_all(&cg).unwrap();
    std::fs::write(cg.join("memory.current"), "1073741824\n").unwrap();
    std::fs::write(cg.join("memory.max"), "8589934592\n").unwrap();
    let cg = path_str(&cg);
    let env = [
        ("CCS_ENGINE_MEM_CGROUP", cg.as_str()),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    let o = s.run(&["room", "--need", "1M", "--json"], &env);
    assert_eq!(o.json()["ok"], true, "{}", o.stderr);
    assert_eq!(reaps(&s), Vec::<String>::new());
    assert!(s.has("ccs-1"));
}

#[test]
fn room_finishes_a_teardown_a_dead_reaper_left_before_its_look() {
    let s = Server::new();
    // ccs-1 marked by a reaper that died half-way (its journal names it; its owner is gone).
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 900_000);
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    s.set_token(n, "r1x0x0");
    let claude = s.pids("ccs-1")["claude"];
    let dir = s.studio().join("reaping");
    std::fs::create_dir_all(&dir).unwrap();
    let journal = serde_json::json!({
        "id": "1", "session": "ccs-1", "tmux_id": n, "cid": "c1", "reason": "idle",
        "idle_ms": 1, "cwd": null, "started_at": "2026-01-01T00:00:00Z",
        "owner": {"pid": 99_999_999, "start": 1},
        "victims": [{"pid": claude, "start": stat(claude).unwrap().start}],
        "server_pid": s.server_pid(), "token": "r1x0x0"
    });
    std::fs::write(dir.join("1.json"), journal.to_string()).unwrap();
    let o = s.run(
        &["room", "--need", "1M", "--json"],
        &[("CCS_REAP_GRACE_MS", "2000")],
    );
    assert_eq!(o.json()["ok"], true, "{}", o.stderr);
    assert!(
        !s.has("ccs-1"),
        "the dead reaper's teardown was left: {}",
        o.stderr
    );
    assert!(!dir.join("1.json").exists(), "the journal was left");
    assert!(!alive(claude), "{claude} survived");
}

#[test]
fn room_never_claims_room_its_reaps_did_not_make() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::new();
    for (i, age) in [(1, 900_000), (2, 800_000)] {
        let n = s.chat(&format!("ccs-{i}"), &format!("c{i}"), "plain");
        s.idle_since(n, age);
    }
    // Every reap is vetoed by the studio's `before` hook: none ends `reaped`, in any round.
    let h = s.path("hook");
    std::fs::write(
        &h,
        "#!/bin/sh\ncat >/dev/null\n[ \"$1\" = before ] && exit 3\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755)).unwrap();
    let h = path_str(&h);
    let env = [
        ("CCS_ENGINE_MAX_LIVE", "2"),
        ("CCS_REAP_HOOK", h.as_str()),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    let o = s.run_expect(
        &[ccs_reap::cli::exit::NO_ROOM as i32],
        &["room", "--need", "1M", "--json"],
        &env,
    );
    let j = o.json();
    assert_eq!(j["ok"], false, "{j}\n{}", o.stderr);
    assert!(j["not_reaped"].as_u64().unwrap() >= 1, "{j}");
    assert!(!j["plan"]["fits"].as_bool().unwrap(), "{j}");
    assert_eq!(s.names(), ["ccs-1", "ccs-2"]);
    // Nothing held for a chat that got no room.
    let held = std::fs::read_to_string(s.studio().join("room.json")).unwrap_or_default();
    assert!(!held.contains("until_ms"), "{held}");
}
