//! Memory pressure under a real kernel limit: a memory cgroup (v1 or v2, whichever the machine
//! has; Docker's `--memory` is one) holds a private tmux server and the reaper; chats that each
//! hold 100 MiB open faster than the limit allows. With ccs-reap the OOM killer never acts, and
//! every chat it took comes back; without it, the same burst ends in OOM kills.
//!
//! Needs root and a writable cgroup file system. Where they are missing the test FAILS, naming the
//! way out: `CCS_SKIP_CGROUP_TESTS=1` skips it (and says so).

use crate::common::*;

/// Pressure by event on cgroup v2: the PSI trigger, and the poll where it cannot be set.
mod psi;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// The cgroup's limit.
const LIMIT: u64 = 640 * MIB;
/// What each chat holds.
const CHAT_MIB: u64 = 100;
/// Idle chats opened, one every GAP: 8 x 100 MiB on top of the busy and viewed ones is far more
/// than the limit, and faster than one sweep (30 s): the whole burst comes within 22 s.
///
/// The gap is what a reaper on two loaded cores needs to answer each chat: between the
/// threshold (480 MiB) and the limit there is room for 1.6 chats, and on this kind of machine
/// under load (two busy loops beside other builds; the daemon and the tmux server inside the
/// limited cgroup) a wake, its sweep and the teardown took 1.5 to 2.3 s. One chat every 0.7 s
/// (a quiet machine's pace) was met in none of 8 runs under that load, one every 1.5 s in 1 of
/// 3, one every 2.5 s in 3 of 3 (peak 540 MiB).
const BURST: u32 = 8;
const GAP: Duration = Duration::from_millis(2500);

fn skip() -> bool {
    if std::env::var("CCS_SKIP_CGROUP_TESTS").is_ok_and(|v| v == "1") {
        eprintln!(
            "SKIPPED by request (CCS_SKIP_CGROUP_TESTS=1): the memory-limit test did not run"
        );
        return true;
    }
    false
}

