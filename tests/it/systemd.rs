//! systemd: the notify protocol as a unit with `Type=notify` and `WatchdogSec=` sees it (a datagram
//! socket standing in for the manager's `NOTIFY_SOCKET`), and the units in contrib/systemd/ give
//! the daemon the time it needs. `systemd-analyze verify` of the units runs in scripts/check-contrib.

use crate::common::*;

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The manager's end: every datagram the daemon sends.
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

    /// Receive until `f` holds of what came so far, or `secs` pass.
    fn until(&mut self, secs: f64, f: impl Fn(&[String]) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let mut buf = [0u8; 4096];
        while !f(&self.got) {
            if Instant::now() >= deadline {
                return false;
            }
            if let Ok(n) = self.sock.recv(&mut buf) {
                self.got
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        true
    }
}

fn has(msg: &str, line: &str) -> bool {
    msg.lines().any(|l| l == line)
}

fn count(got: &[String], line: &str) -> usize {
    got.iter().filter(|m| has(m, line)).count()
}

fn sigterm(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// Start the daemon with `extra` env, a session on the server, sweeping every 100 ms.
fn daemon(s: &Server, extra: &[(&str, &str)]) -> KillOnDrop {
    let log = std::fs::File::create(s.path("daemon.log")).unwrap();
    let mut c = s.reap(&[
        ("CCS_ENGINE_IDLE_KILL_MS", "3600000"),
        ("CCS_REAP_INTERVAL_MS", "100"),
    ]);
    // Only what the test gives: none of the outer environment's.
    c.env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID");
    for (k, v) in extra {
        c.env(k, v);
    }
    KillOnDrop(c.stdout(Stdio::null()).stderr(log).spawn().unwrap())
}

#[test]
fn ready_after_the_first_sweep_a_watchdog_ping_every_sweep_and_stopping_on_sigterm() {
    let s = Server::new();
    s.session("ccs-1", "sleep 100000");
    let (mut m, path) = Manager::new(&s);
    // 1 s: shorter than a sweep may take (100 ms + the 10 s tmux timeout): warned about.
    let mut d = daemon(
        &s,
        &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", "1000000")],
    );
    let log = || std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default();
    assert!(
        m.until(10.0, |g| g.len() >= 4),
        "fewer than 4 notifications: {:?}\n{}",
        m.got,
        log()
    );
    let first = &m.got[0];
    assert!(has(first, "READY=1"), "{first:?}");
    assert!(has(first, "WATCHDOG=1"), "{first:?}");
    assert!(
        first
            .lines()
            .any(|l| l.starts_with("STATUS=1 session(s), 0 to reap; last sweep ")),
        "{first:?}"
    );
    // Ready once; every sweep pings.
    assert_eq!(count(&m.got, "READY=1"), 1, "{:?}", m.got);
    assert_eq!(count(&m.got, "WATCHDOG=1"), m.got.len(), "{:?}", m.got);
    assert!(log().contains("WatchdogSec="), "{}", log());

    sigterm(d.0.id());
    assert!(
        m.until(10.0, |g| g.iter().any(|x| has(x, "STOPPING=1"))),
        "no STOPPING=1: {:?}\n{}",
        m.got,
        log()
    );
    let mut status = None;
    assert!(
        wait_until(10.0, || {
            status = d.0.try_wait().unwrap();
            status.is_some()
        }),
        "the daemon did not stop: {}",
        log()
    );
    assert_eq!(status.and_then(|x| x.code()), Some(0), "{}", log());
}

#[test]
fn without_a_watchdog_only_readiness_and_status_are_sent() {
    let s = Server::new();
    s.session("ccs-1", "sleep 100000");
    // An activity file that is missing: every sweep keeps everything, and says so; the reaper is
    // still ready.
    let missing = path_str(&s.path("missing.json"));
    let (mut m, path) = Manager::new(&s);
    // A watchdog meant for another process is not ours (WATCHDOG_PID).
    let _d = daemon(
        &s,
        &[
            ("NOTIFY_SOCKET", &path),
            ("WATCHDOG_USEC", "60000000"),
            ("WATCHDOG_PID", "1"),
            ("CCS_ACTIVITY_FILES", &missing),
        ],
    );
    let log = || std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default();
    assert!(
        m.until(10.0, |g| g.len() >= 3),
        "fewer than 3 notifications: {:?}\n{}",
        m.got,
        log()
    );
    assert_eq!(count(&m.got, "READY=1"), 1, "{:?}", m.got);
    assert_eq!(count(&m.got, "WATCHDOG=1"), 0, "{:?}", m.got);
    assert!(
        m.got[0]
            .lines()
            .any(|l| l.starts_with("STATUS=kept every session: ") && l.contains("missing.json")),
        "{:?}",
        m.got
    );
    assert!(!log().contains("WatchdogSec="), "{}", log());
}

/// `KEY=value` of a unit file (the last one wins, as in systemd).
fn directive(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .rev()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.trim().split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
}

/// `90s`, `2min`, `1min 30s` as milliseconds.
fn span_ms(v: &str) -> u64 {
    v.split_whitespace()
        .map(|w| {
            let i = w.find(|c: char| !c.is_ascii_digit()).unwrap_or(w.len());
            let n: u64 = w[..i].parse().unwrap();
            n * match &w[i..] {
                "" | "s" => 1000,
                "min" => 60_000,
                "ms" => 1,
                u => panic!("unit {u} in {v}"),
            }
        })
        .sum()
}

/// The defaults, as .env.example gives them.
fn default_ms(var: &str) -> u64 {
    let env =
        std::fs::read_to_string(format!("{}/.env.example", env!("CARGO_MANIFEST_DIR"))).unwrap();
    directive(&env, var)
        .unwrap_or_else(|| panic!("{var} not in .env.example"))
        .parse()
        .unwrap()
}

#[test]
fn the_units_give_a_stop_and_a_sweep_the_time_they_take() {
    let grace = default_ms("CCS_REAP_GRACE_MS");
    let tmux = default_ms("CCS_TMUX_TIMEOUT_MS");
    let interval = default_ms("CCS_REAP_INTERVAL_MS");
    let dir = format!("{}/contrib/systemd", env!("CARGO_MANIFEST_DIR"));
    let mut units = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "service") {
            continue;
        }
        units += 1;
        let u = std::fs::read_to_string(&p).unwrap();
        let name = p.display();
        let want = |k: &str, v: &str| {
            assert_eq!(directive(&u, k).as_deref(), Some(v), "{name}: {k}");
        };
        want("Type", "notify");
        want("NotifyAccess", "main");
        want("KillMode", "mixed");
        want("Restart", "on-failure");
        want("NoNewPrivileges", "yes");
        want("ProtectSystem", "strict");
        want("PrivateTmp", "no");
        assert!(directive(&u, "ReadWritePaths").is_some(), "{name}");
        // The reaper reads its settings file itself, by the search every other caller makes:
        // a file systemd read too would be read twice, and could differ from the CLI's.
        assert!(
            directive(&u, "EnvironmentFile").is_none(),
            "{name}: an EnvironmentFile (the binary finds its settings file itself)"
        );
        assert!(
            !u.lines().any(|l| l.starts_with("Environment=CCS_")),
            "{name}: a CCS_ setting only the daemon would see"
        );
        assert!(directive(&u, "StateDirectory").is_some(), "{name}");
        // A stop lets the sweep in flight and every teardown finish: the grace and a few tmux
        // calls (a teardown's mark, re-check, kill and clear, after the sweep's listing).
        let stop = span_ms(&directive(&u, "TimeoutStopSec").unwrap());
        assert!(stop >= grace + 5 * tmux, "{name}: TimeoutStopSec {stop} ms");
        // Two pings are a sweep apart: the interval plus at most one tmux timeout.
        let dog = span_ms(&directive(&u, "WatchdogSec").unwrap());
        assert!(dog > 2 * (interval + tmux), "{name}: WatchdogSec {dog} ms");
    }
    assert_eq!(units, 2, "a user unit and a system unit in {dir}");
}

