//! The only module that runs tmux.
//!
//! Commands are built with tmux_interface's builders (pinned to the 3.3a feature set) and run as
//! `tokio::process::Command`s with a timeout. Every call passes `-u`: without a UTF-8 locale tmux
//! rewrites the tab separators of `-F` output to `_`. One sweep reads the whole server in ONE tmux
//! process (`list-sessions ; list-clients ; list-panes -a`, each row tagged), whatever the number of
//! sessions. Sessions are addressed by `$id` once listed: `-t ccs-1` would match `ccs-10`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tmux_interface::{
    DisplayMessage, HasSession, IfShell, KillSession, ListClients, ListPanes, ListSessions,
    NewSession, RunShell, SetOption, TmuxCommand,
};

use crate::config::Socket;
use crate::policy::{valid_id, Client, Pane, Session};

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

const SEP: &str = "\t";

/// A value that someone else may have written (an `@` option, a session name, a start command):
/// listed with tabs, newlines and carriage returns replaced by spaces, so no value can break its
/// row or forge another session's. (A value so changed never passes the id checks it is read for.)
macro_rules! clean {
    ($f:literal) => {
        concat!("#{s/[\t\n\r]/ /:", $f, "}")
    };
}

/// The fields tmux generates (ids, pids, flags, times) come first and are trusted to parse; the
/// ones anyone with the socket can write are [`clean!`]ed, and the session name comes last.
pub const SESSION_FMT: &str = concat!(
    "S\t#{session_id}\t#{session_attached}\t#{pid}\t",
    clean!("@ccs_idle"),
    "\t",
    clean!("@ccs_turn"),
    "\t",
    clean!("@ccs_cid"),
    "\t",
    clean!("@ccs_reaping"),
    "\t",
    clean!("socket_path"),
    "\t",
    clean!("session_name"),
);
const SESSION_FIELDS: usize = 10;
pub const CLIENT_FMT: &str =
    "C\t#{session_id}\t#{client_pid}\t#{client_control_mode}\t#{client_created}\t#{client_activity}";
const CLIENT_FIELDS: usize = 6;
pub const PANE_FMT: &str = concat!(
    "P\t#{session_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{window_activity}\t",
    clean!("pane_start_command"),
);
const PANE_FIELDS: usize = 8;

/// An argument as tmux should receive it, literally: tmux reads an argument that ends in `;` as
/// the end of a command (`a;` is `a` then a new command), unless the `;` is escaped as `\;`.
pub fn literal(s: &str) -> String {
    match s.strip_suffix(';') {
        Some(head) => format!("{head}\\;"),
        None => s.to_string(),
    }
}

/// An argument that tmux format-expands (`new-session -c`): every `#` doubled, so `#{...}`,
/// `#(cmd)` and `#T` stay text, and then [`literal`].
pub fn format_literal(s: &str) -> String {
    literal(&s.replace('#', "##"))
}

/// tmux's argv is limited to about 16 KB; batches stay well under.
const ARGV_BUDGET: usize = 12 * 1024;

/// The server as one sweep sees it.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// Sessions named `<prefix><valid id>`, with their clients and panes.
    pub sessions: Vec<Session>,
    /// Rows that could not be tied to one session (a viewer of we cannot tell which session):
    /// everything's liveness is unknown.
    pub problems: Vec<String>,
    /// Odd output that concerns no session of ours (a foreign row, a line we did not ask for):
    /// logged, decides nothing.
    pub warnings: Vec<String>,
    /// Every live pane on the server, of any session, ours or not: (session number, pane pid).
    /// A process that belongs to another session's pane is never a victim of ours.
    pub all_panes: Vec<(u32, u32)>,
    pub server_pid: Option<u32>,
    pub socket_path: Option<String>,
}

fn quote(s: &str) -> String {
    // tmux command-string quoting: single quotes, no escapes inside. Targets we quote are `$N:` or
    // `=<prefix><id>:` with a validated charset, so they never hold a quote.
    format!("'{s}'")
}

