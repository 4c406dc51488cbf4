//! End to end with the real Codex CLI and Gemini CLI (pinned in `tests/e2e/package.json`),
//! offline against `tests/e2e/fake_agents.py`, on a private tmux server. For each agent: a plain
//! chat started in a `ccs-<id>` session by hand (as a user would, no `spawn`), wired to ccs-reap
//! only by `ccs-reap hook-settings --agent <name> --write <its own settings file>`, tells its
//! conversation id and turns through its own hooks (`hook --agent <name>`); once idle a sweep
//! reaps it, its whole process tree gone (Gemini CLI in its default two-process relaunch mode);
//! `ccs-reap spawn` brings it back with its own way back (`codex resume <id>`,
//! `gemini --resume <id>`; Gemini CLI's from the command line its tombstone keeps), and the fake
//! API's request for the second turn carries the first.
//!
//! Needs `npm ci --prefix tests/e2e --no-audit --no-fund` (node, python3 and tmux on PATH);
//! without the packages it fails with that hint. Built with the cargo feature `e2e` only.
//! `CCS_E2E_TIMEOUT` (seconds per wait, default 90). What was measured is in `tests/e2e/NOTES.md`.

use crate::common::wrapper::which;
use crate::common::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn timeout() -> f64 {
    std::env::var("CCS_E2E_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(90.0)
}

fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e")
}

/// The agent's program under `tests/e2e/node_modules`; without it (or node, python3) the test
/// fails with the hint.
pub(crate) fn program(agent: &str) -> PathBuf {
    let nm = e2e_dir().join("node_modules");
    let hint = "install them with: npm ci --prefix tests/e2e --no-audit --no-fund \
                (or run the tests without `--features e2e`)";
    let p = match agent {
        "codex" => nm.join("@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"),
        _ => nm.join("@google/gemini-cli/bundle/gemini.js"),
    };
    let missing = [
        (!p.is_file()).then(|| format!("{} is missing; {hint}", p.display())),
        which("node")
            .is_none()
            .then(|| "node is not on PATH".to_string()),
        which("python3")
            .is_none()
            .then(|| "python3 is not on PATH".to_string()),
    ];
    match missing.into_iter().flatten().next() {
        None => p,
        Some(why) => panic!("end-to-end test cannot run: {why}"),
    }
}

/// `fake_agents.py`: killed on Drop.
pub(crate) struct FakeApi {
    child: Child,
    pub(crate) port: u16,
    log: PathBuf,
}

impl FakeApi {
    pub(crate) fn start(dir: &Path) -> FakeApi {
        let log = dir.join("api.log");
        let mut child = Command::new("python3")
            .arg(e2e_dir().join("fake_agents.py"))
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("api.err")).unwrap())
            .spawn()
            .expect("start fake_agents.py");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            let mut rest = String::new();
            while r.read_line(&mut rest).map(|n| n > 0).unwrap_or(false) {
                rest.clear();
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs_f64(timeout()))
            .unwrap_or_default();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("fake_agents.py did not print its port (got {line:?})"));
        FakeApi { child, port, log }
    }

    /// The model requests whose last user text is `m`.
    pub(crate) fn requests_for(&self, m: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| r["last_user"] == m)
            .collect()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every living process of the pane's session (the pane's process leads it: tmux makes it a
/// session leader), orphans reparented elsewhere included.
fn tree(pane_pid: i32) -> Vec<i32> {
    all_processes()
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let f: Vec<String> = s
                        .rsplit(')')
                        .next()?
                        .split_whitespace()
                        .map(String::from)
                        .collect();
                    f.get(3)?.parse::<i32>().ok()
                })
                == Some(pane_pid)
                && alive(*p)
        })
        .collect()
}

fn rss_mb(pids: &[i32]) -> f64 {
    let kb: u64 = pids
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .sum();
    kb as f64 / 1024.0
}

