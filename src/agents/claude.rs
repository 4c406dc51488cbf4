//! Claude Code's descriptor: what ccs-reap knows of it, measured against the pinned 2.1.332
//! (`tests/e2e/NOTES.md`, "The agent seam: Claude Code 2.1.332 measured").

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{
    base, env_get, program_index, words_of_shell_string, Agent, AgentState, AgentStatus, ArgvError,
    Env, HookAction, HookNames, IdSource, PathError, ResumePlan, StartMode, StatusError,
};
use crate::core::policy::valid_cid;

/// Claude Code.
pub static CLAUDE: Agent = Agent {
    name: "claude",
    display: "Claude Code",
    id_sources: &[
        IdSource::Argv {
            flags: &["--session-id", "--resume", "-r"],
        },
        IdSource::Hook {
            event: "SessionStart",
            field: "session_id",
        },
        IdSource::StatusFile { field: "sessionId" },
    ],
    hooks: HOOKS,
    hook_action,
    is_program_word,
    cid_in_argv,
    resume_argv,
    bare_argv,
    transcript_path,
    transcript_glob: false,
    transcript_kind: None,
    cid_at_first_prompt: false,
    hooks_fix: "ccs-reap claude-settings --write ~/.claude/settings.json, then restart claude",
    env_vars: &[CONFIG_DIR_VAR, PROJECT_DIR_NAME_VAR],
    status_path: Some(status_path),
    parse_status: Some(parse_status),
    resume_env: RESUME_ENV,
    start_env: &[],
    hook_settings,
    process_tree: "claude is one native process (no node): the pane's process when started as \
                   words, the child of `sh -c` when started as one shell string (its status file \
                   is named after claude's pid, not the shell's); its MCP servers are its \
                   children, in its session and process group; while it starts it briefly runs \
                   a copy of itself with the same argv, `sh` and a `tmux` client",
};

/// Claude Code's hook events (2.1.332).
pub const HOOKS: HookNames = HookNames {
    session_start: "SessionStart",
    turn_begin: &["UserPromptSubmit"],
    turn_end: &["Stop"],
    compact_begin: Some("PreCompact"),
    compact_end: Some("PostCompact"),
    session_end: Some("SessionEnd"),
};

/// The dialog "Resume from summary / Resume full session as-is / Don't ask again" is shown by a
/// `--resume` only when the conversation's last message is older than this many minutes (70 by
/// default) and larger than a token threshold, and a remotely switched flag allows it: it would
/// eat the first message typed into a resumed chat. Read from the binary (2.1.332:
/// `if (ageMinutes < (env.CLAUDE_CODE_RESUME_THRESHOLD_MINUTES ?? 70)) return null`), and
/// brought up offline end to end (tests/e2e/NOTES.md); set for the resumed claude only.
pub const RESUME_ENV: &[(&str, &str)] = &[("CLAUDE_CODE_RESUME_THRESHOLD_MINUTES", "1000000000")];

/// The variable that moves Claude Code's whole config dir (`~/.claude` otherwise).
pub const CONFIG_DIR_VAR: &str = "CLAUDE_CONFIG_DIR";
/// The variable that names the project dir instead of the cwd's slug, honoured only when
/// [`CONFIG_DIR_VAR`] is set and its value is `[A-Za-z0-9_-]{1,64}` and not a Windows device name.
pub const PROJECT_DIR_NAME_VAR: &str = "CLAUDE_CODE_PROJECT_DIR_NAME";

// ------------------------------------------------------------------------------ hook events

