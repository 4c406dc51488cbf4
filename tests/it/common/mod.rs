//! The fixture every integration test uses: a private tmux server on its own socket in a temp
//! dir (`-S <dir>/s -f /dev/null`, `TMUX` removed from the environment), killed on Drop, and the
//! `ccs-reap` binary pointed at it. Waits poll a condition with a deadline; nothing sleeps bare.
//!
//! `Server::run` runs any command; a sweep goes through `Server::sweep` or `Server::once`, which
//! check its exit code, so no test passes on a config error, a crash or a signal. Besides:
//! `procs` (processes in /proc, pid files, signals; re-exported here), `wrapper` (a `tmux`
//! wrapper script first on the reaper's PATH) and `http` (a client for the metrics endpoint).
#![allow(dead_code)]

pub mod http;
pub mod procs;
pub mod wrapper;

pub use procs::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ccs_reap::cli::exit;

pub const BIN: &str = env!("CARGO_BIN_EXE_ccs-reap");

/// The idle limit of an ordinary sweep (10 minutes): a session stamped idle hours ago with
/// `idle_since` is due, one stamped just now is not.
pub const LIMIT: &str = "600000";

/// The exit codes a test expects of a run: the contract's, from [`ccs_reap::cli::exit`], the module
/// the binary uses. 0, done.
pub const DONE: &[i32] = &[exit::OK as i32];
/// 1: a reap failed, tmux could not be read, or a command was refused.
pub const FAILED: &[i32] = &[exit::FAILED as i32];
/// Either 0 or 1, for a test that looks further itself (never 2, a crash or a signal).
pub const DONE_OR_FAILED: &[i32] = &[exit::OK as i32, exit::FAILED as i32];
/// 2: a configuration error.
pub const CONFIG: &[i32] = &[exit::CONFIG as i32];
/// 4: the session is gone or was reaped (`turn`, `pin`): respawn it.
pub const RESPAWN: &[i32] = &[exit::RESPAWN as i32];

pub fn fake_claude() -> String {
    format!("{}/scripts/fake-claude", env!("CARGO_MANIFEST_DIR"))
}

