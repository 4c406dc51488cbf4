//! Fault injection: tmux that hangs, a server killed mid-sweep, a state dir that cannot be written,
//! an activity file replaced mid-read, a session renamed between listing and reaping, and a locale
//! without UTF-8 with session names that are odd. Each fault ends with everything kept, or with a
//! clean reap; never with a panic, a guess, or a process killed that should not have been.
//!
//! Faults inside the reaper's own tmux calls are injected with a `tmux` wrapper script put first on
//! the reaper's PATH (the reaper runs the binary named `tmux` found on PATH); the fixture's own tmux
//! calls never go through it.

use crate::common::wrapper::{real_tmux, shq};
use crate::common::*;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// helpers

/// On drop, SIGKILL the pids a wrapper recorded, if they still carry our temp dir in their
/// environment (never a stranger with a reused pid). A safety net for failing tests only.
struct KillRecorded {
    file: PathBuf,
    marker: String,
}

impl Drop for KillRecorded {
    fn drop(&mut self) {
        for pid in pids_in(&self.file) {
            if pid > 1 && alive(pid) && environ_has(pid, &self.marker) {
                let _ = signal(pid, Signal::KILL);
            }
        }
    }
}

/// On drop, SIGCONT a process this test stopped.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = signal(self.0, Signal::CONT);
    }
}

fn exists(s: &Server, n: u32) -> bool {
    s.tmux(&["has-session", "-t", &format!("${n}")])
        .status
        .success()
}

