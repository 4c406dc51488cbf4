//! What the state dir holds: audit lines, tombstones and journals, with the checks that make one
//! read back from disk trustworthy, whoever wrote the file.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::core::policy::{ReapReason, TmuxId};

/// How a reap attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The whole tree is gone and the session with it.
    Reaped,
    /// Nothing was touched: the session changed, went, or another reap holds it.
    Aborted,
    /// Something could not be done (or survived): see `error` and `survivors`.
    Failed,
    /// Not a reap: the session will be reaped at `reap_at` unless it is used
    /// (`CCS_ENGINE_WARN_MS`).
    Warned,
    /// Not a reap: the chat went with its tmux server (reason `server-died`); nothing was
    /// signalled. It was tombstoned from the last known record, for `spawn` to resume it.
    Lost,
    /// Not a reap: `spawn` brought the chat back and the agent exited before it was up (its own
    /// last line in `error`); the tombstone is marked so the next spawn starts afresh.
    #[serde(rename = "resume-failed")]
    ResumeFailed,
    /// Not a reap: `forget <id>` removed the tombstone of a sleeping chat.
    Forgotten,
    /// Not a reap: the tombstone was older than `CCS_REAP_TOMBSTONE_MAX_AGE` and was removed.
    #[serde(rename = "aged-out")]
    AgedOut,
    /// Not a reap: a prompt hook found the chat held by a reap past its fence, and refused the
    /// prompt (the reap's own line follows).
    #[serde(rename = "prompt-refused")]
    PromptRefused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Reaped => "reaped",
            Outcome::Aborted => "aborted",
            Outcome::Failed => "failed",
            Outcome::Warned => "warned",
            Outcome::Lost => "lost",
            Outcome::ResumeFailed => "resume-failed",
            Outcome::Forgotten => "forgotten",
            Outcome::AgedOut => "aged-out",
            Outcome::PromptRefused => "prompt-refused",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ended {
    /// We stopped it.
    Stopped,
    /// It exited on its own with status 0.
    Completed,
    /// It exited on its own with another status, or a signal.
    Failed,
}

/// One line of `reaped.jsonl` (schema: docs/files.md, shared with `status --json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditLine {
    pub at: String,
    pub session: String,
    pub id: String,
    pub tmux_id: TmuxId,
    pub cid: Option<String>,
    pub reason: ReapReason,
    pub idle_ms: Option<u64>,
    pub outcome: Outcome,
    /// How the session ended: `stopped` (we reaped it), `completed` or `failed` (it exited on its
    /// own: exit status 0, or non-zero / a signal).
    pub ended: Option<Ended>,
    pub exit_status: Option<i32>,
    pub exit_signal: Option<i32>,
    pub term: usize,
    pub kill: usize,
    pub pids: Vec<i32>,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
    pub survivors: Vec<i32>,
    pub took_ms: u64,
    pub error: Option<String>,
    /// When a `warned` session will be reaped (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reap_at: Option<String>,
    /// [`crate::core::schema::SCHEMA_VERSION`]; [`crate::core::compat::SCHEMA_UNVERSIONED`] when
    /// read from a line written before it. Last, so that a line is 0.1.0's with one field more.
    #[serde(default)]
    pub schema_version: u32,
}

/// What an audit line starts from ([`AuditLine::attempt`]): when, which chat, why.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    /// RFC 3339.
    pub at: String,
    pub session: &'a str,
    pub id: &'a str,
    /// tmux's `$N` session id.
    pub tmux_id: TmuxId,
    pub cid: Option<String>,
    pub reason: ReapReason,
    pub idle_ms: Option<u64>,
}

impl AuditLine {
    /// [`AuditLine::attempt`] for a decision of a sweep taken `at` (Unix ms) with `reason`.
    pub fn of_decision(d: &crate::core::policy::Decision, reason: ReapReason, at: i64) -> Self {
        AuditLine::attempt(Attempt {
            at: crate::core::time::rfc3339(at),
            session: &d.name,
            id: &d.id,
            tmux_id: d.tmux_id,
            cid: d.cid.clone(),
            reason,
            idle_ms: d.idle_ms,
        })
    }

