//! `resume <id>` and `forget <id>`: the plain user's way back.

use super::*;
use crate::engine::resume::{self, Resumed};

/// `resume <id>`: bring the chat back if it sleeps, then attach: on a terminal (stdin and stdout
/// both), this process becomes `tmux attach`; otherwise it prints the attach command.
pub(super) async fn resume(cfg: Config, json: bool, id: &str) -> ExitCode {
    use std::io::IsTerminal;
    let r = Reaper::new(cfg, false);
    let did = match commands::resume(&r, id).await {
        Ok(d) => d,
        Err(e) => return command_error(json, e),
    };
    let name = format!("{}{id}", r.cfg.prefix);
    // Run inside a client of this very server: switch that client (TMUX tells which).
    let inside = std::env::var("TMUX")
        .ok()
        .as_deref()
        .and_then(crate::core::policy::socket_of_tmux_env)
        .is_some_and(|p| {
            crate::config::Socket::Path(p.into()).canonical_path() == r.cfg.socket.canonical_path()
        });
    let attach = r.tmux.attach_argv(&name, inside);
    let shown = attach
        .iter()
        .map(|w| {
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                w.clone()
            } else {
                claude_hook::sh_quote(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    let result = match did {
        Resumed::Live => "live",
        Resumed::Spawned => "spawned",
    };
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if json || !terminal {
        if json {
            print_json(&serde_json::json!({
                "ok": true,
                "session": id,
                "result": result,
                "attached": false,
                "attach": attach,
                "exit": 0,
            }));
        } else {
            if did == Resumed::Spawned {
                out(&format!("{name} was asleep and is back\n"));
            }
            out(&format!("attach with: {shown}\n"));
        }
        return ExitCode::SUCCESS;
    }
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&attach[0]);
    cmd.args(&attach[1..]);
    if !inside {
        cmd.env_remove("TMUX");
    }
    let e = cmd.exec();
    say!("ccs-reap: failed to run {shown}: {e}");
    ExitCode::from(exit::FAILED)
}

/// `forget <id>`: remove its tombstone (an audit line says so).
pub(super) fn forget(cfg: Config, json: bool, id: &str) -> ExitCode {
    let r = Reaper::new(cfg, false);
    match resume::forget(&r, id).map_err(CommandError::from) {
        Ok(t) => {
            let cid = t.and_then(|t| t.cid);
            if json {
                print_json(&serde_json::json!({
                    "ok": true, "session": id, "result": "forgotten", "cid": cid, "exit": 0,
                }));
            } else {
                out(&format!(
                    "forgot chat {id}{}\n",
                    cid.map_or(String::new(), |c| format!(" (conversation {c})"))
                ));
            }
            ExitCode::SUCCESS
        }
        Err(e) => command_error(json, e),
    }
}
