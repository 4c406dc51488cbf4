//! `ccs-reap doctor`'s verdicts, as data: each check's result, the near-misses of a session
//! prefix, the claude-hook commands of a Claude Code settings file and their assignments. Pure:
//! the engine gathers the facts (`engine::doctor`).

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    /// Worth knowing; nothing is wrong for it.
    Note,
    /// A reason chats are not reaped (exit 1).
    Problem,
}

/// One check: its name (stable, for scripts), the verdict, and what it found in one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub verdict: Verdict,
    pub message: String,
}

impl Check {
    pub fn new(check: &'static str, verdict: Verdict, message: impl Into<String>) -> Check {
        Check {
            check,
            verdict,
            message: message.into(),
        }
    }
}

/// Room for a new chat (`room`, `spawn`): what one needs, the room under the limit now, the
/// live chats against `CCS_ENGINE_MAX_LIVE`. A note, never a problem: room is made on request.
pub fn room_check(g: &crate::core::report::Gauge) -> Check {
    let mib = |b: u64| match b {
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    };
    let mem = match (g.room_bytes, g.room_limit_bytes) {
        (Some(r), Some(l)) => format!("room {} under a limit of {}", mib(r), mib(l)),
        _ => "no memory limit known: memory is not checked".into(),
    };
    let live = match g.max_live {
        Some(m) => format!(
            "{} live chat(s), at most {m} (CCS_ENGINE_MAX_LIVE)",
            g.live_chats
        ),
        None => format!("{} live chat(s), no CCS_ENGINE_MAX_LIVE", g.live_chats),
    };
    let short = g.room_bytes.is_some_and(|r| r < g.new_chat_bytes)
        || g.max_live.is_some_and(|m| g.live_chats >= m);
    Check::new(
        "room",
        if short { Verdict::Note } else { Verdict::Ok },
        format!(
            "a new chat needs {}; {mem}; {live}{}",
            mib(g.new_chat_bytes),
            if short {
                ": the next new chat needs room made (ccs-reap room, spawn does it)"
            } else {
                ""
            }
        ),
    )
}

/// Whether any check found a problem.
pub fn any_problem(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.verdict == Verdict::Problem)
}

/// Session names that look meant for `prefix` but do not start with it: another case
/// (`CCS-1`), another separator (`ccs_1`, `ccs1`, `ccs.1`), a prefix one edit away (`cs-1`).
pub fn near_misses(prefix: &str, names: &[String]) -> Vec<String> {
    let stem: String = prefix
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_ascii_lowercase();
    names
        .iter()
        .filter(|n| !n.starts_with(prefix))
        .filter(|n| {
            let low = n.to_ascii_lowercase();
            (!stem.is_empty() && low.starts_with(&stem))
                || low.starts_with(&prefix.to_ascii_lowercase())
                || [
                    prefix.len().saturating_sub(1),
                    prefix.len(),
                    prefix.len() + 1,
                ]
                .into_iter()
                .filter_map(|k| n.get(..k.min(n.len())))
                .any(|head| strsim::levenshtein(head, prefix) == 1)
        })
        .cloned()
        .collect()
}

/// Every hook command in a Claude Code settings document that runs `claude-hook`.
pub fn hook_commands(settings: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(events) = settings.get("hooks").and_then(|h| h.as_object()) else {
        return out;
    };
    for groups in events.values().filter_map(|g| g.as_array()) {
        for hooks in groups
            .iter()
            .filter_map(|g| g.get("hooks").and_then(|h| h.as_array()))
        {
            for c in hooks
                .iter()
                .filter_map(|h| h.get("command").and_then(|c| c.as_str()))
            {
                if c.split_whitespace().any(|w| w == "claude-hook") && !out.iter().any(|o| o == c) {
                    out.push(c.to_string());
                }
            }
        }
    }
    out
}

/// The `KEY=value` assignments at the head of a hook command (as `claude-settings` writes them:
/// values in single quotes, `'\''` for a quote), up to the first word that is not one.
pub fn assignments(command: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for word in shell_words(command) {
        match word.split_once('=') {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                out.push((k.to_string(), v.to_string()))
            }
            _ => break,
        }
    }
    out
}

/// The ccs-reap a hook command runs: the word right before `claude-hook` (`claude-settings`
/// writes `... '<binary>' claude-hook`; behind a launcher, `npx ccs-reap claude-hook`, the name
/// it is given), unquoted.
pub fn program(command: &str) -> Option<String> {
    let words = shell_words(command);
    let at = words.iter().position(|w| w == "claude-hook")?;
    let prog = words.get(at.checked_sub(1)?)?;
    let assignment = prog.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    (!assignment).then(|| prog.clone())
}

/// Whether `--version`'s output names `version` (`ccs-reap 0.3.0 (commit ...)`).
pub fn same_version(output: &str, version: &str) -> bool {
    output.split_whitespace().nth(1) == Some(version)
}

/// Words of a command line, with single and double quotes and backslashes as sh reads them
/// (no expansion).
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    cur.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        _ => cur.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_table() {
        let names: Vec<String> = [
            "ccs-1", "CCS-2", "ccs_3", "ccs4", "cs-5", "work", "claude-6",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            near_misses("ccs-", &names),
            vec!["CCS-2", "ccs_3", "ccs4", "cs-5"]
        );
        assert!(near_misses("ccs-", &["ccs-1".to_string()]).is_empty());
    }

    #[test]
    fn hook_commands_and_their_assignments() {
        let v: serde_json::Value = serde_json::json!({"hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "CCS_REAP_STATE_DIR='/s t/x' CCS_SESSION_PREFIX='ccs-' '/bin/ccs-reap' claude-hook"}]}],
            "SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}],
        }});
        let c = hook_commands(&v);
        assert_eq!(c.len(), 1);
        assert_eq!(
            assignments(&c[0]),
            vec![
                ("CCS_REAP_STATE_DIR".to_string(), "/s t/x".to_string()),
                ("CCS_SESSION_PREFIX".to_string(), "ccs-".to_string())
            ]
        );
        assert_eq!(
            assignments("A='it'\\''s' b c=d"),
            vec![("A".to_string(), "it's".to_string())]
        );
        assert!(hook_commands(&serde_json::json!({"hooks": []})).is_empty());
        assert!(hook_commands(&serde_json::json!({})).is_empty());
    }

    #[test]
    fn the_program_of_a_hook_command() {
        assert_eq!(
            program("CCS_REAP_STATE_DIR='/s t/x' '/opt/my bin/ccs-reap' claude-hook").as_deref(),
            Some("/opt/my bin/ccs-reap")
        );
        assert_eq!(program("ccs-reap claude-hook").as_deref(), Some("ccs-reap"));
        assert_eq!(program("A=1 B=2"), None);
        assert_eq!(program("A=1 claude-hook"), None);
        assert_eq!(
            program("npx ccs-reap claude-hook").as_deref(),
            Some("ccs-reap")
        );
        assert!(same_version("ccs-reap 0.3.0 (commit abc)\n", "0.3.0"));
        assert!(!same_version("ccs-reap 0.2.9 (commit abc)\n", "0.3.0"));
        assert!(!same_version("", "0.3.0"));
    }

    #[test]
    fn a_problem_is_any_problem() {
        let ok = Check::new("a", Verdict::Ok, "");
        let note = Check::new("b", Verdict::Note, "");
        assert!(!any_problem(&[ok.clone(), note.clone()]));
        assert!(any_problem(&[
            ok,
            note,
            Check::new("c", Verdict::Problem, "")
        ]));
    }
}
