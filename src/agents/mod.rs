//! The agent seam: what ccs-reap must know about one agent CLI (Claude Code first), as one
//! descriptor per agent, one file per agent.
//!
//! An [`Agent`] is data and plain functions: its name; how its conversation id is learned; which
//! of its hook events begin and end a turn, compact, start and end a session ([`HookNames`]) and
//! what each payload means to ccs-reap ([`HookAction`]); how a chat is resumed or started afresh
//! with the same id ([`Agent::resume_argv`]); where its transcripts and its per-process status
//! files live and what a status file says ([`AgentStatus`]); the hook settings it is given.
//!
//! Everything here is pure: no I/O, no clock, nothing run. Functions take what the caller read
//! (an argv, a cwd already made canonical, the agent's environment, a file's text) and return a
//! decision or a path; the caller does the reading, the checking against the live process and the
//! acting. See `docs/agents.md`.

use std::path::{Path, PathBuf};

pub mod claude;
pub mod codex;
pub mod gemini;
mod kept;
pub mod named;
mod turns;

pub use kept::{agent_name, kept_argv};

pub use claude::CLAUDE;
pub use codex::CODEX;
pub use gemini::GEMINI;

/// The agent of a pane's start command as tmux shows it (`#{pane_start_command}`: the words
/// joined by spaces, a word with spaces or quotes in it quoted): its words split on spaces,
/// surrounding quotes dropped. Best effort, for the record only.
pub fn of_start_command(cmd: &str) -> Option<&'static Agent> {
    let words: Vec<String> = cmd
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_string())
        .collect();
    let at = words
        .iter()
        .position(|w| ALL.iter().any(|a| (a.is_program_word)(w)))?;
    of_argv(&words[..=at])
}

/// The agent a session's panes run, from their start commands (the first one that names one).
pub fn of_panes(panes: &[crate::core::policy::Pane]) -> Option<&'static Agent> {
    panes
        .iter()
        .find_map(|p| of_start_command(&p.start_command))
}

/// Every agent ccs-reap knows, in the order a name is looked up.
pub const ALL: &[&Agent] = &[&CLAUDE, &CODEX, &GEMINI];

/// The agent whose program a command line runs (behind `env`, `npx`, `node`), in [`ALL`]'s order.
pub fn of_argv(argv: &[String]) -> Option<&'static Agent> {
    let words = words_of_shell_string(argv)
        .ok()?
        .unwrap_or_else(|| argv.to_vec());
    ALL.iter()
        .copied()
        .find(|a| program_index(a, &words).is_ok())
}

/// The agent called `name` (its [`Agent::name`], as recorded in a tombstone or `@ccs_` option).
pub fn by_name(name: &str) -> Option<&'static Agent> {
    ALL.iter().copied().find(|a| a.name == name)
}

/// The agent a running process IS (its program among its first two words: `claude ...`,
/// `node .../gemini`), not a shell or another program whose arguments mention one.
pub fn of_process(argv: &[String]) -> Option<&'static Agent> {
    ALL.iter()
        .copied()
        .find(|a| argv.iter().take(2).any(|w| (a.is_program_word)(w)))
}

/// Who fired a hook, from the hook process's ancestors (nearest first, each with its argv) and
/// the pid of the pane it names (`TMUX_PANE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FiredBy {
    /// The chat's own agent: the nearest agent among the ancestors is the pane's process or
    /// below it, with no other agent between it and the pane.
    Own,
    /// An agent that the chat's agent started (a `claude -p` run by a tool, a sub-agent), or one
    /// outside the pane's tree that inherited its `TMUX_PANE`: its pid and name, and why.
    Nested {
        pid: u32,
        agent: &'static str,
        why: String,
    },
    /// No agent among the ancestors (a hook run by hand, or by a launcher this reaper does not
    /// know): judged as before, by the pane alone.
    NoAgent,
}

