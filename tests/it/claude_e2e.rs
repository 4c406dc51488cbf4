//! End to end with the real Claude Code (pinned in `tests/e2e/package.json`) and a real MCP server
//! (`@modelcontextprotocol/server-memory`), offline, against `tests/e2e/fake_api.py`, on a private
//! tmux server: spawn a chat with `ccs-reap spawn`, talk to it through `tmux send-keys` between
//! `turn begin` / `turn end`, reap it with `ccs-reap reap`, check that claude and its MCP server are
//! gone and the tombstone holds the conversation id, respawn it with `ccs-reap spawn` (which must
//! add `--resume <cid>`), talk again, and check that the fake API's request for the second turn
//! carries the first exchange: the history survived the reap.
//!
//! The second test does the same for a plain `claude` that only Claude Code's own hooks
//! (`ccs-reap claude-settings`, `claude-hook`) tell ccs-reap about: no `--resume`, no
//! `--session-id`, no `@ccs_cid`, no `turn begin`/`turn end`; busy while the fake API holds the
//! answer (`fake_api.py --hold-file`), reaped by a sweep once idle, resumed by `spawn`.
//!
//! The third checks the agent seam's Claude Code rules (`ccs_reap::agents::CLAUDE`) against the
//! real claude: its status file, its transcript path, and the way back with `--session-id` or
//! `--resume`.
//!
//! Needs `npm ci --prefix tests/e2e --no-audit --no-fund` (node, python3 and tmux on PATH).
//! Without the packages it fails with that hint. Built with the cargo feature `e2e` only.
//! `CCS_E2E_TIMEOUT` (seconds per wait, default 60). What the harness needs, and why, is in
//! `tests/e2e/NOTES.md`.

use crate::common::wrapper::which;
use crate::common::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The session id the studio would use: the tmux session is `ccs-e2e`.
pub(crate) const ID: &str = "e2e";
pub(crate) const SESSION: &str = "ccs-e2e";
pub(crate) const TARGET: &str = "=ccs-e2e:";
/// Custom keys are approved in `.claude.json` by their last 20 characters; at least 20 long.
const KEY: &str = "sk-ant-api03-ccs-e2e-fake-key-000000000000000000000000000000";

pub(crate) fn timeout() -> f64 {
    std::env::var("CCS_E2E_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0)
}

pub(crate) fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("e2e")
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut b = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
        && b == *b"\x7fELF"
}

/// The native claude binary: the platform package's (does not depend on the wrapper's
/// postinstall), else the wrapper's `bin/claude.exe` once the postinstall replaced it.
fn claude_binary(nm: &Path) -> Option<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        a => a,
    };
    let scope = nm.join("@anthropic-ai");
    [
        scope
            .join(format!("claude-code-linux-{arch}"))
            .join("claude"),
        scope
            .join(format!("claude-code-linux-{arch}-musl"))
            .join("claude"),
        scope.join("claude-code").join("bin").join("claude.exe"),
    ]
    .into_iter()
    .find(|p| is_elf(p))
}

/// Whatever this test needs from outside, or why it cannot run.
pub(crate) struct Tools {
    claude: PathBuf,
    mcp_js: PathBuf,
    node: PathBuf,
    pub(crate) python: PathBuf,
}

fn tools() -> Result<Tools, String> {
    let nm = e2e_dir().join("node_modules");
    let hint = "install them with: npm ci --prefix tests/e2e --no-audit --no-fund \
                (or run the tests without `--features e2e`)";
    if !nm.is_dir() {
        return Err(format!("{} is missing; {hint}", nm.display()));
    }
    let claude = claude_binary(&nm)
        .ok_or_else(|| format!("no native claude binary under {}; {hint}", nm.display()))?;
    let mcp_js = nm.join("@modelcontextprotocol/server-memory/dist/index.js");
    if !mcp_js.is_file() {
        return Err(format!("{} is missing; {hint}", mcp_js.display()));
    }
    let node = which("node").ok_or("node is not on PATH (the MCP server runs on it)")?;
    let python = which("python3").ok_or("python3 is not on PATH (the fake API runs on it)")?;
    Ok(Tools {
        claude,
        mcp_js,
        node,
        python,
    })
}

pub(crate) fn uuid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .unwrap()
        .trim()
        .to_string()
}

/// The fake Anthropic API: killed on Drop.
pub(crate) struct FakeApi {
    pub(crate) child: Child,
    pub(crate) port: u16,
    pub(crate) log: PathBuf,
}

impl FakeApi {
    fn start(python: &Path, dir: &Path, hold: Option<&Path>) -> FakeApi {
        let log = dir.join("api.log");
        let mut cmd = Command::new(python);
        cmd.arg(e2e_dir().join("fake_api.py"))
            .arg(&log)
            .args(["--port", "0"]);
        if let Some(h) = hold {
            cmd.arg("--hold-file").arg(h);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("api.err")).unwrap())
            .spawn()
            .expect("start fake_api.py");
        // Its first stdout line is the port; read it on a thread so a hang hits the deadline.
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Keep the pipe open (and drained) for the life of the process.
            let mut rest = String::new();
            while r.read_line(&mut rest).map(|n| n > 0).unwrap_or(false) {
                rest.clear();
            }
        });
        let mut api = FakeApi {
            child,
            port: 0,
            log,
        };
        let line = rx
            .recv_timeout(Duration::from_secs_f64(timeout()))
            .unwrap_or_default();
        api.port = line.trim().parse().unwrap_or_else(|_| {
            panic!(
                "fake_api.py did not print its port (got {line:?}); stderr: {}",
                std::fs::read_to_string(dir.join("api.err")).unwrap_or_default()
            )
        });
        api
    }

    pub(crate) fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Before the fixture kills the tmux server (and deletes the temp dir, HOME included): end every
