//! The teardown's races, one row each, against the recording stand-in (no tmux, no process
//! signalled): each row asserts the calls made, the tombstone, the audit line, the journals left
//! and what was left marked.

use super::standin::{Script, StandIn, SERVER_PID};
use super::{reap_with, Hands, Request};
use crate::adapters::state::Outcome;
use crate::config::Config;
use crate::core::policy::{self, Action, Pane, ReapReason, Session, TmuxId};
use crate::engine::context::Reaper;

/// The pid of the chat's one process (its pane's).
const PANE: u32 = 4_000_001;

fn session() -> Session {
    chat(1)
}

/// The chat `ccs-<n>`, idle long since, its one process `PANE + n - 1`.
fn chat(n: u32) -> Session {
    Session {
        tmux_id: TmuxId(n),
        name: format!("ccs-{n}"),
        id: n.to_string(),
        cid: format!("conv-{n}"),
        idle: (crate::adapters::clock::now_ms() - 10_000_000).to_string(),
        panes: vec![Pane {
            pid: PANE + n - 1,
            dead: false,
            dead_status: None,
            dead_signal: None,
            exit_unreported: false,
            start_command: "claude".into(),
            id: Some(n),
            window: Some(n),
            window_index: Some(0),
        }],
        ..Session::default()
    }
    .parsed()
}

struct Row {
    name: &'static str,
    script: Script,
    calls: &'static [&'static str],
    outcome: &'static str,
    /// What the audit line's error says (a part of it), if it has one.
    error: Option<&'static str>,
    tombstone: bool,
    journals: usize,
    /// The sessions left marked, and those left at all.
    marked: &'static [u32],
    sessions: &'static [u32],
    /// The line's SIGTERMs, SIGKILLs and survivors, where the reap got that far.
    stop: Option<(usize, usize, &'static [i32])>,
}

const HEALTHY: &[&str] = &[
    "mark $1",
    "list",
    "members $1",
    "memory",
    "kept $1",
    "fence $1",
    "stop 4000001",
    "kill-session $1",
    "late $1",
];

