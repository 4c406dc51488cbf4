//! `claude-hook` and `claude-settings`: Claude Code's hook event read from stdin (bounded, within
//! a deadline), the answer, and the settings fragment.

use super::*;

/// The largest hook event read (a `Stop` carries the last reply, a `UserPromptSubmit` the prompt).
pub(super) const MAX_EVENT_BYTES: u64 = 64 << 20;

/// Read stdin to its end on a thread of its own, waiting at most `limit`: a stdin that never
/// closes must not hold claude (the thread is left behind; the process exits without it).
pub(super) fn read_stdin_within(limit: Duration) -> Result<String, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = Vec::new();
        let r = std::io::stdin()
            .lock()
            .take(MAX_EVENT_BYTES + 1)
            .read_to_end(&mut buf)
            .map(|_| buf);
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(b)) if b.len() as u64 > MAX_EVENT_BYTES => Err(format!(
            "the hook event on stdin is larger than {MAX_EVENT_BYTES} bytes"
        )),
        Ok(Ok(b)) => String::from_utf8(b).map_err(|e| format!("the hook event is not UTF-8: {e}")),
        Ok(Err(e)) => Err(format!("failed to read the hook event on stdin: {e}")),
        Err(_) => Err(format!(
            "no complete hook event on stdin within {limit:?} (CCS_TMUX_TIMEOUT_MS)"
        )),
    }
}

/// `claude-hook`: whatever fails is one line on stderr and exit 0, so claude goes on; only a
/// prompt sent to a chat that a reap holds is exit 2 (Claude Code blocks it and shows the line).
/// Nothing is written to stdout: claude adds a `SessionStart` or `UserPromptSubmit` hook's stdout
/// to the conversation. The whole run (stdin and tmux) stays within `CCS_TMUX_TIMEOUT_MS`.
pub(super) fn claude_hook_main(dry_run: bool, config: Option<&std::path::Path>) -> ExitCode {
    let started = Instant::now();
    let fail = |m: &str| {
        say!("ccs-reap claude-hook: {m}");
        ExitCode::SUCCESS
    };
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let budget = cfg.tmux_timeout;
    let ev = match read_stdin_within(budget).and_then(|t| HookInput::parse(&t)) {
        Ok(ev) => ev,
        Err(e) => return fail(&e),
    };
    let tmux = std::env::var("TMUX").ok();
    let pane = std::env::var("TMUX_PANE").ok();
    // Outside tmux, on another server: nothing to do, nothing to say.
    let Ok(pane) = claude_hook::where_from(&cfg.socket, tmux.as_deref(), pane.as_deref()) else {
        return ExitCode::SUCCESS;
    };
    if let Some(why) = claude_hook::refused(&ev) {
        return fail(&why);
    }
    if dry_run {
        return fail(&format!(
            "dry run: {:?} from pane {pane}",
            claude_hook::action(&ev)
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
        rt.block_on(async { tokio::time::timeout(left, claude_hook::act(&r, &ev, &pane)).await });
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

/// `claude-settings [--write FILE]`.
pub(super) fn claude_settings(
    json: bool,
    cfg: &Config,
    write: Option<&std::path::Path>,
) -> ExitCode {
    let bin = match std::env::current_exe() {
        Ok(b) => b,
        Err(e) => {
            return command_error(
                json,
                CommandError::Refused(format!("failed to find this binary's path: {e}")),
            )
        }
    };
    // The settings in effect, from the settings file or the environment; and the file itself,
    // which the hook then reads as every command does.
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
    let command = claude_hook::hook_command(&bin, &assigns);
    let Some(file) = write else {
        print_json(&claude_hook::fragment(&command));
        return ExitCode::SUCCESS;
    };
    match claude_hook::write_settings(file, &command) {
        Ok(changed) => {
            if json {
                print_json(&serde_json::json!({
                    "ok": true,
                    "file": file,
                    "changed": changed,
                    "command": command,
                }));
            } else if changed {
                out(&format!("{}: ccs-reap's hooks written\n", file.display()));
            } else {
                out(&format!("{}: already up to date\n", file.display()));
            }
            ExitCode::SUCCESS
        }
        Err(e) => command_error(json, CommandError::Refused(e)),
    }
}