/// chat session the way tmux does (SIGHUP via kill-session) while the keeper keeps the server up
/// to reap them, wait for their whole process trees, SIGKILL what is left.
pub(crate) struct Cleanup<'a>(pub(crate) &'a Server);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let s = self.0;
        let o = s.tmux(&["list-panes", "-a", "-F", "#{session_name} #{pane_pid}"]);
        let mut pids = Vec::new();
        let mut names = Vec::new();
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            let Some((name, pid)) = l.split_once(' ') else {
                continue;
            };
            if name == "keeper" {
                continue;
            }
            if let Ok(pid) = pid.parse::<i32>() {
                pids.push(pid);
                pids.extend(descendants(pid));
            }
            names.push(name.to_string());
        }
        for n in &names {
            let _ = s.tmux(&["kill-session", "-t", &format!("={n}")]);
        }
        if !wait_until(15.0, || pids.iter().all(|p| !alive(*p))) {
            for p in pids.iter().filter(|p| alive(**p)) {
                let _ = signal(*p, Signal::KILL);
            }
        }
    }
}

/// Every living (non-zombie) descendant of `root`.
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let procs: Vec<(i32, i32)> = all_processes()
        .into_iter()
        .filter_map(|pid| {
            let st = stat(pid)?;
            (st.state != 'Z' && st.state != 'X').then_some((pid, st.ppid))
        })
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (pid, ppid) in &procs {
            if *ppid == p && !out.contains(pid) {
                out.push(*pid);
                frontier.push(*pid);
            }
        }
    }
    out
}

/// The MCP server under claude's pid.
pub(crate) fn mcp_child(claude: i32) -> Option<i32> {
    descendants(claude)
        .into_iter()
        .find(|p| cmdline(*p).contains("server-memory/dist/index.js"))
}

/// (Rss, Pss) of one process in kB, from smaps_rollup.
fn mem_kb(pid: i32) -> (u64, u64) {
    let t = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        t.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("Rss:"), field("Pss:"))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// The pane's text, scrollback included, NBSP (after the prompt glyph) turned into a space and