/// Whether a `Stop`'s `background_tasks` names work still running: a non-empty list. Absent,
/// `null` or `[]` is none; anything else (not a list) is taken as running work, the safe side.
fn background_running(v: Option<&serde_json::Value>) -> bool {
    match v {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

/// What one Claude Code hook event does (the mapping `claude-hook` acts on).
pub fn hook_action(ev: &serde_json::Value) -> HookAction {
    let field = |k: &str| ev.get(k).and_then(serde_json::Value::as_str);
    if !ev.is_object() {
        return HookAction::Nothing("the hook event is not a JSON object".into());
    }
    let name = match ev.get("hook_event_name") {
        None | Some(serde_json::Value::Null) => "",
        Some(serde_json::Value::String(s)) => s.as_str(),
        Some(other) => return HookAction::Nothing(format!("hook_event_name {other} is not text")),
    };
    match name {
        "SessionStart" => match ev.get("session_id") {
            Some(serde_json::Value::String(c)) if valid_cid(c) => HookAction::SetCid(c.clone()),
            Some(serde_json::Value::String(c)) => HookAction::Nothing(format!(
                "SessionStart with an invalid session_id {c:?}: @ccs_cid left alone"
            )),
            Some(serde_json::Value::Null) | None => {
                HookAction::Nothing("SessionStart without a session_id".into())
            }
            Some(other) => {
                HookAction::Nothing(format!("SessionStart's session_id {other} is not text"))
            }
        },
        "UserPromptSubmit" => HookAction::TurnBegin,
        "Stop" if background_running(ev.get("background_tasks")) => HookAction::Busy,
        "Stop" => HookAction::TurnEnd,
        "PreCompact" if field("trigger") == Some("manual") => HookAction::CompactBegin,
        // Inside a turn it is that turn's; outside one it is the background summary, which
        // nothing ends (see `crate::engine::claude_hook::action`).
        "PreCompact" => HookAction::Nothing("an automatic compaction runs inside its turn, or in the background (a precomputed summary, which no PostCompact or Stop follows): it marks nothing".into()),
        // A `/compact` typed at the prompt runs outside any turn: no `Stop` follows it (checked
        // with 2.1.332), so its end is the turn's end. An automatic one runs inside a turn, whose
        // `Stop` ends it.
        "PostCompact" if field("trigger") == Some("manual") => HookAction::CompactEnd,
        "PostCompact" => HookAction::Nothing("an automatic compaction ends with its turn".into()),
        "SessionEnd" => HookAction::ClearTurn,
        "" => HookAction::Nothing("no hook_event_name in the event".into()),
        other => HookAction::Nothing(format!("event {other:?} is not one ccs-reap acts on")),
    }
}

/// The hook settings fragment: `{"hooks": {<event>: [{"hooks": [{"type": "command", ...}]}]}}`
/// for every wired event, in order (as `claude-settings` writes it).
pub fn hook_settings(command: &str) -> serde_json::Value {
    let mut hooks = serde_json::Map::new();
    for ev in HOOKS.wired() {
        hooks.insert(
            ev.to_string(),
            serde_json::json!([{ "hooks": [ { "type": "command", "command": command } ] }]),
        );
    }
    serde_json::json!({ "hooks": hooks })
}

// ------------------------------------------------------------------------------ command line

/// Whether `w` starts Claude Code: a program whose basename is `claude`, `claude.exe` or
/// `*-claude`, a path through `claude-code/` (`node .../claude-code/cli.js`), or the npm package
/// `@anthropic-ai/claude-code[@version]` (as `npx` is given it).
pub fn is_program_word(w: &str) -> bool {
    let b = base(w);
    if b.starts_with('-') {
        return false;
    }
    b == "claude"
        || b == "claude.exe"
        || b.ends_with("-claude")
        || w.contains("/claude-code/")
        || w == "@anthropic-ai/claude-code"
        || w.starts_with("@anthropic-ai/claude-code@")
}

/// Options of claude 2.1.332 that take a required value: the word after one is its value even
/// when it looks like a flag (commander's rule), so `--append-system-prompt --resume` is text.
const TAKES_VALUE: &[&str] = &[
    "--agent",
    "--agents",
    "--append-system-prompt",
    "--append-system-prompt-file",
    "--autocompact",
    "--debug-file",
    "--effort",
    "--environment",
    "--fallback-model",
    "--input-format",
    "--json-schema",
    "--max-budget-usd",
    "--max-turns",
    "--model",
    "-n",
    "--name",
    "--output-format",
    "--permission-mode",
    "--permission-prompt-tool",
    "--permission-prompts",
    "--plugin-dir",
    "--plugin-url",
    "--remote-control-session-name-prefix",
    "--setting-sources",
    "--settings",
    "--system-prompt",
    "--system-prompt-file",
    "--system-prompt-snapshot",
];

/// Short flags whose value may be attached (`-rVALUE`, `-dapi`): the rest of a cluster is theirs.
const SHORT_WITH_VALUE: &[char] = &['d', 'n', 'r', 'w'];

/// What one word of claude's own arguments is, for the rewrite.
enum Word {
    /// Ours to drop, with the next word as its value when `takes_next`.
    Drop { takes_next: NextValue },
    /// Kept, with the next word kept as its value when `true`.
    Keep { value_next: bool },
    /// `--`: the rest are positional.
    EndOfOptions,
}

#[derive(Clone, Copy)]
enum NextValue {
    No,
    /// Always the next word (a required value), unless it is `--`.
    Required,
    /// The next word unless it starts with `-` (an optional value).
    Optional,
}

fn classify(w: &str) -> Result<Word, ()> {
    let drop = |takes_next| Ok(Word::Drop { takes_next });
    match w {
        "--" => return Ok(Word::EndOfOptions),
        "--resume" | "-r" => return drop(NextValue::Optional),
        "--session-id" => return drop(NextValue::Required),
        "--continue" | "-c" | "--fork-session" => return drop(NextValue::No),
        _ => {}
    }
    if w.starts_with("--resume=") || w.starts_with("--session-id=") {
        return drop(NextValue::No);
    }
    if TAKES_VALUE.contains(&w) {
        return Ok(Word::Keep { value_next: true });
    }
    // A cluster of short flags: `-rX` is `--resume X`; `-pc` is `-p -c`, which cannot lose its
    // `c` alone; a value-taking flag ends the cluster (`-dapi` is `--debug api`).
    if let Some(cluster) = w
        .strip_prefix('-')
        .filter(|c| !c.starts_with('-') && c.len() > 1)
    {
        if cluster.starts_with('r') {
            return drop(NextValue::No);
        }
        for c in cluster.chars() {
            if !c.is_ascii_alphabetic() {
                break;
            }
            if c == 'c' || c == 'r' {
                return Err(());
            }
            if SHORT_WITH_VALUE.contains(&c) {
                break;
            }
        }
    }
    Ok(Word::Keep { value_next: false })
}

/// Claude's own arguments (after its program word) without any `--resume X`, `--resume=X`,
/// `-r X`, `-rX`, `--session-id X`, `--session-id=X`, `--continue`, `-c` or `--fork-session`,
/// and where the new flags go (before a `--`).
fn strip(args: &[String], argv: &[String]) -> Result<(Vec<String>, usize), ArgvError> {
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let next = args.get(i + 1);
        match classify(w).map_err(|()| ArgvError::Combined {
            word: w.clone(),
            argv: argv.to_vec(),
        })? {
            Word::EndOfOptions => {
                let at = out.len();
                out.extend(args[i..].iter().cloned());
                return Ok((out, at));
            }
            Word::Drop { takes_next } => {
                let skip = match (takes_next, next) {
                    (NextValue::Required, Some(v)) => v != "--",
                    (NextValue::Optional, Some(v)) => !v.starts_with('-'),
                    _ => false,
                };
                i += if skip { 2 } else { 1 };
            }
            Word::Keep { value_next } => {
                out.push(w.clone());
                i += 1;
                if value_next {
                    if let Some(v) = next {
                        out.push(v.clone());
                        i += 1;
                    }
                }
            }
        }
    }
    let at = out.len();
    Ok((out, at))
}

/// Whether `s` is a UUID as `--session-id` wants it (8-4-4-4-12 hex digits, any case): claude
/// 2.1.332 refuses anything else ("Error: Invalid session ID. Must be a valid UUID.", exit 1).
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The command that brings back conversation `cid`, from a saved or given command line:
/// the command without its own resume flags (see [`strip`]), then `--resume <cid>` when the
/// transcript exists, else `--session-id <cid>` (a new chat with the same id: the transcript
/// exists once it has a turn, so `--session-id` of it would be refused as "already in use").
/// A cid that is not a UUID cannot be given to `--session-id`: then the chat starts with no id
/// flag and Claude Code picks a new one ([`StartMode::FreshNewId`]; the caller learns it from
/// `SessionStart`). A one-word command is a shell string: rewritten only when it
/// is plain words ([`words_of_shell_string`]).
pub fn resume_argv(
    argv: &[String],
    cid: &str,
    transcript_exists: bool,
) -> Result<ResumePlan, ArgvError> {
    if !valid_cid(cid) {
        return Err(ArgvError::BadCid(cid.to_string()));
    }
    if argv.is_empty() {
        return Err(ArgvError::Empty);
    }
    let words = words_of_shell_string(argv)?.unwrap_or_else(|| argv.to_vec());
    let at = program_index(&CLAUDE, &words)?;
    let (rest, insert) = strip(&words[at + 1..], argv)?;
    let (flags, mode) = if transcript_exists {
        (vec!["--resume", cid], StartMode::Resume)
    } else if is_uuid(cid) {
        (vec!["--session-id", cid], StartMode::Fresh)
    } else {
        (vec![], StartMode::FreshNewId)
    };
    let mut out: Vec<String> = words[..=at].to_vec();
    out.extend(rest[..insert].iter().cloned());
    out.extend(flags.into_iter().map(String::from));
    out.extend(rest[insert..].iter().cloned());
    Ok(ResumePlan { argv: out, mode })
}

/// The command line without its own `--resume`/`--session-id`/`--continue`/`--fork-session`
/// (see [`strip`]), as words: what a tombstone keeps, for [`resume_argv`] to replay.
pub fn bare_argv(argv: &[String]) -> Result<Vec<String>, ArgvError> {
    if argv.is_empty() {
        return Err(ArgvError::Empty);
    }
    let words = words_of_shell_string(argv)?.unwrap_or_else(|| argv.to_vec());
    let at = program_index(&CLAUDE, &words)?;
    let (rest, _) = strip(&words[at + 1..], argv)?;
    let mut out: Vec<String> = words[..=at].to_vec();
    out.extend(rest);
    Ok(out)
}

/// The conversation id a command line passes to claude: `--resume X`, `--resume=X`, `-r X`,
/// `-rX`, `--session-id X`, `--session-id=X` among claude's own options (a value of another
/// option, or anything after `--`, is not one); a valid cid or nothing. The last one wins, as
/// commander reads it.
pub fn cid_in_argv(argv: &[String]) -> Option<String> {
    let words = match words_of_shell_string(argv) {
        Ok(w) => w.unwrap_or_else(|| argv.to_vec()),
        Err(_) => return None,
    };
    let at = program_index(&CLAUDE, &words).ok()?;
    let args = &words[at + 1..];
    let mut found = None;
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let next = args.get(i + 1);
        let value: Option<&str> = match w.as_str() {
            "--" => break,
            "--resume" | "-r" => next.map(String::as_str).filter(|v| !v.starts_with('-')),
            "--session-id" => next.map(String::as_str).filter(|v| *v != "--"),
            s => s
                .strip_prefix("--resume=")
                .or_else(|| s.strip_prefix("--session-id="))
                .or_else(|| {
                    s.strip_prefix("-r")
                        .filter(|v| !v.is_empty() && !s.starts_with("--"))
                }),
        };
        let consumed_next = matches!(w.as_str(), "--resume" | "-r" | "--session-id")
            && value.is_some()
            || TAKES_VALUE.contains(&w.as_str());
        if let Some(v) = value {
            found = valid_cid(v).then(|| v.to_string());
        }
        i += if consumed_next { 2 } else { 1 };
    }
    found
}