fn journals(s: &Server) -> Vec<PathBuf> {
    std::fs::read_dir(s.studio().join("reaping"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// 1. a tmux that hangs

#[test]
fn a_hanging_tmux_times_out_keeps_everything_and_leaves_no_process() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    let pids = s.pids("ccs-1");
    let rec = s.path("hung.pids");
    let marker = path_str(s.dir.path());
    let _net = KillRecorded {
        file: rec.clone(),
        marker: marker.clone(),
    };
    // Answers nothing, ever (well, for 60 s): the client of a wedged server looks like this.
    let bin = s.tmux_wrapper(&format!(
        "echo $$ >>{}\nexec sleep 60\n",
        shq(&path_str(&rec))
    ));
    // A sweep that could not read tmux must exit 1.
    let (o, took) = s.sweep_via(
        &bin,
        FAILED,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", "1"),
            ("CCS_TMUX_TIMEOUT_MS", "500"),
        ],
    );
    let hung = pids_in(&rec);
    assert!(
        !hung.is_empty(),
        "the wrapper was never called: {}",
        o.stderr
    );
    assert!(took < Duration::from_secs(5), "gave up only after {took:?}");
    assert!(o.stderr.contains("did not answer"), "{}", o.stderr);
    let j = o.json();
    assert!(
        j["error"].as_str().unwrap_or("").contains("did not answer"),
        "{j}"
    );
    assert!(j["reaps"].as_array().unwrap().is_empty(), "{j}");
    // Everything kept, checked with the real tmux.
    assert!(s.has("ccs-1"));
    for (kind, pid) in &pids {
        assert!(alive(*pid), "{kind} ({pid}) was killed");
    }
    assert_eq!(s.show(n, "@ccs_reaping"), None);
    assert!(s.audit().is_empty());
    // kill_on_drop: no hung client outlives the reaper.
    assert!(
        wait_until(5.0, || hung.iter().all(|p| !alive(*p))),
        "hung tmux clients left behind: {:?}",
        hung.iter()
            .filter(|p| alive(**p))
            .map(|p| (*p, cmdline(*p)))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_stopped_tmux_server_times_out_and_keeps_everything() {
    // The real thing: the server is wedged (SIGSTOP), so the real tmux client hangs.
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, 10_000_000);
    let stamp = s.show(n, "@ccs_idle");
    let pids = s.pids("ccs-1");
    let server = s.server_pid();
    let sock = path_str(&s.sock);
    {
        let _resume = Resume(server);
        signal(server, Signal::STOP).unwrap();
        let t = Instant::now();
        let o = s.sweep(
            FAILED,
            &["--json"],
            &[
                ("CCS_ENGINE_IDLE_KILL_MS", "1"),
                ("CCS_TMUX_TIMEOUT_MS", "500"),
            ],
        );
        let took = t.elapsed();
        assert!(took < Duration::from_secs(5), "gave up only after {took:?}");
        assert!(o.stderr.contains("did not answer"), "{}", o.stderr);
        assert!(o.json()["reaps"].as_array().unwrap().is_empty());
        // The client it started was killed when it gave up, not left waiting on the server.
        assert!(
            wait_until(5.0, || procs_with(&[&sock, "list-sessions"]).is_empty()),
            "tmux clients left behind: {:?}",
            procs_with(&[&sock, "list-sessions"])
        );
    }
    // Resumed: everything is as it was.
    assert!(wait_until(5.0, || s.has("ccs-1")));
    assert_eq!(s.show(n, "@ccs_idle"), stamp);
    assert_eq!(s.show(n, "@ccs_reaping"), None);
    for (kind, pid) in &pids {
        assert!(alive(*pid), "{kind} ({pid}) was killed");
    }
    assert!(s.audit().is_empty());
}

// ---------------------------------------------------------------------------------------------
// 2. the tmux server killed in the middle of a sweep

/// A pass-through wrapper that runs `kill` (sh, with `$REAL` and `$SOCK` set) before the first call
/// that holds `if-shell` (the test-and-set before a reap). The reaps of a sweep run concurrently:
/// every other `if-shell` call waits until the kill is done, so none slips in before it.
fn killer_wrapper(s: &Server, kill: &str) -> PathBuf {
    let log = s.path("killed.log");
    let lock = s.path("killed.lock");
    let done = s.path("killed.done");
    s.tmux_wrapper(&format!(
        "for a in \"$@\"; do\n  if [ \"$a\" = if-shell ]; then\n    if mkdir {lock} 2>/dev/null; then\n      echo \"$*\" >{log}\n      {kill}\n      touch {done}\n    else\n      while [ ! -e {done} ]; do sleep 0.01; done\n    fi\n    break\n  fi\ndone\nexec \"$REAL\" \"$@\"\n",
        log = shq(&path_str(&log)),
        lock = shq(&path_str(&lock)),
        done = shq(&path_str(&done)),
    ))
}

fn server_killed_mid_reap(kill: &str) {
    let s = Server::new();
    let n1 = s.chat("ccs-1", "c1", "daemon");
    let n2 = s.chat("ccs-2", "c2", "daemon");
    for n in [n1, n2] {
        s.idle_since(n, 10_000_000);
    }
    let daemons: Vec<i32> = ["ccs-1", "ccs-2"]
        .iter()
        .map(|nm| s.pids(nm)["daemon"])
        .collect();
    let bin = killer_wrapper(&s, kill);
    let (o, took) = s.sweep_via(
        &bin,
        DONE_OR_FAILED,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "500"),
            ("CCS_TMUX_TIMEOUT_MS", "2000"),
        ],
    );
    assert!(
        s.path("killed.log").exists(),
        "the fault was never injected: {}",
        o.stderr
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let j = o.json();
    // The reaps stopped at the test-and-set: nothing signalled, no tombstone, no journal left.
    for line in j["reaps"]
        .as_array()
        .unwrap()
        .iter()
        .chain(s.audit().iter())
    {
        assert!(
            line["outcome"] == "aborted" || line["outcome"] == "failed",
            "{line}"
        );
        assert_eq!(line["term"], 0, "{line}");
        assert_eq!(line["kill"], 0, "{line}");
        assert!(line["pids"].as_array().unwrap().is_empty(), "{line}");
    }
    assert!(s.tombstone("1").is_none() && s.tombstone("2").is_none());
    assert!(journals(&s).is_empty(), "{:?}", journals(&s));
    assert!(
        s.names().is_empty(),
        "the server should be gone: {:?}",
        s.names()
    );
    // The setsid helpers (which the server's death does not reach) were not signalled by us.
    for d in &daemons {
        assert!(alive(*d), "daemon {d} was signalled by an aborted reap");
    }

    // A fresh server on the same socket: a normal sweep works. Its first session is `$0` again,
    // like the dead server's ccs-1, whose helper must not be taken for one of the new session's
    // (TMUX carries the server pid).
    let m = s.chat("ccs-3", "c3", "plain");
    assert_eq!(m, 0);
    s.idle_since(m, 10_000_000);
    let fresh = s.pids("ccs-3");
    let o = s.once(DONE, 500, &[]);
    assert!(!s.has("ccs-3"), "{}", o.stderr);
    for (kind, pid) in &fresh {
        assert!(!alive(*pid), "ccs-3 {kind} survived");
    }
    assert!(s
        .audit()
        .iter()
        .any(|l| l["session"] == "ccs-3" && l["outcome"] == "reaped"));
    for d in &daemons {
        assert!(
            alive(*d),
            "a helper of the dead server was reaped with ccs-3"
        );
    }
}

#[test]
fn server_killed_by_kill_server_during_the_reap_aborts_cleanly() {
    server_killed_mid_reap("\"$REAL\" -S \"$SOCK\" kill-server");
}

#[test]
fn server_killed_by_sigkill_during_the_reap_aborts_cleanly() {
    // As the OOM killer would: the socket file stays behind.
    server_killed_mid_reap(
        "kill -9 \"$(\"$REAL\" -S \"$SOCK\" display-message -p '#{pid}')\"; sleep 0.2",
    );
}

#[test]
fn a_server_killed_before_the_sweep_is_an_empty_world() {
    let s = Server::new();
    s.chat("ccs-1", "c1", "");
    s.ok(&["kill-server"]);
    let o = s.sweep(DONE, &["--json"], &[("CCS_ENGINE_IDLE_KILL_MS", "1")]);
    let j = o.json();
    assert!(j["error"].is_null(), "{j}");
    assert!(j["sessions"].as_array().unwrap().is_empty(), "{j}");

    // Killed with SIGKILL (a stale socket file left behind): the same.
    let s = Server::new();
    s.chat("ccs-1", "c1", "");
    let server = s.server_pid();
    signal(server, Signal::KILL).unwrap();
    assert!(wait_until(5.0, || !alive(server)));
    assert!(s.sock.exists(), "expected a stale socket file");
    let o = s.sweep(DONE, &["--json"], &[("CCS_ENGINE_IDLE_KILL_MS", "1")]);
    let j = o.json();
    assert!(j["error"].is_null(), "{j}");
    assert!(j["sessions"].as_array().unwrap().is_empty(), "{j}");
}

// ---------------------------------------------------------------------------------------------
// 3. a state dir that cannot be written

/// Run one sweep with `state` as the state dir; the idle chat must be untouched and the report
/// must say the reap was not attempted, naming `why_path`.
fn unwritable(s: &Server, n: u32, state: &Path, why_path: &Path, case: &str) {
    let pids = s.pids("ccs-1");
    let state = path_str(state);
    // A reap not attempted is a failure: exit 1.
    let o = s.sweep(
        FAILED,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "500"),
            ("CCS_REAP_STATE_DIR", &state),
        ],
    );
    assert!(
        s.has("ccs-1"),
        "{case}: reaped although its audit line could not be written\n{}",
        o.stderr
    );
    for (kind, pid) in &pids {
        assert!(alive(*pid), "{case}: {kind} ({pid}) was signalled");
    }
    assert_eq!(s.show(n, "@ccs_reaping"), None, "{case}: mark left behind");
    let j = o.json();
    let reaps = j["reaps"].as_array().unwrap();
    assert_eq!(reaps.len(), 1, "{case}: {j}");
    assert_eq!(reaps[0]["outcome"], "failed", "{case}: {j}");
    let err = reaps[0]["error"].as_str().unwrap_or("");
    let p = path_str(why_path);
    assert!(
        err.contains("not attempted") && err.contains(&p),
        "{case}: the error should say the reap was not attempted and name {p}: {err:?}"
    );
    assert!(
        o.stderr.contains(&p),
        "{case}: stderr does not name {p}\n{}",
        o.stderr
    );
}