/// `$N` for a tmux session id number; `$N:` is the pane-style target `set-option` wants.
pub fn sid(n: u32) -> String {
    format!("${n}")
}

fn parse_sid(s: &str) -> Option<u32> {
    s.strip_prefix('$')?.parse().ok()
}

fn opt_num<T: std::str::FromStr>(s: &str) -> Result<Option<T>, ()> {
    if s.is_empty() {
        Ok(None)
    } else {
        s.parse().map(Some).map_err(|_| ())
    }
}

/// Whether tmux's error means the target session is not there: a missing session, or a server
/// that has no session at all. A server left without sessions (`exit-empty off`, or for a moment
/// before it exits) answers every targeted command, and `list-clients` / `list-panes -a`, with
/// "no current target" instead of "can't find session".
fn session_gone(stderr: &str) -> bool {
    stderr.contains("can't find session")
        || stderr.contains("no such session")
        || stderr.contains("no current target")
}

/// A pane and its window's last output (Unix ms).
type PaneRow = (Pane, Option<i64>);

/// Parse the tagged rows of one snapshot call. Pure, so it has its own tests.
///
/// No value of one session can break or forge another's row: the values others can write are
/// listed cleaned of separators (see [`SESSION_FMT`]). Should a row still not parse, only its
/// own session is kept ("liveness unknown"); only a client or pane row that cannot be tied to a
/// session makes every session unknown, since it may be a viewer of any of them.
pub fn parse_listing(out: &str, prefix: &str) -> Listing {
    let mut l = Listing::default();
    let mut by_sid: HashMap<u32, usize> = HashMap::new();
    let mut clients: Vec<(u32, Result<Client, String>)> = Vec::new();
    let mut panes: Vec<(u32, Result<PaneRow, String>)> = Vec::new();
    let ours = |name: &str| name.strip_prefix(prefix).is_some_and(valid_id);

    for line in out.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split(SEP).collect();
        match f[0] {
            "S" => {
                let name = f.last().copied().unwrap_or("");
                let Some(n) = f.get(1).and_then(|x| parse_sid(x)) else {
                    // Not even its id: not a session we can address, so never a candidate.
                    l.warnings
                        .push(format!("session row did not parse: {line:?}"));
                    continue;
                };
                if f.len() != SESSION_FIELDS {
                    if ours(name) {
                        // Kept alone: listed with the problem, so it is never a candidate.
                        by_sid.insert(n, l.sessions.len());
                        l.sessions.push(Session {
                            tmux_id: n,
                            name: name.to_string(),
                            id: name[prefix.len()..].to_string(),
                            problem: Some(format!("session row did not parse: {line:?}")),
                            ..Session::default()
                        });
                    } else {
                        l.warnings
                            .push(format!("session row did not parse: {line:?}"));
                    }
                    continue;
                }
                l.server_pid = l.server_pid.or(f[3].parse().ok());
                l.socket_path = l.socket_path.take().or_else(|| Some(f[8].to_string()));
                if !ours(name) {
                    continue;
                }
                let attached = f[2].parse::<u32>();
                let mut s = Session {
                    tmux_id: n,
                    name: name.to_string(),
                    id: name[prefix.len()..].to_string(),
                    attached: *attached.as_ref().unwrap_or(&0),
                    idle: f[4].to_string(),
                    turn: f[5].to_string(),
                    cid: f[6].to_string(),
                    reaping: f[7].to_string(),
                    ..Session::default()
                };
                if attached.is_err() {
                    s.problem = Some(format!("session_attached did not parse: {:?}", f[2]));
                }
                by_sid.insert(n, l.sessions.len());
                l.sessions.push(s);
            }
            "C" => {
                let n = f.get(1).and_then(|x| parse_sid(x));
                let parsed = (|| -> Result<Client, ()> {
                    if f.len() != CLIENT_FIELDS {
                        return Err(());
                    }
                    Ok(Client {
                        pid: f[2].parse().map_err(|_| ())?,
                        control_mode: f[3] == "1",
                        created_ms: f[4].parse::<i64>().map_err(|_| ())? * 1000,
                        activity_ms: f[5].parse::<i64>().map_err(|_| ())? * 1000,
                        orphaned: None,
                    })
                })()
                .map_err(|_| format!("client row did not parse: {line:?}"));
                match n {
                    Some(n) => clients.push((n, parsed)),
                    // A client whose session we cannot tell may be watching any of ours.
                    None => l
                        .problems
                        .push(format!("client row did not parse: {line:?}")),
                }
            }
            "P" => {
                let n = f.get(1).and_then(|x| parse_sid(x));
                let parsed = (|| -> Result<PaneRow, ()> {
                    if f.len() < PANE_FIELDS {
                        return Err(());
                    }
                    let pane = Pane {
                        pid: f[2].parse().map_err(|_| ())?,
                        dead: f[3] == "1",
                        dead_status: opt_num(f[4])?,
                        dead_signal: opt_num(f[5])?,
                        start_command: f[PANE_FIELDS - 1..].join(SEP),
                    };
                    let act: Option<i64> = opt_num(f[6])?;
                    Ok((pane, act.map(|s| s * 1000)))
                })()
                .map_err(|_| format!("pane row did not parse: {line:?}"));
                match n {
                    Some(n) => {
                        if let Ok((p, _)) = &parsed {
                            if !p.dead {
                                l.all_panes.push((n, p.pid));
                            }
                        }
                        panes.push((n, parsed));
                    }
                    // A pane we cannot place may hold a process of any session.
                    None => l.problems.push(format!("pane row did not parse: {line:?}")),
                }
            }
            // A session row we cannot address lists no candidate; anything else could be a
            // viewer or a pane of one of ours.
            x if x.starts_with('S') => l
                .warnings
                .push(format!("session row did not parse: {line:?}")),
            _ => l.problems.push(format!("unexpected tmux output: {line:?}")),
        }
    }
    for (n, c) in clients {
        if let Some(&i) = by_sid.get(&n) {
            match c {
                Ok(c) => l.sessions[i].clients.push(c),
                Err(e) => l.sessions[i].problem = Some(e),
            }
        }
    }
    for (n, p) in panes {
        match (by_sid.get(&n), p) {
            (Some(&i), Ok((pane, act))) => {
                let s = &mut l.sessions[i];
                s.panes.push(pane);
                s.output_ms = s.output_ms.max(act);
            }
            (Some(&i), Err(e)) => l.sessions[i].problem = Some(e),
            (None, Ok(_)) => {}
            // Another session's pane whose pid we cannot read: its processes could not be told
            // from ours.
            (None, Err(e)) => l.problems.push(e),
        }
    }
    for s in &mut l.sessions {
        if s.problem.is_none() && s.panes.is_empty() {
            s.problem = Some("no pane listed".into());
        }
    }
    l
}

