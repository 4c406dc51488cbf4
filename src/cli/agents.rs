//! `hook --agent <name>` and `hook-settings --agent <name>`: any agent's hook event, and the
//! agent's own hook settings (Codex's `hooks.json`, Gemini CLI's `settings.json`).

use super::*;
use crate::engine::agent_hook;

/// `hook --agent <name>`: as `claude-hook` (one line on stderr and exit 0 whatever fails, exit 2
/// only for a prompt sent to a chat that a reap holds, nothing on stdout), by the agent's rules.
pub(super) fn agent_hook_main(
    agent: &str,
    dry_run: bool,
    config: Option<&std::path::Path>,
) -> ExitCode {
    let started = Instant::now();
    let fail = |m: &str| {
        say!("ccs-reap hook --agent {agent}: {m}");
        ExitCode::SUCCESS
    };
    let Some(a) = crate::agents::by_name(agent) else {
        return fail(&format!("no agent {agent:?} (expected one of {})", names()));
    };
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let budget = cfg.tmux_timeout;
    let ev = match read_stdin_within(budget).and_then(|t| {
        serde_json::from_str::<serde_json::Value>(&t)
            .map_err(|e| format!("the hook event is not valid JSON: {e}"))
    }) {
        Ok(ev) => ev,
        Err(e) => return fail(&e),
    };
    let tmux = std::env::var("TMUX").ok();
    let pane = std::env::var("TMUX_PANE").ok();
    let Ok(pane) = claude_hook::where_from(&cfg.socket, tmux.as_deref(), pane.as_deref()) else {
        return ExitCode::SUCCESS;
    };
    if dry_run {
        return fail(&format!(
            "dry run: {:?} from pane {pane}",
            agent_hook::action(a, &ev)
        ));
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("failed to start the async runtime: {e}")),
    };
    let left = budget.saturating_sub(started.elapsed());
    let r = Reaper::new(cfg, false);
    let done =
        rt.block_on(async { tokio::time::timeout(left, agent_hook::act(&r, a, &ev, &pane)).await });
    match done {
        Ok(Ok(Outcome::Blocked(why))) => {
            say!("{why}");
            ExitCode::from(exit::BLOCKED)
        }
        Ok(Ok(Outcome::Done(_) | Outcome::Skipped(_))) => ExitCode::SUCCESS,
        Ok(Err(e)) => fail(&e.to_string()),
        Err(_) => fail(&format!(
            "gave up after {budget:?} (CCS_TMUX_TIMEOUT_MS): the chat's marks may be stale"
        )),
    }
}

fn names() -> String {
    crate::agents::ALL
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `hook-settings --agent <name> [--write FILE]`.
pub(super) fn hook_settings(
    json: bool,
    cfg: &Config,
    agent: &str,
    write: Option<&std::path::Path>,
) -> ExitCode {
    let Some(a) = crate::agents::by_name(agent) else {
        say!("ccs-reap: no agent {agent:?} (expected one of {})", names());
        return ExitCode::from(exit::CONFIG);
    };
    let bin = match std::env::current_exe() {
        Ok(b) => b,
        Err(e) => {
            return command_error(
                json,
                CommandError::Refused(format!("failed to find this binary's path: {e}")),
            )
        }
    };
    let env: Vec<(String, String)> = cfg
        .sources
        .iter()
        .filter_map(|e| Some((e.name.to_string(), e.value.clone()?)))
        .collect();
    let mut assigns = claude_hook::hook_env(cfg, &env);
    if let Some(f) = &cfg.file {
        let f = std::fs::canonicalize(f).unwrap_or_else(|_| f.clone());
        assigns.push(("CCS_CONFIG".into(), f.to_string_lossy().into_owned()));
    }
    let command = agent_hook::hook_command(a, &bin, &assigns);
    let note = agent_hook::trust_note(a, write);
    let Some(file) = write else {
        print_json(&(a.hook_settings)(&command));
        if let Some(n) = &note {
            say!("ccs-reap: {n}");
        }
        return ExitCode::SUCCESS;
    };
    match agent_hook::write_settings(a, file, &command) {
        Ok(changed) => {
            if json {
                print_json(&serde_json::json!({
                    "ok": true,
                    "agent": a.name,
                    "file": file,
                    "changed": changed,
                    "command": command,
                    "trust": note,
                }));
            } else {
                if changed {
                    out(&format!("{}: ccs-reap's hooks written\n", file.display()));
                } else {
                    out(&format!("{}: already up to date\n", file.display()));
                }
                if let Some(n) = &note {
                    say!("ccs-reap: {n}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => command_error(json, CommandError::Refused(e)),
    }
}
