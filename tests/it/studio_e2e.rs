//! ccs-reap beside a stand-in studio (issue 43, item 10): `tests/e2e/studio.py`, written from the
//! issue's description of claude-code-studio's subscription engine, drives the pinned Claude Code
//! (offline, against `tests/e2e/fake_api.py`) on the test's private tmux server the way the studio
//! does: one `ccs-<id>` session per chat, created only when `has-session` fails, running `env -u
//! CLAUDECODE '<claude>' --session-id|--resume '<cid>' --model '<m>' --dangerously-skip-permissions
//! --mcp-config '<tmp>/ccs-mcp-<hash>.json'`, its `CCS_CFG` set right after, a session whose
//! `CCS_CFG` differs killed and respawned with `--resume`; a message pasted (`load-buffer`,
//! `paste-buffer -dpr`, `send-keys Enter`) and polled for in the transcript. ccs-reap is not told
//! anything by the studio: it sees the chats only as tmux sessions (and, with the hooks, through
//! Claude Code's own hooks, `claude-settings --write` into the HOME the claude uses).
//!
//! Deviations from the studio, all of the harness: its socket is the test's (`-S`, not `-L
//! ccstudio`); it polls every 0.25 s, not 1.5 s; tests run as root here, where
//! `--dangerously-skip-permissions` refuses to start unless `IS_SANDBOX=1` (Claude Code's own
//! switch for a deliberate root sandbox), so the world sets it when run as root; the flag's
//! one-time disclaimer is accepted in the user settings (`skipDangerousModePermissionPrompt`),
//! as answering it does; and the World keeps its `keeper` session (a spare the studio does not
//! have) except in the test of the server exiting with its last chat.
//!
//! Needs what `claude_e2e` needs (`npm ci --prefix tests/e2e --no-audit --no-fund`); without it
//! it fails with that hint. Built with the cargo feature `e2e` only.

use crate::agents_e2e::{program, FakeApi as GeminiApi};
use crate::claude_e2e::*;
use crate::common::*;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The chat's id: its session is `ccs-e2e` ([`SESSION`]), as the claude_e2e helpers expect.
const CHAT: &str = ID;
/// The stand-in's poll period (the studio's is 1.5 s) and its silence limit (the studio's 30 s).
const POLL: &str = "0.25";
const SILENCE: &str = "30";
/// The model the studio names (any: the fake API answers them all).
const MODEL: &str = "claude-opus-5-5";
/// The idle limit of the sweeps that should reap (or, mid-turn, must not).
const QUICK: [(&str, &str); 2] = [
    ("CCS_ENGINE_IDLE_KILL_MS", "1500"),
    ("CCS_REAP_GRACE_MS", "5000"),
];

/// The world of `claude_e2e`, made fit for the studio's claude: the disclaimer of
/// `--dangerously-skip-permissions` accepted in the user settings, `IS_SANDBOX=1` when run as root
/// (in the server's global environment, which the panes get, and the studio's), and with `hooks`
/// ccs-reap's hooks merged into those same settings by `claude-settings --write`; then also Gemini
/// CLI on the PATH, offline against `fake_agents.py` (returned: it lives as long as the world) and
/// wired by `hook-settings --agent gemini --write`, for a `gemini -p` run inside the chat.
fn studio_world(tools: &Tools, hooks: bool) -> (World, Option<GeminiApi>) {
    let mut w = World::new(tools);
    let settings = w.home.join(".claude").join("settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, r#"{"skipDangerousModePermissionPrompt": true}"#).unwrap();
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        set_env(&mut w, "IS_SANDBOX", "1".into());
    }
    if !hooks {
        return (w, None);
    }
    ok_with(
        &w.s,
        &w.env,
        &["claude-settings", "--write", &path_str(&settings)],
        &[],
    );
    let text = std::fs::read_to_string(&settings).unwrap();
    assert!(
        text.contains("claude-hook") && text.contains("skipDangerousModePermissionPrompt"),
        "{text}"
    );
    // Gemini CLI as agents_e2e runs it (missing: that test's hint).
    let gemini = program("gemini");
    std::os::unix::fs::symlink(&gemini, w.claude.parent().unwrap().join("gemini")).unwrap();
    let dir = w.s.path("gemini-api");
    std::fs::create_dir_all(&dir).unwrap();
    let api = GeminiApi::start(&dir);
    set_env(&mut w, "GEMINI_API_KEY", "fake-gemini-key".into());
    set_env(
        &mut w,
        "GOOGLE_GEMINI_BASE_URL",
        format!("http://127.0.0.1:{}", api.port),
    );
    set_env(&mut w, "NO_BROWSER", "1".into());
    let gsettings = w.home.join(".gemini").join("settings.json");
    std::fs::create_dir_all(gsettings.parent().unwrap()).unwrap();
    let g = serde_json::json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
        "model": {"name": "gemini-2.5-flash"},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
    });
    std::fs::write(&gsettings, g.to_string()).unwrap();
    ok_with(
        &w.s,
        &w.env,
        &[
            "hook-settings",
            "--agent",
            "gemini",
            "--write",
            &path_str(&gsettings),
        ],
        &[],
    );
    (w, Some(api))
}

