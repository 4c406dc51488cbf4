//! The data of the decision core: what a sweep knows ([`Snapshot`]) and what it decides
//! ([`Decision`]), with the policy that rules it.

use std::collections::HashSet;

use serde::Serialize;

pub use crate::core::units::MemThreshold;

/// What to do with control-mode clients whose parent process is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OrphanViewers {
    /// Every client counts as a viewer (the default, today's rule).
    Count,
    /// An orphaned control-mode client does not count.
    Ignore,
}

/// The decision policy, derived from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub idle_kill_ms: Option<u64>,
    pub reap_without_cid: bool,
    pub mem_high: Option<MemThreshold>,
    /// A memory stall share (PSI `some avg10`, %) that also starts the memory rule.
    pub mem_psi: Option<f64>,
    /// A session idle past the floor whose tree holds more than this is reaped (`bloat`).
    pub session_mem_max: Option<u64>,
    /// Emit `warned` this long before an idle reap.
    pub warn_ms: Option<u64>,
    pub max_idle: Option<usize>,
    /// At most this many live chats (busy and idle); the oldest idle beyond go (`max-live`).
    pub max_live: Option<usize>,
    pub min_idle_ms: u64,
    pub stuck_wall_ms: Option<u64>,
    pub stuck_idle_ms: Option<u64>,
    pub reap_stuck: bool,
    pub orphan_viewers: OrphanViewers,
    pub viewer_max_ms: Option<u64>,
    pub reap_exited: bool,
    /// What to do with a chat whose turns cannot be seen ([`UnseenTurns`]).
    pub unseen_turns: UnseenTurns,
    /// What to do with a chat whose session holds more than its own pane ([`SharedSession`]).
    pub shared_session: SharedSession,
}

/// What to do with a chat whose session `ccs-<id>` holds more than the chat's own recorded pane
/// (a pane or window the user added: state `shared`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SharedSession {
    /// Kept (`shared`), whatever its clock says: the default.
    Keep,
    /// Judged as the chat's own pane alone: a reap takes that pane's process tree and
    /// `kill-pane`s exactly it, leaving the rest of the session (and the session) alive.
    Pane,
}

/// What to do with a chat whose turns ccs-reap cannot see: no `@ccs_cid` set by a hook, the
/// studio or `spawn`, no running `@ccs_turn`, no activity file, and no status file of its agent
/// (a cid found only on the command line says nothing of when a turn runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnseenTurns {
    /// Kept (`unseen`): the default. A turn it cannot see may be running.
    Keep,
    /// Judged by the pane's own output: idle since the later of the idle clock and the last
    /// output in the session's windows (`#{window_activity}`).
    Output,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            idle_kill_ms: None,
            reap_without_cid: false,
            mem_high: None,
            mem_psi: None,
            session_mem_max: None,
            warn_ms: None,
            max_idle: None,
            max_live: None,
            min_idle_ms: 60_000,
            stuck_wall_ms: None,
            stuck_idle_ms: None,
            reap_stuck: false,
            orphan_viewers: OrphanViewers::Count,
            viewer_max_ms: None,
            reap_exited: true,
            unseen_turns: UnseenTurns::Keep,
            shared_session: SharedSession::Keep,
        }
    }
}

impl Policy {
    /// Whether anything may ever be reaped. Off means the reaper changes nothing.
    pub fn enabled(&self) -> bool {
        self.idle_kill_ms.is_some()
            || self.mem_high.is_some()
            || self.mem_psi.is_some()
            || self.session_mem_max.is_some()
            || self.max_idle.is_some()
            || self.max_live.is_some()
            || (self.reap_stuck && (self.stuck_wall_ms.is_some() || self.stuck_idle_ms.is_some()))
    }

    /// Whether the pure decision may discount a client that tmux counts as attached. When it can,
    /// the atomic test-and-set before a reap must leave `session_attached` out of its condition.
    pub fn overrides_viewers(&self) -> bool {
        self.orphan_viewers == OrphanViewers::Ignore || self.viewer_max_ms.is_some()
    }
}