/// Every command built here targets `$N:` with `if-shell -t`, which on a session that is gone runs
/// in the client's current session instead: each is always preceded by `has-session -t $N`, whose
/// failure stops the chain.
///
/// The test-and-set of one session's reap mark: set `@ccs_reaping` (and `token` in `@ccs_reaper`)
/// only if no reap is marked, no turn runs and no client is attached (each term can be left out).
/// `token` is ours (alphanumeric): it can be put in a format as it is.
fn mark_command(
    n: u32,
    now_ms: i64,
    token: &str,
    check_turn: bool,
    check_viewers: bool,
) -> TmuxCommand<'static> {
    let mut cond = "#{==:#{@ccs_reaping},}".to_string();
    if check_turn {
        cond = format!("#{{&&:{cond},#{{==:#{{@ccs_turn}},}}}}");
    }
    if check_viewers {
        cond = format!("#{{&&:{cond},#{{==:#{{session_attached}},0}}}}");
    }
    let t = quote(&format!("{}:", sid(n)));
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(cond)
        .command(format!(
            "set-option -t {t} @ccs_reaping {now_ms} ; set-option -t {t} @ccs_reaper {token}"
        ))
        .build()
}

/// Clear our mark of session `n` (only while it carries `token`).
fn clear_command(n: u32, token: &str) -> TmuxCommand<'static> {
    let t = quote(&format!("{}:", sid(n)));
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(format!("#{{==:#{{@ccs_reaper}},{token}}}"))
        .command(format!(
            "set-option -u -t {t} @ccs_reaping ; set-option -u -t {t} @ccs_reaper"
        ))
        .build()
}