/// Which agent fired a hook ([`FiredBy`]), pure: `chain` is the hook's ancestors, nearest first.
pub fn fired_by(chain: &[(u32, Vec<String>)], pane_pid: u32) -> FiredBy {
    let Some(at) = chain
        .iter()
        .position(|(_, argv)| of_process(argv).is_some())
    else {
        return FiredBy::NoAgent;
    };
    let (pid, argv) = &chain[at];
    let agent = of_process(argv).map_or("agent", |a| a.name);
    if *pid == pane_pid {
        return FiredBy::Own;
    }
    for (up, argv) in &chain[at + 1..] {
        if *up == pane_pid && of_process(argv).is_none() {
            return FiredBy::Own;
        }
        if let Some(outer) = of_process(argv) {
            return FiredBy::Nested {
                pid: *pid,
                agent,
                why: format!(
                    "{agent} (pid {pid}) was started by {} (pid {up}), the chat's own agent",
                    outer.name
                ),
            };
        }
    }
    FiredBy::Nested {
        pid: *pid,
        agent,
        why: format!(
            "{agent} (pid {pid}) does not run in the chat's pane (pid {pane_pid}): it only inherited its TMUX_PANE"
        ),
    }
}

/// An agent's environment, as `NAME=value` pairs (from `/proc/<pid>/environ` or what `spawn`
/// gives it); repeated names: the last wins.
pub type Env = [(String, String)];
/// See [`Agent::resume_argv`].
pub type ResumeArgvFn = fn(&[String], &str, bool) -> Result<ResumePlan, ArgvError>;
/// See [`Agent::transcript_path`].
pub type TranscriptPathFn = fn(&Env, &Path, &str) -> Result<PathBuf, PathError>;
/// See [`Agent::status_path`].
pub type StatusPathFn = fn(&Env, u32) -> Result<PathBuf, PathError>;
/// See [`Agent::parse_status`].
pub type ParseStatusFn = fn(&str) -> Result<AgentStatus, StatusError>;
/// See [`Agent::transcript_kind`].
pub type TranscriptKindFn = fn(&str, &str) -> Transcript;

/// One agent CLI.
#[derive(Debug)]
pub struct Agent {
    /// The name recorded with a chat and given on the command line (`claude`).
    pub name: &'static str,
    /// The name people read (`Claude Code`).
    pub display: &'static str,
    /// Where its conversation id comes from, in the order they are trusted.
    pub id_sources: &'static [IdSource],
    /// Its hook events, by what they mean to ccs-reap.
    pub hooks: HookNames,
    /// What one hook payload (the JSON object on the hook's stdin) does to the chat.
    pub hook_action: fn(&serde_json::Value) -> HookAction,
    /// Whether one word of a command line starts this agent (`claude`, `/opt/x/claude`, ...).
    pub is_program_word: fn(&str) -> bool,
    /// The conversation id a command line passes to the agent, if it passes one.
    pub cid_in_argv: fn(&[String]) -> Option<String>,
    /// The command that brings back conversation `cid` (see [`ResumePlan`]), from a saved or
    /// given command line; `transcript_exists` is what the caller found at
    /// [`Agent::transcript_path`].
    pub resume_argv: ResumeArgvFn,
    /// The command line as kept in a tombstone: its own resume/id flags dropped, as words (a
    /// plain one-word shell string split), so that [`Agent::resume_argv`] can replay it.
    pub bare_argv: fn(&[String]) -> Result<Vec<String>, ArgvError>,
    /// Where the transcript of `cid` lives, for an agent running in `cwd` (canonical: the agent
    /// resolves links) with `env` (its environment; `HOME` among it).
    pub transcript_path: TranscriptPathFn,
    /// Whether [`Agent::transcript_path`] is a glob pattern (`*` in its components) that the
    /// caller expands, not one path: an agent whose file name holds a date or a project name it
    /// chose (Codex, Gemini CLI). The transcript exists when the pattern matches a file.
    pub transcript_glob: bool,
    /// What a file found at [`Agent::transcript_path`] is, by the agent's own rules, read from
    /// its text and the conversation id: `None` when any file there is the conversation's, and
    /// resumable (Claude Code, Codex: no file before the first turn). Gemini CLI writes its file
    /// at launch: one with no user message is [`Transcript::Unused`].
    pub transcript_kind: Option<TranscriptKindFn>,
    /// The variables of the agent's environment that its paths ([`Agent::transcript_path`],
    /// [`Agent::status_path`]) depend on beside `HOME`: what the caller reads for them.
    pub env_vars: &'static [&'static str],
    /// Where the agent's per-process status file for `pid` lives, if it writes one.
    pub status_path: Option<StatusPathFn>,
    /// Parse a status file's text (garbage, a torn read and an unknown version are errors).
    pub parse_status: Option<ParseStatusFn>,
    /// Environment for a claude that ccs-reap resumes, and why (set for that process only).
    pub resume_env: &'static [(&'static str, &'static str)],
    /// Environment for every chat of this agent that ccs-reap starts, fresh or resumed (Gemini
    /// CLI: `GEMINI_CLI_NO_RELAUNCH=true`, one process instead of two).
    pub start_env: &'static [(&'static str, &'static str)],
    /// The hook settings fragment, given the one command every wired event runs.
    pub hook_settings: fn(&str) -> serde_json::Value,
    /// How its process tree looks, for the people reading the docs and the teardown.
    pub process_tree: &'static str,
    /// Whether it picks the conversation id only at the first prompt (Codex CLI): a chat of it
    /// that never had a prompt has no id by design, and nothing to lose.
    pub cid_at_first_prompt: bool,
    /// How a user wires its hooks, so that its chats' ids and turns are told (`status`, `doctor`).
    pub hooks_fix: &'static str,
}

