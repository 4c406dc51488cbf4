//! Who owns a reap mark or a journal, judged from here: this process's identity, the tokens of
//! its reaps still under way, how long it has seen the marks and journals it cannot check, and
//! whether it sees the tmux server's processes at all. One handle ([`Ownership`]) for every
//! stage that writes a mark, clears one or finishes another's teardown.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashSet;
use std::sync::Arc;

use crate::adapters::identity;
use crate::adapters::metrics::Metrics;
use crate::adapters::procs;
use crate::adapters::state::{Journal, StateDir};
use crate::core::policy::{self, Here, MarkOwner, OwnerSeen, Session};
use crate::engine::lease_clock::{self, LeaseClock};

/// Why this process does not see the tmux server's processes as they are (said in `/healthz`,
/// `doctor` and the metrics).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SightError {
    /// The server's identity check failed (its words: another pid namespace, a pid that does not
    /// hold the socket).
    #[error("{0}")]
    Blind(String),
    /// The listing gave no server pid or socket path.
    #[error("the tmux server's pid or socket path is not known")]
    Unknown,
    /// The server listed has exited since: nothing listens at its socket.
    #[error("the tmux server (pid {pid}) has exited since it was listed: nothing listens at {socket} any more ({why})")]
    Exited {
        pid: u32,
        socket: String,
        why: String,
    },
}

/// The ownership of marks and journals, as this process judges it.
pub struct Ownership {
    /// The socket this reaper reaches its tmux server at (`CCS_TMUX_SOCKET_PATH`, resolved): where
    /// it asks whether a server it listed has exited since.
    socket: String,
    /// This process, as its marks name it: (pid, start time), and its pid and time namespaces.
    me: (procs::Ident, Here),
    /// A `@ccs_reaping` mark older than this was left by a reaper that died mid-teardown (the
    /// lease's limit, ms).
    limit_ms: i64,
    /// Where the observer keeps what it has seen for a later run.
    state: StateDir,
    /// Whether the observer keeps it (not in a dry run).
    persist: bool,
    /// Where the blindness is reported (`/healthz`, the metrics).
    metrics: Arc<Metrics>,
    /// The tokens of this process's reaps still under way: a mark this process owns whose token
    /// is not here was left behind (a kill-session that failed, a bug) and is judged as a gone
    /// owner's, so it goes stale after its limit instead of holding the chat for our whole life.
    live_tokens: Mutex<HashSet<String>>,
    /// How long this process has seen the marks and journals it cannot check.
    observer: Mutex<LeaseClock>,
    /// Why the last look found that this process cannot see the tmux server's processes as they
    /// are (another pid namespace), if it did: nothing is signalled meanwhile.
    blind: Mutex<Option<String>>,
    /// Said once for the life of this handle: /proc here shows no owner's namespaces.
    unseeable_said: std::sync::Once,
}

/// A token of ours held live while this lives ([`Ownership::hold_token`]).
pub(crate) struct LiveToken<'a> {
    o: &'a Ownership,
    token: String,
}

impl Drop for LiveToken<'_> {
    fn drop(&mut self) {
        self.o.live_tokens().remove(&self.token);
    }
}

impl Ownership {
    /// This process's ownership: marks it writes stale after `limit_ms`; what it observes kept
    /// in `state` when `persist`; its blindness reported to `metrics`.
    pub(crate) fn new(
        limit_ms: i64,
        state: StateDir,
        persist: bool,
        metrics: Arc<Metrics>,
        socket: String,
    ) -> Self {
        Ownership {
            socket,
            me: (procs::myself(), identity::here()),
            limit_ms,
            state,
            persist,
            metrics,
            live_tokens: Mutex::new(HashSet::new()),
            observer: Mutex::new(LeaseClock::default()),
            blind: Mutex::new(None),
            unseeable_said: std::sync::Once::new(),
        }
    }

    /// A `@ccs_reaping` mark older than this was left by a reaper that died mid-teardown: the
    /// next sweep clears it and decides the session afresh (the lease's limit).
    pub(crate) fn stale_after(&self) -> i64 {
        self.limit_ms
    }