/// `name=value` in the world's environment: the server's global one (which new panes get) and
/// the studio's and ccs-reap's.
fn set_env(w: &mut World, name: &'static str, value: String) {
    w.s.ok(&["set-environment", "-g", name, &value]);
    w.env.push((name, value));
}

/// The stand-in studio, run as a program with the world's clean environment.
struct Studio<'a> {
    w: &'a World,
    python: PathBuf,
    state: PathBuf,
}

impl<'a> Studio<'a> {
    fn new(w: &'a World, tools: &Tools) -> Studio<'a> {
        Studio {
            w,
            python: tools.python.clone(),
            state: w.s.path("studio"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.python);
        c.arg(e2e_dir().join("studio.py"))
            .arg("--socket")
            .arg(&self.w.s.sock)
            .args(["--tmux-conf", "/dev/null"])
            .arg("--state")
            .arg(&self.state)
            .arg("--claude")
            .arg(&self.w.claude)
            .arg("--cwd")
            .arg(&self.w.proj)
            .arg("--mcp-config")
            .arg(&self.w.mcp_cfg)
            .args(["--poll", POLL, "--silence", SILENCE])
            .args(["--model", MODEL])
            .args(args)
            .env_clear()
            .envs(self.w.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Its JSON answer, which must say `ok`; else fail with what the pane and the studio saw.
    fn answer(&self, what: &str, o: Out) -> serde_json::Value {
        let j: Option<serde_json::Value> = serde_json::from_str(o.stdout.trim()).ok();
        match j {
            Some(j) if j["ok"] == true && o.code == 0 => j,
            _ => panic!(
                "studio {what}: exit {}: {}{}\n---- screen ----\n{}\n---- studio log ----\n{:#?}",
                o.code,
                o.stdout,
                o.stderr,
                screen(&self.w.s),
                self.log()
            ),
        }
    }

    /// `send <text>`, to its end (the reply, or the studio's error).
    fn send(&self, text: &str) -> serde_json::Value {
        let o = Out::from(self.command(&["send", CHAT, text]).output().unwrap());
        self.answer(&format!("send {text:?}"), o)
    }

    /// `send <text>` in the background; [`Studio::finish`] waits for it.
    fn send_bg(&self, text: &str) -> KillOnDrop {
        KillOnDrop(self.command(&["send", CHAT, text]).spawn().unwrap())
    }

    fn finish(&self, c: KillOnDrop, what: &str) -> serde_json::Value {
        let o = self.wait_out(c, what);
        self.answer(what, o)
    }

    /// A background run's exit and output, whatever they are.
    fn wait_out(&self, mut c: KillOnDrop, what: &str) -> Out {
        let secs = timeout();
        assert!(
            wait_until(secs, || c.0.try_wait().unwrap().is_some()),
            "the studio's {what} did not finish within {secs} s; screen:\n{}",
            screen(&self.w.s)
        );
        let mut stdout = String::new();
        let mut stderr = String::new();
        use std::io::Read as _;
        c.0.stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        c.0.stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let code = c.0.wait().unwrap().code().unwrap_or(-1);
        Out {
            code,
            stdout,
            stderr,
        }
    }

    /// What it did (`studio.log`): starts, kills, messages, errors.
    fn log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state.join("studio.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn events(&self, event: &str) -> Vec<serde_json::Value> {
        self.log()
            .into_iter()
            .filter(|e| e["event"] == event)
            .collect()
    }

    /// The chat row's conversation id.
    fn cid(&self) -> String {
        let t = std::fs::read_to_string(self.state.join("chats.json")).unwrap();
        let j: serde_json::Value = serde_json::from_str(&t).unwrap();
        j[CHAT]["cid"].as_str().unwrap().to_string()
    }
}

/// `CCS_CFG` in the chat session's environment.
fn ccs_cfg(s: &Server) -> Option<String> {
    let o = s.tmux(&["show-environment", "-t", &format!("={SESSION}"), "CCS_CFG"]);
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .strip_prefix("CCS_CFG=")
        .map(str::to_string)
}

/// The pane's start command as tmux keeps it (in double quotes when it has spaces).
fn start_command(s: &Server) -> String {
    let c = pane(s, "#{pane_start_command}");
    c.strip_prefix('"')
        .and_then(|c| c.strip_suffix('"'))
        .unwrap_or(&c)
        .to_string()
}

/// The chat's claude: the pane's process, or under it (the studio's command runs through the
/// pane's shell, and `dash` does not exec its last command).
fn claude_pid(s: &Server) -> i32 {
    let pane_pid: i32 = pane(s, "#{pane_pid}").parse().unwrap();
    std::iter::once(pane_pid)
        .chain(descendants(pane_pid))
        .find(|p| {
            cmdline(*p)
                .split_whitespace()
                .next()
                .is_some_and(ccs_reap::agents::CLAUDE.is_program_word)
        })
        .unwrap_or_else(|| panic!("no claude in the pane of {pane_pid}"))
}

/// The MCP config the studio passed (its copy under the world's TMPDIR).
fn mcp_copy(w: &World) -> PathBuf {
    let tmp = w.proj.parent().unwrap().join("tmp");
    std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ccs-mcp-")
        })
        .expect("the studio's MCP config copy")
}

/// The last `n` lines of a log.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How long ago `@ccs_idle` was stamped, in ms (0 when it is not).
fn idle_age(s: &Server, n: u32) -> i64 {
    s.show(n, "@ccs_idle")
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(0, |t| now_ms() - t)
}

/// How many requests carried a tool's result (the fake API answers each `TOOL DONE`).
fn tool_results(api: &FakeApi) -> usize {
    api.requests()
        .iter()
        .filter(|r| {
            r["body"]["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_array())
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        })
        .count()
}

/// The user and assistant texts of a request's whole history.
fn history(r: &serde_json::Value) -> Vec<(String, String)> {
    r["body"]["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| {
            let role = m["role"].as_str().unwrap_or("").to_string();
            texts(m).into_iter().map(move |t| (role.clone(), t))
        })
        .collect()
}

/// What one test carries from step to step.
struct Chat<'a> {
    w: &'a World,
    st: Studio<'a>,
    cid: String,
    /// The session's `$N` and its claude (in the pane's tree: the pane runs `sh -c <command>`).
    n: u32,
    claude: i32,
    tag: String,
    /// Each message sent, with the reply it must get.
    said: Vec<(String, String)>,
}

impl<'a> Chat<'a> {
    /// The studio's first message to a new chat: it starts claude `--session-id <new uuid>`.
    fn first(w: &'a World, tools: &Tools) -> Chat<'a> {
        let st = Studio::new(w, tools);
        let tag = uuid()[..8].to_string();
        let msg = format!("remember the word KIWI-{tag}");
        let r = st.send(&msg);
        assert_eq!(r["started"], "session-id", "{r}");
        assert_eq!(r["reply"], format!("ECHO: {msg}"), "{r}");
        let cid = st.cid();
        let start = start_command(&w.s);
        assert!(
            start.starts_with("env -u CLAUDECODE '")
                && start.contains(&format!(" --session-id '{cid}' --model '"))
                && start.contains(" --dangerously-skip-permissions")
                && start.contains(" --mcp-config '"),
            "{start}"
        );
        assert!(ccs_cfg(&w.s).is_some(), "no CCS_CFG on the session");
        let n = sid_of(&w.s);
        let claude = claude_pid(&w.s);
        assert!(cmdline(claude).contains(&cid), "{}", cmdline(claude));
        Chat {
            w,
            st,
            cid,
            n,
            claude,
            tag,
            said: vec![(msg.clone(), format!("ECHO: {msg}"))],
        }
    }

    fn s(&self) -> &'a Server {
        &self.w.s
    }

