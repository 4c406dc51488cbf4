//! The tmux calls of the way back: a new session that keeps its dead pane readable (so a resume
//! that fails can be told and its last line read), a cheap probe of one session, its pane's last
//! line, the chat's kept command line (`@ccs_argv`), the server's global environment, and the
//! `attach` command line.

use crate::core::policy::TmuxId;
use tmux_interface::TmuxCommand;

use super::{literal, session_gone, Socket, Tmux, TmuxError};
use crate::core::listing::parse_sid;

/// The `@` option that keeps the words `spawn` ran a chat with (JSON, one array of strings).
pub const ARGV_OPTION: &str = "@ccs_argv";

/// The option that names a chat's agent (`claude`, `codex`, `gemini`): set by `spawn` and by the
/// agent's hook when it tells the conversation id.
pub const AGENT_OPTION: &str = "@ccs_agent";

/// What the way back keeps of a session at its reap ([`Tmux::kept`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// `@ccs_argv`: the command `spawn` ran, when set and it parses.
    pub argv: Option<Vec<String>>,
    /// Its own environment, the kept names only.
    pub env: std::collections::BTreeMap<String, String>,
    /// The studio's own `@` options ([`crate::core::records::kept_option_name`]).
    pub options: std::collections::BTreeMap<String, String>,
}

/// What [`Tmux::new_session_kept`] starts, and with what.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    /// `env K=V` words before the command: the agent's own environment.
    pub env: &'a [(String, String)],
    /// The session's environment (`set-environment -t`), as the studio left it.
    pub session_env: &'a std::collections::BTreeMap<String, String>,
    /// The studio's own `@` options, as it left them.
    pub options: &'a std::collections::BTreeMap<String, String>,
    pub argv: &'a [String],
    /// `@ccs_agent`, when given.
    pub agent: Option<&'a str>,
    /// `@ccs_cid`, when given.
    pub cid: Option<&'a str>,
}

/// A session just created by [`Tmux::new_session_kept`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Created {
    /// Its `$N`.
    pub n: TmuxId,
    /// The pid of its pane's process.
    pub pane_pid: u32,
}

/// One session as [`Tmux::probe`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub pane_dead: bool,
    pub dead_status: Option<i32>,
    pub pane_pid: Option<u32>,
    /// `@ccs_cid`, as set.
    pub cid: String,
}