/// `kill-session -t $N`, only while the session carries our reap token in `@ccs_reaper` (so
/// never a session of a newer server that reuses `$N`).
fn kill_command(n: u32, token: &str) -> TmuxCommand<'static> {
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(format!("#{{==:#{{@ccs_reaper}},{token}}}"))
        .command(
            KillSession::new()
                .target_session(quote(&sid(n)))
                .build()
                .to_vec()
                .join(" "),
        )
        .build()
}

/// The outcome of `turn begin`'s test-and-set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnBegin {
    Started,
    Reaping,
    Gone,
}

impl Tmux {
    pub fn new(socket: Socket, timeout: Duration) -> Self {
        Tmux {
            socket,
            timeout,
            bin: "tmux".into(),
        }
    }

    fn socket_desc(&self) -> String {
        match &self.socket {
            Socket::Name(n) => format!("socket name {n:?}"),
            Socket::Path(p) => format!("socket {}", p.display()),
        }
    }

    /// Run a chain of commands in ONE tmux process. Returns stdout.
    pub async fn run(&self, cmds: &[TmuxCommand<'_>]) -> Result<String, TmuxError> {
        let mut args: Vec<Cow<'_, str>> = vec!["-u".into()];
        match &self.socket {
            Socket::Name(n) => args.extend(["-L".into(), Cow::Borrowed(n.as_str())]),
            Socket::Path(p) => args.extend(["-S".into(), p.to_string_lossy()]),
        }
        for (i, c) in cmds.iter().enumerate() {
            if i > 0 {
                args.push(";".into());
            }
            args.extend(c.to_vec());
        }
        let what = cmds
            .iter()
            .filter_map(|c| c.name.as_deref())
            .collect::<Vec<_>>()
            .join(" ; ");
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args.iter().map(|a| a.as_ref()))
            .env_remove("TMUX")
            .env_remove("TMUX_PANE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = match tokio::time::timeout(self.timeout, cmd.output()).await {
            Err(_) => return Err(TmuxError::Timeout(self.timeout, what)),
            Ok(Err(e)) => return Err(TmuxError::Spawn(what, e)),
            Ok(Ok(o)) => o,
        };
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        // "server exited unexpectedly": we reached a server that was exiting (its last session
        // had just gone); by the time we read this it is not running.
        if stderr.contains("no server running")
            || stderr.contains("server exited unexpectedly")
            || (stderr.contains("error connecting to")
                && (stderr.contains("No such file or directory")
                    || stderr.contains("Connection refused")))
        {
            return Err(TmuxError::NoServer(self.socket_desc()));
        }
        Err(TmuxError::Failed { cmd: what, stderr })
    }

    /// The whole server in one tmux call. A server that is not running is an empty world.
    pub async fn list(&self, prefix: &str) -> Result<Listing, TmuxError> {
        let cmds = [
            ListSessions::new().format(SESSION_FMT).build(),
            ListClients::new().format(CLIENT_FMT).build(),
            ListPanes::new().all().format(PANE_FMT).build(),
        ];
        match self.run(&cmds).await {
            Ok(out) => Ok(parse_listing(&out, prefix)),
            Err(TmuxError::NoServer(_)) => Ok(Listing::default()),
            // A server without sessions: an empty world too.
            Err(TmuxError::Failed { stderr, .. }) if stderr.contains("no current target") => {
                Ok(Listing::default())
            }
            Err(e) => Err(e),
        }
    }

