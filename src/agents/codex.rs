//! OpenAI's Codex CLI: what ccs-reap knows of it, measured against 0.169.0 (`../shared/DESIGN.md`,
//! "Agent CLIs"; `tests/e2e/NOTES.md`, "Codex and Gemini CLI").
//!
//! The conversation id is a UUIDv7 that codex chooses (there is no `--session-id`), told by its
//! `SessionStart` hook, which fires at the first prompt, not at launch: a chat that never had a
//! turn has no id and nothing to lose. It resumes with a subcommand, `codex resume <id>`.

use std::path::{Path, PathBuf};

use super::turns::{action_by_names, home_dir, settings_by_names, split_at_program};
use super::{
    base, Agent, ArgvError, Env, HookAction, HookNames, IdSource, PathError, ResumePlan, StartMode,
};
use crate::core::policy::valid_cid;

/// Codex CLI.
pub static CODEX: Agent = Agent {
    name: "codex",
    display: "Codex CLI",
    id_sources: &[
        IdSource::Argv { flags: &["resume"] },
        IdSource::Hook {
            event: "SessionStart",
            field: "session_id",
        },
    ],
    hooks: HOOKS,
    hook_action,
    is_program_word,
    cid_in_argv,
    resume_argv,
    bare_argv,
    transcript_path,
    transcript_glob: true,
    transcript_kind: None,
    cid_at_first_prompt: true,
    hooks_fix: "ccs-reap hook-settings --agent codex --write ~/.codex/hooks.json ($CODEX_HOME/hooks.json), then restart codex and trust the hooks",
    env_vars: &[HOME_VAR],
    status_path: None,
    parse_status: None,
    resume_env: &[],
    start_env: &[],
    hook_settings,
    process_tree: "codex is one static native process (the musl binary of \
                   @openai/codex-linux-x64; the npm `codex` script is a node launcher that runs \
                   it as its child); MCP servers and tool shells are its children; \
                   kill-session ends it in about 0.2 s",
};

/// Codex's hook events (0.169.0): no compaction events, and no `SessionEnd` was seen.
pub const HOOKS: HookNames = HookNames {
    session_start: "SessionStart",
    turn_begin: &["UserPromptSubmit"],
    turn_end: &["Stop"],
    compact_begin: None,
    compact_end: None,
    session_end: None,
};

/// The variable that moves everything of codex's (config, hooks.json, sessions).
pub const HOME_VAR: &str = "CODEX_HOME";

/// The flag a studio may put on its own command line to skip the "Hooks need review" screen.
pub const BYPASS_TRUST_FLAG: &str = "--dangerously-bypass-hook-trust";

/// What one Codex hook payload does.
pub fn hook_action(ev: &serde_json::Value) -> HookAction {
    action_by_names(&HOOKS, ev)
}

/// `$CODEX_HOME/hooks.json`'s fragment (Claude's shape).
pub fn hook_settings(command: &str) -> serde_json::Value {
    settings_by_names(&HOOKS, command)
}

/// Whether `w` starts Codex: basename `codex` or `codex.js`, a path through `@openai/codex`,
/// or the npm package `@openai/codex[@version]`.
pub fn is_program_word(w: &str) -> bool {
    let b = base(w);
    if b.starts_with('-') {
        return false;
    }
    b == "codex"
        || b == "codex.js"
        || w.contains("/@openai/codex/")
        || w == "@openai/codex"
        || w.starts_with("@openai/codex@")
}

/// Codex 0.169.0's options that take a value (the word after one is its value).
const TAKES_VALUE: &[&str] = &[
    "-c",
    "--config",
    "-m",
    "--model",
    "-p",
    "--profile",
    "-C",
    "--cd",
    "-s",
    "--sandbox",
    "-a",
    "--ask-for-approval",
    "-i",
    "--image",
    "--enable",
    "--disable",
    "--remote",
    "--remote-auth-token-env",
    "--local-provider",
    "--add-dir",
];

/// The words after the program word, parted: (its options with their values, its positionals).
fn part(rest: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut opts, mut pos) = (Vec::new(), Vec::new());
    let mut i = 0;
    while let Some(w) = rest.get(i) {
        if w == "--" {
            pos.extend(rest[i + 1..].iter().cloned());
            break;
        }
        if w.starts_with('-') && w.len() > 1 {
            opts.push(w.clone());
            if TAKES_VALUE.contains(&w.as_str()) {
                if let Some(v) = rest.get(i + 1) {
                    opts.push(v.clone());
                    i += 1;
                }
            }
        } else {
            pos.push(w.clone());
        }
        i += 1;
    }
    (opts, pos)
}

/// The conversation id a command line passes to codex: `codex [options] resume <id>`.
pub fn cid_in_argv(argv: &[String]) -> Option<String> {
    let (_, rest) = split_at_program(&CODEX, argv).ok()?;
    let (_, pos) = part(&rest);
    match pos.as_slice() {
        [sub, id, ..] if sub == "resume" && valid_cid(id) => Some(id.clone()),
        _ => None,
    }
}

