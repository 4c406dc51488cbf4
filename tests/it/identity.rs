//! Identity and clocks, on a real tmux with real namespaces (docs/guarantees.md, "Identity and
//! clocks"): a reaper in another time namespace, or in another pid namespace with its clock an
//! hour ahead, never releases a live reap; a reaper in another pid namespace than the tmux server
//! signals nothing (a process of its own namespace has the pane's pid there) and never says
//! "reaped". As root, with `unshare` and `faketime` (libfaketime, installed by `.ci/run`); a
//! machine that cannot run them fails these tests, unless `CCS_TEST_NO_NAMESPACES=1` opts out.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use crate::common::*;

const HOUR: i64 = 3_600_000;

/// Whether the namespace tests may run: they fail loudly when they cannot, unless opted out.
fn namespaces_or_opt_out() -> bool {
    if std::env::var("CCS_TEST_NO_NAMESPACES").is_ok_and(|v| v == "1") {
        eprintln!("CCS_TEST_NO_NAMESPACES=1: the namespace tests are skipped on purpose");
        return false;
    }
    for probe in [
        &["unshare", "-p", "-f", "--mount-proc", "true"][..],
        &["unshare", "-T", "--boottime", "100000", "true"][..],
        &["faketime", "-f", "+1h", "true"][..],
    ] {
        let ok = Command::new(probe[0])
            .args(&probe[1..])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "{probe:?} cannot run here: these tests need root, util-linux's unshare and libfaketime \
             (`apt-get install faketime`); set CCS_TEST_NO_NAMESPACES=1 to skip them"
        );
    }
    true
}

/// `inner` (a ccs-reap command built by [`Server::reap`]) run as `wrap... <ccs-reap> <args>`,
/// with the same environment.
fn wrapped(inner: Command, wrap: &[&str]) -> Command {
    let mut c = Command::new(wrap[0]);
    c.args(&wrap[1..])
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.stdin(Stdio::null());
    c
}

/// A `before` hook that stops its reaper (SIGSTOP), as a paused container would.
fn stopping_hook(s: &Server) -> String {
    let p = s.path("hook");
    std::fs::write(
        &p,
        "#!/bin/sh\ncat >/dev/null\n[ \"$1\" = before ] || exit 0\nkill -STOP $PPID\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    path_str(&p)
}

fn quick<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("CCS_REAP_GRACE_MS", "200"),
        ("CCS_TMUX_TIMEOUT_MS", "500"),
        ("CCS_REAP_INTERVAL_MS", "200"),
    ];
    v.extend_from_slice(extra);
    v
}

/// A reaper killed (and resumed first, should it be stopped) on Drop.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = signal(self.0.id() as i32, Signal::CONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reaper A: `--once`, stopped in its `before` hook with its mark on `ccs-1`, whose lease (with
/// the hook's timeout) is `hook_timeout` + 4.1 s. Returns it once it is stopped.
fn stalled_owner(s: &Server, hook_timeout: &str) -> Bg {
    let h = stopping_hook(s);
    let env = quick(&[
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_HOOK", h.as_str()),
        ("CCS_REAP_HOOK_TIMEOUT_MS", hook_timeout),
    ]);
    let log = std::fs::File::create(s.path("a.log")).unwrap();
    let a = Bg(s
        .reap(&env)
        .arg("--once")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap());
    let pid = a.0.id() as i32;
    assert!(
        wait_until(20.0, || stat(pid).is_some_and(|st| st.state == 'T')),
        "the first reaper never stopped in its hook"
    );
    a
}