#[test]
fn with_reaping_off_under_systemd_it_is_ready_says_why_and_stays_up_until_sigterm() {
    let s = Server::new();
    let (mut m, path) = Manager::new(&s);
    let log = std::fs::File::create(s.path("daemon.log")).unwrap();
    // As the .deb ships /etc/ccs-reap/env: every rule commented out.
    let mut c = s.reap(&[("CCS_REAP_INTERVAL_MS", "100")]);
    c.env_remove("WATCHDOG_PID")
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "60000000");
    let mut d = KillOnDrop(c.stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let log = || std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default();
    assert!(
        m.until(10.0, |g| g.len() >= 3),
        "fewer than 3 notifications (exited before READY=1?): {:?}\n{}",
        m.got,
        log()
    );
    assert_eq!(count(&m.got, "READY=1"), 1, "{:?}", m.got);
    assert_eq!(count(&m.got, "WATCHDOG=1"), m.got.len(), "{:?}", m.got);
    assert!(
        m.got[0]
            .lines()
            .any(|l| l.starts_with("STATUS=reaping is disabled")
                && l.contains("CCS_ENGINE_IDLE_KILL_MS")),
        "{:?}",
        m.got
    );
    assert!(d.0.try_wait().unwrap().is_none(), "it exited: {}", log());
    // Said once on stderr, not once per interval.
    assert_eq!(log().matches("reaping is disabled").count(), 1, "{}", log());
    sigterm(d.0.id());
    assert!(
        m.until(10.0, |g| g.iter().any(|x| has(x, "STOPPING=1"))),
        "no STOPPING=1: {:?}\n{}",
        m.got,
        log()
    );
    let mut status = None;
    assert!(wait_until(10.0, || {
        status = d.0.try_wait().unwrap();
        status.is_some()
    }));
    assert_eq!(status.and_then(|x| x.code()), Some(0), "{}", log());
    // Outside systemd, as before: it says so and exits 0 at once.
    let o = s.run(&[], &[]);
    assert!(o.stderr.contains("reaping is disabled"), "{}", o.stderr);
}
