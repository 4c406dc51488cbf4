//! `studios/<key>/known.json`: the last known conversation of every chat the reaper has seen
//! with a valid cid, and the tmux server it lived on, so that a chat the server takes with it
//! (a crash, a reboot, a container restart) is tombstoned like a reaped one (`server-died`) and
//! resumed by `spawn`.
//!
//! [`plan`] is the pure core: given the last record, what the listing shows now and which
//! servers still live, the next record and the chats lost with their server.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::core::policy::{ReapReason, TmuxId};
use crate::core::records::Tombstone;

/// An entry not seen alive for this long is dropped, whatever became of its server: Claude Code
/// deletes conversations older than 30 days by default (`cleanupPeriodDays`), so its cid would
/// not resume anyway.
pub const KNOWN_MAX_AGE_MS: i64 = 30 * 24 * 3600 * 1000;

/// The record is rewritten at least this often while its chats live, to move their `seen`
/// forward (otherwise only when something changed).
pub const KNOWN_REFRESH_MS: i64 = 3600 * 1000;

/// The largest `known.json` read back (about 60 000 chats): anything bigger was not written by us.
pub const MAX_KNOWN_BYTES: u64 = 16 * 1024 * 1024;

/// A tmux server's identity: its pid, its start time (clock ticks after boot, from
/// `/proc/<pid>/stat`; `None`, written `null`, when it could not be read: a reaper in another
/// pid namespace cannot see the server's pid) and the boot it ran in (`boot_id`; empty when
/// unknown). Another pid, or another start time or boot where both are known, is another
/// server; an unknown start time or boot is "cannot tell" ([`ServerId::same_as`]), never another
/// server.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServerId {
    pub pid: u32,
    /// `0` in a record written before 0.3 (by a reaper that could not read it) reads as unknown.
    #[serde(default, deserialize_with = "start_or_unknown")]
    pub start: Option<u64>,
    #[serde(default)]
    pub boot: String,
}

/// A recorded start time: `null`, missing, or the `0` earlier versions wrote for "could not be
/// read" are all unknown.
fn start_or_unknown<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(crate::core::compat::start_or_unknown(
        Option::<u64>::deserialize(d)?,
    ))
}

impl ServerId {
    /// Whether `self` and `other` are the same server: `Some(false)` when they differ in the pid
    /// (tmux's own, the same in every namespace), or in a start time or boot both know;
    /// `Some(true)` when everything is known and equal; `None` when it cannot be told (the pid
    /// matches, a start time or boot is unknown on one side).
    pub fn same_as(&self, other: &ServerId) -> Option<bool> {
        if self.pid != other.pid {
            return Some(false);
        }
        let known = |a: &str, b: &str| !a.is_empty() && !b.is_empty();
        if known(&self.boot, &other.boot) && self.boot != other.boot {
            return Some(false);
        }
        match (self.start, other.start) {
            (Some(a), Some(b)) if a != b => Some(false),
            (Some(_), Some(_)) if self.boot == other.boot => Some(true),
            _ => None,
        }
    }

    /// `other`, as far as it is known, completed from `self` where `self` is the same server as
    /// far as can be told: what a reaper that cannot read the start time records (the previous
    /// value kept, never an unknown one in its place).
    pub fn completed_by(&self, other: &ServerId) -> ServerId {
        if self.same_as(other) == Some(false) {
            return other.clone();
        }
        ServerId {
            pid: other.pid,
            start: other.start.or(self.start),
            boot: if other.boot.is_empty() {
                self.boot.clone()
            } else {
                other.boot.clone()
            },
        }
    }
}

/// One chat's last known conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownChat {
    pub id: String,
    pub session: String,
    /// The session's `$N` on `server` (written as its number).
    #[serde(with = "crate::core::policy::as_number")]
    pub tmux_id: TmuxId,
    pub cid: String,
    pub cwd: Option<String>,
    pub server: ServerId,
    /// When it was last seen alive (Unix ms; moved forward at most every [`KNOWN_REFRESH_MS`]).
    pub seen: i64,
    /// Tombstoned as `server-died` (its server went): kept until the chat is back (its session
    /// is seen again) or [`KNOWN_MAX_AGE_MS`] passed, for `status`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
}

impl KnownChat {
    /// The tombstone of this chat lost with its tmux server (reason `server-died`), written at
    /// `at_ms` for the server at `socket`: its last known conversation and cwd, no reap's token
    /// (nothing was signalled).
    pub fn lost_tombstone(&self, socket: &str, at_ms: i64) -> Tombstone {
        Tombstone {
            cid: Some(self.cid.clone()),
            cwd: self.cwd.clone(),
            session: Some(self.session.clone()),
            socket: Some(socket.to_string()),
            ..Tombstone::new(&self.id, at_ms, ReapReason::ServerDied)
        }
    }
}

