//! Thin: parse the command line, set up logging, call the library, map outcomes to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use ccs_reap::claude_hook::{self, HookInput, Outcome};
use ccs_reap::commands::{self, CommandError, ReapNow};
use ccs_reap::config::{Config, LogFormat};
use ccs_reap::context::Reaper;
use ccs_reap::exit;

/// A line on stderr, never panicking as `eprintln!` does when stderr cannot be written (`2>
/// /dev/full`): a message that cannot be said is dropped.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// `--version`: the crate's version and the commit it was built from (build.rs; "unknown" when
/// built outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CCS_REAP_COMMIT"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "ccs-reap",
    version = VERSION,
    about = "Opt-in reaper of idle Claude Code chat sessions on a tmux server"
)]
#[command(
    after_help = "Configured from the environment over the settings file (--config, CCS_CONFIG, ~/.config/ccs-reap/env, /etc/ccs-reap/env): `ccs-reap --help` lists every CCS_* variable with its default, `ccs-reap config` what is in effect; `man ccs-reap` (install it with `ccs-reap man --dir`) has them too."
)]
struct Cli {
    /// One sweep, then exit (for scripts and cron).
    #[arg(long)]
    once: bool,
    /// Decide and report; write no option, signal nothing.
    #[arg(long, global = true)]
    dry_run: bool,
    /// Machine-readable output on stdout (one JSON document, whatever the outcome); logs stay on stderr.
    #[arg(long, global = true)]
    json: bool,
    /// The settings file (KEY=value lines, as systemd's EnvironmentFile=), instead of CCS_CONFIG,
    /// ~/.config/ccs-reap/env or /etc/ccs-reap/env; the environment wins over it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Every session: state, reason, idle age, time left, viewers, turn, cid, memory.
    Status {
        /// Every column (tmux id, turn, RSS and PSS apart), nothing cut; by default the table
        /// fits 80 columns and cuts long values with an ellipsis.
        #[arg(long)]
        wide: bool,
    },
    /// The studio's hooks around a turn.
    Turn {
        #[command(subcommand)]
        what: TurnCmd,
    },
    /// Create the session if it is gone, resuming the conversation a tombstone or --cid names.
    Spawn {
        id: String,
        #[arg(long)]
        cid: Option<String>,
        #[arg(long)]
        cwd: Option<PathBuf>,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// The -F formats of the sweep's one tmux call, as JSON (for the benchmark: it measures the
    /// very call the binary makes).
    #[command(hide = true)]
    Formats,
    /// Pin a chat: it is never reaped (but when its panes exited) until unpinned.
    Pin { id: String },
    /// Unpin a chat: it is reaped by the rules again.
    Unpin { id: String },
    /// Print a shell completion script to stdout, e.g. `ccs-reap completions bash`.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) to stdout: `ccs-reap man > ccs-reap.1`.
    Man {
        /// Instead, write it and one page per subcommand (ccs-reap-status.1, ...) into DIR, e.g.
        /// `ccs-reap man --dir ~/.local/share/man/man1`.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Reap one session now, whatever its idle age.
    Reap {
        id: String,
        /// Also reap a busy or viewed session, or one whose conversation id is unknown.
        #[arg(long)]
        force: bool,
    },
    /// Claude Code's hook: read one hook event (JSON on stdin) and mark the conversation id and
    /// the turns of the chat whose pane it runs in. Never fails claude: exit 0 whatever happens,
    /// but exit 2 (block the prompt, say why) on a prompt sent to a chat being reaped.
    ClaudeHook,
    /// Print the Claude Code settings fragment that runs `claude-hook` on its hook events, with
    /// this binary's path and the settings it needs (as environment assignments).
    ClaudeSettings {
        /// Instead, merge it into this settings file (created if missing), keeping every other
        /// key and hook; running it again changes nothing.
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
    },
    /// Print every setting in effect, with where it came from (default, FILE:LINE, environment).
    Config,
    /// Print each audit event (one JSON line per reap attempt or warning) as it is appended,
    /// following the audit log across rotations, until SIGTERM/SIGINT or stdout closes.
    Events {
        /// First print what the current audit log (reaped.jsonl) holds.
        #[arg(long)]
        from_start: bool,
    },
}

#[derive(Subcommand, Debug)]
enum TurnCmd {
    /// A turn starts: exit 4 when the session is gone or was being reaped (respawn it).
    Begin { id: String },
    /// A turn ended: the idle clock starts.
    End { id: String },
}

/// The command line as clap sees it: the derive's, with every setting (grouped, with its default)
/// at the end of `--help` (`-h` points there).
fn cli_command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_long_help(ccs_reap::config::vars_help())
}

/// The command for the completion scripts: every visible subcommand and argument, no hidden one
/// (clap_complete offers hidden subcommands in bash, zsh and fish).
fn completion_command() -> clap::Command {
    fn visible(c: &clap::Command) -> clap::Command {
        let mut out = clap::Command::new(c.get_name().to_string())
            .args(c.get_arguments().filter(|a| !a.is_hide_set()).cloned());
        if let Some(about) = c.get_about() {
            out = out.about(about.clone());
        }
        if let Some(v) = c.get_version() {
            out = out.version(v.to_string());
        }
        if c.is_subcommand_required_set() {
            out = out.subcommand_required(true);
        }
        out.subcommands(
            c.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(visible)
                .collect::<Vec<_>>(),
        )
    }
    visible(&cli_command())
}

/// A completion script. clap_complete 4's bash script names its per-command `case` labels
/// `ccs__subcmd__reap__...` for a binary whose name has a `-` while it sets `cmd` to
/// `ccs__reap__subcmd__...`: nothing past the first word completed. The labels are renamed to match.
fn completion_script(shell: clap_complete::Shell) -> String {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut completion_command(), "ccs-reap", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    match shell {
        clap_complete::Shell::Bash => script.replace("ccs__subcmd__reap", "ccs__reap"),
        _ => script,
    }
}

/// Text for roff: backslashes and `-` escaped, a line never starting a request.
fn roff(text: &str) -> String {
    let s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The exit codes, for the man page (docs/commands.md has the long form).
const EXIT_STATUS: &[(u8, &str)] = &[
    (0, "Done; also when reaping is disabled (the daemon and --once then do nothing), and when there is no tmux server at the socket (a warning names its path)."),
    (exit::FAILED, "Something failed or was refused: a reap failed, liveness could not be read, bad input to a command, the state dir or the metrics address could not be used, stdout could not be written."),
    (exit::CONFIG, "Bad configuration (the message names the variable) or command line, or a tmux older than 3.1c; nothing was touched. claude-hook: the prompt is blocked (the chat is being reaped)."),
    (exit::LOCKED, "Another daemon holds this tmux socket's lock (restarting will not help)."),
    (exit::RESPAWN, "turn begin, turn end, pin, unpin: the session is gone; respawn it with spawn."),
];

/// The state dir's files, for the man page (docs/files.md has the layout).
const FILES: &[(&str, &str)] = &[
    ("$CCS_REAP_STATE_DIR, else $XDG_STATE_HOME/ccs-reap, else ~/.local/state/ccs-reap", "The state dir (0700)."),
    ("<state dir>/reaped.jsonl", "The audit log: one JSON line per reap attempt or warning (schema: docs/files.md), rotated to reaped.jsonl.1 ... by CCS_AUDIT_MAX_BYTES and CCS_AUDIT_KEEP."),
    ("<state dir>/reaper-<socket label>.lock", "The daemon's single-instance lock, one per tmux socket."),
    ("<state dir>/studios/<socket label>-<hash>@<prefix>/", "Per studio: known.json, tombstones (sessions/<id>.json) and teardown journals (reaping/<id>.json)."),
    ("--config FILE, else $CCS_CONFIG, else $XDG_CONFIG_HOME/ccs-reap/env (~/.config/ccs-reap/env), else /etc/ccs-reap/env", "The settings file, the first that exists (one named by --config or CCS_CONFIG must exist); the same files the contrib/systemd units read (EnvironmentFile=). Refused (exit 2) when it is not a regular file, is writable by every user, belongs to another user than root or this one, or passes 1 MiB."),
];

/// The main man page: clap_mangen's sections, then ENVIRONMENT (from the one list of settings,
/// [`ccs_reap::config::VARS`]), EXIT STATUS and FILES.
fn man_page(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.disable_help_subcommand(true));
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    man.render_options_section(&mut buf)?;
    man.render_subcommands_section(&mut buf)?;
    let mut t = String::from(".SH ENVIRONMENT\n");
    t.push_str(&roff("ccs-reap reads its settings from the environment, over the settings file (see FILES): KEY=value lines as systemd's EnvironmentFile= reads them; the environment wins; ccs-reap config prints what is in effect and where each value came from. An empty value counts as unset. Durations (every *_MS) are a bare number of milliseconds or take a unit: 500ms, 90s, 30m, 1h, 2d. Reaping is off until CCS_ENGINE_IDLE_KILL_MS, CCS_ENGINE_MEM_HIGH or CCS_ENGINE_MAX_IDLE is set. A value that does not fit makes every command exit 2 naming the variable."));
    t.push('\n');
    let mut group = "";
    for v in ccs_reap::config::VARS {
        if v.group != group {
            group = v.group;
            t.push_str(&format!(".SS {}\n", roff(group)));
        }
        t.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n.br\nDefault: {}.\n",
            roff(v.name),
            roff(v.help),
            roff(v.default)
        ));
    }
    t.push_str(".SH \"EXIT STATUS\"\n");
    for (code, what) in EXIT_STATUS {
        t.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff(what)));
    }
    t.push_str(".SH FILES\n");
    for (file, what) in FILES {
        t.push_str(&format!(".TP\n\\fI{}\\fR\n{}\n", roff(file), roff(what)));
    }
    buf.extend_from_slice(t.as_bytes());
    man.render_version_section(&mut buf)?;
    Ok(buf)
}

