//! The report's data: what a sweep saw and did (`status`, the `--once` summary), and its JSON.
//! How people read it is `crate::cli::render`.

use crate::core::policy::{Action, ReapReason, State};

use serde::Serialize;

use crate::core::policy::{Decision, HostMemory};
use crate::core::records::AuditLine;
use crate::core::time::rfc3339_checked;

pub use crate::core::schema::SCHEMA_VERSION;

/// What one sweep saw and did. Serialized through [`SweepJson`].
#[derive(Debug, Clone)]
pub struct SweepReport {
    pub at: String,
    pub dry_run: bool,
    pub enabled: bool,
    /// A problem that kept every session (tmux failed, an activity file unreadable).
    pub error: Option<String>,
    /// The tmux socket swept (`-S` as given, `-L` where tmux puts it).
    pub socket_path: String,
    /// Whether a tmux server answered there: `false` none listens (a wrong socket, a
    /// `PrivateTmp=`, another `TMUX_TMPDIR`), `null` unknown (tmux failed: see `error`).
    pub tmux_server_up: Option<bool>,
    /// No server listens because it exited right after this reaper took its last chat (tmux's
    /// `exit-empty`): the studio starts one with its next chat. Not an outage.
    pub tmux_server_empty: bool,
    /// Why this reaper cannot see the tmux server's processes as they are (another pid
    /// namespace), when a server answered and it cannot: nothing is signalled, no memory is
    /// measured, so no chat can be reaped.
    pub blind: Option<String>,
    pub sessions: Vec<SessionReport>,
    pub host: Option<HostMemory>,
    /// Which memory `host` is, and why that one.
    pub watching: Option<String>,
    pub total_rss_bytes: u64,
    pub total_pss_bytes: Option<u64>,
    /// The reaps this sweep carried out (with `--once`; the daemon logs them as they finish).
    pub reaps: Vec<AuditLine>,
    /// What became of each session seen.
    pub summary: Summary,
    /// Chats their tmux server took with it (tombstoned, reason `server-died`) that are not
    /// back yet: `spawn` resumes each with its cid.
    pub lost: Vec<crate::core::known::KnownChat>,
    /// The chats that are asleep (`status` only): reaped, their tombstone not used yet, newest
    /// first.
    pub asleep: Vec<Asleep>,
    /// The pressure rules' thresholds, for the gauge `status` draws.
    pub gauge: Gauge,
    pub took_ms: u64,
}

/// The memory rules' thresholds as this sweep applied them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Gauge {
    /// `CCS_ENGINE_MEM_HIGH` in bytes (a share of the limit resolved), when set.
    pub mem_threshold_bytes: Option<u64>,
    /// The memory stall (PSI `some avg10`, %) read, and `CCS_ENGINE_MEM_PSI`.
    pub stall_pct: Option<f64>,
    pub stall_threshold_pct: Option<f64>,
    /// What a new chat would need (`auto`: the median footprint of the live chats, else the
    /// documented default), the limit room is made under, and the room under it now.
    pub new_chat_bytes: u64,
    pub room_limit_bytes: Option<u64>,
    pub room_bytes: Option<u64>,
    /// Live chats (not going), and `CCS_ENGINE_MAX_LIVE`.
    pub live_chats: usize,
    pub max_live: Option<usize>,
}

/// A chat that is asleep: reaped, with a tombstone that brings it back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Asleep {
    /// Always `asleep`.
    pub state: &'static str,
    pub id: String,
    pub session: String,
    pub cid: Option<String>,
    pub reaped_at: String,
    pub reason: ReapReason,
    pub cwd: Option<String>,
    /// The command that brings it back.
    pub command: String,
}

/// The command that brings chat `id` back: `ccs-reap resume <id>`.
pub fn resume_command(id: &str) -> String {
    format!("ccs-reap resume {id}")
}

impl Asleep {
    /// The chat of a tombstone (`session`: its name, else `<prefix><id>`).
    pub fn of(t: &crate::core::records::Tombstone, prefix: &str) -> Asleep {
        Asleep {
            state: "asleep",
            id: t.id.clone(),
            session: t
                .session
                .clone()
                .unwrap_or_else(|| format!("{prefix}{}", t.id)),
            cid: t.cid.clone(),
            reaped_at: t.reaped_at.clone(),
            reason: t.reason,
            cwd: t.cwd.clone(),
            command: resume_command(&t.id),
        }
    }
}