/// One tmux client watching a session: attached to it, or attached to another session whose
/// current window is one of this session's windows (a linked window, a grouped session).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Client {
    pub pid: u32,
    pub control_mode: bool,
    /// Unix ms when the client attached.
    pub created_ms: i64,
    /// Unix ms of the client's last input.
    pub activity_ms: i64,
    /// Whether its parent process is gone (pid 1 or a subreaper); `None` when not looked at.
    pub orphaned: Option<bool>,
    /// The number of tmux's `@N` id of the window the client shows (its session's current
    /// window), when listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// The `$N` number of the session the client is attached to, when that is not the session
    /// it is listed under: it watches this one through a linked window or a session group.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(with = "super::ids::as_number_opt")]
    pub through: Option<TmuxId>,
}

/// One pane of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pane {
    pub pid: u32,
    pub dead: bool,
    pub dead_status: Option<i32>,
    pub dead_signal: Option<i32>,
    /// tmux has collected the exit of the pane's process, yet reports neither a status nor a
    /// signal: a death by signal on a tmux older than 3.3, which has no `#{pane_dead_signal}`.
    /// The ending is known to be a failure; the signal is not.
    pub exit_unreported: bool,
    /// tmux's `pane_start_command`: the command line the pane was started with.
    pub start_command: String,
    /// The number of tmux's `%N` pane id, when listed (ids are never reused within a server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// The number of the `@N` id of the pane's window, when listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// The window's index in the session (what a user types: `ccs-1:1`), when listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_index: Option<u32>,
}

impl Pane {
    /// Whether tmux has told how the pane's process ended (or that it never will).
    pub fn exit_known(&self) -> bool {
        self.dead_status.is_some() || self.dead_signal.is_some() || self.exit_unreported
    }
}

/// One session as tmux listed it.
///
/// Its `@` options come twice: the raw strings (`idle`, `turn`, `cid`, `reaping`, `reaper`,
/// `pin`, `idle_kill_ms`, `warned`) are what tmux said, kept as written for the guarded tmux
/// calls that compare them; `opts` is their one parse, made where the session is built from
/// tmux's answer (the listing), and what every rule reads. Whoever edits a raw field after
/// that (a test, the stand-in, a turn ended in place) calls [`Session::reparse`] (or builds
/// with [`Session::parsed`]): until then `opts` still says what tmux said, and a debug build's
/// `decide` panics on the mismatch.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Session {
    /// tmux's `$N` session id (serialised as its number).
    #[serde(with = "super::ids::as_number")]
    pub tmux_id: TmuxId,
    pub name: String,
    /// `name` without the prefix.
    pub id: String,
    pub attached: u32,
    pub idle: String,
    pub turn: String,
    pub cid: String,
    pub reaping: String,
    /// `CCS_REAP_TOKEN` in the session's environment: the token of the reap that holds the mark.
    pub reaper: String,
    /// `@ccs_pin`: set (and not `0`), the session is never reaped but when its panes exited.
    pub pin: String,
    /// `@ccs_idle_kill_ms`: this session's own idle limit (garbage counts as unset).
    pub idle_kill_ms: String,
    /// `@ccs_warned`: the idle stamp a `warned` event was last sent for.
    pub warned: String,
    /// `@ccs_pane`: the chat's own pane as ccs-reap recorded it (`%<pane id>:<pane pid>`), at
    /// first sight, `spawn` or `resume` ([`super::chat_pane`]).
    pub chat_pane: String,
    /// `@ccs_asleep`: set when its chat was reaped from its own pane while the session lived on
    /// (`CCS_ENGINE_SHARED_SESSION=pane`), to the Unix ms of that reap's mark: what is left is
    /// the user's, never the chat again ([`super::chat_pane::judge`]).
    pub asleep: String,
    /// Set where the session is shared and `CCS_ENGINE_SHARED_SESSION=pane`: the session is
    /// judged (and reaped) as this pane alone, the recorded chat's pane; `panes` then holds only
    /// it, and `set_aside` the others ([`super::chat_pane::narrow`]).
    #[serde(skip)]
    pub pane_only: Option<super::chat_pane::PaneRecord>,
    /// The panes left out of a session judged as its chat's pane alone (`pane_only`).
    #[serde(skip)]
    pub set_aside: Vec<Pane>,
    /// `@ccs_turns`: set by whatever reported this chat's turns (`turn begin`/`turn end`, an
    /// agent's hook): its turns are seen (rule 6b), whatever its cid came from.
    pub turns_by: String,
    /// Unix ms of the last output in the session's windows (`window_activity`).
    pub output_ms: Option<i64>,
    pub clients: Vec<Client>,
    pub panes: Vec<Pane>,
    /// The conversation id found on a `claude` command line, when looked for.
    pub cmdline_cid: Option<String>,
    /// Memory held by the session's process tree (PSS where known, else RSS), when measured.
    pub mem_bytes: Option<u64>,
    pub mem_rss: Option<u64>,
    pub mem_pss: Option<u64>,
    /// Why this session's rows could not be trusted, if they could not.
    pub problem: Option<String>,
    /// What its agent's own status file says of its turn, when read (only for the sessions a
    /// decision hinges on: [`needs_agent_turn`](super::needs_agent_turn)).
    #[serde(skip)]
    pub agent_turn: AgentTurn,
    /// The raw `@` options above, parsed once ([`Session::reparse`]): what the rules read.
    #[serde(skip)]
    pub opts: Options,
}