/// Poll `f` every 25 ms until it holds or `secs` pass.
pub fn wait_until(secs: f64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub struct Server {
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    children: Vec<Child>,
}

impl Server {
    pub fn new() -> Server {
        let dir = tempfile::Builder::new()
            .prefix("ccs-reap-test")
            .tempdir()
            .unwrap();
        let sock = dir.path().join("s");
        Server {
            dir,
            sock,
            children: Vec::new(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn state_dir(&self) -> PathBuf {
        self.path("state")
    }

    pub fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-u")
            .arg("-S")
            .arg(&self.sock)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .env_remove("TMUX")
            .env_remove("TMUX_PANE")
            // Claude Code's config dir (the fake claude keeps its status file there, as the
            // real one does): the test's own, never the user's.
            .env("CLAUDE_CONFIG_DIR", self.path("claude-config"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.tmux(args);
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Create a session running `cmd` (a shell command). Returns its `$N` number.
    pub fn session(&self, name: &str, cmd: &str) -> u32 {
        let out = self.ok(&[
            "new-session",
            "-d",
            "-P",
            "-F",
            "#{session_id}",
            "-x",
            "80",
            "-y",
            "24",
            "-s",
            name,
            cmd,
        ]);
        out.trim().trim_start_matches('$').parse().unwrap()
    }

    /// A session running the fake claude with `--resume <cid>` and the given helpers; its pids
    /// are written to `<dir>/<name>.pids`.
    pub fn chat(&self, name: &str, cid: &str, helpers: &str) -> u32 {
        let pids = self.path(&format!("{name}.pids"));
        let cmd = format!(
            "FAKE_CLAUDE_PIDS={} exec {} --resume {cid} --helpers '{helpers}'",
            pids.display(),
            fake_claude()
        );
        let n = self.session(name, &cmd);
        let want = 1 + helpers
            .split(',')
            .filter(|h| !h.is_empty() && *h != "polite")
            .count();
        assert!(
            wait_until(10.0, || self.pids(name).len() >= want),
            "{name}: helpers did not start"
        );
        n
    }

    /// The pids a fake claude reported: kind -> pid.
    pub fn pids(&self, name: &str) -> HashMap<String, i32> {
        self.pid_list(name).into_iter().collect()
    }

    /// Every pid a fake claude reported, in order, with its kind (kinds may repeat).
    pub fn pid_list(&self, name: &str) -> Vec<(String, i32)> {
        pid_file(&self.path(&format!("{name}.pids")))
    }

    pub fn set(&self, n: u32, opt: &str, val: &str) {
        self.ok(&["set-option", "-t", &format!("${n}:"), opt, val]);
    }

    pub fn unset(&self, n: u32, opt: &str) {
        self.ok(&["set-option", "-u", "-t", &format!("${n}:"), opt]);
    }

    pub fn show(&self, n: u32, opt: &str) -> Option<String> {
        let o = self.tmux(&["show-options", "-qv", "-t", &format!("${n}:"), opt]);
        let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
        (o.status.success() && !v.is_empty()).then_some(v)
    }

    /// Put `val` where a reap keeps its token: the session's environment (`CCS_REAP_TOKEN`).
    pub fn set_token(&self, n: u32, val: &str) {
        self.ok(&[
            "set-environment",
            "-t",
            &format!("${n}"),
            "CCS_REAP_TOKEN",
            val,
        ]);
    }

    /// The reap token session `n` carries in its environment, if any.
    pub fn token(&self, n: u32) -> Option<String> {
        let o = self.tmux(&["show-environment", "-t", &format!("${n}"), "CCS_REAP_TOKEN"]);
        let v = String::from_utf8_lossy(&o.stdout);
        v.trim_end_matches('\n')
            .strip_prefix("CCS_REAP_TOKEN=")
            .map(str::to_string)
    }

    /// Session names, sorted. Split on newlines only: tmux before 3.2 keeps a `\r` in a name as
    /// it is, and `ccs-1\r` is not `ccs-1` (`str::lines` would drop the `\r`).
    pub fn names(&self) -> Vec<String> {
        let o = self.tmux(&["list-sessions", "-F", "#{session_name}"]);
        let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .split_terminator('\n')
            .map(str::to_string)
            .collect();
        v.sort();
        v
    }

    pub fn has(&self, name: &str) -> bool {
        self.names().iter().any(|n| n == name)
    }

    /// Whether a client is attached to the session `name`.
    pub fn attached(&self, name: &str) -> bool {
        self.ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("={name}:"),
            "#{session_attached}",
        ])
        .trim()
            != "0"
    }

    /// The tmux server's pid.
    pub fn server_pid(&self) -> i32 {
        self.ok(&["display-message", "-p", "#{pid}"])
            .trim()
            .parse()
            .unwrap()
    }

    /// The pid of the first pane of session `$n`.
    pub fn pane_pid(&self, n: u32) -> i32 {
        self.ok(&[
            "display-message",
            "-p",
            "-t",
            &format!("${n}:"),
            "#{pane_pid}",
        ])
        .trim()
        .parse()
        .unwrap()
    }

    /// A session kept after its command exits: made with a `sleep`, `remain-on-exit` set, then
    /// its pane respawned with `cmd` (so the option is on before the command runs). Returns `$N`.
    pub fn remain_on_exit(&self, name: &str, cmd: &str) -> u32 {
        let n = self.session(name, "sleep 100000");
        self.ok(&[
            "set-option",
            "-t",
            &format!("${n}:"),
            "remain-on-exit",
            "on",
        ]);
        self.ok(&["respawn-pane", "-k", "-t", &format!("${n}:"), cmd]);
        n
    }

    /// Leave the server up with no session (`exit-empty off`; the default server is in that state
    /// for a moment between its last session going and its exit). tmux then answers any targeted
    /// command with "no current target" instead of "can't find session".
    pub fn server_that_stays_up(&self) {
        self.session("boot", "sleep 100000");
        self.ok(&["set-option", "-g", "exit-empty", "off"]);
        self.ok(&["kill-session", "-t", "=boot"]);
    }

    /// Attach a control-mode client (`tmux -C attach`) that stays until the fixture drops.
    pub fn attach_control(&mut self, name: &str) -> u32 {
        let child = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(["-C", "attach", "-t", &format!("={name}")])
            .env_remove("TMUX")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        assert!(
            wait_until(10.0, || self.attached(name)),
            "control client did not attach"
        );
        pid
    }

    /// Detach every client.
    pub fn detach_all(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The ccs-reap binary, pointed at this server, a state dir and a settings-file place
    /// (`$XDG_CONFIG_HOME`) inside the temp dir. Any `CCS_` variable of the outer environment is
    /// removed.
    pub fn reap(&self, env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(BIN);
        for (k, _) in std::env::vars() {
            if k.starts_with("CCS_") {
                c.env_remove(k);
            }
        }
        c.env_remove("TMUX")
            .env_remove("TMUX_PANE")
            .env("CCS_TMUX_SOCKET_PATH", &self.sock)
            .env("CCS_REAP_STATE_DIR", self.state_dir())
            // The settings file's default place, inside the temp dir: never the user's own.
            .env("XDG_CONFIG_HOME", self.path("xdg-config"))
            .env("CLAUDE_CONFIG_DIR", self.path("claude-config"))
            .env("CCS_LOG", "debug")
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Run ccs-reap to completion; it must exit 0 (`exit::OK`) and must not panic: the stderr is
    /// in the failure. [`Server::run_expect`] takes other codes, [`Server::run_any`] any.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        self.run_expect(DONE, args, env)
    }

    /// Run ccs-reap to completion; it must exit with one of `want` and must not panic.
    pub fn run_expect(&self, want: &[i32], args: &[&str], env: &[(&str, &str)]) -> Out {
        self.run_any(args, env)
            .expect_exit(want, &format!("{args:?}"))
    }

    /// Run ccs-reap to completion, whatever its exit code (the test looks at it).
    pub fn run_any(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        Out::from(self.reap(env).args(args).output().unwrap())
    }

    /// One sweep: `ccs-reap --once <args>` with `env`. It must exit with one of `want` (see
    /// [`DONE`] and the others) and must not panic: a configuration error (2), a crash or a
    /// signal fails the test, with the stderr.
    pub fn sweep(&self, want: &[i32], args: &[&str], env: &[(&str, &str)]) -> Out {
        let all: Vec<&str> = std::iter::once("--once")
            .chain(args.iter().copied())
            .collect();
        self.run_any(&all, env)
            .expect_exit(want, &format!("--once {args:?}"))
    }

    /// The sweep most tests run: `--once` with reaping on at [`LIMIT`] and SIGKILL `grace_ms`
    /// after SIGTERM; `extra` comes after those and wins. It must exit with one of `want`.
    pub fn once(&self, want: &[i32], grace_ms: u64, extra: &[(&str, &str)]) -> Out {
        let grace = grace_ms.to_string();
        let mut env = vec![
            ("CCS_ENGINE_IDLE_KILL_MS", LIMIT),
            ("CCS_REAP_GRACE_MS", grace.as_str()),
        ];
        env.extend_from_slice(extra);
        self.sweep(want, &[], &env)
    }

    /// `status --json`, which must exit 0.
    pub fn status(&self, env: &[(&str, &str)]) -> serde_json::Value {
        let o = self.run(&["status", "--json"], env);
        o.json()
    }

    /// The audit log, parsed.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state_dir().join("reaped.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The audit lines of the session `name`.
    pub fn audit_of(&self, name: &str) -> Vec<serde_json::Value> {
        self.audit()
            .into_iter()
            .filter(|l| l["session"] == name)
            .collect()
    }

    /// This server's studio directory (prefix `ccs-`) in a state dir: `studios/<key>`.
    pub fn studio_in(&self, state_dir: &Path) -> PathBuf {
        self.studio_in_for(state_dir, "ccs-")
    }

    pub fn studio_in_for(&self, state_dir: &Path, prefix: &str) -> PathBuf {
        let key = ccs_reap::config::Socket::Path(self.sock.clone()).studio_key(prefix);
        state_dir.join("studios").join(key)
    }

    /// This server's studio directory in the test's state dir.
    pub fn studio(&self) -> PathBuf {
        self.studio_in(&self.state_dir())
    }

    pub fn tombstone(&self, id: &str) -> Option<serde_json::Value> {
        let t = std::fs::read_to_string(self.studio().join("sessions").join(format!("{id}.json")))
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        // A large batch's tombstones are batch files (docs/files.md): this chat's record.
        match v.get("batch").and_then(|b| b.as_array()) {
            Some(recs) => recs.iter().find(|r| r["id"] == id).cloned(),
            None => Some(v),
        }
    }

    /// Stamp a session idle since `ms_ago`.
    pub fn idle_since(&self, n: u32, ms_ago: i64) {
        self.set(n, "@ccs_idle", &(now_ms() - ms_ago).to_string());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.detach_all();
        let _ = self.tmux(&["kill-server"]);
        // Helpers of fake claudes that a test left behind: kill what the pid files name.
        if let Ok(rd) = std::fs::read_dir(self.dir.path()) {
            let sock = path_str(&self.sock);
            for e in rd.flatten() {
                if e.path().extension().is_some_and(|x| x == "pids") {
                    for pid in pids_in(&e.path()) {
                        // Only a process that carries this server's socket in its environment:
                        // never a stranger that got a reused pid.
                        if pid > 1 && environ_has(pid, &sock) {
                            let _ = signal(pid, Signal::KILL);
                        }
                    }
                }
            }
        }
    }
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Out {
    fn from(o: Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Out {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }

    /// Fail unless the run (`what`) exited with one of `want` and did not panic; the stderr is
    /// in the message. (A run killed by a signal has no code: -1.)
    pub fn expect_exit(self, want: &[i32], what: &str) -> Out {
        assert!(
            want.contains(&self.code),
            "ccs-reap {what} exited {}, expected {want:?}:\n{}",
            self.code,
            self.stderr
        );
        no_panic(&self);
        self
    }
}

/// Fail if ccs-reap panicked (a panic on a worker thread need not change the exit code).
pub fn no_panic(o: &Out) {
    assert!(
        !o.stderr.contains("panicked"),
        "ccs-reap panicked:\n{}",
        o.stderr
    );
}

/// A `--once --json` or `status --json` report's sessions: name -> session.
pub fn by_name(j: &serde_json::Value) -> HashMap<String, serde_json::Value> {
    j["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("no sessions in {j}"))
        .iter()
        .map(|x| (x["name"].as_str().unwrap().to_string(), x.clone()))
        .collect()
}

pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A child killed (and waited for) on drop, so a failing test leaves no daemon behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
