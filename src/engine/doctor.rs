//! `ccs-reap doctor`: every check of a degraded state once, and for a studio whose chats are
//! never reaped, why: reaping off, no server at the socket, no session under the prefix (with
//! the near-misses seen), no cid, the claude-hook not wired in Claude Code's settings (or wired
//! to another state dir, prefix or socket), an activity file missing, no memory limit visible;
//! and what a reap itself needs (`reap`). Writes nothing but what a reap checks first (the state
//! dir's directories, a probe file removed at once). The verdicts are `core::doctor`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::adapters::tmux::Tmux;
use crate::adapters::{agent_proc, procs};
use crate::config::Config;
use crate::core::doctor::{assignments, hook_commands, near_misses, Check, Verdict};
use crate::core::policy::MemThreshold;
use crate::core::report::{SessionReport, SweepReport};
use crate::engine::context::Reaper;

mod reap;

/// The largest Claude Code settings file read.
const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Claude Code's user settings file: `$CLAUDE_CONFIG_DIR/settings.json`, else
/// `~/.claude/settings.json`.
pub fn claude_settings_path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("settings.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".claude").join("settings.json"))
}

/// Why a settings file of the agent's was not read as JSON.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// The file is not there.
    #[error("{}: {}", .0.display(), std::io::Error::from_raw_os_error(rustix::io::Errno::NOENT.raw_os_error()))]
    Missing(PathBuf),
    /// It could not be read (the reader's own words: the path, and why).
    #[error("{0}")]
    Read(String),
    #[error("{} is not JSON: {why}", .path.display())]
    NotJson {
        path: PathBuf,
        why: serde_json::Error,
    },
}

/// Every check, once, in order, of the studio that `rep` (a `status`, taken by the caller)
/// reports.
pub async fn run(r: &Arc<Reaper>, rep: SweepReport) -> Vec<Check> {
    let cfg = &r.cfg;
    let mut out = settings_checks(cfg);
    let no_cid: Vec<&SessionReport> = rep
        .sessions
        .iter()
        .filter(|s| s.decision.cid.is_none())
        .collect();
    out.extend(server_checks(cfg, &r.tmux, &rep, &no_cid).await);
    out.push(reap::state_check(&r.state));
    // Without the hook, a chat with no cid is never reaped; with no chat, nothing is kept yet.
    // Only a Claude Code (or unknown) chat lacks the claude-hook: an unused Codex chat has no
    // cid by design.
    out.extend(hook_checks(
        cfg,
        no_cid.iter().any(|s| s.agent.is_none_or(|a| a == "claude")),
    ));
    out.extend(reap::hook_binaries().await);
    out.push(activity_check(cfg, r.watching.activity_problem()));
    out.push(memory_check(cfg, rep.host, rep.watching.as_deref()));
    out.push(crate::core::doctor::room_check(&rep.gauge));
    out
}

/// The settings read, and whether reaping is on.
fn settings_checks(cfg: &Config) -> Vec<Check> {
    vec![
        Check::new(
            "settings",
            Verdict::Ok,
            match &cfg.file {
                Some(f) => format!("settings file {}", f.display()),
                None => "no settings file: the environment and the defaults".into(),
            },
        ),
        if cfg.policy.enabled() {
            Check::new("reaping", Verdict::Ok, format!("rules: {}", cfg.rules()))
        } else {
            Check::new(
                "reaping",
                Verdict::Problem,
                format!(
                    "reaping is disabled: it is off until {}",
                    crate::config::ENABLED_BY
                ),
            )
        },
    ]
}

/// The tmux server at the socket, and while it is up what its sessions show.
async fn server_checks(
    cfg: &Config,
    tmux: &Tmux,
    rep: &SweepReport,
    no_cid: &[&SessionReport],
) -> Vec<Check> {
    let mut out = Vec::new();
    let chats = rep.sessions.len();
    match rep.tmux_server_up {
        Some(true) => {
            out.push(Check::new(
                "server",
                Verdict::Ok,
                format!("a tmux server listens at {}", rep.socket_path),
            ));
            out.extend(reap::sight_check(rep.tmux_server_up, rep.blind.as_deref()));
            out.push(sessions_check(cfg, tmux, chats).await);
            out.push(cid_check(chats, no_cid));
            out.extend(turns_check(rep));
            out.extend(shared_check(rep));
            out.push(shape_check(rep));
        }
        Some(false) if rep.tmux_server_empty => out.push(Check::new(
            "server",
            Verdict::Ok,
            format!(
                "empty: the tmux server at {} exited after its last chat was reaped; the studio's next chat starts one",
                rep.socket_path
            ),
        )),
        Some(false) => out.push(Check::new(
            "server",
            Verdict::Problem,
            format!(
                "no tmux server at {}: nothing is reaped (check CCS_TMUX_SOCKET / CCS_TMUX_SOCKET_PATH, TMUX_TMPDIR, PrivateTmp= against the studio's)",
                rep.socket_path
            ),
        )),
        None => out.push(Check::new(
            "server",
            Verdict::Problem,
            format!(
                "tmux at {} was not read: {}",
                rep.socket_path,
                rep.error.as_deref().unwrap_or("unknown error")
            ),
        )),
    }
    out
}