    /// The owner this reaper writes into its marks: itself, and the limit after which a reader
    /// that cannot see it may take its mark for stale.
    pub(crate) fn mark_owner(&self) -> MarkOwner {
        let (me, here) = self.me;
        MarkOwner {
            pid: me.pid,
            start: me.start,
            pidns: here.pidns,
            timens: Some(here.timens),
            limit_ms: self.stale_after(),
        }
    }

    fn live_tokens(&self) -> MutexGuard<'_, HashSet<String>> {
        self.live_tokens.lock()
    }

    /// Hold `token` live (a reap of ours under way) until the guard drops, on every path.
    pub(crate) fn hold_token(&self, token: &str) -> LiveToken<'_> {
        self.live_tokens().insert(token.to_string());
        LiveToken {
            o: self,
            token: token.to_string(),
        }
    }

    /// Whether the reap mark on `s` may be cleared as stale now ([`policy::mark_is_stale`], with
    /// its owner looked up from here, and how long this process has seen the mark when its owner
    /// cannot be checked). Earlier versions' marks are judged by our own limit, observed.
    pub(crate) fn mark_is_stale(&self, s: &Session) -> bool {
        let (owner, seen) = self.owner_of(s);
        let observed = self.observed_mark(s, seen);
        policy::mark_is_stale(
            &s.reaping,
            owner.as_ref(),
            seen,
            observed,
            self.stale_after(),
        )
    }

    /// Whether another reap's live mark holds `s` ([`policy::mark_holds`]).
    pub(crate) fn mark_holds(&self, s: &Session) -> bool {
        let (owner, seen) = self.owner_of(s);
        let observed = self.observed_mark(s, seen);
        policy::mark_holds(
            &s.reaping,
            owner.as_ref(),
            seen,
            observed,
            self.stale_after(),
        )
    }

    /// How long this process has seen the mark on `s` unchanged, when that is what decides (its
    /// owner cannot be checked from here).
    fn observed_mark(&self, s: &Session, seen: OwnerSeen) -> Option<i64> {
        if seen != OwnerSeen::Unknowable || !s.is_marked() {
            return None;
        }
        let key = lease_clock::mark_key(&s.id, &s.reaping, &s.reaper);
        Some(self.observe(key))
    }

    fn observe(&self, key: String) -> i64 {
        self.observer.lock().observed(&self.state, key)
    }

    /// A sweep is over: what it did not see again is forgotten, and the rest kept in the state
    /// dir for a later run (not in a dry run).
    pub(crate) fn end_observation(&self) {
        self.observer
            .lock()
            .end_sweep(&self.state, self.me.1.pidns, self.persist);
    }

    fn owner_of(&self, s: &Session) -> (Option<MarkOwner>, OwnerSeen) {
        // Most sessions carry no mark: nothing to parse.
        if !s.is_marked() {
            return (None, OwnerSeen::Unknowable);
        }
        match s.opts.mark {
            policy::MarkState::At { owner: Some(o), .. } => {
                (Some(o), self.seen(&o, s.reaper.trim()))
            }
            _ => (None, OwnerSeen::Unknowable),
        }
    }

    /// What can be told of the owner `o` of a reap with `token`. Our own reap is alive only while
    /// it is under way here (its token held live); another's, as /proc tells, by identity.
    fn seen(&self, o: &MarkOwner, token: &str) -> OwnerSeen {
        let (me, here) = self.me;
        if (o.pid, o.start, o.pidns, o.timens) == (me.pid, me.start, here.pidns, Some(here.timens))
        {
            if self.live_tokens().contains(token) {
                OwnerSeen::Alive
            } else {
                OwnerSeen::Gone
            }
        } else {
            if here.pidns == 0 || here.timens == 0 {
                self.unseeable_said.call_once(|| {
                    tracing::warn!("/proc here does not show this process's own pid namespace (or its time namespace cannot be read): no reap mark's owner can be checked, so marks go stale only once this reaper has seen them for their owner's whole limit");
                });
            }
            identity::owner_seen(o, here)
        }
    }

    /// Whether the teardown a journal records is still under way ([`policy::journal_owner_live`]):
    /// its owner judged through the owner its token names (pid and time namespaces included),
    /// so a reaper in another namespace is never taken for dead by its pid or start time here.
    /// One whose owner cannot be checked is under way until this process has itself seen it for
    /// longer than the owner's limit (`observe`: a sweep; `turn begin` and `spawn` do not
    /// measure, and wait for a sweep to finish it). A journal of an earlier version (no owner in
    /// its token) goes by its `owner` pid, as before.
    pub(crate) fn journal_live(&self, j: &Journal, observe: bool) -> bool {
        match MarkOwner::from_token(&j.token) {
            Some(o) => {
                let seen = self.seen(&o, j.token.trim());
                let observed = (observe && seen == OwnerSeen::Unknowable)
                    .then(|| self.observe(lease_clock::journal_key(&j.id, &j.token)));
                policy::journal_owner_live(seen, observed, o.limit_ms)
            }
            None => procs::alive(j.owner),
        }
    }

    /// No tmux server listens: there is nothing to see, so nothing this reaper cannot see (a
    /// server caught exiting between its listing and the check is not a pid namespace apart).
    pub(crate) fn no_server(&self) {
        let mut last = self.blind.lock();
        if last.take().is_some() {
            tracing::debug!("no tmux server: the check of its processes is cleared");
        }
        self.metrics.set_blind(None);
    }

    /// Why the last look found that this process cannot see the tmux server's processes as they
    /// are, if it did ([`Ownership::check_server_identity`]).
    pub(crate) fn blind(&self) -> Option<String> {
        self.blind.lock().clone()
    }

    /// Whether this process sees the tmux server of `server_pid` (at `socket_path`, as tmux says)
    /// as it is: in its own pid namespace ([`identity::server_check`]). Said once on stderr when
    /// it changes, kept for `/healthz` and the metrics.
    ///
    /// A server listed up that has exited since (its last session reaped: its pid gone from
    /// /proc, or its socket closed, before this look) is not one this reaper cannot see: when
    /// nothing listens at its socket any more it is judged as no server ([`Ownership::no_server`])
    /// and the `Err` says it exited; nothing is signalled on the listing's word either way.
    pub(crate) fn check_server_identity(
        &self,
        server_pid: Option<u32>,
        socket_path: Option<&str>,
    ) -> Result<(), SightError> {
        let got = match (server_pid, socket_path) {
            (Some(p), Some(sp)) => identity::server_check(p, sp, self.me.1)
                .map_err(|e| SightError::Blind(e.to_string())),
            _ => Err(SightError::Unknown),
        };
        // Asked at the socket this reaper talks to, not at the path the server names for itself
        // (another mount namespace may see no file there while the server lives).
        if let (Err(why), Some(p)) = (&got, server_pid) {
            if identity::nothing_listens(&self.socket) {
                self.no_server();
                let why = SightError::Exited {
                    pid: p,
                    socket: self.socket.clone(),
                    why: why.to_string(),
                };
                tracing::debug!(why = %why, "the tmux server exited: judged as no server, not as one this reaper cannot see");
                return Err(why);
            }
        }
        let mut last = self.blind.lock();
        let now = got.as_ref().err().map(ToString::to_string);
        if *last != now {
            match &now {
                Some(why) => tracing::error!(
                    "this reaper cannot see the tmux server's processes as they are: nothing will be signalled, no memory measured: {why}"
                ),
                None if last.is_some() => {
                    tracing::warn!("this reaper sees the tmux server's processes again")
                }
                None => {}
            }
            *last = now.clone();
        }
        self.metrics.set_blind(now);
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::context::Reaper;

    fn reaper() -> Arc<Reaper> {
        reaper_at("/nonexistent/ccs-reap-test/s")
    }

    fn reaper_at(socket: &str) -> Arc<Reaper> {
        let vars = [
            ("CCS_TMUX_SOCKET_PATH", socket),
            ("CCS_REAP_STATE_DIR", "/nonexistent/ccs-reap-test/state"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        Reaper::new(Config::from_vars(vars, None).unwrap(), true)
    }

    #[test]
    fn our_own_mark_holds_only_while_its_reap_is_under_way() {
        let reaper = reaper();
        let r = &reaper.ownership;
        let limit = r.stale_after();
        let tok = r.mark_owner().token("1x2");
        let now = 10_000_000_000;
        let s = |age: i64| {
            Session {
                id: "1".into(),
                reaping: (now - age).to_string(),
                reaper: tok.clone(),
                ..Session::default()
            }
            .parsed()
        };
        {
            let _live = r.hold_token(&tok);
            // Under way: held, however old.
            assert!(r.mark_holds(&s(limit * 10)));
            assert!(!r.mark_is_stale(&s(limit * 10)));
        }
        // Left behind (a failed kill-session, a bug): a provably gone owner's mark, stale at once.
        assert!(!r.mark_holds(&s(0)));
        assert!(r.mark_is_stale(&s(0)));
        // Another live process's mark (our parent, surely alive): never stale.
        let here = identity::here();
        let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get());
        let start = procfs::process::Process::new(parent)
            .and_then(|p| p.stat())
            .map(|st| st.starttime)
            .unwrap();
        let owner = MarkOwner {
            pid: parent,
            start,
            pidns: here.pidns,
            timens: Some(here.timens),
            limit_ms: 1,
        };
        let theirs = Session {
            id: "2".into(),
            reaping: "1".into(),
            reaper: owner.token("9"),
            ..Session::default()
        }
        .parsed();
        assert!(r.mark_holds(&theirs));
        assert!(!r.mark_is_stale(&theirs));
        // One in another time namespace (or another pid namespace): not checkable, so held until
        // this process has itself seen it for longer than its limit (1 ms here), however old.
        for other in [
            MarkOwner {
                timens: Some(here.timens + 1),
                ..owner
            },
            MarkOwner {
                pidns: here.pidns + 1,
                limit_ms: 50,
                ..owner
            },
        ] {
            let far = Session {
                id: "3".into(),
                reaping: "1".into(),
                reaper: other.token("7"),
                ..Session::default()
            }
            .parsed();
            assert!(r.mark_holds(&far), "first sight: {other:?}");
            std::thread::sleep(std::time::Duration::from_millis(other.limit_ms as u64 + 20));
            assert!(r.mark_is_stale(&far), "seen past its limit: {other:?}");
        }
    }

    /// Issue 43's race: the sweep lists the server up, the server exits with its last reaped
    /// chat, then the sweep checks its sight. The check fails, but nothing listens at the socket
    /// any more: no server, not a reaper that cannot see it (`/healthz` stays 200). A server that
    /// still listens (here: ours) at a pid that does not hold it is still one it cannot see.
    #[test]
    fn a_server_that_exited_since_its_listing_is_no_server_not_blindness() {
        let dir = std::env::temp_dir().join(format!("ccs-exited-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("studio");
        let sp = sock.to_str().unwrap();
        let reaper = reaper_at(sp);
        let r = &reaper.ownership;
        // The pid of a process that has exited (and been waited for).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        // Still listening, at a pid that does not hold it: blind, and said so.
        // The server names a path for itself that this reaper does not see: not what is asked.
        let elsewhere = "/nonexistent/as-the-server-sees-it/s";
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(r
            .check_server_identity(Some(gone), Some(elsewhere))
            .is_err());
        assert!(
            r.blind().is_some(),
            "a live server is not taken for gone by its own path"
        );
        assert!(r.check_server_identity(Some(gone), Some(sp)).is_err());
        assert!(r.blind().is_some());
        let blind_said = |h: Result<(), crate::adapters::metrics::Unhealthy>| {
            h.is_err_and(|e| e.to_string().contains("cannot see"))
        };
        assert!(blind_said(reaper.metrics.health()));
        // The server closed its socket on its way out (the file left behind): no server.
        drop(listener);
        let e = r
            .check_server_identity(Some(gone), Some(sp))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has exited since it was listed"), "{e}");
        assert_eq!(r.blind(), None);
        assert!(!blind_said(reaper.metrics.health()));
        // And with its socket file gone too.
        std::fs::remove_file(&sock).unwrap();
        assert!(r.check_server_identity(Some(gone), Some(sp)).is_err());
        assert_eq!(r.blind(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