    /// [`AuditLine::attempt`] for the teardown a journal records, taken up `at` (Unix ms).
    pub fn of_journal(j: &Journal, at: i64) -> Self {
        AuditLine::attempt(Attempt {
            at: crate::core::time::rfc3339(at),
            session: &j.session,
            id: &j.id,
            tmux_id: j.tmux_id,
            cid: j.cid.clone(),
            reason: j.reason,
            idle_ms: j.idle_ms,
        })
    }

    /// [`AuditLine::attempt`], its fields in a row: kept for the callers not moved to
    /// [`Attempt`] yet.
    pub fn begin(
        at: String,
        session: &str,
        id: &str,
        tmux_id: TmuxId,
        cid: Option<String>,
        reason: ReapReason,
        idle_ms: Option<u64>,
    ) -> Self {
        AuditLine::attempt(Attempt {
            at,
            session,
            id,
            tmux_id,
            cid,
            reason,
            idle_ms,
        })
    }

    /// A line for an attempt that has not got anywhere yet (outcome `aborted`).
    pub fn attempt(a: Attempt<'_>) -> Self {
        AuditLine {
            at: a.at,
            session: a.session.to_string(),
            id: a.id.to_string(),
            tmux_id: a.tmux_id,
            cid: a.cid,
            reason: a.reason,
            idle_ms: a.idle_ms,
            outcome: Outcome::Aborted,
            ended: None,
            exit_status: None,
            exit_signal: None,
            term: 0,
            kill: 0,
            pids: Vec::new(),
            rss_bytes: 0,
            pss_bytes: None,
            survivors: Vec::new(),
            took_ms: 0,
            error: None,
            reap_at: None,
            schema_version: crate::core::schema::SCHEMA_VERSION,
        }
    }
}

/// `sessions/<id>.json`: what the next spawn needs to resume the chat.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Tombstone {
    pub id: String,
    pub cid: Option<String>,
    pub reaped_at: String,
    pub reason: ReapReason,
    pub cwd: Option<String>,
    /// The session's name and the tmux socket it lived on (absent in 0.1.0's tombstones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// The token of the reap that wrote it (absent before 0.3): a journal whose reaper died is
    /// finished only when this reap got as far as its tombstone, past its fence (see [`Journal::armed_by_tombstone`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The agent the chat ran (`claude`, `codex`, `gemini`), as its pane's command names it
    /// (absent in older tombstones, and when no agent's program is found there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The chat's command line (the words its pane ran, without its own `--resume` /
    /// `--session-id`), for `spawn <id>` with no command to replay (absent before 0.4, or when it
    /// could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Set when a `spawn` from this tombstone failed to bring the agent up: the agent's own last
    /// line. The next spawn does not try the same way again (it starts afresh under the same id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failed: Option<String>,
    /// The session's own environment as the studio left it (`show-environment -t`: a studio's
    /// `CCS_CFG`, say), without tmux's `TMUX*` and ccs-reap's own: set on the session `spawn`
    /// brings back, so a studio that checks it keeps the chat (absent before 0.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// The studio's own `@` options on the session (`show-options -t`), ccs-reap's `@ccs_*` aside:
    /// set again on the session `spawn` brings back (absent when none, and before 0.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<std::collections::BTreeMap<String, String>>,
}

/// The most words, and bytes, a tombstone's command line may hold: anything bigger was not a
/// command line we kept.
pub const MAX_ARGV_WORDS: usize = 1024;
pub const MAX_ARGV_BYTES: usize = 256 * 1024;

/// Whether `argv` may be kept and replayed as a command line: not empty, no NUL in a word, not
/// past [`MAX_ARGV_WORDS`] / [`MAX_ARGV_BYTES`]. (Whether it starts an agent is the agent's
/// descriptor's to say.)
pub fn check_argv(argv: &[String]) -> Result<(), String> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err("its command line is empty".into());
    }
    if argv.len() > MAX_ARGV_WORDS || argv.iter().map(String::len).sum::<usize>() > MAX_ARGV_BYTES {
        return Err(format!(
            "its command line is longer than {MAX_ARGV_WORDS} words or {MAX_ARGV_BYTES} bytes"
        ));
    }
    if argv.iter().any(|w| w.contains('\0')) {
        return Err("its command line has a NUL byte in a word".into());
    }
    Ok(())
}

