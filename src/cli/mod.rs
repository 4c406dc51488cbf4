//! The command line. Thin: parse the command line, set up logging, call the library, map outcomes to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use crate::config::{Config, LogFormat};
use crate::engine::claude_hook::{self, HookInput, Outcome};
use crate::engine::commands::{self, CommandError, ReapNow};
use crate::engine::context::Reaper;

/// A line on stderr, never panicking as `eprintln!` does when stderr cannot be written (`2>
/// /dev/full`): a message that cannot be said is dropped.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

mod agents;
mod args;
mod claude;
pub mod exit;
mod logging;
mod man;
mod output;
pub mod render;

use agents::*;
use args::*;
use claude::*;
use logging::*;
use man::*;
use output::*;

/// A command line that is not a command: `--help` and `--version` go to stdout through [`out`]
/// (clap's own printing drops a write error and exits 0); anything else is clap's (stderr, exit 2).
/// On a terminal, clap prints them itself, with its colours.
fn parse_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    use std::io::IsTerminal;
    let to_stdout = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !to_stdout || std::io::stdout().is_terminal() {
        e.exit()
    }
    out(&e.render().to_string());
    exit_code(ExitCode::SUCCESS)
}

/// A batch of reaps holds a pidfd per victim: take the hard limit of open files, not the soft one.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: l.maximum,
                maximum: l.maximum,
            },
        );
    }
}

pub fn main() -> ExitCode {
    let parsed = cli_command().try_get_matches().and_then(|m| {
        use clap::FromArgMatches;
        Cli::from_arg_matches(&m)
    });
    let cli = match parsed {
        Ok(c) => c,
        Err(e) => return parse_error(e),
    };
    if let Some(code) = generated(cli.cmd.as_ref()) {
        return code;
    }
    if matches!(cli.cmd, Some(Cmd::ClaudeHook)) {
        return claude_hook_main(cli.dry_run, cli.config.as_deref());
    }
    if let Some(Cmd::Hook { agent }) = &cli.cmd {
        return agent_hook_main(agent, cli.dry_run, cli.config.as_deref());
    }
    raise_fd_limit();
    let cfg = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            say!("ccs-reap: {e}");
            if cli.json {
                // One JSON document whatever the outcome, a refused setting too.
                print_json(&serde_json::json!({
                    "ok": false,
                    "error": e.to_string(),
                    "variable": e.var,
                    "value": e.value,
                    "expected": e.expected,
                    "exit": exit::CONFIG,
                }));
            }
            return ExitCode::from(exit::CONFIG);
        }
    };
    init_logging(&cfg);
    if cli.dry_run
        && matches!(
            cli.cmd,
            Some(
                Cmd::Turn { .. }
                    | Cmd::Spawn { .. }
                    | Cmd::Pin { .. }
                    | Cmd::Unpin { .. }
                    | Cmd::ClaudeSettings { .. }
                    | Cmd::HookSettings { .. }
                    | Cmd::Config
            )
        )
    {
        say!("ccs-reap: --dry-run goes with the daemon, --once, status and reap; turn and spawn always act");
        return ExitCode::from(exit::CONFIG);
    }
    if cli.once && cli.cmd.is_some() {
        say!("ccs-reap: --once goes with the daemon, not with a subcommand");
        return ExitCode::from(exit::CONFIG);
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("ccs-reap: failed to start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    exit_code(rt.block_on(run(cli, cfg)))
}

async fn run(cli: Cli, cfg: Config) -> ExitCode {
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    // Every command that talks to tmux refuses one older than it supports (one `tmux -V`).
    let talks_to_tmux = cli.cmd.is_some() || cfg.policy.enabled();
    if talks_to_tmux
        && !matches!(
            cli.cmd,
            Some(
                Cmd::Formats | Cmd::ClaudeSettings { .. } | Cmd::HookSettings { .. } | Cmd::Config
            )
        )
    {
        if let Err(e) = crate::adapters::tmux::version::check(&cfg.socket, cfg.tmux_timeout).await {
            let _ = command_error(cli.json, CommandError::Refused(e)); // stderr, and the JSON
            return ExitCode::from(exit::CONFIG);
        }
    }
    match cli.cmd {
        // Printed before the configuration is read: generated().
        Some(Cmd::Completions { .. } | Cmd::Man { .. }) => ExitCode::SUCCESS,
        // Handled in main(), before anything that could exit with another code.
        Some(Cmd::ClaudeHook | Cmd::Hook { .. }) => ExitCode::SUCCESS,
        Some(Cmd::HookSettings { agent, write }) => {
            hook_settings(cli.json, &cfg, &agent, write.as_deref())
        }
        Some(Cmd::ClaudeSettings { write }) => claude_settings(cli.json, &cfg, write.as_deref()),
        Some(Cmd::Config) => {
            if cli.json {
                print_json(&cfg.to_json());
            } else {
                out(&cfg.render());
            }
            ExitCode::SUCCESS
        }
        Some(Cmd::Formats) => {
            print_json(&serde_json::json!({
                "SESSION_FMT": crate::adapters::tmux::SESSION_FMT,
                "CLIENT_FMT": crate::adapters::tmux::CLIENT_FMT,
                "PANE_FMT": crate::adapters::tmux::PANE_FMT,
            }));
            ExitCode::SUCCESS
        }
        Some(Cmd::Status { wide }) => status(cfg, cli.json, wide).await,
        Some(Cmd::Turn { what }) => turn(cfg, cli.json, what).await,
        Some(Cmd::Pin { id }) => pin_answer(
            cli.json,
            &id,
            commands::pin(&Reaper::new(cfg, false), &id, true).await,
            "pinned",
        ),
        Some(Cmd::Unpin { id }) => pin_answer(
            cli.json,
            &id,
            commands::pin(&Reaper::new(cfg, false), &id, false).await,
            "unpinned",
        ),
        Some(Cmd::Spawn { id, cid, cwd, cmd }) => {
            match commands::spawn(&Reaper::new(cfg, false), &id, cid.as_deref(), cwd, &cmd).await {
                Ok(true) => hook_answer(cli.json, &id, "spawned", 0, None),
                Ok(false) => hook_answer(cli.json, &id, "exists", 0, None),
                Err(e) => command_error(cli.json, e),
            }
        }
        Some(Cmd::Reap { id, force }) => reap(cfg, cli.json, cli.dry_run, &id, force).await,
        Some(Cmd::Events { from_start }) => {
            match crate::adapters::state::follow::run(&Reaper::new(cfg, true).state, from_start)
                .await
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    say!("ccs-reap: {e}");
                    ExitCode::from(exit::FAILED)
                }
            }
        }
        None => {
            if !cfg.policy.enabled() {
                tracing::info!(
                    "reaping is disabled (CCS_ENGINE_IDLE_KILL_MS unset, empty or 0, and no memory or stuck policy): nothing to do"
                );
                return ExitCode::SUCCESS;
            }
            if cli.once {
                once(cfg, cli.json, cli.dry_run).await
            } else {
                daemon(Reaper::new(cfg, cli.dry_run)).await
            }
        }
    }
}