// ------------------------------------------------------------------------------ files

/// Claude Code's config dir for an environment: `$CLAUDE_CONFIG_DIR`, else `$HOME/.claude`.
pub fn config_dir(env: &Env) -> Result<PathBuf, PathError> {
    let abs = |what, p: PathBuf| {
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(PathError::NotAbsolute { what, path: p })
        }
    };
    match env_get(env, CONFIG_DIR_VAR) {
        Some("") => Err(PathError::EmptyVar {
            var: CONFIG_DIR_VAR,
        }),
        Some(d) => abs(CONFIG_DIR_VAR, PathBuf::from(d)),
        None => match env_get(env, "HOME") {
            Some(h) if !h.is_empty() => abs("HOME", PathBuf::from(h).join(".claude")),
            _ => Err(PathError::NoHome {
                var: CONFIG_DIR_VAR,
            }),
        },
    }
}

/// The longest slug Claude Code uses whole; a longer one is cut there and given a hash.
const SLUG_MAX: usize = 200;

/// The project directory's name for a cwd, as Claude Code 2.1.332 makes it: every UTF-16 code
/// unit that is not `[A-Za-z0-9]` becomes `-` (so `é` is one `-`, `🙂` two); past 200 units, the
/// first 200, a `-` and the base-36 absolute value of the 32-bit string hash
/// (`h = 31 * h + unit`, wrapping) of the cwd itself. (Measured: `/tmp/x/p.dot_under sp` →
/// `-tmp-x-p-dot-under-sp`.)
pub fn project_slug(cwd: &str) -> String {
    let units: Vec<u16> = cwd.encode_utf16().collect();
    let slug: String = units
        .iter()
        .map(|&u| match u8::try_from(u) {
            Ok(b) if b.is_ascii_alphanumeric() => char::from(b),
            _ => '-',
        })
        .collect();
    if slug.len() <= SLUG_MAX {
        return slug;
    }
    let hash = units
        .iter()
        .fold(0i32, |h, &u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
    format!(
        "{}-{}",
        &slug[..SLUG_MAX],
        base36(i64::from(hash).unsigned_abs())
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

/// The project directory's name: [`PROJECT_DIR_NAME_VAR`] when Claude Code honours it, else the
/// cwd's [`project_slug`].
fn project_dir_name(env: &Env, cwd: &str) -> String {
    let reserved = |n: &str| {
        let l = n.to_ascii_lowercase();
        matches!(l.as_str(), "con" | "prn" | "aux" | "nul")
            || ((l.starts_with("com") || l.starts_with("lpt"))
                && l.len() == 4
                && l.as_bytes()[3].is_ascii_digit())
    };
    let named = env_get(env, PROJECT_DIR_NAME_VAR).filter(|n| {
        !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !reserved(n)
    });
    match (env_get(env, CONFIG_DIR_VAR), named) {
        (Some(d), Some(n)) if !d.is_empty() => n.to_string(),
        _ => project_slug(cwd),
    }
}

/// Where the transcript of `cid` lives: `<config dir>/projects/<project dir>/<cid>.jsonl`, for a
/// claude running in `cwd` with `env`. `cwd` must be canonical (Claude Code resolves links: a
/// claude started in a symlinked dir writes under the target's slug); making it so is the
/// caller's I/O.
pub fn transcript_path(env: &Env, cwd: &Path, cid: &str) -> Result<PathBuf, PathError> {
    if !valid_cid(cid) {
        return Err(PathError::BadCid(cid.to_string()));
    }
    if !cwd.is_absolute() {
        return Err(PathError::NotAbsolute {
            what: "the cwd",
            path: cwd.to_path_buf(),
        });
    }
    let cwd_text = cwd.to_str().ok_or_else(|| PathError::NotUtf8 {
        what: "the cwd",
        path: cwd.to_path_buf(),
    })?;
    Ok(config_dir(env)?
        .join("projects")
        .join(project_dir_name(env, cwd_text))
        .join(format!("{cid}.jsonl")))
}

/// Where claude `pid` keeps its status file: `<config dir>/sessions/<pid>.json`.
pub fn status_path(env: &Env, pid: u32) -> Result<PathBuf, PathError> {
    Ok(config_dir(env)?
        .join("sessions")
        .join(format!("{pid}.json")))
}

/// The fields of a status file that matter (2.1.332 writes more: `startedAt`, `kind`,
/// `entrypoint`, `pidDomain`, `messagingSocketPath`, `name`, `updatedAt`, `statusUpdatedAt`, ...).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    pid: u32,
    session_id: String,
    cwd: String,
    proc_start: String,
    version: String,
    status: String,
}

/// Whether status files of this Claude Code version are read: 2.1.x (the format measured).
pub fn known_status_version(v: &str) -> bool {
    let mut it = v.split('.');
    let (Some(major), Some(minor), Some(patch), None) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return false;
    };
    major == "2" && minor == "1" && !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit())
}

