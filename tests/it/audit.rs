//! The bounded audit log and `ccs-reap events`, with real reapers on real tmux servers: rotation
//! at `CCS_AUDIT_MAX_BYTES` keeping `CCS_AUDIT_KEEP` files, two reaper processes of two sockets
//! appending to one state dir across rotations, and a follower that prints every line once, in
//! order, across them.

use crate::common::*;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// SIGTERM to SIGKILL: the sessions run `sleep`, which goes at the first SIGTERM.
const GRACE: u64 = 2000;

/// `n` sessions `<prefix><first>` ... running `sleep`, each with a conversation id and idle for
/// hours: the next sweep reaps them all.
fn idle_sessions(s: &Server, prefix: &str, first: usize, n: usize) {
    for i in first..first + n {
        let t = s.session(&format!("{prefix}{i}"), "sleep 100000");
        s.set(t, "@ccs_cid", &format!("conv-{prefix}{i}"));
        s.idle_since(t, 10_000_000);
    }
}

/// The audit files in a state dir, oldest first: `reaped.jsonl.<N>` ... `.1`, `reaped.jsonl`.
fn audit_files(state: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = (1..)
        .map(|n| state.join(format!("reaped.jsonl.{n}")))
        .take_while(|p| p.exists())
        .collect();
    v.reverse();
    v.push(state.join("reaped.jsonl"));
    v
}

/// Every line of every audit file, oldest first. Each file must end with a newline (no line is
/// split) and each line must be a JSON object.
fn audit_lines(state: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in audit_files(state) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends in the middle of a line",
            f.display()
        );
        for l in text.lines() {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: a line that is not JSON ({e}): {l}", f.display()));
            assert!(v.is_object(), "{}: {l}", f.display());
            out.push(l.to_string());
        }
    }
    out
}