/// The activity files, when configured: `problem` is why one is unreadable.
fn activity_check(cfg: &Config, problem: Option<String>) -> Check {
    if cfg.activity_files.is_empty() {
        return Check::new("activity", Verdict::Ok, "no activity file configured");
    }
    match problem {
        Some(e) => Check::new(
            "activity",
            Verdict::Problem,
            format!(
                "an activity file (CCS_ACTIVITY_FILES) is unreadable, so every session is kept: {e}"
            ),
        ),
        None => Check::new(
            "activity",
            Verdict::Ok,
            format!("{} activity file(s) read", cfg.activity_files.len()),
        ),
    }
}

/// Sessions under the prefix; without any, the names that look meant for it.
async fn sessions_check(cfg: &Config, tmux: &Tmux, chats: usize) -> Check {
    let prefix = &cfg.prefix;
    if chats > 0 {
        return Check::new(
            "sessions",
            Verdict::Ok,
            format!("{chats} session(s) named {prefix}<id>"),
        );
    }
    let names: Vec<String> = match tmux.list("", procs::exit_collected).await {
        Ok(l) => l.sessions.into_iter().map(|s| s.name).collect(),
        Err(_) => Vec::new(),
    };
    let near = near_misses(prefix, &names);
    if near.is_empty() {
        Check::new(
            "sessions",
            Verdict::Note,
            format!(
                "no session named {prefix}<id> (of {} on the server): nothing to reap yet",
                names.len()
            ),
        )
    } else {
        Check::new(
            "sessions",
            Verdict::Problem,
            format!(
                "no session named {prefix}<id>, but {} that look meant for it: {} (CCS_SESSION_PREFIX={prefix:?})",
                near.len(),
                near.join(", ")
            ),
        )
    }
}

/// Chats whose turns nothing reports are kept (`unseen`): said, with the fix; a problem when no
/// chat is left that could be reaped (every one unseen or without its conversation id).
fn turns_check(rep: &crate::core::report::SweepReport) -> Option<Check> {
    use crate::core::policy::State;
    let unseen: Vec<&str> = rep
        .sessions
        .iter()
        .filter(|s| s.decision.state == State::Unseen)
        .map(|s| s.decision.name.as_str())
        .collect();
    let none_left = rep
        .sessions
        .iter()
        .all(|s| matches!(s.decision.state, State::Unseen | State::NoCid));
    (!unseen.is_empty()).then(|| {
        Check::new(
            "turns",
            if none_left {
                Verdict::Problem
            } else {
                Verdict::Note
            },
            format!(
                "{} chat(s) are kept because nothing reports their turns (no hook, no status file of their agent, no activity file): {}; fix: {}",
                unseen.len(),
                unseen.join(", "),
                crate::core::policy::UNSEEN_FIX
            ),
        )
    })
}

/// Two live sessions holding one conversation: each writes into the same transcript.
fn shared_check(rep: &crate::core::report::SweepReport) -> Option<Check> {
    let shared = crate::core::report::shared_conversations(rep);
    (!shared.is_empty()).then(|| {
        Check::new(
            "conversations",
            Verdict::Problem,
            shared
                .iter()
                .map(|(c, n)| format!("conversation {c} is held by {}", n.join(" and ")))
                .collect::<Vec<_>>()
                .join("; ")
                + ": two live agents write into one transcript; stop all but one",
        )
    })
}

