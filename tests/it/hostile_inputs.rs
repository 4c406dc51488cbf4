//! Inputs that try to hang or exhaust the reaper: activity files that are not small regular files
//! (a FIFO, a symlink to /dev/zero, a 200 MB file, a directory), and a crowd of idle connections on
//! the metrics endpoint. Whatever they are, `--once` and `status` return, the daemon stops on
//! SIGTERM, sessions are kept when liveness is unknown, and the daemon's descriptors stay bounded.

use crate::common::http::{free_port, get, read_response, samples, Response};
use crate::common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A session the sweep reaps when nothing says otherwise: idle for hours, with a conversation id.
fn reapable(s: &Server, name: &str) -> u32 {
    let n = s.session(name, "sleep 100000");
    s.set(n, "@ccs_cid", &format!("conv-{name}"));
    s.idle_since(n, 10_000_000);
    n
}

/// Run ccs-reap to completion, but kill it and fail if it has not exited within `secs`.
fn run_within(s: &Server, args: &[&str], env: &[(&str, &str)], secs: f64) -> Out {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let k = RUNS.fetch_add(1, Ordering::Relaxed);
    let (out, err) = (
        s.path(&format!("run{k}.out")),
        s.path(&format!("run{k}.err")),
    );
    let mut child = KillOnDrop(
        s.reap(env)
            .args(args)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut status = None;
    let exited = wait_until(secs, || {
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    // On failure KillOnDrop kills it.
    assert!(
        exited,
        "ccs-reap {args:?} hung (killed after {secs} s): {stderr}"
    );
    let o = Out {
        code: status.and_then(|s| s.code()).unwrap_or(-1),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr,
    };
    // Whatever it is asked, it answers 0 or 1: never a config error, a crash or a signal.
    o.expect_exit(DONE_OR_FAILED, &format!("{args:?}"))
}

#[derive(Clone, Copy, Debug)]
enum Hostile {
    Fifo,
    DevZero,
    Huge,
    Directory,
}

/// Make the hostile "activity file" in the fixture's temp dir.
fn make(s: &Server, h: Hostile) -> PathBuf {
    let p = s.path(&format!("{h:?}.json").to_lowercase());
    match h {
        Hostile::Fifo => rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap(),
        Hostile::DevZero => std::os::unix::fs::symlink("/dev/zero", &p).unwrap(),
        // Sparse: 200 MB that cost no disk.
        Hostile::Huge => std::fs::File::create(&p)
            .unwrap()
            .set_len(200 * 1024 * 1024)
            .unwrap(),
        Hostile::Directory => std::fs::create_dir(&p).unwrap(),
    }
    p
}

/// `--once` and `status` with a hostile activity file: both return promptly, the reapable session
/// is kept (liveness unknown), the exit is that of an unreadable file, and the file is named.
fn hostile_file_keeps_everything(h: Hostile) {
    let s = Server::new();
    reapable(&s, "ccs-1");
    let f = make(&s, h);
    let fs = path_str(&f);
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
        ("CCS_ACTIVITY_FILES", fs.as_str()),
    ];
    // The reference: what `--once` does when an activity file cannot be read (missing).
    let missing = path_str(&s.path("missing.json"));
    let reference = run_within(
        &s,
        &["--once"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_ACTIVITY_FILES", missing.as_str()),
        ],
        20.0,
    );
    assert_eq!(
        reference.code, 1,
        "an unreadable activity file fails the sweep: {}",
        reference.stderr
    );
    assert!(s.has("ccs-1"), "{}", reference.stderr);

    let t0 = Instant::now();
    let o = run_within(&s, &["--once"], &env, 20.0);
    let took = t0.elapsed();
    assert_eq!(
        o.code, reference.code,
        "{h:?}: --once exits unlike an unreadable file: {}",
        o.stderr
    );
    assert!(s.has("ccs-1"), "{h:?}: reaped with liveness unknown");
    assert!(s.audit().is_empty(), "{h:?}: {:?}", s.audit());
    assert!(
        o.stderr.contains(&fs),
        "{h:?}: file not named: {}",
        o.stderr
    );
    // Refused on sight, not waited out.
    assert!(o.stderr.contains("refused"), "{h:?}: {}", o.stderr);
    assert!(took < Duration::from_secs(8), "{h:?}: --once took {took:?}");

    let o = run_within(&s, &["status"], &env, 20.0);
    assert!(
        o.stdout.contains(&fs) || o.stderr.contains(&fs),
        "{h:?}: status does not name the file: {}\n{}",
        o.stdout,
        o.stderr
    );
    assert!(s.has("ccs-1"));
}

#[test]
fn fifo_activity_file_is_refused_and_keeps_everything() {
    hostile_file_keeps_everything(Hostile::Fifo);
}

#[test]
fn dev_zero_activity_file_is_refused_and_keeps_everything() {
    hostile_file_keeps_everything(Hostile::DevZero);
}

#[test]
fn huge_activity_file_is_refused_and_keeps_everything() {
    hostile_file_keeps_everything(Hostile::Huge);
}

#[test]
fn directory_activity_file_is_refused_and_keeps_everything() {
    hostile_file_keeps_everything(Hostile::Directory);
}

/// The control: the same session is reaped when the activity file is a valid regular file that
/// does not list it, so the tests above can fail.
#[test]
fn valid_activity_file_not_listing_the_session_lets_it_be_reaped() {
    let s = Server::new();
    reapable(&s, "ccs-1");
    let f = s.path("activity.json");
    std::fs::write(
        &f,
        r#"{"activeTasks": ["2"], "kanban": [{"id": "1", "status": "done"}]}"#,
    )
    .unwrap();
    let fs = path_str(&f);
    let o = run_within(
        &s,
        &["--once"],
        &[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_ACTIVITY_FILES", fs.as_str()),
        ],
        20.0,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!s.has("ccs-1"), "{}", o.stderr);
    let a = s.audit();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["outcome"], "reaped");
}

/// The last lines of a log, for a failure message.
fn tail(p: &std::path::Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

#[test]
fn daemon_with_a_fifo_activity_file_stops_within_a_second_of_sigterm() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    reapable(&s, "ccs-1");
    let f = make(&s, Hostile::Fifo);
    let fs = path_str(&f);
    let log = s.path("daemon.log");
    let mut d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_INTERVAL_MS", "100"),
            ("CCS_ACTIVITY_FILES", fs.as_str()),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Several sweeps have met the FIFO (each names it) and kept going.
    assert!(
        wait_until(10.0, || text().matches(fs.as_str()).count() >= 3),
        "the daemon never reported the FIFO: {}",
        tail(&log)
    );
    assert!(s.has("ccs-1"));
    signal(d.0.id() as i32, Signal::TERM).unwrap();
    let t0 = Instant::now();
    let mut status = None;
    let stopped = wait_until(1.0, || {
        status = d.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(
        stopped,
        "the daemon did not stop within 1 s of SIGTERM ({:?}): {}",
        t0.elapsed(),
        tail(&log)
    );
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", tail(&log));
    assert!(s.has("ccs-1"));
}

// ---- the metrics endpoint ----

/// A sample of the Prometheus text.
fn sample(body: &str, key: &str) -> Option<f64> {
    samples(body).get(key).copied()
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A daemon with metrics on a free port of 127.0.0.1; returns it and the port once `/healthz`
/// answers 200 (after a first sweep that read the server).
fn metrics_daemon(s: &Server) -> (KillOnDrop, u16) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = s.path("daemon.log");
    let d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_INTERVAL_MS", "100"),
            ("CCS_METRICS_ADDR", addr.as_str()),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    assert!(
        wait_until(10.0, || get(port, "/healthz", Duration::from_secs(2))
            .is_some_and(|r| r.status.contains(" 200"))),
        "nothing answers on {addr}: {}",
        tail(&log)
    );
    (d, port)
}

#[test]
fn idle_connections_neither_exhaust_descriptors_nor_stop_metrics_or_sweeps() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    // Reapable but for a running turn; the turn ends while the crowd is on. (Made before the
    // daemon starts: a sweep that saw it half made would restart its idle clock.)
    let n = reapable(&s, "ccs-1");
    s.set(n, "@ccs_turn", &now_ms().to_string());
    let (d, port) = metrics_daemon(&s);
    let pid = d.0.id();
    let log = || tail(&s.path("daemon.log"));
    // What the daemon did meanwhile, for a failure: how many idle connections it closed to make
    // room (the crowd drains 16 at a time, each after 200 ms of silence), and its last lines
    // that are not about that.
    let story = || {
        let text = std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default();
        let crowd = |l: &&str| l.contains("metrics: ") && l.contains("silent");
        let closed = text
            .lines()
            .filter(|l| l.contains("closed a silent connection"))
            .count();
        let other: Vec<&str> = text.lines().filter(|l| !crowd(l)).collect();
        format!(
            "{closed} idle connections closed to make room; the rest of the log:\n{}",
            other[other.len().saturating_sub(30)..].join("\n")
        )
    };
    let sweeps = |r: &Response| sample(&r.body, "ccs_reap_sweeps_total").unwrap_or(-1.0);
    let reaped = |r: &Response| {
        sample(
            &r.body,
            r#"ccs_reap_reaps_total{reason="idle",outcome="reaped"}"#,
        )
    };
    let first = get(port, "/metrics", Duration::from_secs(5)).expect("a first scrape");
    let baseline = fd_count(pid);

    // Watch the daemon's descriptors while the crowd is on.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(baseline));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(fd_count(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    // 200 connections that send nothing.
    let crowd: Vec<TcpStream> = (0..200)
        .map(|i| {
            TcpStream::connect(("127.0.0.1", port))
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
        })
        .collect();
    // The daemon keeps sweeping: a session that becomes reapable now is reaped.
    assert!(s.has("ccs-1"), "reaped during a turn: {}", log());
    s.unset(n, "@ccs_turn");
    // And /metrics answers, behind the whole crowd, within a few seconds.
    let t0 = Instant::now();
    let mut scrape = None;
    assert!(
        wait_until(10.0, || {
            scrape = get(port, "/metrics", Duration::from_secs(10));
            scrape.is_some()
        }),
        "/metrics did not answer behind 200 idle connections within {:?}: {}",
        t0.elapsed(),
        story()
    );
    let took = t0.elapsed();
    let scrape = scrape.unwrap();
    assert!(scrape.status.contains(" 200"), "{}", scrape.status);
    assert!(
        took < Duration::from_secs(8),
        "/metrics took {took:?} behind the crowd: {}",
        story()
    );
    assert!(
        wait_until(10.0, || !s.has("ccs-1")),
        "the daemon stopped reaping under the crowd: {}",
        log()
    );
    // The session goes at its `kill-session`; the reap is counted once it is finished (its
    // survivors checked, its audit line written), a moment later: wait for the count.
    let mut later = None;
    assert!(
        wait_until(10.0, || {
            later = get(port, "/metrics", Duration::from_secs(5));
            later.as_ref().and_then(reaped).is_some_and(|n| n >= 1.0)
        }),
        "the reap was never counted: {}\n{}",
        later.as_ref().map_or("no scrape", |r| r.body.as_str()),
        log()
    );
    let later = later.expect("a later scrape");
    assert!(
        sweeps(&later) > sweeps(&first),
        "no sweep ran: {} then {}",
        sweeps(&first),
        sweeps(&later)
    );
    assert_eq!(reaped(&later), Some(1.0), "{}", later.body);
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    // 16 served + 1 waiting for a slot, and some slack for the sweep's own pipes and /proc reads.
    assert!(
        peak <= baseline + 17 + 15,
        "the daemon held {peak} descriptors (baseline {baseline}) with 200 idle connections"
    );
    drop(crowd);
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection_and_closes_when_idle() {
    let s = Server::new();
    s.session("keeper", "sleep 100000");
    let (_d, port) = metrics_daemon(&s);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut ask = |method: &str, path: &str| {
        let req =
            format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n");
        c.write_all(req.as_bytes()).unwrap();
        read_response(&mut c).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    };
    let r = ask("GET", "/healthz");
    assert!(r.status.starts_with("HTTP/1.1 200"), "{}", r.status);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.body, "ok\n");
    let r = ask("GET", "/metrics");
    assert!(r.status.starts_with("HTTP/1.1 200"), "{}", r.status);
    // No Accept header: the classic text format (OpenMetrics is for a client that asks for it).
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(r.body.contains("ccs_reap_sweeps_total"), "{}", r.body);
    assert!(!r.body.contains("# EOF"), "{}", r.body);
    let r = ask("GET", "/nothing-here");
    assert!(r.status.starts_with("HTTP/1.1 404"), "{}", r.status);
    let r = ask("POST", "/metrics");
    assert!(r.status.starts_with("HTTP/1.1 405"), "{}", r.status);
    assert_eq!(r.header("allow"), Some("GET"));
    // Still the same connection.
    let r = ask("GET", "/healthz");
    assert_eq!(r.body, "ok\n");
    // Left idle, it is closed by the server (the header read timeout), not held forever.
    let t0 = Instant::now();
    let mut rest = Vec::new();
    let eof = c.read_to_end(&mut rest);
    assert!(
        eof.is_ok() && rest.is_empty(),
        "idle keep-alive connection not closed cleanly after {:?}: {eof:?} {rest:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
}