/// What an agent's own per-process status file (Claude Code's `<config dir>/sessions/<pid>.json`)
/// says of a chat's turn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AgentTurn {
    /// Not read (yet): the decision takes the chat's turns as seen, and the reaper reads the
    /// file before it acts on that.
    #[default]
    NotRead,
    /// No live agent of the session writes a status file, or it has written none.
    NoFile,
    /// The live agent's own file (its pid and start time checked): `busy` for `busy`, `waiting`
    /// and `shell`, with the agent's pid and the state as the file says it.
    Seen { pid: u32, busy: bool, state: String },
    /// A file that cannot be trusted (unreadable, torn, of another version, another process's):
    /// why. A turn may be running: the chat is kept busy.
    Untrusted(String),
}

impl Session {
    pub fn tmux_target(&self) -> String {
        self.tmux_id.to_string()
    }

    /// Whether the reap with `token` holds this session: a reap mark, and that reap's token. The
    /// token alone proves nothing: it may come from tmux's global environment, or stay behind
    /// when a mark is cleared by hand.
    pub fn holds_mark_of(&self, token: &str) -> bool {
        !token.is_empty() && self.is_marked() && self.reaper.trim() == token
    }

    /// Whether a reap mark (`@ccs_reaping`) is on the session, whoever's: the one test of it.
    /// Whose it is and whether it still holds is [`super::mark_holds`] and
    /// [`super::mark_is_stale`]'s to judge.
    pub fn is_marked(&self) -> bool {
        !self.reaping.trim().is_empty()
    }
}

/// A session's `@` options, parsed once ([`Session::reparse`], at listing time) for the rules to
/// read, as [`Session::opts`]. The raw strings stay on [`Session`]: they are what tmux holds, and
/// the guarded tmux calls compare them as written (the reap mark's value and token among them).
/// The default is the parse of no option set at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `@ccs_idle`: when the idle clock started.
    pub idle: Stamp,
    /// `@ccs_turn`: `Some` while a turn runs (any value counts), with its start if it parses.
    pub turn: Option<Turn>,
    /// `@ccs_cid`, when it is a valid conversation id.
    pub cid: Option<String>,
    /// `@ccs_pin`: set, and not `0`.
    pub pinned: bool,
    /// `@ccs_idle_kill_ms`: this session's own idle limit.
    pub own_limit: OwnLimit,
    /// `@ccs_warned`: the idle stamp a `warned` event was last sent for.
    pub warned: Option<i64>,
    /// `@ccs_reaping` and the owner its token (`CCS_REAP_TOKEN`) names.
    pub mark: MarkState,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            idle: Stamp::Unset,
            turn: None,
            cid: None,
            pinned: false,
            own_limit: OwnLimit::Unset,
            warned: None,
            mark: MarkState::Free,
        }
    }
}

