//! Snapshot tests of what people read: the human `status` table and the `--once` output (each
//! reap's line, what a dry run would reap, the summary), rendered from a fixed snapshot decided
//! by the real rules at a fixed time, compared with [`insta`]. The expected text is in
//! `tests/it/snapshots/*.snap`. A mismatch fails and (outside CI) leaves the new text beside the
//! old one as `*.snap.new`; after a change to the rendering that is meant, `cargo insta review`
//! (or, without cargo-insta, `INSTA_UPDATE=always cargo test --test it snapshots::`) takes the
//! new text, and the diff is reviewed with the change. Under `CI=true` nothing is written.

use ccs_reap::adapters::state::{AuditLine, Ended, Outcome};
use ccs_reap::cli::render::{render_status, render_sweep};
use ccs_reap::core::policy::{
    self, Action, Client, HostMemory, Pane, Policy, ReapReason, Session, Snapshot,
};
use ccs_reap::core::report::{Asleep, Gauge, SessionReport, Summary, SweepReport, ViewerReport};
use ccs_reap::core::time::rfc3339;

const NOW: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;

fn session(n: u32, f: impl FnOnce(&mut Session)) -> Session {
    let mut s = Session {
        tmux_id: ccs_reap::core::policy::TmuxId(n),
        name: format!("ccs-{n}"),
        id: n.to_string(),
        idle: (NOW - 90_000).to_string(),
        cid: format!("chat-{n}-conversation"),
        panes: vec![Pane {
            pid: 1000 + n,
            dead: false,
            dead_status: None,
            dead_signal: None,
            exit_unreported: false,
            start_command: "claude".into(),
            id: None,
            window: None,
            window_index: None,
        }],
        mem_rss: Some(7_000_000 + u64::from(n) * 1000),
        mem_pss: Some(680_000 + u64::from(n) * 1000),
        ..Session::default()
    };
    s.mem_bytes = s.mem_pss;
    f(&mut s);
    s.parsed()
}

/// Every state a `status` shows, one session each.
fn snapshot() -> Snapshot {
    Snapshot {
        sessions: vec![
            session(1, |_| {}),
            session(2, |s| s.turn = (NOW - 14_000).to_string()),
            session(3, |s| s.idle = (NOW - 45 * MIN).to_string()),
            session(4, |s| {
                s.attached = 1;
                s.clients = vec![Client {
                    pid: 4242,
                    control_mode: true,
                    created_ms: NOW - 5 * MIN,
                    activity_ms: NOW - MIN,
                    orphaned: Some(false),
                    window: None,
                    through: None,
                }];
            }),
            session(5, |s| {
                s.pin = "1".into();
                s.idle = (NOW - 50 * MIN).to_string();
            }),
            session(6, |s| {
                s.cid = String::new();
                s.idle = (NOW - 40 * MIN).to_string();
            }),
            session(7, |s| s.idle = String::new()),
            session(8, |s| {
                s.panes[0].dead = true;
                s.panes[0].dead_status = Some(0);
            }),
        ],
        host: Some(HostMemory {
            used_bytes: 416 << 20,
            limit_bytes: Some(12 << 30),
        }),
        ..Snapshot::default()
    }
}

fn policy() -> Policy {
    Policy {
        idle_kill_ms: Some(30 * MIN as u64),
        ..Policy::default()
    }
}

fn report(dry_run: bool, reaps: Vec<AuditLine>, summary: Summary) -> SweepReport {
    let snap = snapshot();
    let decisions = policy::decide(&snap, NOW, &policy());
    let sessions: Vec<SessionReport> = decisions
        .into_iter()
        .map(|d| {
            let s = snap
                .sessions
                .iter()
                .find(|s| s.tmux_id == d.tmux_id)
                .expect("decided sessions are the snapshot's");
            SessionReport {
                // As the sweep tells it, from the pane's start command.
                agent: s
                    .panes
                    .iter()
                    .find_map(|p| ccs_reap::agents::of_start_command(&p.start_command))
                    .map(|a| a.name),
                cid_at_first_prompt: false,
                tmux_target: s.tmux_target(),
                turn: (!s.turn.is_empty()).then(|| s.turn.clone()),
                rss_bytes: s.mem_rss,
                pss_bytes: s.mem_pss,
                viewer_list: s
                    .clients
                    .iter()
                    .map(|c| ViewerReport {
                        pid: c.pid,
                        control_mode: c.control_mode,
                        attached_ms: (NOW - c.created_ms) as u64,
                        idle_ms: (NOW - c.activity_ms) as u64,
                        orphaned: c.orphaned,
                        through: None,
                    })
                    .collect(),
                decision: d,
            }
        })
        .collect();
    SweepReport {
        at: rfc3339(NOW),
        dry_run,
        enabled: true,
        error: None,
        socket_path: "/tmp/tmux-1000/ccstudio".into(),
        tmux_server_up: Some(true),
        tmux_server_empty: false,
        blind: None,
        total_rss_bytes: sessions.iter().filter_map(|s| s.rss_bytes).sum(),
        total_pss_bytes: Some(sessions.iter().filter_map(|s| s.pss_bytes).sum()),
        sessions,
        host: snapshot().host,
        watching: Some("cgroup v2 /sys/fs/cgroup/studio (the tmux server's cgroup)".into()),
        reaps,
        summary,
        lost: Vec::new(),
        asleep: Vec::new(),
        gauge: Gauge {
            mem_threshold_bytes: Some(2 << 30),
            ..Gauge::default()
        },
        took_ms: 12,
    }
}