/// `reaping/<id>.json`: a teardown in progress, written before the first signal and removed after
/// the audit line. A reaper that dies mid-teardown leaves it, and the next sweep finishes the job
/// from it (the session itself may be gone by then: its pane process was the first to die).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Journal {
    pub id: String,
    pub session: String,
    #[serde(with = "crate::core::policy::as_number")]
    pub tmux_id: TmuxId,
    pub cid: Option<String>,
    pub reason: ReapReason,
    pub idle_ms: Option<u64>,
    pub cwd: Option<String>,
    pub started_at: String,
    /// The reaper doing it: (pid, start time).
    pub owner: Ident,
    pub victims: Vec<Ident>,
    /// The tmux server's pid: `$N` is only unique within one server's life.
    pub server_pid: Option<u32>,
    /// The reap's token (`CCS_REAP_TOKEN` in the session's environment): only a session that
    /// still carries it is killed.
    pub token: String,
    /// Written before the `before` hook ran (0.3 on): the reap went on past its hook and its fence
    /// only if the tombstone of `id` carries `token`; otherwise nothing was signalled, and a dead
    /// reaper's journal is released, not finished. Absent (earlier versions): written right
    /// before the first signal.
    #[serde(default)]
    pub armed_by_tombstone: bool,
    /// The chat's command line, for its tombstone (see [`Tombstone::argv`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// The session's own environment, for its tombstone (see [`Tombstone::env`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// The studio's own `@` options, for its tombstone (see [`Tombstone::options`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<std::collections::BTreeMap<String, String>>,
    /// The file it was read from (not stored).
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

/// Whether a session environment variable is kept in a tombstone and set again on the way back:
/// a plain name (`[A-Za-z_][A-Za-z0-9_]*`), not tmux's own (`TMUX*`) nor ccs-reap's reap marks.
pub fn kept_env_name(k: &str) -> bool {
    let mut b = k.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && !k.starts_with("TMUX")
        && !k.starts_with("CCS_REAP_")
}

/// Whether a session's user option is the studio's own, kept in a tombstone and set again on the
/// way back: `@` and a plain name (letters, digits, `_`, `-`), not one of ccs-reap's (`@ccs_*`).
pub fn kept_option_name(k: &str) -> bool {
    k.strip_prefix('@').is_some_and(|n| {
        !n.is_empty()
            && n.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
            && !n.starts_with("ccs_")
    })
}

/// One line of `show-options -t` (`@name value`): the studio's own option (see
/// [`kept_option_name`]) and its value, unquoted as tmux quotes it (bare, or `"..."` with `\"`,
/// `\\`, `\$` escaped; `\t`, `\n`, `\r` and `\e` outside or inside). `None` for any other line,
/// and for a value whose quoting it does not know: never guessed.
pub fn parse_option_line(line: &str) -> Option<(String, String)> {
    let (name, raw) = line.split_once(' ')?;
    if !kept_option_name(name) {
        return None;
    }
    let (body, quoted) = match raw.strip_prefix('"') {
        Some(r) => (r.strip_suffix('"')?, true),
        None => (raw, false),
    };
    let mut out = String::new();
    let mut it = body.chars();
    while let Some(c) = it.next() {
        match c {
            '\\' => out.push(match it.next()? {
                '"' if quoted => '"',
                '\\' => '\\',
                '$' => '$',
                't' => '\t',
                'n' => '\n',
                'r' => '\r',
                'e' => '\u{1b}',
                _ => return None,
            }),
            '"' => return None,
            _ => out.push(c),
        }
    }
    Some((name.to_string(), out))
}

/// What makes a tombstone or journal trustworthy, whoever wrote the file.
fn check_cwd(cwd: &Option<String>) -> Result<(), String> {
    match cwd {
        Some(c) if !c.starts_with('/') => Err(format!("cwd {c:?} is not an absolute path")),
        _ => Ok(()),
    }
}

