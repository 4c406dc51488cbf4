//! `claude-hook` and `claude-settings`: Claude Code's hook event read from stdin (bounded, within
//! a deadline), the answer, and the settings fragment.

use super::*;
use crate::core::capped::{self, Capped};

/// The largest hook event read (a `Stop` carries the last reply, a `UserPromptSubmit` the prompt).
pub(super) const MAX_EVENT_BYTES: u64 = 64 << 20;

/// Read stdin to its end, waiting at most `limit`, through the one thread with a deadline
/// ([`crate::adapters::activity::within`]): a stdin that never closes must not hold claude (the
/// thread is left behind; the process exits without it).
pub(super) async fn read_stdin_within(limit: Duration) -> Result<String, String> {
    static STUCK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let read = || {
        capped::read(std::io::stdin().lock(), MAX_EVENT_BYTES, 0)
            .map_err(|e| format!("failed to read the hook event on stdin: {e}"))
    };
    let deadline = crate::adapters::activity::Deadline {
        stuck: &STUCK,
        max: 1,
        timeout: limit,
    };
    match crate::adapters::activity::within(deadline, "the hook event on stdin", read)
        .await
        .map_err(|e| e.to_string())
    {
        Ok(Capped::Whole(b)) => {
            String::from_utf8(b).map_err(|e| format!("the hook event is not UTF-8: {e}"))
        }
        Ok(Capped::TooLarge) => Err(format!(
            "the hook event on stdin is larger than {MAX_EVENT_BYTES} bytes"
        )),
        Err(e) if e.contains("could not be read within") => Err(format!(
            "no complete hook event on stdin within {limit:?} (CCS_TMUX_TIMEOUT_MS)"
        )),
        Err(e) => Err(e),
    }
}

/// The hooks' runtime: one thread, started before stdin is read (the read waits on it).
pub(super) fn hook_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("failed to start the async runtime: {e}"))
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
    let rt = match hook_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let ev = match rt
        .block_on(read_stdin_within(budget))
        .and_then(|t| HookInput::parse(&t).map_err(|e| e.to_string()))
    {
        Ok(ev) => ev,
        Err(e) => return fail(&e),
    };
    let tmux = std::env::var("TMUX").ok();
    let pane = std::env::var("TMUX_PANE").ok();
    let pane = claude_hook::where_from(&cfg.socket, tmux.as_deref(), pane.as_deref());
    // A cid longer than an id may be is refused here, the known cid kept (29.7).
    if let Some(why) = claude_hook::refused(&ev) {
        return fail(&why);
    }
    let left = budget.saturating_sub(started.elapsed());
    if dry_run {
        let r = Reaper::new(cfg, true);
        let said = rt.block_on(async {
            tokio::time::timeout(left, claude_hook::dry_run(&r, &ev, pane)).await
        });
        return hook_dry_run_said(said.ok(), budget, fail);
    }
    // Outside tmux, on another server: nothing to do, nothing to say.
    let Ok(pane) = pane else {
        return ExitCode::SUCCESS;
    };
    let r = Reaper::new(cfg, false);
    let done =
        rt.block_on(async { tokio::time::timeout(left, claude_hook::act(&r, &ev, &pane)).await });
    room_after_hook(&rt, &r, done.as_ref().ok());
    hook_exit(done.ok(), budget, fail)
}

/// A new chat's session-start hook asks for room, after its own work and outside its budget (a
/// teardown is never cut short); no room is a warning on stderr (the chat is started anyway).
pub(super) fn room_after_hook<E>(
    rt: &tokio::runtime::Runtime,
    r: &Reaper,
    done: Option<&Result<HookOutcome, E>>,
) {
    if let Some(Ok(HookOutcome::NewChat { name, id, .. })) = done {
        let said = rt.block_on(crate::engine::room::on_session_start(r, name, id));
        tracing::debug!(session = %name, "{said}");
    }
}

/// A hook's `--dry-run`: what it would do (`None`: it gave up at `budget`), said on stderr.
pub(super) fn hook_dry_run_said(
    said: Option<String>,
    budget: Duration,
    fail: impl Fn(&str) -> ExitCode,
) -> ExitCode {
    fail(&format!(
        "dry run: {}",
        said.unwrap_or_else(|| format!("nothing: gave up after {budget:?} (CCS_TMUX_TIMEOUT_MS)"))
    ))
}