    fn wait(&self, what: &str, f: impl FnMut() -> bool) -> f64 {
        wait_for(&self.w.s, &self.w.api, what, f)
    }

    fn ok(&self, args: &[&str], extra: &[(&str, &str)]) -> Out {
        ok_with(&self.w.s, &self.w.env, args, extra)
    }

    /// One `--once --json` sweep reaping at [`QUICK`]'s limit.
    fn quick_sweep(&self) -> serde_json::Value {
        self.ok(&["--once", "--json"], &QUICK).json()
    }

    /// A message sent in the background whose reply the fake API holds: a sweep, once the chat's
    /// idle stamp is older than the limit, keeps it (`busy`), and the message gets its reply.
    fn kept_mid_turn(&mut self) {
        let (s, api) = (self.s(), &self.w.api);
        // A first sweep at the ordinary limit: the chat is seen (stamped `@ccs_idle` if no hook
        // did) and kept.
        let rep = self.ok(&["--once", "--json"], &[]).json();
        assert!(s.has(SESSION), "{rep}");
        assert!(s.show(self.n, "@ccs_idle").is_some(), "{rep}");
        let msg = format!("held reply {}", self.tag);
        std::fs::write(&self.w.hold, "").unwrap();
        let bg = self.st.send_bg(&msg);
        self.wait("the held request at the fake API", || {
            !requests_for(api, &msg).is_empty()
        });
        self.wait("the idle stamp older than the limit", || {
            idle_age(s, self.n) > 2500
        });
        let rep = self.quick_sweep();
        let me = &by_name(&rep)[SESSION];
        eprintln!("mid-turn: {} ({})", me["state"], me["why"]);
        assert!(
            rep["reaps"].as_array().is_none_or(|r| r.is_empty()),
            "a sweep reaped a chat mid-turn: {rep}"
        );
        assert_eq!(me["state"], "busy", "{rep}");
        assert!(s.has(SESSION) && alive(self.claude), "the busy chat went");
        std::fs::remove_file(&self.w.hold).unwrap();
        let r = self.st.finish(bg, "held message");
        assert_eq!(r["reply"], format!("ECHO: {msg}"), "{r}");
        assert!(r["started"].is_null(), "{r}");
        self.said.push((msg.clone(), format!("ECHO: {msg}")));
    }