/// The whole record, by chat id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    pub chats: BTreeMap<String, KnownChat>,
    /// When (Unix ms) a sweep found the tmux server gone right after this reaper took its last
    /// chats (each had a reap's tombstone): the server exited with them, as tmux does with its
    /// last session (`exit-empty`). Until a server listens again the socket is `empty`, not an
    /// outage. Unset once a server answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emptied: Option<i64>,
}

impl Known {
    /// Whether every entry may be trusted, whoever wrote the file: its key is its id, a valid
    /// id whose session is `<prefix><id>`, a valid cid, an absolute cwd.
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        for (k, c) in &self.chats {
            if k != &c.id || !crate::core::policy::valid_id(&c.id) {
                return Err(format!(
                    "entry {k:?} has id {:?}: not a valid id matching its key",
                    c.id
                ));
            }
            if c.session.strip_prefix(prefix) != Some(c.id.as_str()) {
                return Err(format!(
                    "entry {k:?}: its session {:?} is not {prefix}{}",
                    c.session, c.id
                ));
            }
            if !crate::core::policy::valid_cid(&c.cid) {
                return Err(format!(
                    "entry {k:?}: cid {:?} is not a valid conversation id",
                    c.cid
                ));
            }
            if let Some(d) = c.cwd.as_deref().filter(|d| !d.starts_with('/')) {
                return Err(format!("entry {k:?}: cwd {d:?} is not an absolute path"));
            }
        }
        Ok(())
    }

    /// The entries tombstoned as lost with their server.
    pub fn lost(&self) -> impl Iterator<Item = &KnownChat> {
        self.chats.values().filter(|c| c.lost)
    }
}

/// A chat session as one listing shows it (borrowed from the listing: nothing is made for a chat
/// whose entry does not change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatSeen<'a> {
    pub id: &'a str,
    pub session: &'a str,
    pub tmux_id: TmuxId,
    /// Its valid cid (`@ccs_cid`, or its claude's command line), when known this sweep.
    pub cid: Option<Cow<'a, str>>,
    /// Its working directory, when read (only for a chat [`needs_cwd`] names).
    pub cwd: Option<String>,
}

/// What a sweep knows of the server at the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerView {
    /// The listing's `server_up`: `Some(false)` no server listens at the socket, `None` the
    /// listing failed (nothing is concluded from it).
    pub up: Option<bool>,
    /// The server that answered, when it listed a session (its pid comes with the rows).
    pub current: Option<ServerId>,
}

/// What [`plan`] concludes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The record to keep.
    pub known: Known,
    /// Whether it differs from the last one (then it is written).
    pub changed: bool,
    /// Chats that were alive on a server now gone or replaced, and are not back: each gets a
    /// `server-died` tombstone (unless it has one) and a `lost` audit line.
    pub lost: Vec<KnownChat>,
    /// Chats whose server went but which are already back as a new session (respawned before
    /// a sweep saw the server go): no tombstone is needed or can help any more; a `lost` audit
    /// line keeps their old cid.
    pub respawned: Vec<Respawned>,
}

/// A chat lost with its server and already back when a sweep saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Respawned {
    /// Its entry on the old server.
    pub chat: KnownChat,
    /// Back on the same conversation (`spawn` found it in the record, or the studio passed the
    /// cid); otherwise on a fresh one (or one not known yet).
    pub resumed: bool,
}

/// Whether the server `e` lived on is gone or replaced, as a sweep judges it (see [`plan`]):
/// what `spawn` asks of a chat that has no tombstone.
pub fn server_gone(
    e: &KnownChat,
    view: &ServerView,
    living: impl Fn(&ServerId) -> Option<bool>,
) -> bool {
    fate(&e.server, view, &living) == ServerFate::Gone
}

/// Whether the entry for chat `s` has to be made afresh (new, or another session or server):
/// then its cwd is read; otherwise the old entry's is kept.
pub fn needs_cwd(old: &Known, s: &ChatSeen, current: Option<&ServerId>) -> bool {
    match old.chats.get(s.id) {
        Some(e) => {
            e.lost
                || e.tmux_id != s.tmux_id
                || current.is_none_or(|c| c.same_as(&e.server) == Some(false))
        }
        None => true,
    }
}

/// How the server an entry lived on stands now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerFate {
    /// Its process is gone, or another server answers at the socket.
    Gone,
    /// It lives and is the one at the socket.
    Here,
    /// Cannot be told (the listing failed, /proc could not tell, no server at the socket while
    /// the old one still runs).
    Unknown,
}

