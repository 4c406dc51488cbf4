//! The fixture every integration test uses: a private tmux server on its own socket in a temp
//! dir (`-S <dir>/s -f /dev/null`, `TMUX` removed from the environment), killed on Drop, and the
//! `ccs-reap` binary pointed at it. Waits poll a condition with a deadline; nothing sleeps bare.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ccs-reap");

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

/// Whether a pid is a living process (a zombie is not).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
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
        std::fs::read_to_string(self.path(&format!("{name}.pids")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                Some((it.next()?.to_string(), it.next()?.parse().ok()?))
            })
            .collect()
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

    /// Session names, sorted.
    pub fn names(&self) -> Vec<String> {
        let o = self.tmux(&["list-sessions", "-F", "#{session_name}"]);
        let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    }

    pub fn has(&self, name: &str) -> bool {
        self.names().iter().any(|n| n == name)
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
        let target = format!("={name}");
        assert!(
            wait_until(10.0, || self
                .ok(&[
                    "display-message",
                    "-p",
                    "-t",
                    &format!("{target}:"),
                    "#{session_attached}"
                ])
                .trim()
                != "0"),
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

    /// The ccs-reap binary, pointed at this server and a state dir inside the temp dir. Any `CCS_`
    /// variable of the outer environment is removed.
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
            .env("CCS_LOG", "debug")
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Run ccs-reap to completion.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let o = self.reap(env).args(args).output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// The audit log, parsed.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state_dir().join("reaped.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
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
        Some(serde_json::from_str(&t).unwrap())
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
            for e in rd.flatten() {
                if e.path().extension().is_some_and(|x| x == "pids") {
                    for l in std::fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .lines()
                    {
                        if let Some(pid) = l
                            .split_whitespace()
                            .nth(1)
                            .and_then(|p| p.parse::<i32>().ok())
                        {
                            // Only a process that carries this server's socket in its environment:
                            // never a stranger that got a reused pid.
                            let env =
                                std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                            let sock = self.sock.to_string_lossy().into_owned();
                            let ours = env.windows(sock.len()).any(|w| w == sock.as_bytes());
                            if pid > 1 && ours {
                                let _ = Command::new("kill")
                                    .args(["-9", &pid.to_string()])
                                    .stderr(Stdio::null())
                                    .status();
                            }
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

impl Out {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// The env that turns reaping on with a limit of `ms`.
pub fn on(ms: u64) -> Vec<(&'static str, String)> {
    vec![("CCS_ENGINE_IDLE_KILL_MS", ms.to_string())]
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
