//! A batch of more than 8 reaps writes its journals and tombstones as batch files, each chat's own
//! `<id>.json` a hard link to the file holding its record (docs/files.md, "Batch files"). On a
//! real tmux: a reaper killed in the middle of such a batch leaves journals that the next sweep
//! finishes chat by chat, and every chat comes back from its tombstone with its own conversation.

use crate::common::*;
use std::os::unix::fs::MetadataExt;

const CHATS: usize = 10;

fn name(i: usize) -> String {
    format!("ccs-{i}")
}

/// The (inode, link count) of each chat's file in `dir`, in chat order.
fn links(dir: &std::path::Path) -> Vec<(u64, u64)> {
    (1..=CHATS)
        .map(|i| {
            let m = std::fs::symlink_metadata(dir.join(format!("{i}.json"))).unwrap();
            assert!(m.is_file(), "{i}.json is not a regular file");
            (m.ino(), m.nlink())
        })
        .collect()
}

#[test]
fn a_large_batch_killed_mid_teardown_is_finished_chat_by_chat_and_each_chat_comes_back() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    for i in 1..=CHATS {
        let n = s.chat(&name(i), &format!("c{i}"), "stubborn");
        s.idle_since(n, 10_000_000);
    }
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "100000"),
        ("CCS_REAP_INTERVAL_MS", "100"),
        ("CCS_TMUX_TIMEOUT_MS", "300"),
    ];
    let mut d = KillOnDrop(
        s.reap(&env)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The whole batch under way: every journal written, every claude dead of its SIGTERM, while
    // each TERM-ignoring helper holds the 100 s grace.
    let reaping = s.studio().join("reaping");
    let sessions = s.studio().join("sessions");
    assert!(
        wait_until(15.0, || (1..=CHATS)
            .all(|i| reaping.join(format!("{i}.json")).exists())),
        "the batch's journals were not all written"
    );
    assert!(
        wait_until(15.0, || (1..=CHATS)
            .all(|i| !alive(s.pids(&name(i))["claude"]))),
        "SIGTERM was not sent to every chat"
    );
    d.0.kill().unwrap();
    d.0.wait().unwrap();
    // The journals are one batch file under ten names, and so are the tombstones.
    for dir in [&reaping, &sessions] {
        let l = links(dir);
        assert!(
            l.iter()
                .all(|&(ino, nlink)| ino == l[0].0 && nlink == CHATS as u64),
            "{}: not one batch file linked once per chat: {l:?}",
            dir.display()
        );
    }
    for i in 1..=CHATS {
        assert!(alive(s.pids(&name(i))["stubborn"]), "ccs-{i}'s helper died");
    }
    // The next sweep finishes every teardown from its chat's record.
    let o = s.once(DONE, 100, &[]);
    for i in 1..=CHATS {
        assert!(!s.has(&name(i)), "{} is still there: {}", name(i), o.stderr);
        for (kind, pid) in s.pids(&name(i)) {
            assert!(!alive(pid), "{}'s {kind} survived: {}", name(i), o.stderr);
        }
        assert!(
            !reaping.join(format!("{i}.json")).exists(),
            "{i}'s journal is left"
        );
    }
    let lines = s.audit();
    assert_eq!(lines.len(), CHATS, "{lines:?}");
    for i in 1..=CHATS {
        let l = s.audit_of(&name(i));
        assert_eq!(l.len(), 1, "{l:?}");
        assert_eq!(l[0]["outcome"], "reaped", "{}", l[0]);
        assert_eq!(l[0]["cid"], format!("c{i}"), "{}", l[0]);
    }
    // `status` reads every tombstone out of the batch file, each chat's own.
    let st = s.run(&["status", "--json"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    for i in 1..=CHATS {
        assert!(
            st.stdout.contains(&format!("\"c{i}\"")),
            "status lacks chat {i}'s cid: {}",
            st.stdout
        );
    }
    // `spawn` resumes two chats of the batch, each with its own conversation; the other chats'
    // tombstones stay as they were.
    for i in [1, CHATS] {
        let id = i.to_string();
        s.run(
            &["spawn", &id, "--", &fake_claude()],
            &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)],
        );
        let cmd = s.ok(&[
            "list-panes",
            "-t",
            &format!("={}:", name(i)),
            "-F",
            "#{pane_start_command}",
        ]);
        assert!(
            cmd.contains(&format!("--resume c{i}")),
            "spawn {i} did not resume c{i}: {cmd}"
        );
    }
    for i in 2..CHATS {
        assert_eq!(
            s.tombstone(&i.to_string()).unwrap()["cid"],
            format!("c{i}"),
            "chat {i}'s tombstone changed"
        );
    }
}
