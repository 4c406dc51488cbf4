//! Telling the truth (issue #20): a tmux server that is not at the socket is said, loudly, by
//! `--once`, `status`, the metrics, `/healthz` and systemd's `STATUS=`; and settings are read as
//! meant or refused with a hint. The memory figure (the working set) is in tests/it/pressure.rs,
//! under a real memory cgroup.

use crate::common::http::{free_port, get, samples};
use crate::common::*;

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The warning of `--once` and `status` when no server listens at the socket.
fn no_server_warning(s: &Server) -> String {
    format!("no tmux server at {}", path_str(&s.sock))
}

#[test]
fn once_and_status_without_a_server_warn_naming_the_socket_and_exit_as_documented() {
    let s = Server::new();
    let warning = no_server_warning(&s);

    // No server at all: exit 0 as before, but a warning naming the socket on stderr.
    let o = s.once(DONE, 1000, &[]);
    assert!(o.stderr.contains(&warning), "--once: {}", o.stderr);
    assert!(o.stdout.contains("0 session(s)"), "{}", o.stdout);
    let o = s
        .run_any(&["--once", "--json"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)])
        .expect_exit(DONE, "--once --json");
    assert!(o.stderr.contains(&warning), "--once --json: {}", o.stderr);
    let j = o.json();
    assert_eq!(j["tmux_server_up"], false, "{j}");
    assert_eq!(j["socket_path"], path_str(&s.sock), "{j}");
    let o = s.run_any(&["status"], &[]).expect_exit(DONE, "status");
    assert!(o.stderr.contains(&warning), "status: {}", o.stderr);
    let j = s.run_any(&["status", "--json"], &[]).json();
    assert_eq!(j["tmux_server_up"], false, "{j}");

    // A server without sessions is a server: no warning.
    s.server_that_stays_up();
    let o = s
        .run_any(&["status", "--json"], &[])
        .expect_exit(DONE, "status");
    assert!(!o.stderr.contains(&warning), "{}", o.stderr);
    assert_eq!(o.json()["tmux_server_up"], true);

    // And with a session: none either, on both.
    s.session("ccs-1", "sleep 100000");
    let o = s.once(DONE, 1000, &[]);
    assert!(!o.stderr.contains(&warning), "{}", o.stderr);
    assert!(o.stdout.contains("1 session(s)"), "{}", o.stdout);
    let j = s.status(&[]);
    assert_eq!(j["tmux_server_up"], true, "{j}");
}

/// The manager's end of `NOTIFY_SOCKET`: every datagram the daemon sends.
struct Manager {
    sock: UnixDatagram,
    got: Vec<String>,
}

impl Manager {
    fn new(s: &Server) -> (Manager, String) {
        let path = s.path("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        (
            Manager {
                sock,
                got: Vec::new(),
            },
            path_str(&path),
        )
    }

    /// The `STATUS=` lines received so far, and until `f` holds of the last one, or `secs` pass.
    fn status_until(&mut self, secs: f64, f: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let mut buf = [0u8; 4096];
        loop {
            let last = self
                .got
                .iter()
                .rev()
                .find_map(|m| m.lines().find_map(|l| l.strip_prefix("STATUS=")));
            if last.is_some_and(&f) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if let Ok(n) = self.sock.recv(&mut buf) {
                self.got
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }
}

/// `/healthz` as (status code, body).
fn health(port: u16) -> Option<(u16, String)> {
    let r = get(port, "/healthz", Duration::from_secs(5))?;
    let code = r.status.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, r.body))
}

fn server_up_gauge(port: u16) -> Option<f64> {
    let r = get(port, "/metrics", Duration::from_secs(5))?;
    samples(&r.body).get("ccs_reap_tmux_server_up").copied()
}

