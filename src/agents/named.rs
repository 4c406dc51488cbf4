//! A command that names its agent: a studio's launcher script (`/opt/studio/run-claude.sh
//! --model x`) runs Claude Code without its program word being `claude`, so nothing tells that
//! the conversation can be carried to it. `spawn --agent claude -- <command>` names it: the
//! command is kept and run as `env CCS_REAP_AGENT=claude <command>`, a real command line that
//! says its agent wherever it goes (the session's `@ccs_argv`, the tombstone's `argv` and `agent`,
//! a replay). Past the launchers (`env`, `npx`, `node`), the program of a named command is the
//! agent's: its resume words go right after it, as after `claude`.

use super::{by_name, of_argv, skip_env, words_of_shell_string, Agent, ALL};

/// The variable by which a command names its agent.
pub const VAR: &str = "CCS_REAP_AGENT";

/// The agent name an `env` word list assigns to [`VAR`] (the last one), if any.
pub(super) fn named_in(env_words: &[String]) -> Option<&str> {
    env_words
        .iter()
        .filter_map(|w| w.strip_prefix(VAR)?.strip_prefix('='))
        .next_back()
}

/// The name a command's leading `env` words give its agent, if any (the last one).
fn name_of(words: &[String]) -> Option<&str> {
    let mut i = 0;
    let mut found = None;
    while words.get(i).is_some_and(|w| super::base(w) == "env") {
        let next = skip_env(words, i + 1)?.min(words.len());
        if let Some(n) = named_in(&words[i + 1..next]) {
            found = Some(n);
        }
        i = next;
    }
    found
}

/// The agent a command names (`env CCS_REAP_AGENT=<name> ...`), checked: `Ok(None)` when it names
/// none; `Err` for a name that is no agent's, or a command whose own program is another agent's
/// (it would mean two things).
pub fn check(argv: &[String]) -> Result<Option<&'static Agent>, String> {
    let words = words_of_shell_string(argv)
        .map_err(|e| e.to_string())?
        .unwrap_or_else(|| argv.to_vec());
    let Some(name) = name_of(&words) else {
        return Ok(None);
    };
    let agent = by_name(name).ok_or_else(|| unknown(name))?;
    let plain: Vec<String> = words
        .iter()
        .filter(|w| !w.starts_with(&format!("{VAR}=")))
        .cloned()
        .collect();
    match of_argv(&plain) {
        Some(runs) if runs.name != agent.name => Err(format!(
            "the command {argv:?} runs {}'s program but names {} as its agent ({VAR}={name}): name one",
            runs.display, agent.display
        )),
        _ => Ok(Some(agent)),
    }
}

fn unknown(name: &str) -> String {
    let names: Vec<&str> = ALL.iter().map(|a| a.name).collect();
    format!("{name:?} is no agent ccs-reap knows: {}", names.join(", "))
}

/// `spawn --agent <name> -- <argv>`: the command naming its agent. One that runs that agent's
/// program, or names it already, is left as it is; one that names or runs another agent is
/// refused; anything else is `env CCS_REAP_AGENT=<name> <argv...>`.
pub fn name(argv: &[String], name: &str) -> Result<Vec<String>, String> {
    let agent = by_name(name).ok_or_else(|| unknown(name))?;
    let words = words_of_shell_string(argv)
        .map_err(|e| e.to_string())?
        .unwrap_or_else(|| argv.to_vec());
    match check(&words)? {
        Some(a) if a.name == agent.name => return Ok(words),
        Some(a) => {
            return Err(format!(
                "--agent {name}, but the command names {} ({VAR}={}): name one",
                a.display, a.name
            ))
        }
        None => {}
    }
    match of_argv(&words) {
        Some(a) if a.name == agent.name => Ok(words),
        Some(a) => Err(format!(
            "--agent {name}, but the command {argv:?} runs {}'s program: drop --agent, or give {}'s command",
            a.display, agent.display
        )),
        None => {
            let mut out = vec!["env".to_string(), format!("{VAR}={}", agent.name)];
            out.extend(words);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_command_names_its_agent() {
        // (argv, --agent, want: Ok(words) or Err(part of the message))
        type Want = Result<&'static [&'static str], &'static str>;
        let table: &[(&[&str], &str, Want)] = &[
            (
                &["/opt/run-claude.sh", "--model", "x"],
                "claude",
                Ok(&[
                    "env",
                    "CCS_REAP_AGENT=claude",
                    "/opt/run-claude.sh",
                    "--model",
                    "x",
                ]),
            ),
            (
                &["claude", "--model", "x"],
                "claude",
                Ok(&["claude", "--model", "x"]),
            ),
            (
                &["env", "CCS_REAP_AGENT=codex", "/opt/run"],
                "codex",
                Ok(&["env", "CCS_REAP_AGENT=codex", "/opt/run"]),
            ),
            (
                &["/opt/run.sh --model x"],
                "gemini",
                Ok(&[
                    "env",
                    "CCS_REAP_AGENT=gemini",
                    "/opt/run.sh",
                    "--model",
                    "x",
                ]),
            ),
            (&["codex"], "claude", Err("runs Codex")),
            (
                &["env", "CCS_REAP_AGENT=codex", "/opt/run"],
                "claude",
                Err("names Codex"),
            ),
            (&["/opt/run"], "claudee", Err("no agent ccs-reap knows")),
        ];
        for (argv, agent, want) in table {
            let got = name(&v(argv), agent);
            match want {
                Ok(w) => assert_eq!(got, Ok(v(w)), "{argv:?} {agent}"),
                Err(w) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(w)),
                    "{argv:?} {agent}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn a_named_command_is_its_agents_for_every_rewrite() {
        let named = v(&[
            "env",
            "CCS_REAP_AGENT=claude",
            "/opt/run-claude.sh",
            "--model",
            "x",
        ]);
        assert_eq!(of_argv(&named).map(|a| a.name), Some("claude"));
        let plan = (crate::agents::CLAUDE.resume_argv)(&named, "c1", true).unwrap();
        assert_eq!(
            plan.argv,
            v(&[
                "env",
                "CCS_REAP_AGENT=claude",
                "/opt/run-claude.sh",
                "--model",
                "x",
                "--resume",
                "c1"
            ])
        );
        assert_eq!(
            (crate::agents::CLAUDE.bare_argv)(&plan.argv).unwrap(),
            named
        );
        assert_eq!(
            (crate::agents::CLAUDE.cid_in_argv)(&plan.argv).as_deref(),
            Some("c1")
        );
        // Named for another agent: not claude's.
        let codex = v(&["env", "CCS_REAP_AGENT=codex", "/opt/run"]);
        assert_eq!(of_argv(&codex).map(|a| a.name), Some("codex"));
        // Unnamed, a launcher script is nobody's.
        assert!(of_argv(&v(&["/opt/run-claude.sh"])).is_none());
        // Checked: a name that is no agent's, and two names at once.
        assert!(check(&v(&["env", "CCS_REAP_AGENT=x", "/opt/run"])).is_err());
        assert!(check(&v(&["env", "CCS_REAP_AGENT=codex", "claude"])).is_err());
        assert!(matches!(check(&v(&["claude"])), Ok(None)));
    }
}