fn check_cid(cid: &Option<String>) -> Result<(), String> {
    match cid {
        Some(c) if !crate::core::policy::valid_cid(c) => Err(format!(
            "cid {c:?} is not a valid conversation id (letters, digits, '_', '-', no leading '-')"
        )),
        _ => Ok(()),
    }
}

impl Tombstone {
    /// The tombstone of chat `id`, written at `at_ms` (Unix ms) for `reason`: the one constructor;
    /// what else is known is set by the caller ([`Journal::tombstone`],
    /// [`crate::core::known::KnownChat::lost_tombstone`], or field by field).
    pub fn new(id: &str, at_ms: i64, reason: ReapReason) -> Tombstone {
        Tombstone {
            id: id.to_string(),
            cid: None,
            reaped_at: crate::core::time::rfc3339(at_ms),
            reason,
            cwd: None,
            session: None,
            socket: None,
            token: None,
            agent: None,
            argv: None,
            start_failed: None,
            env: None,
            options: None,
        }
    }

    /// Why a tombstone keeps no command line (`argv`), as far as it tells: one made for a chat
    /// lost with its server (its command line was never known), one written by ccs-reap 0.1.0
    /// (no session name: 0.3.0 began to keep command lines), else a chat whose command
    /// started no agent ccs-reap could name, or whose command line could not be read at the reap.
    pub fn why_no_argv(&self) -> &'static str {
        if self.reason == ReapReason::ServerDied {
            "it was made for a chat lost with its tmux server, whose command line was not known"
        } else if self.session.is_none() {
            "it was written by ccs-reap 0.1.0; 0.3.0 began to keep command lines"
        } else {
            "the chat ran no agent's command that ccs-reap could keep (a launcher script names its agent with spawn --agent), or its command line could not be read when it was reaped"
        }
    }

    /// Whether this tombstone may be used for chat `id`.
    pub fn validate(&self, id: &str) -> Result<(), String> {
        if self.id != id {
            return Err(format!("its id {:?} is not {id:?}", self.id));
        }
        check_cid(&self.cid)?;
        if let Some(a) = &self.argv {
            check_argv(a)?;
        }
        if let Some(e) = &self.env {
            check_env(e)?;
        }
        if let Some(o) = &self.options {
            check_options(o)?;
        }
        check_cwd(&self.cwd)
    }
}

/// The most variables, and bytes, a tombstone's session environment may hold.
const MAX_ENV: usize = 256;
const MAX_ENV_BYTES: usize = 64 * 1024;

fn check_options(o: &std::collections::BTreeMap<String, String>) -> Result<(), String> {
    if o.len() > MAX_ENV || o.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_ENV_BYTES
    {
        return Err(format!(
            "its studio options are more than {MAX_ENV} or {MAX_ENV_BYTES} bytes"
        ));
    }
    match o
        .iter()
        .find(|(k, v)| !kept_option_name(k) || v.contains('\0'))
    {
        Some((k, _)) => Err(format!("its studio options hold {k:?}, which is not kept")),
        None => Ok(()),
    }
}

fn check_env(e: &std::collections::BTreeMap<String, String>) -> Result<(), String> {
    if e.len() > MAX_ENV || e.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_ENV_BYTES
    {
        return Err(format!(
            "its session environment is larger than {MAX_ENV} variables or {MAX_ENV_BYTES} bytes"
        ));
    }
    match e
        .iter()
        .find(|(k, v)| !kept_env_name(k) || v.contains(['\0', '\n']))
    {
        Some((k, _)) => Err(format!(
            "its session environment holds {k:?}, which is not kept"
        )),
        None => Ok(()),
    }
}

impl Journal {
    /// The tombstone this reap leaves, written at `at_ms` on the server at `socket`: the chat,
    /// its conversation, cwd and command line as the journal keeps them, and the reap's token.
    pub fn tombstone(&self, socket: &str, at_ms: i64) -> Tombstone {
        Tombstone {
            cid: self.cid.clone(),
            cwd: self.cwd.clone(),
            session: Some(self.session.clone()),
            socket: Some(socket.to_string()),
            token: Some(self.token.clone()),
            argv: self.argv.clone(),
            env: self.env.clone(),
            options: self.options.clone(),
            ..Tombstone::new(&self.id, at_ms, self.reason)
        }
    }