fn fate(
    s: &ServerId,
    view: &ServerView,
    living: &impl Fn(&ServerId) -> Option<bool>,
) -> ServerFate {
    if view.up.is_none() {
        return ServerFate::Unknown;
    }
    match &view.current {
        // The very server answers (the same pid, start time and boot): it lives, whatever /proc
        // says of a pid it cannot see. The same pid with a start time unknown on one side (a
        // reaper in another pid namespace wrote it, or reads it now): cannot be told, never
        // another server.
        Some(c) => match c.same_as(s) {
            Some(true) => ServerFate::Here,
            Some(false) => ServerFate::Gone,
            None => ServerFate::Unknown,
        },
        None => match living(s) {
            Some(false) => ServerFate::Gone,
            // A server without our sessions (or any) answers, and the old one runs: the same
            // one, whose sessions went (a studio's kill-session, a reap).
            Some(true) if view.up == Some(true) => ServerFate::Here,
            _ => ServerFate::Unknown,
        },
    }
}

/// The next record, and the chats lost with their server, given the last record `old`, the
/// sessions the listing shows (`seen`; every chat session, with or without a cid), the server at
/// the socket (`view`), whether each recorded server still lives (`living`: `None` when /proc
/// could not tell) and the time. Pure.
///
/// - A listing that failed (`view.up == None`) changes nothing.
/// - A chat seen with a valid cid is recorded on the current server (its cwd kept from the old
///   entry when it is the same session on the same server). `seen` moves forward, for every
///   entry at once, when the oldest is [`KNOWN_REFRESH_MS`] old.
/// - A chat seen without a cid this sweep keeps its entry while it is the same session (a cid
///   read from a command line is not looked for every sweep); as another session, it is back:
///   its old entry goes (if its server went, as `respawned`).
/// - A chat not seen: if its server is gone or replaced, it is `lost` (once: the entry stays,
///   marked, until the chat is back or ages out); if its server lives on, its session was
///   killed (by the studio, or reaped, which tombstones it) and the entry goes; if that cannot
///   be told, the entry stays.
/// - An entry not seen alive for [`KNOWN_MAX_AGE_MS`] goes, tombstoned or not.
///
pub fn plan(
    old: Known,
    seen: &[ChatSeen<'_>],
    view: &ServerView,
    living: impl Fn(&ServerId) -> Option<bool>,
    now: i64,
) -> Plan {
    let mut out = Plan {
        known: old,
        ..Plan::default()
    };
    if view.up.is_none() {
        return out;
    }
    let by_id: HashMap<&str, &ChatSeen> = seen.iter().map(|s| (s.id, s)).collect();
    let refresh = out
        .known
        .chats
        .values()
        .filter(|e| !e.lost && by_id.contains_key(e.id.as_str()))
        .any(|e| now.saturating_sub(e.seen) >= KNOWN_REFRESH_MS);
    let look = Look {
        view,
        living: &living,
        now,
        refresh,
    };
    // The chats seen. (In the steady state: one lookup and one comparison each, nothing made.)
    for s in seen {
        see(&mut out, s, &look);
    }
    not_seen(&mut out, &by_id, &look);
    out
}

/// What a [`plan`] looks with: the server at the socket, whether a recorded server lives, the
/// time, and whether `seen` moves forward this time.
struct Look<'a, L> {
    view: &'a ServerView,
    living: &'a L,
    now: i64,
    refresh: bool,
}

impl<L: Fn(&ServerId) -> Option<bool>> Look<'_, L> {
    /// The same session on the same server, as far as can be told (a start time this reaper
    /// cannot read is not another server).
    fn same(&self, e: &KnownChat, s: &ChatSeen<'_>) -> bool {
        !e.lost
            && e.tmux_id == s.tmux_id
            && self
                .view
                .current
                .as_ref()
                .is_some_and(|c| c.same_as(&e.server) != Some(false))
    }

    /// Known better now than in the entry (the start time read here, not by its writer).
    fn better(&self, e: &KnownChat) -> bool {
        self.view
            .current
            .as_ref()
            .is_some_and(|c| e.server.completed_by(c) != e.server)
    }

    fn fate(&self, s: &ServerId) -> ServerFate {
        fate(s, self.view, self.living)
    }
}