/// A hook's exit: 2 with the reason (plain text, as the agent shows it to the user) for a prompt
/// a reap holds, else 0, with one line on stderr for what failed (`None`: it gave up at
/// `budget`).
pub(super) fn hook_exit<E: std::fmt::Display>(
    done: Option<Result<HookOutcome, E>>,
    budget: Duration,
    fail: impl Fn(&str) -> ExitCode,
) -> ExitCode {
    match done {
        Some(Ok(HookOutcome::Blocked(why))) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{why}");
            ExitCode::from(exit::BLOCKED)
        }
        Some(Ok(HookOutcome::Done(_) | HookOutcome::Skipped(_) | HookOutcome::NewChat { .. })) => {
            ExitCode::SUCCESS
        }
        Some(Err(e)) => fail(&e.to_string()),
        None => fail(&format!(
            "gave up after {budget:?} (CCS_TMUX_TIMEOUT_MS): the chat's marks may be stale"
        )),
    }
}

/// Where the hooks' socket comes from: `--socket`, else the configuration's (a configured
/// socket, else, inside tmux, `$TMUX`'s server, else the default). The path, and what chose it (`None`: the default,
/// which is said on stderr).
fn hook_socket(cfg: &Config, flag: Option<&str>) -> Result<(PathBuf, Option<String>), String> {
    use crate::config::{Socket, ValueSource};
    if let Some(f) = flag {
        let s = if f.contains('/') {
            let p = PathBuf::from(f);
            if !p.is_absolute() {
                return Err(format!(
                    "--socket {f:?}: a socket path must be absolute (or give a name, as tmux -L takes it)"
                ));
            }
            Socket::Path(p)
        } else if crate::core::policy::valid_id(f) {
            Socket::Name(f.to_string())
        } else {
            return Err(format!(
                "--socket {f:?}: neither an absolute path nor a socket name ([A-Za-z0-9_-])"
            ));
        };
        return Ok((s.canonical_path(), Some("--socket".into())));
    }
    let configured = cfg.sources.iter().find(|e| {
        matches!(e.name, "CCS_TMUX_SOCKET" | "CCS_TMUX_SOCKET_PATH")
            && e.value.is_some()
            && e.source != ValueSource::Default
    });
    if let Some(e) = configured {
        return Ok((
            cfg.socket.canonical_path(),
            Some(format!("{} ({})", e.name, e.source)),
        ));
    }
    // Inside tmux, with nothing configured, the configuration already is `TMUX`'s server (the
    // one rule every command follows).
    Ok((
        cfg.socket.canonical_path(),
        cfg.socket_from_tmux.then(|| "$TMUX".into()),
    ))
}

/// This binary's path as an upgrade leaves it valid, when it is a pnpm install's: pnpm keeps
/// packages in `<root>/node_modules/.pnpm/<name>@<version>/node_modules/<name>`, a path an upgrade
/// removes, and links `<root>/node_modules/ccs-reap` to the ccs-reap of the version installed,
/// whose platform package is its sibling there. `<root>/node_modules/ccs-reap/../@ccs-reap/<pkg>
/// /bin/ccs-reap` follows that link (the kernel takes `..` after it), so it names whichever
/// version is installed. `None` (the path as it is) outside pnpm's store, or when that path is not
/// this very binary.
fn upgrade_proof(exe: &std::path::Path) -> Option<PathBuf> {
    let s = exe.to_str()?;
    let (root, rest) = s.split_once("/node_modules/.pnpm/")?;
    let (_, pkg) = rest.split_once("/node_modules/@ccs-reap/")?;
    let pkg = pkg.strip_suffix("/bin/ccs-reap")?;
    if pkg.contains('/') {
        return None;
    }
    let stable = PathBuf::from(format!(
        "{root}/node_modules/ccs-reap/../@ccs-reap/{pkg}/bin/ccs-reap"
    ));
    let same = |a: &std::path::Path, b: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    };
    same(&stable, exe).then_some(stable)
}

/// What the hooks a settings command writes run with: this binary's path, the settings as
/// environment assignments (the socket and the prefix as chosen), the socket they report to.
pub(super) struct HookSetup {
    pub bin: PathBuf,
    pub assigns: Vec<(String, String)>,
    pub socket: PathBuf,
}

