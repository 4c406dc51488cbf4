//! The batched teardown on a real tmux: one sweep reaps many sessions with shared steps, and
//! still refuses, one by one, every session that changed between the marks and the re-check.

mod common;
use common::wrapper::shq;
use common::*;

/// A `tmux` first on the reaper's PATH that, right after the call that sets the reap marks
/// (the first holding `@ccs_reaping`), changes three chats as a studio and a user would: ccs-2
/// starts a turn, ccs-3 is renamed, ccs-4 gets a control-mode viewer. Every call is passed on.
fn meddler(s: &Server) -> std::path::PathBuf {
    s.tmux_wrapper(&format!(
        r#""$REAL" "$@"; rc=$?
case "$*" in *if-shell*@ccs_reaping*)
  if [ ! -e {done} ]; then
    : >{done}
    "$REAL" -S "$SOCK" set -t =ccs-2: @ccs_turn 1 \; rename-session -t =ccs-3 renamed
    (sleep 30 | "$REAL" -S "$SOCK" -C attach -t =ccs-4 &) </dev/null >/dev/null 2>&1
    i=0
    while [ "$("$REAL" -S "$SOCK" display -p -t =ccs-4: '#{{session_attached}}')" = 0 ] && [ $i -lt 200 ]; do
      sleep 0.02; i=$((i+1))
    done
  fi
esac
exit $rc
"#,
        done = shq(&path_str(&s.path("meddled"))),
    ))
}

#[test]
fn a_batch_refuses_each_session_that_changed_after_its_mark_and_reaps_the_others() {
    let s = Server::new();
    let mut n = Vec::new();
    for i in 1..=6 {
        let id = s.chat(&format!("ccs-{i}"), &format!("c{i}"), "plain");
        s.idle_since(id, 10_000_000);
        n.push(id);
    }
    let bin = meddler(&s);
    let (o, _) = s.sweep_via(
        &bin,
        DONE,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "1000"),
        ],
    );
    assert!(s.path("meddled").exists(), "the wrapper never ran");
    let j = o.json();
    let outcome = |name: &str| {
        j["reaps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["session"] == name)
            .map(|l| l["outcome"].as_str().unwrap().to_string())
    };
    // The three that changed after the mark: aborted, every process alive, no tombstone.
    for (name, now) in [("ccs-2", "ccs-2"), ("ccs-3", "renamed"), ("ccs-4", "ccs-4")] {
        assert_eq!(outcome(name).as_deref(), Some("aborted"), "{name}: {j}");
        assert!(s.has(now), "{name} was killed");
        for (kind, pid) in s.pids(name) {
            assert!(alive(pid), "{name}: {kind} was signalled");
        }
        assert!(
            s.tombstone(&name[4..]).is_none(),
            "{name}: tombstone written"
        );
    }
    // Their marks are gone.
    for &i in &n[1..4] {
        assert_eq!(s.show(i, "@ccs_reaping"), None);
    }
    // The others of the batch: reaped, whole trees.
    for name in ["ccs-1", "ccs-5", "ccs-6"] {
        assert_eq!(outcome(name).as_deref(), Some("reaped"), "{name}: {j}");
        assert!(!s.has(name));
        for (kind, pid) in s.pids(name) {
            assert!(!alive(pid), "{name}: {kind} survived");
        }
        assert_eq!(
            s.tombstone(&name[4..]).unwrap()["cid"],
            format!("c{}", &name[4..])
        );
    }
}

#[test]
fn one_sweep_reaps_a_batch_in_a_handful_of_tmux_calls() {
    let s = Server::new();
    for i in 1..=30 {
        let id = s.session(&format!("ccs-{i}"), "sleep 100000");
        s.set(id, "@ccs_cid", &format!("c{i}"));
        s.idle_since(id, 10_000_000);
    }
    let calls = s.path("calls");
    let bin = s.tmux_wrapper(&format!(
        "echo x >>{}\nexec \"$REAL\" \"$@\"\n",
        shq(&path_str(&calls))
    ));
    s.sweep_via(&bin, DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert_eq!(s.audit().len(), 30);
    assert!(s.audit().iter().all(|l| l["outcome"] == "reaped"));
    // Listing, marks, re-check listing, listing before the kills, kills: not one per session.
    let n = std::fs::read_to_string(&calls).unwrap().lines().count();
    assert!(n <= 8, "{n} tmux calls for 30 reaps");
}