/// One chat the listing shows, against its entry.
fn see<L: Fn(&ServerId) -> Option<bool>>(out: &mut Plan, s: &ChatSeen<'_>, look: &Look<'_, L>) {
    let (refresh, now) = (look.refresh, look.now);
    let cid = s
        .cid
        .as_deref()
        .filter(|c| crate::core::policy::valid_cid(c));
    let old_e = out.known.chats.get_mut(s.id);
    match (cid, old_e, &look.view.current) {
        // The same session with the same cid (or none read this sweep): kept as it is.
        (Some(cid), Some(e), Some(_)) if look.same(e, s) && e.cid == cid && !look.better(e) => {
            if refresh {
                e.seen = now;
                out.changed = true;
            }
        }
        (None, Some(e), Some(c)) if look.same(e, s) && look.better(e) => {
            e.server = e.server.completed_by(c);
            if refresh {
                e.seen = now;
            }
            out.changed = true;
        }
        (None, Some(e), _) if look.same(e, s) => {
            if refresh {
                e.seen = now;
                out.changed = true;
            }
        }
        (Some(cid), _, Some(server)) => record(out, s, cid, server, look),
        // Back as another session, without a cid yet: the old entry goes.
        (None, Some(e), _) => {
            if !e.lost && look.fate(&e.server) == ServerFate::Gone {
                out.respawned.push(Respawned {
                    chat: e.clone(),
                    resumed: false,
                });
            }
            out.known.chats.remove(s.id);
            out.changed = true;
        }
        // Seen with a cid but no server identity (cannot be: its pid comes with its row):
        // the entry is kept. Neither a cid nor an entry: nothing to record.
        (Some(_), Some(_), None) | (_, None, _) => {}
    }
}

/// A chat seen with a valid cid, recorded on the current server `server`: its cwd, server and
/// `seen` kept from its entry when it is the same session; an entry of another session whose
/// server went is `respawned`.
fn record<L: Fn(&ServerId) -> Option<bool>>(
    out: &mut Plan,
    s: &ChatSeen<'_>,
    cid: &str,
    server: &ServerId,
    look: &Look<'_, L>,
) {
    let old_e = out.known.chats.get(s.id);
    let kept = old_e.filter(|e| look.same(e, s));
    let e = KnownChat {
        id: s.id.to_string(),
        session: s.session.to_string(),
        tmux_id: s.tmux_id,
        cid: cid.to_string(),
        cwd: match kept {
            Some(e) => e.cwd.clone().or_else(|| s.cwd.clone()),
            None => s.cwd.clone(),
        },
        // The previous value kept where this reaper cannot read it.
        server: match kept {
            Some(e) => e.server.completed_by(server),
            None => server.clone(),
        },
        seen: match kept {
            Some(e) if !look.refresh => e.seen,
            _ => look.now,
        },
        lost: false,
    };
    if let Some(o) = old_e.filter(|o| !look.same(o, s) && !o.lost) {
        if look.fate(&o.server) == ServerFate::Gone {
            out.respawned.push(Respawned {
                chat: o.clone(),
                resumed: o.cid == cid,
            });
        }
    }
    out.known.chats.insert(s.id.to_string(), e);
    out.changed = true;
}