/// A reap mark as tmux holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkState {
    /// No mark: no reap holds the session.
    Free,
    /// Set at `at` (Unix ms) by the reap whose token names `owner` (`None`: a token of an earlier
    /// version, or none).
    At {
        at: i64,
        owner: Option<crate::core::policy::MarkOwner>,
    },
    /// Set, but not a time: stale at once.
    Garbage,
}

/// An idle stamp as tmux holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// Never stamped: first sight.
    Unset,
    /// Unix ms.
    At(i64),
    /// Set, but not a time: the clock restarts.
    Garbage,
}

/// A running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// Unix ms when it began, when the value parses.
    pub since: Option<i64>,
}

/// A session's own idle limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnLimit {
    /// Not set: the policy's applies.
    Unset,
    /// A duration in ms, at most [`crate::core::policy::MAX_MS`] (`0` = never by idle).
    Ms(u64),
    /// Set, but not a duration (the trimmed value): the policy's applies, with a warning.
    Garbage(String),
}

/// The watched memory (a cgroup, else /proc/meminfo): used (the working set, without the page
/// cache the kernel can drop: see `crate::adapters::memory`), and the limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostMemory {
    pub used_bytes: u64,
    /// `None` = no limit.
    pub limit_bytes: Option<u64>,
}

/// Everything one sweep knows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// Sessions named `<prefix><id>` with a valid id. Nothing else is ever in here.
    pub sessions: Vec<Session>,
    /// A problem that makes every session's liveness unknown (tmux failed, a row that cannot be
    /// tied to one session, an activity file missing or malformed).
    pub global_problem: Option<String>,
    /// Ids listed busy in the activity files.
    pub busy_ids: HashSet<String>,
    pub host: Option<HostMemory>,
    /// The memory stall share (PSI `some avg10`, %), when it was read.
    pub stall_pct: Option<f64>,
    /// Whether activity files are configured: they tell every chat's turns.
    pub turns_by_file: bool,
    /// A request for room for a new chat (`ccs-reap room`, `spawn`, a session-start hook).
    pub room: Option<super::RoomAsk>,
}

/// What to do with a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Keep,
    Reap,
}

/// The state a session is in, for `status` and metrics.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum State {
    Unknown,
    Busy,
    Stuck,
    Viewed,
    Pinned,
    New,
    Idle,
    NoCid,
    Unseen,
    Exited,
    Expired,
    /// The chat's session holds more than the chat's own pane (a pane or a window the user
    /// added): kept, nothing else in it is ever signalled.
    Shared,
    /// The session's one pane is not the one known as the chat's (swapped, moved, respawned):
    /// kept, since its process is not the chat's agent.
    Foreign,
}

impl State {
    /// Its name, as `status`, the JSON and the metrics say it (`no-cid`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every state, in the order of the enum.
    pub const ALL: &'static [State] = <State as strum::VariantArray>::VARIANTS;
}

/// A tmux session id, `$N`: printed as `$N`, and serialised so by default (audit lines, `reap
/// --json`); journals, `known.json` and `status --json` write its bare number
/// ([`super::ids::as_number`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TmuxId(pub u32);

impl TmuxId {
    /// The number of `$N`.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// Debug-printed as its bare number, as when it was a `u32` (logs, `{:?}` of the records).
impl std::fmt::Debug for TmuxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for TmuxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "${}", self.0)
    }
}

impl From<u32> for TmuxId {
    fn from(n: u32) -> Self {
        TmuxId(n)
    }
}

impl Serialize for TmuxId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TmuxId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .map(TmuxId)
            .ok_or_else(|| serde::de::Error::custom(format!("not a tmux session id: {s:?}")))
    }
}

/// Why a session is reaped.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ReapReason {
    Idle,
    Memory,
    MaxIdle,
    Stuck,
    Exited,
    Manual,
    Bloat,
    /// Room made for a new chat (`ccs-reap room`, `spawn`, a session-start hook).
    Room,
    /// More live chats than `CCS_ENGINE_MAX_LIVE`.
    MaxLive,
    /// Not a reap: the tmux server died (or was replaced) with the chat alive on it; its
    /// tombstone comes from the reaper's record of last known conversations.
    ServerDied,
}