/// trailing blanks cut.
pub(crate) fn screen(s: &Server) -> String {
    let o = s.tmux(&["capture-pane", "-p", "-J", "-S", "-300", "-t", TARGET]);
    String::from_utf8_lossy(&o.stdout)
        .replace('\u{a0}', " ")
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Ready for input: the empty input box, a line that is just the prompt glyph.
pub(crate) fn prompt_empty(s: &Server) -> bool {
    screen(s).lines().any(|l| l == "\u{276f}")
}

pub(crate) fn prompt_has(s: &Server, text: &str) -> bool {
    let want = format!("\u{276f} {text}");
    screen(s).lines().any(|l| l == want)
}

fn show(s: &Server, fmt: &str) -> String {
    s.ok(&["display-message", "-p", "-t", TARGET, fmt])
        .trim()
        .to_string()
}

pub(crate) fn pane(s: &Server, fmt: &str) -> String {
    s.ok(&["list-panes", "-t", TARGET, "-F", fmt])
        .trim()
        .to_string()
}

/// Poll `f` every 100 ms until it holds; on timeout fail with what the pane and the API saw.
pub(crate) fn wait_for(s: &Server, api: &FakeApi, what: &str, mut f: impl FnMut() -> bool) -> f64 {
    let t0 = Instant::now();
    let secs = timeout();
    let deadline = t0 + Duration::from_secs_f64(secs);
    loop {
        if f() {
            return t0.elapsed().as_secs_f64();
        }
        if Instant::now() >= deadline {
            let scr = screen(s);
            let scr: Vec<_> = scr.lines().filter(|l| !l.trim().is_empty()).collect();
            let reqs: Vec<String> = api
                .requests()
                .iter()
                .map(|r| format!("{} {}", r["method"], r["path"]))
                .collect();
            panic!(
                "timed out after {secs}s waiting for: {what}\n---- screen of {SESSION} ----\n{}\n---- API requests: {reqs:?}\n---- sessions: {:?}",
                scr.join("\n"),
                s.names()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many claude launches have logged a finished MCP handshake (one log file per launch).
fn mcp_connected(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read_to_string(e.path())
                        .map(|t| t.contains("Connection established"))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// The text blocks of one message.
pub(crate) fn texts(msg: &serde_json::Value) -> Vec<String> {
    match &msg["content"] {
        serde_json::Value::String(t) => vec![t.trim().to_string()],
        serde_json::Value::Array(a) => a
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .map(|t| t.trim().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// What the user typed last in a Messages request (the `<system-reminder>` blocks skipped).
fn last_user_text(body: &serde_json::Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| {
            texts(m)
                .into_iter()
                .rfind(|t| !t.starts_with("<system-reminder>"))
        })
        .unwrap_or_default()
}

/// The world of one end-to-end run: a private tmux server with a keeper session, the fake API,
/// a HOME that skips every blocking screen, the MCP config, and the clean environment that
/// claude and ccs-reap run with.
pub(crate) struct World {
    pub(crate) s: Server,
    pub(crate) api: FakeApi,
    pub(crate) home: PathBuf,
    pub(crate) proj: PathBuf,
    /// `<tmp>/bin/claude`, a symlink to the pinned binary.
    pub(crate) claude: PathBuf,
    pub(crate) mcp_cfg: PathBuf,
    pub(crate) mcp_logs: PathBuf,
    /// The project dir as claude names its directories (every non-alphanumeric as `-`).
    pub(crate) mangled: String,
    pub(crate) env: Vec<(&'static str, String)>,
    /// While this file exists, the fake API holds its answers (a turn in flight).
    pub(crate) hold: PathBuf,
}

impl World {
    pub(crate) fn new(tools: &Tools) -> World {
        let s = Server::new();
        // claude keys its per-project state by the real path of its cwd.
        let t = std::fs::canonicalize(s.dir.path()).unwrap();
        let home = t.join("home");
        let proj = t.join("proj");
        let bin = t.join("bin");
        for d in [&home, &proj, &bin, &t.join("tmp")] {
            std::fs::create_dir_all(d).unwrap();
        }
        // A symlink, so that the panes run (and `ps` shows) plain `claude ...`.
        let claude = bin.join("claude");
        std::os::unix::fs::symlink(&tools.claude, &claude).unwrap();

        // 1. The fake API.
        let hold = t.join("hold");
        let api = FakeApi::start(&tools.python, &t, Some(&hold));
        eprintln!("fake API on 127.0.0.1:{}", api.port);

        // 2. HOME with the keys that skip every blocking screen, and the MCP config.
        let claude_json = serde_json::json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": { "approved": [&KEY[KEY.len() - 20..]], "rejected": [] },
            "projects": { path_str(&proj): { "hasTrustDialogAccepted": true } },
        });
        std::fs::write(home.join(".claude.json"), claude_json.to_string()).unwrap();
        let mcp_cfg = t.join("mcp.json");
        let mcp = serde_json::json!({
            "mcpServers": { "memory": {
                "command": path_str(&tools.node),
                "args": [path_str(&tools.mcp_js)],
                "env": { "MEMORY_FILE_PATH": path_str(&t.join("memory.jsonl")) },
            }}
        });
        std::fs::write(&mcp_cfg, mcp.to_string()).unwrap();
        let mangled: String = path_str(&proj)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let mcp_logs = home
            .join(".cache/claude-cli-nodejs")
            .join(&mangled)
            .join("mcp-logs-memory");

        // 3. The tmux server, started from a clean environment with only what claude needs.
        let mut path = vec![bin.clone(), tools.node.parent().unwrap().to_path_buf()];
        if let Some(tmux) = which("tmux") {
            path.push(tmux.parent().unwrap().to_path_buf());
        }
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
            ("LC_ALL", "C.UTF-8".into()),
            ("TERM", "xterm-256color".into()),
            ("SHELL", "/bin/sh".into()),
            ("ANTHROPIC_API_KEY", KEY.into()),
            (
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", api.port),
            ),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
        ];
        // A keeper session keeps the server, which reaps the killed panes, alive.
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
                "-x",
                "80",
                "-y",
                "24",
            ])
            .arg("sleep 100000")
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
        // Sessions that spawn creates (detached, no -x/-y) get a roomy window.
        s.ok(&["set-option", "-g", "default-size", "200x50"]);
        World {
            s,
            api,
            home,
            proj,
            claude,
            mcp_cfg,
            mcp_logs,
            mangled,
            env,
            hold,
        }
    }
}

/// ccs-reap on `s` with the world's clean environment (tmux gives a new session the PATH of the
/// client that runs new-session, and that client is ccs-reap's), and `extra` on top.
pub(crate) fn ccs_with(
    s: &Server,
    env: &[(&str, String)],
    args: &[&str],
    extra: &[(&str, &str)],
) -> Out {
    Out::from(ccs_command(s, env, args, extra).output().unwrap())
}

/// The command [`ccs_with`] runs, for a caller that runs it in the background.
pub(crate) fn ccs_command(
    s: &Server,
    env: &[(&str, String)],
    args: &[&str],
    extra: &[(&str, &str)],
) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("CCS_TMUX_SOCKET_PATH", &s.sock)
        .env("CCS_REAP_STATE_DIR", s.state_dir())
        .env("CCS_LOG", "debug")
        .env("CCS_ENGINE_IDLE_KILL_MS", LIMIT)
        .env("CCS_REAP_GRACE_MS", "5000")
        .envs(extra.iter().copied())
        .stdin(Stdio::null());
    c
}

/// [`ccs_with`], which must exit 0.
pub(crate) fn ok_with(
    s: &Server,
    env: &[(&str, String)],
    args: &[&str],
    extra: &[(&str, &str)],
) -> Out {
    let o = ccs_with(s, env, args, extra);
    assert_eq!(o.code, 0, "ccs-reap {args:?}: {}{}", o.stdout, o.stderr);
    o
}

/// `reap <id>` once claude is done: right after its `Stop` hook, Claude Code may still be busy by
/// its own status file (a title, a summary computed in the background), and a reap refuses a busy
/// chat (docs/rules.md, rule 2); a status file written without its `status` yet (as Claude Code
/// writes it at first) cannot be trusted, and keeps the chat too. Tried again until it goes
/// through, within 60 s.
pub(crate) fn reap_when_idle(s: &Server, env: &[(&str, String)], id: &str) -> Out {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = ccs_with(s, env, &["reap", id], &[]);
        let busy = o.code == 1
            && o.stderr.contains("it is busy")
            && o.stderr.contains("the agent's status file");
        if !busy || Instant::now() >= deadline {
            assert_eq!(o.code, 0, "ccs-reap reap {id}: {}{}", o.stdout, o.stderr);
            return o;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The tools; a test built with the feature `e2e` fails without them, with the hint.
pub(crate) fn tools_or_fail() -> Tools {
    tools().unwrap_or_else(|why| panic!("end-to-end test cannot run: {why}"))
}

#[test]
fn real_claude_code_is_reaped_with_its_mcp_server_and_resumed_with_its_history() {
    let tools = tools_or_fail();
    let t_all = Instant::now();
    let World {
        s,
        api,
        home,
        proj,
        claude,
        mcp_cfg,
        mcp_logs,
        mangled,
        env,
        ..
    } = World::new(&tools);
    let _cleanup = Cleanup(&s);
    let ccs = |args: &[&str]| ccs_with(&s, &env, args, &[]);
    let ok = |args: &[&str]| ok_with(&s, &env, args, &[]);

    let cid = uuid();
    let tag = &uuid()[..8];
    let msg1 = format!("remember the word PINEAPPLE-{tag}");
    let msg2 = format!("which word did I ask you to remember {tag}");
    let echo1 = format!("ECHO: {msg1}");
    let echo2 = format!("ECHO: {msg2}");
    let cfg = path_str(&mcp_cfg);
    let claude_s = path_str(&claude);

    // A turn the way a studio drives one: begin, type, Enter, the reply, end.
    let turn = |msg: &str, echo: &str| -> f64 {
        let t0 = Instant::now();
        ok(&["turn", "begin", ID]);
        s.ok(&["send-keys", "-t", TARGET, "-l", "--", msg]);
        wait_for(&s, &api, &format!("{msg:?} typed in the input box"), || {
            prompt_has(&s, msg)
        });
        s.ok(&["send-keys", "-t", TARGET, "Enter"]);
        wait_for(&s, &api, &format!("the reply {echo:?} on screen"), || {
            screen(&s).contains(echo)
        });
        ok(&["turn", "end", ID]);
        t0.elapsed().as_secs_f64()
    };

    // 4. A brand-new conversation: the command names it with --session-id (a --resume of an id
    // claude never saw fails), and spawn leaves it alone and records it.
    let t0 = Instant::now();
    ok(&[
        "spawn",
        ID,
        "--cwd",
        &path_str(&proj),
        "--",
        &claude_s,
        "--session-id",
        &cid,
        "--mcp-config",
        &cfg,
    ]);
    assert!(s.has(SESSION), "{:?}", s.names());
    let start1 = pane(&s, "#{pane_start_command}");
    assert!(
        start1.contains(&format!("--session-id {cid}")) && !start1.contains("--resume"),
        "{start1}"
    );
    let n: u32 = show(&s, "#{session_id}")
        .trim_start_matches('$')
        .parse()
        .unwrap();
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(cid.as_str()));

    // 5. Ready for input, and the MCP handshake done (a message sent before it goes out
    // without the MCP tools).
    let ready1 = wait_for(&s, &api, "claude ready (empty prompt)", || prompt_empty(&s));
    let claude1: i32 = pane(&s, "#{pane_pid}").parse().unwrap();
    wait_for(&s, &api, "the MCP server under claude", || {
        mcp_child(claude1).is_some()
    });
    wait_for(&s, &api, "the MCP handshake in claude's MCP log", || {
        mcp_connected(&mcp_logs) >= 1
    });
    let mcp_up1 = t0.elapsed().as_secs_f64();
    let reply1 = turn(&msg1, &echo1);
    let transcript = home
        .join(".claude/projects")
        .join(&mangled)
        .join(format!("{cid}.jsonl"));
    wait_for(&s, &api, "the reply in the transcript", || {
        std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains(&echo1))
    });

    // 6. The MCP server is in the session's process tree, under claude.
    assert!(
        cmdline(claude1).contains(&format!("--session-id {cid}")),
        "pane pid {claude1}: {}",
        cmdline(claude1)
    );
    let mcp1 = mcp_child(claude1).expect("the MCP server under claude");
    let tree: Vec<i32> = std::iter::once(claude1)
        .chain(descendants(claude1))
        .collect();
    let (c_rss, c_pss) = mem_kb(claude1);
    let (m_rss, m_pss) = mem_kb(mcp1);
    eprintln!("session tree before the reap: {tree:?}");
    eprintln!(
        "  claude pid {claude1}: rss {:.1} MiB, pss {:.1} MiB",
        c_rss as f64 / 1024.0,
        c_pss as f64 / 1024.0
    );
    eprintln!(
        "  mcp    pid {mcp1}: rss {:.1} MiB, pss {:.1} MiB ({})",
        m_rss as f64 / 1024.0,
        m_pss as f64 / 1024.0,
        cmdline(mcp1)
    );

    // 7. Reap it.
    let t_reap = Instant::now();
    let o = reap_when_idle(&s, &env, ID);
    let reap_s = t_reap.elapsed().as_secs_f64();
    eprintln!("ccs-reap reap: {}", o.stdout.trim());
    assert!(
        !s.has(SESSION),
        "the session survived the reap: {:?}",
        s.names()
    );
    assert!(!alive(claude1), "claude {claude1} survived the reap");
    assert!(!alive(mcp1), "the MCP server {mcp1} survived the reap");
    let tomb = s.tombstone(ID).expect("a tombstone");
    assert_eq!(tomb["cid"], cid.as_str(), "{tomb}");
    assert_eq!(tomb["cwd"], path_str(&proj).as_str(), "{tomb}");
    let audit = s.audit();
    let line = audit.last().expect("an audit line");
    assert_eq!(line["outcome"], "reaped", "{line}");
    assert_eq!(line["reason"], "manual", "{line}");
    assert_eq!(line["cid"], cid.as_str(), "{line}");
    let pids: Vec<i64> = line["pids"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_i64())
        .collect();
    assert!(
        pids.contains(&(claude1 as i64)) && pids.contains(&(mcp1 as i64)),
        "{line}"
    );
    let rss = line["rss_bytes"].as_u64().unwrap_or(0);
    let pss = line["pss_bytes"].as_u64();
    eprintln!(
        "reap freed: rss {:.1} MiB, pss {} over {} processes ({} TERM, {} KILL), took {} ms",
        mb(rss),
        pss.map_or("unknown".into(), |p| format!("{:.1} MiB", mb(p))),
        pids.len(),
        line["term"],
        line["kill"],
        line["took_ms"]
    );
    assert!(
        rss > 100 * 1024 * 1024,
        "rss_bytes {rss} is not above 100 MiB: {line}"
    );

    // 8. The studio's next message: begin says "respawn it", spawn brings the chat back with
    // --resume <cid> from the tombstone, in the tombstone's cwd.
    let o = ccs(&["turn", "begin", ID]);
    assert_eq!(o.code, 4, "turn begin after the reap: {}", o.stderr);
    let t0 = Instant::now();
    ok(&["spawn", ID, "--", &claude_s, "--mcp-config", &cfg]);
    assert!(s.has(SESSION), "{:?}", s.names());
    let start2 = pane(&s, "#{pane_start_command}");
    assert!(start2.contains(&format!("--resume {cid}")), "{start2}");
    let n: u32 = show(&s, "#{session_id}")
        .trim_start_matches('$')
        .parse()
        .unwrap();
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(cid.as_str()));
    assert!(
        s.tombstone(ID).is_some(),
        "the tombstone went before a turn"
    );
    let ready2 = wait_for(&s, &api, "resumed claude ready (empty prompt)", || {
        prompt_empty(&s)
    });
    assert_eq!(pane(&s, "#{pane_current_path}"), path_str(&proj));
    wait_for(&s, &api, "turn 1 drawn on the resumed screen", || {
        screen(&s).contains(&echo1)
    });
    let claude2: i32 = pane(&s, "#{pane_pid}").parse().unwrap();
    assert!(
        cmdline(claude2).contains(&format!("--resume {cid}")),
        "{}",
        cmdline(claude2)
    );
    wait_for(&s, &api, "the MCP server under the resumed claude", || {
        mcp_child(claude2).is_some()
    });
    wait_for(&s, &api, "the resumed claude's MCP handshake", || {
        mcp_connected(&mcp_logs) >= 2
    });
    let mcp_up2 = t0.elapsed().as_secs_f64();
    let reply2 = turn(&msg2, &echo2);
    assert!(
        s.tombstone(ID).is_none(),
        "the tombstone was not used up by the turn"
    );

    // 9. The request of turn 2 carries turn 1.
    let reqs = api.requests();
    let messages: Vec<&serde_json::Value> = reqs
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.split('?').next() == Some("/v1/messages"))
                && r["body"]["messages"].is_array()
        })
        .collect();
    let of_turn = |m: &str| {
        messages
            .iter()
            .rev()
            .find(|r| last_user_text(&r["body"]) == m)
            .copied()
    };
    let r1 = of_turn(&msg1).expect("no API request for turn 1");
    let r2 = of_turn(&msg2).expect("no API request for turn 2");
    let history = r2["body"]["messages"].as_array().unwrap();
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "user" && texts(m).contains(&msg1)),
        "the turn-2 request lacks turn 1's user text: {history:?}"
    );
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "assistant" && texts(m).contains(&echo1)),
        "the turn-2 request lacks turn 1's reply: {history:?}"
    );
    assert_eq!(
        r2["headers"]["x-claude-code-session-id"],
        cid.as_str(),
        "turn-2 request headers"
    );
    for (name, r) in [("turn 1", r1), ("turn 2", r2)] {
        assert!(
            r["body"].to_string().contains("mcp__memory__"),
            "the {name} request does not name the MCP memory tools"
        );
    }
    eprintln!(
        "timings (s): ready1={ready1:.2} mcp1={mcp_up1:.2} turn1={reply1:.2} reap={reap_s:.2} \
         ready2={ready2:.2} mcp2={mcp_up2:.2} turn2={reply2:.2} total={:.2}; {} API requests",
        t_all.elapsed().as_secs_f64(),
        reqs.len()
    );
}