/// Parse a status file. Claude Code rewrites it in place (write from offset 0, then truncate),
/// so a read can catch the new text followed by the tail of the old: trailing text, like any
/// garbage, is an error, and the caller reads again later.
pub fn parse_status(text: &str) -> Result<AgentStatus, StatusError> {
    let raw: RawStatus =
        serde_json::from_str(text).map_err(|e| StatusError::Garbage(e.to_string()))?;
    if !known_status_version(&raw.version) {
        return Err(StatusError::UnknownVersion(raw.version));
    }
    let state = match raw.status.as_str() {
        "idle" => AgentState::Idle,
        "busy" => AgentState::Busy,
        "waiting" => AgentState::Waiting,
        "shell" => AgentState::Shell,
        _ => return Err(StatusError::UnknownState(raw.status)),
    };
    let bad = |field, value: &str| StatusError::BadField {
        field,
        value: value.to_string(),
    };
    if raw.pid <= 1 {
        return Err(bad("pid", &raw.pid.to_string()));
    }
    if !valid_cid(&raw.session_id) {
        return Err(bad("sessionId", &raw.session_id));
    }
    let proc_start = Some(raw.proc_start.as_str())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("procStart", &raw.proc_start))?;
    Ok(AgentStatus {
        pid: raw.pid,
        proc_start,
        session_id: raw.session_id,
        state,
        version: raw.version,
        cwd: raw.cwd,
    })
}

#[cfg(test)]
mod tests;