/// [`HookSetup`] for `who` (`claude-settings`, `hook-settings`), from `--socket` and `--prefix`;
/// `Err`: refused and said (the exit code to return).
pub(super) fn hook_setup(
    json: bool,
    cfg: &Config,
    who: &str,
    socket: Option<&str>,
    prefix: Option<&str>,
) -> Result<HookSetup, ExitCode> {
    let refuse = |m: String| {
        say!("ccs-reap {who}: {m}");
        if json {
            print_json(&serde_json::json!({"ok": false, "error": m, "exit": exit::CONFIG}));
        }
        ExitCode::from(exit::CONFIG)
    };
    let (socket_path, chosen_by) = hook_socket(cfg, socket).map_err(refuse)?;
    if let Some(p) = prefix {
        if !crate::core::policy::valid_id(p) || p.len() > crate::core::policy::MAX_PREFIX_LEN {
            return Err(refuse(format!(
                "--prefix {p:?}: a non-empty prefix of letters, digits, '_' and '-', at most {} bytes",
                crate::core::policy::MAX_PREFIX_LEN
            )));
        }
    }
    if chosen_by.is_none() {
        say!(
            "ccs-reap {who}: the hooks report to the tmux server at {} (the default: not run inside tmux, no CCS_TMUX_SOCKET set); to choose another, run this inside that tmux or pass --socket PATH (or --socket NAME for tmux -L NAME)",
            socket_path.display()
        );
    }
    let bin = std::env::current_exe()
        .map(|b| upgrade_proof(&b).unwrap_or(b))
        .map_err(|e| {
            command_error(
                json,
                CommandError::Refused(format!("failed to find this binary's path: {e}")),
            )
        })?;
    // The settings in effect, from the settings file or the environment; and the file itself,
    // which the hook then reads as every command does.
    let env: Vec<(String, String)> = cfg
        .sources
        .iter()
        .filter_map(|e| Some((e.name.to_string(), e.value.clone()?)))
        .collect();
    let mut assigns = claude_hook::hook_env(cfg, &env);
    for (k, v) in &mut assigns {
        match k.as_str() {
            "CCS_TMUX_SOCKET_PATH" => *v = socket_path.to_string_lossy().into_owned(),
            "CCS_SESSION_PREFIX" => *v = prefix.unwrap_or(&cfg.prefix).to_string(),
            _ => {}
        }
    }
    if let Some(f) = &cfg.file {
        let f = std::fs::canonicalize(f).unwrap_or_else(|_| f.clone());
        assigns.push(("CCS_CONFIG".into(), f.to_string_lossy().into_owned()));
    }
    Ok(HookSetup {
        bin,
        assigns,
        socket: socket_path,
    })
}

/// `claude-settings [--write FILE] [--socket PATH|NAME] [--prefix P] [--resume-threshold]`.
pub(super) fn claude_settings(
    json: bool,
    cfg: &Config,
    write: Option<&std::path::Path>,
    (socket, prefix): (Option<&str>, Option<&str>),
    resume_threshold: bool,
) -> ExitCode {
    let HookSetup {
        bin,
        assigns,
        socket: socket_path,
    } = match hook_setup(json, cfg, "claude-settings", socket, prefix) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let command = claude_hook::hook_command(&bin, &assigns);
    let Some(file) = write else {
        let mut v = claude_hook::fragment(&command);
        if resume_threshold {
            v = claude_hook::with_resume_env(v).unwrap_or_default();
        }
        print_json(&v);
        return ExitCode::SUCCESS;
    };
    match claude_hook::write_settings(file, &command, resume_threshold) {
        Ok(changed) => {
            if json {
                print_json(&serde_json::json!({
                    "ok": true,
                    "file": file,
                    "changed": changed,
                    "command": command,
                    "socket": socket_path,
                    "prefix": prefix.unwrap_or(&cfg.prefix),
                }));
            } else if changed {
                out(&format!("{}: ccs-reap's hooks written\n", file.display()));
            } else {
                out(&format!("{}: already up to date\n", file.display()));
            }
            ExitCode::SUCCESS
        }
        Err(e) => command_error(json, CommandError::Refused(e.to_string())),
    }
}