/// What became of each session a sweep saw: every session is counted once, so `seen` is the sum
/// of the others. Teardowns of a dead reaper that the sweep finished are counted apart
/// (`recovered`): their sessions are gone, or are counted among the others.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub seen: usize,
    /// Not to be reaped (or reaping is off).
    pub kept: usize,
    pub reaped: usize,
    /// To be reaped, but a reap of another reaper (or one of ours still in flight) holds it.
    pub held: usize,
    /// The reap was started and aborted (the session changed, or a hook vetoed it).
    pub aborted: usize,
    pub failed: usize,
    /// To be reaped: a dry run, or `status`.
    pub would_reap: usize,
    /// Started in the background (the daemon): the outcome is logged when it ends.
    pub started: usize,
    /// Teardowns a dead reaper left, finished by this sweep (apart from the sum).
    pub recovered: usize,
}

impl SweepReport {
    /// Why this sweep did not read a tmux server, if it did not: what `/healthz` and systemd's
    /// `STATUS=` say, and the warning of `--once` and `status`.
    pub fn server_problem(&self) -> Option<String> {
        match self.tmux_server_up {
            Some(true) => None,
            // The server exited with the last chat this reaper took: healthy, nothing to sweep.
            Some(false) if self.tmux_server_empty => None,
            Some(false) => Some(format!("no tmux server at {}", self.socket_path)),
            None => Some(format!(
                "tmux at {} was not read: {}",
                self.socket_path,
                self.error.as_deref().unwrap_or("unknown error")
            )),
        }
    }
}

/// One session in a report (`status`, `--once --json`). Serialized through [`SessionJson`].
#[derive(Debug, Clone)]
pub struct SessionReport {
    pub decision: Decision,
    /// The name of the agent its pane runs, from the pane's start command (`None`: not one
    /// ccs-reap knows).
    pub agent: Option<&'static str>,
    /// Whether that agent picks the conversation id only at its first prompt (Codex CLI).
    pub cid_at_first_prompt: bool,
    pub tmux_target: String,
    pub turn: Option<String>,
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub viewer_list: Vec<ViewerReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ViewerReport {
    pub pid: u32,
    pub control_mode: bool,
    pub attached_ms: u64,
    pub idle_ms: u64,
    pub orphaned: Option<bool>,
    /// The session (`$N`) the client is attached to when it watches this one from another: a
    /// linked window or a session group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub through: Option<crate::core::policy::TmuxId>,
}

/// The JSON of a [`SweepReport`] (schema [`SCHEMA_VERSION`]).
#[derive(Serialize)]
struct SweepJson<'a> {
    schema_version: u32,
    at: &'a str,
    dry_run: bool,
    enabled: bool,
    error: &'a Option<String>,
    socket_path: &'a str,
    tmux_server_up: Option<bool>,
    tmux_server_empty: bool,
    /// `true` this reaper sees the server's processes, `false` it cannot (see
    /// `server_processes_problem`), `null` no server was read.
    server_processes_visible: Option<bool>,
    server_processes_problem: &'a Option<String>,
    sessions: &'a [SessionReport],
    host: &'a Option<HostMemory>,
    watching: &'a Option<String>,
    total_rss_bytes: u64,
    total_pss_bytes: Option<u64>,
    reaps: &'a [AuditLine],
    summary: &'a Summary,
    lost: Vec<LostJson<'a>>,
    asleep: &'a [Asleep],
    #[serde(flatten)]
    gauge: &'a Gauge,
    took_ms: u64,
}

/// A chat lost with its tmux server, in the JSON.
#[derive(Serialize)]
struct LostJson<'a> {
    id: &'a str,
    session: &'a str,
    tmux_id: crate::core::policy::TmuxId,
    cid: &'a str,
    cwd: &'a Option<String>,
    server: &'a crate::core::known::ServerId,
    /// When it was last seen alive.
    seen_at: Option<String>,
}