    /// The studio's viewer (`tmux -C attach-session` with pipes) attached: the chat is `viewed`.
    fn viewed_while_the_studio_watches(&self) {
        let v = KillOnDrop(
            self.st
                .command(&["view", CHAT, "--for", "4"])
                .spawn()
                .unwrap(),
        );
        self.wait("the studio's viewer attached", || {
            self.s().attached(SESSION)
        });
        let st = self.ok(&["status", "--json"], &[]).json();
        assert_eq!(by_name(&st)[SESSION]["state"], "viewed", "{st}");
        let r = self.st.finish(v, "view");
        assert!(r["begin"].as_u64().is_some_and(|b| b > 0), "{r}");
    }

    /// (4) The chat's claude runs `<agent> -p` (a Bash tool call, as a script or a sub-agent of
    /// the user's would): the nested agent inherits `TMUX` and `TMUX_PANE` and is wired by the
    /// same settings, so its hooks fire in the chat's pane. None may move the chat: `@ccs_cid`
    /// stays the chat's and its turn runs on (the tool still runs after the nested agent ended).
    /// `asked` says whether its fake API got the nested prompt.
    fn nested_agent_is_not_the_chat(&mut self, agent: &str, asked: impl Fn(&str) -> bool) {
        let (s, api) = (self.s(), &self.w.api);
        let nested = format!("nested-{agent}-{}", self.tag);
        let (out, done) = (s.path("nested.out"), s.path("nested.done"));
        let _ = std::fs::remove_file(&done);
        let cmd = format!(
            "RUN: {agent} -p {nested} > {} 2>&1; touch {}; sleep 6",
            out.display(),
            done.display()
        );
        let results = tool_results(api);
        let t0 = Instant::now();
        let bg = self.st.send_bg(&cmd);
        self.wait(&format!("the nested {agent}'s request"), || asked(&nested));
        // Its hooks are done once it has exited and no ccs-reap hook runs in the pane any more.
        self.wait(&format!("the nested {agent} -p done"), || {
            done.exists()
                && descendants(self.claude)
                    .iter()
                    .all(|p| !cmdline(*p).contains(BIN))
        });
        let nested_s = t0.elapsed().as_secs_f64();
        let output = std::fs::read_to_string(&out).unwrap_or_default();
        let cid = s.show(self.n, "@ccs_cid");
        let turn = s.show(self.n, "@ccs_turn");
        let rep = self.quick_sweep();
        assert_eq!(
            tool_results(api),
            results,
            "the tool ended before the checks: too slow a machine for this test"
        );
        assert!(
            output.contains(&format!("ECHO: {nested}")),
            "the nested {agent} did not answer: {output}"
        );
        assert_eq!(
            cid.as_deref(),
            Some(self.cid.as_str()),
            "the nested {agent}'s hooks replaced the chat's cid"
        );
        assert!(
            turn.is_some(),
            "the nested {agent}'s hooks ended the chat's turn"
        );
        let me = &by_name(&rep)[SESSION];
        assert_eq!(me["state"], "busy", "{rep}");
        assert!(s.has(SESSION), "{rep}");
        let r = self.st.finish(bg, &format!("the nested {agent} run"));
        assert_eq!(r["reply"], "TOOL DONE", "{r}");
        assert_eq!(
            s.show(self.n, "@ccs_cid").as_deref(),
            Some(self.cid.as_str())
        );
        eprintln!("nested {agent} -p: done {nested_s:.2} s after the message");
        self.said.push((cmd, "TOOL DONE".into()));
    }