/// `n` chats asleep, reaped `n` hours ago or less (the newest first, as `status` reads them).
fn asleep(n: u32) -> Vec<Asleep> {
    (0..n)
        .map(|i| {
            let id = format!("z{i}");
            Asleep {
                state: "asleep",
                session: format!("ccs-{id}"),
                cid: Some(format!("chat-{id}-conversation")),
                reaped_at: rfc3339(NOW - (i64::from(i) + 1) * 60 * MIN),
                reason: if i % 3 == 2 {
                    ReapReason::Memory
                } else {
                    ReapReason::Idle
                },
                cwd: Some(format!("/home/u/p{i}")),
                command: ccs_reap::core::report::resume_command(&id),
                id,
            }
        })
        .collect()
}

fn reap_line(n: u32, reason: ReapReason, f: impl FnOnce(&mut AuditLine)) -> AuditLine {
    let mut l = AuditLine::begin(
        rfc3339(NOW),
        &format!("ccs-{n}"),
        &n.to_string(),
        ccs_reap::core::policy::TmuxId(n),
        Some(format!("chat-{n}-conversation")),
        reason,
        Some(45 * MIN as u64),
    );
    f(&mut l);
    l
}

/// Compare `got` with its snapshot `tests/it/snapshots/it__snapshots__<name>.snap`. insta
/// compares without the trailing newlines: that the text ends in one is checked here.
fn check(name: &str, got: &str) {
    assert!(
        got.ends_with('\n'),
        "{name} does not end in a newline: {got:?}"
    );
    insta::assert_snapshot!(name, got);
}

#[test]
fn the_status_table_reads_as_it_did() {
    let r = report(true, Vec::new(), Summary::default());
    // The snapshot covers every state but `unknown` and `stuck`, which have their own tests.
    let states: Vec<&str> = r
        .sessions
        .iter()
        .map(|s| s.decision.state.as_str())
        .collect();
    for want in [
        "idle", "busy", "expired", "viewed", "pinned", "no-cid", "new", "exited",
    ] {
        assert!(states.contains(&want), "{want} not in {states:?}");
    }
    check("status", &render_status(&r, false));
    for l in render_status(&r, false).lines() {
        assert!(l.chars().count() <= 80, "wider than 80 columns: {l:?}");
    }
}

/// Asleep chats after the live ones (the newest 20, then a count), a memory rule over its
/// threshold with nothing to take, and `--wide`.
#[test]
fn the_status_table_with_chats_asleep_and_memory_over_reads_as_it_did() {
    let mut r = report(true, Vec::new(), Summary::default());
    r.asleep = asleep(23);
    r.gauge.mem_threshold_bytes = Some(300 << 20);
    let narrow = render_status(&r, false);
    check("status-asleep", &narrow);
    for l in narrow.lines() {
        assert!(l.chars().count() <= 80, "wider than 80 columns: {l:?}");
    }
    let rows = narrow.lines().filter(|l| l.starts_with("ccs-z")).count();
    assert_eq!(rows, 20, "{narrow}");
    assert!(narrow.contains("... and 3 more asleep"), "{narrow}");
    assert!(narrow.contains("with nothing to take"), "{narrow}");
    r.asleep.truncate(2);
    check("status-wide", &render_status(&r, true));
}

#[test]
fn the_once_output_reads_as_it_did() {
    let reaped = reap_line(3, ReapReason::Idle, |l| {
        l.outcome = Outcome::Reaped;
        l.ended = Some(Ended::Stopped);
        l.term = 3;
        l.pids = vec![1003, 1103, 1203];
        l.rss_bytes = 7_003_000;
        l.pss_bytes = Some(683_000);
        l.took_ms = 104;
    });
    let exited = reap_line(8, ReapReason::Exited, |l| {
        l.outcome = Outcome::Reaped;
        l.ended = Some(Ended::Completed);
        l.took_ms = 9;
    });
    let failed = reap_line(9, ReapReason::Memory, |l| {
        l.outcome = Outcome::Failed;
        l.term = 2;
        l.kill = 1;
        l.pids = vec![1009, 1109];
        l.rss_bytes = 300 << 20;
        l.survivors = vec![1109];
        l.took_ms = 5020;
        l.error = Some("1 process(es) survived SIGKILL".into());
    });
    let aborted = reap_line(10, ReapReason::Idle, |l| {
        l.error = Some("the session changed: a turn began".into());
        l.took_ms = 3;
    });
    let summary = Summary {
        seen: 8,
        kept: 6,
        reaped: 2,
        aborted: 1,
        failed: 1,
        ..Summary::default()
    };
    let r = report(false, vec![reaped, exited, failed, aborted], summary);
    check("sweep", &render_sweep(&r));

    let would: usize = r
        .sessions
        .iter()
        .filter(|s| s.decision.action() == Action::Reap)
        .count();
    let summary = Summary {
        seen: 8,
        kept: 8 - would,
        would_reap: would,
        ..Summary::default()
    };
    check(
        "sweep-dry-run",
        &render_sweep(&report(true, Vec::new(), summary)),
    );
}