#[test]
fn the_daemon_says_when_no_server_listens_in_metrics_healthz_and_status_and_when_one_comes() {
    let s = Server::new();
    let warning = no_server_warning(&s);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (mut m, notify) = Manager::new(&s);
    let log = s.path("daemon.log");
    let mut c = s.reap(&[
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_REAP_INTERVAL_MS", "100"),
        ("CCS_METRICS_ADDR", addr.as_str()),
        ("NOTIFY_SOCKET", notify.as_str()),
    ]);
    c.env_remove("WATCHDOG_USEC").env_remove("WATCHDOG_PID");
    let _d = KillOnDrop(
        c.stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(&log).unwrap_or_default();

    // No server: 503 naming the socket, the gauge at 0, STATUS= says it, the log warns.
    let mut h = None;
    assert!(
        wait_until(10.0, || {
            h = health(port);
            h.as_ref().is_some_and(|(_, b)| b.contains(&warning))
        }),
        "/healthz never named the missing server: {h:?}\n{}",
        log()
    );
    assert_eq!(h.as_ref().map(|(c, _)| *c), Some(503), "{h:?}");
    assert_eq!(server_up_gauge(port), Some(0.0));
    assert!(
        m.status_until(10.0, |l| l == warning),
        "STATUS= never said {warning:?}: {:?}",
        m.got
    );
    assert!(m.got.iter().any(|g| g.lines().any(|l| l == "READY=1")));
    assert!(log().contains(&warning), "{}", log());

    // A server comes: 200 ok, the gauge at 1, STATUS= back to the count.
    s.session("ccs-1", "sleep 100000");
    assert!(
        wait_until(10.0, || health(port) == Some((200, "ok\n".into()))),
        "/healthz stayed unhealthy with a server: {:?}\n{}",
        health(port),
        log()
    );
    assert_eq!(server_up_gauge(port), Some(1.0));
    assert!(
        m.status_until(10.0, |l| l.starts_with("1 session(s), 0 to reap")),
        "{:?}",
        m.got
    );
    assert!(
        log().contains("a tmux server listens at"),
        "no line for the server's return: {}",
        log()
    );

    // It goes: unhealthy again.
    s.ok(&["kill-server"]);
    assert!(
        wait_until(10.0, || health(port)
            .is_some_and(|(c, b)| c == 503 && b.contains(&warning))),
        "/healthz did not notice the server going: {:?}",
        health(port)
    );
    assert!(wait_until(10.0, || server_up_gauge(port) == Some(0.0)));
}

#[test]
fn durations_take_units_in_the_environment_and_in_the_session_option() {
    let s = Server::new();
    let old = s.chat("ccs-1", "c1", "");
    s.idle_since(old, 2 * 3_600_000);
    let recent = s.chat("ccs-2", "c2", "");
    s.idle_since(recent, 30 * 60_000);
    // Its own limit, with a unit: 10 minutes, so 20 minutes idle is past it.
    let own = s.chat("ccs-3", "c3", "");
    s.idle_since(own, 20 * 60_000);
    s.set(own, "@ccs_idle_kill_ms", "10m");
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", "1h"),
            ("CCS_REAP_GRACE_MS", "1s"),
            ("CCS_REAP_INTERVAL_MS", "30s"),
        ],
    );
    assert!(!s.has("ccs-1"), "idle 2 h, limit 1h: kept\n{}", o.stderr);
    assert!(
        s.has("ccs-2"),
        "idle 30 min, limit 1h: reaped\n{}",
        o.stderr
    );
    assert!(
        !s.has("ccs-3"),
        "idle 20 min, own limit 10m: kept\n{}",
        o.stderr
    );
    assert!(!o.stderr.contains("is not a duration"), "{}", o.stderr);
}

#[test]
fn a_bare_small_memory_size_exits_2_with_a_hint_and_json_says_so_too() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 3_600_000);
    let env = [
        ("CCS_ENGINE_MEM_HIGH", "85"),
        ("CCS_ENGINE_MIN_IDLE_MS", "0"),
    ];
    let o = s.sweep(CONFIG, &[], &env);
    assert!(
        o.stderr.contains("CCS_ENGINE_MEM_HIGH")
            && o.stderr.contains("85 is 85 bytes; did you mean 85%"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(s.has("ccs-1"), "touched something on a config error");

    // --json: one JSON document on stdout, for the daemon's --once and every command.
    for args in [&["--once", "--json"][..], &["status", "--json"][..]] {
        let o = s
            .run_any(args, &env)
            .expect_exit(CONFIG, &format!("{args:?}"));
        let j = o.json();
        assert_eq!(j["ok"], false, "{j}");
        assert_eq!(j["variable"], "CCS_ENGINE_MEM_HIGH", "{j}");
        assert_eq!(j["value"], "85", "{j}");
        assert_eq!(j["exit"], 2, "{j}");
        assert!(
            j["error"].as_str().unwrap().contains("did you mean 85%"),
            "{j}"
        );
    }
    // Without --json, stdout stays empty.
    let o = s.run_any(&["status"], &env).expect_exit(CONFIG, "status");
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    // Meant as sizes: accepted.
    for ok in ["85%", "512M", "2G"] {
        s.sweep(DONE, &[], &[("CCS_ENGINE_MEM_HIGH", ok)]);
    }
}

#[test]
fn a_misspelt_variable_is_named_with_the_closest_known_one() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 3_600_000);
    let o = s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KIL_MS", "1000")]);
    assert!(
        o.stderr.contains(
            "CCS_ENGINE_IDLE_KIL_MS is not a ccs-reap setting and is ignored: did you mean CCS_ENGINE_IDLE_KILL_MS?"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("reaping is disabled"), "{}", o.stderr);
    assert!(s.has("ccs-1"));
    // A known one: no such warning.
    let o = s.once(DONE, 1000, &[]);
    assert!(!o.stderr.contains("not a ccs-reap setting"), "{}", o.stderr);
    // A bare number meant as seconds is said, not guessed.
    let o = s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", "1800")]);
    assert!(
        o.stderr.contains("CCS_ENGINE_IDLE_KILL_MS=1800 is 1800 ms")
            && o.stderr.contains("write 1800s if you meant seconds"),
        "{}",
        o.stderr
    );
}