/// A session's `$N` number.
pub(crate) fn sid_of(s: &Server) -> u32 {
    show(s, "#{session_id}")
        .trim_start_matches('$')
        .parse()
        .unwrap()
}

/// The requests to `/v1/messages` whose last user text is `m`.
pub(crate) fn requests_for(api: &FakeApi, m: &str) -> Vec<serde_json::Value> {
    api.requests()
        .into_iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.split('?').next() == Some("/v1/messages"))
                && last_user_text(&r["body"]) == m
        })
        .collect()
}

/// Issue 22: a plain `claude` (no `--resume`, no `--session-id`, no `@ccs_cid`, no studio
/// hooks), started with the settings `claude-settings` prints, tells ccs-reap its conversation
/// id and its turns through Claude Code's own hooks: busy while the fake API holds the answer
/// (a sweep keeps it), idle once answered; a prompt typed under a reap's mark is blocked; then
/// reaped by a sweep and resumed by `spawn` with `--resume <that id>`, the history carried into
/// the next request.
#[test]
fn plain_claude_with_its_own_hooks_is_reaped_when_idle_and_resumed() {
    let tools = tools_or_fail();
    let t_all = Instant::now();
    let World {
        s,
        api,
        home,
        proj,
        claude,
        mangled,
        env,
        hold,
        ..
    } = World::new(&tools);
    let _cleanup = Cleanup(&s);
    // Reaped once idle for 2 s.
    let limit = [
        ("CCS_ENGINE_IDLE_KILL_MS", "2s"),
        ("CCS_REAP_GRACE_MS", "5s"),
    ];
    let ok = |args: &[&str]| ok_with(&s, &env, args, &limit);
    let tag = &uuid()[..8];
    let msg1 = format!("remember the word MANGO-{tag}");
    let msg2 = format!("which fruit did I name {tag}");
    let (echo1, echo2) = (format!("ECHO: {msg1}"), format!("ECHO: {msg2}"));
    let claude_s = path_str(&claude);

    // 1. The settings, as printed, in a file for `claude --settings`.
    let settings = s.path("claude-settings.json");
    let printed = ok(&["claude-settings"]).stdout;
    std::fs::write(&settings, &printed).unwrap();
    let settings_s = path_str(&settings);

    // 2. A plain claude in ccs-e2e.
    ok(&[
        "spawn",
        ID,
        "--cwd",
        &path_str(&proj),
        "--",
        &claude_s,
        "--settings",
        &settings_s,
    ]);
    let start1 = pane(&s, "#{pane_start_command}");
    assert!(
        !start1.contains("--resume") && !start1.contains("--session-id"),
        "{start1}"
    );
    let n = sid_of(&s);
    wait_for(&s, &api, "claude ready (empty prompt)", || prompt_empty(&s));
    let claude1: i32 = pane(&s, "#{pane_pid}").parse().unwrap();

    // 3. One prompt, typed with send-keys, its answer held: a turn in flight.
    std::fs::write(&hold, "").unwrap();
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg1]);
    wait_for(&s, &api, "the prompt in the input box", || {
        prompt_has(&s, &msg1)
    });
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the request of turn 1 at the fake API", || {
        !requests_for(&api, &msg1).is_empty()
    });
    assert!(s.show(n, "@ccs_turn").is_some(), "no turn marked in flight");
    let st = by_name(&s_status(&s, &env, &limit));
    assert_eq!(st[SESSION]["state"], "busy", "{}", st[SESSION]);
    let rep = ok(&["--once", "--json"]).json();
    assert!(
        rep["reaps"].as_array().is_none_or(|r| r.is_empty()),
        "{rep}"
    );
    assert_eq!(by_name(&rep)[SESSION]["state"], "busy", "{rep}");
    assert!(
        s.has(SESSION) && alive(claude1),
        "a sweep took the busy chat"
    );

    // 4. The answer: the turn ends, the idle clock runs; the cid is the transcript's.
    std::fs::remove_file(&hold).unwrap();
    wait_for(&s, &api, "the reply on screen", || {
        screen(&s).contains(&echo1)
    });
    wait_for(&s, &api, "the turn ended by claude's Stop hook", || {
        s.show(n, "@ccs_turn").is_none() && s.show(n, "@ccs_idle").is_some()
    });
    let transcripts: Vec<PathBuf> = std::fs::read_dir(home.join(".claude/projects").join(&mangled))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(transcripts.len(), 1, "{transcripts:?}");
    let cid = transcripts[0]
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(s.show(n, "@ccs_cid").as_deref(), Some(cid.as_str()));
    let r1 = requests_for(&api, &msg1);
    assert_eq!(r1[0]["headers"]["x-claude-code-session-id"], cid.as_str());
    let st = by_name(&s_status(&s, &env, &limit));
    assert_eq!(st[SESSION]["state"], "idle", "{}", st[SESSION]);

    // 5a. A prompt typed while a reap holds the chat but has not passed its fence (a fresh mark
    // and its token, as a reap's test-and-set leaves them) takes the chat back: the mark is
    // cleared (that reap aborts at its fence) and the prompt goes to the API as any other.
    let won = format!("typed before the fence {tag}");
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    s.set_token(n, "f2_1_2_3_4_5_before");
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &won]);
    wait_for(&s, &api, "the prompt in the input box", || {
        prompt_has(&s, &won)
    });
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the prompt taken back to reach the API", || {
        !requests_for(&api, &won).is_empty()
    });
    assert_eq!(s.show(n, "@ccs_reaping"), None, "the mark was not cleared");
    wait_for(&s, &api, "its turn ended by Stop", || {
        s.show(n, "@ccs_turn").is_none()
    });

    // 5b. A prompt typed while a reap past its fence holds the chat (its mark, its token and the
    // fence's own mark of that token) is blocked by the hook, with its line on claude's screen:
    // nothing reaches the API, no turn is marked, the idle clock is left alone, and the audit log
    // says `prompt-refused`.
    let blocked = format!("typed into a dying claude {tag}");
    let idle_before = s.show(n, "@ccs_idle");
    s.set(n, "@ccs_reaping", &now_ms().to_string());
    s.set_token(n, "f2_1_2_3_4_5_fenced");
    s.ok(&[
        "set-environment",
        "-t",
        &format!("${n}"),
        "CCS_REAP_FENCED",
        "f2_1_2_3_4_5_fenced",
    ]);
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &blocked]);
    wait_for(&s, &api, "the blocked prompt in the input box", || {
        prompt_has(&s, &blocked)
    });
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "claude showing the hook's block", || {
        let scr = screen(&s);
        scr.contains("blocked by hook") && scr.contains("is being reaped")
    });
    assert!(
        requests_for(&api, &blocked).is_empty(),
        "a blocked prompt reached the API"
    );
    assert_eq!(s.show(n, "@ccs_turn"), None);
    assert_eq!(s.show(n, "@ccs_idle"), idle_before);
    assert!(
        s.audit_of(SESSION)
            .iter()
            .any(|l| l["outcome"] == "prompt-refused"),
        "{:?}",
        s.audit_of(SESSION)
    );
    s.unset(n, "@ccs_reaping");

    // 6. Idle past the limit: a sweep reaps it, the tombstone keeps the cid.
    let t_reap = Instant::now();
    wait_for(&s, &api, "a sweep to reap the idle chat", || {
        ok(&["--once"]);
        !s.has(SESSION)
    });
    assert!(t_reap.elapsed() < Duration::from_secs(30));
    assert!(
        wait_until(10.0, || !alive(claude1)),
        "claude {claude1} survived the reap"
    );
    let line = s.audit().pop().expect("an audit line");
    assert_eq!(line["outcome"], "reaped", "{line}");
    assert_eq!(line["reason"], "idle", "{line}");
    assert_eq!(line["cid"], cid.as_str(), "{line}");
    assert_eq!(s.tombstone(ID).expect("a tombstone")["cid"], cid.as_str());

    // 7. spawn resumes it; the second prompt's request carries the first exchange.
    ok(&["spawn", ID, "--", &claude_s, "--settings", &settings_s]);
    let start2 = pane(&s, "#{pane_start_command}");
    assert!(start2.contains(&format!("--resume {cid}")), "{start2}");
    let n2 = sid_of(&s);
    wait_for(&s, &api, "resumed claude ready", || prompt_empty(&s));
    wait_for(&s, &api, "turn 1 on the resumed screen", || {
        screen(&s).contains(&echo1)
    });
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg2]);
    wait_for(&s, &api, "the prompt in the input box", || {
        prompt_has(&s, &msg2)
    });
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the reply of turn 2", || {
        screen(&s).contains(&echo2)
    });
    wait_for(&s, &api, "turn 2 ended by claude's Stop hook", || {
        s.show(n2, "@ccs_turn").is_none() && s.show(n2, "@ccs_idle").is_some()
    });
    assert_eq!(s.show(n2, "@ccs_cid").as_deref(), Some(cid.as_str()));
    assert!(s.tombstone(ID).is_none(), "the tombstone outlived a turn");
    let r2 = requests_for(&api, &msg2);
    let r2 = r2.last().expect("no API request for turn 2");
    let history = r2["body"]["messages"].as_array().unwrap();
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "user" && texts(m).contains(&msg1)),
        "the turn-2 request lacks turn 1's user text: {history:?}"
    );
    assert!(
        history
            .iter()
            .any(|m| m["role"] == "assistant" && texts(m).contains(&echo1)),
        "the turn-2 request lacks turn 1's reply: {history:?}"
    );
    assert_eq!(r2["headers"]["x-claude-code-session-id"], cid.as_str());
    eprintln!(
        "plain claude with its own hooks: total {:.2} s",
        t_all.elapsed().as_secs_f64()
    );
}