/// The notes for the `no-cid` chats, each fix the chat's own agent's: one note per agent whose
/// hooks have not told the id, and one for the chats `no-cid` by design (Codex CLI picks its id at
/// the first prompt: an unused chat has none).
pub fn no_cid_notes(no_cid: &[&crate::core::report::SessionReport]) -> Vec<String> {
    let mut unwired: Vec<(&'static str, Vec<&str>)> = Vec::new();
    let mut by_design: Vec<(&'static str, Vec<&str>)> = Vec::new();
    for s in no_cid {
        let (list, key) = if s.no_cid_by_design() {
            (&mut by_design, s.agent.unwrap_or("codex"))
        } else {
            (
                &mut unwired,
                crate::agents::hooks_fix(s.agent.and_then(crate::agents::by_name)),
            )
        };
        match list.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(&s.decision.name),
            None => list.push((key, vec![&s.decision.name])),
        }
    }
    let mut out: Vec<String> = unwired
        .into_iter()
        .map(|(fix, names)| format!(
            "no-cid ({}): never reaped, so no history is lost; no conversation id yet: the SessionStart hook has not run. Fix: {fix}",
            names.join(", ")
        ))
        .collect();
    for (name, names) in by_design {
        let a = crate::agents::by_name(name).unwrap_or(&crate::agents::CODEX);
        out.push(format!(
            "no-cid by design ({}): {} picks its conversation id at its first prompt, so an unused chat has none and nothing to lose; kept until a prompt tells it. If one has had a prompt, its hooks are not wired: {}",
            names.join(", "),
            a.display,
            a.hooks_fix
        ));
    }
    out
}

/// Chats without a conversation id are kept (they could not be resumed). The fix named is each
/// chat's own agent's; an unused chat of an agent that picks its id at its first prompt (Codex
/// CLI) is `no-cid` by design, and no problem.
fn cid_check(chats: usize, no_cid: &[&crate::core::report::SessionReport]) -> Check {
    let unwired: Vec<&crate::core::report::SessionReport> = no_cid
        .iter()
        .copied()
        .filter(|s| !s.no_cid_by_design())
        .collect();
    let fixes = || no_cid_notes(no_cid).join("; ");
    if chats == 0 {
        Check::new("cid", Verdict::Ok, "no chat to look at")
    } else if no_cid.len() == chats && !unwired.is_empty() {
        Check::new(
            "cid",
            Verdict::Problem,
            format!(
                "no chat has a conversation id ({chats}): none is reaped, none could be resumed; {}",
                fixes()
            ),
        )
    } else if !no_cid.is_empty() {
        Check::new(
            "cid",
            Verdict::Note,
            format!(
                "{} of {chats} chat(s) have no conversation id and are kept: {}",
                no_cid.len(),
                fixes()
            ),
        )
    } else {
        Check::new(
            "cid",
            Verdict::Ok,
            format!("every chat ({chats}) has a conversation id"),
        )
    }
}

/// The claude-hook in Claude Code's settings files (the user's, the project's and the local one
/// of this directory: [`reap::claude_settings_files`]), and whether it shares our state dir,
/// prefix and socket. Wired in none of them: a problem when some chat lacks a cid.
fn hook_checks(cfg: &Config, needed: bool) -> Vec<Check> {
    let missing = if needed {
        Verdict::Problem
    } else {
        Verdict::Note
    };
    let Some(path) = claude_settings_path() else {
        return vec![Check::new(
            "hook",
            missing,
            "neither CLAUDE_CONFIG_DIR nor HOME is set: Claude Code's settings file is unknown",
        )];
    };
    let (wired, user_problem) = wired_in(&path);
    if wired.is_empty() {
        return vec![Check::new(
            "hook",
            missing,
            user_problem.unwrap_or_else(|| {
                format!(
                    "the claude-hook is not wired in {} (ccs-reap claude-settings --write {} wires it)",
                    path.display(),
                    path.display()
                )
            }),
        )];
    }
    let mut out = disagreements(cfg, &wired);
    if out.is_empty() {
        let files: Vec<String> = wired.iter().map(|(f, _)| f.display().to_string()).collect();
        out.push(Check::new(
            "hook",
            Verdict::Ok,
            format!("the claude-hook is wired in {}", files.join(", ")),
        ));
    }
    out
}

/// Every file Claude Code reads that holds the hook, with the hook's commands in it; else what
/// is wrong with the user's (`path`).
fn wired_in(path: &Path) -> (Vec<(PathBuf, Vec<String>)>, Option<String>) {
    let mut wired = Vec::new();
    let mut user_problem = None;
    for p in reap::claude_settings_files() {
        let got = read_json(&p).map(|v| hook_commands(&v));
        match got {
            Ok(cmds) if !cmds.is_empty() => wired.push((p, cmds)),
            Ok(_) if p == path => {
                user_problem = Some(format!(
                "the claude-hook is not wired in {} (ccs-reap claude-settings --write {} wires it)",
                path.display(),
                path.display()
            ))
            }
            Err(e @ DoctorError::NotJson { .. }) if p == path => user_problem = Some(e.to_string()),
            Err(e) if p == path => {
                user_problem = Some(format!(
                "the claude-hook is not wired: {e} (ccs-reap claude-settings --write {} wires it)",
                path.display()
            ))
            }
            _ => {}
        }
    }
    (wired, user_problem)
}

/// Each hook command that names another state dir, prefix or socket than ours: a problem.
fn disagreements(cfg: &Config, wired: &[(PathBuf, Vec<String>)]) -> Vec<Check> {
    let ours = [
        (
            "CCS_REAP_STATE_DIR",
            cfg.state_dir.to_string_lossy().into_owned(),
        ),
        ("CCS_SESSION_PREFIX", cfg.prefix.clone()),
        (
            "CCS_TMUX_SOCKET_PATH",
            cfg.socket.canonical_path().to_string_lossy().into_owned(),
        ),
    ];
    let mut out = Vec::new();
    for (file, cmds) in wired {
        for c in cmds {
            let a = assignments(c);
            for (k, mine) in &ours {
                if let Some((_, theirs)) = a.iter().find(|(n, _)| n == k) {
                    if theirs != mine {
                        out.push(Check::new(
                            "hook",
                            Verdict::Problem,
                            format!("the claude-hook in {} has {k}={theirs}, this ccs-reap {mine}: they do not share {} (run ccs-reap claude-settings --write {} again)", file.display(), what(k), file.display()),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn what(var: &str) -> &'static str {
    match var {
        "CCS_REAP_STATE_DIR" => "a state dir",
        "CCS_SESSION_PREFIX" => "a session prefix",
        _ => "a tmux server",
    }
}

/// A settings file of the agent's (`~/.claude/settings.json`): read as every file another
/// process could plant is ([`agent_proc::read_planted`]): a FIFO never holds doctor, a huge
/// file is refused by its size. A link is followed (dotfile managers link it).
fn read_bounded(path: &Path) -> Result<String, DoctorError> {
    let how = agent_proc::Planted {
        cap: MAX_SETTINGS_BYTES,
        follow: true,
        ours: false,
    };
    match agent_proc::read_planted(path, how) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => Err(DoctorError::Missing(path.to_path_buf())),
        Err(e) => Err(DoctorError::Read(e.to_string())),
    }
}

/// A settings file of the agent's ([`read_bounded`]) as JSON.
fn read_json(path: &Path) -> Result<serde_json::Value, DoctorError> {
    let text = read_bounded(path)?;
    serde_json::from_str(&text).map_err(|why| DoctorError::NotJson {
        path: path.to_path_buf(),
        why,
    })
}

/// The memory limit the pressure rules see. A share of no limit never fires: a problem when that
/// rule is the only one, else a note (another rule still reaps: red exactly when nothing can).
fn memory_check(
    cfg: &Config,
    host: Option<crate::core::policy::HostMemory>,
    watching: Option<&str>,
) -> Check {
    let at = watching.unwrap_or("the host");
    let limit = host.and_then(|h| h.limit_bytes);
    let percent = matches!(cfg.policy.mem_high, Some(MemThreshold::Percent(_)));
    match limit {
        Some(l) => Check::new(
            "memory",
            Verdict::Ok,
            format!("a memory limit of {} bytes at {at}", l),
        ),
        None if percent => {
            let others = crate::core::policy::Policy {
                mem_high: None,
                ..cfg.policy.clone()
            }
            .enabled();
            Check::new(
                "memory",
                if others { Verdict::Note } else { Verdict::Problem },
                format!(
                    "CCS_ENGINE_MEM_HIGH is a share of a limit, but no memory limit is visible at {at}: the memory rule never starts (give a size, or CCS_ENGINE_MEM_CGROUP){}",
                    if others { "; the other rules still reap" } else { "" }
                ),
            )
        }
        None => Check::new(
            "memory",
            Verdict::Note,
            format!("no memory limit visible at {at}"),
        ),
    }
}

/// Chats kept because their session is not the chat's pane alone (`shared`: a pane or a window
/// of the user's beside it; `foreign`: a pane that is not the chat's agent): each with its WHY.
fn shape_check(rep: &crate::core::report::SweepReport) -> Check {
    use crate::core::policy::State;
    let odd: Vec<String> = rep
        .sessions
        .iter()
        .filter(|s| matches!(s.decision.state, State::Shared | State::Foreign))
        .map(|s| {
            format!(
                "{} ({}: {})",
                s.decision.name,
                s.decision.state.as_str(),
                s.decision.why
            )
        })
        .collect();
    if odd.is_empty() {
        Check::new(
            "chat-panes",
            Verdict::Ok,
            "every chat's session holds its own pane alone",
        )
    } else {
        Check::new(
            "chat-panes",
            Verdict::Note,
            format!(
                "{} chat(s) kept, their session not the chat's pane alone: {}",
                odd.len(),
                odd.join("; ")
            ),
        )
    }
}
