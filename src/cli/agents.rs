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
    if a.name == crate::agents::CLAUDE.name {
        return claude_hook_main(dry_run, config);
    }
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let budget = cfg.tmux_timeout;
    let rt = match hook_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let ev = match rt.block_on(read_stdin_within(budget)).and_then(|t| {
        serde_json::from_str::<serde_json::Value>(&t)
            .map_err(|e| format!("the hook event is not valid JSON: {e}"))
    }) {
        Ok(ev) => ev,
        Err(e) => return fail(&e),
    };
    let tmux = std::env::var("TMUX").ok();
    let pane = std::env::var("TMUX_PANE").ok();
    let pane = claude_hook::where_from(&cfg.socket, tmux.as_deref(), pane.as_deref());
    let left = budget.saturating_sub(started.elapsed());
    if dry_run {
        let r = Reaper::new(cfg, true);
        let what = agent_hook::action(a, &ev);
        let said = rt.block_on(async {
            tokio::time::timeout(left, claude_hook::dry_run_of(&r.cfg, &r.tmux, what, pane)).await
        });
        return hook_dry_run_said(said.ok(), budget, fail);
    }
    // Outside tmux, on another server: nothing to do, nothing to say.
    let Ok(pane) = pane else {
        return ExitCode::SUCCESS;
    };
    let r = Reaper::new(cfg, false);
    let done =
        rt.block_on(async { tokio::time::timeout(left, agent_hook::act(&r, a, &ev, &pane)).await });
    room_after_hook(&rt, &r, done.as_ref().ok());
    hook_exit(done.ok(), budget, fail)
}

fn names() -> String {
    crate::agents::ALL
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `hook-settings` was asked: the agent, and where and for which socket and prefix.
pub(super) struct HookSettingsAsk<'a> {
    pub agent: &'a str,
    pub write: Option<&'a std::path::Path>,
    pub socket: Option<&'a str>,
    pub prefix: Option<&'a str>,
}

/// `hook-settings --agent <name> [--write FILE] [--socket PATH|NAME] [--prefix P]`: for Claude
/// Code, `claude-settings` itself.
pub(super) fn hook_settings(json: bool, cfg: &Config, ask: HookSettingsAsk<'_>) -> ExitCode {
    let HookSettingsAsk {
        agent,
        write,
        socket,
        prefix,
    } = ask;
    let Some(a) = crate::agents::by_name(agent) else {
        say!("ccs-reap: no agent {agent:?} (expected one of {})", names());
        return ExitCode::from(exit::CONFIG);
    };
    if a.name == crate::agents::CLAUDE.name {
        return claude_settings(json, cfg, write, (socket, prefix), false);
    }
    let HookSetup { bin, assigns, .. } =
        match hook_setup(json, cfg, "hook-settings", socket, prefix) {
            Ok(s) => s,
            Err(code) => return code,
        };
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
        Err(e) => command_error(json, CommandError::Refused(e.to_string())),
    }
}
