//! The command line. Thin: parse the command line, set up logging, call the library, map outcomes to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use crate::config::{Config, LogFormat};
use crate::engine::claude_hook::{self, HookInput, HookOutcome};
use crate::engine::commands::{self, CommandError, ReapNow};
use crate::engine::context::Reaper;

/// A line on stderr, never panicking as `eprintln!` does when stderr cannot be written (`2>
/// /dev/full`): a message that cannot be said is dropped.
/// Under `CCS_LOG_FORMAT=json`, the line is one JSON object as the log lines are
/// ([`logging::say_line`]).
macro_rules! say {
    ($($t:tt)*) => {{
        $crate::cli::logging::say_line(&format!($($t)*));
    }};
}

mod agents;
mod args;
mod as_user;
mod claude;
pub mod exit;
pub(crate) mod logging;
mod man;
mod output;
pub mod render;
mod resume;
mod room;
mod verbs;

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

/// The refusal of `--dry-run` where it means nothing (exit 2).
pub const DRY_RUN_GOES_WITH: &str = "--dry-run goes with the daemon, --once, status, reap, claude-hook and hook; turn, spawn, room, pin, unpin, claude-settings, hook-settings and events always act, config only prints";

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
    if let Some(code) = before_settings(&cli) {
        return code;
    }
    // Before the settings are read, a refusal of them is said as the logs will be.
    if std::env::var("CCS_LOG_FORMAT").is_ok_and(|v| v.trim().eq_ignore_ascii_case("json")) {
        set_json_stderr(true);
    }
    raise_fd_limit();
    let cfg = match load_settings(&cli) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // INFO lines for the daemon, or with -v; a command's results are on stdout.
    // (`events`, which runs until stopped, logs as the daemon does: "following the audit log".)
    let daemon = (cli.cmd.is_none() && !cli.once) || matches!(cli.cmd, Some(Cmd::Events { .. }));
    let outcomes_said = cli.once || matches!(cli.cmd, Some(Cmd::Reap { .. }));
    init_logging(&cfg, !(daemon || cli.verbose), outcomes_said);
    if let Some(code) = refused_flags(&cli) {
        return code;
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

/// What runs before the settings are read: `--user NAME` (run again as that user), the generated
/// pages (completions, man) and the hooks, each with its own exit code.
fn before_settings(cli: &Cli) -> Option<ExitCode> {
    if let Some(name) = &cli.user {
        if !matches!(
            cli.cmd,
            Some(Cmd::Doctor | Cmd::Status { .. } | Cmd::Config)
        ) {
            say!("ccs-reap: --user goes with doctor, status and config");
            return Some(ExitCode::from(exit::CONFIG));
        }
        return Some(as_user::exec_as(name, cli.config.is_some()));
    }
    if let Some(code) = generated(cli.cmd.as_ref()) {
        return Some(code);
    }
    if let Some(Cmd::ClaudeHook { dry_run }) = cli.cmd {
        return Some(claude_hook_main(
            cli.dry_run || dry_run,
            cli.config.as_deref(),
        ));
    }
    if let Some(Cmd::Hook { agent, dry_run }) = &cli.cmd {
        return Some(agent_hook_main(
            agent,
            cli.dry_run || *dry_run,
            cli.config.as_deref(),
        ));
    }
    None
}

/// The settings, or their refusal said (as JSON too under `--json`) with exit 2.
fn load_settings(cli: &Cli) -> Result<Config, ExitCode> {
    Config::load(cli.config.as_deref()).map_err(|e| {
        if std::env::var_os("CCS_LOG_FORMAT").is_none() && file_asks_json(cli.config.as_deref()) {
            set_json_stderr(true);
        }
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
        ExitCode::from(exit::CONFIG)
    })
}

/// `--dry-run` and `--once` where they mean nothing: said, exit 2.
fn refused_flags(cli: &Cli) -> Option<ExitCode> {
    // `ccs-reap --dry-run status|reap ID|claude-hook` (before each took its own) still works.
    let root_dry_run_ok = matches!(
        cli.cmd,
        None | Some(Cmd::Status { .. } | Cmd::Reap { .. } | Cmd::ClaudeHook { .. })
    );
    if cli.dry_run && !root_dry_run_ok {
        say!("ccs-reap: {DRY_RUN_GOES_WITH}");
        return Some(ExitCode::from(exit::CONFIG));
    }
    if cli.once && cli.cmd.is_some() {
        say!("ccs-reap: --once goes with the daemon, not with a subcommand");
        return Some(ExitCode::from(exit::CONFIG));
    }
    None
}

/// Run the command: each command's arguments handed to its own function ([`verbs`]).
async fn run(cli: Cli, cfg: Config) -> ExitCode {
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    if let Err(code) = tmux_supported(&cli, &cfg).await {
        return code;
    }
    let json = cli.json;
    let Some(cmd) = cli.cmd else {
        return verbs::sweeps(cfg, json, cli.once, cli.dry_run).await;
    };
    match cmd {
        // Printed before the configuration is read: generated().
        Cmd::Completions { .. } | Cmd::Man { .. } => ExitCode::SUCCESS,
        // Handled in main(), before anything that could exit with another code.
        Cmd::ClaudeHook { .. } | Cmd::Hook { .. } => ExitCode::SUCCESS,
        Cmd::HookSettings {
            agent,
            write,
            socket,
            prefix,
        } => hook_settings(
            json,
            &cfg,
            HookSettingsAsk {
                agent: &agent,
                write: write.as_deref(),
                socket: socket.as_deref(),
                prefix: prefix.as_deref(),
            },
        ),
        Cmd::ClaudeSettings {
            write,
            socket,
            prefix,
            resume_threshold,
        } => claude_settings(
            json,
            &cfg,
            write.as_deref(),
            (socket.as_deref(), prefix.as_deref()),
            resume_threshold,
        ),
        Cmd::Config => verbs::config(&cfg, json),
        Cmd::Formats => verbs::formats(),
        Cmd::Status { wide, .. } => verbs::status(cfg, json, wide).await,
        Cmd::Doctor => verbs::doctor(cfg, json).await,
        Cmd::Turn { what } => verbs::turn(cfg, json, what).await,
        Cmd::Pin { id } => verbs::pin(cfg, json, &id, true).await,
        Cmd::Unpin { id } => verbs::pin(cfg, json, &id, false).await,
        Cmd::Spawn {
            id,
            cid,
            cwd,
            agent,
            new_conversation,
            no_room,
            cmd,
        } => {
            let a = verbs::SpawnCli {
                id,
                cid,
                cwd,
                agent,
                new_conversation,
                no_room,
                cmd,
            };
            verbs::spawn(cfg, json, a).await
        }
        Cmd::Room { need, for_id } => verbs::room(cfg, json, &need, for_id).await,
        Cmd::Resume { id } => resume::resume(cfg, json, &id).await,
        Cmd::Forget { id } => resume::forget(cfg, json, &id),
        Cmd::Reap { id, force, dry_run } => {
            verbs::reap(cfg, json, cli.dry_run || dry_run, &id, force).await
        }
        Cmd::Events { from_start } => verbs::events(cfg, from_start).await,
    }
}

/// Every command that talks to tmux refuses one older than it supports (one `tmux -V`): said,
/// with exit 2.
async fn tmux_supported(cli: &Cli, cfg: &Config) -> Result<(), ExitCode> {
    let talks_to_tmux = cli.cmd.is_some() || cli.once || cfg.policy.enabled();
    if talks_to_tmux
        && !matches!(
            cli.cmd,
            Some(
                Cmd::Formats | Cmd::ClaudeSettings { .. } | Cmd::HookSettings { .. } | Cmd::Config
            )
        )
    {
        if let Err(e) = crate::adapters::tmux::version::check(&cfg.socket, cfg.tmux_timeout).await {
            let _ = command_error(cli.json, CommandError::Refused(e.to_string())); // stderr, and the JSON
            return Err(ExitCode::from(exit::CONFIG));
        }
    }
    Ok(())
}

/// Whether the settings file (when it can be read) sets `CCS_LOG_FORMAT=json`: a refused value
/// elsewhere in it is then said as JSON too, as the logs would have been.
fn file_asks_json(flag: Option<&std::path::Path>) -> bool {
    let Ok(Some(f)) = crate::config::SettingsFile::load(flag) else {
        return false;
    };
    f.entries
        .iter()
        .rev()
        .find(|e| e.key == "CCS_LOG_FORMAT")
        .is_some_and(|e| e.value.trim().eq_ignore_ascii_case("json"))
}