/// The chats the listing does not show: aged out, lost with their server (once), gone with
/// their killed session, or kept when that cannot be told.
fn not_seen<L: Fn(&ServerId) -> Option<bool>>(
    out: &mut Plan,
    by_id: &HashMap<&str, &ChatSeen<'_>>,
    look: &Look<'_, L>,
) {
    let mut lost = Vec::new();
    let mut changed = out.changed;
    out.known.chats.retain(|id, e| {
        if by_id.contains_key(id.as_str()) {
            return true;
        }
        let keep = if look.now.saturating_sub(e.seen) >= KNOWN_MAX_AGE_MS {
            false
        } else if e.lost {
            true
        } else {
            match look.fate(&e.server) {
                ServerFate::Gone => {
                    e.lost = true;
                    lost.push(e.clone());
                    changed = true;
                    true
                }
                ServerFate::Here => false,
                ServerFate::Unknown => true,
            }
        };
        changed |= !keep;
        keep
    });
    out.changed = changed;
    out.lost = lost;
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000_000_000;

    fn srv(pid: u32, start: u64) -> ServerId {
        ServerId {
            pid,
            start: (start != 0).then_some(start),
            boot: "b".into(),
        }
    }

    fn entry(id: &str, n: u32, cid: &str, server: ServerId) -> KnownChat {
        KnownChat {
            id: id.into(),
            session: format!("ccs-{id}"),
            tmux_id: TmuxId(n),
            cid: cid.into(),
            cwd: Some(format!("/w/{id}")),
            server,
            seen: NOW - 1000,
            lost: false,
        }
    }

    #[test]
    fn a_lost_chat_leaves_its_last_known_conversation_and_no_token() {
        let t = entry("7", 3, "cid-7", srv(10, 20)).lost_tombstone("/s", 0);
        assert_eq!(
            (t.id.as_str(), t.cid.as_deref(), t.cwd.as_deref()),
            ("7", Some("cid-7"), Some("/w/7"))
        );
        assert_eq!(
            (t.session.as_deref(), t.socket.as_deref()),
            (Some("ccs-7"), Some("/s"))
        );
        assert_eq!(
            (t.reason, t.token.as_deref(), t.argv.as_deref()),
            (ReapReason::ServerDied, None, None)
        );
        assert_eq!(t.reaped_at, "1970-01-01T00:00:00.000Z");
        assert_eq!(t.validate("7"), Ok(()));
    }

    fn seen(id: &'static str, n: u32, cid: Option<&'static str>) -> ChatSeen<'static> {
        ChatSeen {
            id,
            session: Box::leak(format!("ccs-{id}").into_boxed_str()),
            tmux_id: TmuxId(n),
            cid: cid.map(Cow::Borrowed),
            cwd: Some(format!("/new/{id}")),
        }
    }

    fn known(es: &[KnownChat]) -> Known {
        Known {
            chats: es.iter().map(|e| (e.id.clone(), e.clone())).collect(),
            emptied: None,
        }
    }

    fn ids(es: &[KnownChat]) -> Vec<&str> {
        es.iter().map(|e| e.id.as_str()).collect()
    }

    /// `living` for a table: the servers that live; `None` for pid 0 (cannot tell).
    fn living(alive: &'static [ServerId]) -> impl Fn(&ServerId) -> Option<bool> {
        move |s| (s.pid != 0).then(|| alive.contains(s))
    }

    #[test]
    fn which_entries_are_lost_kept_or_dropped() {
        let a = srv(100, 5);
        let b = srv(200, 9);
        let a_again = srv(100, 77); // the same pid, another start time: another server
        let unsure = srv(0, 1);
        let up = |c: Option<&ServerId>| ServerView {
            up: Some(true),
            current: c.cloned(),
        };
        let down = ServerView {
            up: Some(false),
            current: None,
        };
        let failed = ServerView {
            up: None,
            current: None,
        };
        // The servers alive in each case are given by name below.
        static A: std::sync::LazyLock<[ServerId; 1]> = std::sync::LazyLock::new(|| [srv(100, 5)]);
        static B: std::sync::LazyLock<[ServerId; 1]> = std::sync::LazyLock::new(|| [srv(200, 9)]);
        static AB: std::sync::LazyLock<[ServerId; 2]> =
            std::sync::LazyLock::new(|| [srv(100, 5), srv(200, 9)]);
        static NONE: [ServerId; 0] = [];
        let old = known(&[
            entry("1", 1, "c1", a.clone()),
            entry("2", 2, "c2", a.clone()),
        ]);
        // (what, view, servers alive, seen now, lost, respawned, kept ids)
        type Row<'a> = (
            &'a str,
            ServerView,
            &'static [ServerId],
            Vec<ChatSeen<'static>>,
            Vec<&'a str>,
            Vec<&'a str>,
            Vec<&'a str>,
        );
        let table: Vec<Row> = vec![
            (
                "steady: both seen on the same server",
                up(Some(&a)),
                &*A,
                vec![seen("1", 1, Some("c1")), seen("2", 2, Some("c2"))],
                vec![],
                vec![],
                vec!["1", "2"],
            ),
            (
                "the studio killed 2, the server lives on: dropped, not lost",
                up(Some(&a)),
                &*A,
                vec![seen("1", 1, Some("c1"))],
                vec![],
                vec![],
                vec!["1"],
            ),
            (
                "all of them killed, a server without sessions (exit-empty off) answers",
                up(None),
                &*A,
                vec![],
                vec![],
                vec![],
                vec![],
            ),
            (
                "the server died, no server at the socket",
                down.clone(),
                &NONE,
                vec![],
                vec!["1", "2"],
                vec![],
                vec!["1", "2"],
            ),
            (
                "the server died, a new one answers with other sessions",
                up(Some(&b)),
                &*B,
                vec![],
                vec!["1", "2"],
                vec![],
                vec!["1", "2"],
            ),
            (
                "replaced: the old one still runs, another answers at the socket",
                up(Some(&b)),
                &*AB,
                vec![],
                vec!["1", "2"],
                vec![],
                vec!["1", "2"],
            ),
            (
                "the same pid, another start time (a container restart)",
                up(Some(&a_again)),
                &NONE,
                vec![],
                vec!["1", "2"],
                vec![],
                vec!["1", "2"],
            ),
            (
                "the server died; 1 is already back, on a fresh conversation",
                up(Some(&b)),
                &*B,
                vec![seen("1", 4, Some("fresh"))],
                vec!["2"],
                vec!["1"],
                vec!["1", "2"],
            ),
            (
                "the server died; 1 is back, no cid yet",
                up(Some(&b)),
                &*B,
                vec![seen("1", 4, None)],
                vec!["2"],
                vec!["1"],
                vec!["2"],
            ),
            (
                "the listing failed: nothing concluded",
                failed.clone(),
                &NONE,
                vec![],
                vec![],
                vec![],
                vec!["1", "2"],
            ),
            (
                "no server at the socket, the old one still runs: wait",
                down.clone(),
                &*A,
                vec![],
                vec![],
                vec![],
                vec!["1", "2"],
            ),
        ];
        for (what, view, alive, now_seen, lost, respawned, kept) in table {
            let p = plan(old.clone(), &now_seen, &view, living(alive), NOW);
            assert_eq!(p.changed, p.known != old, "{what}: changed");
            assert_eq!(ids(&p.lost), lost, "{what}: lost");
            let back: Vec<KnownChat> = p.respawned.iter().map(|r| r.chat.clone()).collect();
            assert_eq!(ids(&back), respawned, "{what}: respawned");
            assert!(p.respawned.iter().all(|r| !r.resumed), "{what}: resumed");
            let got: Vec<&str> = p.known.chats.keys().map(String::as_str).collect();
            assert_eq!(got, kept, "{what}: kept");
            for l in &p.lost {
                assert!(p.known.chats[&l.id].lost, "{what}: {} marked lost", l.id);
                assert_eq!(l.cid, old.chats[&l.id].cid, "{what}: the old cid");
            }
        }
        // Back on its own conversation (spawn found it in the record): resumed, not lost.
        let p = plan(
            old.clone(),
            &[seen("1", 4, Some("c1")), seen("2", 5, Some("fresh"))],
            &up(Some(&b)),
            living(&*B),
            NOW,
        );
        let r: Vec<(&str, bool)> = p
            .respawned
            .iter()
            .map(|r| (r.chat.id.as_str(), r.resumed))
            .collect();
        assert_eq!(r, [("1", true), ("2", false)]);
        assert!(p.lost.is_empty());
        assert!(server_gone(&old.chats["1"], &up(Some(&b)), living(&*B)));
        assert!(!server_gone(&old.chats["1"], &up(Some(&a)), living(&*A)));
        assert!(!server_gone(&old.chats["1"], &failed, living(&NONE)));
        // The same server answers though /proc cannot see its pid (another pid namespace):
        // it lives; a chat gone from it was killed.
        let p = plan(old.clone(), &[], &up(Some(&a)), living(&NONE), NOW);
        assert!(p.lost.is_empty() && p.known.chats.is_empty());
        // /proc cannot tell whether the old server lives, and no server answers: kept.
        let old_u = known(&[entry("1", 1, "c1", unsure.clone())]);
        let p = plan(old_u.clone(), &[], &down, living(&NONE), NOW);
        assert!(p.lost.is_empty());
        assert_eq!(p.known, old_u);
        // ... but another server at the socket is another server.
        let p = plan(old_u.clone(), &[], &up(Some(&b)), living(&*B), NOW);
        assert_eq!(ids(&p.lost), ["1"]);
    }

    #[test]
    fn a_lost_chat_is_lost_once_and_kept_until_it_is_back_or_too_old() {
        let a = srv(100, 5);
        let b = srv(200, 9);
        static B: std::sync::LazyLock<[ServerId; 1]> = std::sync::LazyLock::new(|| [srv(200, 9)]);
        let view = ServerView {
            up: Some(true),
            current: Some(b.clone()),
        };
        let old = known(&[entry("1", 1, "c1", a.clone())]);
        let p1 = plan(old.clone(), &[], &view, living(&*B), NOW);
        assert_eq!(ids(&p1.lost), ["1"]);
        // Next sweep: nothing new is lost, the entry stays marked.
        let p2 = plan(p1.known.clone(), &[], &view, living(&*B), NOW + 1000);
        assert!(p2.lost.is_empty() && !p2.changed);
        assert_eq!(p2.known, p1.known);
        // `spawn` resumed it: seen again with its cid, on the new server, a live entry.
        let p3 = plan(
            p2.known.clone(),
            &[seen("1", 7, Some("c1"))],
            &view,
            living(&*B),
            NOW + 2000,
        );
        assert!(p3.lost.is_empty() && p3.respawned.is_empty());
        let e = &p3.known.chats["1"];
        assert!(!e.lost);
        assert_eq!(
            (e.tmux_id, &e.server, e.cwd.as_deref()),
            (TmuxId(7), &b, Some("/new/1"))
        );
        // Never back: gone after the max age.
        let p4 = plan(
            p1.known.clone(),
            &[],
            &view,
            living(&*B),
            NOW + KNOWN_MAX_AGE_MS,
        );
        assert!(p4.known.chats.is_empty() && p4.lost.is_empty());
        // At start-up, an entry older than that is not tombstoned either.
        let p5 = plan(old.clone(), &[], &view, living(&*B), NOW + KNOWN_MAX_AGE_MS);
        assert!(p5.known.chats.is_empty() && p5.lost.is_empty());
    }

    #[test]
    fn the_record_changes_only_when_something_changed() {
        let a = srv(100, 5);
        static A: std::sync::LazyLock<[ServerId; 1]> = std::sync::LazyLock::new(|| [srv(100, 5)]);
        let view = ServerView {
            up: Some(true),
            current: Some(a.clone()),
        };
        let old = known(&[entry("1", 1, "c1", a.clone())]);
        let run = |k: &Known, seen: &[ChatSeen<'static>], now: i64| {
            let p = plan(k.clone(), seen, &view, living(&*A), now);
            assert_eq!(p.changed, p.known != *k, "changed says {}", p.changed);
            p
        };
        // The same: unchanged (no write); the old cwd is kept, not the one read now.
        let p = run(&old, &[seen("1", 1, Some("c1"))], NOW);
        assert!(!p.changed);
        // A cid not read this sweep (a command line's, looked for only sometimes): the same.
        assert!(!run(&old, &[seen("1", 1, None)], NOW).changed);
        // An invalid cid is no cid.
        assert!(!run(&old, &[seen("1", 1, Some("-x"))], NOW).changed);
        // A new cid (`/clear`): changed, the cwd kept.
        let p = run(&old, &[seen("1", 1, Some("c9"))], NOW);
        assert!(p.changed);
        assert_eq!(p.known.chats["1"].cid, "c9");
        assert_eq!(p.known.chats["1"].cwd.as_deref(), Some("/w/1"));
        // Another session of the same chat: made afresh, with the cwd read now.
        let p = run(&old, &[seen("1", 4, Some("c1"))], NOW);
        assert_eq!(p.known.chats["1"].cwd.as_deref(), Some("/new/1"));
        // A new chat, and one without a cid (not recorded).
        let p = run(
            &old,
            &[
                seen("1", 1, Some("c1")),
                seen("2", 2, Some("c2")),
                seen("3", 3, None),
            ],
            NOW,
        );
        assert!(p.changed);
        assert_eq!(p.known.chats.len(), 2);
        assert_eq!(p.known.chats["2"].seen, NOW);
        // Within the hour: unchanged. An hour on: every live entry's `seen` moves at once (one
        // write), then nothing again.
        let both = [seen("1", 1, Some("c1")), seen("2", 2, Some("c2"))];
        assert!(!run(&p.known, &both, NOW + KNOWN_REFRESH_MS / 2).changed);
        let later = NOW - 1000 + KNOWN_REFRESH_MS;
        let two = run(&p.known, &both, later);
        assert!(two.changed);
        assert!(two.known.chats.values().all(|e| e.seen == later));
        assert!(!run(&two.known, &both, later + 1000).changed);
        // Dropped (killed), lost, or aged out: changed.
        assert!(run(&old, &[], NOW).changed);
        assert!(needs_cwd(&old, &seen("2", 2, None), Some(&a)));
        assert!(!needs_cwd(&old, &seen("1", 1, None), Some(&a)));
        assert!(needs_cwd(&old, &seen("1", 4, None), Some(&a)));
    }

    #[test]
    fn the_file_is_private_atomic_and_checked_when_read() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let old = rustix::process::umask(rustix::fs::Mode::empty());
        let st = crate::adapters::state::StateDir::new(d.path().join("st"), "k", "sock", "ccs-");
        assert_eq!(st.read_known().unwrap(), Known::default());
        let k = known(&[entry("1", 1, "c1", srv(7, 8))]);
        st.write_known(&k).unwrap();
        rustix::process::umask(old);
        let p = st.known_path();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(st.read_known().unwrap(), k);
        // No temp file left behind.
        let names: Vec<String> = std::fs::read_dir(st.studio_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["known.json"]);
        // An entry that fails its checks: the whole file is refused, naming it.
        let mut bad = k.clone();
        bad.chats.get_mut("1").unwrap().cid = "-r".into();
        std::fs::write(&p, serde_json::to_vec(&bad).unwrap()).unwrap();
        let e = st.read_known().unwrap_err().to_string();
        assert!(e.contains("known.json") && e.contains("cid"), "{e}");
        // Not JSON; a symlink; too big.
        std::fs::write(&p, "{").unwrap();
        assert!(st.read_known().is_err());
        let elsewhere = d.path().join("elsewhere.json");
        std::fs::write(&elsewhere, serde_json::to_vec(&k).unwrap()).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
        assert!(st.read_known().is_err());
        std::fs::remove_file(&p).unwrap();
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(MAX_KNOWN_BYTES + 1).unwrap();
        assert!(st.read_known().unwrap_err().to_string().contains("bytes"));
    }

    #[test]
    fn a_record_read_back_is_validated() {
        let a = srv(1, 1);
        let good = known(&[entry("1", 1, "c1", a.clone())]);
        assert!(good.validate("ccs-").is_ok());
        type Spoil = Box<dyn Fn(&mut KnownChat)>;
        let bad: Vec<(&str, Spoil)> = vec![
            ("id", Box::new(|e| e.id = "../x".into())),
            ("session", Box::new(|e| e.session = "other-1".into())),
            (
                "cid",
                Box::new(|e| e.cid = "--dangerously-skip-permissions".into()),
            ),
            ("cwd", Box::new(|e| e.cwd = Some("rel".into()))),
        ];
        for (what, f) in bad {
            let mut k = good.clone();
            if let Some(e) = k.chats.get_mut("1") {
                f(e);
            }
            let e = k.validate("ccs-").unwrap_err();
            assert!(e.contains(what), "{what}: {e}");
        }
    }

    #[test]
    fn an_unknown_start_time_is_cannot_tell_never_another_server() {
        let unknown = |pid| ServerId {
            pid,
            start: None,
            boot: "b".into(),
        };
        // (a, b, same_as)
        let rows: &[(ServerId, ServerId, Option<bool>)] = &[
            (srv(1, 5), srv(1, 5), Some(true)),
            (srv(1, 5), srv(1, 6), Some(false)),
            (srv(1, 5), srv(2, 5), Some(false)),
            (srv(1, 5), unknown(1), None),
            (unknown(1), srv(1, 5), None),
            (unknown(1), unknown(2), Some(false)),
            (
                srv(1, 5),
                ServerId {
                    boot: String::new(),
                    ..srv(1, 5)
                },
                None,
            ),
            (
                srv(1, 5),
                ServerId {
                    boot: "other boot".into(),
                    ..srv(1, 5)
                },
                Some(false),
            ),
        ];
        for (a, b, want) in rows {
            assert_eq!(a.same_as(b), *want, "{a:?} against {b:?}");
        }
        // What a reaper in another pid namespace wrote (0 in earlier versions, null now) reads
        // as unknown; an unknown one is written as null, never 0.
        for text in [
            r#"{"pid":1,"start":0,"boot":"b"}"#,
            r#"{"pid":1,"start":null,"boot":"b"}"#,
            r#"{"pid":1,"boot":"b"}"#,
        ] {
            let s: ServerId = serde_json::from_str(text).unwrap();
            assert_eq!(s, unknown(1), "{text}");
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                r#"{"pid":1,"start":null,"boot":"b"}"#
            );
        }
        // Reader: the entry written with the start unknown, read by a reaper that knows it: the
        // chat seen is kept (its server completed), and the chat not seen (deleted by the
        // studio, or not yet listed) is neither lost nor dropped: cannot tell.
        let a = srv(100, 5);
        let old = known(&[
            entry("1", 1, "c1", unknown(100)),
            entry("2", 2, "c2", unknown(100)),
        ]);
        let here = ServerView {
            up: Some(true),
            current: Some(a.clone()),
        };
        static A: std::sync::LazyLock<[ServerId; 1]> = std::sync::LazyLock::new(|| [srv(100, 5)]);
        let p = plan(
            old.clone(),
            &[seen("1", 1, Some("c1"))],
            &here,
            living(&*A),
            NOW,
        );
        assert!(p.lost.is_empty() && p.respawned.is_empty(), "{p:?}");
        assert_eq!(p.known.chats["1"].server, a, "completed from the reader");
        assert_eq!(
            p.known.chats["1"].cwd.as_deref(),
            Some("/w/1"),
            "the same entry"
        );
        assert!(!p.known.chats["2"].lost);
        // Writer: a reaper that cannot read the start time keeps the previous value, and sees
        // no replaced server in its own listing.
        let blind = ServerView {
            up: Some(true),
            current: Some(unknown(100)),
        };
        let old = known(&[
            entry("1", 1, "c1", a.clone()),
            entry("2", 2, "c2", a.clone()),
        ]);
        let p = plan(
            old.clone(),
            &[seen("1", 1, Some("c1")), seen("3", 3, Some("c3"))],
            &blind,
            |_: &ServerId| None,
            NOW,
        );
        assert!(p.lost.is_empty() && p.respawned.is_empty(), "{p:?}");
        assert_eq!(p.known.chats["1"], old.chats["1"], "kept as it was");
        assert!(!p.known.chats["2"].lost, "cannot tell: kept, not lost");
        assert_eq!(
            p.known.chats["3"].server,
            unknown(100),
            "a new one: unknown"
        );
        // Another pid at the socket is another server, whatever is unknown.
        let other = ServerView {
            up: Some(true),
            current: Some(unknown(300)),
        };
        let p = plan(old, &[], &other, |_: &ServerId| None, NOW);
        assert_eq!(ids(&p.lost), ["1", "2"]);
    }
}
