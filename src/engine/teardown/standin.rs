//! A recording stand-in for the teardown's two ports: a tmux server of a few sessions (their
//! marks set, cleared and fenced as the real server would), a process table of one process a
//! pane, answers scripted by [`Script`], and every call recorded in order ([`StandIn::calls`]).
//! Nothing is run and nothing is signalled.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use super::ports::{Blind, Panes, ProcPort, TmuxPort};
use crate::adapters::procs::{Ident, LateReport, StopReport, TableError, Victim, World};
use crate::adapters::tmux::{Fence, Kept, Listing, TmuxError};
use crate::core::policy::Session;
use crate::core::policy::TmuxId;

/// The tmux server's pid and socket as the stand-in lists them.
pub(super) const SERVER_PID: u32 = 4_100_000;
const SOCKET: &str = "/standin/tmux.sock";

/// What the stand-in answers otherwise than a healthy server and table would.
#[derive(Default, Clone)]
pub(super) struct Script {
    /// The test-and-set fails.
    pub mark_fails: bool,
    /// Between the re-check and the fence, another reaper takes the mark (its token, its time).
    pub mark_lost_before_fence: bool,
    /// A prompt arrives after the mark: `turn begin` takes the chat back before the fence.
    pub prompt_after_mark: bool,
    /// `kill-session` fails.
    pub kill_fails: bool,
    /// This pid survives the SIGKILL.
    pub survivor: Option<i32>,
    /// The call (its name in [`StandIn::calls`]) at which the stand-in panics, after letting
    /// `panic_after` such calls through.
    pub panic_at: Option<&'static str>,
    pub panic_after: usize,
}

