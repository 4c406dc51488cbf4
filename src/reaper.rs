//! The sweep and the teardown: snapshot -> decide -> carry out -> audit.
//!
//! A sweep reads the server in one tmux call, reads the activity files, asks the pure core what to
//! do, writes the idle stamps in batches, and starts the reaps (at most [`MAX_CONCURRENT_REAPS`] at a
//! time, never two of one session). A reap marks the session with an atomic test-and-set in the
//! tmux server, re-checks on fresh data, stops the whole process tree, writes the tombstone, kills
//! the session and appends one audit line.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::activity;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::{
    self, Action, Decision, HostMemory, Policy, ReapReason, Session, Snapshot, State,
};
use crate::procs;
use crate::state::{AuditLine, StateDir};
use crate::teardown;
use crate::tmux::{Listing, Tmux, TmuxError, TurnBegin};

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub(crate) fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// What one sweep saw and did.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub at: String,
    pub dry_run: bool,
    pub enabled: bool,
    /// A problem that kept every session (tmux failed, an activity file unreadable).
    pub error: Option<String>,
    pub sessions: Vec<SessionReport>,
    pub host: Option<HostMemory>,
    pub total_rss_bytes: u64,
    pub total_pss_bytes: Option<u64>,
    /// The reaps this sweep carried out (with `--once`; the daemon logs them as they finish).
    pub reaps: Vec<AuditLine>,
    pub took_ms: u64,
}

/// One session in a report (`status`, `--once --json`).
#[derive(Debug, Clone, Serialize)]
pub struct SessionReport {
    #[serde(flatten)]
    pub decision: Decision,
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
}

/// How much a sweep should look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Decide, write stamps, reap (unless dry run).
    Act,
    /// `status`: decide and measure everything, write nothing.
    Status,
}

/// Sessions whose reap is in flight, taken out of the set when this drops (on every path).
struct Inflight {
    r: Arc<Reaper>,
    ns: Vec<u32>,
}

impl Drop for Inflight {
    fn drop(&mut self) {
        let mut set = self.r.inflight();
        for n in &self.ns {
            set.remove(n);
        }
    }
}

pub struct Reaper {
    pub cfg: Config,
    pub tmux: Tmux,
    pub state: StateDir,
    pub dry_run: bool,
    inflight: Mutex<HashSet<u32>>,
    pub metrics: Metrics,
}