/// The command that brings back `cid`: the program word, `resume <cid>`, then the command's own
/// options (`--last`, `--all` and a former `resume <id>` dropped; a positional prompt dropped
/// too: it was the first turn, which the history holds). With no transcript, codex cannot be
/// given the id (no `--session-id`): the command starts afresh and `SessionStart` tells the new
/// id at the first prompt ([`StartMode::FreshNewId`]). Another subcommand (`exec`, `review`,
/// ...) is not a chat and is refused.
pub fn resume_argv(
    argv: &[String],
    cid: &str,
    transcript_exists: bool,
) -> Result<ResumePlan, ArgvError> {
    if !valid_cid(cid) {
        return Err(ArgvError::BadCid(cid.to_string()));
    }
    let (mut out, opts) = program_and_options(argv)?;
    let mode = if transcript_exists {
        out.extend(["resume".to_string(), cid.to_string()]);
        StartMode::Resume
    } else {
        StartMode::FreshNewId
    };
    out.extend(opts);
    Ok(ResumePlan { argv: out, mode })
}

/// The command line as a tombstone keeps it: the words up to the program word, then its own
/// options ([`resume_argv`]'s, without adding `resume <id>`): `codex --model m`.
pub fn bare_argv(argv: &[String]) -> Result<Vec<String>, ArgvError> {
    let (mut out, opts) = program_and_options(argv)?;
    out.extend(opts);
    Ok(out)
}

/// (the words up to and including the program word, codex's own options without `--last` and
/// `--all`); a subcommand other than `resume` is refused, positionals are dropped.
fn program_and_options(argv: &[String]) -> Result<(Vec<String>, Vec<String>), ArgvError> {
    let (out, rest) = split_at_program(&CODEX, argv)?;
    let (opts, pos) = part(&rest);
    if let Some(sub) = pos.first().filter(|s| SUBCOMMANDS.contains(&s.as_str())) {
        if sub != "resume" {
            return Err(ArgvError::Subcommand {
                agent: CODEX.display,
                word: sub.clone(),
                argv: argv.to_vec(),
            });
        }
    }
    let opts = opts
        .into_iter()
        .filter(|o| o != "--last" && o != "--all")
        .collect();
    Ok((out, opts))
}

/// Codex 0.169.0's subcommands (a first positional that is one of these is no prompt).
const SUBCOMMANDS: &[&str] = &[
    "exec",
    "e",
    "review",
    "login",
    "logout",
    "mcp",
    "mcp-server",
    "app-server",
    "completion",
    "sandbox",
    "debug",
    "apply",
    "a",
    "resume",
    "fork",
    "cloud",
    "features",
    "help",
];

/// Where `cid`'s transcript lives, as a glob (see [`Agent::transcript_glob`]):
/// `$CODEX_HOME/sessions/*/*/*/rollout-*-<cid>.jsonl` (the directories are the date it began,
/// `YYYY/MM/DD`); `CODEX_HOME` defaults to `$HOME/.codex`. The cwd plays no part.
pub fn transcript_path(env: &Env, _cwd: &Path, cid: &str) -> Result<PathBuf, PathError> {
    if !valid_cid(cid) {
        return Err(PathError::BadCid(cid.to_string()));
    }
    let home = home_dir(env, HOME_VAR, ".codex")?;
    Ok(home
        .join("sessions")
        .join("*")
        .join("*")
        .join("*")
        .join(format!("rollout-*-{cid}.jsonl")))
}

/// Where `hook-settings --agent codex --write` writes by default: `$CODEX_HOME/hooks.json`.
pub fn hooks_file(env: &Env) -> Result<PathBuf, PathError> {
    Ok(home_dir(env, HOME_VAR, ".codex")?.join("hooks.json"))
}

/// What a user must do once so that codex runs the hooks `hook-settings` wrote: codex shows new
/// hooks at a blocking "Hooks need review" screen and runs none it was not told to trust.
pub fn trust_note(hooks_file: &Path) -> String {
    format!(
        "Codex runs a new hook only once it is trusted: start codex once and answer its \"Hooks \
         need review\" screen by trusting the ccs-reap hooks of {} (codex saves that trust in its \
         config.toml, as [hooks.state.\"<file>:<event>:0:0\"] trusted_hash); untrusted hooks are \
         skipped silently, so ccs-reap would never hear of the chat. The screen opens over \
         codex's prompt: text typed or pasted before it is answered goes into it, not to the \
         chat. A studio that starts codex \
         itself may instead pass {BYPASS_TRUST_FLAG} on its own command line. ccs-reap never \
         writes that trust for you.",
        hooks_file.display()
    )
}

#[cfg(test)]
mod tests;