/// `completions` and `man`: generated from the clap definition, printed to stdout; they read no
/// configuration, so they work whatever the environment holds.
fn generated(cmd: Option<&Cmd>) -> Option<ExitCode> {
    let c = cli_command();
    // Into memory first: the generators panic on a failed write, stdout can be a closed pipe.
    let rendered = match cmd? {
        Cmd::Completions { shell } => Ok(completion_script(*shell).into_bytes()),
        Cmd::Man { dir: Some(dir) } => {
            // One page per subcommand, then the main page, with its own sections, over clap's.
            let r = clap_mangen::generate_to(c.clone(), dir)
                .and_then(|()| man_page(c))
                .and_then(|page| std::fs::write(dir.join("ccs-reap.1"), page));
            return Some(match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    say!(
                        "ccs-reap: failed to write the man pages to {}: {e}",
                        dir.display()
                    );
                    ExitCode::from(exit::FAILED)
                }
            });
        }
        Cmd::Man { dir: None } => man_page(c),
        _ => return None,
    };
    Some(match rendered {
        Ok(buf) => {
            out(&String::from_utf8_lossy(&buf));
            exit_code(ExitCode::SUCCESS)
        }
        Err(e) => {
            say!("ccs-reap: failed to render it: {e}");
            ExitCode::from(exit::FAILED)
        }
    })
}

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

