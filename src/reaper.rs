//! The sweep and the teardown: snapshot -> decide -> carry out -> audit.
//!
//! A sweep reads the server in one tmux call, reads the activity files, asks the pure core what to
//! do, writes the idle stamps in batches, and starts the reaps (at most [`MAX_CONCURRENT_REAPS`] at a
//! time, never two of one session). A reap marks the session with an atomic test-and-set in the
//! tmux server, re-checks on fresh data, stops the whole process tree, writes the tombstone, kills
//! the session and appends one audit line.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::activity;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::{
    self, Action, Decision, HostMemory, Policy, ReapReason, Session, Snapshot, State,
};
use crate::procs;
use crate::state::{AuditLine, Journal, StateDir, Tombstone};
use crate::tmux::{Listing, Tmux, TmuxError, TurnBegin};

/// At most this many teardowns run at once.
pub const MAX_CONCURRENT_REAPS: usize = 64;

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn rfc3339(ms: i64) -> String {
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

pub struct Reaper {
    pub cfg: Config,
    pub tmux: Tmux,
    pub state: StateDir,
    pub dry_run: bool,
    inflight: Mutex<HashSet<u32>>,
    limit: Arc<Semaphore>,
    pub metrics: Metrics,
}

/// One session listed afresh for the re-check before a reap.
struct Fresh {
    decision: Decision,
    session: Session,
    /// The server: (socket path, pid).
    server: Option<(String, u32)>,
    /// Every live pane of the server, of any session.
    all_panes: Vec<(u32, u32)>,
}

static TOKENS: AtomicU64 = AtomicU64::new(0);

fn token() -> String {
    let n = TOKENS.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("r{}x{n}x{t}", std::process::id())
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
            limit: Arc::new(Semaphore::new(MAX_CONCURRENT_REAPS)),
            metrics: Metrics::default(),
        })
    }

    /// Read the activity files on a detached thread, within the tmux timeout: a file on a stalled
    /// mount must stall neither the sweep nor the shutdown (the thread is abandoned, not joined).
    /// A FIFO, a device, a directory or an oversized file is refused without blocking. Not read in
    /// time, or refused = liveness unknown.
    async fn read_activity(&self) -> Result<HashSet<String>, String> {
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
            reaps = self.recover(&listing, dead).await;
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

        let mut handles = Vec::new();
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
                let me = Arc::clone(self);
                let (d, s) = (d.clone(), s.clone());
                handles.push(tokio::spawn(async move {
                    let permit = me.limit.clone().acquire_owned().await;
                    let line = me.reap(&d, &s, reason, false).await;
                    drop(permit);
                    me.inflight().remove(&d.tmux_id);
                    line
                }));
            }
        }

        if wait {
            for h in handles {
                if let Ok(line) = h.await {
                    reaps.push(line);
                }
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

    /// Whether a fresh decision still allows the reap that `reason` started.
    fn still_reapable(
        &self,
        fresh: &Decision,
        decided_idle_ms: Option<u64>,
        reason: ReapReason,
        force: bool,
    ) -> Result<(), String> {
        if force {
            return Ok(());
        }
        let ok = match reason {
            ReapReason::Idle => fresh.reap_reason == Some(ReapReason::Idle),
            // The pressure rules chose it for how long it had been idle: its clock must not have
            // restarted since (a short turn in between), and it must still be past the floor.
            ReapReason::Memory | ReapReason::MaxIdle => {
                matches!(fresh.state, State::Idle | State::Expired)
                    && fresh.idle_ms >= decided_idle_ms
                    && fresh.idle_ms.unwrap_or(0) >= self.cfg.policy.min_idle_ms
            }
            ReapReason::Stuck => fresh.reap_reason == Some(ReapReason::Stuck),
            ReapReason::Exited => fresh.reap_reason == Some(ReapReason::Exited),
            ReapReason::Manual => {
                !matches!(
                    fresh.state,
                    State::Unknown | State::Busy | State::Stuck | State::Viewed | State::NoCid
                ) && (fresh.cid.is_some() || self.cfg.policy.reap_without_cid)
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "the session changed: now {} ({})",
                fresh.state.as_str(),
                fresh.why
            ))
        }
    }

    /// Reap one session by the contract's procedure. Always returns the audit line it wrote (or
    /// tried to write).
    pub async fn reap(
        &self,
        d: &Decision,
        s: &Session,
        reason: ReapReason,
        force: bool,
    ) -> AuditLine {
        let span = tracing::info_span!("reap", session = %d.name, tmux_id = %format!("${}", d.tmux_id), reason = reason.as_str());
        self.reap_in_span(d, s, reason, force)
            .instrument(span)
            .await
    }

    async fn reap_in_span(
        &self,
        d: &Decision,
        s: &Session,
        reason: ReapReason,
        force: bool,
    ) -> AuditLine {
        let t0 = Instant::now();
        let n = d.tmux_id;
        let mut line = AuditLine::begin(
            rfc3339(now_ms()),
            &d.name,
            &d.id,
            n,
            d.cid.clone(),
            reason.as_str(),
            d.idle_ms,
        );

        // The audit line must be writable before anything is touched.
        if let Err(e) = self.state.check_writable() {
            line.outcome = "failed".into();
            line.error = Some(format!(
                "not attempted: the state dir cannot be written: {e}"
            ));
            tracing::error!(error = %e, "reap not attempted: the audit log cannot be written");
            self.metrics.record_reap(&line);
            return line;
        }

        let tok = token();
        let check_turn = !force && !d.override_turn;
        let check_viewers = !force && !d.override_viewers;
        match self
            .tmux
            .try_mark_reaping(n, now_ms(), &tok, check_turn, check_viewers)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                line.error = Some(
                    "the session became busy or viewed, is gone, or another reap holds it".into(),
                );
                return self.finish(line, t0);
            }
            Err(e) => {
                line.outcome = "failed".into();
                line.error = Some(format!("failed to mark the session: {e}"));
                return self.finish(line, t0);
            }
        }

        // Re-check on fresh data (rules 1-3, and the reason's own condition).
        let fresh = match self.fresh_decision(n, s).await {
            Ok(Some(f)) => f,
            Ok(None) => {
                // Gone, or renamed since it was listed: drop our mark if it is still there.
                let _ = self.tmux.clear_reaping(n, &tok).await;
                line.error = Some("the session is gone or was renamed".into());
                return self.finish(line, t0);
            }
            Err(e) => {
                let _ = self.tmux.clear_reaping(n, &tok).await;
                line.error = Some(format!("liveness unknown on re-check: {e}"));
                return self.finish(line, t0);
            }
        };
        if let Err(why) = self.still_reapable(&fresh.decision, d.idle_ms, reason, force) {
            let _ = self.tmux.clear_reaping(n, &tok).await;
            line.error = Some(why);
            return self.finish(line, t0);
        }
        let s = fresh.session;
        if line.cid.is_none() {
            line.cid = fresh.decision.cid.clone();
        }
        if reason == ReapReason::Exited {
            let p = s
                .panes
                .iter()
                .find(|p| p.dead_signal.is_some() || p.dead_status != Some(0))
                .or(s.panes.first());
            line.exit_status = p.and_then(|p| p.dead_status);
            line.exit_signal = p.and_then(|p| p.dead_signal);
            let clean = line.exit_signal.is_none() && line.exit_status == Some(0);
            line.ended = Some(if clean { "completed" } else { "failed" }.into());
        } else {
            line.ended = Some("stopped".into());
        }

        // Collect and pin the victims.
        let cwd = s
            .panes
            .iter()
            .find_map(|p| std::fs::read_link(format!("/proc/{}/cwd", p.pid)).ok())
            .map(|p: PathBuf| p.to_string_lossy().into_owned());
        let server_pid = fresh.server.as_ref().map(|x| x.1);
        let victims = match self.victims(&s, fresh.server, &fresh.all_panes).await {
            Ok(v) => v,
            Err(e) => {
                let _ = self.tmux.clear_reaping(n, &tok).await;
                line.outcome = "failed".into();
                line.error = Some(e);
                return self.finish(line, t0);
            }
        };
        let ids: Vec<procs::Ident> = victims.iter().map(|v| v.id).collect();
        let (rss, pss) = procs::memory(&ids);
        line.rss_bytes = rss;
        line.pss_bytes = pss;
        line.pids = ids.iter().map(|i| i.pid).collect();

        // The journal goes down before the first signal: a reaper that dies from here on leaves
        // enough for the next sweep to finish.
        let journal = Journal {
            id: d.id.clone(),
            session: d.name.clone(),
            tmux_id: n,
            cid: line.cid.clone(),
            reason: reason.as_str().into(),
            idle_ms: d.idle_ms,
            cwd: cwd.clone(),
            started_at: line.at.clone(),
            owner: procs::myself(),
            victims: ids.clone(),
            server_pid,
            token: tok.clone(),
            path: None,
        };
        // The tombstone too comes before the first signal: the pane dies with claude, so the
        // session may vanish long before this teardown ends, and whoever sees it gone must find
        // the cid. (`turn begin` and `spawn` also wait for the journal to go, so nothing respawns
        // a chat while its old tree is still dying.) Either write failing: nothing is touched.
        let tomb = Tombstone {
            id: d.id.clone(),
            cid: line.cid.clone(),
            reaped_at: rfc3339(now_ms()),
            reason: reason.as_str().into(),
            cwd,
            session: Some(d.name.clone()),
            socket: Some(self.socket_path()),
        };
        let written = self
            .state
            .write_journal(&journal)
            .and_then(|()| self.state.write_tombstone(&tomb));
        if let Err(e) = written {
            let _ = self.tmux.clear_reaping(n, &tok).await;
            let _ = self.state.remove_journal(&journal);
            line.outcome = "failed".into();
            line.error = Some(format!("not attempted: {e}"));
            return self.finish(line, t0);
        }
        let line = self
            .teardown(line, &victims, &ids, Some((n, tok.as_str())))
            .await;
        let line = self.finish(line, t0);
        if let Err(e) = self.state.remove_journal(&journal) {
            tracing::warn!(error = %e, "failed to remove the reap journal");
        }
        line
    }

    /// Stop the pinned victims, kill the session (if it still carries our token), verify.
    async fn teardown(
        &self,
        mut line: AuditLine,
        victims: &[procs::Victim],
        ids: &[procs::Ident],
        session: Option<(u32, &str)>,
    ) -> AuditLine {
        // Stop them: TERM, grace, KILL.
        let r = procs::stop(victims, self.cfg.grace).await;
        line.term = r.term;
        line.kill = r.kill;

        if let Some((n, token)) = session {
            if let Err(e) = self.tmux.kill_session(n, token).await {
                line.outcome = "failed".into();
                line.error = Some(format!("failed to kill the session: {e}"));
            }
        }
        line.survivors = ids
            .iter()
            .filter(|i| procs::alive(**i))
            .map(|i| i.pid)
            .collect();
        if line.survivors.is_empty() && line.outcome != "failed" {
            line.outcome = "reaped".into();
        } else if !line.survivors.is_empty() {
            line.outcome = "failed".into();
            line.error
                .get_or_insert_with(|| format!("processes survived: {:?}", line.survivors));
        }
        line
    }

    /// Finish the teardowns that a reaper left behind when it died (their journals remain and
    /// their owner is gone). The session, if still there under the same name, is killed too.
    async fn recover(&self, listing: &Listing, journals: Vec<Journal>) -> Vec<AuditLine> {
        let mut lines = Vec::new();
        for j in journals {
            if self.inflight().contains(&j.tmux_id) {
                continue;
            }
            let t0 = Instant::now();
            tracing::warn!(session = %j.session, tmux_id = %format!("${}", j.tmux_id), "finishing a teardown left by a reaper that stopped mid-way");
            let same_server = j.server_pid.is_some() && listing.server_pid == j.server_pid;
            let pinned = self.journal_victims(&j, listing, same_server);
            let victims = procs::pin(&pinned);
            let mut line = AuditLine::begin(
                rfc3339(now_ms()),
                &j.session,
                &j.id,
                j.tmux_id,
                j.cid.clone(),
                &j.reason,
                j.idle_ms,
            );
            line.ended = Some("stopped".into());
            line.pids = pinned.iter().map(|v| v.pid).collect();
            // The session is killed only if it is the same one: same server, and it still
            // carries the dead reaper's token (kill_session checks that in the server).
            let session = same_server.then_some((j.tmux_id, j.token.as_str()));
            // The tombstone was written before the first signal; write it again only if it is
            // missing and no chat of that name has come back since.
            let back = listing
                .sessions
                .iter()
                .any(|s| s.name == j.session && (!same_server || s.tmux_id != j.tmux_id));
            if !back && self.state.read_tombstone(&j.id).ok().flatten().is_none() {
                let tomb = Tombstone {
                    id: j.id.clone(),
                    cid: j.cid.clone(),
                    reaped_at: rfc3339(now_ms()),
                    reason: j.reason.clone(),
                    cwd: j.cwd.clone(),
                    session: Some(j.session.clone()),
                    socket: Some(self.socket_path()),
                };
                if let Err(e) = self.state.write_tombstone(&tomb) {
                    tracing::error!(error = %e, session = %j.session, "failed to write the tombstone: the journal stays");
                    continue;
                }
            }
            let mut line = self.teardown(line, &victims, &pinned, session).await;
            line.error
                .get_or_insert_with(|| "completed after the reaper that began it stopped".into());
            lines.push(self.finish(line, t0));
            if let Err(e) = self.state.remove_journal(&j) {
                tracing::warn!(error = %e, "failed to remove the reap journal");
            }
        }
        lines
    }

    /// The socket's path as the tombstones record it.
    fn socket_path(&self) -> String {
        self.cfg
            .socket
            .canonical_path()
            .to_string_lossy()
            .into_owned()
    }

    /// A dead reaper's journal lists pids; none is signalled on its word alone (the file may have
    /// been planted). Each is re-checked against the live system: see
    /// [`procs::journal_victims`]. The TMUX marker is looked for under the socket path the
    /// server reports now, and the one we would compute.
    fn journal_victims(
        &self,
        j: &Journal,
        listing: &Listing,
        same_server: bool,
    ) -> Vec<procs::Ident> {
        let Some(server) = j.server_pid else {
            tracing::warn!(session = %j.session, "the journal names no tmux server: no process is signalled");
            return Vec::new();
        };
        let table = procs::table().unwrap_or_default();
        let prot = procs::protected(&table, listing.server_pid);
        let mut paths: Vec<String> = listing.socket_path.iter().cloned().collect();
        paths.push(self.cfg.socket.path().to_string_lossy().into_owned());
        paths.push(self.socket_path());
        let needles: Vec<Vec<u8>> = paths
            .iter()
            .map(|p| format!("TMUX={}", procs::tmux_env_value(p, server, j.tmux_id)).into_bytes())
            .collect();
        // Processes of live panes of every other session (of the journal's own, if it is still
        // there on the same server, its panes are fair game).
        let others: Vec<(u32, Vec<u32>)> = {
            let mut by: std::collections::HashMap<u32, Vec<u32>> = Default::default();
            for &(n, pid) in &listing.all_panes {
                if !(same_server && n == j.tmux_id) {
                    by.entry(n).or_default().push(pid);
                }
            }
            by.into_iter().collect()
        };
        let uid = rustix::process::getuid().as_raw();
        let exclude: HashSet<i32> = procs::members(&table, &others, &[], None, uid, &prot)
            .into_values()
            .flatten()
            .map(|i| i.pid)
            .collect();
        let (kept, refused) =
            procs::journal_victims(&table, &j.victims, &needles, &exclude, uid, &prot);
        for (id, why) in refused.iter().filter(|(_, w)| *w != "gone") {
            tracing::warn!(session = %j.session, pid = id.pid, why, "a pid of the journal is not signalled");
        }
        kept
    }

    fn finish(&self, mut line: AuditLine, t0: Instant) -> AuditLine {
        line.took_ms = t0.elapsed().as_millis() as u64;
        match line.outcome.as_str() {
            "reaped" => tracing::info!(
                session = %line.session, tmux_id = %line.tmux_id, reason = %line.reason, idle_ms = ?line.idle_ms,
                pids = line.pids.len(), term = line.term, kill = line.kill, rss_bytes = line.rss_bytes, took_ms = line.took_ms,
                "reaped"
            ),
            "aborted" => {
                tracing::info!(session = %line.session, tmux_id = %line.tmux_id, why = ?line.error, "reap aborted")
            }
            _ => {
                tracing::error!(session = %line.session, tmux_id = %line.tmux_id, error = ?line.error, survivors = ?line.survivors, "reap failed")
            }
        }
        if let Err(e) = self.state.append_audit(&line) {
            tracing::error!(error = %e, session = %line.session, "failed to append the audit line");
        }
        self.metrics.record_reap(&line);
        line
    }

    /// A fresh decision for one session.
    async fn fresh_decision(&self, n: u32, old: &Session) -> Result<Option<Fresh>, String> {
        let listing = self
            .tmux
            .list(&self.cfg.prefix)
            .await
            .map_err(|e| e.to_string())?;
        if !listing.problems.is_empty() {
            return Err(listing.problems.join("; "));
        }
        let server = listing.socket_path.clone().zip(listing.server_pid);
        let all_panes = listing.all_panes;
        // Same `$N` and same name: a session renamed since it was listed (even to another name of
        // ours) is not the one this reap was decided for.
        let Some(mut s) = listing
            .sessions
            .into_iter()
            .find(|s| s.tmux_id == n && s.name == old.name)
        else {
            return Ok(None);
        };
        s.cmdline_cid = old.cmdline_cid.clone();
        s.mem_bytes = old.mem_bytes;
        if self.cfg.policy.orphan_viewers == policy::OrphanViewers::Ignore {
            for c in &mut s.clients {
                c.orphaned = procs::orphaned(c.pid);
            }
        }
        let busy = self.read_activity().await?;
        let snap = Snapshot {
            sessions: vec![s.clone()],
            busy_ids: busy,
            ..Snapshot::default()
        };
        let mut d = policy::decide(&snap, now_ms(), &self.cfg.policy);
        Ok(d.pop().map(|decision| Fresh {
            decision,
            session: s,
            server,
            all_panes,
        }))
    }

    async fn victims(
        &self,
        s: &Session,
        server: Option<(String, u32)>,
        all_panes: &[(u32, u32)],
    ) -> Result<Vec<procs::Victim>, String> {
        let table = procs::table()?;
        let prot = procs::protected(&table, server.as_ref().map(|x| x.1));
        let panes: Vec<u32> = s.panes.iter().filter(|p| !p.dead).map(|p| p.pid).collect();
        let env = server.as_ref().map(|(p, pid)| (p.as_str(), *pid));
        let m = procs::members(
            &table,
            &[(s.tmux_id, panes)],
            all_panes,
            env,
            rustix::process::getuid().as_raw(),
            &prot,
        );
        let ids = m.get(&s.tmux_id).cloned().unwrap_or_default();
        Ok(procs::pin(&ids))
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
        if let Err(why) = self.still_reapable(&d, d.idle_ms, reason, force) {
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
