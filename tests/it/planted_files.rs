//! Files another process could plant, for every command that reads one (issue 44): an agent's
//! status file (`spawn`'s check that the agent is up), Claude Code's settings file (`doctor`)
//! and a tombstone (`status`, `spawn`, `resume`, `forget`, `--once`; the activity files have
//! hostile_inputs.rs). A FIFO never holds a command; a huge (sparse) file is never read whole:
//! each command runs under a 96 MiB data limit (`RLIMIT_DATA`), which reading 256 MiB breaks.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use crate::common::*;

/// The data limit every command here runs under: far above what one needs, far below a planted
/// file's size.
const DATA_LIMIT: u64 = 96 << 20;
const HUGE: u64 = 256 << 20;

#[derive(Clone, Copy, Debug)]
enum Plant {
    Fifo,
    Huge,
}

fn plant(p: &std::path::Path, how: Plant) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    match how {
        Plant::Fifo => {
            rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o600))
                .unwrap()
        }
        Plant::Huge => std::fs::File::create(p).unwrap().set_len(HUGE).unwrap(),
    }
}

/// A ccs-reap command, its stdout and stderr in files (a full pipe never holds it), killed on
/// drop.
struct Running {
    child: Child,
    out: std::fs::File,
    err: std::fs::File,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `c`, under [`DATA_LIMIT`] when `limit`.
fn start(mut c: Command, limit: bool) -> Running {
    if limit {
        // SAFETY: setrlimit is a plain system call, safe between fork and exec.
        unsafe {
            c.pre_exec(|| {
                rustix::process::setrlimit(
                    rustix::process::Resource::Data,
                    rustix::process::Rlimit {
                        current: Some(DATA_LIMIT),
                        maximum: Some(DATA_LIMIT),
                    },
                )
                .map_err(std::io::Error::from)
            });
        }
    }
    let out = tempfile::tempfile().unwrap();
    let err = tempfile::tempfile().unwrap();
    let child = c
        .stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .spawn()
        .unwrap();
    Running { child, out, err }
}

fn limited(c: Command) -> Running {
    start(c, true)
}

/// Wait at most `secs` for it; its output, or a failure that says it hung.
fn finish(mut r: Running, secs: f64, what: &str) -> Out {
    let done = wait_until(secs, || r.child.try_wait().unwrap().is_some());
    if !done {
        let _ = r.child.kill();
    }
    let code = r.child.wait().unwrap().code().unwrap_or(-1);
    let read = |f: &mut std::fs::File| {
        use std::io::{Read, Seek};
        let mut t = String::new();
        f.rewind().unwrap();
        let _ = f.read_to_string(&mut t);
        t
    };
    let o = Out {
        code,
        stdout: read(&mut r.out),
        stderr: read(&mut r.err),
    };
    assert!(done, "{what} hung (killed after {secs} s): {}", o.stderr);
    // A read past the limit aborts (SIGABRT: -1 here) or fails the allocation.
    assert!(
        o.code >= 0 && !o.stderr.contains("memory allocation"),
        "{what} died: {}",
        o.stderr
    );
    o
}

/// A stand-in `claude` that plants its own status file (`$CLAUDE_CONFIG_DIR/sessions/<pid>.json`)
/// before it settles.
fn planting_claude(s: &Server, how: Plant) -> String {
    let bin = s.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    let make = match how {
        Plant::Fifo => "mkfifo \"$f\"",
        Plant::Huge => "truncate -s 256M \"$f\"",
    };
    std::fs::write(
        &claude,
        format!(
            "#!/bin/sh\nf=\"$CLAUDE_CONFIG_DIR/sessions/$$.json\"\n{make}\nexec sleep 100000\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path_str(&claude)
}

/// The peak resident memory of `pid` so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}

#[test]
fn spawn_never_waits_on_an_agents_status_file_nor_reads_a_huge_one() {
    const CID: &str = "0b7c2a4e-5d3f-4e1a-9c8b-7a6d5e4f3a2b";
    for how in [Plant::Fifo, Plant::Huge] {
        let s = Server::new();
        let config = s.path("claude-config");
        std::fs::create_dir_all(config.join("sessions")).unwrap();
        let claude = planting_claude(&s, how);
        let dir = format!("CLAUDE_CONFIG_DIR={}", path_str(&config));
        let mut c = s.reap(&[]);
        c.args(["spawn", "1", "--cid", CID, "--", "env", &dir, &claude]);
        // No data limit here: a read of the whole file must show in the peak memory (under a
        // limit, std's read_to_string fails the allocation and says nothing).
        let l = start(c, false);
        let pid = l.child.id();
        // The file is planted; then the agent's SessionStart hook would say it is up.
        assert!(
            wait_until(10.0, || std::fs::read_dir(config.join("sessions"))
                .is_ok_and(|mut d| d.next().is_some())),
            "{how:?}: the agent did not start"
        );
        assert!(wait_until(10.0, || s.has("ccs-1")));
        // spawn looks at the status file every 100 ms while it waits: a second of looks at a
        // 256 MiB file never takes 64 MiB.
        let read_whole = wait_until(1.0, || peak_rss(pid) > 64 << 20);
        assert!(
            !read_whole,
            "{how:?}: spawn's peak memory reached {} bytes",
            peak_rss(pid)
        );
        s.ok(&["set-option", "-t", "=ccs-1:", "@ccs_cid", CID]);
        let o = finish(l, 10.0, &format!("spawn with a {how:?} status file"));
        assert_eq!(o.code, 0, "{how:?}: {}", o.stderr);
        assert!(s.has("ccs-1"));
    }
}

#[test]
fn doctor_never_waits_on_claudes_settings_file_nor_reads_a_huge_one() {
    for (how, why) in [(Plant::Fifo, "a FIFO"), (Plant::Huge, "larger than")] {
        let s = Server::new();
        s.session("ccs-1", "sleep 100000");
        let config = s.path("claude-config");
        plant(&config.join("settings.json"), how);
        let mut c = s.reap(&[("CLAUDE_CONFIG_DIR", &path_str(&config))]);
        c.arg("doctor");
        let o = finish(
            limited(c),
            10.0,
            &format!("doctor with a {how:?} settings.json"),
        );
        assert!(o.code == 0 || o.code == 1, "{how:?}: {}", o.stderr);
        assert!(
            o.stdout.contains("settings.json") && o.stdout.contains(why),
            "{how:?}: {}",
            o.stdout
        );
    }
}

#[test]
fn a_planted_tombstone_never_holds_a_command() {
    for how in [Plant::Fifo, Plant::Huge] {
        let s = Server::new();
        // A studio dir made by a first look, then the tombstone planted in it.
        s.run(&["status"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
        let tomb = s.studio().join("sessions").join("1.json");
        plant(&tomb, how);
        let commands: &[&[&str]] = &[
            &["status", "--json"],
            &["--once"],
            &["spawn", "1"],
            &["resume", "1"],
            &["forget", "1"],
        ];
        for args in commands {
            let mut c = s.reap(&[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
            c.args(*args);
            let o = finish(
                limited(c),
                10.0,
                &format!("{args:?} with a {how:?} tombstone"),
            );
            assert!(o.code == 0 || o.code == 1, "{args:?} {how:?}: {}", o.stderr);
            assert!(!s.has("ccs-1"), "{args:?} {how:?}: a chat was made of it");
        }
    }
}

#[test]
fn status_writes_nothing_and_says_a_thousand_bad_tombstones_in_one_line() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::new();
    s.session("other", "sleep 100000");
    let n = s.chat("ccs-1", "conv-1", "");
    s.idle_since(n, 10_000_000);
    s.once(DONE, 1000, &[]);
    let tomb = s.studio().join("sessions").join("1.json");
    // A tombstone someone made 0644: status reads it, and leaves its mode alone.
    std::fs::set_permissions(&tomb, std::fs::Permissions::from_mode(0o644)).unwrap();
    let st = s.status(&[]);
    assert!(st["asleep"].to_string().contains("conv-1"), "{st}");
    let mode = std::fs::metadata(&tomb).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644, "status changed a tombstone's mode");
    // A thousand malformed tombstones: one warning line, with the count and the first.
    for i in 100..1100 {
        std::fs::write(s.studio().join("sessions").join(format!("{i}.json")), "{").unwrap();
    }
    let o = s.run(&["status", "--json"], &[]);
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.contains("tombstone"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    assert!(
        lines[0].contains("1000 unreadable tombstone") && lines[0].contains(".json"),
        "{}",
        lines[0]
    );
    assert!(o.json()["asleep"].to_string().contains("conv-1"));
}

#[test]
fn a_tombstone_without_a_command_line_says_why_without_blaming_a_version() {
    let s = Server::new();
    s.session("other", "sleep 100000");
    // A chat that ran no agent's command (its cid told by hand): reaped, its tombstone keeps no
    // command line.
    let n = s.session("ccs-1", "sleep 100000");
    s.set(n, "@ccs_cid", "conv-1");
    s.idle_since(n, 10_000_000);
    s.once(DONE, 1000, &[]);
    let t = s.tombstone("1").expect("a tombstone");
    assert!(t["argv"].is_null(), "{t}");
    let o = s.run_expect(FAILED, &["spawn", "1"], &[]);
    assert!(
        o.stderr.contains("keeps no command line") && o.stderr.contains("ran no agent's command"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("0.4"), "{}", o.stderr);
}