#[test]
fn a_state_dir_that_cannot_be_written_stops_the_reap_before_anything_is_touched() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain,daemon");
    s.idle_since(n, 10_000_000);

    // The state dir below a regular file: ENOTDIR on everything (chmod does not stop root).
    let blocker = s.path("blocker");
    std::fs::write(&blocker, "a file, not a directory").unwrap();
    unwritable(
        &s,
        n,
        &blocker.join("state"),
        &blocker,
        "state dir below a file",
    );

    // The tombstone directory is a file.
    let st = s.path("st-sessions");
    let studio = s.studio_in(&st);
    std::fs::create_dir_all(&studio).unwrap();
    std::fs::write(studio.join("sessions"), "").unwrap();
    unwritable(&s, n, &st, &studio.join("sessions"), "sessions/ is a file");

    // The audit log is a directory.
    let st = s.path("st-audit");
    std::fs::create_dir_all(st.join("reaped.jsonl")).unwrap();
    unwritable(
        &s,
        n,
        &st,
        &st.join("reaped.jsonl"),
        "reaped.jsonl is a directory",
    );

    // The journal directory is a file: the journal goes down before the first signal, so the
    // reap stops there, and the mark it set is cleared.
    let st = s.path("st-reaping");
    let studio = s.studio_in(&st);
    std::fs::create_dir_all(&studio).unwrap();
    std::fs::write(studio.join("reaping"), "").unwrap();
    unwritable(&s, n, &st, &studio.join("reaping"), "reaping/ is a file");

    // Read-only, where permissions bind (not as root).
    if !rustix::process::geteuid().is_root() {
        let st = s.path("st-ro");
        std::fs::create_dir_all(s.studio_in(&st).join("sessions")).unwrap();
        std::fs::set_permissions(&st, std::fs::Permissions::from_mode(0o555)).unwrap();
        unwritable(&s, n, &st, &st, "read-only state dir");
        std::fs::set_permissions(&st, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // And with a state dir that works, the same session goes.
    s.once(DONE, 500, &[]);
    assert!(!s.has("ccs-1"));
}

#[test]
fn a_full_audit_log_stops_the_reap_before_anything_is_touched() {
    // reaped.jsonl -> /dev/full: it opens fine, every write fails with ENOSPC.
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain,daemon");
    s.idle_since(n, 10_000_000);
    let st = s.path("st-full");
    std::fs::create_dir_all(&st).unwrap();
    std::os::unix::fs::symlink("/dev/full", st.join("reaped.jsonl")).unwrap();
    // BUG (src/state.rs, StateDir::check_writable): it opens reaped.jsonl but only *writes* a
    // separate probe file, so an audit log on a full device passes the check, the session is
    // reaped, and its audit line is then lost (append_audit fails with ENOSPC).
    unwritable(
        &s,
        n,
        &st,
        &st.join("reaped.jsonl"),
        "reaped.jsonl -> /dev/full",
    );
}

// ---------------------------------------------------------------------------------------------
// 4. an activity file replaced mid-read

/// A thread that keeps writing an activity file until dropped.
struct Writer {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    h: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(f: impl Fn(u64) + Send + 'static) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (st, c) = (stop.clone(), count.clone());
        let h = std::thread::spawn(move || {
            let mut i = 0;
            while !st.load(Ordering::Relaxed) {
                f(i);
                i += 1;
                c.store(i, Ordering::Relaxed);
            }
        });
        Writer {
            stop,
            count,
            h: Some(h),
        }
    }

    fn writes(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.h.take() {
            let _ = h.join();
        }
    }
}

/// A valid activity file marking `busy` busy, padded with finished entries to a few hundred KB so
/// a reader takes its time.
fn activity(busy: &[&str]) -> Vec<u8> {
    let pad: Vec<String> = (0..6000)
        .map(|i| {
            format!(r#"{{"id": "done-{i}", "status": "completed", "note": "padding padding"}}"#)
        })
        .collect();
    let busy: Vec<String> = busy.iter().map(|b| format!("{b:?}")).collect();
    format!(
        "{{\"history\": [{}],\n \"activeTasks\": [{}]}}\n",
        pad.join(", "),
        busy.join(", ")
    )
    .into_bytes()
}

#[test]
fn an_activity_file_replaced_atomically_is_always_read_whole() {
    let s = Server::new();
    let n1 = s.chat("ccs-1", "c1", "");
    let n2 = s.chat("ccs-2", "c2", "");
    for n in [n1, n2] {
        s.idle_since(n, 10_000_000);
    }
    let f = s.path("activity.json");
    let contents = [activity(&["1"]), activity(&["2"])];
    std::fs::write(&f, &contents[0]).unwrap();
    let w = {
        let (f, tmp) = (f.clone(), s.path(".activity.json.tmp"));
        Writer::start(move |i| {
            std::fs::write(&tmp, &contents[(i % 2) as usize]).unwrap();
            std::fs::rename(&tmp, &f).unwrap();
        })
    };
    let fs = path_str(&f);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_ACTIVITY_FILES", fs.as_str()),
    ];
    let mut seen = [0; 2];
    for i in 0..20 {
        let o = s.sweep(DONE, &["--dry-run", "--json"], &env);
        assert!(!o.stderr.contains("malformed"), "sweep {i}: {}", o.stderr);
        let j = o.json();
        assert!(
            j["error"].is_null(),
            "sweep {i} read a bad file: {}",
            j["error"]
        );
        let by = by_name(&j);
        let busy: Vec<&str> = ["ccs-1", "ccs-2"]
            .into_iter()
            .filter(|nm| by[*nm]["state"] == "busy")
            .collect();
        assert_eq!(busy.len(), 1, "sweep {i}: busy {busy:?}\n{j}");
        let other = if busy[0] == "ccs-1" { "ccs-2" } else { "ccs-1" };
        assert_eq!(by[busy[0]]["action"], "keep");
        assert_eq!(by[other]["action"], "reap", "sweep {i}: {}", by[other]);
        seen[(busy[0] == "ccs-2") as usize] += 1;
    }
    let writes = w.writes();
    drop(w);
    assert!(writes > 20, "the writer hardly ran ({writes} writes)");
    eprintln!(
        "{writes} replacements; sweeps saw ccs-1 busy {} times, ccs-2 {}",
        seen[0], seen[1]
    );
    assert!(s.has("ccs-1") && s.has("ccs-2"));
}

#[test]
fn an_activity_file_caught_half_written_keeps_everything() {
    let s = Server::new();
    let n1 = s.chat("ccs-1", "c1", "plain");
    let n2 = s.chat("ccs-2", "c2", "plain");
    for n in [n1, n2] {
        s.idle_since(n, 10_000_000);
    }
    let pids: Vec<i32> = ["ccs-1", "ccs-2"]
        .iter()
        .flat_map(|nm| s.pids(nm).into_values())
        .collect();
    let f = s.path("activity.json");
    // Whole, it marks both busy; torn, it is not JSON.
    let text = activity(&["1", "2"]);
    std::fs::write(&f, &text).unwrap();
    let w = {
        let f = f.clone();
        Writer::start(move |_| {
            // Not atomic: truncate, write half, pause, write the rest.
            let mut h = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&f)
                .unwrap();
            let (a, b) = text.split_at(text.len() / 2);
            h.write_all(a).unwrap();
            h.flush().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            h.write_all(b).unwrap();
            drop(h);
            std::thread::sleep(Duration::from_millis(15));
        })
    };
    let fs = path_str(&f);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "500"),
        ("CCS_ACTIVITY_FILES", fs.as_str()),
    ];
    let (mut sweeps, mut torn, mut whole) = (0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while (sweeps < 20 || torn == 0 || whole == 0) && Instant::now() < deadline {
        // 1 when it caught the file torn, 0 when it read it whole: told apart below.
        let o = s.sweep(DONE_OR_FAILED, &["--json"], &env);
        sweeps += 1;
        let j = o.json();
        assert!(
            j["reaps"].as_array().unwrap().is_empty(),
            "sweep {sweeps} reaped: {j}"
        );
        let by = by_name(&j);
        match j["error"].as_str() {
            Some(e) => {
                torn += 1;
                assert!(e.contains(&fs), "the error does not name the file: {e}");
                assert_eq!(o.code, 1, "{}", o.stderr);
                for nm in ["ccs-1", "ccs-2"] {
                    assert_eq!(by[nm]["action"], "keep", "{}", by[nm]);
                }
            }
            None => {
                whole += 1;
                assert_eq!(o.code, 0, "{}", o.stderr);
                for nm in ["ccs-1", "ccs-2"] {
                    assert_eq!(by[nm]["state"], "busy", "{}", by[nm]);
                }
            }
        }
    }
    drop(w);
    eprintln!("{sweeps} sweeps: {torn} caught the file half-written, {whole} read it whole");
    assert!(
        torn > 0,
        "no sweep caught the file half-written: the fault was not injected"
    );
    assert!(s.has("ccs-1") && s.has("ccs-2"));
    for pid in pids {
        assert!(alive(pid), "{pid} was killed");
    }
    assert!(s.audit().is_empty(), "{:?}", s.audit());
}

