//! One function a command: what `run` hands each command's arguments to, and the exit code it
//! ends with.

use super::*;

/// `turn begin|end`: the studio's hooks around a turn; exit 4 when the session is gone.
pub(super) async fn turn(cfg: Config, json: bool, what: TurnCmd) -> ExitCode {
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
pub(super) async fn status(cfg: Config, json: bool, wide: bool) -> ExitCode {
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
pub(super) async fn doctor(cfg: Config, json: bool) -> ExitCode {
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
pub(super) async fn reap(
    cfg: Config,
    json: bool,
    dry_run: bool,
    id: &str,
    force: bool,
) -> ExitCode {
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
pub(super) async fn once(cfg: Config, json: bool, dry_run: bool) -> ExitCode {
    let r = Reaper::new(cfg, dry_run);
    // Each reap's line as soon as it is over; `--json` is one document at the end.
    let print = |l: &crate::adapters::state::AuditLine| out(&render::render_reap(l));
    let sink: Option<crate::engine::teardown::LineSink> = (!json).then_some(&print);
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

pub(super) async fn daemon(r: Arc<Reaper>) -> ExitCode {
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

/// `config`: the settings in force, as text or JSON.
pub(super) fn config(cfg: &Config, json: bool) -> ExitCode {
    if json {
        print_json(&cfg.to_json());
    } else {
        out(&cfg.render());
    }
    ExitCode::SUCCESS
}

/// `formats`: the tmux formats ccs-reap lists with.
pub(super) fn formats() -> ExitCode {
    print_json(&serde_json::json!({
        "SESSION_FMT": crate::adapters::tmux::SESSION_FMT,
        "CLIENT_FMT": crate::adapters::tmux::CLIENT_FMT,
        "PANE_FMT": crate::adapters::tmux::PANE_FMT,
    }));
    ExitCode::SUCCESS
}

/// `pin <id>` (`on`) and `unpin <id>`.
pub(super) async fn pin(cfg: Config, json: bool, id: &str, on: bool) -> ExitCode {
    let done = commands::pin(&Reaper::new(cfg, false), id, on).await;
    pin_answer(json, id, done, if on { "pinned" } else { "unpinned" })
}

/// What `spawn` was asked, as its command line gave it.
pub(super) struct SpawnCli {
    pub id: Option<String>,
    pub cid: Option<String>,
    pub cwd: Option<PathBuf>,
    pub agent: Option<String>,
    pub new_conversation: bool,
    pub no_room: bool,
    pub cmd: Vec<String>,
}

/// `spawn [id] [-- cmd...]`: a new chat, room made first when a room rule is in force.
pub(super) async fn spawn(cfg: Config, json: bool, a: SpawnCli) -> ExitCode {
    let (id, cmd) = match args::spawn_words(a.id, a.cmd) {
        Ok(w) => w,
        Err(e) => {
            let _ = command_error(json, CommandError::Refused(e));
            return ExitCode::from(exit::CONFIG);
        }
    };
    let r = Reaper::new(cfg, false);
    let make_room = room::Before { r: &r, id: &id };
    let room_first = !a.no_room && crate::engine::room::in_force(&r.cfg.policy);
    let ask = commands::SpawnAsk {
        cid: a.cid.as_deref(),
        cwd: a.cwd,
        agent: a.agent.as_deref(),
        new_conversation: a.new_conversation,
        room: room_first.then_some(&make_room as &dyn crate::engine::resume::MakeRoom),
    };
    match commands::spawn(&r, &id, &cmd, ask).await {
        Ok(true) => hook_answer(json, &id, "spawned", 0, None),
        Ok(false) => hook_answer(json, &id, "exists", 0, None),
        Err(commands::CommandError::NoRoom(why)) => room::no_room(json, &id, &why),
        Err(e) => command_error(json, e),
    }
}

/// `room [--need SIZE|auto] [--for ID]`.
pub(super) async fn room(cfg: Config, json: bool, need: &str, for_id: Option<String>) -> ExitCode {
    let need = match room::parse_need(need) {
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
    room::room(&Reaper::new(cfg, false), json, need, for_id).await
}

/// `events [--from-start]`: the audit log as it grows, until stopped.
pub(super) async fn events(cfg: Config, from_start: bool) -> ExitCode {
    let mut sink = output::Stdout;
    let state = &Reaper::new(cfg, true).state;
    match crate::adapters::state::follow::run(state, from_start, &mut sink).await {
        Ok(()) => ExitCode::SUCCESS,
        // The writer said so already, once.
        Err(crate::adapters::state::follow::EventsError::Write(_)) => ExitCode::from(exit::FAILED),
        Err(e) => {
            say!("ccs-reap: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// No command: the daemon, or one sweep (`--once`); with reaping off, a warning and (under
/// systemd) a stand-by that says why.
pub(super) async fn sweeps(cfg: Config, json: bool, once_only: bool, dry_run: bool) -> ExitCode {
    if cfg.policy.enabled() {
        return if once_only {
            once(cfg, json, dry_run).await
        } else {
            daemon(Reaper::new(cfg, dry_run)).await
        };
    }
    // Said as a warning: a daemon or a cron job that does nothing is not silent.
    tracing::warn!(
        "reaping is disabled: nothing to do (it is off until {})",
        crate::config::ENABLED_BY
    );
    if once_only {
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
    ExitCode::SUCCESS
}