pub(super) struct StandIn {
    script: Script,
    sessions: Mutex<BTreeMap<TmuxId, Session>>,
    calls: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

fn failed(cmd: &str) -> TmuxError {
    TmuxError::Failed {
        cmd: cmd.into(),
        stderr: "the stand-in was scripted to fail".into(),
    }
}

impl StandIn {
    pub fn new(sessions: Vec<Session>, script: Script) -> StandIn {
        StandIn {
            script,
            sessions: Mutex::new(sessions.into_iter().map(|s| (s.tmux_id, s)).collect()),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Every call made, in order: `<name> <what>`.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    /// The sessions still there that carry a reap mark.
    pub fn marked(&self) -> Vec<TmuxId> {
        lock(&self.sessions)
            .values()
            .filter(|s| s.is_marked())
            .map(|s| s.tmux_id)
            .collect()
    }

    /// The sessions still there.
    pub fn sessions(&self) -> Vec<TmuxId> {
        lock(&self.sessions).keys().copied().collect()
    }

    fn call(&self, name: &'static str, what: String) {
        let before = {
            let mut calls = lock(&self.calls);
            let before = calls
                .iter()
                .filter(|c| c.split(' ').next() == Some(name))
                .count();
            calls.push(format!("{name} {what}").trim_end().to_string());
            before
        };
        if self.script.panic_at == Some(name) && before == self.script.panic_after {
            panic!("the stand-in panics at {name}");
        }
    }

    fn listing(&self) -> Listing {
        let sessions: Vec<Session> = lock(&self.sessions)
            .values()
            .map(|s| s.clone().parsed())
            .collect();
        Listing {
            all_panes: sessions
                .iter()
                .flat_map(|s| s.panes.iter().map(|p| (s.tmux_id, p.pid)))
                .collect(),
            sessions,
            server_pid: Some(SERVER_PID),
            socket_path: Some(SOCKET.into()),
            server_up: Some(true),
            ..Listing::default()
        }
    }
}

fn ns(ns: impl IntoIterator<Item = TmuxId>) -> String {
    ns.into_iter()
        .map(|n| format!("{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl TmuxPort for StandIn {
    async fn mark_reaping(
        &self,
        items: &[(TmuxId, bool, bool)],
        mark_at: i64,
        token: &str,
        _panes: &Panes,
    ) -> Result<(), TmuxError> {
        self.call("mark", ns(items.iter().map(|i| i.0)));
        if self.script.mark_fails {
            return Err(failed("mark"));
        }
        for (n, ..) in items {
            if let Some(s) = lock(&self.sessions).get_mut(n) {
                if !s.is_marked() {
                    s.reaping = mark_at.to_string();
                    s.reaper = token.to_string();
                }
            }
        }
        Ok(())
    }

    async fn clear_reaping_many(&self, ns_: &[TmuxId], token: &str) -> Result<(), TmuxError> {
        self.call("clear", ns(ns_.iter().copied()));
        for n in ns_ {
            if let Some(s) = lock(&self.sessions).get_mut(n) {
                if s.holds_mark_of(token) {
                    s.reaping.clear();
                    s.reaper.clear();
                }
            }
        }
        Ok(())
    }

    async fn list(&self, _prefix: &str) -> Result<Listing, TmuxError> {
        self.call("list", String::new());
        Ok(self.listing())
    }

    async fn kept(&self, ns_: &[TmuxId]) -> HashMap<TmuxId, Kept> {
        self.call("kept", ns(ns_.iter().copied()));
        HashMap::new()
    }

    async fn fence(
        &self,
        ns_: &[(TmuxId, &str, bool)],
        mark_at: i64,
        token: &str,
        _panes: &Panes,
    ) -> Result<Fence, TmuxError> {
        self.call("fence", ns(ns_.iter().map(|n| n.0)));
        let mut fence = Fence {
            held: Default::default(),
            taken_back: Default::default(),
        };
        let mut sessions = lock(&self.sessions);
        for (n, name, _) in ns_ {
            let Some(s) = sessions.get_mut(n) else {
                continue;
            };
            if self.script.mark_lost_before_fence {
                s.reaping = (mark_at + 1).to_string();
                s.reaper = "another-reaper".into();
            }
            if self.script.prompt_after_mark {
                // `turn begin` clears the mark and starts the turn: the chat is taken back.
                s.reaping.clear();
                s.reaper.clear();
                s.turn = "1".into();
                fence.taken_back.insert(*n);
                continue;
            }
            if s.holds_mark_of(token) && s.reaping == mark_at.to_string() && s.name == *name {
                fence.held.insert(*n);
            }
        }
        Ok(fence)
    }

    async fn kill_sessions_left(
        &self,
        ns_: &[TmuxId],
        token: &str,
        _panes: &Panes,
    ) -> Result<Option<usize>, TmuxError> {
        self.call("kill-session", ns(ns_.iter().copied()));
        if self.script.kill_fails {
            return Err(failed("kill-session"));
        }
        let mut sessions = lock(&self.sessions);
        for n in ns_ {
            if sessions.get(n).is_some_and(|s| s.holds_mark_of(token)) {
                sessions.remove(n);
            }
        }
        Ok(Some(sessions.len()))
    }
}

/// A pane's process as the stand-in's table has it.
fn ident(pid: u32) -> Ident {
    Ident {
        pid: pid as i32,
        start: 7,
    }
}

impl ProcPort for StandIn {
    fn server_identity(
        &self,
        _server_pid: Option<u32>,
        _socket_path: Option<&str>,
    ) -> Result<(), Blind> {
        Ok(())
    }

    fn members(
        &self,
        sessions: &[&Session],
        _listing: &Listing,
    ) -> Result<HashMap<TmuxId, Vec<Ident>>, TableError> {
        self.call("members", ns(sessions.iter().map(|s| s.tmux_id)));
        Ok(sessions
            .iter()
            .map(|s| (s.tmux_id, s.panes.iter().map(|p| ident(p.pid)).collect()))
            .collect())
    }

    fn pin(&self, ids: &[Ident]) -> Vec<Victim> {
        ids.iter().copied().map(Victim::unpinned).collect()
    }

    fn memory(
        &self,
        groups: Vec<Vec<Ident>>,
    ) -> impl Future<Output = Option<Vec<(u64, Option<u64>)>>> + Send + 'static {
        self.call("memory", String::new());
        let mem = groups
            .iter()
            .map(|g| (g.len() as u64) << 20)
            .map(|b| (b, Some(b / 2)));
        std::future::ready(Some(mem.collect()))
    }

    async fn stop_many<F: FnMut(usize, &StopReport) + Send>(
        &self,
        groups: &[&[Victim]],
        _grace: Duration,
        mut done: F,
    ) -> Vec<StopReport> {
        let pids: Vec<String> = groups
            .iter()
            .flat_map(|g| g.iter().map(|v| v.id.pid.to_string()))
            .collect();
        self.call("stop", pids.join(","));
        let mut reports = Vec::new();
        for (g, victims) in groups.iter().enumerate() {
            let stubborn = victims
                .iter()
                .filter(|v| Some(v.id.pid) == self.script.survivor)
                .count();
            let rep = StopReport {
                term: victims.len(),
                kill: stubborn,
                survivors: Vec::new(),
                took: Duration::ZERO,
            };
            done(g, &rep);
            reports.push(rep);
            // Each group ends on its own: the finishing sees them one wave each.
            tokio::task::yield_now().await;
        }
        reports
    }

    async fn end_late(
        &self,
        chats: &[(TmuxId, Vec<Ident>)],
        _world: &World,
    ) -> Result<HashMap<TmuxId, LateReport>, TableError> {
        self.call("late", ns(chats.iter().map(|c| c.0)));
        Ok(chats.iter().map(|c| (c.0, LateReport::default())).collect())
    }

    fn alive(&self, id: Ident) -> bool {
        Some(id.pid) == self.script.survivor
    }
}
