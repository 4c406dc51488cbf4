//! The only module that runs tmux.
//!
//! Commands are built with tmux_interface's builders (pinned to the 3.3a feature set) and run as
//! `tokio::process::Command`s with a timeout ([`call`]); a batch too large for one command line
//! goes as a script on the client's stdin ([`script`]). Every call passes `-u`: without a UTF-8 locale tmux
//! rewrites the tab separators of `-F` output to `_`. One sweep reads the whole server in ONE tmux
//! process (`list-sessions ; list-clients ; list-panes -a`, each row tagged), whatever the number of
//! sessions. Sessions are addressed by `$id` once listed: `-t ccs-1` would match `ccs-10`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use tmux_interface::{
    DisplayMessage, HasSession, IfShell, ListClients, ListPanes, ListSessions, NewSession,
    RunShell, SetOption, TmuxCommand,
};

use crate::core::policy::Session;

mod args;
mod call;
mod fence;
mod own_pane;
mod prompt;
mod script;
use crate::core::listing;
mod resume;
mod socket;
pub mod version;
pub use fence::Fence;
pub use prompt::PromptBegin;
pub use resume::{Created, Kept, Probe, Start, AGENT_OPTION, ARGV_OPTION};

use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::TmuxId;
use args::{
    clear_command, clear_stale_command, fence_command, quote, record_pane_command,
    set_if_unset_command, takeover_command, FENCED,
};
pub use args::{format_literal, literal, sid, ASLEEP_OPTION, FENCED_VAR, TOKEN_VAR};
use listing::parse_sid;
pub use listing::{
    mark_unreported_exits, parse_listing, ExitCollected, Listing, CLIENT_FMT, PANE_FMT, SESSION_FMT,
};
pub use socket::Socket;

/// What can go wrong talking to tmux.
#[derive(Debug, thiserror::Error)]
pub enum TmuxError {
    #[error("no tmux server is running on {0}")]
    NoServer(String),
    #[error("tmux did not answer within {0:?} ({1})")]
    Timeout(Duration, String),
    #[error("failed to run tmux ({0}): {1}")]
    Spawn(String, std::io::Error),
    #[error("tmux failed ({cmd}): {stderr}")]
    Failed { cmd: String, stderr: String },
    #[error("cannot pass the {what} {value:?} to tmux: {why}")]
    BadArgument {
        what: &'static str,
        value: String,
        why: &'static str,
    },
}

/// A handle on one tmux server.
#[derive(Debug, Clone)]
pub struct Tmux {
    pub socket: Socket,
    pub timeout: Duration,
    /// The tmux binary (`tmux`, found on PATH).
    pub bin: String,
}

/// tmux's argv is limited to about 16 KB; batches stay well under.
const ARGV_BUDGET: usize = 12 * 1024;

/// Whether tmux's error means the target session is not there: a missing session, or a server
/// that has no session at all. A server left without sessions (`exit-empty off`, or for a moment
/// before it exits) answers every targeted command, and `list-clients` / `list-panes -a`, with
/// "no current target" instead of "can't find session".
fn session_gone(stderr: &str) -> bool {
    stderr.contains("can't find session")
        || stderr.contains("no such session")
        || stderr.contains("no current target")
}

/// The outcome of `turn begin`'s test-and-set: the core's [`TurnSeen`], the answer the model
/// of the handoff checks.
pub use crate::core::policy::TurnSeen;

impl Tmux {
    pub fn new(socket: Socket, timeout: Duration) -> Self {
        Tmux {
            socket,
            timeout,
            bin: "tmux".into(),
        }
    }