/// A memory cgroup of our own, removed (with everything in it killed) on drop.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    fn new(limit: u64) -> Cgroup {
        let how = "this test needs root and a writable memory cgroup (v1 /sys/fs/cgroup/memory or \
                   v2 /sys/fs/cgroup with the memory controller); set CCS_SKIP_CGROUP_TESTS=1 to skip it";
        assert!(rustix::process::geteuid().is_root(), "not root: {how}");
        // A count as well as the pid and the millisecond: two tests of this process (or one test's
        // two cgroups) may make theirs in the same millisecond.
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("ccs-reap-test-{}-{}-{seq}", std::process::id(), now_ms());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), false)
        } else {
            let root = Path::new("/sys/fs/cgroup");
            let ctl =
                std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !ctl.split_whitespace().any(|c| c == "memory") {
                let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
            }
            (root.join(&name), true)
        };
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}: {how}", dir.display()));
        let cg = Cgroup { dir, v2 };
        let (file, val) = if v2 {
            ("memory.max", limit.to_string())
        } else {
            ("memory.limit_in_bytes", limit.to_string())
        };
        std::fs::write(cg.dir.join(file), val).unwrap_or_else(|e| panic!("set {file}: {e}: {how}"));
        if v2 {
            let _ = std::fs::write(cg.dir.join("memory.swap.max"), "0");
        }
        cg
    }

    fn read(&self, f: &str) -> String {
        std::fs::read_to_string(self.dir.join(f)).unwrap_or_default()
    }

    fn usage(&self) -> u64 {
        let f = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        self.read(f).trim().parse().unwrap_or(0)
    }

    /// The kernel's count of processes it killed for this cgroup's limit.
    fn oom_kills(&self) -> u64 {
        let f = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.read(f)
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Make `cmd` start inside this cgroup.
    fn enter(&self, cmd: &mut std::process::Command) {
        let procs = self.procs_file();
        // SAFETY: the hook only writes a file between fork and exec, in a test.
        unsafe {
            cmd.pre_exec(move || std::fs::write(&procs, b"0"));
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            let pids: Vec<i32> = self
                .read("cgroup.procs")
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if pids.is_empty() {
                break;
            }
            for p in pids {
                if let Some(p) = rustix::process::Pid::from_raw(p) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A chat holding CHAT_MIB, as the fake claude of a studio would: its cid in `@ccs_cid`, its idle
/// clock started as `turn end` would.
fn chat_cmd() -> String {
    format!("exec python3 -c 'import time; b = b\"x\" * ({CHAT_MIB} << 20); time.sleep(100000)'")
}

///
/// Made with its cid and its idle clock in one tmux call, so that no sweep lists it half made
/// (a chat seen without its stamp is at first sight: its clock starts then, and it is kept one
/// sweep longer, which a burst does not leave time for).
fn open_chat(s: &Server, i: u32) -> u32 {
    let name = format!("ccs-{i}");
    let target = format!("={name}:");
    let (cid, now) = (format!("conv-{i}"), now_ms().to_string());
    #[rustfmt::skip]
    let out = s.ok(&[
        "new-session", "-d", "-P", "-F", "#{session_id}", "-x", "80", "-y", "24", "-s", &name,
        &chat_cmd(),
        ";", "set-option", "-t", &target, "@ccs_cid", &cid,
        ";", "set-option", "-t", &target, "@ccs_idle", &now,
    ]);
    out.trim().trim_start_matches('$').parse().unwrap()
}

struct Run {
    oom_kills: u64,
    peak: u64,
    reaped: Vec<String>,
}

/// The burst: a tmux server in a cgroup of LIMIT, two busy chats and a viewed one, then BURST
/// idle chats one every GAP. With `reaper`, the daemon runs in the cgroup too.
fn burst(reaper: bool) -> (Server, Cgroup, Run, Option<KillOnDrop>) {
    let mut s = Server::new();
    let cg = Cgroup::new(LIMIT);
    // The server starts inside the cgroup (it forks from this client).
    let mut c = std::process::Command::new("tmux");
    c.args(["-u", "-S"])
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
        .env_remove("TMUX");
    cg.enter(&mut c);
    assert!(c.status().unwrap().success());
    let server: u32 = s
        .ok(&["display-message", "-p", "#{pid}"])
        .trim()
        .parse()
        .unwrap();
    assert!(
        cg.read("cgroup.procs")
            .lines()
            .any(|l| l.trim() == server.to_string()),
        "the tmux server is not in the cgroup"
    );
    // Two chats in a turn and one watched: never taken, even under pressure.
    for i in [101, 102] {
        let n = open_chat(&s, i);
        s.set(n, "@ccs_turn", &now_ms().to_string());
    }
    open_chat(&s, 103);
    s.attach_control("ccs-103");
    let base = Instant::now();
    assert!(
        wait_until(20.0, || cg.usage() > 3 * CHAT_MIB * MIB),
        "the first chats did not take their memory: {} bytes",
        cg.usage()
    );
    let daemon = reaper.then(|| {
        let mut d = s.reap(&[
            ("CCS_ENGINE_MEM_HIGH", "75%"),
            ("CCS_ENGINE_MIN_IDLE_MS", "200"),
            ("CCS_REAP_GRACE_MS", "1000"),
        ]);
        d.stderr(std::fs::File::create(s.path("daemon.log")).unwrap());
        cg.enter(&mut d);
        let d = KillOnDrop(d.spawn().unwrap());
        // Its first sweep resolves the memory it watches.
        assert!(
            wait_until(10.0, || std::fs::read_to_string(s.path("daemon.log"))
                .is_ok_and(|l| l.contains("watching memory"))),
            "the daemon did not start watching"
        );
        d
    });
    let mut peak = 0;
    for i in 1..=BURST {
        open_chat(&s, i);
        let until = Instant::now() + GAP;
        while Instant::now() < until {
            peak = peak.max(cg.usage());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Let the last one settle.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        peak = peak.max(cg.usage());
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("burst took {:?}", base.elapsed());
    let reaped = s
        .audit()
        .iter()
        .filter(|l| l["outcome"] == "reaped")
        .map(|l| l["session"].as_str().unwrap().to_string())
        .collect();
    let run = Run {
        oom_kills: cg.oom_kills(),
        peak,
        reaped,
    };
    (s, cg, run, daemon)
}

#[test]
fn under_a_real_memory_limit_the_reaper_keeps_the_oom_killer_away_and_without_it_it_strikes() {
    if skip() {
        return;
    }
    // Without ccs-reap: the same burst ends in OOM kills, or this test proves nothing.
    let (_s, _cg, without, _) = burst(false);
    eprintln!(
        "without ccs-reap: {} OOM kills, peak {} MiB of {} MiB",
        without.oom_kills,
        without.peak / MIB,
        LIMIT / MIB
    );
    assert!(
        without.oom_kills > 0,
        "no OOM kill without the reaper: the scenario does not exceed the limit"
    );
    drop(_s);
    drop(_cg);

    // With ccs-reap.
    let (s, cg, with, daemon) = burst(true);
    let log = std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default();
    eprintln!(
        "with ccs-reap: {} OOM kills, peak {} MiB of {} MiB, reaped {:?}",
        with.oom_kills,
        with.peak / MIB,
        LIMIT / MIB,
        with.reaped
    );
    assert_eq!(with.oom_kills, 0, "the OOM killer acted:\n{log}");
    assert!(with.peak < LIMIT, "usage reached the limit");
    assert!(!with.reaped.is_empty(), "nothing was reaped:\n{log}");
    assert!(
        log.contains("memory pressure"),
        "no sweep was started by the watcher:\n{log}"
    );
    // Busy and viewed chats were never taken.
    for name in ["ccs-101", "ccs-102", "ccs-103"] {
        assert!(s.has(name), "{name} was taken under pressure:\n{log}");
        assert!(!with.reaped.iter().any(|r| r == name));
    }
    drop(daemon);
    // Every reaped chat has its tombstone and comes back with spawn, resuming its conversation.
    for name in &with.reaped {
        let id = &name[4..];
        let t = s
            .tombstone(id)
            .unwrap_or_else(|| panic!("{name}: no tombstone"));
        assert_eq!(t["cid"], format!("conv-{id}"));
        assert!(!s.has(name));
        s.run(&["spawn", id, "--", &fake_claude()], &[]);
        let cmd = s.ok(&[
            "list-panes",
            "-t",
            &format!("={name}:"),
            "-F",
            "#{pane_start_command}",
        ]);
        assert!(
            cmd.contains(&format!("--resume conv-{id}")),
            "{name}: {cmd}"
        );
    }
    drop(cg);
}

#[test]
fn a_watched_cgroup_that_vanishes_falls_back_with_a_warning_and_the_daemon_goes_on() {
    if skip() {
        return;
    }
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "");
    s.set(n, "@ccs_turn", &now_ms().to_string());
    let cg = Cgroup::new(LIMIT);
    let dir = path_str(&cg.dir);
    let log = s.path("daemon.log");
    let mut d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_MEM_HIGH", "1G"),
            ("CCS_ENGINE_MEM_CGROUP", dir.as_str()),
            ("CCS_REAP_INTERVAL_MS", "200"),
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(10.0, || read().contains("watching memory")
            && read().contains(&dir)),
        "{}",
        read()
    );
    // The container restarts: its cgroup goes.
    std::fs::remove_dir(&cg.dir).unwrap();
    assert!(
        wait_until(10.0, || read().contains("the memory watched changed")),
        "no fallback: {}",
        read()
    );
    // Still sweeping, no crash.
    let sweeps = |t: &str| t.matches("decided").count();
    let before = sweeps(&read());
    assert!(
        wait_until(10.0, || sweeps(&read()) > before),
        "it stopped sweeping"
    );
    assert!(
        d.0.try_wait().unwrap().is_none(),
        "the daemon died: {}",
        read()
    );
    let pid = rustix::process::Pid::from_raw(d.0.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(d.0.wait().unwrap().code(), Some(0));
    assert!(!read().contains("panicked"));
}

impl Cgroup {
    /// The working set, as the kernel's own files give it: the usage less the inactive page
    /// cache (v1's `total_` count includes the cgroups below, as its usage does).
    fn working_set(&self) -> u64 {
        let key = if self.v2 {
            "inactive_file "
        } else {
            "total_inactive_file "
        };
        let inactive: u64 = self
            .read("memory.stat")
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        self.usage().saturating_sub(inactive)
    }
}

/// Page cache is not memory in use: a file written with fsync from inside the cgroup puts its
/// usage above `CCS_ENGINE_MEM_HIGH` while the working set stays below, and no idle chat is
/// reaped, neither by the daemon's watcher (which the kernel wakes on the usage) nor by a
/// sweep. The control: a busy chat holding as much anonymous memory gets the idle chats reaped.
#[test]
fn page_cache_above_the_threshold_reaps_nothing_and_the_same_in_anonymous_memory_does() {
    if skip() {
        return;
    }
    const HIGH_MIB: u64 = 300;
    const FILE_MIB: u64 = 400;
    let high = format!("{HIGH_MIB}M");
    let s = Server::new();
    let cg = Cgroup::new(LIMIT);
    // The tmux server, and so every chat, in the cgroup.
    let mut c = std::process::Command::new("tmux");
    c.args(["-u", "-S"])
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
        .env_remove("TMUX");
    cg.enter(&mut c);
    assert!(c.status().unwrap().success());
    // Three small idle chats, long past the floor: what a memory rule would take.
    let idle = ["ccs-1", "ccs-2", "ccs-3"];
    for (i, name) in idle.iter().enumerate() {
        let n = s.session(name, "sleep 100000");
        s.set(n, "@ccs_cid", &format!("conv-{}", i + 1));
        s.idle_since(n, 3_600_000);
    }
    // A busy chat that allocates FILE_MIB of anonymous memory once `go` exists.
    let go = s.path("go");
    let busy = s.session(
        "ccs-busy",
        &format!(
            "exec python3 -c 'import os, time\nwhile not os.path.exists(\"{}\"): time.sleep(0.05)\nb = b\"x\" * ({FILE_MIB} << 20)\ntime.sleep(100000)'",
            path_str(&go)
        ),
    );
    s.set(busy, "@ccs_cid", "conv-busy");
    s.set(busy, "@ccs_turn", &now_ms().to_string());

    let log = s.path("daemon.log");
    let _d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_MEM_HIGH", high.as_str()),
            ("CCS_ENGINE_MIN_IDLE_MS", "200"),
            ("CCS_REAP_GRACE_MS", "1000"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(10.0, || read().contains("watching memory")),
        "the daemon did not start watching: {}",
        read()
    );
    assert!(read().contains(&path_str(&cg.dir)), "{}", read());

    // The file, written and synced from inside the cgroup: clean page cache, charged to it.
    let file = s.path("cache.bin");
    let mut w = std::process::Command::new("python3");
    w.args([
        "-c",
        &format!(
            "import os\nf = open(\"{}\", \"wb\")\nb = b\"y\" * (1 << 20)\nfor _ in range({FILE_MIB}): f.write(b)\nf.flush()\nos.fsync(f.fileno())\nf.close()",
            path_str(&file)
        ),
    ]);
    cg.enter(&mut w);
    assert!(w.status().unwrap().success(), "the writer failed");
    let (usage, ws) = (cg.usage(), cg.working_set());
    eprintln!(
        "after the file: usage {} MiB, working set {} MiB, threshold {HIGH_MIB} MiB",
        usage / MIB,
        ws / MIB
    );
    assert!(
        usage > HIGH_MIB * MIB,
        "the file's page cache was not charged to the cgroup: usage {} MiB",
        usage / MIB
    );
    assert!(
        ws < HIGH_MIB * MIB,
        "the file's pages are not inactive page cache (is the temp dir on tmpfs? set TMPDIR to a \
         disk, or CCS_SKIP_CGROUP_TESTS=1): working set {} MiB",
        ws / MIB
    );
    // `status` shows the working set, below the threshold.
    let j = s.status(&[]);
    let used = j["host"]["used_bytes"].as_u64().unwrap();
    assert!(
        used < HIGH_MIB * MIB,
        "status reports {used} bytes used: {j}"
    );

    // Nothing is reaped: the watcher looks every 250 ms, a sweep would take a few more.
    let reaped = || {
        s.audit()
            .iter()
            .filter(|l| l["outcome"] == "reaped")
            .count()
    };
    assert!(
        !wait_until(4.0, || reaped() > 0),
        "idle chats were reaped for page cache: {:?}\n{}",
        s.audit(),
        read()
    );
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_MEM_HIGH", high.as_str()),
            ("CCS_ENGINE_MIN_IDLE_MS", "200"),
            ("CCS_REAP_GRACE_MS", "1000"),
        ],
    );
    assert_eq!(reaped(), 0, "--once reaped for page cache: {}", o.stdout);
    for name in idle {
        assert!(s.has(name), "{name} is gone");
    }

    // The control: as much anonymous memory, in a busy chat: the idle chats go, for memory.
    std::fs::write(&go, b"").unwrap();
    assert!(
        wait_until(30.0, || reaped() == idle.len()),
        "the idle chats were not reaped under real pressure (usage {} MiB, working set {} MiB): {:?}\n{}",
        cg.usage() / MIB,
        cg.working_set() / MIB,
        s.audit(),
        read()
    );
    for l in s.audit().iter().filter(|l| l["outcome"] == "reaped") {
        assert_eq!(l["reason"], "memory", "{l}");
    }
    assert!(s.has("ccs-busy"), "the busy chat was taken");
    assert_eq!(cg.oom_kills(), 0, "the OOM killer acted");
}