#[test]
fn rust_log_is_honoured_when_ccs_log_is_unset() {
    let s = Server::new();
    s.session("ccs-1", "sleep 100000");
    let run = |env: &[(&str, &str)]| {
        let mut c = s.reap(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
        c.env_remove("CCS_LOG").env_remove("RUST_LOG");
        for (k, v) in env {
            c.env(k, v);
        }
        // -v: without it a command says only its warnings and errors, whatever the filter.
        Out::from(c.args(["--once", "-v"]).output().unwrap()).expect_exit(DONE, "--once")
    };
    let debug = |o: &Out| o.stderr.contains(" DEBUG ");
    assert!(!debug(&run(&[])), "debug lines by default");
    let o = run(&[("RUST_LOG", "debug")]);
    assert!(debug(&o), "RUST_LOG=debug ignored: {}", o.stderr);
    let o = run(&[("RUST_LOG", "debug"), ("CCS_LOG", "warn")]);
    assert!(
        !debug(&o),
        "CCS_LOG did not win over RUST_LOG: {}",
        o.stderr
    );
    let o = s
        .run_any(&["--once"], &[("CCS_LOG", ""), ("RUST_LOG", "info,=[x")])
        .expect_exit(CONFIG, "--once");
    assert!(o.stderr.contains("RUST_LOG"), "{}", o.stderr);
}

/// A memory cgroup of our own with no limit (root; `CCS_SKIP_CGROUP_TESTS=1` skips).
struct Unlimited(std::path::PathBuf);

impl Drop for Unlimited {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn unlimited_cgroup() -> Option<Unlimited> {
    if std::env::var("CCS_SKIP_CGROUP_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED by request (CCS_SKIP_CGROUP_TESTS=1): the no-limit test did not run");
        return None;
    }
    let how = "this test needs root and a writable memory cgroup (v1 /sys/fs/cgroup/memory or v2 \
               /sys/fs/cgroup); set CCS_SKIP_CGROUP_TESTS=1 to skip it";
    assert!(rustix::process::geteuid().is_root(), "not root: {how}");
    let name = format!("ccs-reap-truth-{}-{}", std::process::id(), now_ms());
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
    let dir = if v1.join("memory.limit_in_bytes").exists() {
        v1.join(name)
    } else {
        std::path::Path::new("/sys/fs/cgroup").join(name)
    };
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}: {how}", dir.display()));
    Some(Unlimited(dir))
}

#[test]
fn a_percentage_where_no_limit_is_visible_is_a_warning_naming_the_rule() {
    let Some(cg) = unlimited_cgroup() else {
        return;
    };
    let s = Server::new();
    s.session("ccs-1", "sleep 100000");
    let dir = path_str(&cg.0);
    let env = [
        ("CCS_ENGINE_MEM_HIGH", "85%"),
        ("CCS_ENGINE_MEM_CGROUP", dir.as_str()),
    ];
    let want = "CCS_ENGINE_MEM_HIGH=85% is a share of the memory limit";
    let o = s.sweep(DONE, &[], &env);
    assert!(
        o.stderr.contains(want) && o.stderr.contains("can never fire") && o.stderr.contains(&dir),
        "{}",
        o.stderr
    );
    let o = s.run_any(&["status"], &env).expect_exit(DONE, "status");
    assert!(o.stderr.contains(want), "{}", o.stderr);
    // doctor: red while that rule is the only one (nothing could be reaped), a note beside another
    // rule that still reaps.
    let memory = |extra: &[(&str, &str)]| {
        let mut e = env.to_vec();
        e.extend_from_slice(extra);
        let j = s
            .run_any(&["doctor", "--json"], &e)
            .expect_exit(DONE_OR_FAILED, "doctor")
            .json();
        let c = j["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["check"] == "memory").cloned())
            .unwrap_or_else(|| panic!("no memory check: {j}"));
        (c["verdict"].as_str().unwrap_or("").to_string(), j)
    };
    let (v, j) = memory(&[]);
    assert_eq!(v, "problem", "{j}");
    assert_eq!(j["ok"], false, "{j}");
    let (v, j) = memory(&[("CCS_ENGINE_IDLE_KILL_MS", "1h")]);
    assert_eq!(v, "note", "{j}");
    // The daemon says it at start-up.
    let log = s.path("daemon.log");
    let _d = KillOnDrop(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    assert!(
        wait_until(10.0, || std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains(want))),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // A size, or a limit: nothing to say.
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_MEM_HIGH", "10G"),
            ("CCS_ENGINE_MEM_CGROUP", dir.as_str()),
        ],
    );
    assert!(!o.stderr.contains("can never fire"), "{}", o.stderr);
    let limit = if cg.0.join("memory.limit_in_bytes").exists() {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    };
    std::fs::write(cg.0.join(limit), (1u64 << 30).to_string()).unwrap();
    let o = s.sweep(DONE, &[], &env);
    assert!(!o.stderr.contains("can never fire"), "{}", o.stderr);
}
