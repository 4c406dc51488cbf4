//! What is generated from the command line's definition: the man page and the shell completions.

use super::*;

/// The command line as clap sees it: the derive's, with every setting (grouped, with its default)
/// at the end of `--help` (`-h` points there).
pub(super) fn cli_command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_long_help(crate::config::vars_help())
}

/// The command for the completion scripts: every visible subcommand and argument, no hidden one
/// (clap_complete offers hidden subcommands in bash, zsh and fish).
pub(super) fn completion_command() -> clap::Command {
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
pub(super) fn completion_script(shell: clap_complete::Shell) -> String {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut completion_command(), "ccs-reap", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    match shell {
        clap_complete::Shell::Bash => script.replace("ccs__subcmd__reap", "ccs__reap"),
        _ => script,
    }
}

/// Text for roff: backslashes and `-` escaped, a line never starting a request.
pub(super) fn roff(text: &str) -> String {
    let s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The exit codes, for the man page (docs/commands.md has the long form).
pub(super) const EXIT_STATUS: &[(u8, &str)] = &[
    (0, "Done; also when reaping is disabled (the daemon and --once then do nothing), and when there is no tmux server at the socket (a warning names its path)."),
    (exit::FAILED, "Something failed or was refused: a reap failed, liveness could not be read, bad input to a command, the state dir or the metrics address could not be used, stdout could not be written."),
    (exit::CONFIG, "Bad configuration (the message names the variable) or command line, or a tmux older than 3.1c; nothing was touched. claude-hook: the prompt is blocked (the chat is being reaped)."),
    (exit::LOCKED, "Another daemon holds this tmux socket's lock (restarting will not help)."),
    (exit::RESPAWN, "turn begin, turn end, pin, unpin: the session is gone; respawn it with spawn."),
];

/// The state dir's files, for the man page (docs/files.md has the layout).
pub(super) const FILES: &[(&str, &str)] = &[
    ("$CCS_REAP_STATE_DIR, else $XDG_STATE_HOME/ccs-reap, else ~/.local/state/ccs-reap", "The state dir (0700)."),
    ("<state dir>/reaped.jsonl", "The audit log: one JSON line per reap attempt or warning (schema: docs/files.md), rotated to reaped.jsonl.1 ... by CCS_AUDIT_MAX_BYTES and CCS_AUDIT_KEEP."),
    ("<state dir>/reaper-<socket label>.lock", "The daemon's single-instance lock, one per tmux socket."),
    ("<state dir>/studios/<socket label>-<hash>@<prefix>/", "Per studio: known.json, tombstones (sessions/<id>.json) and teardown journals (reaping/<id>.json)."),
    ("--config FILE, else $CCS_CONFIG, else $XDG_CONFIG_HOME/ccs-reap/env (~/.config/ccs-reap/env), else /etc/ccs-reap/env", "The settings file, the first that exists (one named by --config or CCS_CONFIG must exist); the same files the contrib/systemd units read (EnvironmentFile=). Refused (exit 2) when it is not a regular file, is writable by every user, belongs to another user than root or this one, or passes 1 MiB."),
];

/// The main man page: clap_mangen's sections, then ENVIRONMENT (from the one list of settings,
/// [`crate::config::VARS`]), EXIT STATUS and FILES.
pub(super) fn man_page(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.disable_help_subcommand(true));
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    man.render_options_section(&mut buf)?;
    man.render_subcommands_section(&mut buf)?;
    let mut t = String::from(".SH ENVIRONMENT\n");
    t.push_str(&roff(&format!("ccs-reap reads its settings from the environment, over the settings file (see FILES): KEY=value lines as systemd's EnvironmentFile= reads them; the environment wins; ccs-reap config prints what is in effect and where each value came from. An empty value counts as unset. Durations (every *_MS) are a bare number of milliseconds or take a unit: 500ms, 90s, 30m, 1h, 2d. Reaping is off until {}. A value that does not fit makes every command exit 2 naming the variable.", crate::config::ENABLED_BY)));
    t.push('\n');
    let mut group = "";
    for v in crate::config::VARS {
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
pub(super) fn generated(cmd: Option<&Cmd>) -> Option<ExitCode> {
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
