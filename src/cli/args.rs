//! The command line, as clap reads it.

use super::*;

/// `--version`: the crate's version and the commit it was built from (build.rs; "unknown" when
/// built outside a git checkout).
pub(super) const VERSION: &str = concat!(
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
    after_help = "Configured from the environment over the settings file (--config, CCS_CONFIG, ~/.config/ccs-reap/env, /etc/ccs-reap/$USER.env, /etc/ccs-reap/env): `ccs-reap --help` lists every CCS_* variable with its default, `ccs-reap config` what is in effect; `man ccs-reap` (install it with `ccs-reap man --dir`) has them too."
)]
pub(super) struct Cli {
    /// One sweep, then exit (for scripts and cron).
    #[arg(long)]
    pub(super) once: bool,
    /// With the daemon or --once: decide and report; write no option, signal nothing. (`status`,
    /// `reap` and `claude-hook` take their own.)
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Machine-readable output on stdout (one JSON document, whatever the outcome); logs stay on stderr.
    #[arg(long, global = true)]
    pub(super) json: bool,
    /// The settings file (KEY=value lines, as systemd's EnvironmentFile=), instead of CCS_CONFIG,
    /// ~/.config/ccs-reap/env, /etc/ccs-reap/$USER.env or /etc/ccs-reap/env; the environment wins
    /// over it.
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// With doctor, status and config: as the `ccs-reap@NAME` instance sees it (NAME's settings
    /// file, state dir and tmux socket, found as its unit finds them); root runs it as NAME.
    #[arg(long, global = true, value_name = "NAME")]
    pub(super) user: Option<String>,
    /// INFO lines on stderr too (the daemon always logs them; a command says only its warnings
    /// and errors there without -v).
    #[arg(long, short = 'v', global = true)]
    pub(super) verbose: bool,
    #[command(subcommand)]
    pub(super) cmd: Option<Cmd>,
}