    /// Whether this journal may be acted on by the studio of `prefix`. (Its victims are checked
    /// against the live server before any signal, elsewhere.)
    pub fn validate(&self, stem: &str, prefix: &str) -> Result<(), String> {
        if !crate::core::policy::valid_id(&self.id) || self.id != stem {
            return Err(format!(
                "its id {:?} is not a valid id matching its file name",
                self.id
            ));
        }
        if self.session != format!("{prefix}{}", self.id) {
            return Err(format!(
                "its session {:?} is not {prefix}{}",
                self.session, self.id
            ));
        }
        if self.token.is_empty()
            || !self
                .token
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "its token {:?} is not made of letters, digits and '_'",
                self.token
            ));
        }
        if let Some(v) = self.victims.iter().find(|v| v.pid <= 1) {
            return Err(format!("it lists pid {}", v.pid));
        }
        check_cid(&self.cid)?;
        check_cwd(&self.cwd)
    }
}

/// (pid, start time): a process's identity. A pid alone may be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Ident {
    pub pid: i32,
    pub start: u64,
}

#[cfg(test)]
mod tests {

    /// `show-options -t` lines as tmux 3.3a prints them: the studio's own options and their
    /// values, unquoted; ccs-reap's own, odd names and unknown quoting left out (never guessed).
    #[test]
    fn the_studios_options_are_read_as_tmux_quotes_them() {
        let table: &[(&str, Option<(&str, &str)>)] = &[
            ("@plain abc", Some(("@plain", "abc"))),
            (
                r#"@studio_title "hello world \"q\" \$HOME #{x}""#,
                Some(("@studio_title", "hello world \"q\" $HOME #{x}")),
            ),
            (r"@tab a\tb", Some(("@tab", "a\tb"))),
            (r#"@chat-7 "a\\b""#, Some(("@chat-7", "a\\b"))),
            ("@ccs_idle 5", None),
            ("@ccs_cid c1", None),
            ("status on", None),
            ("@ nothing", None),
            ("@a.b c", None),
            (r#"@q "unterminated"#, None),
            (r"@odd a\qb", None),
            (r#"@mid a"b"#, None),
        ];
        for (line, want) in table {
            let got = parse_option_line(line);
            assert_eq!(
                got.as_ref().map(|(k, v)| (k.as_str(), v.as_str())),
                *want,
                "{line}"
            );
        }
    }

    use super::*;

    #[test]
    fn why_a_tombstone_keeps_no_command_line() {
        // (reason, session name, token)
        let with = |reason, session: Option<&str>, token: Option<&str>| Tombstone {
            session: session.map(String::from),
            token: token.map(String::from),
            ..Tombstone::new("1", 0, reason)
        };
        let table = [
            (
                with(ReapReason::ServerDied, Some("ccs-1"), None),
                "lost with its tmux server",
            ),
            (
                with(ReapReason::Idle, None, None),
                "written by ccs-reap 0.1.0",
            ),
            (
                with(ReapReason::Idle, Some("ccs-1"), Some("t")),
                "ran no agent's command",
            ),
            // A failed spawn's mark of a new chat: no token, but no old version either.
            (
                with(ReapReason::Manual, Some("ccs-1"), None),
                "ran no agent's command",
            ),
        ];
        for (t, want) in table {
            assert!(t.why_no_argv().contains(want), "{t:?}: {}", t.why_no_argv());
        }
    }

    #[test]
    fn a_journal_leaves_the_tombstone_of_its_reap() {
        let j = Journal {
            id: "4".into(),
            session: "ccs-4".into(),
            tmux_id: TmuxId(9),
            cid: Some("cid-4".into()),
            reason: ReapReason::Idle,
            idle_ms: Some(1),
            cwd: Some("/w".into()),
            started_at: "t".into(),
            owner: Ident { pid: 1, start: 2 },
            victims: Vec::new(),
            server_pid: None,
            token: "tok".into(),
            armed_by_tombstone: true,
            argv: Some(vec!["claude".into()]),
            env: None,
            options: None,
            path: None,
        };
        let t = j.tombstone("/s", 1_000);
        assert_eq!((t.id.as_str(), t.cid.as_deref()), ("4", Some("cid-4")));
        assert_eq!(
            (t.cwd.as_deref(), t.argv),
            (Some("/w"), Some(vec!["claude".to_string()]))
        );
        assert_eq!(
            (t.session.as_deref(), t.socket.as_deref()),
            (Some("ccs-4"), Some("/s"))
        );
        assert_eq!(
            (t.token.as_deref(), t.reason),
            (Some("tok"), ReapReason::Idle)
        );
        assert_eq!(
            (t.reaped_at.as_str(), t.start_failed),
            ("1970-01-01T00:00:01.000Z", None)
        );
    }
}

/// The serialised forms of a tmux session id, pinned: a number in a journal, a `known.json`
/// record, a session and a decision (`status --json`); `"$N"` in an audit line.
#[cfg(test)]
mod tmux_id_forms {
    use super::*;
    use crate::core::known::{KnownChat, ServerId};
    use crate::core::policy::{Client, Decision, Ruling, Session, State};

    #[test]
    fn a_tmux_id_is_written_as_before() {
        let j = Journal {
            id: "4".into(),
            session: "ccs-4".into(),
            tmux_id: 9u32.into(),
            cid: None,
            reason: ReapReason::Idle,
            idle_ms: None,
            cwd: None,
            started_at: "t".into(),
            owner: Ident { pid: 1, start: 2 },
            victims: Vec::new(),
            server_pid: Some(7),
            token: "tok".into(),
            armed_by_tombstone: false,
            argv: None,
            env: None,
            options: None,
            path: None,
        };
        let json = serde_json::to_string(&j).unwrap();
        assert!(
            json.starts_with(r#"{"id":"4","session":"ccs-4","tmux_id":9,"cid":null"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Journal>(&json).unwrap(), j);

        let k = KnownChat {
            id: "4".into(),
            session: "ccs-4".into(),
            tmux_id: 9u32.into(),
            cid: "c".into(),
            cwd: None,
            server: ServerId {
                pid: 7,
                start: Some(1),
                boot: "b".into(),
            },
            seen: 5,
            lost: false,
        };
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(
            json,
            r#"{"id":"4","session":"ccs-4","tmux_id":9,"cid":"c","cwd":null,"server":{"pid":7,"start":1,"boot":"b"},"seen":5}"#
        );
        assert_eq!(serde_json::from_str::<KnownChat>(&json).unwrap(), k);

        let line = AuditLine::of_journal(&j, 0);
        let json = serde_json::to_string(&line).unwrap();
        assert!(json.contains(r#","tmux_id":"$9","#), "{json}");
        assert_eq!(serde_json::from_str::<AuditLine>(&json).unwrap(), line);

        let s = Session {
            tmux_id: 9u32.into(),
            clients: vec![Client {
                pid: 1,
                control_mode: false,
                created_ms: 0,
                activity_ms: 0,
                orphaned: None,
                window: None,
                through: Some(3u32.into()),
            }],
            ..Session::default()
        };
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.starts_with(r#"{"tmux_id":9,"name":"#), "{json}");
        assert!(json.contains(r#""through":3"#), "{json}");

        let d = Decision {
            tmux_id: 9u32.into(),
            name: "ccs-4".into(),
            id: "4".into(),
            ruling: Ruling::Keep,
            state: State::Expired,
            why: "w".into(),
            stamp_idle: None,
            stamp_if_unset: false,
            idle_ms: None,
            deadline_ms: None,
            cid: None,
            viewers: 0,
            turn_since_ms: None,
            override_turn: false,
            override_viewers: false,
            warn_for: None,
            warning: None,
        };
        let json = serde_json::to_string(&d).unwrap();
        assert!(json.starts_with(r#"{"tmux_id":9,"name":"ccs-4""#), "{json}");
        assert_eq!(format!("{}", crate::core::policy::TmuxId::from(9)), "$9");
    }
}