    /// The whole server in one tmux call. A server that is not running is an empty world, with
    /// `server_up` saying so. `collected` tells a pane's uncollected exit (see
    /// [`mark_unreported_exits`]).
    pub async fn list(&self, prefix: &str, collected: ExitCollected) -> Result<Listing, TmuxError> {
        let cmds = [
            ListSessions::new().format(SESSION_FMT).build(),
            ListClients::new().format(CLIENT_FMT).build(),
            ListPanes::new().all().format(PANE_FMT).build(),
        ];
        match self.run(&cmds).await {
            Ok(out) => {
                let mut l = parse_listing(&out, prefix);
                mark_unreported_exits(&mut l, collected);
                l.server_up = Some(true);
                Ok(l)
            }
            // Said so (`server_up`): a wrong socket must not pass for a quiet studio.
            Err(TmuxError::NoServer(_)) => Ok(Listing {
                server_up: Some(false),
                ..Listing::default()
            }),
            // A server without sessions: an empty world too, but a server.
            Err(TmuxError::Failed { stderr, .. }) if stderr.contains("no current target") => {
                Ok(Listing {
                    server_up: Some(true),
                    ..Listing::default()
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Set (or with `None` unset) `@` options on many sessions, in as few tmux calls as the argv
    /// budget allows. Sessions that are gone are skipped quietly (`-q`).
    pub async fn set_options(
        &self,
        writes: &[(TmuxId, &str, Option<String>)],
    ) -> Result<(), TmuxError> {
        let mut batch: Vec<TmuxCommand<'_>> = Vec::new();
        let mut size = 0;
        for (n, opt, val) in writes {
            let mut b = SetOption::new()
                .quiet()
                .target_pane(format!("{}:", sid(*n)))
                .option(*opt);
            b = match val {
                Some(v) => b.value(literal(v)),
                None => b.unset(),
            };
            let c = b.build();
            let len: usize = c.to_vec().iter().map(|a| a.len() + 1).sum::<usize>() + 2;
            if size + len > ARGV_BUDGET && !batch.is_empty() {
                self.run(&batch).await?;
                batch.clear();
                size = 0;
            }
            size += len;
            batch.push(c);
        }
        if !batch.is_empty() {
            self.run(&batch).await?;
        }
        Ok(())
    }

    /// Run `build(n)` for every session number of `ns`: in one chain of argv when they fit the
    /// argv budget, else as scripts on the client's stdin, a session a line and
    /// [`script::LINES_PER_CALL`] lines a call ([`script`]: a call costs the server about as
    /// much as the commands of 40 sessions at N = 1000). Every command built for it is guarded
    /// in the server by its own `$N` (see [`args`]): a session gone meanwhile fails nothing and
    /// is simply left out. A server without any session, or none at all, leaves nothing to act
    /// on: done.
    async fn per_session<F>(&self, ns: &[TmuxId], build: F) -> Result<String, TmuxError>
    where
        F: Fn(TmuxId) -> Vec<TmuxCommand<'static>>,
    {
        self.per_session_then(ns, build, Vec::new()).await
    }

    /// [`Tmux::per_session`], then `tail` (commands of no session) in the same last call, after
    /// every session's: a read of what the writes left, at no call of its own.
    async fn per_session_then<F>(
        &self,
        ns: &[TmuxId],
        build: F,
        tail: Vec<TmuxCommand<'static>>,
    ) -> Result<String, TmuxError>
    where
        F: Fn(TmuxId) -> Vec<TmuxCommand<'static>>,
    {
        let mut built: Vec<Vec<TmuxCommand<'static>>> = ns
            .iter()
            .map(|&n| build(n))
            .filter(|c| !c.is_empty())
            .collect();
        // Chained, the tail goes in the same call; a script cannot carry every word a read may
        // hold (a format's tabs), so after scripts it is a call of its own.
        let size: usize = built
            .iter()
            .flatten()
            .map(|c| c.to_vec().iter().map(|a| a.len() + 1).sum::<usize>() + 2)
            .sum();
        let mut out = String::new();
        if size <= ARGV_BUDGET {
            // One chain holds them all.
            built.push(tail);
            let cmds: Vec<TmuxCommand<'static>> = built.into_iter().flatten().collect();
            if !cmds.is_empty() {
                return self.all_gone_is_ok(self.run(&cmds).await, out);
            }
            return Ok(out);
        }
        // More than one chain's worth: scripts, a session a line.
        let after = tail;
        let names = built[0]
            .iter()
            .filter_map(|c| c.name.as_deref())
            .collect::<Vec<_>>()
            .join(" ; ");
        for chunk in built.chunks(script::LINES_PER_CALL) {
            let lines = chunk
                .iter()
                .map(|c| script::line(c))
                .collect::<Result<Vec<_>, _>>()?;
            let what = format!("source-file - ({} sessions: {names})", lines.len());
            match self.run_script(&lines, what).await {
                Ok(o) => out.push_str(&o),
                r => return self.all_gone_is_ok(r, out),
            }
        }
        if !after.is_empty() {
            let r = self.run(&after).await;
            return self.all_gone_is_ok(r, out);
        }
        Ok(out)
    }

    /// `out` and the answer of a call of [`Tmux::per_session`]: a server without any session
    /// (it answers "no current target") or none at all leaves nothing more to act on.
    fn all_gone_is_ok(
        &self,
        r: Result<String, TmuxError>,
        mut out: String,
    ) -> Result<String, TmuxError> {
        match r {
            Ok(o) => {
                out.push_str(&o);
                Ok(out)
            }
            Err(TmuxError::Failed { stderr, .. }) if stderr.contains("no current target") => {
                Ok(out)
            }
            Err(TmuxError::NoServer(_)) => Ok(out),
            Err(e) => Err(e),
        }
    }

    /// What a sweep writes at first sight, in one chain of guarded calls (as few tmux calls as
    /// the argv budget allows): `@ccs_idle` of each of `stamps` while it is still unset
    /// ([`set_if_unset_command`]), and each of `panes` recorded as its chat's pane while none is
    /// and that pane is still its one pane ([`record_pane_command`]).
    pub async fn first_sight(
        &self,
        stamps: &[(TmuxId, i64)],
        panes: &[(TmuxId, PaneRecord)],
    ) -> Result<(), TmuxError> {
        let stamp_of: HashMap<TmuxId, i64> = stamps.iter().copied().collect();
        let pane_of: HashMap<TmuxId, PaneRecord> = panes.iter().copied().collect();
        let mut ns: Vec<TmuxId> = stamps.iter().map(|w| w.0).collect();
        ns.extend(
            panes
                .iter()
                .map(|p| p.0)
                .filter(|n| !stamp_of.contains_key(n)),
        );
        self.per_session(&ns, |n| {
            let mut cmds = Vec::new();
            if let Some(&v) = stamp_of.get(&n) {
                cmds.push(set_if_unset_command(n, "@ccs_idle", v));
            }
            if let Some(p) = pane_of.get(&n) {
                cmds.push(record_pane_command(n, p));
            }
            cmds
        })
        .await
        .map(|_| ())
    }

    /// Take over a dead reaper's mark of session `n` (only while it is still `value` and
    /// `token`), to finish its teardown under our own mark; then whether we hold it (the fence).
    pub async fn take_over(
        &self,
        n: TmuxId,
        value: &str,
        token: &str,
        now_ms: i64,
        new_token: &str,
    ) -> Result<bool, TmuxError> {
        let cmds = [
            takeover_command(n, value, token, now_ms, new_token),
            fence_command(n, now_ms, new_token),
        ];
        let out = self.gone_is_ok(self.run(&cmds).await)?;
        Ok(out
            .lines()
            .any(|l| l.trim().strip_prefix(FENCED) == Some(&n.get().to_string())))
    }

    /// Clear our marks on many sessions (each only if still ours), batched.
    pub async fn clear_reaping_many(&self, ns: &[TmuxId], token: &str) -> Result<(), TmuxError> {
        let token = token.to_string();
        self.per_session(ns, |n| vec![clear_command(n, &token)])
            .await
            .map(|_| ())
    }

    /// `kill-session` of many sessions, each only while it carries our token, batched. Sessions
    /// already gone are fine.
    pub async fn kill_sessions(&self, ns: &[TmuxId], token: &str) -> Result<(), TmuxError> {
        self.kill_sessions_left(ns, token, &HashMap::new())
            .await
            .map(|_| ())
    }

    /// [`Tmux::kill_sessions`], and how many sessions the server holds right after the kills, in
    /// the same call (`Some(0)`: these were its last; with tmux's `exit-empty` it exits now).
    /// `None` when that could not be read.
    ///
    /// The sessions of `panes` are chats judged as their own pane in a shared session: only that
    /// pane is killed (`kill-pane`), the session stays ([`args::kill_scoped_command`]).
    pub async fn kill_sessions_left(
        &self,
        ns: &[TmuxId],
        token: &str,
        panes: &HashMap<TmuxId, PaneRecord>,
    ) -> Result<Option<usize>, TmuxError> {
        let token = token.to_string();
        // One `LEFT` a session still there, then `END`: the count is known only once `END` came
        // (a server with no session left still runs this call's commands, then exits).
        let mut end = TmuxCommand::with_name("display-message");
        end.push_param("-p").push_param("END");
        let tail = vec![ListSessions::new().format("LEFT").build(), end];
        let out = self
            .per_session_then(
                ns,
                |n| args::kill_scoped_command(n, &token, panes.get(&n)),
                tail,
            )
            .await?;
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        Ok(lines
            .contains(&"END")
            .then(|| lines.iter().filter(|l| **l == "LEFT").count()))
    }

    /// Clear a stale reaping mark whatever its owner, but only if it is still `value` with
    /// `token` (the token as listed; empty for none).
    pub async fn clear_stale_reaping(
        &self,
        n: TmuxId,
        value: &str,
        token: &str,
    ) -> Result<(), TmuxError> {
        let r = self.run(&[clear_stale_command(n, value, token)]).await;
        self.gone_is_ok(r).map(|_| ())
    }

    fn gone_is_ok(&self, r: Result<String, TmuxError>) -> Result<String, TmuxError> {
        match r {
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(String::new()),
            Err(TmuxError::NoServer(_)) => Ok(String::new()),
            r => r,
        }
    }

    /// Make the server collect the exit status of pane processes it has not reaped yet. tmux 3.3a
    /// sometimes misses a pane's SIGCHLD: the pane shows dead, its process stays a zombie and
    /// `#{pane_dead_status}` stays empty until another child of the server exits. A background
    /// `run-shell` is such a child; a listing taken a moment later has the status.
    pub async fn collect_exits(&self) -> Result<(), TmuxError> {
        let cmds = [RunShell::new().background().shell_command("true").build()];
        self.gone_is_ok(self.run(&cmds).await).map(|_| ())
    }

    /// Find a session by exact name: its `$N`, or `None`.
    pub async fn find(
        &self,
        name: &str,
        prefix: &str,
        collected: ExitCollected,
    ) -> Result<Option<Session>, TmuxError> {
        let l = self.list(prefix, collected).await?;
        Ok(l.sessions.into_iter().find(|s| s.name == name))
    }

    /// `turn begin`: set `@ccs_turn` unless the session is being reaped, atomically in the server.
    pub async fn turn_begin(&self, name: &str, now_ms: i64) -> Result<TurnSeen, TmuxError> {
        let target = format!("={name}:");
        let t = quote(&target);
        // Started only if no reap holds it, its pane is alive, and its chat was not reaped from
        // its pane while the session lived on (`@ccs_asleep`); otherwise say which.
        let mut test = IfShell::new()
            .not_execute()
            .target_pane(target.clone())
            .shell_command(format!(
                "#{{&&:#{{&&:#{{==:#{{@ccs_reaping}},}},#{{==:#{{pane_dead}},0}}}},#{{==:#{{{}}},}}}}",
                args::ASLEEP_OPTION
            ))
            .command(format!(
                "set-option -t {t} @ccs_turn {now_ms} ; display-message -p started"
            ))
            .build();
        // (The else branch runs in the client's current session unless told: name the target.)
        test.push_param(format!(
            "display-message -p -t {t} '#{{?#{{==:#{{@ccs_reaping}},}},dead,reaping}}'"
        ));
        let cmds = [
            HasSession::new().target_session(format!("={name}")).build(),
            test,
            args::turns_reported_command(name),
        ];
        match self.run(&cmds).await {
            Ok(out) if out.trim() == "started" => Ok(TurnSeen::Started),
            // A pane that has exited cannot take a message: respawn it (spawn cleans it up).
            Ok(out) if out.trim() == "dead" => Ok(TurnSeen::Gone),
            Ok(_) => Ok(TurnSeen::Marked),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(TurnSeen::Gone),
            Err(TmuxError::NoServer(_)) => Ok(TurnSeen::Gone),
            Err(e) => Err(e),
        }
    }

    /// `turn end`: clear `@ccs_turn` and start the idle clock, in one call, and tell whether a
    /// reap mark is on the session (then its tombstone may be a reap's under way). `None` when
    /// gone.
    pub async fn turn_end(&self, name: &str, now_ms: i64) -> Result<Option<bool>, TmuxError> {
        let target = format!("={name}:");
        let t = quote(&target);
        let mut marked = IfShell::new()
            .not_execute()
            .target_pane(target.clone())
            .shell_command("#{==:#{@ccs_reaping},}")
            .command("display-message -p free")
            .build();
        // (The else branch runs in the client's current session unless told: name the target.)
        marked.push_param(format!("display-message -p -t {t} marked"));
        let cmds = [
            HasSession::new().target_session(format!("={name}")).build(),
            SetOption::new()
                .target_pane(target.clone())
                .option("@ccs_idle")
                .value(now_ms.to_string())
                .build(),
            SetOption::new()
                .unset()
                .target_pane(target)
                .option("@ccs_turn")
                .build(),
            args::turns_reported_command(name),
            marked,
        ];
        match self.run(&cmds).await {
            Ok(out) => Ok(Some(out.trim() != "free")),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(None),
            Err(TmuxError::NoServer(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// End session `$n`'s turn when `@ccs_turn` is still `seen` (the value listed: digits only,
    /// else nothing is done) and no reap mark is on it: `@ccs_turn` cleared, `@ccs_idle` = `now_ms`,
    /// in one call. `true` when it ended; `false` when the value changed, the session is gone or
    /// `seen` is not plain digits.
    pub async fn end_turn_if(&self, n: TmuxId, seen: &str, now_ms: i64) -> Result<bool, TmuxError> {
        if seen.is_empty() || !seen.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(false);
        }
        let r = self
            .run(&[args::end_turn_if_command(n, seen, now_ms)])
            .await;
        self.gone_is_ok(r).map(|out| out.trim() == "ended")
    }

    /// The `<prefix><id>` session that pane `pane` (`%N`, validated by the caller) is in, read in
    /// one call with the sweep's own session format (so the same names pass). `None` when the
    /// pane, its session or the server is gone, or the session is not a chat's.
    pub async fn session_of_pane(
        &self,
        pane: &str,
        prefix: &str,
    ) -> Result<Option<Session>, TmuxError> {
        let c = DisplayMessage::new()
            .print()
            .target_pane(pane.to_string())
            .message(SESSION_FMT)
            .build();
        // And the pane itself (its pid): which agent fired a hook is judged against it.
        let p = DisplayMessage::new()
            .print()
            .target_pane(pane.to_string())
            .message(PANE_FMT)
            .build();
        match self.run(&[c, p]).await {
            Ok(out) => Ok(parse_listing(&out, prefix).sessions.into_iter().next()),
            Err(TmuxError::Failed { stderr, .. })
                if stderr.contains("can't find pane") || session_gone(&stderr) =>
            {
                Ok(None)
            }
            Err(TmuxError::NoServer(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Keep a chat busy (a claude `Stop` with background work, a compaction): mark a turn that
    /// starts now unless one is marked (its start is kept) or a reap holds the session, in one
    /// guarded call. `false` when the session is gone.
    pub async fn mark_busy(&self, name: &str, now_ms: i64) -> Result<bool, TmuxError> {
        let target = format!("={name}:");
        let t = quote(&target);
        let cmds = [
            HasSession::new().target_session(format!("={name}")).build(),
            IfShell::new()
                .not_execute()
                .target_pane(target)
                .shell_command("#{&&:#{==:#{@ccs_reaping},},#{==:#{@ccs_turn},}}")
                .command(format!("set-option -t {t} @ccs_turn {now_ms}"))
                .build(),
        ];
        match self.run(&cmds).await {
            Ok(_) => Ok(true),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(false),
            Err(TmuxError::NoServer(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Set (or with `None` unset) one `@` option of the session named exactly `name`. `false`
    /// when it is gone. (`name` is `<prefix><valid id>`: nothing in it for tmux to expand.)
    pub async fn set_named(
        &self,
        name: &str,
        opt: &str,
        value: Option<&str>,
    ) -> Result<bool, TmuxError> {
        let b = SetOption::new()
            .target_pane(format!("={name}:"))
            .option(opt);
        let set = match value {
            Some(v) => b.value(literal(v)),
            None => b.unset(),
        };
        let cmds = [
            HasSession::new().target_session(format!("={name}")).build(),
            set.build(),
        ];
        match self.run(&cmds).await {
            Ok(_) => Ok(true),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(false),
            Err(TmuxError::NoServer(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `new-session -d -s <name> -c <cwd> <argv...>`, then `@ccs_cid`. Returns `false` when a
    /// session of that name already exists (a concurrent spawn won: tmux checks in the server).
    pub async fn new_session(
        &self,
        name: &str,
        cwd: &Path,
        argv: &[String],
        cid: Option<&str>,
    ) -> Result<bool, TmuxError> {
        // tmux format-expands `-c` (`C#Tools` would be another directory, `#(cmd)` would run):
        // every `#` is doubled. The command's words are passed literally after `--`, so none is
        // read as a flag of new-session or as the end of the command.
        let cwd = cwd.to_str().ok_or_else(|| TmuxError::BadArgument {
            what: "working directory",
            value: cwd.display().to_string(),
            why: "not valid UTF-8",
        })?;
        let mut c = NewSession::new()
            .detached()
            .print()
            .format("#{session_id}")
            .start_directory(format_literal(cwd))
            .session_name(name)
            .build();
        c.push_param("--");
        for a in argv {
            c.push_param(literal(a));
        }
        let out = match self.run(&[c]).await {
            Ok(o) => o,
            Err(TmuxError::Failed { stderr, .. }) if stderr.contains("duplicate session") => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        if let (Some(cid), Some(n)) = (cid, parse_sid(out.trim())) {
            self.set_options(&[(n, "@ccs_cid", Some(cid.to_string()))])
                .await?;
        }
        Ok(true)
    }
}