// ---------------------------------------------------------------------------------------------
// 5. a session renamed between listing and reaping

/// A pass-through wrapper that, on the first call holding `if-shell`, renames the session the
/// if-shell targets (`-t $N:`) to `to`, then runs the real tmux.
fn renamer(s: &Server, to: &str) -> PathBuf {
    s.tmux_wrapper(&format!(
        r#"seen=0; prev=""; target=""
for a in "$@"; do
  if [ $seen = 1 ] && [ -z "$target" ] && [ "$prev" = "-t" ]; then target="$a"; fi
  [ "$a" = if-shell ] && seen=1
  prev="$a"
done
if [ -n "$target" ] && [ ! -e {done} ]; then
  echo "${{target%:}}" >{done}
  "$REAL" -S "$SOCK" rename-session -t "${{target%:}}" {to}
fi
exec "$REAL" "$@"
"#,
        done = shq(&path_str(&s.path("renamed.log"))),
        to = shq(to),
    ))
}

fn rename_mid_reap(s: &Server, to: &str) -> (u32, std::collections::HashMap<String, i32>, Out) {
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "plain,daemon");
    s.idle_since(n, 10_000_000);
    let pids = s.pids("ccs-1");
    let bin = renamer(s, to);
    // An aborted reap is no failure: exit 0.
    let (o, _) = s.sweep_via(
        &bin,
        DONE,
        &["--json"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "500"),
        ],
    );
    let log = std::fs::read_to_string(s.path("renamed.log")).unwrap_or_default();
    assert_eq!(
        log.trim(),
        format!("${n}"),
        "the fault was not injected: {}",
        o.stderr
    );
    (n, pids, o)
}