/// The failure of a one-session command (`reap <id>`), for exit codes.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("{0}")]
    Tmux(#[from] TmuxError),
    #[error("{0}")]
    State(#[from] crate::state::StateError),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Gone(String),
    /// `reap --dry-run`: it would have been reaped.
    #[error("{0}")]
    WouldReap(String),
}

impl Reaper {
    pub fn new(cfg: Config, dry_run: bool) -> Arc<Reaper> {
        let tmux = Tmux::new(cfg.socket.clone(), cfg.tmux_timeout);
        let state = StateDir::new(
            cfg.state_dir.clone(),
            &cfg.socket.studio_key(&cfg.prefix),
            &cfg.socket.label(),
            &cfg.prefix,
        );
        Arc::new(Reaper {
            cfg,
            tmux,
            state,
            dry_run,
            inflight: Mutex::new(HashSet::new()),
            metrics: Metrics::default(),
        })
    }

    /// Read the activity files on a detached thread, within the tmux timeout: a file on a stalled
    /// mount must stall neither the sweep nor the shutdown (the thread is abandoned, not joined).
    /// A FIFO, a device, a directory or an oversized file is refused without blocking. Not read in
    /// time, or refused = liveness unknown.
    pub(crate) async fn read_activity(&self) -> Result<HashSet<String>, String> {
        if self.cfg.activity_files.is_empty() {
            return Ok(HashSet::new());
        }
        activity::read_all_detached(self.cfg.activity_files.clone(), self.cfg.tmux_timeout).await
    }

    fn inflight_count(&self) -> usize {
        self.inflight().len()
    }

    fn inflight(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Read tmux, the activity files and (where needed) /proc into a snapshot.
    async fn snapshot(&self, measure: bool) -> (Snapshot, Listing) {
        let mut snap = Snapshot::default();
        let listing = match self.tmux.list(&self.cfg.prefix).await {
            Ok(l) => l,
            Err(e) => {
                self.metrics.tmux_errors.inc();
                tracing::warn!(error = %e, "tmux did not give a snapshot: keeping every session this sweep");
                snap.global_problem = Some(e.to_string());
                return (snap, Listing::default());
            }
        };
        if !listing.problems.is_empty() {
            let why = listing.problems.join("; ");
            tracing::warn!(problems = %why, "tmux rows did not parse: keeping every session this sweep");
            snap.global_problem = Some(why);
        }
        match self.read_activity().await {
            Ok(busy) => snap.busy_ids = busy,
            Err(e) => {
                tracing::warn!(error = %e, "activity file unreadable: keeping every session this sweep");
                snap.global_problem.get_or_insert(e);
            }
        }
        snap.sessions = listing.sessions.clone();
        let p = &self.cfg.policy;
        if p.orphan_viewers == policy::OrphanViewers::Ignore || measure {
            for s in &mut snap.sessions {
                for c in &mut s.clients {
                    c.orphaned = procs::orphaned(c.pid);
                }
            }
        }
        if measure || p.mem_high.is_some() || self.cfg.metrics_addr.is_some() {
            self.measure(&mut snap, &listing);
            snap.host = procs::host_memory();
        }
        (snap, listing)
    }

    /// Memory of every session's process tree (the same set a teardown would stop).
    fn measure(&self, snap: &mut Snapshot, listing: &Listing) {
        let Ok(table) = procs::table() else { return };
        let prot = procs::protected(&table, listing.server_pid);
        let keys: Vec<(u32, Vec<u32>)> = snap
            .sessions
            .iter()
            .map(|s| {
                (
                    s.tmux_id,
                    s.panes.iter().filter(|p| !p.dead).map(|p| p.pid).collect(),
                )
            })
            .collect();
        let env = match (&listing.socket_path, listing.server_pid) {
            (Some(sp), Some(pid)) => Some((sp.as_str(), pid)),
            _ => None,
        };
        let members = procs::members(
            &table,
            &keys,
            &listing.all_panes,
            env,
            rustix::process::getuid().as_raw(),
            &prot,
        );
        for s in &mut snap.sessions {
            let ids = members.get(&s.tmux_id).map(Vec::as_slice).unwrap_or(&[]);
            let (rss, pss) = procs::memory(ids);
            s.mem_bytes = Some(pss.unwrap_or(rss));
            s.mem_rss = Some(rss);
            s.mem_pss = pss;
        }
    }

    /// Look for conversation ids on the `claude` command lines of sessions that need one.
    fn find_cids(&self, snap: &mut Snapshot, want: &HashSet<u32>) {
        if want.is_empty() {
            return;
        }
        let Ok(table) = procs::table() else { return };
        let mut children: std::collections::HashMap<i32, Vec<i32>> =
            std::collections::HashMap::new();
        for p in &table {
            children.entry(p.ppid).or_default().push(p.pid);
        }
        for s in snap
            .sessions
            .iter_mut()
            .filter(|s| want.contains(&s.tmux_id))
        {
            // tmux's own record of the command each pane was started with comes first (it is
            // all there is for a dead pane); then the live processes below the panes.
            if let Some(c) = s
                .panes
                .iter()
                .find_map(|p| policy::cid_from_argv(&[&p.start_command]))
            {
                s.cmdline_cid = Some(c);
                continue;
            }
            // Breadth first, and never below a claude: a claude that the chat's claude started
            // (a sub-agent, a tool) names another conversation, which must not be taken for
            // the chat's. A first claude without an id leaves the chat's cid unknown.
            let mut queue: std::collections::VecDeque<i32> = s
                .panes
                .iter()
                .filter(|p| !p.dead)
                .map(|p| p.pid as i32)
                .collect();
            let mut seen = HashSet::new();
            while let Some(pid) = queue.pop_front() {
                if !seen.insert(pid) {
                    continue;
                }
                if let Some(argv) = procs::cmdline(pid) {
                    let cid = policy::cid_from_argv(&argv);
                    if cid.is_some() {
                        s.cmdline_cid = cid;
                        break;
                    }
                    if policy::is_claude_process(&argv) {
                        continue;
                    }
                }
                queue.extend(children.get(&pid).into_iter().flatten());
            }
        }
    }

    /// Snapshot and decide, looking up conversation ids where the decision hinges on one.
    async fn observe(&self, mode: Mode) -> (Snapshot, Listing, Vec<Decision>, i64) {
        let now = now_ms();
        let (mut snap, listing) = self.snapshot(mode == Mode::Status).await;
        let mut decisions = policy::decide(&snap, now, &self.cfg.policy);
        let want: HashSet<u32> = decisions
            .iter()
            .zip(&snap.sessions)
            .filter(|(d, s)| {
                !policy::valid_cid(s.cid.trim())
                    && (mode == Mode::Status
                        || matches!(d.state, State::NoCid | State::Stuck | State::Exited))
            })
            .map(|(d, _)| d.tmux_id)
            .collect();
        if !want.is_empty() {
            self.find_cids(&mut snap, &want);
            decisions = policy::decide(&snap, now, &self.cfg.policy);
        }
        (snap, listing, decisions, now)
    }

    /// A `@ccs_reaping` mark older than this was left by a reaper that died mid-teardown: the
    /// next sweep clears it and decides the session afresh. A live teardown takes at most the
    /// grace, two seconds for the kills to land, and a few tmux calls.
    fn stale_after(&self) -> i64 {
        (self.cfg.grace.as_millis() as i64) * 3
            + (self.cfg.tmux_timeout.as_millis() as i64) * 3
            + 2000
    }

    /// One sweep. With `wait`, reaps are awaited and returned in the report; without, they run on
    /// in the background (the daemon) and are logged as they finish.
    pub async fn sweep(self: &Arc<Self>, wait: bool) -> SweepReport {
        let t0 = Instant::now();
        let (mut snap, mut listing, mut decisions, mut now) = self.observe(Mode::Act).await;
        let enabled = self.cfg.policy.enabled();

        // Panes that are dead but whose exit status tmux has not collected (a missed SIGCHLD
        // leaves them so until another child of the server exits): make it collect, look again.
        if !self.dry_run && snap.sessions.iter().any(waiting_for_exit_status) {
            match self.tmux.collect_exits().await {
                Ok(()) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    (snap, listing, decisions, now) = self.observe(Mode::Act).await;
                }
                Err(e) => {
                    self.metrics.tmux_errors.inc();
                    tracing::warn!(error = %e, "failed to make tmux collect the exit status of dead panes");
                }
            }
        }

        // Finish teardowns and clear stale reaping marks left by a reaper that died mid-way.
        // Chats whose teardown a live reaper (another process, perhaps stalled) is running: its
        // mark is not stale, however old, and the session is not ours to start on.
        // Journals whose owner is gone are a dead reaper's: finished below.
        let (live, dead): (Vec<_>, Vec<_>) = self
            .state
            .journals()
            .into_iter()
            .filter_map(|j| {
                j.map_err(|e| tracing::warn!(error = %e, "unreadable reap journal left alone"))
                    .ok()
            })
            .partition(|j| procs::alive(j.owner));
        let live: HashSet<String> = live.into_iter().map(|j| j.id).collect();
        let mut reaps = Vec::new();
        if !self.dry_run {
            reaps = teardown::recover(self, &listing, dead).await;
            let stale: Vec<(u32, String)> = snap
                .sessions
                .iter()
                .filter(|s| {
                    // A mark that does not parse is stale too: it would block the session forever.
                    let stale = match policy::parse_ms(&s.reaping) {
                        Some(at) => now - at > self.stale_after(),
                        None => !s.reaping.trim().is_empty(),
                    };
                    stale && !self.inflight().contains(&s.tmux_id) && !live.contains(&s.id)
                })
                .map(|s| (s.tmux_id, s.reaping.clone()))
                .collect();
            for (n, v) in stale {
                tracing::warn!(tmux_id = %format!("${n}"), reaping = %v, "clearing a stale reap mark (a reaper stopped mid-teardown)");
                if let Err(e) = self.tmux.clear_stale_reaping(n, &v).await {
                    tracing::warn!(tmux_id = %format!("${n}"), error = %e, "failed to clear a stale reap mark");
                }
            }
        }

        // Idle stamps, batched.
        let stamps: Vec<(u32, &str, Option<String>)> = decisions
            .iter()
            .filter_map(|d| {
                d.stamp_idle
                    .map(|t| (d.tmux_id, "@ccs_idle", Some(t.to_string())))
            })
            .collect();
        if !self.dry_run && !stamps.is_empty() {
            if let Err(e) = self.tmux.set_options(&stamps).await {
                self.metrics.tmux_errors.inc();
                tracing::warn!(error = %e, count = stamps.len(), "failed to write idle stamps");
            }
        }

        for d in &decisions {
            tracing::debug!(session = %d.name, tmux_id = %format!("${}", d.tmux_id), decision = ?d.action, state = d.state.as_str(), reason = %d.why, idle_ms = ?d.idle_ms, "decided");
        }

        let mut reqs = Vec::new();
        if enabled {
            for (d, s) in decisions.iter().zip(&snap.sessions) {
                if d.action != Action::Reap {
                    continue;
                }
                let Some(reason) = d.reap_reason else {
                    continue;
                };
                if self.dry_run {
                    tracing::info!(session = %d.name, tmux_id = %format!("${}", d.tmux_id), reason = reason.as_str(), idle_ms = ?d.idle_ms, "would reap (dry run)");
                    continue;
                }
                // Another reaper (a manual `reap`) holds it: not ours to start. A stale mark was
                // cleared above, and the test-and-set decides.
                let held = live.contains(&s.id)
                    || policy::parse_ms(&s.reaping)
                        .is_some_and(|at| now - at <= self.stale_after());
                if held {
                    tracing::debug!(session = %d.name, "another reap holds this session");
                    continue;
                }
                if !self.inflight().insert(d.tmux_id) {
                    continue;
                }
                reqs.push(teardown::Request {
                    decision: d.clone(),
                    session: s.clone(),
                    reason,
                    force: false,
                });
            }
        }

        // The sweep's reaps go as one batch (see `teardown`), in a task of its own: the daemon
        // sweeps on while a slow teardown runs. The guard takes the sessions out of the in-flight
        // set on every path, a panic included; a batch that panicked is reported as failed.
        if !reqs.is_empty() {
            let guard = Inflight {
                r: Arc::clone(self),
                ns: reqs.iter().map(|q| q.decision.tmux_id).collect(),
            };
            let me = Arc::clone(self);
            let asked = reqs.clone();
            let task = tokio::spawn(async move {
                let _guard = guard;
                teardown::reap(&me, reqs).await
            });
            let me = Arc::clone(self);
            let done = async move {
                match task.await {
                    Ok(lines) => lines,
                    Err(e) => {
                        tracing::error!(error = %e, reaps = asked.len(), "a reap task failed");
                        asked
                            .iter()
                            .map(|q| {
                                let d = &q.decision;
                                let mut l = AuditLine::begin(
                                    rfc3339(now_ms()),
                                    &d.name,
                                    &d.id,
                                    d.tmux_id,
                                    d.cid.clone(),
                                    q.reason.as_str(),
                                    d.idle_ms,
                                );
                                l.outcome = "failed".into();
                                l.error = Some(format!("the reap task failed: {e}"));
                                teardown::finish(&me, l, Instant::now())
                            })
                            .collect()
                    }
                }
            };
            if wait {
                reaps.extend(done.await);
            } else {
                tokio::spawn(done);
            }
        }

        let report = self.report(&snap, decisions, now, reaps, t0);
        self.metrics.record_sweep(&report);
        report
    }

    /// `status`: decide and measure everything, write nothing.
    pub async fn status(self: &Arc<Self>) -> SweepReport {
        let t0 = Instant::now();
        let (snap, _l, decisions, now) = self.observe(Mode::Status).await;
        self.report(&snap, decisions, now, Vec::new(), t0)
    }

    fn report(
        &self,
        snap: &Snapshot,
        decisions: Vec<Decision>,
        now: i64,
        reaps: Vec<AuditLine>,
        t0: Instant,
    ) -> SweepReport {
        let mut sessions: Vec<SessionReport> = decisions
            .into_iter()
            .zip(&snap.sessions)
            .map(|(d, s)| SessionReport {
                tmux_target: s.tmux_target(),
                turn: (!s.turn.is_empty()).then(|| s.turn.clone()),
                rss_bytes: s.mem_rss,
                pss_bytes: s.mem_pss,
                viewer_list: s
                    .clients
                    .iter()
                    .map(|c| ViewerReport {
                        pid: c.pid,
                        control_mode: c.control_mode,
                        attached_ms: now.saturating_sub(c.created_ms).max(0) as u64,
                        idle_ms: now.saturating_sub(c.activity_ms).max(0) as u64,
                        orphaned: c.orphaned,
                    })
                    .collect(),
                decision: d,
            })
            .collect();
        // The biggest idle sessions first, then the rest by size.
        sessions.sort_by_key(|r| {
            let idle = matches!(
                r.decision.state,
                State::Idle | State::Expired | State::NoCid | State::Exited
            );
            (
                !idle,
                std::cmp::Reverse(r.pss_bytes.or(r.rss_bytes).unwrap_or(0)),
                r.decision.tmux_id,
            )
        });
        let total_rss_bytes = sessions.iter().filter_map(|s| s.rss_bytes).sum();
        let total_pss_bytes = if sessions.iter().all(|s| s.pss_bytes.is_some()) {
            Some(sessions.iter().filter_map(|s| s.pss_bytes).sum())
        } else {
            None
        };
        SweepReport {
            at: rfc3339(now),
            dry_run: self.dry_run,
            enabled: self.cfg.policy.enabled(),
            error: snap.global_problem.clone(),
            sessions,
            host: snap.host,
            total_rss_bytes,
            total_pss_bytes,
            reaps,
            took_ms: t0.elapsed().as_millis() as u64,
        }
    }

    /// Reap one session now (a batch of one). Returns the audit line it wrote (or tried to).
    pub async fn reap(
        &self,
        d: &Decision,
        s: &Session,
        reason: ReapReason,
        force: bool,
    ) -> AuditLine {
        let req = teardown::Request {
            decision: d.clone(),
            session: s.clone(),
            reason,
            force,
        };
        let mut lines = teardown::reap(self, vec![req]).await;
        lines.pop().unwrap_or_else(|| {
            AuditLine::begin(
                rfc3339(now_ms()),
                &d.name,
                &d.id,
                d.tmux_id,
                d.cid.clone(),
                reason.as_str(),
                d.idle_ms,
            )
        })
    }

    /// The socket's path as the tombstones record it.
    pub(crate) fn socket_path(&self) -> String {
        self.cfg
            .socket
            .canonical_path()
            .to_string_lossy()
            .into_owned()
    }

    pub(crate) fn is_inflight(&self, n: u32) -> bool {
        self.inflight().contains(&n)
    }

    /// `reap <id> [--force]`: one session now, whatever its idle age.
    pub async fn reap_now(
        self: &Arc<Self>,
        id: &str,
        force: bool,
    ) -> Result<AuditLine, CommandError> {
        let name = self.name_of(id)?;
        let (mut snap, _l, mut decisions, now) = self.observe(Mode::Act).await;
        // The sweep only looks for a cid where its decision hinges on one; here it always does.
        let want: HashSet<u32> = snap
            .sessions
            .iter()
            .filter(|s| {
                s.name == name && !policy::valid_cid(s.cid.trim()) && s.cmdline_cid.is_none()
            })
            .map(|s| s.tmux_id)
            .collect();
        if !want.is_empty() {
            self.find_cids(&mut snap, &want);
            decisions = policy::decide(&snap, now, &self.cfg.policy);
        }
        if let Some(e) = &snap.global_problem {
            if !force {
                return Err(CommandError::Refused(format!(
                    "refusing to reap {name}: liveness unknown: {e}"
                )));
            }
        }
        let Some((d, s)) = decisions
            .into_iter()
            .zip(snap.sessions)
            .find(|(_, s)| s.name == name)
        else {
            return Err(CommandError::Gone(format!("no session {name}")));
        };
        let reason = ReapReason::Manual;
        if let Err(why) = policy::still_reapable(&d, d.idle_ms, reason, force, &self.cfg.policy) {
            return Err(CommandError::Refused(format!(
                "refusing to reap {name} ({why}); --force overrides"
            )));
        }
        if self.dry_run {
            return Err(CommandError::WouldReap(format!(
                "dry run: would reap {name} ({})",
                d.why
            )));
        }
        if !self.inflight().insert(d.tmux_id) {
            return Err(CommandError::Refused(format!(
                "{name} is already being reaped"
            )));
        }
        let line = self.reap(&d, &s, reason, force).await;
        self.inflight().remove(&d.tmux_id);
        match line.outcome.as_str() {
            "reaped" => Ok(line),
            _ => Err(CommandError::Refused(format!(
                "reap of {name} {}: {}",
                line.outcome,
                line.error.clone().unwrap_or_default()
            ))),
        }
    }

    fn name_of(&self, id: &str) -> Result<String, CommandError> {
        if !policy::valid_id(id) {
            return Err(CommandError::Refused(format!(
                "invalid session id {id:?}: expected letters, digits, '_' and '-'"
            )));
        }
        Ok(format!("{}{id}", self.cfg.prefix))
    }

    /// How long `turn begin` and `spawn` wait for a reap in flight: past the point where a mark
    /// counts as stale, and one more sweep for the daemon to clear it.
    fn reap_wait(&self) -> Duration {
        Duration::from_millis(self.stale_after() as u64)
            + self.cfg.interval
            + Duration::from_secs(5)
    }

    /// `turn begin <id>`: `Ok(true)` the turn is marked; `Ok(false)` the session is gone or was
    /// reaped while we waited: respawn it.
    pub async fn turn_begin(&self, id: &str) -> Result<bool, CommandError> {
        let name = self.name_of(id)?;
        let deadline = Instant::now() + self.reap_wait();
        let mut logged = false;
        loop {
            match self.tmux.turn_begin(&name, now_ms()).await? {
                TurnBegin::Started => return Ok(true),
                TurnBegin::Gone => {
                    // Gone may mean "its pane died in a teardown that is still running".
                    self.wait_for_teardown(id, deadline).await?;
                    return Ok(false);
                }
                TurnBegin::Reaping => {
                    if !logged {
                        tracing::info!(session = %name, "a reap is in flight: waiting for it to finish");
                        logged = true;
                    }
                    if Instant::now() >= deadline {
                        return Err(CommandError::Refused(format!(
                            "{name} is still marked as being reaped after {:?}; the next sweep clears a stale mark",
                            self.reap_wait()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Wait while a live reaper's teardown of chat `id` is under way (its journal is there and
    /// its owner alive). When this returns, the old tree is gone and the tombstone written.
    async fn wait_for_teardown(&self, id: &str, deadline: Instant) -> Result<(), CommandError> {
        loop {
            let busy = self
                .state
                .journals()
                .into_iter()
                .flatten()
                .any(|j| j.id == id && procs::alive(j.owner));
            if !busy {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CommandError::Refused(format!(
                    "the teardown of {}{id} is still running after {:?}",
                    self.cfg.prefix,
                    self.reap_wait()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `turn end <id>`: `Ok(false)` when the session is gone.
    pub async fn turn_end(&self, id: &str) -> Result<bool, CommandError> {
        let name = self.name_of(id)?;
        Ok(self.tmux.turn_end(&name, now_ms()).await?)
    }

    /// `spawn <id> [--cid C] [--cwd D] -- <cmd...>`. Returns whether a session was created.
    pub async fn spawn(
        &self,
        id: &str,
        cid: Option<&str>,
        cwd: Option<PathBuf>,
        cmd: &[String],
    ) -> Result<bool, CommandError> {
        let name = self.name_of(id)?;
        if let Some(c) = cid {
            if !policy::valid_cid(c) {
                return Err(CommandError::Refused(format!(
                    "invalid conversation id {c:?}: expected letters, digits, '_' and '-', not starting with '-'"
                )));
            }
        }
        if cmd.is_empty() {
            return Err(CommandError::Refused(
                "spawn needs a command after --".into(),
            ));
        }
        // An existing session is left alone, unless it is being reaped (then wait for the reap)
        // or all its panes are dead (then clean it up first, as a sweep would, and respawn).
        let deadline = Instant::now() + self.reap_wait();
        loop {
            match self.tmux.find(&name, &self.cfg.prefix).await? {
                None => break,
                Some(s) if !s.reaping.trim().is_empty() => {
                    if Instant::now() >= deadline {
                        return Err(CommandError::Refused(format!(
                            "{name} is still being reaped"
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some(s) if !s.panes.is_empty() && s.panes.iter().all(|p| p.dead) => {
                    let line = self.reap_dead(&s).await;
                    if line.outcome != "reaped"
                        && self.tmux.find(&name, &self.cfg.prefix).await?.is_some()
                    {
                        return Err(CommandError::Refused(format!(
                            "{name} has exited but could not be cleaned up: {}",
                            line.error.unwrap_or_default()
                        )));
                    }
                }
                Some(_) => return Ok(false),
            }
        }
        self.wait_for_teardown(id, deadline).await?;
        let tomb = self.state.read_tombstone(id)?;
        // The command's own id wins (it is what claude will run), then --cid, then the tombstone.
        let own_cid = policy::cid_from_argv(cmd);
        let tomb_cid = tomb.as_ref().and_then(|t| t.cid.clone()).filter(|c| {
            let ok = policy::valid_cid(c);
            if !ok {
                tracing::warn!(session = %name, cid = ?c, "the tombstone's conversation id is not a valid id: ignored");
            }
            ok
        });
        let cid = own_cid
            .clone()
            .or_else(|| cid.map(str::to_string))
            .or(tomb_cid);
        let mut argv = cmd.to_vec();
        if let (Some(c), None) = (&cid, &own_cid) {
            if argv.len() == 1 {
                // One argument is a shell command (tmux runs it with `sh -c`); every cid that
                // gets here is a valid id (`[A-Za-z0-9_-]`), which needs no quoting.
                argv[0] = format!("{} --resume {c}", argv[0]);
            } else {
                argv.extend(["--resume".to_string(), c.clone()]);
            }
        }
        let cwd = match cwd {
            Some(d) => d,
            None => tomb
                .as_ref()
                .and_then(|t| t.cwd.as_ref())
                .map(PathBuf::from)
                .filter(|p| p.is_dir())
                .map_or_else(
                    || {
                        std::env::current_dir().map_err(|e| {
                            CommandError::Refused(format!(
                                "failed to read the current directory: {e}"
                            ))
                        })
                    },
                    Ok,
                )?,
        };
        if !cwd.is_dir() {
            return Err(CommandError::Refused(format!(
                "--cwd {} is not a directory",
                cwd.display()
            )));
        }
        // A server whose last session just went is exiting; a new-session that reaches it in that
        // moment is lost with it. Check the session is there, and try again if it is not.
        let mut created = false;
        let mut present = false;
        for attempt in 1..=3 {
            created = self
                .tmux
                .new_session(&name, &cwd, &argv, cid.as_deref())
                .await?;
            if self.tmux.find(&name, &self.cfg.prefix).await?.is_some() {
                present = true;
                break;
            }
            tracing::warn!(session = %name, attempt, "the new session vanished (a tmux server exiting?): trying again");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !present {
            return Err(CommandError::Refused(format!(
                "{name} exited as soon as it was created (three times); the tombstone is kept"
            )));
        }
        if created {
            tracing::info!(session = %name, cid = ?cid, cwd = %cwd.display(), "spawned");
            if tomb.is_some() {
                self.state.remove_tombstone(id)?;
            }
        }
        Ok(created)
    }

    /// Clean up a session whose panes have all exited (for `spawn`): the exited reap, even
    /// before tmux has its exit status.
    async fn reap_dead(&self, s: &Session) -> AuditLine {
        let mut snap = Snapshot {
            sessions: vec![s.clone()],
            ..Snapshot::default()
        };
        self.find_cids(&mut snap, &[s.tmux_id].into_iter().collect());
        let policy = Policy {
            reap_exited: true,
            ..self.cfg.policy.clone()
        };
        let mut d = policy::decide(&snap, now_ms(), &policy).remove(0);
        d.override_turn = true;
        self.reap(&d, &snap.sessions[0], ReapReason::Exited, true)
            .await
    }
}

/// Every pane is dead, and at least one exit status is not known yet.
fn waiting_for_exit_status(s: &Session) -> bool {
    !s.panes.is_empty()
        && s.panes.iter().all(|p| p.dead)
        && s.panes
            .iter()
            .any(|p| p.dead_status.is_none() && p.dead_signal.is_none())
}

/// The daemon: one sweep every interval; SIGTERM/SIGINT finish the sweep and the reaps in flight,
/// then return.
pub async fn run_daemon(r: Arc<Reaper>) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("failed to watch SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("failed to watch SIGINT: {e}"))?;
    let _metrics = match r.cfg.metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("failed to listen on CCS_METRICS_ADDR={addr}: {e}"))?;
            Some(crate::metrics::spawn(l, Arc::clone(&r)))
        }
        None => None,
    };
    tracing::info!(
        socket = ?r.cfg.socket, prefix = %r.cfg.prefix, idle_kill_ms = ?r.cfg.policy.idle_kill_ms,
        interval_ms = r.cfg.interval.as_millis() as u64, grace_ms = r.cfg.grace.as_millis() as u64,
        dry_run = r.dry_run, "ccs-reap started"
    );
    let mut tick = tokio::time::interval(r.cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let rep = r.sweep(false).await;
                let reaping = rep.sessions.iter().filter(|s| s.decision.action == Action::Reap).count();
                if reaping > 0 || rep.error.is_some() {
                    tracing::info!(sessions = rep.sessions.len(), reaping, error = ?rep.error, took_ms = rep.took_ms, "sweep");
                } else {
                    tracing::debug!(sessions = rep.sessions.len(), took_ms = rep.took_ms, "sweep");
                }
            }
            _ = term.recv() => { tracing::info!("SIGTERM: stopping"); break }
            _ = int.recv() => { tracing::info!("SIGINT: stopping"); break }
        }
    }
    let n = r.inflight_count();
    if n > 0 {
        tracing::info!(reaps = n, "finishing the reaps in flight before exit");
    }
    while r.inflight_count() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!("ccs-reap stopped");
    Ok(())
}
