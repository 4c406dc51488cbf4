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