#[test]
fn a_session_renamed_between_listing_and_reaping_is_not_reaped() {
    let s = Server::new();
    let (n, pids, o) = rename_mid_reap(&s, "renamed-by-operator");
    assert!(
        s.has("renamed-by-operator"),
        "the renamed session was reaped: {:?}\n{}",
        s.names(),
        o.stderr
    );
    assert!(exists(&s, n));
    for (kind, pid) in &pids {
        assert!(
            alive(*pid),
            "{kind} ({pid}) of the renamed session was signalled"
        );
    }
    assert!(s.tombstone("1").is_none());
    assert!(journals(&s).is_empty());
    for line in s.audit() {
        assert_eq!(line["outcome"], "aborted", "{line}");
        assert!(line["pids"].as_array().unwrap().is_empty(), "{line}");
    }
    for line in o.json()["reaps"].as_array().unwrap() {
        assert_eq!(line["outcome"], "aborted", "{line}");
    }
    // A later sweep leaves it alone too (not ours any more).
    s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", "1")]);
    assert!(s.has("renamed-by-operator"));
}

#[test]
fn a_session_renamed_between_listing_and_reaping_keeps_no_reap_mark() {
    let s = Server::new();
    let (n, _pids, _o) = rename_mid_reap(&s, "renamed-by-operator");
    // BUG (fixed; once in `Reaper::reap`, now src/engine/teardown/): when the fresh listing no longer
    // shows the session as ours (`fresh_decision` -> Ok(None), "the session is gone"), the reap returns without
    // `clear_reaping`, so a session renamed away keeps `@ccs_reaping`; renamed back, `turn begin`
    // waits on it until a sweep judges it stale.
    assert_eq!(
        s.show(n, "@ccs_reaping"),
        None,
        "an aborted reap left its @ccs_reaping mark on a session it no longer owns"
    );
    assert_eq!(s.token(n), None);
}