impl Tmux {
    /// `new-session -d -s <name> -c <cwd> -- [env K=V ...] <argv...>`, its session environment
    /// set to `session_env`, with the pane kept after it
    /// exits (`remain-on-exit on`, so a start that fails can be read), `@ccs_argv` set to `argv`,
    /// and, when given, `@ccs_agent` and `@ccs_cid`; all in one call. `None` when a
    /// session of that name exists.
    pub async fn new_session_kept(
        &self,
        name: &str,
        cwd: &std::path::Path,
        start: &Start<'_>,
    ) -> Result<Option<Created>, TmuxError> {
        let cwd = cwd.to_str().ok_or_else(|| TmuxError::BadArgument {
            what: "working directory",
            value: cwd.display().to_string(),
            why: "not valid UTF-8",
        })?;
        let argv = start.argv;
        let argv_json = serde_json::to_string(argv).map_err(|_| TmuxError::BadArgument {
            what: "command",
            value: format!("{argv:?}"),
            why: "cannot be encoded",
        })?;
        let mut cmds = vec![new_session_command(name, cwd, start)];
        cmds.extend(kept_settings(name, start, &argv_json));
        let out = match self.run(&cmds).await {
            Ok(o) => o,
            Err(TmuxError::Failed { stderr, .. }) if stderr.contains("duplicate session") => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        created(&out).map(Some)
    }

    /// Session `$n`'s first pane, read in one call; `None` when it is gone.
    pub async fn probe(&self, n: TmuxId) -> Result<Option<Probe>, TmuxError> {
        let mut c = TmuxCommand::with_name("display-message");
        c.push_param("-p")
            .push_param("-t")
            .push_param(format!("{n}:"))
            .push_param("#{pane_dead}\t#{pane_dead_status}\t#{pane_pid}\t#{@ccs_cid}");
        match self.run(&[c]).await {
            Ok(out) => {
                let line = out.lines().next().unwrap_or("");
                let f: Vec<&str> = line.splitn(4, '\t').collect();
                Ok(Some(Probe {
                    pane_dead: f.first() == Some(&"1"),
                    dead_status: f.get(1).and_then(|s| s.parse().ok()),
                    pane_pid: f.get(2).and_then(|s| s.parse().ok()),
                    cid: f.get(3).unwrap_or(&"").trim().to_string(),
                }))
            }
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(None),
            Err(TmuxError::NoServer(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The last lines of session `$n`'s first pane (what the agent said before it exited),
    /// empty lines left out.
    pub async fn last_lines(&self, n: TmuxId, keep: usize) -> Result<Vec<String>, TmuxError> {
        // The history too (an agent may have scrolled), and, where the pane died inside the
        // alternate screen, that screen.
        let mut c = TmuxCommand::with_name("capture-pane");
        c.push_param("-p")
            .push_param("-J")
            .push_param("-S")
            .push_param("-200")
            .push_param("-t")
            .push_param(format!("{n}:"));
        let mut out = self.run(&[c]).await?;
        let mut alt = TmuxCommand::with_name("capture-pane");
        alt.push_param("-p")
            .push_param("-a")
            .push_param("-q")
            .push_param("-t")
            .push_param(format!("{n}:"));
        if let Ok(a) = self.run(&[alt]).await {
            out.push_str(&a);
        }
        let lines: Vec<String> = out
            .lines()
            .map(|l| l.replace('\u{a0}', " ").trim().to_string())
            .filter(|l| !l.is_empty() && !l.starts_with("Pane is dead"))
            .collect();
        Ok(lines[lines.len().saturating_sub(keep)..].to_vec())
    }

    /// Set an `@` or window option of session `$n` (`None` unsets); `false` when it is gone.
    pub async fn set_on(
        &self,
        n: TmuxId,
        window: bool,
        opt: &str,
        value: Option<&str>,
    ) -> Result<bool, TmuxError> {
        let mut c = TmuxCommand::with_name("set-option");
        if window {
            c.push_param("-w");
        }
        if value.is_none() {
            c.push_param("-u");
        }
        c.push_param("-t")
            .push_param(format!("{n}:"))
            .push_param(opt.to_string());
        if let Some(v) = value {
            c.push_param(literal(v));
        }
        match self.run(&[c]).await {
            Ok(_) => Ok(true),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(false),
            Err(TmuxError::NoServer(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Kill session `$n` (one this process created); gone already is fine.
    pub async fn kill_n(&self, n: TmuxId) -> Result<(), TmuxError> {
        let mut c = TmuxCommand::with_name("kill-session");
        c.push_param("-t").push_param(format!("{n}"));
        match self.run(&[c]).await {
            Ok(_) => Ok(()),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(()),
            Err(TmuxError::NoServer(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// What the way back keeps of each of sessions `ns`, by `$N`: its kept command line
    /// (`@ccs_argv`, when it parses as a JSON array of strings) and its own environment
    /// (`show-environment -t`, the kept names only: [`crate::core::records::kept_env_name`]).
    /// Batched as the marks are: one call for a batch that fits one command line. A session that
    /// went, or a call that failed, gives none.
    pub async fn kept(&self, ns: &[TmuxId]) -> std::collections::HashMap<TmuxId, Kept> {
        let mut out: std::collections::HashMap<TmuxId, Kept> = std::collections::HashMap::new();
        if ns.is_empty() {
            return out;
        }
        let Ok(text) = self
            .per_session(ns, |n| vec![super::args::kept_command(n)])
            .await
        else {
            return out;
        };
        let mut at: Option<TmuxId> = None;
        for line in text.lines() {
            if let Some(sid) = line.strip_prefix("ENV ") {
                at = parse_sid(sid);
                if let Some(n) = at {
                    out.entry(n).or_default();
                }
                continue;
            }
            let Some(k) = at.and_then(|n| out.get_mut(&n)) else {
                continue;
            };
            if let Some(v) = line.strip_prefix("ARGV ") {
                k.argv = serde_json::from_str::<Vec<String>>(v).ok();
                continue;
            }
            if line.starts_with('@') {
                if let Some((name, v)) = crate::core::records::parse_option_line(line) {
                    k.options.insert(name, v);
                }
                continue;
            }
            if let Some((name, v)) = line.split_once('=') {
                if crate::core::records::kept_env_name(name) {
                    k.env.insert(name.to_string(), v.to_string());
                }
            }
        }
        out
    }

    /// The server's global environment for `names` (`show-environment -g`): `Some(value)` set,
    /// `None` removed (`-NAME`); a name it does not hold is left out. Empty when no server runs.
    pub async fn global_env(&self, names: &[&str]) -> Vec<(String, Option<String>)> {
        let mut c = TmuxCommand::with_name("show-environment");
        c.push_param("-g");
        let Ok(text) = self.run(&[c]).await else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|l| match l.strip_prefix('-') {
                Some(k) if names.contains(&k) => Some((k.to_string(), None)),
                Some(_) => None,
                None => {
                    let (k, v) = l.split_once('=')?;
                    names
                        .contains(&k)
                        .then(|| (k.to_string(), Some(v.to_string())))
                }
            })
            .collect()
    }

    /// A `/compact` begins on `name`: unless a reap holds it, mark a turn that starts now and
    /// is the compaction's own (`@ccs_compact`), when no turn is marked; a turn already marked
    /// is kept as it is. One guarded call; `false` when the session is gone.
    pub async fn mark_compact(&self, name: &str, now_ms: i64) -> Result<bool, TmuxError> {
        let target = format!("={name}:");
        let t = super::quote(&target);
        let mut has = TmuxCommand::with_name("has-session");
        has.push_param("-t").push_param(format!("={name}"));
        let mut c = TmuxCommand::with_name("if-shell");
        c.push_param("-F")
            .push_param("-t")
            .push_param(target.clone())
            .push_param("#{&&:#{==:#{@ccs_reaping},},#{==:#{@ccs_turn},}}")
            .push_param(format!(
                "set-option -t {t} @ccs_turn {now_ms} ; set-option -t {t} @ccs_compact 1"
            ));
        match self.run(&[has, c]).await {
            Ok(_) => Ok(true),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(false),
            Err(TmuxError::NoServer(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A `/compact` ended on `name`: `Some(true)` when the turn marked was its own (then
    /// `@ccs_compact` is cleared, in the same call), `Some(false)` when not, `None` when gone.
    pub async fn end_compact(&self, name: &str) -> Result<Option<bool>, TmuxError> {
        let target = format!("={name}:");
        let t = super::quote(&target);
        let mut has = TmuxCommand::with_name("has-session");
        has.push_param("-t").push_param(format!("={name}"));
        let mut c = TmuxCommand::with_name("if-shell");
        c.push_param("-F")
            .push_param("-t")
            .push_param(target.clone())
            .push_param("#{!=:#{@ccs_compact},}")
            .push_param(format!(
                "set-option -u -t {t} @ccs_compact ; display-message -p own"
            ))
            .push_param(format!("display-message -p -t {t} other"));
        match self.run(&[has, c]).await {
            Ok(out) => Ok(Some(out.trim() == "own")),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(None),
            Err(TmuxError::NoServer(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The command line that attaches a terminal to session `name` on this server.
    ///
    /// From inside a client of this server (`inside`), `switch-client` instead: an `attach`
    /// there would nest tmux in its own pane.
    pub fn attach_argv(&self, name: &str, inside: bool) -> Vec<String> {
        let mut v = vec!["tmux".to_string()];
        match &self.socket {
            Socket::Name(n) => v.extend(["-L".to_string(), n.clone()]),
            Socket::Path(p) => v.extend(["-S".to_string(), p.to_string_lossy().into_owned()]),
        }
        let verb = if inside { "switch-client" } else { "attach" };
        v.extend([verb.into(), "-t".into(), format!("={name}")]);
        v
    }
}

/// `new-session -d -P -c <cwd> -s <name> -- [env K=V ...] <argv...>`, printing the new
/// session's `$N` and its pane's pid.
fn new_session_command(name: &str, cwd: &str, start: &Start<'_>) -> TmuxCommand<'static> {
    let mut c = TmuxCommand::with_name("new-session");
    c.push_param("-d")
        .push_param("-P")
        .push_param("-F")
        .push_param("#{session_id} #{pane_pid}")
        .push_param("-c")
        .push_param(super::format_literal(cwd))
        .push_param("-s")
        .push_param(name.to_string());
    c.push_param("--");
    // The extra environment as `env K=V` words before the command, not `new-session -e`,
    // which tmux 3.1c lacks (3.2 added it); `env` execs the command, so the pane's pid is
    // still the agent's own.
    if !start.env.is_empty() {
        c.push_param("env");
        for (k, v) in start.env {
            c.push_param(literal(&format!("{k}={v}")));
        }
    }
    for a in start.argv {
        c.push_param(literal(a));
    }
    c
}

/// What is set on the new session `name` in the same call as its `new-session`: its
/// environment and the studio's `@` options as the studio left them, `remain-on-exit`, the
/// chat's own pane (`@ccs_pane`), `@ccs_argv` (`argv_json`), and, when given, `@ccs_agent` and
/// `@ccs_cid`.
fn kept_settings(name: &str, start: &Start<'_>, argv_json: &str) -> Vec<TmuxCommand<'static>> {
    let target = format!("={name}:");
    let mut keep = TmuxCommand::with_name("set-option");
    keep.push_param("-w")
        .push_param("-t")
        .push_param(target.clone())
        .push_param("remain-on-exit")
        .push_param("on");
    // The new pane is the chat's own (`@ccs_pane`, `%N:pid`, read by the server itself).
    let mut pane = TmuxCommand::with_name("set-option");
    pane.push_param("-F")
        .push_param("-t")
        .push_param(target.clone())
        .push_param(crate::core::policy::chat_pane::PANE_OPTION)
        .push_param("#{pane_id}:#{pane_pid}");
    let mut cmds = Vec::new();
    // The session's own environment as the studio left it (its `CCS_CFG`), in the same call:
    // no client sees the new session without it. Values passed literally (no format, no
    // expansion: `set-environment` without -F expands nothing).
    for (k, v) in start
        .session_env
        .iter()
        .filter(|(k, _)| crate::core::records::kept_env_name(k))
    {
        let mut e = TmuxCommand::with_name("set-environment");
        e.push_param("-t")
            .push_param(format!("={name}"))
            .push_param(k.clone())
            .push_param(literal(v));
        cmds.push(e);
    }
    // And the studio's own `@` options, literally (a `set-option` value is not a format).
    for (k, v) in start
        .options
        .iter()
        .filter(|(k, _)| crate::core::records::kept_option_name(k))
    {
        cmds.push(set_opt(&target, k, v));
    }
    cmds.extend([keep, pane, set_opt(&target, ARGV_OPTION, argv_json)]);
    if let Some(agent) = start.agent {
        cmds.push(set_opt(&target, AGENT_OPTION, agent));
    }
    if let Some(cid) = start.cid {
        cmds.push(set_opt(&target, "@ccs_cid", cid));
    }
    cmds
}

/// The new session as `new-session -P` printed it (`$N <pane pid>`).
fn created(out: &str) -> Result<Created, TmuxError> {
    let mut it = out.split_whitespace();
    let n = it.next().and_then(parse_sid);
    let pid = it.next().and_then(|p| p.parse().ok());
    match (n, pid) {
        (Some(n), Some(pane_pid)) => Ok(Created { n, pane_pid }),
        _ => Err(TmuxError::Failed {
            cmd: "new-session".into(),
            stderr: format!("unexpected answer {out:?}"),
        }),
    }
}

fn set_opt(target: &str, opt: &str, value: &str) -> TmuxCommand<'static> {
    let mut c = TmuxCommand::with_name("set-option");
    c.push_param("-t")
        .push_param(target.to_string())
        .push_param(opt.to_string())
        .push_param(literal(value));
    c
}