fn rows() -> Vec<Row> {
    let panic_at = |at| Script {
        panic_at: Some(at),
        ..Script::default()
    };
    vec![
        Row {
            name: "healthy",
            script: Script::default(),
            calls: HEALTHY,
            outcome: "reaped",
            error: None,
            tombstone: true,
            journals: 0,
            marked: &[],
            sessions: &[],
            stop: Some((1, 0, &[])),
        },
        Row {
            name: "the mark lost between re-check and fence",
            script: Script {
                mark_lost_before_fence: true,
                ..Script::default()
            },
            calls: &[
                "mark $1",
                "list",
                "members $1",
                "memory",
                "kept $1",
                "fence $1",
                "clear $1",
            ],
            outcome: "aborted",
            error: Some("fenced off"),
            tombstone: false,
            journals: 0,
            // The other reaper's mark: the clear is checked in the server.
            marked: &[1],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "kill-session fails",
            script: Script {
                kill_fails: true,
                ..Script::default()
            },
            calls: HEALTHY,
            outcome: "failed",
            error: Some("scripted to fail"),
            tombstone: true,
            journals: 0,
            marked: &[1],
            sessions: &[1],
            stop: Some((1, 0, &[])),
        },
        Row {
            name: "a survivor after SIGKILL",
            script: Script {
                survivor: Some(PANE as i32),
                ..Script::default()
            },
            calls: HEALTHY,
            outcome: "failed",
            error: Some("4000001"),
            tombstone: true,
            journals: 0,
            marked: &[],
            sessions: &[],
            stop: Some((1, 1, &[PANE as i32])),
        },
        Row {
            name: "a prompt arriving after the mark",
            script: Script {
                prompt_after_mark: true,
                ..Script::default()
            },
            calls: &[
                "mark $1",
                "list",
                "members $1",
                "memory",
                "kept $1",
                "fence $1",
                "clear $1",
            ],
            outcome: "aborted",
            error: Some("prompt"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "the test-and-set fails",
            script: Script {
                mark_fails: true,
                ..Script::default()
            },
            calls: &["mark $1", "clear $1"],
            outcome: "failed",
            error: Some("scripted to fail"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at the mark",
            script: panic_at("mark"),
            calls: &["mark $1", "clear $1"],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at the re-check",
            script: panic_at("list"),
            calls: &["mark $1", "list", "clear $1"],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at the victims",
            script: panic_at("members"),
            calls: &["mark $1", "list", "members $1", "clear $1"],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at the journals",
            script: panic_at("kept"),
            calls: &[
                "mark $1",
                "list",
                "members $1",
                "memory",
                "kept $1",
                "clear $1",
            ],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at the fence (journal written)",
            script: panic_at("fence"),
            calls: &[
                "mark $1",
                "list",
                "members $1",
                "memory",
                "kept $1",
                "fence $1",
                "clear $1",
            ],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: false,
            journals: 0,
            marked: &[],
            sessions: &[1],
            stop: None,
        },
        // Signalled: never given back half torn down; the next sweep finishes it.
        Row {
            name: "a panic at the signals",
            script: panic_at("stop"),
            calls: &[
                "mark $1",
                "list",
                "members $1",
                "memory",
                "kept $1",
                "fence $1",
                "stop 4000001",
            ],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: true,
            journals: 1,
            marked: &[1],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at kill-session",
            script: panic_at("kill-session"),
            calls: &HEALTHY[..8],
            outcome: "failed",
            error: Some("panicked"),
            tombstone: true,
            journals: 1,
            marked: &[1],
            sessions: &[1],
            stop: None,
        },
        Row {
            name: "a panic at the late look",
            script: panic_at("late"),
            calls: HEALTHY,
            outcome: "failed",
            error: Some("panicked"),
            tombstone: true,
            journals: 1,
            marked: &[],
            sessions: &[],
            stop: None,
        },
    ]
}

#[tokio::test]
async fn every_race_of_the_teardown_ends_as_its_row_says() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary dir: {e}"));
    let mut failed: Vec<String> = Vec::new();
    for row in rows() {
        let r = reaper(&dir.path().join(row.name.replace(' ', "-")));
        let req = request(&r, session());
        let standin = StandIn::new(vec![session()], row.script.clone());
        let delivered = parking_lot::Mutex::new(Vec::new());
        let sink = |l: &crate::adapters::state::AuditLine| {
            delivered.lock().push(l.clone());
        };
        let ends = reap_with(Hands::of(&r), &standin, &standin, vec![req], Some(&sink)).await;

        let name = row.name;
        let mut wrong = Vec::new();
        let mut check = |ok: bool, what: String| {
            if !ok {
                wrong.push(what);
            }
        };
        let calls = standin.calls();
        check(calls == row.calls, format!("the calls: {calls:?}"));
        check(
            ends.len() == 1,
            format!("{} ends for one request", ends.len()),
        );
        let line = ends.first().map(|f| &f.line);
        let json = serde_json::to_value(line).unwrap_or_default();
        check(json["outcome"] == row.outcome, format!("the line: {json}"));
        let error = line.and_then(|l| l.error.as_deref());
        match row.error {
            Some(e) => check(
                error.unwrap_or("").contains(e),
                format!("the error: {error:?}"),
            ),
            None => check(error.is_none(), format!("the error: {error:?}")),
        }
        // Delivered once, and appended once to the audit log.
        let delivered = delivered.lock().len();
        check(delivered == 1, format!("delivered {delivered} times"));
        let audit = std::fs::read_to_string(r.state.audit_path()).unwrap_or_default();
        let appended = audit.lines().count();
        check(appended == 1, format!("appended {appended} times"));
        let tomb = r.state.read_tombstone("1").ok().flatten();
        check(
            tomb.is_some() == row.tombstone,
            format!("the tombstone: {tomb:?}"),
        );
        if let Some(t) = tomb {
            check(
                t.cid.as_deref() == Some("conv-1"),
                format!("its cid: {t:?}"),
            );
        }
        // The facts its stages gathered: the cid, the victims and their memory from the
        // victims' step on, the signals from the first signal on.
        if let Some(l) = line {
            check(
                l.cid.as_deref() == Some("conv-1"),
                format!("the cid: {:?}", l.cid),
            );
            let panicked = row.error == Some("panicked");
            if panicked {
                // A line written by the unwinding is the line as begun.
                let got = (l.pids.len(), l.rss_bytes, l.term);
                check(got == (0, 0, 0), format!("a panic's line: {got:?}"));
            } else if calls.iter().any(|c| c == "memory") {
                let pids = (l.pids.clone(), l.rss_bytes, l.pss_bytes);
                check(
                    pids == (vec![PANE as i32], 1 << 20, Some(1 << 19)),
                    format!("the victims: {pids:?}"),
                );
            }
            if let Some((term, kill, survivors)) = row.stop {
                let got = (l.term, l.kill, l.survivors.as_slice());
                check(got == (term, kill, survivors), format!("the stop: {got:?}"));
            }
        }
        let journals = r.state.journals().len();
        check(
            journals == row.journals,
            format!("{journals} journals left"),
        );
        let marked: Vec<u32> = standin.marked().into_iter().map(TmuxId::get).collect();
        check(marked == row.marked, format!("left marked: {marked:?}"));
        let listed: Vec<u32> = standin.sessions().into_iter().map(TmuxId::get).collect();
        check(listed == row.sessions, format!("left listed: {listed:?}"));
        if !wrong.is_empty() {
            failed.push(format!("{name}: {}", wrong.join("; ")));
        }
    }
    assert!(failed.is_empty(), "rows failed:\n{}", failed.join("\n"));
}

/// The reaper of these tests, its state dir under `dir`.
fn reaper(dir: &std::path::Path) -> std::sync::Arc<Reaper> {
    let vars = [
        ("CCS_REAP_STATE_DIR", dir.to_string_lossy().into_owned()),
        ("CCS_ENGINE_IDLE_KILL_MS", "120000".into()),
        ("CCS_REAP_SOCKET_NAME", "standin".into()),
    ];
    let cfg = Config::from_vars(vars.into_iter().map(|(k, v)| (k.to_string(), v)), None)
        .unwrap_or_else(|e| panic!("the config: {e}"));
    Reaper::new(cfg, false)
}

/// The request to reap `s`, as a sweep decides it.
fn request(r: &Reaper, s: Session) -> Request {
    let busy = Default::default();
    let now = crate::adapters::clock::now_ms();
    let (decision, s) = policy::decide_session(s, &busy, false, now, &r.cfg.policy)
        .unwrap_or_else(|| panic!("no decision"));
    assert_eq!(decision.action(), Action::Reap, "{decision:?}");
    Request {
        decision,
        session: s,
        reason: ReapReason::Idle,
        force: false,
        server_pid: Some(SERVER_PID),
    }
}

/// A batch of two that panics once the first chat is finished, the second still signalled:
/// the first's line stays as written (`reaped`, once), the second gets one `failed` line; the
/// second is never released half torn down (its mark and journal stay for the next sweep).
#[tokio::test]
async fn a_batch_that_panics_between_two_chats_ends_writes_each_line_once() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary dir: {e}"));
    let r = reaper(dir.path());
    let reqs = vec![request(&r, chat(1)), request(&r, chat(2))];
    let script = Script {
        panic_at: Some("kill-session"),
        panic_after: 1,
        ..Script::default()
    };
    let standin = StandIn::new(vec![chat(1), chat(2)], script);
    let delivered = parking_lot::Mutex::new(Vec::new());
    let sink = |l: &crate::adapters::state::AuditLine| {
        let mut d = delivered.lock();
        d.push((l.session.clone(), l.outcome));
    };
    let ends = reap_with(Hands::of(&r), &standin, &standin, reqs, Some(&sink)).await;

    let calls = standin.calls();
    assert_eq!(
        calls[5..],
        [
            "fence $1,$2",
            "stop 4000001,4000002",
            "kill-session $1",
            "late $1",
            "kill-session $2"
        ],
        "{calls:?}"
    );
    let outcomes: Vec<(String, Outcome)> = ends
        .iter()
        .map(|f| (f.line.session.clone(), f.line.outcome))
        .collect();
    let want = vec![
        ("ccs-1".to_string(), Outcome::Reaped),
        ("ccs-2".to_string(), Outcome::Failed),
    ];
    assert_eq!(outcomes, want);
    assert!(
        ends[1]
            .line
            .error
            .as_deref()
            .unwrap_or("")
            .contains("panicked"),
        "{:?}",
        ends[1].line
    );
    let delivered = delivered.lock().clone();
    assert_eq!(delivered, want, "each line delivered once");
    let audit = std::fs::read_to_string(r.state.audit_path()).unwrap_or_default();
    assert_eq!(audit.lines().count(), 2, "{audit}");
    let journals: Vec<TmuxId> = r
        .state
        .journals()
        .into_iter()
        .flatten()
        .map(|j| j.tmux_id)
        .collect();
    assert_eq!(
        journals,
        vec![TmuxId(2)],
        "the signalled chat's journal stays"
    );
    assert_eq!(
        standin.marked(),
        vec![TmuxId(2)],
        "the signalled chat's mark stays"
    );
    assert_eq!(standin.sessions(), vec![TmuxId(2)]);
    for id in ["1", "2"] {
        assert!(
            r.state.read_tombstone(id).ok().flatten().is_some(),
            "tombstone {id}"
        );
    }
}

/// A panic once the audit line is written (in its delivery): the line stays as written, once,
/// and no second, contradicting line follows; nothing is left marked or journaled.
#[tokio::test]
async fn a_batch_that_panics_after_its_audit_line_writes_no_second_line() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary dir: {e}"));
    let r = reaper(dir.path());
    let standin = StandIn::new(vec![session()], Script::default());
    let sink = |l: &crate::adapters::state::AuditLine| panic!("the sink panics at {}", l.session);
    let ends = reap_with(
        Hands::of(&r),
        &standin,
        &standin,
        vec![request(&r, session())],
        Some(&sink),
    )
    .await;

    assert_eq!(standin.calls(), HEALTHY);
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].line.outcome, Outcome::Reaped, "{:?}", ends[0].line);
    let audit = std::fs::read_to_string(r.state.audit_path()).unwrap_or_default();
    assert_eq!(audit.lines().count(), 1, "{audit}");
    assert!(r.state.journals().is_empty());
    assert!(standin.marked().is_empty() && standin.sessions().is_empty());
}