#[test]
fn a_session_renamed_to_another_chat_name_between_listing_and_reaping_is_not_reaped() {
    // Renamed to a name that is ours too: the reap was decided for ccs-1; the session is now
    // ccs-9, whose tombstone would be written under id 1. Abort, and let the next sweep decide.
    let s = Server::new();
    let (n, pids, o) = rename_mid_reap(&s, "ccs-9");
    assert!(
        s.has("ccs-9"),
        "BUG: the session renamed to ccs-9 was reaped under the decision taken for ccs-1 \
         (tombstone 1: {:?}, 9: {:?})\n{}",
        s.tombstone("1"),
        s.tombstone("9"),
        o.stderr
    );
    assert!(exists(&s, n));
    for (kind, pid) in &pids {
        assert!(alive(*pid), "{kind} ({pid}) was signalled");
    }
    assert!(s.tombstone("1").is_none() && s.tombstone("9").is_none());
    for line in s.audit() {
        assert_eq!(line["outcome"], "aborted", "{line}");
    }
    assert_eq!(s.show(n, "@ccs_reaping"), None, "mark left behind");
}

// ---------------------------------------------------------------------------------------------
// 6. a locale without UTF-8, and odd session names

#[test]
fn without_utf8_an_idle_session_is_reaped_and_odd_names_are_never_touched() {
    let s = Server::new();
    // The server starts under LANG=C, from a client without -u.
    let st = std::process::Command::new(real_tmux())
        .arg("-S")
        .arg(&s.sock)
        .args([
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "keeper",
            "sleep 100000",
        ])
        .env_remove("TMUX")
        .env("CLAUDE_CONFIG_DIR", s.path("claude-config"))
        .env_remove("LC_CTYPE")
        .env("LANG", "C")
        .env("LC_ALL", "C")
        .status()
        .unwrap();
    assert!(st.success());
    // The premise: without -u, a C locale rewrites the tab separators.
    let plain = std::process::Command::new(real_tmux())
        .arg("-S")
        .arg(&s.sock)
        .args(["list-sessions", "-F", "a\t#{session_name}"])
        .env_remove("TMUX")
        .env_remove("LC_CTYPE")
        .env("LANG", "C")
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    eprintln!(
        "tmux without -u under LANG=C prints {:?}",
        String::from_utf8_lossy(&plain.stdout)
    );

    let odd = [
        "ccs-é",
        "ccs-1é",
        "ccs-a b",
        "ccs-1 ",
        "ccs-\"q\"",
        "ccs-'q'",
        "ccs-$1",
        "ccs-t\tb",
        "ccs-n\nb",
        "ccs-1\r",
        "ccs-back\\slash",
        "ccs-\u{1b}[31m",
    ];
    let odd_ids: Vec<(u32, &str)> = odd
        .iter()
        .map(|nm| (s.session(nm, "sleep 100000"), *nm))
        .collect();
    let n = s.chat("ccs-1", "c1", "plain");
    // Every odd one would be reaped if it were ours: expired, with a cid.
    for (m, _) in &odd_ids {
        s.idle_since(*m, 10_000_000);
        s.set(*m, "@ccs_cid", "c-odd");
    }
    s.idle_since(n, 10_000_000);
    let stamps: Vec<Option<String>> = odd_ids
        .iter()
        .map(|(m, _)| s.show(*m, "@ccs_idle"))
        .collect();
    let panes: Vec<i32> = odd_ids.iter().map(|(m, _)| s.pane_pid(*m)).collect();
    let pids = s.pids("ccs-1");

    let c_env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_GRACE_MS", "500"),
        ("LANG", "C"),
        ("LC_ALL", "C"),
        ("LC_CTYPE", "C"),
    ];
    // Decide first: every row parses, only ccs-1 is ours, and it would be reaped.
    let o = s.sweep(DONE, &["--dry-run", "--json"], &c_env);
    let j = o.json();
    assert!(
        j["error"].is_null(),
        "an odd name broke the parse: {}",
        j["error"]
    );
    let names: Vec<&str> = j["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ccs-1"], "{j}");
    assert_eq!(j["sessions"][0]["action"], "reap");

    // Then for real.
    let o = s.sweep(DONE, &["--json"], &c_env);
    assert!(o.json()["error"].is_null(), "{}", o.stdout);
    assert!(!s.has("ccs-1"), "{}", o.stderr);
    for (kind, pid) in &pids {
        assert!(!alive(*pid), "ccs-1 {kind} survived");
    }
    let a = s.audit();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["session"], "ccs-1");
    assert_eq!(a[0]["outcome"], "reaped");
    assert_eq!(s.tombstone("1").unwrap()["cid"], "c1");
    for (((m, nm), stamp), pane) in odd_ids.iter().zip(&stamps).zip(&panes) {
        assert!(exists(&s, *m), "{nm:?} was killed");
        assert!(alive(*pane), "the pane of {nm:?} was signalled");
        assert_eq!(&s.show(*m, "@ccs_idle"), stamp, "{nm:?} was stamped");
        assert_eq!(s.show(*m, "@ccs_reaping"), None, "{nm:?} was marked");
    }
    assert!(s.has("keeper"));
}