impl Serialize for SweepReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SweepJson {
            schema_version: SCHEMA_VERSION,
            at: &self.at,
            dry_run: self.dry_run,
            enabled: self.enabled,
            error: &self.error,
            socket_path: &self.socket_path,
            tmux_server_up: self.tmux_server_up,
            tmux_server_empty: self.tmux_server_empty,
            server_processes_visible: (self.tmux_server_up == Some(true))
                .then_some(self.blind.is_none()),
            server_processes_problem: &self.blind,
            sessions: &self.sessions,
            host: &self.host,
            watching: &self.watching,
            total_rss_bytes: self.total_rss_bytes,
            total_pss_bytes: self.total_pss_bytes,
            reaps: &self.reaps,
            summary: &self.summary,
            lost: self
                .lost
                .iter()
                .map(|c| LostJson {
                    id: &c.id,
                    session: &c.session,
                    tmux_id: c.tmux_id,
                    cid: &c.cid,
                    cwd: &c.cwd,
                    server: &c.server,
                    seen_at: rfc3339_checked(c.seen),
                })
                .collect(),
            asleep: &self.asleep,
            gauge: &self.gauge,
            took_ms: self.took_ms,
        }
        .serialize(s)
    }
}

/// The JSON of a [`SessionReport`]: the decision's public fields, with its Unix-ms points in time
/// as RFC 3339 `*_at` and the tmux id as `$N` (as in the audit log).
#[derive(Serialize)]
struct SessionJson<'a> {
    tmux_id: crate::core::policy::TmuxId,
    name: &'a str,
    id: &'a str,
    action: Action,
    state: State,
    reap_reason: Option<ReapReason>,
    why: &'a str,
    /// How long the idle clock has run, when it runs.
    idle_ms: Option<u64>,
    /// When the idle rule will reap it, if nothing changes.
    reap_at: Option<String>,
    cid: &'a Option<String>,
    viewers: usize,
    /// When the running turn started (its effective start).
    turn_started_at: Option<String>,
    override_turn: bool,
    override_viewers: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: &'a Option<String>,
    tmux_target: &'a str,
    rss_bytes: Option<u64>,
    pss_bytes: Option<u64>,
    viewer_list: &'a [ViewerReport],
    agent: Option<&'static str>,
}

impl Serialize for SessionReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = &self.decision;
        SessionJson {
            tmux_id: d.tmux_id,
            name: &d.name,
            id: &d.id,
            action: d.action(),
            state: d.state,
            reap_reason: d.reap_reason(),
            why: &d.why,
            idle_ms: d.idle_ms,
            reap_at: d.deadline_ms.and_then(rfc3339_checked),
            cid: &d.cid,
            viewers: d.viewers,
            turn_started_at: d.turn_since_ms.and_then(rfc3339_checked),
            override_turn: d.override_turn,
            override_viewers: d.override_viewers,
            warning: &d.warning,
            tmux_target: &self.tmux_target,
            rss_bytes: self.rss_bytes,
            pss_bytes: self.pss_bytes,
            viewer_list: &self.viewer_list,
            agent: self.agent,
        }
        .serialize(s)
    }
}

impl SessionReport {
    /// Whether this chat is `no-cid` by design: its agent picks the id at its first prompt
    /// (Codex CLI), so an unused chat has none, and nothing to lose. Not a sign of unwired hooks.
    pub fn no_cid_by_design(&self) -> bool {
        self.decision.state == crate::core::policy::State::NoCid && self.cid_at_first_prompt
    }
}

/// The conversations that more than one live session holds, with the sessions' names.
pub fn shared_conversations(r: &SweepReport) -> Vec<(String, Vec<String>)> {
    let mut by: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for s in &r.sessions {
        if let (Some(c), false) = (
            &s.decision.cid,
            s.decision.state == crate::core::policy::State::Exited,
        ) {
            by.entry(c.as_str())
                .or_default()
                .push(s.decision.name.clone());
        }
    }
    by.into_iter()
        .filter(|(_, n)| n.len() > 1)
        .map(|(c, mut n)| {
            n.sort();
            (c.to_string(), n)
        })
        .collect()
}
