//! `spawn` for an agent other than Claude Code: the agent is the one whose program the command
//! runs ([`crate::agents::of_argv`]); its descriptor rewrites the command to bring the
//! conversation back, after a look for its transcript (a glob for Codex and Gemini CLI); its
//! start environment goes in front (`env GEMINI_CLI_NO_RELAUNCH=true ...`). Claude Code's
//! commands keep `commands::resume_argv` (this returns `None` for them).

use std::path::{Path, PathBuf};

use crate::agents::{self, Agent};
use crate::core::policy;

/// The option that names a chat's agent.
pub const AGENT_OPTION: &str = "@ccs_agent";

/// What `spawn` runs for a non-Claude agent: the agent, the command, the conversation id.
pub type Plan = (&'static Agent, Vec<String>, Option<String>);

/// The command `spawn` runs for a non-Claude agent and the conversation it brings back, or
/// `None` when the command is Claude Code's or no agent's. The command's own id wins, then
/// `--cid`, then the tombstone's.
pub fn plan(
    cmd: &[String],
    flag_cid: Option<&str>,
    tomb_cid: Option<&str>,
    cwd: &Path,
) -> Option<Result<Plan, String>> {
    let agent = agents::of_argv(cmd).filter(|a| a.name != agents::CLAUDE.name)?;
    Some(plan_for(agent, cmd, flag_cid, tomb_cid, cwd))
}

fn plan_for(
    agent: &'static Agent,
    cmd: &[String],
    flag_cid: Option<&str>,
    tomb_cid: Option<&str>,
    cwd: &Path,
) -> Result<Plan, String> {
    let with_env = |argv: Vec<String>| with_start_env(agent, argv);
    if let Some(own) = (agent.cid_in_argv)(cmd) {
        return Ok((agent, with_env(cmd.to_vec()), Some(own)));
    }
    let Some(c) = flag_cid.or(tomb_cid).filter(|c| policy::valid_cid(c)) else {
        return Ok((agent, with_env(cmd.to_vec()), None));
    };
    let env: Vec<(String, String)> = std::env::vars().collect();
    let exists = (agent.transcript_path)(&env, cwd, c)
        .map_err(|e| {
            format!(
                "cannot tell where {}'s conversation {c} is kept: {e}",
                agent.display
            )
        })
        .map(|p| {
            if agent.transcript_glob {
                !glob(&p).is_empty()
            } else {
                p.is_file()
            }
        })?;
    let p = (agent.resume_argv)(cmd, c, exists)
        .map_err(|e| format!("cannot resume {c} with {cmd:?}: {e}"))?;
    let cid = match p.mode {
        agents::StartMode::FreshNewId => None,
        _ => Some(c.to_string()),
    };
    if cid.is_none() {
        tracing::warn!(cid = %c, agent = agent.name, "no transcript of the conversation: the chat starts afresh under a new id");
    }
    Ok((agent, with_env(p.argv), cid))
}

/// `env NAME=value ... <argv>` for the agent's start environment (nothing when it has none, or
/// when the command already sets each of them the same way).
fn with_start_env(agent: &Agent, argv: Vec<String>) -> Vec<String> {
    let missing: Vec<String> = agent
        .start_env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .filter(|kv| !argv.contains(kv))
        .collect();
    if missing.is_empty() {
        return argv;
    }
    let words = agents::words_of_shell_string(&argv)
        .ok()
        .flatten()
        .unwrap_or(argv);
    let mut out = vec!["env".to_string()];
    out.extend(missing);
    out.extend(words);
    out
}

/// The files a pattern matches whose `*`s stand only within one component (a `*` matches any
/// run of characters but `/`); components without one are taken as they are.
pub fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for comp in pattern.components() {
        let part = comp.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for base in &found {
            if !part.contains('*') {
                next.push(base.join(comp.as_os_str()));
                continue;
            }
            let Ok(rd) = std::fs::read_dir(base) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.starts_with('.') && wild(&part, &name) {
                    next.push(base.join(&name));
                }
            }
        }
        found = next;
    }
    found.retain(|p| p.is_file());
    found.sort();
    found
}

/// Whether `name` matches `pat`, whose `*` matches any run of characters.
fn wild(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pat == name;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn wildcards() {
        for (p, n, ok) in [
            (
                "rollout-*-abc.jsonl",
                "rollout-2026-12-01T10-00-00-abc.jsonl",
                true,
            ),
            ("rollout-*-abc.jsonl", "rollout-abc.jsonl", false),
            ("*", "x", true),
            (
                "session-*-1234abcd.jsonl",
                "session-2026-12-01T10-00-1234abcd.jsonl",
                true,
            ),
            (
                "session-*-1234abcd.jsonl",
                "session-x-1234abce.jsonl",
                false,
            ),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
        ] {
            assert_eq!(wild(p, n), ok, "{p} {n}");
        }
    }

    #[test]
    fn glob_finds_a_dated_transcript() {
        let d = tempfile::tempdir().unwrap();
        let f = d
            .path()
            .join("sessions/2026/12/01/rollout-2026-12-01T10-00-00-cid1.jsonl");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, "{}").unwrap();
        let pat = d.path().join("sessions/*/*/*/rollout-*-cid1.jsonl");
        assert_eq!(glob(&pat), vec![f]);
        assert!(glob(&d.path().join("sessions/*/*/*/rollout-*-cid2.jsonl")).is_empty());
    }

    #[test]
    fn plans_by_the_commands_agent() {
        let cwd = Path::new("/");
        assert!(plan(&w(&["claude"]), Some("c1"), None, cwd).is_none());
        assert!(plan(&w(&["vim"]), Some("c1"), None, cwd).is_none());
        // Codex's own `resume <id>` wins; gemini gets its start environment.
        let (a, argv, cid) = plan(&w(&["codex", "resume", "own"]), Some("c1"), None, cwd)
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.name, argv, cid),
            ("codex", w(&["codex", "resume", "own"]), Some("own".into()))
        );
        let (_, argv, cid) = plan(&w(&["gemini", "--yolo"]), None, None, cwd)
            .unwrap()
            .unwrap();
        assert_eq!(
            argv,
            w(&["env", "GEMINI_CLI_NO_RELAUNCH=true", "gemini", "--yolo"])
        );
        assert_eq!(cid, None);
        let (_, argv, _) = plan(
            &w(&["env", "GEMINI_CLI_NO_RELAUNCH=true", "gemini"]),
            None,
            None,
            cwd,
        )
        .unwrap()
        .unwrap();
        assert_eq!(argv, w(&["env", "GEMINI_CLI_NO_RELAUNCH=true", "gemini"]));
    }
}
