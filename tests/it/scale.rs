//! The batched teardown on a real tmux: one sweep reaps many sessions with shared steps, and
//! still refuses, one by one, every session that changed between the marks and the re-check.

use crate::common::wrapper::shq;
use crate::common::*;

/// One `--once --json` sweep with `bin` first on the reaper's PATH, reaping on, grace 0.5 s.
fn once_json_via(s: &Server, bin: &std::path::Path) -> Out {
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "500"),
    ];
    s.sweep_via(bin, DONE, &["--json"], &env).0
}

/// The outcome of `name`'s reap in a `--once --json` report.
fn outcome_of(report: &serde_json::Value, name: &str) -> Option<String> {
    report["reaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["session"] == name)
        .map(|l| l["outcome"].as_str().unwrap().to_string())
}

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
    let outcome = |name: &str| outcome_of(&j, name);
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
    // One line per tmux call, its arguments on it.
    let bin = s.tmux_wrapper(&format!(
        "{{ printf '%s ' \"$@\" | tr '\\n' ' '; echo; }} >>{}\nexec \"$REAL\" \"$@\"\n",
        shq(&path_str(&calls))
    ));
    s.sweep_via(&bin, DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    assert_eq!(s.audit().len(), 30);
    assert!(s.audit().iter().all(|l| l["outcome"] == "reaped"));
    let log = std::fs::read_to_string(&calls).unwrap();
    let (kills, rest): (Vec<&str>, Vec<&str>) =
        log.lines().partition(|l| l.contains("kill-session"));
    // The version, the listing, the marks, the re-check's listing, the argv listing, the fence:
    // one call each, not one per session.
    assert!(
        rest.len() <= 6,
        "{} tmux calls besides the kills:\n{log}",
        rest.len()
    );
    // The kills go by wave (the chats whose trees the same look found gone), each wave one call:
    // every session once, and far fewer calls than sessions however the 30 trees end.
    let killed: usize = kills
        .iter()
        .map(|l| l.matches("kill-session").count())
        .sum();
    assert_eq!(killed, 30, "kill-session commands:\n{log}");
    assert!(
        kills.len() <= 10,
        "{} kill calls for 30 reaps:\n{log}",
        kills.len()
    );
}

/// A batch too large for one command line goes to tmux as scripts on the client's stdin
/// (`source-file -`), a session a line: each session's test-and-set is still its own (a turn
/// begun just before the marks keeps its session, a session gone stops no other line), and every
/// word reaches the server single-quoted, so its parser expands nothing.
#[test]
fn a_batch_too_large_for_one_command_line_is_marked_and_killed_by_script_line_by_line() {
    let s = Server::new();
    let mut ids = Vec::new();
    for i in 1..=80 {
        let id = s.session(&format!("ccs-{i}"), "sleep 100000");
        s.set(id, "@ccs_cid", &format!("c{i}"));
        s.idle_since(id, 10_000_000);
        ids.push(id);
    }
    // Just before the first marking script: a turn begins on ccs-7 and ccs-9 goes away. Every
    // script is kept (scripts/<n>) and handed on as it came.
    let dir = s.path("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = s.tmux_wrapper(&format!(
        r#"case "$*" in *source-file*)
  n=$(ls {dir} | wc -l); f={dir}/$n; cat >"$f"
  if grep -q '@ccs_reaping 1' "$f" && [ ! -e {dir}/.marked ]; then
    : >{dir}/.marked
    "$REAL" -S "$SOCK" set-option -t =ccs-7: @ccs_turn 1 \; kill-session -t =ccs-9
  fi
  exec "$REAL" "$@" <"$f";;
esac
exec "$REAL" "$@"
"#,
        dir = shq(&path_str(&dir)),
    ));
    let o = once_json_via(&s, &bin);
    let j = o.json();
    assert_eq!(outcome_of(&j, "ccs-7").as_deref(), Some("aborted"), "{j}");
    assert_eq!(outcome_of(&j, "ccs-9").as_deref(), Some("aborted"), "{j}");
    for i in (1..=80).filter(|i| ![7, 9].contains(i)) {
        let name = format!("ccs-{i}");
        assert_eq!(
            outcome_of(&j, &name).as_deref(),
            Some("reaped"),
            "{name}: {j}\n{}",
            o.stderr
        );
        assert!(!s.has(&name), "{name} is still there");
    }
    // Each reaped chat's memory, read on two threads beside the journals, is its own and there.
    let reaped: Vec<serde_json::Value> = s
        .audit()
        .into_iter()
        .filter(|l| l["outcome"] == "reaped")
        .collect();
    assert_eq!(reaped.len(), 78);
    assert!(
        reaped.iter().all(|l| l["rss_bytes"].as_u64() > Some(0)),
        "a reaped chat without its memory: {reaped:?}"
    );
    // ccs-7 was never marked: the turn kept it, in the server.
    assert!(s.has("ccs-7"));
    assert_eq!(s.show(ids[6], "@ccs_reaping"), None);
    assert_eq!(s.token(ids[6]), None);
    // The marks went as one script (80 sessions), every line one session's, every word quoted.
    let scripts: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with(".marked"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let marks: Vec<&String> = scripts
        .iter()
        .filter(|t| t.contains("@ccs_reaping 1"))
        .collect();
    assert_eq!(marks.len(), 1, "marking scripts: {scripts:?}");
    let lines: Vec<&str> = marks[0].lines().collect();
    assert_eq!(lines.len(), 80, "{}", marks[0]);
    for l in lines {
        assert!(l.starts_with("'if-shell' '-F' '-t' '$"), "{l}");
        // Outside the quotes only the blanks between words, `;` between commands and `\'`.
        let (mut quoted, mut escaped, mut outside) = (false, false, String::new());
        for c in l.chars() {
            match (quoted, escaped, c) {
                (false, true, _) => escaped = false,
                (false, false, '\\') => escaped = true,
                (_, _, '\'') => quoted = !quoted,
                (false, _, c) => outside.push(c),
                _ => {}
            }
        }
        assert!(!quoted, "an open quote in {l:?}");
        assert!(
            outside.chars().all(|c| c == ' ' || c == ';'),
            "unquoted text in {l:?}: {outside:?}"
        );
    }
}

/// A `tmux` wrapper that counts the marking calls (only marks set `@ccs_reaping` to a time) in
/// `<dir>/marks`, and kills session `=victim` just before the first one.
fn kill_before_mark(s: &Server, victim: &str) -> std::path::PathBuf {
    s.tmux_wrapper(&format!(
        r#"case "$*" in *if-shell*"@ccs_reaping 1"*)
  [ -e {marks} ] || "$REAL" -S "$SOCK" kill-session -t ={victim}
  echo x >>{marks}
esac
exec "$REAL" "$@"
"#,
        marks = shq(&path_str(&s.path("marks"))),
        victim = shq(victim),
    ))
}

#[test]
fn a_session_gone_before_its_mark_is_aborted_quietly_and_the_batch_goes_on() {
    let s = Server::new();
    for i in 1..=4 {
        let id = s.chat(&format!("ccs-{i}"), &format!("c{i}"), "plain");
        s.idle_since(id, 10_000_000);
    }
    // Not ours, idle, unattached and the newest: tmux's "current" session, where an `if-shell`
    // whose target is gone runs instead.
    let other = s.session("other", "sleep 100000");
    // ccs-1 is `$0`, the first of the chain.
    let bin = kill_before_mark(&s, "ccs-1");
    let o = once_json_via(&s, &bin);
    let j = o.json();
    let outcome = |name: &str| outcome_of(&j, name);
    assert_eq!(outcome("ccs-1").as_deref(), Some("aborted"), "{j}");
    assert!(s.tombstone("1").is_none());
    for name in ["ccs-2", "ccs-3", "ccs-4"] {
        assert_eq!(outcome(name).as_deref(), Some("reaped"), "{name}: {j}");
    }
    // Every mark went in one call: the gone session stopped nothing.
    let calls = std::fs::read_to_string(s.path("marks"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(calls, 1, "{calls} marking calls: {}", o.stderr);
    assert!(s.has("other"));
    assert_eq!(s.show(other, "@ccs_reaping"), None);
    assert_eq!(s.token(other), None);
}

/// `reap --force` leaves out the turn and viewer terms of the test-and-set, so on a session that
/// is gone (where tmux evaluates the condition without a session) only the `$N` guard keeps its
/// commands from running, and failing, at all.
#[test]
fn a_forced_reap_of_a_session_gone_before_its_mark_is_aborted_not_failed() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    s.session("other", "sleep 100000");
    let bin = kill_before_mark(&s, "ccs-1");
    let o = s.run_via(&bin, &["--json", "reap", "--force", "1"], &[]);
    assert!(s.path("marks").exists(), "the wrapper never ran");
    let out = o.json();
    let error = out["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("aborted") && error.contains("gone"),
        "{out}\n{}",
        o.stderr
    );
    assert!(s.tombstone("1").is_none());
    assert!(s.has("other"));
}

/// A `tmux` wrapper that, just before the first marking call, replaces the server with a new one
/// whose ccs-1 is `$0` again, idle for long and with a cid: same `$N`, same name, and reapable on
/// its own terms. Returns the wrapper and the file where the new pane's pid is written.
fn replace_server_before_mark(s: &Server) -> (std::path::PathBuf, std::path::PathBuf) {
    let pid_file = s.path("new-pane.pid");
    let bin = s.tmux_wrapper(&format!(
        r#"case "$*" in *if-shell*"@ccs_reaping 1"*)
  if [ ! -e {pid} ]; then
    "$REAL" -S "$SOCK" kill-server
    i=0
    while "$REAL" -S "$SOCK" has-session 2>/dev/null && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
    "$REAL" -S "$SOCK" -f /dev/null new-session -d -s ccs-1 'sleep 100000' \; set -t =ccs-1: @ccs_cid c9 \; set -t =ccs-1: @ccs_idle 1000
    "$REAL" -S "$SOCK" display -p -t =ccs-1: '#{{pane_pid}}' >{pid}
  fi
esac
exec "$REAL" "$@"
"#,
        pid = shq(&path_str(&pid_file)),
    ));
    (bin, pid_file)
}

fn new_pane(pid_file: &std::path::Path) -> i32 {
    std::fs::read_to_string(pid_file)
        .expect("the wrapper never replaced the server")
        .trim()
        .parse()
        .unwrap()
}

/// Between the sweep's listing and the marks the tmux server is replaced by a new one whose
/// ccs-1 reuses `$0` and the name. The mark lands on it, but the re-check sees another server:
/// nothing of the new server is touched.
#[test]
fn a_session_of_a_server_started_after_the_listing_is_never_reaped() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    assert_eq!(n, 0);
    s.idle_since(n, 10_000_000);
    let (bin, pid_file) = replace_server_before_mark(&s);
    let o = once_json_via(&s, &bin);
    let pane = new_pane(&pid_file);
    let j = o.json();
    let line = &j["reaps"][0];
    assert_eq!(line["outcome"], "aborted", "{j}\n{}", o.stderr);
    assert!(s.has("ccs-1"), "the new server's ccs-1 was reaped");
    assert!(alive(pane), "the new server's pane process was signalled");
    assert!(s.tombstone("1").is_none());
}

/// `spawn` cleans up a chat whose panes have all exited with a forced reap (no re-check of the
/// rules): the server replaced before its mark, the new server's live ccs-1 must survive it.
#[test]
fn spawn_never_cleans_up_a_session_of_a_server_started_after_it_looked() {
    let s = Server::new();
    let n = s.remain_on_exit("ccs-1", "true");
    assert_eq!(n, 0);
    s.set(n, "@ccs_cid", "c1");
    assert!(wait_until(10.0, || s
        .ok(&["list-panes", "-t", "=ccs-1:", "-F", "#{pane_dead}"])
        .trim()
        == "1"));
    let (bin, pid_file) = replace_server_before_mark(&s);
    let o = s.run_via(&bin, &["spawn", "1", "--", "sleep", "100000"], &[]);
    let pane = new_pane(&pid_file);
    assert!(
        alive(pane),
        "the new server's ccs-1 was reaped: {}",
        o.stderr
    );
    assert!(s.has("ccs-1"));
    assert_ne!(
        o.code, 0,
        "spawn went on as if it had cleaned up: {}",
        o.stderr
    );
}