impl ReapReason {
    /// Its name, as the audit log, the tombstones and the JSON say it (`max-idle`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The reason a string names (as [`ReapReason::as_str`] writes it).
    #[allow(clippy::should_implement_trait)]
    pub fn parse(s: &str) -> Option<ReapReason> {
        s.parse().ok()
    }

    /// Every reason, in the order of the enum.
    pub const ALL: &'static [ReapReason] = <ReapReason as strum::VariantArray>::VARIANTS;
}

/// The decision for one session.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub tmux_id: TmuxId,
    pub name: String,
    pub id: String,
    /// Keep it, or reap it and why.
    pub ruling: Ruling,
    pub state: State,
    /// One line for an operator.
    pub why: String,
    /// Write `@ccs_idle` = this value (first sight, or a viewer's refresh).
    pub stamp_idle: Option<i64>,
    /// The stamp is a first sight's (`@ccs_idle` was unset): written only while it still is, so
    /// a stamp the studio writes between the listing and the write is never overwritten.
    pub stamp_if_unset: bool,
    /// How long the idle clock has run, when it runs.
    pub idle_ms: Option<u64>,
    /// Unix ms at which the idle rule will reap it, if nothing changes.
    pub deadline_ms: Option<i64>,
    pub cid: Option<String>,
    /// Viewers that count (after the orphan and max-age policies).
    pub viewers: usize,
    /// The effective turn start, when a turn runs.
    pub turn_since_ms: Option<i64>,
    /// Whether the reap overrides a tmux fact (a stuck turn, a discounted viewer): the atomic
    /// test-and-set must then leave that term out.
    pub override_turn: bool,
    pub override_viewers: bool,
    /// Send the `warned` event: the session goes within `CCS_ENGINE_WARN_MS` and was not warned
    /// for this idle period yet (`@ccs_warned` is then set to `warn_for`).
    pub warn_for: Option<i64>,
    /// Something of this session's own that was ignored (a garbage `@ccs_idle_kill_ms`).
    pub warning: Option<String>,
}

/// What a decision rules: keep the session, or reap it for a reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ruling {
    Keep,
    Reap(ReapReason),
}

impl Ruling {
    pub fn action(self) -> Action {
        match self {
            Ruling::Keep => Action::Keep,
            Ruling::Reap(_) => Action::Reap,
        }
    }

    /// The reason, for a reap.
    pub fn reason(self) -> Option<ReapReason> {
        match self {
            Ruling::Keep => None,
            Ruling::Reap(r) => Some(r),
        }
    }
}

impl Decision {
    /// Keep or reap ([`Ruling::action`]).
    pub fn action(&self) -> Action {
        self.ruling.action()
    }

    /// Why it is reaped; `None` when kept ([`Ruling::reason`]).
    pub fn reap_reason(&self) -> Option<ReapReason> {
        self.ruling.reason()
    }
}

/// The JSON of a [`Decision`]: its fields in their order, the ruling as `action` and
/// `reap_reason`.
#[derive(Serialize)]
struct DecisionJson<'a> {
    #[serde(with = "super::ids::as_number")]
    tmux_id: TmuxId,
    name: &'a str,
    id: &'a str,
    action: Action,
    state: State,
    reap_reason: Option<ReapReason>,
    why: &'a str,
    stamp_idle: Option<i64>,
    stamp_if_unset: bool,
    idle_ms: Option<u64>,
    deadline_ms: Option<i64>,
    cid: &'a Option<String>,
    viewers: usize,
    turn_since_ms: Option<i64>,
    override_turn: bool,
    override_viewers: bool,
    warn_for: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: &'a Option<String>,
}

impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        DecisionJson {
            tmux_id: self.tmux_id,
            name: &self.name,
            id: &self.id,
            action: self.action(),
            state: self.state,
            reap_reason: self.reap_reason(),
            why: &self.why,
            stamp_idle: self.stamp_idle,
            stamp_if_unset: self.stamp_if_unset,
            idle_ms: self.idle_ms,
            deadline_ms: self.deadline_ms,
            cid: &self.cid,
            viewers: self.viewers,
            turn_since_ms: self.turn_since_ms,
            override_turn: self.override_turn,
            override_viewers: self.override_viewers,
            warn_for: self.warn_for,
            warning: &self.warning,
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_says_its_ruling_as_action_and_reap_reason() {
        let mut d = Decision {
            tmux_id: TmuxId(3),
            name: "ccs-3".into(),
            id: "3".into(),
            ruling: Ruling::Keep,
            state: State::Expired,
            why: "w".into(),
            stamp_idle: None,
            stamp_if_unset: false,
            idle_ms: Some(5),
            deadline_ms: None,
            cid: None,
            viewers: 0,
            turn_since_ms: None,
            override_turn: false,
            override_viewers: true,
            warn_for: None,
            warning: None,
        };
        let keys = r#""tmux_id":3,"name":"ccs-3","id":"3","action":"keep","state":"expired","reap_reason":null,"why":"w","stamp_idle":null,"stamp_if_unset":false,"idle_ms":5,"deadline_ms":null,"cid":null,"viewers":0,"turn_since_ms":null,"override_turn":false,"override_viewers":true,"warn_for":null"#;
        assert_eq!(serde_json::to_string(&d).unwrap(), format!("{{{keys}}}"));
        d.ruling = Ruling::Reap(ReapReason::MaxIdle);
        d.warning = Some("x".into());
        let json = serde_json::to_string(&d).unwrap();
        assert!(json.contains(r#""action":"reap","state":"expired","reap_reason":"max-idle""#));
        assert!(
            json.ends_with(r#""warn_for":null,"warning":"x"}"#),
            "{json}"
        );
        assert_eq!(
            (d.action(), d.reap_reason()),
            (Action::Reap, Some(ReapReason::MaxIdle))
        );
    }

    #[test]
    fn states_and_reasons_keep_their_names() {
        let states: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            states,
            [
                "unknown", "busy", "stuck", "viewed", "pinned", "new", "idle", "no-cid", "unseen",
                "exited", "expired", "shared", "foreign"
            ]
        );
        let reasons: Vec<&str> = ReapReason::ALL.iter().map(|r| r.as_str()).collect();
        let names = [
            "idle",
            "memory",
            "max-idle",
            "stuck",
            "exited",
            "manual",
            "bloat",
            "room",
            "max-live",
            "server-died",
        ];
        assert_eq!(reasons, names);
        for (r, name) in ReapReason::ALL.iter().zip(names) {
            assert_eq!(r.to_string(), name);
            assert_eq!(ReapReason::parse(name), Some(*r));
            assert_eq!(serde_json::to_string(r).unwrap(), format!("\"{name}\""));
        }
        assert_eq!(ReapReason::parse("Idle"), None);
        assert_eq!(ReapReason::parse(""), None);
        for s in State::ALL {
            assert_eq!(
                serde_json::to_string(s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
    }

    #[test]
    fn a_mark_is_held_only_with_both_the_mark_and_the_token() {
        // (@ccs_reaping, the token listed, the token asked about, held)
        let table: &[(&str, &str, &str, bool)] = &[
            ("1700000000000", "r1x0x1", "r1x0x1", true),
            ("1700000000000", " r1x0x1 ", "r1x0x1", true),
            // The token alone (the global environment, a mark cleared by hand).
            ("", "r1x0x1", "r1x0x1", false),
            ("  ", "r1x0x1", "r1x0x1", false),
            // Another reap's mark.
            ("1700000000000", "r2x0x1", "r1x0x1", false),
            ("1700000000000", "", "r1x0x1", false),
            // Nothing to ask about.
            ("1700000000000", "", "", false),
        ];
        for &(reaping, reaper, token, held) in table {
            let s = Session {
                reaping: reaping.into(),
                reaper: reaper.into(),
                ..Session::default()
            };
            assert_eq!(
                s.holds_mark_of(token),
                held,
                "{reaping:?} {reaper:?} {token:?}"
            );
        }
    }
}
