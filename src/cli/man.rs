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
    (exit::FAILED, "Something failed or was refused, or doctor found a problem: a reap failed, liveness could not be read, bad input to a command, the state dir or the metrics address could not be used, stdout could not be written."),
    (exit::CONFIG, "Bad configuration (the message names the variable) or command line, or a tmux older than 3.1c; nothing was touched. claude-hook: the prompt is blocked (the chat is being reaped)."),
    (exit::LOCKED, "Another daemon holds this tmux socket's lock (restarting will not help)."),
    (exit::RESPAWN, "turn begin, turn end, pin, unpin: the session is gone; respawn it with spawn."),
    (exit::NO_ROOM, "room, spawn: no room for a new chat; only busy, viewed, pinned, warned or young chats are left (nothing was taken for it). Queue or refuse the chat."),
];

/// The state dir's files, for the man page (docs/files.md has the layout).
pub(super) const FILES: &[(&str, &str)] = &[
    ("$CCS_REAP_STATE_DIR, else /var/lib/ccs-reap/$USER (when it exists and is this user's), else $XDG_STATE_HOME/ccs-reap, else ~/.local/state/ccs-reap", "The state dir (0700). /var/lib/ccs-reap/NAME is the ccs-reap@NAME instance's (StateDirectory=), so NAME's own commands find its tombstones."),
    ("/lib/systemd/system/ccs-reap@.service, /usr/lib/systemd/user/ccs-reap.service", "The units of the Debian package (contrib/systemd in the source): ccs-reap@NAME runs the daemon as user NAME beside that user's studio, ccs-reap.service as a user unit (systemctl --user). Neither is enabled on install; with reaping off an instance stays up and its systemctl status says why. ccs-reap doctor --user NAME (as root) checks an instance as it runs."),
    ("/etc/ccs-reap/env, /etc/ccs-reap/NAME.env", "The package's settings file (a conffile, every setting commented), and one instance's own, read instead of it when present."),
    ("<state dir>/reaped.jsonl", "The audit log: one JSON line per reap attempt or warning (its schema: files.md in the documents, see SEE ALSO), rotated to reaped.jsonl.1 ... by CCS_AUDIT_MAX_BYTES and CCS_AUDIT_KEEP."),
    ("<state dir>/reaper-<socket label>.lock", "The daemon's single-instance lock, one per tmux socket."),
    ("<state dir>/studios/<socket label>-<hash>@<prefix>/", "Per studio: known.json, tombstones (sessions/<id>.json) and teardown journals (reaping/<id>.json)."),
    ("--config FILE, else $CCS_CONFIG, else $XDG_CONFIG_HOME/ccs-reap/env (~/.config/ccs-reap/env), else /etc/ccs-reap/$USER.env, else /etc/ccs-reap/env", "The settings file, the first that exists, read whole (one named by --config or CCS_CONFIG must exist); the units read it the same way, through the binary, so the daemon, cron, the hooks and a command by hand see the same settings. Refused (exit 2) when it is not a regular file, is writable by every user or by a group other than this user's primary group or root's, belongs to another user than root or this one, or passes 1 MiB."),
];

/// A section of plain paragraphs (a blank line between them).
fn section(title: &str, text: &str) -> String {
    let mut t = format!(
        ".SH {}\n",
        if title.contains(' ') {
            format!("\"{title}\"")
        } else {
            title.to_string()
        }
    );
    for (i, p) in text.split("\n\n").enumerate() {
        if i > 0 {
            t.push_str(".PP\n");
        }
        t.push_str(&roff(p.trim()));
        t.push('\n');
    }
    t
}

/// What ccs-reap is for and how it goes about it (NAME says what it is in one line).
const DESCRIPTION: &str = "A studio keeps each Claude Code chat in a tmux session named <prefix><id> (ccs-7) on its own tmux server. An idle chat still holds its claude process, its MCP servers and their children, often hundreds of MiB. ccs-reap, run as a daemon beside the studio (or from cron with --once), sweeps that server every CCS_REAP_INTERVAL_MS: a chat idle past CCS_ENGINE_IDLE_KILL_MS, with no viewer attached and no turn running, is reaped: its whole process tree is stopped (SIGTERM, then SIGKILL after CCS_REAP_GRACE_MS) and its session killed, while a tombstone keeps its conversation id, so that the next message (ccs-reap spawn, or claude --resume <cid>) brings the chat back with its history. Memory rules (CCS_ENGINE_MEM_HIGH, CCS_ENGINE_MAX_IDLE, CCS_ENGINE_SESSION_MEM_MAX, CCS_ENGINE_MEM_PSI) reap the idle chats that hold most first when memory runs short.

Reaping is opt-in: with no rule set, nothing is reaped. Every reap is re-checked right before its first signal, and a chat whose conversation id is unknown is never reaped (it could not be resumed). When it cannot do its job (no tmux server at the socket, an activity file unreadable, no chat with a conversation id) it says so once on stderr, in the ccs_reap_degraded metric and on /healthz; ccs-reap doctor says why chats are not reaped.";