/// A log line's event format, prefixed with its syslog priority (`<3>` error, `<4>` warning,
/// `<6>` info, `<7>` debug and trace) when `journal` is set: systemd's journal reads the prefix on
/// a service's stdout/stderr stream (sd-daemon(3)), so `journalctl -p warning` finds the warnings.
struct Priority<F> {
    journal: bool,
    inner: F,
}

/// The syslog priority of a tracing level.
fn syslog_priority(level: &tracing::Level) -> u8 {
    match *level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Priority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        ev: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if self.journal {
            write!(w, "<{}>", syslog_priority(ev.metadata().level()))?;
        }
        self.inner.format_event(ctx, w, ev)
    }
}

/// Whether stderr is systemd's journal: `JOURNAL_STREAM` (`<device>:<inode>`, set by systemd for
/// a unit's stdout/stderr) names the file stderr is. A process that only inherited the variable
/// (a command in a tmux pane of a studio started by a unit) writes to a terminal instead.
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // st_dev and st_ino are not u64 on every target.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstat(std::io::stderr())
        .is_ok_and(|st| st.st_dev as u64 == dev && st.st_ino as u64 == ino)
}

/// Logs on stderr, text or JSON (`CCS_LOG_FORMAT`); each line with its syslog priority when
/// stderr is systemd's journal ([`stderr_is_journal`]).
fn init_logging(cfg: &Config) {
    use tracing_subscriber::fmt::format;
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(&cfg.log_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let journal = stderr_is_journal();
    // A log line that cannot be written is dropped: the subscriber's own report of it would be
    // an `eprintln!`, which panics when stderr is the thing that fails (`2> /dev/full`).
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match cfg.log_format {
        LogFormat::Json => b
            .json()
            .event_format(Priority {
                journal,
                inner: format().json(),
            })
            .init(),
        LogFormat::Text => b
            .with_ansi(false)
            .event_format(Priority {
                journal,
                inner: format().with_ansi(false),
            })
            .init(),
    }
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

fn main() -> ExitCode {
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

/// What became of the writes to stdout: 0 all written, [`OUT_CLOSED`] its reader went away,
/// [`OUT_FAILED`] a write failed otherwise (reported once on stderr).
static OUT: AtomicU8 = AtomicU8::new(0);
const OUT_CLOSED: u8 = 1;
const OUT_FAILED: u8 = 2;

/// Write `text` to stdout, never panicking (as `print!` does on a failed write). A closed pipe
/// (`status | head -1`) stops the output quietly, as shell tools do; another failure (`> /dev/full`)
/// is said once on stderr and makes the exit code 1 (see [`exit_code`]). After either, nothing
/// more is written.
fn out(text: &str) {
    use std::io::Write;
    if OUT.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            OUT.store(OUT_CLOSED, Ordering::Relaxed);
        }
        Err(e) => {
            OUT.store(OUT_FAILED, Ordering::Relaxed);
            say!("ccs-reap: failed to write to stdout: {e}");
        }
    }
}

/// The exit code, once the output is written: 1 when stdout could not be written (but closed).
fn exit_code(code: ExitCode) -> ExitCode {
    if OUT.load(Ordering::Relaxed) == OUT_FAILED {
        ExitCode::from(exit::FAILED)
    } else {
        code
    }
}

/// `status` and `--once` found no tmux server at the socket: not an error (a studio may not be
/// up yet; the exit code stays), but never silent: a wrong socket looks like a quiet studio.
fn warn_no_server(rep: &ccs_reap::report::SweepReport) {
    if rep.tmux_server_up == Some(false) {
        eprintln!(
            "ccs-reap: warning: no tmux server at {}: nothing to sweep (check CCS_TMUX_SOCKET / CCS_TMUX_SOCKET_PATH and TMUX_TMPDIR; a PrivateTmp= unit sees its own /tmp)",
            rep.socket_path
        );
    }
}

fn print_json<T: serde::Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => out(&format!("{s}\n")),
        Err(e) => say!("ccs-reap: failed to encode JSON: {e}"),
    }
}