    /// Set (or with `None` unset) `@` options on many sessions, in as few tmux calls as the argv
    /// budget allows. Sessions that are gone are skipped quietly (`-q`).
    pub async fn set_options(
        &self,
        writes: &[(u32, &str, Option<String>)],
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

    /// Run `build(n)` for every session number of `ns`, chained into as few tmux processes as the
    /// argv budget allows. A chain stops in tmux at a session that is gone ("can't find session:
    /// $N"): that one is reported gone and the chain goes on from the next in a new call. Returns
    /// the output of every call, concatenated, and the sessions found gone.
    async fn per_session<F>(&self, ns: &[u32], build: F) -> Result<(String, Vec<u32>), TmuxError>
    where
        F: Fn(u32) -> Vec<TmuxCommand<'static>>,
    {
        let mut out = String::new();
        let mut gone = Vec::new();
        let mut pending: std::collections::VecDeque<u32> = ns.iter().copied().collect();
        while !pending.is_empty() {
            // One chain: from the front, as many sessions as fit.
            let mut cmds: Vec<TmuxCommand<'static>> = Vec::new();
            let mut size = 0;
            let mut chain: Vec<u32> = Vec::new();
            while let Some(&n) = pending.front() {
                let c = build(n);
                let len: usize = c
                    .iter()
                    .map(|c| c.to_vec().iter().map(|a| a.len() + 1).sum::<usize>() + 2)
                    .sum();
                if size + len > ARGV_BUDGET && !chain.is_empty() {
                    break;
                }
                size += len;
                cmds.extend(c);
                chain.push(n);
                pending.pop_front();
            }
            match self.run(&cmds).await {
                Ok(o) => out.push_str(&o),
                // A server left without any session answers so: all of them are gone.
                Err(TmuxError::Failed { stderr, .. }) if stderr.contains("no current target") => {
                    gone.extend(chain);
                    gone.extend(pending.drain(..));
                }
                Err(TmuxError::Failed { stderr, cmd }) if session_gone(&stderr) => {
                    // Which one: tmux names it. Anything else is not ours to guess.
                    let Some(i) = stderr
                        .split_whitespace()
                        .find_map(parse_sid)
                        .and_then(|m| chain.iter().position(|&n| n == m))
                    else {
                        return Err(TmuxError::Failed { cmd, stderr });
                    };
                    gone.push(chain[i]);
                    // The ones before it ran, but their output went with the failed call: they
                    // run again (every batched command is checked in tmux, so a second run is
                    // harmless); the ones after it never ran.
                    for &n in chain[..i].iter().chain(&chain[i + 1..]).rev() {
                        pending.push_front(n);
                    }
                }
                Err(TmuxError::NoServer(_)) => {
                    gone.extend(chain);
                    gone.extend(pending.drain(..));
                }
                Err(e) => return Err(e),
            }
        }
        Ok((out, gone))
    }

    /// The atomic test-and-set of the reap marks ([`mark_command`]) for many sessions at once, in as few
    /// tmux calls as the argv budget allows: `(n, check_turn, check_viewers)`. Returns the
    /// sessions we hold the mark of (those whose `@ccs_reaper` is `token` afterwards).
    pub async fn mark_reaping(
        &self,
        items: &[(u32, bool, bool)],
        now_ms: i64,
        token: &str,
    ) -> Result<std::collections::HashSet<u32>, TmuxError> {
        let checks: HashMap<u32, (bool, bool)> =
            items.iter().map(|&(n, t, v)| (n, (t, v))).collect();
        let ns: Vec<u32> = items.iter().map(|x| x.0).collect();
        let token_s = token.to_string();
        let (out, _gone) = self
            .per_session(&ns, |n| {
                let (check_turn, check_viewers) = checks.get(&n).copied().unwrap_or((true, true));
                vec![
                    HasSession::new().target_session(sid(n)).build(),
                    mark_command(n, now_ms, &token_s, check_turn, check_viewers),
                    DisplayMessage::new()
                        .print()
                        .target_pane(format!("{}:", sid(n)))
                        .message("#{session_id} #{@ccs_reaper}")
                        .build(),
                ]
            })
            .await?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let (n, t) = l.split_once(' ')?;
                (t.trim() == token).then(|| parse_sid(n)).flatten()
            })
            .collect())
    }

    /// Clear our marks on many sessions (each only if still ours), batched.
    pub async fn clear_reaping_many(&self, ns: &[u32], token: &str) -> Result<(), TmuxError> {
        let token = token.to_string();
        self.per_session(ns, |n| {
            vec![
                HasSession::new().target_session(sid(n)).build(),
                clear_command(n, &token),
            ]
        })
        .await
        .map(|_| ())
    }

    /// `kill-session` of many sessions, each only while it carries our token, batched. Sessions
    /// already gone are fine.
    pub async fn kill_sessions(&self, ns: &[u32], token: &str) -> Result<(), TmuxError> {
        let token = token.to_string();
        self.per_session(ns, |n| {
            vec![
                HasSession::new().target_session(sid(n)).build(),
                kill_command(n, &token),
            ]
        })
        .await
        .map(|_| ())
    }

    /// Clear a stale reaping mark whatever its owner, but only if it still holds `value`.
    pub async fn clear_stale_reaping(&self, n: u32, value: &str) -> Result<(), TmuxError> {
        let t = quote(&format!("{}:", sid(n)));
        // Compare with the value seen, so a fresh mark set since is left alone. A value that a
        // format cannot hold verbatim (not alphanumeric) is compared by a condition that is true.
        let cond = if !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric()) {
            format!("#{{==:#{{@ccs_reaping}},{value}}}")
        } else {
            "1".to_string()
        };
        let cmds = [
            HasSession::new().target_session(sid(n)).build(),
            IfShell::new()
                .not_execute()
                .target_pane(format!("{}:", sid(n)))
                .shell_command(cond)
                .command(format!(
                    "set-option -u -t {t} @ccs_reaping ; set-option -u -t {t} @ccs_reaper"
                ))
                .build(),
        ];
        self.gone_is_ok(self.run(&cmds).await).map(|_| ())
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
    pub async fn find(&self, name: &str, prefix: &str) -> Result<Option<Session>, TmuxError> {
        let l = self.list(prefix).await?;
        Ok(l.sessions.into_iter().find(|s| s.name == name))
    }

    /// `turn begin`: set `@ccs_turn` unless the session is being reaped, atomically in the server.
    pub async fn turn_begin(&self, name: &str, now_ms: i64) -> Result<TurnBegin, TmuxError> {
        let target = format!("={name}:");
        let t = quote(&target);
        // Started only if no reap holds it and its pane is alive; otherwise say which.
        let mut test = IfShell::new()
            .not_execute()
            .target_pane(target.clone())
            .shell_command("#{&&:#{==:#{@ccs_reaping},},#{==:#{pane_dead},0}}")
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
        ];
        match self.run(&cmds).await {
            Ok(out) if out.trim() == "started" => Ok(TurnBegin::Started),
            // A pane that has exited cannot take a message: respawn it (spawn cleans it up).
            Ok(out) if out.trim() == "dead" => Ok(TurnBegin::Gone),
            Ok(_) => Ok(TurnBegin::Reaping),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(TurnBegin::Gone),
            Err(TmuxError::NoServer(_)) => Ok(TurnBegin::Gone),
            Err(e) => Err(e),
        }
    }

    /// `turn end`: clear `@ccs_turn` and start the idle clock, in one call. `false` when gone.
    pub async fn turn_end(&self, name: &str, now_ms: i64) -> Result<bool, TmuxError> {
        let target = format!("={name}:");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_parses_and_filters() {
        let out = "S\t$0\t0\t77\t123\t\tc0\t\t/tmp/s\tccs-1\n\
                   S\t$1\t1\t77\t\t9\t\t\t/tmp/s\tccs-10\n\
                   S\t$2\t0\t77\t1\t\t\t\t/tmp/s\tother\n\
                   S\t$3\t0\t77\t1\t\t\t\t/tmp/s\tccs-\n\
                   S\t$4\t0\t77\t1\t\t\t\t/tmp/s\txccs-1\n\
                   S\t$5\t0\t77\t1\t\t\t\t/tmp/s\tccs-a b\n\
                   C\t$1\t4242\t1\t1700000000\t1700000001\n\
                   C\t$2\t4243\t0\t1700000000\t1700000001\n\
                   P\t$0\t100\t0\t\t\t1700000002\tclaude --resume x\n\
                   P\t$1\t101\t1\t3\t\t1700000003\tclaude --resume x\n\
                   P\t$1\t102\t1\t\t9\t1700000005\tclaude --resume x\n";
        let l = parse_listing(out, "ccs-");
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.server_pid, Some(77));
        assert_eq!(l.socket_path.as_deref(), Some("/tmp/s"));
        let names: Vec<_> = l.sessions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ccs-1", "ccs-10"]);
        let s0 = &l.sessions[0];
        assert_eq!(
            (
                s0.tmux_id,
                s0.id.as_str(),
                s0.idle.as_str(),
                s0.cid.as_str()
            ),
            (0, "1", "123", "c0")
        );
        assert_eq!(s0.panes.len(), 1);
        assert!(s0.problem.is_none());
        let s1 = &l.sessions[1];
        assert_eq!((s1.attached, s1.turn.as_str()), (1, "9"));
        assert_eq!(s1.clients.len(), 1);
        assert!(s1.clients[0].control_mode);
        assert_eq!(s1.clients[0].created_ms, 1_700_000_000_000);
        assert_eq!(s1.panes[0].dead_status, Some(3));
        assert_eq!(s1.panes[1].dead_signal, Some(9));
        assert_eq!(s1.output_ms, Some(1_700_000_005_000));
    }

    #[test]
    fn broken_rows_are_problems_not_guesses() {
        // A separator rewritten to '_' (no UTF-8 locale): the row is ours but did not parse.
        // It lists no session, so nothing is a candidate; a client row so broken may be a
        // viewer of any session: everything unknown.
        let l = parse_listing("S_$0_0_123___77_/tmp/s_ccs-1\n", "ccs-");
        assert!(l.sessions.is_empty());
        assert_eq!(l.warnings.len(), 1);
        let l = parse_listing("C_$0_77_1_1_1\n", "ccs-");
        assert_eq!(l.problems.len(), 1);
        // A foreign row with a wrong field count is nobody's business.
        let l = parse_listing("S\t$0\t0\tother\n", "ccs-");
        assert!(l.problems.is_empty() && l.sessions.is_empty());
        // A row of ours with a wrong field count keeps that session alone.
        let l = parse_listing(
            "S\t$0\t0\tccs-1\nS\t$1\t0\t7\t1\t\tc\t\t/s\tccs-2\nP\t$1\t100\t0\t\t\t1\tclaude\n",
            "ccs-",
        );
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.sessions.len(), 2);
        assert!(l.sessions[0].problem.is_some());
        assert!(l.sessions[1].problem.is_none());
        // A client row of one of ours that does not parse marks that session.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t/s\tccs-1\nC\t$0\tx\t1\t1\t1\nP\t$0\t100\t0\t\t\t1\tclaude --resume x\n",
            "ccs-",
        );
        assert!(l.sessions[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("client row"));
        // A client row whose session cannot be told: everything unknown.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t/s\tccs-1\nC_x\nP\t$0\t100\t0\t\t\t1\tclaude --resume x\n",
            "ccs-",
        );
        assert_eq!(l.problems.len(), 1);
        // A pane with a garbage status.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t/s\tccs-1\nP\t$0\t100\t1\tzz\t\t1\tclaude --resume x\n",
            "ccs-",
        );
        assert!(l.sessions[0].problem.is_some());
        // A session without panes is not trusted.
        let l = parse_listing("S\t$0\t0\t7\t1\t\tc\t\t/s\tccs-1\n", "ccs-");
        assert!(l.sessions[0].problem.is_some());
    }
}