/// The states a session can be in, for the man page.
pub(super) const STATES: &[(&str, &str)] = &[
    ("idle", "No turn running, no viewer: the idle clock runs; reaped when it passes the limit."),
    ("expired", "Idle past its limit: reaped at this sweep (or, with --dry-run and status, would be)."),
    ("busy", "A turn is running (turn begin, an agent's hook, or Claude Code's own status file): never reaped, but by a stuck rule."),
    ("stuck", "A turn running past CCS_ENGINE_STUCK_WALL_MS or CCS_ENGINE_STUCK_IDLE_MS: reported; reaped only with CCS_ENGINE_REAP_STUCK=1."),
    ("viewed", "A tmux client shows it (attached to its session, or to another whose current window is the chat's: a linked window, a grouped session): someone may be reading it; kept."),
    ("shared", "Its session holds more than the chat's own pane (a pane or window the user added): kept, nothing in it signalled; the WHY names what is there. With CCS_ENGINE_SHARED_SESSION=pane, judged by the chat's recorded pane alone instead, and reaped by that pane (kill-pane): the session stays, marked @ccs_asleep, and is never a chat again (kept shared, WHY \"asleep: ...\", even with one pane left)."),
    ("foreign", "Its session's one pane is not the one recorded as the chat's (@ccs_pane; swapped, moved or respawned): kept."),
    ("pinned", "ccs-reap pin: kept until unpinned (but when its panes exited)."),
    ("new", "First seen at this sweep: its idle clock starts now."),
    ("no-cid", "No conversation id known (no hook marked it, none on its agent's command line): kept, since it could not be resumed. Wire its agent's hooks: ccs-reap claude-settings --write ~/.claude/settings.json, or ccs-reap hook-settings --agent codex|gemini --write <its settings file>; status and doctor name each chat's own. An unused Codex CLI chat has none by design (codex picks its id at the first prompt): no degraded state."),
    ("unseen", "Nothing reports its turns (its cid only on a command line, no hook, no status file of its agent, no activity file): kept, as a turn may be running. Wire its hooks, or CCS_ENGINE_UNSEEN_TURNS=output."),
    ("exited", "Every pane has exited: the session is cleaned up."),
    ("unknown", "Its liveness could not be read (tmux or an activity file failed): kept."),
];

/// Examples for the man page: what, then the command.
pub(super) const EXAMPLES: &[(&str, &str)] = &[
    ("Install the man pages for this user, and read them:", "mkdir -p ~/.local/share/man/man1\nccs-reap man --dir ~/.local/share/man/man1\nMANPATH=~/.local/share/man: man ccs-reap"),
    ("See what would be reaped, and why, without touching anything:", "CCS_ENGINE_IDLE_KILL_MS=30m ccs-reap status\nCCS_ENGINE_IDLE_KILL_MS=30m ccs-reap --once --dry-run"),
    ("Reap chats idle for 30 minutes, from cron every 5 minutes:", "*/5 * * * * CCS_ENGINE_IDLE_KILL_MS=30m ccs-reap --once"),
    ("Find out why nothing is reaped:", "ccs-reap doctor"),
    ("Print the settings in effect and where each came from:", "ccs-reap config"),
    ("Wire Claude Code's hooks, so each chat's conversation id is known:", "ccs-reap claude-settings --write ~/.claude/settings.json"),
    ("Bring a reaped chat back with its conversation:", "ccs-reap spawn 7 -- claude"),
];

/// Where to read further.
const SEE_ALSO: &str = "tmux(1), systemd.exec(5), crontab(5). The per-command pages: ccs-reap-status(1), ccs-reap-reap(1), ccs-reap-spawn(1), ccs-reap-doctor(1), ccs-reap-config(1) and the others (ccs-reap man --dir writes them).

The documents (commands, configuration, rules, files, guarantees, Claude Code's hooks, Docker): /usr/share/doc/ccs-reap when installed from a package, else the docs directory of the source tree.";

/// The main man page: clap_mangen's sections, then ENVIRONMENT (from the one list of settings,
/// [`crate::config::VARS`]), EXIT STATUS and FILES.
pub(super) fn man_page(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.disable_help_subcommand(true));
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    buf.extend_from_slice(section("DESCRIPTION", DESCRIPTION).as_bytes());
    man.render_options_section(&mut buf)?;
    man.render_subcommands_section(&mut buf)?;
    let mut t = String::from(".SH STATES\n");
    t.push_str(&roff("Each session named <prefix><id> is in one state at a sweep (the STATE column of status); only idle ones past their limit, and those the memory rules pick, are reaped."));
    t.push('\n');
    for (state, what) in STATES {
        t.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(state), roff(what)));
    }
    t.push_str(".SH ENVIRONMENT\n");
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
    t.push_str(".SH EXAMPLES\n");
    for (what, cmd) in EXAMPLES {
        t.push_str(&format!(
            ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
            roff(what),
            roff(cmd)
        ));
    }
    t.push_str(&section("SEE ALSO", SEE_ALSO));
    buf.extend_from_slice(t.as_bytes());
    man.render_version_section(&mut buf)?;
    Ok(buf)
}