#[derive(Subcommand, Debug)]
pub(super) enum Cmd {
    /// Every session: state, reason, idle age, time left, viewers, turn, cid, memory.
    Status {
        /// Every column (tmux id, turn, RSS and PSS apart), nothing cut; by default the table
        /// fits 80 columns and cuts long values with an ellipsis.
        #[arg(long)]
        wide: bool,
        /// Accepted for symmetry: `status` never writes anything.
        #[arg(long)]
        dry_run: bool,
    },
    /// The studio's hooks around a turn.
    Turn {
        #[command(subcommand)]
        what: TurnCmd,
    },
    /// Create the session if it is gone, resuming the conversation a tombstone or --cid names;
    /// with no command after --, the command line the tombstone keeps is run again (as words).
    /// An id that starts with `-` goes after a first --, the command after a second:
    /// `spawn -- -1 -- claude`.
    Spawn {
        id: Option<String>,
        #[arg(long)]
        cid: Option<String>,
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// The agent the command runs, when its program is not the agent's own (a studio's
        /// launcher script): it is given the conversation as the agent would be, and kept in
        /// the tombstone (`env CCS_REAP_AGENT=<name> <command>`).
        #[arg(long, value_name = "claude|codex|gemini")]
        agent: Option<String>,
        /// Start a command that cannot be given the conversation as a new conversation, where
        /// spawn would refuse.
        #[arg(long)]
        new_conversation: bool,
        /// Do not make room first (by default spawn makes room for a new chat where
        /// CCS_ENGINE_MEM_HIGH or CCS_ENGINE_MAX_LIVE is set, as `room --need auto` does).
        #[arg(long)]
        no_room: bool,
        #[arg(last = true)]
        cmd: Vec<String>,
    },
    /// Free memory for one new chat before it starts: idle chats past the floor are reaped,
    /// least recently used first, until SIZE fits under the memory limit in force and one more
    /// chat within CCS_ENGINE_MAX_LIVE. Exit 5 when only chats that may not be taken are left.
    Room {
        /// What the new chat needs: a size (400M, 1G) or `auto`, the median footprint of this
        /// server's live chats (400M before there is one).
        #[arg(long, value_name = "SIZE|auto", default_value = "auto")]
        need: String,
        /// The new chat's id, when known: never taken, and the room held for it is released
        /// as it grows.
        #[arg(long = "for", value_name = "ID")]
        for_id: Option<String>,
    },
    /// Bring a chat back and attach to it: a live chat is attached; an asleep (reaped) one is
    /// spawned from its tombstone first. Without a terminal, print the attach command.
    Resume { id: String },
    /// Remove a sleeping chat's tombstone (its way back), with an audit line.
    Forget { id: String },
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
        /// Say what would be done; write no option, signal nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Claude Code's hook: read one hook event (JSON on stdin) and mark the conversation id and
    /// the turns of the chat whose pane it runs in. Never fails claude: exit 0 whatever happens,
    /// but exit 2 (block the prompt, say why) on a prompt sent to a chat being reaped.
    ClaudeHook {
        /// Say on stderr which action it would take; touch nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the Claude Code settings fragment that runs `claude-hook` on its hook events, with
    /// this binary's path and the settings it needs (as environment assignments).
    ClaudeSettings {
        /// Instead, merge it into this settings file (created if missing), keeping every other
        /// key and hook; running it again changes nothing.
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
        /// The tmux server the hooks report to: an absolute socket path (`tmux -S`), or a name
        /// (`tmux -L`). Default: the configured socket, else (run inside tmux) the one in
        /// `$TMUX`, else the default socket.
        #[arg(long, value_name = "PATH|NAME")]
        socket: Option<String>,
        /// The session prefix the hooks act on (`<prefix><id>` sessions). Default: the
        /// configured one (`CCS_SESSION_PREFIX`).
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
        /// Also put CLAUDE_CODE_RESUME_THRESHOLD_MINUTES (the value spawn gives a claude it
        /// resumes) into the settings' env block: no "resume from summary" dialog on a studio's
        /// own `claude --resume`, nor on any other claude run with these settings.
        #[arg(long)]
        resume_threshold: bool,
    },
    /// Any agent's hook (claude, codex, gemini): read one hook event (JSON on stdin) and mark the
    /// conversation id, the agent (`@ccs_agent`) and the turns of the chat whose pane it runs in.
    /// As claude-hook: exit 0 whatever happens, but exit 2 on a prompt sent to a chat being reaped.
    Hook {
        /// The agent that runs the hook: claude, codex or gemini.
        #[arg(long, value_name = "NAME", default_value = "claude")]
        agent: String,
        /// Say on stderr which action it would take; touch nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the agent's own hook settings that run `hook --agent <name>` (Codex:
    /// `$CODEX_HOME/hooks.json`; Gemini CLI: `~/.gemini/settings.json`, with hooksConfig.enabled;
    /// Claude Code: what claude-settings prints), and what trust step is the user's to take.
    HookSettings {
        /// claude, codex or gemini.
        #[arg(long, value_name = "NAME")]
        agent: String,
        /// Instead, merge them into this file (created if missing), keeping every other key and
        /// hook; running it again changes nothing.
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
        /// The tmux server the hooks report to, as for claude-settings.
        #[arg(long, value_name = "PATH|NAME")]
        socket: Option<String>,
        /// The session prefix the hooks act on, as for claude-settings.
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
    },
    /// Print every setting in effect, with where it came from (default, FILE:LINE, environment).
    Config,
    /// Run every check once and say why chats would not be reaped (no server at the socket, no
    /// session under the prefix, no cid, the claude-hook not wired, an activity file missing, no
    /// memory limit): exit 1 on a problem, 0 when healthy.
    Doctor,
    /// Print each audit event (one JSON line per reap attempt or warning) as it is appended,
    /// following the audit log across rotations, until SIGTERM/SIGINT or stdout closes.
    Events {
        /// First print what the current audit log (reaped.jsonl) holds.
        #[arg(long)]
        from_start: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum TurnCmd {
    /// A turn starts: exit 4 when the session is gone or was being reaped (respawn it).
    Begin { id: String },
    /// A turn ended: the idle clock starts.
    End { id: String },
}

/// `spawn`'s id and command: the id before `--`, the command after it; or, with no id before
/// `--`, the first word after it is the id (one that starts with `-` can be said so) and the
/// command follows a second `--`. `Err`: what is wrong, with the form to use.
pub(super) fn spawn_words(
    id: Option<String>,
    words: Vec<String>,
) -> Result<(String, Vec<String>), String> {
    if let Some(id) = id {
        return Ok((id, words));
    }
    let mut w = words.into_iter();
    let Some(id) = w.next() else {
        return Err("spawn needs a chat id: spawn <id> -- <command>, or spawn -- <id> -- <command> for an id that starts with '-'".into());
    };
    match w.next() {
        None => Ok((id, Vec::new())),
        Some(sep) if sep == "--" => Ok((id, w.collect())),
        Some(other) => Err(format!(
            "spawn -- {id} {other} ...: after `spawn --` come the id alone, then `--` and the command: spawn -- {id} -- <command>"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawns_id_and_command() {
        let v = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        type Want = Result<(&'static str, Vec<&'static str>), &'static str>;
        let table: Vec<(Option<&str>, Vec<&str>, Want)> = vec![
            (
                Some("7"),
                vec!["claude", "--", "x"],
                Ok(("7", vec!["claude", "--", "x"])),
            ),
            (Some("7"), vec![], Ok(("7", vec![]))),
            (None, vec!["-1"], Ok(("-1", vec![]))),
            (None, vec!["-1", "--", "claude"], Ok(("-1", vec!["claude"]))),
            (
                None,
                vec!["-h", "--", "claude", "--", "-x"],
                Ok(("-h", vec!["claude", "--", "-x"])),
            ),
            (None, vec![], Err("needs a chat id")),
            (None, vec!["-1", "claude"], Err("spawn -- -1 -- <command>")),
        ];
        for (id, words, want) in table {
            let got = spawn_words(id.map(String::from), v(&words));
            match want {
                Ok((i, c)) => assert_eq!(got, Ok((i.to_string(), v(&c))), "{id:?} {words:?}"),
                Err(w) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(w)),
                    "{id:?} {words:?}: {got:?}"
                ),
            }
        }
    }
}