/// How to wire the hooks of a chat's agent; an agent not known is taken for Claude Code, as
/// `spawn` takes it.
pub fn hooks_fix(agent: Option<&Agent>) -> &'static str {
    agent.unwrap_or(&CLAUDE).hooks_fix
}

/// Where an agent's conversation id is learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSource {
    /// A field of a hook event's payload (`SessionStart`'s `session_id`).
    Hook {
        event: &'static str,
        field: &'static str,
    },
    /// A flag of its own command line (`--session-id <id>`, `--resume <id>`).
    Argv { flags: &'static [&'static str] },
    /// A field of its per-process status file (`sessionId`).
    StatusFile { field: &'static str },
}

/// An agent's hook events, by what they mean to ccs-reap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookNames {
    /// Fires as the agent starts (or resumes, or clears, or compacts): carries the id.
    pub session_start: &'static str,
    /// A prompt was submitted: a turn begins.
    pub turn_begin: &'static [&'static str],
    /// The agent answered: the turn ends.
    pub turn_end: &'static [&'static str],
    /// A compaction begins / ends.
    pub compact_begin: Option<&'static str>,
    pub compact_end: Option<&'static str>,
    /// The agent is exiting.
    pub session_end: Option<&'static str>,
}

impl HookNames {
    /// Every event the hook settings wire, in the order they are written.
    pub fn wired(&self) -> Vec<&'static str> {
        let mut out = vec![self.session_start];
        out.extend(self.turn_begin);
        out.extend(self.turn_end);
        out.extend(self.compact_begin);
        out.extend(self.compact_end);
        out.extend(self.session_end);
        out
    }
}

/// What one hook event does to the chat (the typed events the engine acts on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookAction {
    /// The chat's conversation id is this (a valid cid).
    SetCid(String),
    /// A turn begins (never waiting: a chat that a reap holds blocks the prompt).
    TurnBegin,
    /// The turn ends and the idle clock starts.
    TurnEnd,
    /// The chat is busy: a turn is marked if none is (its start kept), unless a reap holds it.
    Busy,
    /// The turn is cleared (the agent is exiting); the idle clock is left alone.
    ClearTurn,
    /// A compaction the user asked for begins: busy; with no turn running, the turn marked is
    /// the compaction's own.
    CompactBegin,
    /// That compaction ended: the turn ends only when it was the compaction's own (one that a
    /// running turn set off, as the "resume from summary" dialog does, never closes that turn).
    CompactEnd,
    /// Nothing to do, and why.
    Nothing(String),
}