/// Every man page, by file name: one per visible subcommand (clap_mangen's), then the main page.
fn pages(c: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn sub(cmd: clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            sub(s, out)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut buf = Vec::new();
        man.render(&mut buf)?;
        out.push((man.get_filename(), buf));
        Ok(())
    }
    let mut out = Vec::new();
    let mut all = c.clone().disable_help_subcommand(true);
    all.build();
    sub(all, &mut out)?;
    // The main page, with its own sections, in place of clap's.
    out.retain(|(name, _)| name != "ccs-reap.1");
    add_details(&mut out);
    out.push(("ccs-reap.1".to_string(), man_page(c)?));
    Ok(out)
}

/// docs/commands.md, the one source of what each command does: the per-command pages (clap's
/// NAME, SYNOPSIS and OPTIONS) get their command's section of it as DETAILS (its checks, states,
/// exit codes and examples), so the page says what the docs say.
const COMMANDS_MD: &str = include_str!("../../docs/commands.md");

/// The section of [`COMMANDS_MD`] about `cmd` (`status`, `turn begin`, `pin`): the one whose
/// heading names it first in backticks (`## \`pin <id>\` / \`unpin <id>\``: both).
fn doc_section(cmd: &str) -> Option<&'static str> {
    let mut rest = COMMANDS_MD;
    while let Some(at) = rest.find("\n## ") {
        let body = &rest[at + 4..];
        let end = body.find("\n## ").unwrap_or(body.len());
        let (heading, text) = body[..end].split_once('\n').unwrap_or((&body[..end], ""));
        let names = heading.split('`').skip(1).step_by(2);
        if names
            .into_iter()
            .any(|n| n == cmd || n.strip_prefix(cmd).is_some_and(|r| r.starts_with(' ')))
        {
            return Some(text);
        }
        rest = &body[end..];
    }
    None
}

/// Markdown as roff, plainly: paragraphs, `- ` items as bullets, code blocks and tables as they
/// are (no fill), backticks, bold marks and link targets dropped.
fn md_roff(md: &str) -> String {
    let inline = |l: &str| {
        let mut t = l.replace('`', "").replace("**", "");
        // [text](target) -> text
        while let (Some(a), Some(m)) = (t.find('['), t.find("](")) {
            match t[m..].find(')') {
                Some(e) if a < m => {
                    let text = String::from(&t[a + 1..m]);
                    t.replace_range(a..m + e + 1, &text);
                }
                _ => break,
            }
        }
        roff(&t)
    };
    let mut out = String::new();
    let mut code = false;
    for l in md.lines() {
        let t = l.trim_end();
        if t.trim_start().starts_with("```") {
            out.push_str(if code { ".fi\n" } else { ".PP\n.nf\n" });
            code = !code;
        } else if code || t.starts_with('|') {
            out.push_str(&format!("{}\n", roff(t)));
            if !code {
                out.push_str(".br\n");
            }
        } else if t.is_empty() {
            out.push_str(".PP\n");
        } else if let Some(item) = t.strip_prefix("- ") {
            out.push_str(&format!(".IP \\(bu 2\n{}\n", inline(item)));
        } else {
            out.push_str(&format!("{}\n", inline(t.trim_start())));
        }
    }
    if code {
        out.push_str(".fi\n");
    }
    out
}

/// Append DETAILS (its section of docs/commands.md) to each per-command page of `out`.
fn add_details(out: &mut [(String, Vec<u8>)]) {
    for sub in cli_command().get_subcommands() {
        let mut pages = vec![(sub.get_name().to_string(), sub.get_name().to_string())];
        for inner in sub.get_subcommands() {
            pages.push((
                format!("{}-{}", sub.get_name(), inner.get_name()),
                format!("{} {}", sub.get_name(), inner.get_name()),
            ));
        }
        for (file, cmd) in pages {
            let Some(text) = doc_section(&cmd) else {
                continue;
            };
            let name = format!("ccs-reap-{file}.1");
            let Some((_, page)) = out.iter_mut().find(|(n, _)| *n == name) else {
                continue;
            };
            page.extend_from_slice(b".SH DETAILS\n");
            page.extend_from_slice(md_roff(text).as_bytes());
            page.extend_from_slice(b".PP\nThe whole reference: docs/commands.md of the source (/usr/share/doc/ccs-reap/docs/commands.md from the Debian package).\n");
        }
    }
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
            // Rendered first, then each written as the user's files are: a link planted at a
            // page's name is replaced, never written through.
            let r = pages(c)
                .map_err(|e| format!("failed to render them: {e}"))
                .and_then(|pages| {
                    pages.iter().try_for_each(|(name, page)| {
                        crate::adapters::user_file::write_in(dir, name, page, 0o644)
                            .map_err(|e| e.to_string())
                    })
                });
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