/// `turn begin|end`: the studio's hooks around a turn; exit 4 when the session is gone.
async fn turn(cfg: Config, json: bool, what: TurnCmd) -> ExitCode {
    match what {
        TurnCmd::Begin { id } => match commands::turn_begin(&Reaper::new(cfg, false), &id).await {
            Ok(true) => hook_answer(json, &id, "started", 0, None),
            Ok(false) => hook_answer(
                json,
                &id,
                "gone",
                exit::RESPAWN,
                Some(format!(
                    "session {id} is gone (reaped or never spawned): respawn it"
                )),
            ),
            Err(e) => command_error(json, e),
        },
        TurnCmd::End { id } => match commands::turn_end(&Reaper::new(cfg, false), &id).await {
            Ok(true) => hook_answer(json, &id, "ended", 0, None),
            Ok(false) => hook_answer(
                json,
                &id,
                "gone",
                exit::RESPAWN,
                Some(format!("session {id} is gone: respawn it")),
            ),
            Err(e) => command_error(json, e),
        },
    }
}

/// `status`: the table or the JSON; exit 1 when tmux could not be read.
async fn status(cfg: Config, json: bool, wide: bool) -> ExitCode {
    let r = Reaper::new(cfg, true);
    let rep = crate::engine::sweep::status(&r).await;
    warn_no_server(&rep);
    if json {
        print_json(&rep);
    } else {
        out(&render::render_status(&rep, wide));
    }
    if rep.error.is_some() {
        ExitCode::from(exit::FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// `reap <id>`: one chat now (or what would be done, `--dry-run`).
async fn reap(cfg: Config, json: bool, dry_run: bool, id: &str, force: bool) -> ExitCode {
    let r = Reaper::new(cfg, dry_run);
    match commands::reap_now(&r, id, force).await {
        Ok(ReapNow::Reaped(line)) => {
            if json {
                print_json(&line);
            } else {
                out(&format!(
                    "reaped {} ({}): {} processes, {} freed, {} ms\n",
                    line.session,
                    line.tmux_id,
                    line.pids.len(),
                    render::human_bytes(line.pss_bytes.unwrap_or(line.rss_bytes)),
                    line.took_ms
                ));
            }
            ExitCode::SUCCESS
        }
        Ok(ReapNow::WouldReap(m)) => {
            if json {
                print_json(&serde_json::json!({
                    "ok": true,
                    "dry_run": true,
                    "would_reap": true,
                    "message": m,
                }));
            } else {
                out(&format!("{m}\n"));
            }
            ExitCode::SUCCESS
        }
        Err(e) => command_error(json, e),
    }
}

/// `--once`: one sweep, each reap's line as it ends (or one JSON document); exit 1 when a reap
/// failed or tmux could not be read.
async fn once(cfg: Config, json: bool, dry_run: bool) -> ExitCode {
    let r = Reaper::new(cfg, dry_run);
    // Each reap's line as soon as it is over; `--json` is one document at the end.
    let print = |l: &crate::adapters::state::AuditLine| out(&render::render_reap(l));
    let sink: Option<crate::engine::teardown::Sink> = (!json).then_some(&print);
    let rep = crate::engine::sweep::sweep(&r, crate::engine::sweep::Batches::Wait(sink)).await;
    warn_no_server(&rep);
    if json {
        print_json(&rep);
    } else {
        out(&render::render_sweep_end(&rep));
    }
    if rep
        .reaps
        .iter()
        .any(|l| l.outcome == crate::adapters::state::Outcome::Failed)
        || rep.error.is_some()
    {
        ExitCode::from(exit::FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

async fn daemon(r: Arc<Reaper>) -> ExitCode {
    // A dry-run daemon writes nothing: it needs no lock, and must not keep the real one out.
    let _lock = if r.dry_run {
        None
    } else {
        match r.state.lock(&r.cfg.socket.label()) {
            Ok(l) => Some(l),
            Err(crate::adapters::state::StateError::Locked(p)) => {
                say!(
                    "ccs-reap: another reaper holds this socket ({})",
                    p.display()
                );
                return ExitCode::from(exit::LOCKED);
            }
            Err(e) => {
                say!("ccs-reap: {e}");
                return ExitCode::from(exit::FAILED);
            }
        }
    };
    match crate::engine::daemon::run_daemon(r).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("ccs-reap: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}
