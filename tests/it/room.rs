//! Issue 47 on a real tmux: `ccs-reap room` frees memory for a new chat through the fenced
//! teardown (reason `room`), oldest idle first, never a busy, viewed or young chat; says so with
//! exit 5 when only those are left; two calls at once never count the same room twice;
//! `CCS_ENGINE_MAX_LIVE` at a sweep; `spawn` makes room first; a new chat's session-start hook
//! asks for room at once.

use crate::common::*;

use std::io::Write;
use std::process::Stdio;

const NO_ROOM: i32 = ccs_reap::cli::exit::NO_ROOM as i32;

/// The memory a room call sees: a directory that reads as a cgroup v2 (`memory.current`,
/// `memory.max`), so that the figures are the test's, not the host's.
fn fake_cgroup(s: &Server, used: u64, limit: u64) -> String {
    let d = s.path("cg");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("memory.current"), format!("{used}\n")).unwrap();
    std::fs::write(d.join("memory.max"), format!("{limit}\n")).unwrap();
    path_str(&d)
}

/// The sessions reaped, by the audit log: (name, reason, outcome).
fn reaps(s: &Server) -> Vec<(String, String, String)> {
    s.audit()
        .iter()
        .map(|l| {
            (
                l["session"].as_str().unwrap().to_string(),
                l["reason"].as_str().unwrap().to_string(),
                l["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn reaped(name: &str, reason: &str) -> (String, String, String) {
    (name.into(), reason.into(), "reaped".into())
}

#[test]
fn room_takes_the_oldest_idle_chats_with_reason_room_and_refuses_when_only_busy_viewed_or_young_are_left(
) {
    let mut s = Server::new();
    let a = s.chat("ccs-1", "c1", "");
    let b = s.chat("ccs-2", "c2", "");
    let busy = s.chat("ccs-3", "c3", "");
    let viewed = s.chat("ccs-4", "c4", "");
    let young = s.chat("ccs-5", "c5", "");
    s.idle_since(a, 600_000);
    s.idle_since(b, 1_200_000);
    s.idle_since(busy, 10_000_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    s.idle_since(viewed, 10_000_000);
    s.attach_control("ccs-4");
    s.idle_since(young, 5_000);
    let victim = s.pids("ccs-2");

    // In use 1 GiB, the threshold one byte above: a new chat of 2 bytes needs one chat gone.
    const USED: u64 = 1 << 30;
    let cg = fake_cgroup(&s, USED, 4 << 30);
    let high = format!("{}B", USED + 1);
    let env = [
        ("CCS_ENGINE_MEM_HIGH", high.as_str()),
        ("CCS_ENGINE_MEM_CGROUP", cg.as_str()),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    let o = s.run(&["room", "--need", "2B", "--json"], &env);
    let j = o.json();
    assert_eq!(j["ok"], true, "{}", o.stderr);
    assert_eq!(j["freed"][0]["session"], "ccs-2", "{j}");
    assert_eq!(j["freed"][0]["reason"], "room", "{j}");
    assert!(j["freed_bytes"].as_u64().unwrap() > 0, "{j}");
    assert_eq!(reaps(&s), vec![reaped("ccs-2", "room")]);
    assert_eq!(s.tombstone("2").unwrap()["reason"], "room");
    for pid in victim.values() {
        assert!(!alive(*pid), "{pid} survived the room reap");
    }

    // The next call (the memory in use, the test's figure, has not moved) takes the next oldest.
    let o = s.run(&["room", "--need", "2B", "--json"], &env);
    assert_eq!(o.json()["freed"][0]["session"], "ccs-1", "{}", o.stderr);

    // Only busy, viewed and young chats are left: exit 5, with what is left, and nothing taken.
    let o = s.run_expect(&[NO_ROOM], &["room", "--need", "2B", "--json"], &env);
    let j = o.json();
    assert_eq!(j["ok"], false);
    assert_eq!(j["plan"]["left"]["busy"], 1, "{j}");
    assert_eq!(j["plan"]["left"]["viewed"], 1, "{j}");
    assert_eq!(j["plan"]["left"]["young"], 1, "{j}");
    assert!(o.stderr.contains("no room for a new chat"), "{}", o.stderr);
    assert_eq!(s.names(), ["ccs-3", "ccs-4", "ccs-5"]);
    assert_eq!(reaps(&s).len(), 2);
}

#[test]
fn two_room_calls_at_once_each_get_a_chat_of_their_own() {
    let s = Server::new();
    for (i, age) in [(1, 900_000), (2, 800_000), (3, 700_000), (4, 600_000)] {
        let n = s.chat(&format!("ccs-{i}"), &format!("c{i}"), "");
        s.idle_since(n, age);
    }
    // Four live, at most four: each new chat needs one to go, and two at once need two.
    let env = [("CCS_ENGINE_MAX_LIVE", "4"), ("CCS_REAP_GRACE_MS", "2000")];
    let calls: Vec<_> = (0..2)
        .map(|_| {
            s.reap(&env)
                .args(["room", "--need", "1M", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut freed = Vec::new();
    for c in calls {
        let o = Out::from(c.wait_with_output().unwrap()).expect_exit(DONE, "room");
        let j = o.json();
        let f = j["freed"].as_array().unwrap();
        assert_eq!(f.len(), 1, "{j}\n{}", o.stderr);
        freed.push(f[0]["session"].as_str().unwrap().to_string());
    }
    freed.sort();
    assert_eq!(freed, ["ccs-1", "ccs-2"]);
    let mut all = reaps(&s);
    all.sort();
    assert_eq!(all, vec![reaped("ccs-1", "room"), reaped("ccs-2", "room")]);
    assert_eq!(reaps(&s).len(), 2);
    assert_eq!(s.names(), ["ccs-3", "ccs-4"]);
}

#[test]
fn max_live_reaps_the_oldest_idle_at_a_sweep_never_a_busy_or_young_one() {
    let s = Server::new();
    let busy = s.chat("ccs-1", "c1", "");
    s.idle_since(busy, 9_000_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    for (i, age) in [(2, 900_000), (3, 800_000), (4, 700_000)] {
        let n = s.chat(&format!("ccs-{i}"), &format!("c{i}"), "");
        s.idle_since(n, age);
    }
    let young = s.chat("ccs-5", "c5", "");
    s.idle_since(young, 1_000);
    let env = [("CCS_ENGINE_MAX_LIVE", "3"), ("CCS_REAP_GRACE_MS", "2000")];
    s.sweep(DONE, &[], &env);
    let mut all = reaps(&s);
    all.sort();
    assert_eq!(
        all,
        vec![reaped("ccs-2", "max-live"), reaped("ccs-3", "max-live")]
    );
    assert_eq!(s.names(), ["ccs-1", "ccs-4", "ccs-5"]);
    // Garbage and 0 are refused, nothing changed.
    for bad in ["0", "-1", "many"] {
        let o = s.sweep(CONFIG, &[], &[("CCS_ENGINE_MAX_LIVE", bad)]);
        assert!(o.stderr.contains("CCS_ENGINE_MAX_LIVE"), "{}", o.stderr);
    }
    assert_eq!(s.names(), ["ccs-1", "ccs-4", "ccs-5"]);
}

#[test]
fn spawn_makes_room_first_and_refuses_when_it_cannot_unless_no_room() {
    let s = Server::new();
    let old = s.chat("ccs-1", "c1", "");
    s.idle_since(old, 900_000);
    let busy = s.chat("ccs-2", "c2", "");
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    let env = [("CCS_ENGINE_MAX_LIVE", "2"), ("CCS_REAP_GRACE_MS", "2000")];
    let cmd = format!("exec {} --resume c3", fake_claude());
    s.run(&["spawn", "3", "--", "sh", "-c", &cmd], &env);
    assert_eq!(reaps(&s), vec![reaped("ccs-1", "room")]);
    assert_eq!(s.names(), ["ccs-2", "ccs-3"]);
    // Only the busy one and the new one are left: no room, not started.
    let cmd4 = format!("exec {} --resume c4", fake_claude());
    let o = s.run_expect(&[NO_ROOM], &["spawn", "4", "--", "sh", "-c", &cmd4], &env);
    assert!(o.stderr.contains("no room"), "{}", o.stderr);
    assert!(!s.has("ccs-4"));
    // --no-room starts it anyway.
    s.run(&["spawn", "4", "--no-room", "--", "sh", "-c", &cmd4], &env);
    assert!(s.has("ccs-4"));
    assert_eq!(reaps(&s).len(), 1);
}

/// Run `claude-hook` with `event` from the pane of session `$n`, as claude runs it.
fn hook(s: &Server, n: u32, event: &str, env: &[(&str, &str)]) -> Out {
    let pane = s
        .ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("${n}:"),
            "#{pane_id}",
        ])
        .trim()
        .to_string();
    let tmux = format!("{},{},0", s.sock.display(), s.server_pid());
    let mut c = s
        .reap(env)
        .arg("claude-hook")
        .env("TMUX", &tmux)
        .env("TMUX_PANE", &pane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(event.as_bytes()).unwrap();
    Out::from(c.wait_with_output().unwrap()).expect_exit(DONE, "claude-hook")
}

fn session_start(cid: &str, source: &str) -> String {
    format!(r#"{{"session_id":"{cid}","hook_event_name":"SessionStart","source":"{source}"}}"#)
}

#[test]
fn a_new_chats_session_start_hook_applies_max_live_and_makes_room_at_once() {
    let s = Server::new();
    let old = s.chat("ccs-1", "c1", "");
    s.idle_since(old, 900_000);
    let other = s.chat("ccs-2", "c2", "plain,daemon");
    s.idle_since(other, 600_000);
    // A new chat, started by a studio that knows nothing of room: its own hook asks, and
    // CCS_ENGINE_MAX_LIVE takes the oldest idle at once (no sweep runs here).
    let n3 = s.session("ccs-3", "sleep 100000");
    let grace = ("CCS_REAP_GRACE_MS", "2000");
    let cid3 = "537d40fb-07a9-49a2-a899-e9b200b7a0a5";
    hook(
        &s,
        n3,
        &session_start(cid3, "startup"),
        &[("CCS_ENGINE_MAX_LIVE", "2"), grace],
    );
    assert_eq!(reaps(&s), vec![reaped("ccs-1", "max-live")]);
    assert_eq!(s.names(), ["ccs-2", "ccs-3"]);

    // Memory: one more new chat needs the median footprint of the live chats (auto), more than
    // its own shell holds yet; the threshold one byte above the memory in use: ccs-2 goes for
    // it (ccs-3, under the floor, is spared).
    const USED: u64 = 1 << 30;
    let cg = fake_cgroup(&s, USED, 4 << 30);
    let high = format!("{}B", USED + 1);
    let env = [
        ("CCS_ENGINE_MEM_HIGH", high.as_str()),
        ("CCS_ENGINE_MEM_CGROUP", cg.as_str()),
        grace,
    ];
    // The room held for ccs-3 (what it has not grown to yet) would count for 30 s: let it pass.
    std::fs::remove_file(s.studio().join("room.json")).unwrap();
    let n4 = s.session("ccs-4", "sleep 100000");
    let cid4 = "637d40fb-07a9-49a2-a899-e9b200b7a0a5";
    // A resume (its cid known already) is no new chat: nothing taken.
    s.set(n4, "@ccs_cid", cid4);
    hook(&s, n4, &session_start(cid4, "resume"), &env);
    assert_eq!(reaps(&s).len(), 1);
    s.unset(n4, "@ccs_cid");
    hook(&s, n4, &session_start(cid4, "startup"), &env);
    assert_eq!(
        reaps(&s),
        vec![reaped("ccs-1", "max-live"), reaped("ccs-2", "room")]
    );
    assert_eq!(s.names(), ["ccs-3", "ccs-4"]);
}

#[test]
fn need_values_that_mean_nothing_are_refused() {
    let s = Server::new();
    for bad in ["12", "lots", "-1G", ""] {
        let need = format!("--need={bad}");
        let o = s.run_expect(CONFIG, &["room", &need], &[]);
        assert!(o.stderr.contains("--need"), "{bad}: {}", o.stderr);
    }
    let o = s.run_expect(CONFIG, &["room", "--for", "a;b"], &[]);
    assert!(o.stderr.contains("--for"), "{}", o.stderr);
}

#[test]
fn status_and_doctor_show_what_a_new_chat_needs_and_the_live_count_against_the_limit() {
    let s = Server::new();
    for i in 1..=2 {
        s.chat(&format!("ccs-{i}"), &format!("c{i}"), "");
    }
    let env = [("CCS_ENGINE_MAX_LIVE", "3")];
    let g = s.status(&env);
    assert_eq!(g["live_chats"], 2, "{g}");
    assert_eq!(g["max_live"], 3, "{g}");
    // Measured: the median of the two fake claudes' trees, far below the default.
    let need = g["new_chat_bytes"].as_u64().unwrap();
    assert!(need > 0 && need < 400 << 20, "{g}");
    let o = s.run_any(&["doctor", "--json"], &env);
    no_panic(&o);
    let text = o.stdout;
    assert!(text.contains("\"room\""), "{text}");
    assert!(text.contains("2 live chat(s), at most 3"), "{text}");
    let plain = s.run(&["status"], &env).stdout;
    assert!(plain.contains("room for a new chat: needs"), "{plain}");
    assert!(plain.contains("live 2 of 3"), "{plain}");
}