/// How a chat is brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// Its transcript exists: resume it, history and all.
    Resume,
    /// No transcript (it never had a turn, or it was cleaned up): a new chat with the same id,
    /// nothing lost.
    Fresh,
    /// No transcript, and the id cannot be chosen up front (Claude Code's `--session-id` takes
    /// only a UUID): a new chat under a new id, which the caller learns as for any new chat.
    FreshNewId,
}

/// What is found of a conversation's transcript, by its agent's own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transcript {
    /// The agent resumes it (`--resume <id>` finds it).
    Resumable,
    /// A file of that conversation is there, but holds nothing the agent resumes (no user
    /// message): the agent neither resumes it nor lets the id be chosen again (Gemini CLI 0.61.0:
    /// "No previous sessions found for this project." for `--resume <id>`, "Session ID ...
    /// already exists" for `--session-id <id>`). Nothing was said in it: the chat starts afresh
    /// under a new id ([`StartMode::FreshNewId`]), the file left as it is.
    Unused,
    /// No file of that conversation (a file whose name matches is another's).
    Missing,
}

/// The command that brings a chat back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePlan {
    /// The words to run (never through a shell).
    pub argv: Vec<String>,
    pub mode: StartMode,
}

/// Why a command line cannot be turned into a resume.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgvError {
    #[error("the command is empty")]
    Empty,
    #[error("the conversation id {0:?} is not valid ([A-Za-z0-9_-], not starting with '-')")]
    BadCid(String),
    #[error("no {agent} program found in the command {argv:?}")]
    NoProgram {
        agent: &'static str,
        argv: Vec<String>,
    },
    #[error(
        "the command {0:?} is one shell string with quoting or shell syntax in it: \
         it cannot be rewritten safely; give it as separate words"
    )]
    ShellString(String),
    #[error("the command {argv:?} runs its program through {launcher:?}, which ccs-reap does not rewrite")]
    Launcher { launcher: String, argv: Vec<String> },
    #[error("the command {argv:?} runs the {agent} subcommand {word:?}, which is not a chat ccs-reap can resume")]
    Subcommand {
        agent: &'static str,
        word: String,
        argv: Vec<String>,
    },
    #[error("{word:?} in {argv:?} combines short flags with one ccs-reap must replace; spell them apart")]
    Combined { word: String, argv: Vec<String> },
}