/// A private tmux server with a keeper session, the fake API and a clean environment.
struct World {
    s: Server,
    api: FakeApi,
    t: PathBuf,
    proj: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl World {
    fn new(agent: &str, prog: &Path) -> World {
        let s = Server::new();
        let t = std::fs::canonicalize(s.dir.path()).unwrap();
        let (home, proj, bin) = (t.join("home"), t.join("proj"), t.join("bin"));
        for d in [&home, &proj, &bin, &t.join("tmp"), &t.join("codex")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(prog, bin.join(agent)).unwrap();
        let api = FakeApi::start(&t);
        let base = format!("http://127.0.0.1:{}", api.port);
        let mut path = vec![bin.clone(), which("node").unwrap().parent().unwrap().into()];
        path.push(which("tmux").unwrap().parent().unwrap().into());
        path.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        let env: Vec<(&str, String)> = vec![
            (
                "PATH",
                std::env::join_paths(&path)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            ),
            ("HOME", path_str(&home)),
            ("TMPDIR", path_str(&t.join("tmp"))),
            ("LANG", "C.UTF-8".into()),
            ("TERM", "xterm-256color".into()),
            ("SHELL", "/bin/sh".into()),
            ("CODEX_HOME", path_str(&t.join("codex"))),
            ("FAKE_OPENAI_KEY", "sk-fake-ccs-e2e".into()),
            ("GEMINI_API_KEY", "fake-gemini-key".into()),
            ("GOOGLE_GEMINI_BASE_URL", base.clone()),
            ("NO_BROWSER", "1".into()),
        ];
        // Offline: Codex through a custom provider; Gemini CLI with an API key, no folder trust
        // dialog, no telemetry or update checks.
        let codex_toml = format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"fake\"\napproval_policy = \"never\"\n\
             [model_providers.fake]\nname = \"fake\"\nbase_url = \"{base}/v1\"\n\
             env_key = \"FAKE_OPENAI_KEY\"\nwire_api = \"responses\"\n\
             request_max_retries = 0\nstream_max_retries = 0\n\
             [projects.\"{}\"]\ntrust_level = \"trusted\"\n[features]\ndaemon_auto_start = false\n",
            path_str(&proj)
        );
        std::fs::write(t.join("codex/config.toml"), codex_toml).unwrap();
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
        let gemini = serde_json::json!({
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
            "model": {"name": "gemini-2.5-flash"},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        });
        std::fs::write(home.join(".gemini/settings.json"), gemini.to_string()).unwrap();
        let o = Command::new("tmux")
            .arg("-u")
            .arg("-S")
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
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "keeper: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        s.ok(&["set-option", "-g", "default-size", "200x50"]);
        World {
            s,
            api,
            t,
            proj,
            env,
        }
    }

    /// ccs-reap with the world's environment, reaping a chat idle for 2 s; must exit 0.
    fn ccs(&self, args: &[&str]) -> Out {
        let o = Out::from(
            Command::new(BIN)
                .args(args)
                .env_clear()
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .env("CCS_TMUX_SOCKET_PATH", &self.s.sock)
                .env("CCS_REAP_STATE_DIR", self.s.state_dir())
                .env("CCS_LOG", "debug")
                .env("CCS_ENGINE_IDLE_KILL_MS", "2s")
                .env("CCS_REAP_GRACE_MS", "5s")
                .stdin(Stdio::null())
                .output()
                .unwrap(),
        );
        assert_eq!(o.code, 0, "ccs-reap {args:?}: {}{}", o.stdout, o.stderr);
        o
    }

    fn screen(&self, target: &str) -> String {
        let o = self
            .s
            .tmux(&["capture-pane", "-p", "-J", "-S", "-300", "-t", target]);
        String::from_utf8_lossy(&o.stdout).replace('\u{a0}', " ")
    }

    fn wait(&self, target: &str, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout());
        while !f() {
            if Instant::now() >= deadline {
                let scr: Vec<String> = self
                    .screen(target)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(String::from)
                    .collect();
                panic!(
                    "timed out waiting for: {what}\n---- screen ----\n{}\n---- api log ----\n{}",
                    scr.join("\n"),
                    std::fs::read_to_string(&self.api.log)
                        .unwrap_or_default()
                        .lines()
                        .map(|l| &l[..l.len().min(200)])
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Type `msg` and submit it: Enter again while no request carries it (keys typed while an
    /// agent runs a hook at start can be lost; an Enter on an empty box does nothing).
    fn say(&self, target: &str, msg: &str) {
        // Typed again while it does not show (a just-resumed gemini can drop keys).
        let mut typed = Instant::now() - Duration::from_secs(10);
        self.wait(target, "the prompt in the input box", || {
            if typed.elapsed() > Duration::from_secs(5) {
                self.s.ok(&["send-keys", "-t", target, "-l", "--", msg]);
                typed = Instant::now();
            }
            self.screen(target).contains(msg)
        });
        let mut last = Instant::now() - Duration::from_secs(10);
        self.wait(target, "the prompt's request at the fake API", || {
            if last.elapsed() > Duration::from_secs(3) {
                self.s.ok(&["send-keys", "-t", target, "Enter"]);
                last = Instant::now();
            }
            !self.api.requests_for(msg).is_empty()
        });
    }
}

fn sid(s: &Server, target: &str) -> u32 {
    let o = s.ok(&["display-message", "-p", "-t", target, "#{session_id}"]);
    o.trim()
        .trim_start_matches('$')
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "no session id for {target}: {o:?}; sessions {:?}",
                s.ok(&["list-sessions"])
            )
        })
}

fn pane_pid(s: &Server, target: &str) -> i32 {
    s.ok(&["list-panes", "-t", target, "-F", "#{pane_pid}"])
        .trim()
        .parse()
        .unwrap()
}

/// One agent's round: hook-settings, a plain chat, a turn, a sweep's reap, spawn, a second turn.
fn round(agent: &str, settings_file: &str, first: &[&str], ready: &str) {
    let prog = program(agent);
    let t0 = Instant::now();
    let w = World::new(agent, &prog);
    let (id, session) = (format!("{agent}1"), format!("ccs-{agent}1"));
    let target = format!("={session}:");
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap();
    let tag = &uuid[..8];
    let (msg1, msg2) = (
        format!("remember MANGO-{tag}"),
        format!("which fruit {tag}"),
    );
    let echo1 = format!("ECHO: {msg1}");

    // 1. Wired only by the agent's own settings.
    let file = path_str(&w.t.join(settings_file));
    let o = w.ccs(&["hook-settings", "--agent", agent, "--write", &file]);
    assert!(o.stdout.contains("hooks written"), "{}", o.stdout);
    assert!(w
        .ccs(&["hook-settings", "--agent", agent, "--write", &file])
        .stdout
        .contains("already up to date"));

    // 2. A plain chat in ccs-<id>, started by hand.
    // From a client with the world's environment: tmux gives a new session its client's PATH.
    let o = Command::new("tmux")
        .arg("-S")
        .arg(&w.s.sock)
        .args(["-f", "/dev/null", "new-session", "-d", "-s", &session, "-c"])
        .arg(&w.proj)
        .args(first)
        .env_clear()
        .envs(w.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "new-session: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let n = sid(&w.s, &target);
    w.wait(&target, "the agent ready", || {
        w.screen(&target).contains(ready)
    });
    if agent == "codex" {
        // Codex tells its id at the first prompt, not at launch.
        assert_eq!(w.s.show(n, "@ccs_cid"), None);
    } else {
        // Gemini CLI at launch (keys typed while its SessionStart hook runs can be lost).
        w.wait(&target, "SessionStart's id", || {
            w.s.show(n, "@ccs_cid").is_some()
        });
        w.wait(&target, "the hook done", || {
            !w.screen(&target).contains("Executing Hook")
        });
    }

    // 3. One turn: the hooks tell the id, the agent and the turn's end.
    w.say(&target, &msg1);
    w.wait(&target, "the reply on screen", || {
        w.screen(&target).contains(&echo1)
    });
    w.wait(&target, "the turn ended by the agent's hook", || {
        w.s.show(n, "@ccs_cid").is_some()
            && w.s.show(n, "@ccs_turn").is_none()
            && w.s.show(n, "@ccs_idle").is_some()
    });
    let cid = w.s.show(n, "@ccs_cid").unwrap();
    assert_eq!(w.s.show(n, "@ccs_agent").as_deref(), Some(agent));
    let pid1 = pane_pid(&w.s, &target);
    let tree1 = tree(pid1);
    eprintln!(
        "{agent}: {} processes, {:.0} MB RSS idle after a turn",
        tree1.len(),
        rss_mb(&tree1)
    );

    // 4. Idle past the limit: a sweep reaps it, nothing of its tree lives on.
    w.wait(&target, "a sweep to reap the idle chat", || {
        w.ccs(&["--once"]);
        !w.s.has(&session)
    });
    assert!(
        wait_until(15.0, || tree1.iter().all(|p| !alive(*p))),
        "{agent}'s processes survived the reap: {:?}",
        tree1.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
    let tomb = w.s.tombstone(&id).expect("a tombstone");
    assert_eq!(tomb["cid"], cid.as_str(), "{tomb}");
    assert_eq!(tomb["agent"], agent, "{tomb}");
    // The command line it ran, for `spawn <id>` to replay (by the agent's own descriptor).
    let kept: Vec<String> = serde_json::from_value(tomb["argv"].clone()).expect("argv kept");
    assert!(
        kept.iter()
            .any(|w| w.ends_with(&format!("/{agent}")) || *w == agent),
        "{tomb}"
    );

    // 5. spawn brings it back by the agent's own way; turn 2's request carries turn 1. Codex:
    // the command given again; Gemini CLI: the one its tombstone keeps, replayed.
    let mut sp = vec!["spawn", &id];
    if agent == "codex" {
        sp.push("--");
        sp.extend(first.iter().filter(|w| !w.contains('=') && **w != "env"));
    }
    w.ccs(&sp);
    let start =
        w.s.ok(&["list-panes", "-t", &target, "-F", "#{pane_start_command}"]);
    eprintln!("{agent} respawned as: {}", start.trim());
    let n2 = sid(&w.s, &target);
    w.wait(&target, "the resumed agent ready", || {
        w.screen(&target).contains(ready)
    });
    w.wait(&target, "turn 1 on the resumed screen", || {
        w.screen(&target).contains(&echo1)
    });
    w.say(&target, &msg2);
    w.wait(&target, "turn 2 ended", || {
        w.screen(&target).contains(&format!("ECHO: {msg2}")) && w.s.show(n2, "@ccs_idle").is_some()
    });
    assert_eq!(w.s.show(n2, "@ccs_cid").as_deref(), Some(cid.as_str()));
    let r2 = w.api.requests_for(&msg2);
    let body = r2.last().unwrap()["body"].to_string();
    assert!(
        body.contains(&msg1) && body.contains(&echo1),
        "turn 2's request lacks turn 1: {body}"
    );
    let tree2 = tree(pane_pid(&w.s, &target));
    eprintln!(
        "{agent} resumed: {} processes, {:.0} MB RSS; total {:.1} s",
        tree2.len(),
        rss_mb(&tree2),
        t0.elapsed().as_secs_f64()
    );
    if agent == "gemini" {
        // Started by ccs-reap: GEMINI_CLI_NO_RELAUNCH=true, one node process, not two.
        assert!(start.contains("GEMINI_CLI_NO_RELAUNCH=true"), "{start}");
        let nodes = tree2
            .iter()
            .filter(|p| cmdline(**p).starts_with("node") || cmdline(**p).contains("/node "))
            .count();
        assert_eq!(
            nodes,
            1,
            "{:?}",
            tree2.iter().map(|p| cmdline(*p)).collect::<Vec<_>>()
        );
    }
    let _ = w.s.tmux(&["kill-session", "-t", &target]);
    assert!(wait_until(15.0, || tree2.iter().all(|p| !alive(*p))));
}

#[test]
fn real_codex_wired_by_hook_settings_is_reaped_when_idle_and_resumed_with_its_history() {
    // The trust step is the studio's: it passes the bypass flag on its own command line.
    round(
        "codex",
        "codex/hooks.json",
        &["codex", "--dangerously-bypass-hook-trust"],
        "Ask Codex to do anything",
    );
}

#[test]
fn real_gemini_in_relaunch_mode_is_reaped_whole_and_resumed_with_its_history() {
    round(
        "gemini",
        "home/.gemini/settings.json",
        &["gemini"],
        "Type your message",
    );
}

/// The session files of gemini's chats (`~/.gemini/tmp/<project>/chats/session-*.jsonl`), with
/// their text.
fn gemini_session_files(w: &World) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let tmp = w.t.join("home/.gemini/tmp");
    for proj in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let chats = proj.path().join("chats");
        for f in std::fs::read_dir(&chats).into_iter().flatten().flatten() {
            let p = f.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("session-") && name.ends_with(".jsonl") {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// Issue 43.8: Gemini CLI 0.61.0 writes a chat's session file at launch, before any prompt. A
/// chat reaped before its first prompt has a file that `gemini --resume <id>` does not list (no
/// user message: "No previous sessions found for this project.") and that `--session-id <id>`
/// refuses ("Session ID ... already exists", exit 42). `spawn` starts it afresh under a new id
/// (nothing was said in it, nothing is lost), writes nothing of gemini's, and a prompt then
/// works.
#[test]
fn real_gemini_reaped_before_its_first_prompt_comes_back_and_takes_a_prompt() {
    let prog = program("gemini");
    let t0 = Instant::now();
    let w = World::new("gemini", &prog);
    let (id, session) = ("gem0", "ccs-gem0");
    let target = format!("={session}:");
    let file = path_str(&w.t.join("home/.gemini/settings.json"));
    w.ccs(&["hook-settings", "--agent", "gemini", "--write", &file]);
    let o = Command::new("tmux")
        .arg("-S")
        .arg(&w.s.sock)
        .args(["-f", "/dev/null", "new-session", "-d", "-s", session, "-c"])
        .arg(&w.proj)
        .arg("gemini")
        .env_clear()
        .envs(w.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let n = sid(&w.s, &target);
    w.wait(&target, "gemini ready", || {
        w.screen(&target).contains("Type your message")
    });
    w.wait(&target, "SessionStart's id", || {
        w.s.show(n, "@ccs_cid").is_some()
    });
    w.wait(&target, "the hook done", || {
        !w.screen(&target).contains("Executing Hook")
    });
    let cid0 = w.s.show(n, "@ccs_cid").unwrap();
    // The session file is there already, with no message in it.
    let files0 = gemini_session_files(&w);
    assert!(
        files0.iter().any(|(_, t)| t.contains(&cid0)),
        "no session file of {cid0} at launch: {files0:?}"
    );
    eprintln!("gemini unused: session files at launch {files0:?}");

    // Reaped before its first prompt.
    let tree1 = tree(pane_pid(&w.s, &target));
    w.wait(&target, "a sweep to reap the unused chat", || {
        w.ccs(&["--once"]);
        !w.s.has(session)
    });
    assert!(wait_until(15.0, || tree1.iter().all(|p| !alive(*p))));
    let tomb = w.s.tombstone(id).expect("a tombstone");
    assert_eq!(tomb["cid"], cid0.as_str(), "{tomb}");
    // The reap left the session file as it was.
    assert_eq!(gemini_session_files(&w), files0);

    // spawn brings it back: afresh, under the id gemini picks.
    let t1 = Instant::now();
    let o = w.ccs(&["spawn", id]);
    let start =
        w.s.ok(&["list-panes", "-t", &target, "-F", "#{pane_start_command}"]);
    eprintln!(
        "gemini unused: spawn took {:.1} s, started as: {}",
        t1.elapsed().as_secs_f64(),
        start.trim()
    );
    assert!(
        !start.contains("--resume") && !start.contains("--session-id"),
        "{start}\n{}",
        o.stderr
    );
    let n2 = sid(&w.s, &target);
    w.wait(&target, "the new chat's own id", || {
        w.s.show(n2, "@ccs_cid").is_some_and(|c| c != cid0)
    });
    w.wait(&target, "gemini ready again", || {
        let s = w.screen(&target);
        s.contains("Type your message") && !s.contains("Executing Hook")
    });
    let cid1 = w.s.show(n2, "@ccs_cid").unwrap();
    let msg = format!("hello again {}", &cid1[..8]);
    w.say(&target, &msg);
    w.wait(&target, "the reply, and the turn ended", || {
        w.screen(&target).contains(&format!("ECHO: {msg}")) && w.s.show(n2, "@ccs_idle").is_some()
    });
    assert_eq!(w.s.show(n2, "@ccs_cid").as_deref(), Some(cid1.as_str()));
    // The unused file: ccs-reap only read it. Gemini CLI's own session cleanup (`general.sessionRetention`, on by
    // default) deletes a file with no resumable message when another gemini starts in the
    // project: said, not asserted (it is the user's setting).
    let files1 = gemini_session_files(&w);
    eprintln!(
        "gemini unused: the unused file after the new chat started: {}",
        if files1.iter().any(|(p, _)| *p == files0[0].0) {
            "still there"
        } else {
            "deleted by gemini's own session cleanup"
        }
    );
    eprintln!(
        "gemini unused: {cid0} came back as {cid1}; total {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let tree2 = tree(pane_pid(&w.s, &target));
    let _ = w.s.tmux(&["kill-session", "-t", &target]);
    assert!(wait_until(15.0, || tree2.iter().all(|p| !alive(*p))));
}