/// The journals in the state dir.
fn journals(s: &Server) -> usize {
    std::fs::read_dir(s.studio().join("reaping"))
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

/// Reaper B (`wrap`ped), whose own idle limit keeps the chat: all it could do is release A's.
fn sweep_beside(s: &Server, wrap: &[&str]) -> Out {
    let env = quick(&[("CCS_ENGINE_IDLE_KILL_MS", "86400000")]);
    let mut inner = s.reap(&env);
    inner.arg("--once");
    let o = Out::from(wrapped(inner, wrap).output().unwrap());
    no_panic(&o);
    o
}

#[test]
fn a_reaper_in_another_time_namespace_never_releases_a_live_owners_mark() {
    if !namespaces_or_opt_out() {
        return;
    }
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    let _a = stalled_owner(&s, "500");
    let mark = s.show(n, "@ccs_reaping").expect("the owner's mark");
    let token = s.token(n).expect("the owner's token");
    assert_eq!(journals(&s), 1);
    // Past the owner's limit (4.6 s) by every clock: only its liveness keeps the mark.
    let at: i64 = mark.parse().unwrap();
    assert!(wait_until(30.0, || now_ms() - at > 5000));
    // Its start time, read from another time namespace, is shifted by 100000 s.
    let b = sweep_beside(&s, &["unshare", "-T", "--boottime", "100000", "--"]);
    assert_eq!(
        s.show(n, "@ccs_reaping").as_deref(),
        Some(mark.as_str()),
        "a reaper in another time namespace released a live owner's mark:\n{}",
        b.stderr
    );
    assert_eq!(s.token(n).as_deref(), Some(token.as_str()));
    assert_eq!(
        journals(&s),
        1,
        "the live owner's journal was taken: {}",
        b.stderr
    );
}

#[test]
fn a_reaper_an_hour_ahead_in_another_pid_namespace_never_releases_a_live_reap() {
    if !namespaces_or_opt_out() {
        return;
    }
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    // A long lease (20 s hook timeout): B runs well inside it.
    let _a = stalled_owner(&s, "20000");
    let mark = s.show(n, "@ccs_reaping").expect("the owner's mark");
    let b = sweep_beside(
        &s,
        &[
            "unshare",
            "-p",
            "-f",
            "--mount-proc",
            "faketime",
            "-f",
            "+1h",
        ],
    );
    let at: i64 = mark.parse().unwrap();
    assert!(
        now_ms() - at < 20_000,
        "the test was too slow to be inside the lease"
    );
    assert_eq!(
        s.show(n, "@ccs_reaping").as_deref(),
        Some(mark.as_str()),
        "a reaper an hour ahead released a live reap inside its lease:\n{}",
        b.stderr
    );
    assert_eq!(
        journals(&s),
        1,
        "the live reap's journal was taken: {}",
        b.stderr
    );
}

#[test]
fn a_reaper_in_another_pid_namespace_signals_nothing_and_never_says_reaped() {
    if !namespaces_or_opt_out() {
        return;
    }
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    s.idle_since(n, HOUR);
    let pids = s.pid_list("ccs-1");
    let (server, pane) = (s.server_pid(), s.pane_pid(n));
    // In the reaper's own pid namespace, ns_last_pid makes it certain: a process at the server's
    // pid number, and its child at the pane's, as tmux lists them. The wait for them forks
    // nothing (builtins only): a `sleep` there could take the pane's number first.
    let result = s.path("stranger");
    let script = format!(
        "echo {} > /proc/sys/kernel/ns_last_pid\n\
         sh -c 'echo {} > /proc/sys/kernel/ns_last_pid; sleep 1000 & wait' &\n\
         i=0; while [ ! -e /proc/{pane} ] && [ $i -lt 5000000 ]; do i=$((i+1)); done\n\
         [ -e /proc/{pane} ] && [ -e /proc/{server} ] || {{ echo 'no collision' > '{r}'; exit 9; }}\n\
         \"$@\"; code=$?\n\
         if kill -0 {pane} 2>/dev/null; then echo alive > '{r}'; else echo dead > '{r}'; fi\n\
         kill {server} 2>/dev/null\n\
         exit $code\n",
        server - 1,
        pane - 1,
        r = result.display(),
    );
    let env = quick(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    let mut inner = s.reap(&env);
    inner.arg("--once");
    let wrap = [
        "unshare",
        "-p",
        "-f",
        "--mount-proc",
        "sh",
        "-c",
        &script,
        "sh",
    ];
    let o = Out::from(wrapped(inner, &wrap).output().unwrap());
    no_panic(&o);
    let said = std::fs::read_to_string(&result).unwrap_or_default();
    assert_ne!(o.code, 9, "the pid collision could not be set up: {said}");
    assert_eq!(
        said.trim(),
        "alive",
        "a reaper in another pid namespace signalled its own namespace's process at the pane's pid:\n{}",
        o.stderr
    );
    for (kind, pid) in &pids {
        assert!(alive(*pid), "the chat's {kind} ({pid}) was signalled");
    }
    assert!(s.has("ccs-1"));
    let lines = s.audit_of("ccs-1");
    assert!(
        lines.iter().all(|l| l["outcome"] != "reaped"),
        "it said reaped: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["outcome"] == "failed"
            && l["error"]
                .as_str()
                .unwrap_or("")
                .contains("cannot see the tmux server's processes")),
        "{lines:?}\n{}",
        o.stderr
    );
    assert_eq!(o.code, 1, "--once must exit 1: {}", o.stderr);
    assert!(
        o.stderr.contains("cannot see the tmux server's processes"),
        "{}",
        o.stderr
    );
}