fn session_of(line: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["session"].as_str().unwrap().to_string()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// A running `ccs-reap events`: its stdout lines and its stderr, collected by two threads.
struct Events {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Events {
    fn start(mut cmd: Command) -> Events {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        let mut err = child.stderr.take().unwrap();
        let e = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                e.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let ev = Events {
            child,
            lines,
            stderr,
        };
        // It logs this (CCS_LOG=debug) once it holds the file and its starting point.
        assert!(
            wait_until(10.0, || ev.stderr().contains("following the audit log")),
            "events did not start:\n{}",
            ev.stderr()
        );
        ev
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait until it has printed `n` lines.
    fn wait_for(&self, n: usize) -> Vec<String> {
        assert!(
            wait_until(10.0, || self.lines().len() >= n),
            "events printed {} lines of {n}:\n{}",
            self.lines().len(),
            self.stderr()
        );
        self.lines()
    }

    /// SIGTERM; it must exit 0.
    fn stop(mut self) -> Vec<String> {
        signal(self.child.id() as i32, Signal::TERM).unwrap();
        let code = wait_exit(&mut self.child, 10.0);
        assert_eq!(code, Some(0), "events on SIGTERM:\n{}", self.stderr());
        self.lines()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's exit code once it exits within `secs` (None: still running, or killed by a signal).
fn wait_exit(child: &mut Child, secs: f64) -> Option<i32> {
    let mut code = None;
    wait_until(secs, || match child.try_wait() {
        Ok(Some(st)) => {
            code = st.code();
            true
        }
        _ => false,
    });
    code
}

#[test]
fn rotation_keeps_whole_lines_within_the_size_and_the_number_of_files() {
    let s = Server::new();
    let limits = [("CCS_AUDIT_MAX_BYTES", "2000"), ("CCS_AUDIT_KEEP", "2")];
    let mut reaped = 0;
    for round in 0..3 {
        idle_sessions(&s, "ccs-", round * 8, 8);
        let o = s.once(DONE, GRACE, &limits);
        reaped += o.stdout.matches("reaped ccs-").count();
    }
    assert_eq!(reaped, 24, "every session is reaped");
    assert!(s.names().is_empty(), "{:?}", s.names());
    let st = s.state_dir();
    let files = audit_files(&st);
    assert_eq!(
        files.len(),
        3,
        "reaped.jsonl and KEEP=2 rotated files: {files:?}"
    );
    assert!(!st.join("reaped.jsonl.3").exists());
    let lines = audit_lines(&st);
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len <= 2000, "{}: {len} bytes", f.display());
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    assert_eq!(mode(&st.join("reaped.jsonl.lock")), 0o600);
    // Fewer than 24 lines are kept (the oldest went with the rotations), none twice, and the
    // newest one is there.
    assert!(lines.len() < 24, "{}", lines.len());
    let mut sessions: Vec<String> = lines.iter().map(|l| session_of(l)).collect();
    let n = sessions.len();
    sessions.sort();
    sessions.dedup();
    assert_eq!(sessions.len(), n, "a line written twice");
    for l in &lines {
        assert!(l.contains(r#""outcome":"reaped""#), "{l}");
    }
}

/// Two reapers of two tmux sockets (two processes, each tearing down its sessions in parallel)
/// append to one state dir across many rotations: every line is there, once, whole. (Whether their
/// writes overlap in time is up to the scheduler; `writer_processes_...` below makes sure they do.)
#[test]
fn two_reapers_of_two_sockets_lose_no_line_across_rotations() {
    let a = Server::new();
    let b = Server::new();
    let state = a.state_dir();
    let state_s = path_str(&state);
    idle_sessions(&a, "a-", 0, 20);
    idle_sessions(&b, "b-", 0, 20);
    let env = |prefix: &'static str| {
        vec![
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", "2000"),
            ("CCS_SESSION_PREFIX", prefix),
            ("CCS_AUDIT_MAX_BYTES", "2000"),
            ("CCS_AUDIT_KEEP", "1000"),
        ]
    };
    let mut ca = a.reap(&env("a-"));
    let mut cb = b.reap(&env("b-"));
    cb.env("CCS_REAP_STATE_DIR", &state_s);
    let spawn = |c: &mut Command| {
        c.arg("--once")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (pa, pb) = (spawn(&mut ca), spawn(&mut cb));
    let oa = Out::from(pa.wait_with_output().unwrap()).expect_exit(DONE, "--once (a)");
    let ob = Out::from(pb.wait_with_output().unwrap()).expect_exit(DONE, "--once (b)");
    assert!(a.names().is_empty(), "{}", oa.stderr);
    assert!(b.names().is_empty(), "{}", ob.stderr);
    let lines = audit_lines(&state);
    let mut sessions: Vec<String> = lines.iter().map(|l| session_of(l)).collect();
    sessions.sort();
    let mut want: Vec<String> = (0..20)
        .flat_map(|i| [format!("a-{i}"), format!("b-{i}")])
        .collect();
    want.sort();
    assert_eq!(sessions, want, "each reap's line, once");
    let files = audit_files(&state);
    assert!(files.len() >= 5, "too few rotations: {files:?}");
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len <= 2000, "{}: {len} bytes", f.display());
    }
}

/// The writer process of `writer_processes_...`: this test binary run again with
/// `AUDIT_WRITER_DIR` set. It waits for `<dir>/go`, then appends `AUDIT_WRITER_LINES` lines through
/// the reaper's own code path (`StateDir::append_audit`), at 4000 bytes a file. Without the
/// variable (an ordinary `cargo test -- --ignored`) it does nothing.
#[test]
#[ignore = "a helper process of writer_processes_append_at_once_across_rotations_and_lose_no_line"]
fn audit_writer_process() {
    let Ok(dir) = std::env::var("AUDIT_WRITER_DIR") else {
        return;
    };
    let tag = std::env::var("AUDIT_WRITER_TAG").unwrap();
    let n: usize = std::env::var("AUDIT_WRITER_LINES")
        .unwrap()
        .parse()
        .unwrap();
    let st = ccs_reap::adapters::state::StateDir::new(&dir, "k", "sock", "ccs-")
        .with_audit_limits(4000, 1000);
    assert!(wait_until(20.0, || Path::new(&dir).join("go").exists()));
    for i in 0..n {
        let line = ccs_reap::adapters::state::AuditLine::begin(
            "2026-01-01T00:00:00.000Z".into(),
            &format!("{tag}-{i}"),
            &i.to_string(),
            ccs_reap::core::policy::TmuxId(i as u32),
            Some(format!("conv-{tag}-{i}")),
            ccs_reap::core::policy::ReapReason::Idle,
            Some(1),
        );
        st.append_audit(&line).unwrap();
    }
}

/// Three processes append 800 lines each at once (from a common start signal) across about 100
/// rotations, while `ccs-reap events` follows: no line is lost, split or doubled in the files,
/// each writer's lines stay in its order, the writers' lines interleave (they did contend), and
/// `events` prints exactly the lines of the files, in their order.
#[test]
fn writer_processes_append_at_once_across_rotations_and_lose_no_line() {
    const WRITERS: usize = 3;
    const LINES: usize = 800;
    let s = Server::new();
    let state = s.state_dir();
    let ev = Events::start({
        let mut c = s.reap(&[("CCS_AUDIT_MAX_BYTES", "4000"), ("CCS_AUDIT_KEEP", "1000")]);
        c.arg("events");
        c
    });
    let me = std::env::current_exe().unwrap();
    let writers: Vec<KillOnDrop> = (0..WRITERS)
        .map(|w| {
            KillOnDrop(
                Command::new(&me)
                    .args([
                        "--exact",
                        // This module's test, by its path in the one test binary.
                        "audit::audit_writer_process",
                        "--ignored",
                        "--test-threads=1",
                    ])
                    .env("AUDIT_WRITER_DIR", &state)
                    .env("AUDIT_WRITER_TAG", format!("w{w}"))
                    .env("AUDIT_WRITER_LINES", LINES.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    std::fs::write(state.join("go"), "").unwrap();
    for mut w in writers {
        let code = wait_exit(&mut w.0, 120.0);
        assert_eq!(code, Some(0), "a writer process failed");
    }
    let lines = audit_lines(&state);
    assert_eq!(lines.len(), WRITERS * LINES);
    for w in 0..WRITERS {
        let tag = format!("w{w}-");
        let mine: Vec<String> = lines
            .iter()
            .map(|l| session_of(l))
            .filter(|x| x.starts_with(&tag))
            .collect();
        let want: Vec<String> = (0..LINES).map(|i| format!("{tag}{i}")).collect();
        assert_eq!(mine, want, "writer {w}: its lines, once each, in order");
    }
    let switches = lines
        .windows(2)
        .filter(|p| session_of(&p[0])[..2] != session_of(&p[1])[..2])
        .count();
    assert!(
        switches > 0,
        "the writers never overlapped: nothing was tested"
    );
    let files = audit_files(&state);
    assert!(files.len() > 50, "too few rotations: {}", files.len());
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len <= 4000, "{}: {len} bytes", f.display());
    }
    let printed = ev.wait_for(lines.len());
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        printed, lines,
        "events: every line once, in the order of the log"
    );
    assert_eq!(ev.stop(), lines);
    eprintln!(
        "{} lines, {} files, {switches} switches between writers",
        lines.len(),
        files.len()
    );
}

/// `events` prints every line exactly once, in the order of the log, while bursts of parallel
/// reaps rotate it (several rotations between two of its reads).
#[test]
fn events_follows_the_log_across_rotations_every_line_once_in_order() {
    let s = Server::new();
    let limits = [("CCS_AUDIT_MAX_BYTES", "2000"), ("CCS_AUDIT_KEEP", "1000")];
    let ev = Events::start({
        let mut c = s.reap(&limits);
        c.arg("events");
        c
    });
    for round in 0..3 {
        idle_sessions(&s, "ccs-", round * 10, 10);
        s.once(DONE, GRACE, &limits);
    }
    let files = audit_files(&s.state_dir());
    assert!(files.len() >= 5, "too few rotations: {files:?}");
    let logged = audit_lines(&s.state_dir());
    assert_eq!(logged.len(), 30);
    ev.wait_for(30);
    // A moment more: nothing is printed twice.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let printed = ev.stop();
    assert_eq!(printed, logged);
}

/// `--from-start` prints what `reaped.jsonl` holds, then what comes; without it, only what comes.
#[test]
fn events_from_start_prints_the_current_file_first() {
    let s = Server::new();
    idle_sessions(&s, "ccs-", 0, 2);
    s.once(DONE, GRACE, &[]);
    let before = audit_lines(&s.state_dir());
    assert_eq!(before.len(), 2);
    let all = Events::start({
        let mut c = s.reap(&[]);
        c.args(["events", "--from-start"]);
        c
    });
    let new = Events::start({
        let mut c = s.reap(&[]);
        c.arg("events");
        c
    });
    assert_eq!(all.wait_for(2), before);
    idle_sessions(&s, "ccs-", 2, 1);
    s.once(DONE, GRACE, &[]);
    let after = audit_lines(&s.state_dir());
    assert_eq!(after.len(), 3);
    assert_eq!(all.wait_for(3), after);
    assert_eq!(new.wait_for(1), after[2..]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(all.stop(), after);
    assert_eq!(new.stop(), after[2..]);
}

/// SIGINT stops it (0); so does its reader going away, even with nothing to print.
#[test]
fn events_stops_on_sigint_and_when_its_reader_goes() {
    let s = Server::new();
    let mut ev = Events::start({
        let mut c = s.reap(&[]);
        c.arg("events");
        c
    });
    signal(ev.child.id() as i32, Signal::INT).unwrap();
    assert_eq!(wait_exit(&mut ev.child, 10.0), Some(0), "{}", ev.stderr());

    let mut child = s
        .reap(&[])
        .arg("events")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(10.0, || s
        .state_dir()
        .join("reaped.jsonl")
        .exists()));
    drop(child.stdout.take());
    let code = wait_exit(&mut child, 10.0);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code, Some(0), "events outlived its reader");
}

#[test]
fn bad_audit_variables_exit_2_naming_them() {
    let s = Server::new();
    for (var, val) in [
        ("CCS_AUDIT_MAX_BYTES", "0"),
        ("CCS_AUDIT_MAX_BYTES", "10%"),
        ("CCS_AUDIT_MAX_BYTES", "lots"),
        ("CCS_AUDIT_KEEP", "0"),
        ("CCS_AUDIT_KEEP", "-2"),
        ("CCS_AUDIT_KEEP", "many"),
    ] {
        let o = s.sweep(CONFIG, &[], &[("CCS_ENGINE_IDLE_KILL_MS", "1"), (var, val)]);
        assert!(
            o.stderr.contains(var) && o.stderr.contains(val),
            "{}",
            o.stderr
        );
        // events too, at once (it would otherwise run until stopped).
        let mut child = s
            .reap(&[(var, val)])
            .arg("events")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let code = wait_exit(&mut child, 10.0);
        let _ = child.kill();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let _ = child.wait();
        assert_eq!(code, Some(2), "events with {var}={val}: {err}");
        assert!(err.contains(var), "{err}");
    }
    assert!(
        !s.state_dir().exists(),
        "a refused configuration touched the state dir"
    );
}
