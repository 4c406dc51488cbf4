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
    if let Some(name) = &cli.user {
        if !matches!(
            cli.cmd,
            Some(Cmd::Doctor | Cmd::Status { .. } | Cmd::Config)
        ) {
            say!("ccs-reap: --user goes with doctor, status and config");
            return ExitCode::from(exit::CONFIG);
        }
        return as_user::exec_as(name, cli.config.is_some());
    }
    if let Some(code) = generated(cli.cmd.as_ref()) {
        return code;
    }
    if let Some(Cmd::ClaudeHook { dry_run }) = cli.cmd {
        return claude_hook_main(cli.dry_run || dry_run, cli.config.as_deref());
    }
    if let Some(Cmd::Hook { agent, dry_run }) = &cli.cmd {
        return agent_hook_main(agent, cli.dry_run || *dry_run, cli.config.as_deref());
    }
    // Before the settings are read, a refusal of them is said as the logs will be.
    if std::env::var("CCS_LOG_FORMAT").is_ok_and(|v| v.trim().eq_ignore_ascii_case("json")) {
        set_json_stderr(true);
    }
    raise_fd_limit();
    let cfg = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            if std::env::var_os("CCS_LOG_FORMAT").is_none() && file_asks_json(cli.config.as_deref())
            {
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
            return ExitCode::from(exit::CONFIG);
        }
    };
    // INFO lines for the daemon, or with -v; a command's results are on stdout.
    // (`events`, which runs until stopped, logs as the daemon does: "following the audit log".)
    let daemon = (cli.cmd.is_none() && !cli.once) || matches!(cli.cmd, Some(Cmd::Events { .. }));
    let outcomes_said = cli.once || matches!(cli.cmd, Some(Cmd::Reap { .. }));
    init_logging(&cfg, !(daemon || cli.verbose), outcomes_said);
    // `ccs-reap --dry-run status|reap ID|claude-hook` (before each took its own) still works.
    let root_dry_run_ok = matches!(
        cli.cmd,
        None | Some(Cmd::Status { .. } | Cmd::Reap { .. } | Cmd::ClaudeHook { .. })
    );
    if cli.dry_run && !root_dry_run_ok {
        say!("ccs-reap: {DRY_RUN_GOES_WITH}");
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

/// Run the command. Over 80 lines: the dispatch, one arm per command, each handing its arguments to
/// its own function; split, the table of commands would be in several places.
async fn run(cli: Cli, cfg: Config) -> ExitCode {
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    // Every command that talks to tmux refuses one older than it supports (one `tmux -V`).
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
            return ExitCode::from(exit::CONFIG);
        }
    }
    match cli.cmd {
        // Printed before the configuration is read: generated().
        Some(Cmd::Completions { .. } | Cmd::Man { .. }) => ExitCode::SUCCESS,
        // Handled in main(), before anything that could exit with another code.
        Some(Cmd::ClaudeHook { .. } | Cmd::Hook { .. }) => ExitCode::SUCCESS,
        Some(Cmd::HookSettings {
            agent,
            write,
            socket,
            prefix,
        }) => hook_settings(
            cli.json,
            &cfg,
            &agent,
            write.as_deref(),
            socket.as_deref(),
            prefix.as_deref(),
        ),
        Some(Cmd::ClaudeSettings {
            write,
            socket,
            prefix,
            resume_threshold,
        }) => claude_settings(
            cli.json,
            &cfg,
            write.as_deref(),
            (socket.as_deref(), prefix.as_deref()),
            resume_threshold,
        ),
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
        Some(Cmd::Status { wide, .. }) => status(cfg, cli.json, wide).await,
        Some(Cmd::Doctor) => doctor(cfg, cli.json).await,
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
        Some(Cmd::Spawn {
            id,
            cid,
            cwd,
            agent,
            new_conversation,
            no_room,
            cmd,
        }) => {
            let (id, cmd) = match args::spawn_words(id, cmd) {
                Ok(w) => w,
                Err(e) => {
                    let _ = command_error(cli.json, CommandError::Refused(e));
                    return ExitCode::from(exit::CONFIG);
                }
            };
            let r = Reaper::new(cfg, false);
            let make_room = room::Before { r: &r, id: &id };
            let room_first = !no_room && crate::engine::room::in_force(&r.cfg.policy);
            let ask = commands::SpawnAsk {
                cid: cid.as_deref(),
                cwd,
                agent: agent.as_deref(),
                new_conversation,
                room: room_first.then_some(&make_room as &dyn crate::engine::resume::MakeRoom),
            };
            match commands::spawn(&r, &id, &cmd, ask).await {
                Ok(true) => hook_answer(cli.json, &id, "spawned", 0, None),
                Ok(false) => hook_answer(cli.json, &id, "exists", 0, None),
                Err(commands::CommandError::NoRoom(why)) => room::no_room(cli.json, &id, &why),
                Err(e) => command_error(cli.json, e),
            }
        }
        Some(Cmd::Room { need, for_id }) => {
            let need = match room::parse_need(&need) {
                Ok(n) => n,
                Err(e) => {
                    say!("ccs-reap: {e}");
                    return ExitCode::from(exit::CONFIG);
                }
            };
            if let Some(id) = for_id
                .as_deref()
                .filter(|i| !crate::core::policy::valid_id(i))
            {
                say!("ccs-reap: --for {id:?} is not a chat id (letters, digits, '_' and '-')");
                return ExitCode::from(exit::CONFIG);
            }
            room::room(&Reaper::new(cfg, false), cli.json, need, for_id).await
        }
        Some(Cmd::Resume { id }) => resume::resume(cfg, cli.json, &id).await,
        Some(Cmd::Forget { id }) => resume::forget(cfg, cli.json, &id),
        Some(Cmd::Reap { id, force, dry_run }) => {
            reap(cfg, cli.json, cli.dry_run || dry_run, &id, force).await
        }
        Some(Cmd::Events { from_start }) => {
            let mut sink = output::Stdout;
            let state = &Reaper::new(cfg, true).state;
            match crate::adapters::state::follow::run(state, from_start, &mut sink).await {
                Ok(()) => ExitCode::SUCCESS,
                // The writer said so already, once.
                Err(crate::adapters::state::follow::EventsError::Write(_)) => {
                    ExitCode::from(exit::FAILED)
                }
                Err(e) => {
                    say!("ccs-reap: {e}");
                    ExitCode::from(exit::FAILED)
                }
            }
        }
        None => {
            if !cfg.policy.enabled() {
                // Said as a warning: a daemon or a cron job that does nothing is not silent.
                tracing::warn!(
                    "reaping is disabled: nothing to do (it is off until {})",
                    crate::config::ENABLED_BY
                );
                if cli.once {
                    // Still a look at the socket: a wrong one is said even so.
                    let rep = crate::engine::sweep::status(&Reaper::new(cfg, true)).await;
                    warn_no_server(&rep);
                } else if crate::adapters::systemd::managed() {
                    // Under systemd: up and saying why, not a failed start restarted forever.
                    return match crate::engine::daemon::standby(&cfg).await {
                        Ok(()) => ExitCode::SUCCESS,
                        Err(e) => {
                            say!("ccs-reap: {e}");
                            ExitCode::from(exit::FAILED)
                        }
                    };
                }
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
    let shown = warn_activity(&r, &rep);
    if json {
        print_json(&rep);
    } else {
        out(&render::render_status(&shown, wide));
    }
    if rep.error.is_some() {
        ExitCode::from(exit::FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// `doctor`: every check once; exit 1 on a problem.
async fn doctor(cfg: Config, json: bool) -> ExitCode {
    use crate::core::doctor::{any_problem, Verdict};
    let r = Reaper::new(cfg, true);
    let rep = crate::engine::sweep::status(&r).await;
    let checks = crate::engine::doctor::run(&r, rep).await;
    let bad = any_problem(&checks);
    if json {
        print_json(&serde_json::json!({ "ok": !bad, "checks": checks }));
    } else {
        let mut o = String::new();
        for c in &checks {
            let v = match c.verdict {
                Verdict::Ok => "ok     ",
                Verdict::Note => "note   ",
                Verdict::Problem => "PROBLEM",
            };
            o.push_str(&format!("{v} {:<9} {}\n", c.check, c.message));
        }
        let n = checks
            .iter()
            .filter(|c| c.verdict == Verdict::Problem)
            .count();
        o.push_str(&if bad {
            format!("{n} problem(s): chats may never be reaped\n")
        } else {
            "healthy\n".to_string()
        });
        out(&o);
    }
    if bad {
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
                    "reaped {} ({}): {}, {} freed, {} ms\n",
                    line.session,
                    line.tmux_id,
                    render::processes(line.pids.len()),
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
    let shown = warn_activity(&r, &rep);
    if json {
        print_json(&rep);
    } else {
        // The chats found lost with their server were not reaps of a batch: said here, once.
        for l in rep
            .reaps
            .iter()
            .filter(|l| l.outcome == crate::adapters::state::Outcome::Lost)
        {
            out(&render::render_reap(l));
        }
        out(&render::render_sweep_end(&shown));
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
                let holder = crate::adapters::state::StateDir::lock_holder(&p)
                    .map_or("a process that wrote no pid".to_string(), |pid| {
                        format!("pid {pid}")
                    });
                say!(
                    "ccs-reap: another reaper holds this socket: {holder}, by its lock file {}",
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
