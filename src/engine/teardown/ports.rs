//! The teardown's two ports: the tmux calls it makes ([`TmuxPort`]) and what it asks of the
//! process table ([`ProcPort`]), no more. The real adapters implement them ([`Tmux`], [`Host`]);
//! the teardown's unit tests run it against a recording stand-in (`standin.rs`) that scripts
//! their answers and records every call.

use crate::core::policy::TmuxId;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use crate::adapters::procs::{self, Ident, LateReport, StopReport, TableError, Victim, World};
use crate::adapters::tmux::{Fence, Kept, Listing, Tmux, TmuxError};
use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::Session;
use crate::engine::ownership::Ownership;

/// The reaps of a batch that take only their chat's pane: session number to that pane.
pub(crate) type Panes = HashMap<TmuxId, PaneRecord>;

/// Why this reaper cannot see the tmux server's processes as they are (what the check found).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Blind(pub String);

/// The tmux calls of a teardown.
pub(crate) trait TmuxPort: Sync {
    /// The test-and-set of `@ccs_reaping` on `items` (`(n, check the turn, check the viewers)`).
    /// `panes`: the reaps that take only their chat's pane, by session number, and that pane.
    fn mark_reaping(
        &self,
        items: &[(TmuxId, bool, bool)],
        mark_at: i64,
        token: &str,
        panes: &Panes,
    ) -> impl Future<Output = Result<(), TmuxError>> + Send;
    /// Clear the marks of `ns` that still carry `token` (checked in the server).
    fn clear_reaping_many(
        &self,
        ns: &[TmuxId],
        token: &str,
    ) -> impl Future<Output = Result<(), TmuxError>> + Send;
    /// The listing of the sessions under `prefix` (the re-check's, and a large wave's).
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Listing, TmuxError>> + Send;
    /// What the journals keep of each session (`@ccs_argv`, environment, options).
    fn kept(&self, ns: &[TmuxId]) -> impl Future<Output = HashMap<TmuxId, Kept>> + Send;
    /// The fence: which of `ns` (`(n, name, check the viewers)`) still carry exactly our mark.
    fn fence(
        &self,
        ns: &[(TmuxId, &str, bool)],
        mark_at: i64,
        token: &str,
        panes: &Panes,
    ) -> impl Future<Output = Result<Fence, TmuxError>> + Send;
    /// `kill-session` for each of `ns` still carrying `token` (`kill-pane` of the chat's pane
    /// alone, for those in `panes`); how many sessions are left.
    fn kill_sessions_left(
        &self,
        ns: &[TmuxId],
        token: &str,
        panes: &Panes,
    ) -> impl Future<Output = Result<Option<usize>, TmuxError>> + Send;
}

impl TmuxPort for Tmux {
    async fn mark_reaping(
        &self,
        items: &[(TmuxId, bool, bool)],
        mark_at: i64,
        token: &str,
        panes: &Panes,
    ) -> Result<(), TmuxError> {
        Tmux::mark_reaping(self, items, mark_at, token, panes).await
    }

    async fn clear_reaping_many(&self, ns: &[TmuxId], token: &str) -> Result<(), TmuxError> {
        Tmux::clear_reaping_many(self, ns, token).await
    }

    async fn list(&self, prefix: &str) -> Result<Listing, TmuxError> {
        Tmux::list(self, prefix, procs::exit_collected).await
    }

    async fn kept(&self, ns: &[TmuxId]) -> HashMap<TmuxId, Kept> {
        Tmux::kept(self, ns).await
    }

    async fn fence(
        &self,
        ns: &[(TmuxId, &str, bool)],
        mark_at: i64,
        token: &str,
        panes: &Panes,
    ) -> Result<Fence, TmuxError> {
        Tmux::fence(self, ns, mark_at, token, panes).await
    }

    async fn kill_sessions_left(
        &self,
        ns: &[TmuxId],
        token: &str,
        panes: &Panes,
    ) -> Result<Option<usize>, TmuxError> {
        Tmux::kill_sessions_left(self, ns, token, panes).await
    }
}

/// What a teardown asks of the process table.
pub(crate) trait ProcPort: Sync {
    /// Whether this reaper sees the tmux server's processes as they are (why not, if not).
    fn server_identity(
        &self,
        server_pid: Option<u32>,
        socket_path: Option<&str>,
    ) -> Result<(), Blind>;
    /// Every process of each of `sessions` (their session numbers to their members), from one
    /// scan of the table.
    fn members(
        &self,
        sessions: &[&Session],
        listing: &Listing,
    ) -> Result<HashMap<TmuxId, Vec<Ident>>, TableError>;
    /// Pin each identity for signalling (what cannot be pinned is left out).
    fn pin(&self, ids: &[Ident]) -> Vec<Victim>;
    /// The memory of each group (RSS, PSS), read off the teardown's path: started at once.
    fn memory(
        &self,
        groups: Vec<Vec<Ident>>,
    ) -> impl Future<Output = Option<Vec<(u64, Option<u64>)>>> + Send + 'static;
    /// SIGTERM, the grace, SIGKILL, for every group together; `done(g, report)` once a group
    /// is over.
    fn stop_many<F: FnMut(usize, &StopReport) + Send>(
        &self,
        groups: &[&[Victim]],
        grace: Duration,
        done: F,
    ) -> impl Future<Output = Vec<StopReport>> + Send;
    /// End what the chats (`(n, victims)`) started after their victims were collected.
    fn end_late(
        &self,
        chats: &[(TmuxId, Vec<Ident>)],
        world: &World,
    ) -> impl Future<Output = Result<HashMap<TmuxId, LateReport>, TableError>> + Send;
    /// Whether `id` still lives (the same process).
    fn alive(&self, id: Ident) -> bool;
}

/// The real process table, as this reaper sees it (`ownership` tells whether it does).
pub(crate) struct Host<'a> {
    pub ownership: &'a Ownership,
}

impl ProcPort for Host<'_> {
    fn server_identity(
        &self,
        server_pid: Option<u32>,
        socket_path: Option<&str>,
    ) -> Result<(), Blind> {
        self.ownership
            .check_server_identity(server_pid, socket_path)
            .map_err(|e| Blind(e.to_string()))
    }

    fn members(
        &self,
        sessions: &[&Session],
        listing: &Listing,
    ) -> Result<HashMap<TmuxId, Vec<Ident>>, TableError> {
        let table = procs::table()?;
        Ok(procs::members_of(&table, sessions.iter().copied(), listing))
    }

    fn pin(&self, ids: &[Ident]) -> Vec<Victim> {
        procs::pin(ids)
    }

    fn memory(
        &self,
        groups: Vec<Vec<Ident>>,
    ) -> impl Future<Output = Option<Vec<(u64, Option<u64>)>>> + Send + 'static {
        let read = tokio::task::spawn_blocking(move || procs::memory_many(&groups));
        async move {
            read.await
                .map_err(|e| tracing::warn!(error = %e, "the victims' memory could not be read"))
                .ok()
        }
    }

    async fn stop_many<F: FnMut(usize, &StopReport) + Send>(
        &self,
        groups: &[&[Victim]],
        grace: Duration,
        done: F,
    ) -> Vec<StopReport> {
        procs::stop_many(groups, grace, done).await
    }

    async fn end_late(
        &self,
        chats: &[(TmuxId, Vec<Ident>)],
        world: &World,
    ) -> Result<HashMap<TmuxId, LateReport>, TableError> {
        procs::end_late(chats, world).await
    }

    fn alive(&self, id: Ident) -> bool {
        procs::alive(id)
    }
}