    /// (3) A reap held in a slow `before` reap hook (the documented way to warn the user) while
    /// the studio sends a message (its reply held until the reap is over): the message reaches
    /// the fake API and gets its reply, the reap aborts and signals nothing. With the hooks the
    /// prompt takes the chat back at once ("a prompt arrived"); without them the re-check before
    /// the fence sees the turn in Claude Code's status file.
    fn prompt_wins_over_a_slow_reap_hook(&mut self, hooks: bool) {
        let (s, api) = (self.s(), &self.w.api);
        let gate = s.path("gate");
        let log = s.path("hook.log");
        let hook = s.path("reap-hook");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\ncat >/dev/null\n[ \"$1\" = before ] || exit 0\necho waiting >>'{}'\n\
                 while [ ! -e '{}' ]; do sleep 0.05; done\nexit 0\n",
                log.display(),
                gate.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.wait("status to call the chat due", || {
            by_name(&self.ok(&["status", "--json"], &QUICK).json())[SESSION]["state"] == "expired"
        });
        let hook_s = path_str(&hook);
        let mut extra = QUICK.to_vec();
        extra.extend([
            ("CCS_REAP_HOOK", hook_s.as_str()),
            ("CCS_REAP_HOOK_TIMEOUT_MS", "20000"),
        ]);
        let mut reaper = KillOnDrop(
            ccs_command(s, &self.w.env, &["--once"], &extra)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(s.path("reaper.log")).unwrap())
                .spawn()
                .unwrap(),
        );
        self.wait("the reap waiting in its before hook", || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("waiting"))
        });
        assert!(s.show(self.n, "@ccs_reaping").is_some(), "no reap mark");
        let msg = format!("typed during the reap {}", self.tag);
        std::fs::write(&self.w.hold, "").unwrap();
        let bg = self.st.send_bg(&msg);
        self.wait("the message at the fake API", || {
            !requests_for(api, &msg).is_empty()
        });
        if hooks {
            assert_eq!(
                s.show(self.n, "@ccs_reaping"),
                None,
                "the prompt did not take the chat back"
            );
        } else {
            let status = self
                .w
                .home
                .join(format!(".claude/sessions/{}.json", self.claude));
            self.wait("claude busy by its status file", || {
                std::fs::read_to_string(&status).is_ok_and(|t| t.contains(r#""status":"busy""#))
            });
        }
        std::fs::write(&gate, "").unwrap();
        self.wait("the reaper's exit", || {
            reaper.0.try_wait().unwrap().is_some()
        });
        let code = reaper.0.wait().unwrap().code();
        let rlog = std::fs::read_to_string(s.path("reaper.log")).unwrap_or_default();
        assert!(
            matches!(code, Some(0 | 1)),
            "the reaper exited {code:?}: {rlog}"
        );
        let lines = s.audit_of(SESSION);
        if let Some(l) = lines.iter().find(|l| l["outcome"] == "reaped") {
            std::fs::remove_file(&self.w.hold).unwrap();
            let o = self.st.wait_out(bg, "the message during the reap");
            let at_api = requests_for(api, &msg).len();
            panic!(
                "the chat was reaped with the message's turn in flight ({at_api} request(s) of it \
                 at the fake API, its reply held): {l}\nthe studio: exit {}: {}",
                o.code,
                o.stdout.trim()
            );
        }
        assert!(s.has(SESSION) && alive(self.claude), "the chat went");
        let why = lines
            .iter()
            .find(|l| l["outcome"] == "aborted")
            .unwrap_or_else(|| panic!("no aborted line: {lines:?}\n{rlog}"))["error"]
            .to_string();
        eprintln!("the reap during the message aborted: {why}");
        if hooks {
            // The prompt hook took the chat back (the reap aborts at its fence), unless the
            // status file's read right before the fence saw claude busy first: both abort.
            assert!(
                why.contains("a prompt arrived") || why.contains("status file"),
                "{lines:?}"
            );
        }
        std::fs::remove_file(&self.w.hold).unwrap();
        let r = self.st.finish(bg, "the message during the reap");
        assert_eq!(r["reply"], format!("ECHO: {msg}"), "{r}");
        assert!(r["started"].is_null(), "{r}");
        self.said.push((msg.clone(), format!("ECHO: {msg}")));
    }

    /// Idle past the limit: a sweep reaps the chat, claude and its MCP server with it; the audit
    /// line names the chat's own conversation.
    fn reaped_when_idle(&self) {
        let s = self.s();
        let mcp = mcp_child(self.claude).expect("the MCP server under claude");
        let tree: Vec<i32> = std::iter::once(self.claude)
            .chain(descendants(self.claude))
            .collect();
        let t0 = Instant::now();
        self.wait("a sweep to reap the idle chat", || {
            self.quick_sweep();
            !s.has(SESSION)
        });
        assert!(
            wait_until(10.0, || tree.iter().all(|p| !alive(*p))),
            "the reap left part of the tree alive: {:?}",
            tree.iter()
                .filter(|p| alive(**p))
                .map(|p| (p, cmdline(*p)))
                .collect::<Vec<_>>()
        );
        let line = s
            .audit_of(SESSION)
            .into_iter()
            .rfind(|l| l["outcome"] == "reaped")
            .expect("a reaped line");
        assert_eq!(line["reason"], "idle", "{line}");
        assert_eq!(line["cid"], self.cid.as_str(), "{line}");
        let pids: Vec<i64> = line["pids"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p.as_i64())
            .collect();
        assert!(
            pids.contains(&(self.claude as i64)) && pids.contains(&(mcp as i64)),
            "{line}"
        );
        eprintln!(
            "reaped {:.2} s after the chat was due: {} processes, rss {} MiB, took {} ms",
            t0.elapsed().as_secs_f64(),
            pids.len(),
            line["rss_bytes"].as_u64().unwrap_or(0) / 1_048_576,
            line["took_ms"]
        );
    }

    /// The studio's next message: its session is gone, so the studio starts it `--resume <cid>`
    /// (its own respawn, no ccs-reap command) and the request carries every earlier exchange.
    fn comes_back_with_its_history(&mut self) {
        let api = &self.w.api;
        let msg = format!("which fruit did I name {}", self.tag);
        let r = self.st.send(&msg);
        assert_eq!(r["started"], "resume", "{r}");
        assert_eq!(r["reply"], format!("ECHO: {msg}"), "{r}");
        let start = start_command(self.s());
        assert!(
            start.contains(&format!(" --resume '{}' ", self.cid)),
            "{start}"
        );
        let reqs = requests_for(api, &msg);
        let req = reqs
            .last()
            .expect("no request for the message after the reap");
        assert_eq!(
            req["headers"]["x-claude-code-session-id"],
            self.cid.as_str()
        );
        let h = history(req);
        for (said, echo) in &self.said {
            assert!(
                h.contains(&("user".into(), said.clone()))
                    && h.contains(&("assistant".into(), echo.clone())),
                "the request after the reap lacks {said:?} / {echo:?}: {h:?}"
            );
        }
        self.said.push((msg.clone(), format!("ECHO: {msg}")));
        self.claude = claude_pid(self.s());
        self.n = sid_of(self.s());
    }
}

/// Points 1 and 2: kept mid-turn, reaped when idle with its whole tree, back through the
/// studio's own respawn with its history; with the hooks, also points 3 and 4 on the same claude.
fn kept_busy_reaped_idle_and_back(hooks: bool) {
    let tools = tools_or_fail();
    let t_all = Instant::now();
    let (w, gemini) = studio_world(&tools, hooks);
    let _cleanup = Cleanup(&w.s);
    let mut chat = Chat::first(&w, &tools);
    if !hooks {
        chat.viewed_while_the_studio_watches();
    }
    if hooks {
        chat.wait("@ccs_cid from SessionStart", || {
            w.s.show(chat.n, "@ccs_cid").as_deref() == Some(chat.cid.as_str())
        });
    }
    chat.kept_mid_turn();
    if hooks {
        chat.prompt_wins_over_a_slow_reap_hook(true);
        let api = &w.api;
        chat.nested_agent_is_not_the_chat("claude", |m| !requests_for(api, m).is_empty());
        if let Some(g) = &gemini {
            chat.nested_agent_is_not_the_chat("gemini", |m| !g.requests_for(m).is_empty());
        }
    }
    chat.reaped_when_idle();
    chat.comes_back_with_its_history();
    assert!(
        chat.st.events("kill").is_empty(),
        "the studio killed a session: {:?}",
        chat.st.log()
    );
    assert_eq!(chat.st.events("start").len(), 2, "{:#?}", chat.st.log());
    eprintln!(
        "studio, hooks {hooks}: total {:.2} s",
        t_all.elapsed().as_secs_f64()
    );
}

/// (1) No hooks at all: ccs-reap knows the cid from claude's command line and the turns from
/// Claude Code's status file.
#[test]
fn studio_chat_without_hooks_is_kept_mid_turn_reaped_idle_and_resumed() {
    kept_busy_reaped_idle_and_back(false);
}

/// (2) With `claude-settings --write` into the claude's user settings; (3) a prompt sent while a
/// reap waits in a slow `before` hook wins; (4) a nested `claude -p`, and `gemini -p` (Gemini CLI
/// wired by `hook-settings --agent gemini`), run by the chat's claude are not the chat.
#[test]
fn studio_chat_with_hooks_is_kept_mid_turn_reaped_idle_and_resumed() {
    kept_busy_reaped_idle_and_back(true);
}

/// (3) without the hooks: a message sent while a reap waits in a slow `before` hook (its reply
/// held by the fake API until the reap is over) wins: the reap aborts, the message gets its
/// reply.
///
/// Fails today: nothing tells the reap of the prompt (no prompt hook) and its re-check of Claude
/// Code's status file runs before the `before` hook, not right before the fence: the chat is
/// reaped with the turn in flight and the studio's message is lost.
#[test]
fn studio_chat_without_hooks_a_message_during_a_slow_reap_hook_wins() {
    let tools = tools_or_fail();
    let (w, _) = studio_world(&tools, false);
    let _cleanup = Cleanup(&w.s);
    let mut chat = Chat::first(&w, &tools);
    // First sight: the idle clock starts.
    chat.ok(&["--once"], &[]);
    chat.prompt_wins_over_a_slow_reap_hook(false);
}

/// (5) `ccs-reap resume` of a chat the studio started, then the studio's next message: the
/// session `resume` brought back carries the studio's `CCS_CFG`, so the studio uses it as it is
/// (no kill, no second start) and the message gets its reply with the history.
///
/// Fails today: `resume <id>` alone exits 1 (the tombstone keeps no command line: the pane's
/// process is `sh -c "<the studio's quoted command>"`, which `dash` does not exec), and once the
/// chat is back (by `spawn`, as that message says) its session has no `CCS_CFG`, so the studio
/// kills it and starts it again.
#[test]
fn studio_keeps_a_chat_that_resume_brought_back() {
    let tools = tools_or_fail();
    let (w, _) = studio_world(&tools, false);
    let _cleanup = Cleanup(&w.s);
    let chat = Chat::first(&w, &tools);
    let cfg = ccs_cfg(&w.s);
    reap_when_idle(&w.s, &w.env, ID);
    assert!(!w.s.has(SESSION));
    chat.wait("claude gone with the reap", || !alive(chat.claude));
    let mut problems = Vec::new();
    // As a user runs it: no command, the tombstone's.
    let o = ccs_with(&w.s, &w.env, &["resume", ID], &[]);
    if o.code != 0 {
        problems.push(format!(
            "`resume {ID}` exited {}: {}",
            o.code,
            o.stderr.trim()
        ));
        // The way the message points to (`resume` takes no command): `spawn` with the words the
        // studio ran, which adds `--resume <cid>` from the tombstone.
        let (claude, mcp) = (path_str(&w.claude), path_str(&mcp_copy(&w)));
        chat.ok(
            &[
                "spawn",
                ID,
                "--",
                "env",
                "-u",
                "CLAUDECODE",
                &claude,
                "--model",
                MODEL,
                "--dangerously-skip-permissions",
                "--mcp-config",
                &mcp,
            ],
            &[],
        );
    }
    chat.wait("the resumed claude ready", || prompt_empty(&w.s));
    let start = start_command(&w.s);
    assert!(
        start.contains("--resume") && start.contains(&chat.cid),
        "{start}"
    );
    let resumed = claude_pid(&w.s);
    let cfg_after_resume = ccs_cfg(&w.s);
    let msg = format!("after the resume {}", chat.tag);
    let r = chat.st.send(&msg);
    if cfg_after_resume != cfg {
        problems.push(format!(
            "resume left CCS_CFG {cfg_after_resume:?} on the session, the studio's was {cfg:?}"
        ));
    }
    if !r["started"].is_null() || !chat.st.events("kill").is_empty() {
        problems.push(format!(
            "the studio killed the resumed session and started it again: {r}; {:?}",
            chat.st.events("kill")
        ));
    }
    if !alive(resumed) {
        problems.push(format!("the claude resume started ({resumed}) is gone"));
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(r["reply"], format!("ECHO: {msg}"), "{r}");
    let reqs = requests_for(&w.api, &msg);
    let h = history(reqs.last().expect("no request after the resume"));
    let (said, echo) = &chat.said[0];
    assert!(
        h.contains(&("user".into(), said.clone()))
            && h.contains(&("assistant".into(), echo.clone())),
        "{h:?}"
    );
}

/// (6) The studio keeps no spare session, so its tmux server exits with its last chat once the
/// daemon reaps it: the daemon says the server is `empty` (not the "no tmux server" warning),
/// `/healthz` stays 200, and `status` shows the chat asleep with its real reason (`idle`), not
/// lost with its server (`server-died`).
///
/// Fails today: the daemon warns "no tmux server at ..." (degraded `no-server`) and `/healthz`
/// answers 503 (the chat itself is asleep, reason `idle`).
#[test]
fn studio_server_exiting_with_its_last_reaped_chat_is_not_an_outage() {
    use crate::common::http;
    let tools = tools_or_fail();
    let (w, _) = studio_world(&tools, false);
    let _cleanup = Cleanup(&w.s);
    let chat = Chat::first(&w, &tools);
    let server = w.s.server_pid();
    // The harness's spare session goes: the chat is the server's last.
    w.s.ok(&["kill-session", "-t", "=keeper"]);
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = w.s.path("daemon.log");
    let mut extra = QUICK.to_vec();
    extra.extend([
        ("CCS_REAP_INTERVAL_MS", "300"),
        ("CCS_METRICS_ADDR", addr.as_str()),
    ]);
    let _daemon = KillOnDrop(
        ccs_command(&w.s, &w.env, &[], &extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let healthz = || http::get(port, "/healthz", Duration::from_secs(2));
    chat.wait("the daemon's /healthz", || healthz().is_some());
    chat.wait("the daemon to reap the idle chat", || !w.s.has(SESSION));
    chat.wait("the studio's tmux server to exit with it", || {
        !alive(server)
    });
    // Ten sweeps' time: /healthz must not turn (every answer seen is kept, for the failure).
    let mut seen: Vec<String> = Vec::new();
    wait_until(3.0, || {
        let h = healthz().map_or("no answer".into(), |r| {
            format!("{}: {}", r.status, r.body.trim())
        });
        if !seen.contains(&h) {
            seen.push(h);
        }
        false
    });
    let turned = seen.iter().any(|h| !h.contains(" 200 "));
    let st = chat.ok(&["status", "--json"], &QUICK).json();
    let dlog = std::fs::read_to_string(&log).unwrap_or_default();
    let mut problems = Vec::new();
    if turned {
        problems.push(format!("/healthz turned: {seen:?}"));
    }
    let asleep = st["asleep"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["id"] == ID);
    if asleep.is_none_or(|a| a["reason"] != "idle") {
        problems.push(format!("status: the chat is not asleep (idle): {asleep:?}"));
    }
    let lost: Vec<_> = st["lost"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l.to_string().contains(ID))
        .collect();
    if !lost.is_empty() {
        problems.push(format!(
            "status: the chat is lost with its server: {lost:?}"
        ));
    }
    // A warning or an error of any kind (the memory watcher's INFO that it now watches its own
    // cgroup, there being no server, is none).
    let warned: Vec<&str> = dlog
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        // The test's own short limit, warned about at start.
        .filter(|l| !l.contains("a bare number is milliseconds"))
        .collect();
    if !warned.is_empty() {
        problems.push(format!("the daemon warned: {warned:?}"));
    }
    if !dlog
        .lines()
        .any(|l| l.contains("INFO") && l.contains("empty"))
    {
        problems.push("the daemon never said the server is empty (INFO)".into());
    }
    assert!(
        problems.is_empty(),
        "{problems:#?}\n---- status ----\n{st:#}\n---- daemon log (tail) ----\n{}",
        tail(
            &dlog
                .lines()
                .filter(|l| !l.contains(" DEBUG "))
                .collect::<Vec<_>>()
                .join("\n"),
            30
        )
    );
}