/// Why a path cannot be told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("neither {var} nor HOME is set in the agent's environment")]
    NoHome { var: &'static str },
    #[error("{var} is set but empty in the agent's environment: unset it or name a directory")]
    EmptyVar { var: &'static str },
    #[error("{what} {path:?} is not absolute")]
    NotAbsolute { what: &'static str, path: PathBuf },
    #[error("{what} {path:?} is not UTF-8")]
    NotUtf8 { what: &'static str, path: PathBuf },
    #[error("the conversation id {0:?} is not valid")]
    BadCid(String),
}

/// What an agent's per-process status file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentStatus {
    /// The process that wrote it (the pane's own process, for Claude Code).
    pub pid: u32,
    /// That process's start time as the kernel gives it: field 22 of `/proc/<pid>/stat`, in
    /// clock ticks since boot. The caller compares it with the live process's before trusting
    /// the file: a pid is reused, and a SIGKILLed agent leaves its file behind.
    pub proc_start: u64,
    /// The conversation id (a valid cid).
    pub session_id: String,
    pub state: AgentState,
    /// The agent's version that wrote it.
    pub version: String,
    /// The agent's cwd, as written.
    pub cwd: String,
}

impl AgentStatus {
    /// Whether this file is the live process's: same pid, same start time. The caller reads
    /// `proc_start_now` from `/proc/<pid>/stat` of the pid it names (in the same pid namespace).
    pub fn is_of(&self, pid: u32, proc_start_now: u64) -> bool {
        self.pid == pid && self.proc_start == proc_start_now
    }
}

/// The state a status file gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentState {
    /// At its prompt, nothing running.
    Idle,
    /// A turn runs (a request, a tool).
    Busy,
    /// A permission dialog waits for the user.
    Waiting,
    /// A background shell runs.
    Shell,
}

impl AgentState {
    /// Whether this keeps the chat busy (everything but `Idle`).
    pub fn keeps_busy(self) -> bool {
        !matches!(self, AgentState::Idle)
    }
}

/// Why a status file is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    #[error("the status file is not the expected JSON (garbage or a torn read): {0}")]
    Garbage(String),
    #[error("the status file was written by version {0:?}, which ccs-reap does not know")]
    UnknownVersion(String),
    #[error("the status file's status {0:?} is not one ccs-reap knows")]
    UnknownState(String),
    #[error("the status file's {field} {value:?} is not valid")]
    BadField { field: &'static str, value: String },
}

/// A value of `env` (the agent's environment, as `NAME=value` pairs), the last one winning as in
/// `env(1)`.
pub fn env_get<'a>(env: &'a Env, name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Where the agent's own words begin in `argv`: the index of its program word, found behind
/// `env [-i] [-u NAME] [NAME=value] ...` and `npx [-y] ...` (either may come first), as words
/// (no shell). `Err` when there is none, or a launcher form ccs-reap does not rewrite
/// (`env -S`, `npx -c`: a shell string).
pub fn program_index(agent: &Agent, argv: &[String]) -> Result<usize, ArgvError> {
    let no_program = || ArgvError::NoProgram {
        agent: agent.display,
        argv: argv.to_vec(),
    };
    let launcher = |w: &str| ArgvError::Launcher {
        launcher: w.to_string(),
        argv: argv.to_vec(),
    };
    let mut i = 0;
    // Named by `env CCS_REAP_AGENT=<name>` ([`named`]): the program past the launchers, whatever
    // its name (a studio's launcher script), is this agent's.
    let mut named = false;
    while let Some(w) = argv.get(i) {
        if (agent.is_program_word)(w) {
            return Ok(i);
        }
        match base(w) {
            "env" => {
                let next = skip_env(argv, i + 1).ok_or_else(|| launcher(w))?;
                match named::named_in(&argv[i + 1..next.min(argv.len())]) {
                    Some(n) if n == agent.name => named = true,
                    Some(_) => return Err(no_program()),
                    None => {}
                }
                i = next;
            }
            "npx" | "bunx" | "pnpx" => i = skip_npx(argv, i + 1).ok_or_else(|| launcher(w))?,
            "node" | "nodejs" | "bun" => {
                // `node [options] <script>`: the script must be the agent's.
                i = skip_node(argv, i + 1).ok_or_else(|| launcher(w))?;
                return match argv.get(i) {
                    Some(s) if named || (agent.is_program_word)(s) => Ok(i),
                    _ => Err(no_program()),
                };
            }
            _ if named => return Ok(i),
            _ => return Err(no_program()),
        }
    }
    Err(no_program())
}

/// The command line a chat runs, from its pane process's `/proc/<pid>/cmdline`: tmux runs a
/// one-word command as `sh -c '<cmd>'`, so that is `[<cmd>]`, the one-word command it was given.
pub fn pane_words(cmdline: &[String]) -> Vec<String> {
    match cmdline {
        [sh, c, cmd] if c == "-c" && matches!(base(sh), "sh" | "bash" | "dash" | "zsh") => {
            vec![cmd.clone()]
        }
        _ => cmdline.to_vec(),
    }
}

/// What the launcher words before the program change in its environment: `env NAME=value` sets,
/// `env -u NAME` removes (`None`), in order. Only `env`'s own words are read.
pub fn argv_env(argv: &[String]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    if argv.first().is_none_or(|w| base(w) != "env") {
        return out;
    }
    let mut i = 1;
    while let Some(w) = argv.get(i) {
        match w.as_str() {
            "-u" | "--unset" => {
                if let Some(n) = argv.get(i + 1) {
                    out.push((n.clone(), None));
                }
                i += 2;
            }
            s if s.starts_with("--unset=") => {
                out.push((s["--unset=".len()..].to_string(), None));
                i += 1;
            }
            s if s.starts_with('-') => i += 1,
            s => match s.split_once('=') {
                Some((k, v)) if !k.is_empty() => {
                    out.push((k.to_string(), Some(v.to_string())));
                    i += 1;
                }
                _ => break,
            },
        }
    }
    out
}

/// How to bring back conversation `cid` from command line `argv`: resumed when its transcript is
/// there (`Some(Resumable)`) or cannot be looked for (`None`: the agent says if it is not), unless
/// a start from it already failed (`failed_before`); else started afresh under the same id. A
/// transcript the agent neither resumes nor lets be reused ([`Transcript::Unused`]) is started
/// afresh under a new id, whatever was tried before: the command without its id flags.
pub fn plan_start(
    agent: &Agent,
    argv: &[String],
    cid: &str,
    transcript: Option<Transcript>,
    failed_before: bool,
) -> Result<ResumePlan, ArgvError> {
    if transcript == Some(Transcript::Unused) {
        if !crate::core::policy::valid_cid(cid) {
            return Err(ArgvError::BadCid(cid.to_string()));
        }
        return Ok(ResumePlan {
            argv: (agent.bare_argv)(argv)?,
            mode: StartMode::FreshNewId,
        });
    }
    let exists = transcript.is_none_or(|t| t == Transcript::Resumable) && !failed_before;
    (agent.resume_argv)(argv, cid, exists)
}

/// The last component of a path word.
pub(crate) fn base(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

/// Past `env`'s options and assignments: the index of its program word, `None` for a form that
/// runs a shell string (`-S`, `--split-string`).
fn skip_env(argv: &[String], mut i: usize) -> Option<usize> {
    while let Some(w) = argv.get(i) {
        match w.as_str() {
            "-S" | "--split-string" => return None,
            s if s.starts_with("-S") || s.starts_with("--split-string=") => return None,
            "--" => return Some(i + 1),
            "-u" | "--unset" | "-C" | "--chdir" => i += 2,
            "-i" | "-0" | "-v" | "--ignore-environment" | "--null" | "--debug" | "-" => i += 1,
            s if s.starts_with("--unset=") || s.starts_with("--chdir=") => i += 1,
            s if s.starts_with("-u") || s.starts_with("-C") => i += 1,
            s if s.starts_with('-') => return None,
            s if s.contains('=') => i += 1,
            _ => return Some(i),
        }
    }
    Some(i)
}

/// Past `npx`'s options: the index of its program word, `None` for `-c` / `--call` (a shell
/// string) or an option it does not know.
fn skip_npx(argv: &[String], mut i: usize) -> Option<usize> {
    while let Some(w) = argv.get(i) {
        match w.as_str() {
            "--" => return Some(i + 1),
            "-p" | "--package" => i += 2,
            "-y" | "--yes" | "--no" | "--no-install" | "-q" | "--quiet" | "--prefer-offline"
            | "--offline" => i += 1,
            s if s.starts_with("--package=") => i += 1,
            s if s.starts_with('-') => return None,
            _ => return Some(i),
        }
    }
    Some(i)
}

/// Past `node`'s options: the index of its script, `None` for `-e` / `-p` (inline code).
fn skip_node(argv: &[String], mut i: usize) -> Option<usize> {
    while let Some(w) = argv.get(i) {
        match w.as_str() {
            "--" => return Some(i + 1),
            "-e" | "--eval" | "-p" | "--print" => return None,
            "-r" | "--require" | "--import" | "--loader" | "--experimental-loader" => i += 2,
            s if s.starts_with('-') => i += 1,
            _ => return Some(i),
        }
    }
    Some(i)
}

/// A one-word command that is a shell string (`"claude --model x"`), split into words when that
/// is safe: only plain words (letters, digits and `-_./=:,+@%`) between single spaces. `Ok(None)`
/// for a command that is not one such string.
pub fn words_of_shell_string(argv: &[String]) -> Result<Option<Vec<String>>, ArgvError> {
    let [one] = argv else { return Ok(None) };
    if !one.contains(char::is_whitespace) {
        return Ok(None);
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !one.chars().all(|c| c == ' ' || plain(c)) {
        return Err(ArgvError::ShellString(one.clone()));
    }
    Ok(Some(
        one.split(' ')
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect(),
    ))
}

#[cfg(test)]
mod fired_by_tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    /// Which agent fired a hook, from its ancestors (nearest first); the pane's process is 10.
    #[test]
    fn the_chats_own_agent_fires_its_hooks_and_a_nested_one_does_not() {
        let sh = argv(&["/bin/sh", "-c", "ccs-reap claude-hook"]);
        let claude = argv(&["/usr/bin/claude", "--resume", "c"]);
        let gemini = argv(&["node", "/usr/lib/node_modules/.bin/gemini", "-p", "hi"]);
        let bash = argv(&["bash", "-c", "claude -p hi"]);
        let tmux_sh = argv(&["sh", "-c", "claude --resume c"]);
        type Row = (&'static str, Vec<(u32, Vec<String>)>, &'static str);
        let table: Vec<Row> = vec![
            (
                "claude is the pane's process (exec)",
                vec![(20, sh.clone()), (10, claude.clone()), (1, argv(&["tmux"]))],
                "own",
            ),
            (
                "claude is the child of the pane's sh -c",
                vec![
                    (20, sh.clone()),
                    (11, claude.clone()),
                    (10, tmux_sh.clone()),
                ],
                "own",
            ),
            (
                "claude below a launcher script below the pane",
                vec![
                    (20, sh.clone()),
                    (12, claude.clone()),
                    (11, argv(&["bash", "/opt/run-claude.sh"])),
                    (10, tmux_sh.clone()),
                ],
                "own",
            ),
            (
                "claude -p run by the chat's claude through a tool's shell",
                vec![
                    (30, sh.clone()),
                    (21, claude.clone()),
                    (20, bash.clone()),
                    (11, claude.clone()),
                    (10, tmux_sh.clone()),
                ],
                "nested",
            ),
            (
                "gemini -p run by the chat's claude",
                vec![
                    (30, sh.clone()),
                    (21, gemini.clone()),
                    (20, bash.clone()),
                    (10, claude.clone()),
                ],
                "nested",
            ),
            (
                "an agent outside the pane's tree (setsid, nohup) with its TMUX_PANE",
                vec![(30, sh.clone()), (21, claude.clone()), (2, argv(&["init"]))],
                "nested",
            ),
            (
                "no agent at all: a hook run by hand",
                vec![(30, sh.clone()), (5, argv(&["cargo", "test"]))],
                "none",
            ),
            ("no ancestors readable", vec![], "none"),
        ];
        for (name, chain, want) in table {
            let got = match fired_by(&chain, 10) {
                FiredBy::Own => "own",
                FiredBy::Nested { .. } => "nested",
                FiredBy::NoAgent => "none",
            };
            assert_eq!(got, want, "{name}");
        }
        match fired_by(
            &[
                (21, claude.clone()),
                (20, bash),
                (11, claude),
                (10, tmux_sh),
            ],
            10,
        ) {
            FiredBy::Nested { pid, agent, why } => {
                assert_eq!((pid, agent), (21, "claude"));
                assert!(why.contains("pid 11"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod kept_argv_tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_option_first_then_a_pane_process_then_its_child() {
        let none = |_: u32| None;
        let no_children = |_: u32| Vec::new();
        let option = words("claude --resume abc --model opus");
        let kept = kept_argv(Some(&option), &[7], none, no_children);
        assert_eq!(agent_name(kept.as_deref()).as_deref(), Some("claude"));
        assert!(kept.is_some_and(|k| !k.iter().any(|w| w == "abc")));
        // No option: the pane's own process, through `sh -c '<cmd>'`.
        let sh = |pid: u32| (pid == 7).then(|| vec!["sh".into(), "-c".into(), "claude".into()]);
        assert_eq!(
            kept_argv(None, &[7], sh, no_children),
            Some(words("claude"))
        );
        // A shell that is no agent: its child's argv.
        let child = |pid: u32| match pid {
            7 => Some(words("bash")),
            8 => Some(words("codex")),
            _ => None,
        };
        let kept = kept_argv(
            None,
            &[7],
            child,
            |pid| if pid == 7 { vec![8] } else { vec![] },
        );
        assert_eq!(agent_name(kept.as_deref()).as_deref(), Some("codex"));
        assert_eq!(kept_argv(None, &[7], none, no_children), None);
        assert_eq!(agent_name(None), None);
    }
}
