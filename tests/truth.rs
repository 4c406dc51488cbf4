//! Telling the truth (issue #20): a tmux server that is not at the socket is said, loudly, by
//! `--once`, `status`, the metrics, `/healthz` and systemd's `STATUS=`; and settings are read as
//! meant or refused with a hint. The memory figure (the working set) is in tests/pressure.rs,
//! under a real memory cgroup.

mod common;
use common::http::{free_port, get, samples};
use common::*;

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
        .run(&["--once", "--json"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)])
        .expect_exit(DONE, "--once --json");
    assert!(o.stderr.contains(&warning), "--once --json: {}", o.stderr);
    let j = o.json();
    assert_eq!(j["tmux_server_up"], false, "{j}");
    assert_eq!(j["socket_path"], path_str(&s.sock), "{j}");
    let o = s.run(&["status"], &[]).expect_exit(DONE, "status");
    assert!(o.stderr.contains(&warning), "status: {}", o.stderr);
    let j = s.run(&["status", "--json"], &[]).json();
    assert_eq!(j["tmux_server_up"], false, "{j}");

    // A server without sessions is a server: no warning.
    s.server_that_stays_up();
    let o = s
        .run(&["status", "--json"], &[])
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