/// `status --json` with the world's environment.
fn s_status(s: &Server, env: &[(&str, String)], extra: &[(&str, &str)]) -> serde_json::Value {
    ok_with(s, env, &["status", "--json"], extra).json()
}

/// The agent seam's Claude Code rules (`src/agents/claude.rs`) against the real claude: the
/// status file names the pane's process and its conversation and turns `busy` and back to
/// `idle` on Escape; an untouched chat has no transcript, so its way back is `--session-id` of
/// the same id, which claude takes; the transcript then lies where `transcript_path` says, for a
/// cwd with dots, underscores, spaces and non-ASCII in it; and the next way back is `--resume`,
/// with the history on screen.
#[test]
fn the_agent_seam_matches_the_real_claude() {
    use ccs_reap::agents::{AgentState, StartMode, CLAUDE};
    let tools = tools_or_fail();
    let World {
        s,
        api,
        home,
        proj,
        claude,
        env,
        hold,
        ..
    } = World::new(&tools);
    let _cleanup = Cleanup(&s);
    let ok = |args: &[&str]| ok_with(&s, &env, args, &[]);
    let agent_env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    // A cwd with every kind of character the slug folds, trusted like the world's own.
    let odd = proj.parent().unwrap().join("odd.dir_x y é🙂");
    std::fs::create_dir(&odd).unwrap();
    let cj = home.join(".claude.json");
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cj).unwrap()).unwrap();
    j["projects"][path_str(&odd)] = serde_json::json!({ "hasTrustDialogAccepted": true });
    std::fs::write(&cj, j.to_string()).unwrap();
    let odd_s = path_str(&odd);
    let claude_s = path_str(&claude);
    let status_of = |pid: i32| {
        let p = (CLAUDE.status_path.unwrap())(&agent_env, pid as u32).unwrap();
        let text = std::fs::read_to_string(p).ok()?;
        (CLAUDE.parse_status.unwrap())(&text).ok()
    };
    // The claude in the pane: the pane's process, or under it (a one-word command runs through
    // `sh -c`, and the status file names claude, not the shell).
    let claude_pid = || -> i32 {
        let pane_pid: i32 = pane(&s, "#{pane_pid}").parse().unwrap();
        std::iter::once(pane_pid)
            .chain(descendants(pane_pid))
            .find(|p| {
                cmdline(*p)
                    .split_whitespace()
                    .next()
                    .is_some_and(CLAUDE.is_program_word)
            })
            .unwrap_or(pane_pid)
    };
    let kill = |pid: i32| {
        s.ok(&["kill-session", "-t", &format!("={SESSION}")]);
        wait_for(&s, &api, "claude gone after kill-session", || !alive(pid));
    };

    // 1. A plain claude: its status file is the pane process's, idle, with its conversation.
    ok(&["spawn", ID, "--cwd", &odd_s, "--", &claude_s]);
    wait_for(&s, &api, "claude ready (empty prompt)", || prompt_empty(&s));
    let pid = claude_pid();
    if !wait_until(timeout(), || status_of(pid).is_some()) {
        let dir = home.join(".claude/sessions");
        let files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let t = std::fs::read_to_string(e.path()).unwrap_or_default();
                let why = (CLAUDE.parse_status.unwrap())(&t).map(|_| ()).err();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    format!("{why:?}: {t}"),
                )
            })
            .collect();
        panic!(
            "no status file of pane pid {pid} ({}) parses: {files:?}",
            cmdline(pid)
        );
    }
    let st = status_of(pid).unwrap();
    let start = stat(pid).unwrap().start;
    assert!(
        st.is_of(pid as u32, start),
        "{st:?} vs pid {pid} start {start}"
    );
    assert_eq!(st.state, AgentState::Idle, "{st:?}");
    assert_eq!(st.cwd, odd_s);
    let cid = st.session_id.clone();

    // 2. Never a turn: no transcript, so the way back is a fresh start under the same id.
    kill(pid);
    let transcript = (CLAUDE.transcript_path)(&agent_env, &odd, &cid).unwrap();
    assert!(!transcript.exists(), "{}", transcript.display());
    let plan =
        (CLAUDE.resume_argv)(std::slice::from_ref(&claude_s), &cid, transcript.exists()).unwrap();
    assert_eq!(plan.mode, StartMode::Fresh);
    assert_eq!(
        plan.argv,
        [claude_s.clone(), "--session-id".into(), cid.clone()]
    );
    let mut args = vec!["spawn", ID, "--cwd", &odd_s, "--"];
    args.extend(plan.argv.iter().map(String::as_str));
    ok(&args);
    wait_for(&s, &api, "the fresh claude ready", || prompt_empty(&s));
    let pid = claude_pid();
    wait_for(&s, &api, "its status file with the same id", || {
        status_of(pid).is_some_and(|st| st.session_id == cid)
    });

    // 3. A held reply is `busy`; Escape makes it `idle` again, with no hook at all.
    std::fs::write(&hold, "").unwrap();
    let msg = format!("held {}", &uuid()[..8]);
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg]);
    wait_for(&s, &api, "the text typed", || prompt_has(&s, &msg));
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "status busy", || {
        status_of(pid).is_some_and(|st| st.state == AgentState::Busy)
    });
    let t_esc = Instant::now();
    s.ok(&["send-keys", "-t", TARGET, "Escape"]);
    wait_for(&s, &api, "status idle after Escape", || {
        status_of(pid).is_some_and(|st| st.state == AgentState::Idle)
    });
    eprintln!("idle {:.2}s after Escape", t_esc.elapsed().as_secs_f64());
    std::fs::remove_file(&hold).unwrap();
    // Claude puts the interrupted prompt back into the input box: clear it.
    wait_for(&s, &api, "the interrupted prompt back in the box", || {
        prompt_has(&s, &msg)
    });
    let n = (msg.chars().count() + 2).to_string();
    s.ok(&["send-keys", "-t", TARGET, "-N", &n, "BSpace"]);
    wait_for(&s, &api, "the input box empty", || prompt_empty(&s));

    // 4. A turn: its transcript is where the seam says, under the odd cwd's slug.
    let msg = format!("remember {}", &uuid()[..8]);
    let echo = format!("ECHO: {msg}");
    s.ok(&["send-keys", "-t", TARGET, "-l", "--", &msg]);
    wait_for(&s, &api, "the text typed", || prompt_has(&s, &msg));
    s.ok(&["send-keys", "-t", TARGET, "Enter"]);
    wait_for(&s, &api, "the reply on screen", || {
        screen(&s).contains(&echo)
    });
    wait_for(
        &s,
        &api,
        "the reply in the transcript the seam names",
        || std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains(&echo)),
    );
    let projects: Vec<String> = std::fs::read_dir(home.join(".claude/projects"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // ` `, `é` one `-` each, `🙂` two (UTF-16 units).
    assert!(
        projects.iter().any(|p| p.ends_with("-odd-dir-x-y----")),
        "{projects:?}"
    );

    // 5. Now the way back is --resume, the command's own --session-id replaced.
    kill(pid);
    let plan = (CLAUDE.resume_argv)(&plan.argv, &cid, transcript.exists()).unwrap();
    assert_eq!(plan.mode, StartMode::Resume);
    assert_eq!(
        plan.argv,
        [claude_s.clone(), "--resume".into(), cid.clone()]
    );
    let mut args = vec!["spawn", ID, "--cwd", &odd_s, "--"];
    args.extend(plan.argv.iter().map(String::as_str));
    ok(&args);
    wait_for(&s, &api, "the resumed claude ready", || prompt_empty(&s));
    wait_for(&s, &api, "the old exchange on the resumed screen", || {
        screen(&s).contains(&echo)
    });
    let pid = claude_pid();
    wait_for(&s, &api, "the resumed claude's status file", || {
        status_of(pid).is_some_and(|st| st.session_id == cid)
    });
}

mod grouped_viewer;
mod interrupt;
mod resume_dialog;