fn command_error(json: bool, e: CommandError) -> ExitCode {
    say!("ccs-reap: {e}");
    if json {
        print_json(&serde_json::json!({ "ok": false, "error": e.to_string() }));
    }
    ExitCode::from(exit::FAILED)
}

/// The answer of `pin` and `unpin`.
fn pin_answer(json: bool, id: &str, r: Result<bool, CommandError>, done: &str) -> ExitCode {
    match r {
        Ok(true) => hook_answer(json, id, done, 0, None),
        Ok(false) => hook_answer(
            json,
            id,
            "gone",
            exit::RESPAWN,
            Some(format!("session {id} is gone")),
        ),
        Err(e) => command_error(json, e),
    }
}

/// The answer of `turn` and `spawn`: with `--json`, one JSON object on stdout, as every command.
fn hook_answer(
    json: bool,
    session: &str,
    result: &str,
    code: u8,
    message: Option<String>,
) -> ExitCode {
    if let Some(m) = &message {
        say!("ccs-reap: {m}");
    }
    if json {
        print_json(&serde_json::json!({
            "ok": code == 0,
            "session": session,
            "result": result,
            "exit": code,
        }));
    }
    ExitCode::from(code)
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
            Some(Cmd::Formats | Cmd::ClaudeSettings { .. } | Cmd::Config)
        )
    {
        if let Err(e) = ccs_reap::tmux::version::check(&cfg).await {
            let _ = command_error(cli.json, CommandError::Refused(e)); // stderr, and the JSON
            return ExitCode::from(exit::CONFIG);
        }
    }
    match cli.cmd {
        // Printed before the configuration is read: generated().
        Some(Cmd::Completions { .. } | Cmd::Man { .. }) => ExitCode::SUCCESS,
        // Handled in main(), before anything that could exit with another code.
        Some(Cmd::ClaudeHook) => ExitCode::SUCCESS,
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
                "SESSION_FMT": ccs_reap::tmux::SESSION_FMT,
                "CLIENT_FMT": ccs_reap::tmux::CLIENT_FMT,
                "PANE_FMT": ccs_reap::tmux::PANE_FMT,
            }));
            ExitCode::SUCCESS
        }
        Some(Cmd::Status { wide }) => {
            let r = Reaper::new(cfg, true);
            let rep = ccs_reap::sweep::status(&r).await;
            warn_no_server(&rep);
            if cli.json {
                print_json(&rep);
            } else {
                out(&ccs_reap::report::render_status(&rep, wide));
            }
            if rep.error.is_some() {
                ExitCode::from(exit::FAILED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Some(Cmd::Turn {
            what: TurnCmd::Begin { id },
        }) => match commands::turn_begin(&Reaper::new(cfg, false), &id).await {
            Ok(true) => hook_answer(cli.json, &id, "started", 0, None),
            Ok(false) => hook_answer(
                cli.json,
                &id,
                "gone",
                exit::RESPAWN,
                Some(format!(
                    "session {id} is gone (reaped or never spawned): respawn it"
                )),
            ),
            Err(e) => command_error(cli.json, e),
        },
        Some(Cmd::Turn {
            what: TurnCmd::End { id },
        }) => match commands::turn_end(&Reaper::new(cfg, false), &id).await {
            Ok(true) => hook_answer(cli.json, &id, "ended", 0, None),
            Ok(false) => hook_answer(
                cli.json,
                &id,
                "gone",
                exit::RESPAWN,
                Some(format!("session {id} is gone: respawn it")),
            ),
            Err(e) => command_error(cli.json, e),
        },
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
        Some(Cmd::Reap { id, force }) => {
            let r = Reaper::new(cfg, cli.dry_run);
            match commands::reap_now(&r, &id, force).await {
                Ok(ReapNow::Reaped(line)) => {
                    if cli.json {
                        print_json(&line);
                    } else {
                        out(&format!(
                            "reaped {} ({}): {} processes, {} freed, {} ms\n",
                            line.session,
                            line.tmux_id,
                            line.pids.len(),
                            ccs_reap::report::human_bytes(line.pss_bytes.unwrap_or(line.rss_bytes)),
                            line.took_ms
                        ));
                    }
                    ExitCode::SUCCESS
                }
                Ok(ReapNow::WouldReap(m)) => {
                    if cli.json {
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
                Err(e) => command_error(cli.json, e),
            }
        }
        Some(Cmd::Events { from_start }) => {
            match ccs_reap::state::follow::run(&Reaper::new(cfg, true).state, from_start).await {
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
                let r = Reaper::new(cfg, cli.dry_run);
                // Each reap's line as soon as it is over; `--json` is one document at the end.
                let print = |l: &ccs_reap::state::AuditLine| out(&ccs_reap::report::render_reap(l));
                let sink: Option<ccs_reap::teardown::Sink> = (!cli.json).then_some(&print);
                let rep = ccs_reap::sweep::sweep(&r, ccs_reap::sweep::Batches::Wait(sink)).await;
                warn_no_server(&rep);
                if cli.json {
                    print_json(&rep);
                } else {
                    out(&ccs_reap::report::render_sweep_end(&rep));
                }
                if rep
                    .reaps
                    .iter()
                    .any(|l| l.outcome == ccs_reap::state::Outcome::Failed)
                    || rep.error.is_some()
                {
                    ExitCode::from(exit::FAILED)
                } else {
                    ExitCode::SUCCESS
                }
            } else {
                daemon(Reaper::new(cfg, cli.dry_run)).await
            }
        }
    }
}

/// The largest hook event read (a `Stop` carries the last reply, a `UserPromptSubmit` the prompt).
const MAX_EVENT_BYTES: u64 = 64 << 20;

/// Read stdin to its end on a thread of its own, waiting at most `limit`: a stdin that never
/// closes must not hold claude (the thread is left behind; the process exits without it).
fn read_stdin_within(limit: Duration) -> Result<String, String> {
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
fn claude_hook_main(dry_run: bool, config: Option<&std::path::Path>) -> ExitCode {
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
fn claude_settings(json: bool, cfg: &Config, write: Option<&std::path::Path>) -> ExitCode {
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

async fn daemon(r: Arc<Reaper>) -> ExitCode {
    // A dry-run daemon writes nothing: it needs no lock, and must not keep the real one out.
    let _lock = if r.dry_run {
        None
    } else {
        match r.state.lock(&r.cfg.socket.label()) {
            Ok(l) => Some(l),
            Err(ccs_reap::state::StateError::Locked(p)) => {
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
    match ccs_reap::daemon::run_daemon(r).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("ccs-reap: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}
