//! Observing the world: tmux (one call), the activity files and, where a decision needs them,
//! the process table (memory, viewers' parents, conversation ids on command lines), read into an
//! [`Observation`] and decided by the pure core.

use crate::core::policy::TmuxId;
use std::collections::HashSet;

use crate::adapters::clock::now_ms;
use crate::adapters::memory;
use crate::adapters::metrics::Metrics;
use crate::adapters::procs;
use crate::adapters::tmux::{Listing, Tmux};
use crate::config::Config;
use crate::core::policy::{self, Decision, Snapshot};
use crate::engine::agent_status;
use crate::engine::context::{Reaper, SaidOnce};
use crate::engine::ownership::Ownership;
use crate::engine::watching::{ActivityError, Watching};

/// One look at the world, as every decision takes it (a sweep's, the re-check's before a reap):
/// tmux's listing, one call, and the activity files, read only once a listing came. Each says
/// why it could not be had.
pub struct Look {
    pub listing: Result<Listing, crate::adapters::tmux::TmuxError>,
    /// The ids the activity files mark running.
    pub busy: Result<HashSet<String>, ActivityError>,
}

/// A shared session is judged as its chat's own pane, where the settings say so: the sessions of
/// `l` narrowed to it (every look at tmux that decides, the teardown's re-check too).
pub(crate) fn judge_shared(cfg: &Config, l: &mut Listing) {
    if cfg.policy.shared_session == policy::SharedSession::Pane {
        for s in &mut l.sessions {
            if let Some(n) = policy::chat_pane::narrow(s) {
                *s = n;
            }
        }
    }
}

/// Take one [`Look`].
pub async fn look(cfg: &Config, tmux: &Tmux, watching: &Watching) -> Look {
    let mut listing = tmux.list(&cfg.prefix, procs::exit_collected).await;
    if let Ok(l) = listing.as_mut() {
        judge_shared(cfg, l);
    }
    let busy = match &listing {
        Ok(_) => watching.read_activity(cfg).await,
        Err(_) => Err(ActivityError::NoListing),
    };
    Look { listing, busy }
}

/// How much a sweep should look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Decide, write stamps, reap (unless dry run).
    Act,
    /// `status`: decide and measure everything, write nothing.
    Status,
}

/// What one look at the world saw, and what the pure core decided of it.
pub struct Observation {
    pub snap: Snapshot,
    pub listing: Listing,
    /// One per session of `snap`, in the same order.
    pub decisions: Vec<Decision>,
    /// When it was decided (Unix ms).
    pub now: i64,
}

/// One warning per session (`$N` and name) whose id is longer than [`policy::MAX_ID_LEN`], for
/// the life of the process: it is kept every sweep, and a daemon must not say so every sweep.
fn warn_too_long(said: &SaidOnce, listing: &Listing) {
    for s in listing
        .sessions
        .iter()
        .filter(|s| s.id.len() > policy::MAX_ID_LEN)
    {
        if said.first(s.tmux_id, &s.name) {
            tracing::warn!(
                session = %format!("{}...", &s.name[..s.name.len().min(40)]),
                tmux_id = %s.tmux_id,
                "{}",
                policy::too_long(&s.id)
            );
        }
    }
}

/// The handles a look at the world uses.
struct Eyes<'a> {
    cfg: &'a Config,
    tmux: &'a Tmux,
    metrics: &'a Metrics,
    ownership: &'a Ownership,
    watching: &'a Watching,
    too_long_said: &'a SaidOnce,
}

impl<'a> Eyes<'a> {
    fn of(r: &'a Reaper) -> Self {
        Eyes {
            cfg: &r.cfg,
            tmux: &r.tmux,
            metrics: &r.metrics,
            ownership: &r.ownership,
            watching: &r.watching,
            too_long_said: &r.too_long_said,
        }
    }
}

/// Read tmux, the activity files and (where needed) /proc into a snapshot.
async fn snapshot(r: &Eyes<'_>, all: bool, room: Option<policy::RoomAsk>) -> (Snapshot, Listing) {
    let mut snap = Snapshot {
        room,
        ..Snapshot::default()
    };
    let Look { listing, busy } = look(r.cfg, r.tmux, r.watching).await;
    let listing = match listing {
        Ok(l) => l,
        Err(e) => {
            r.metrics.tmux_errors.inc();
            tracing::warn!(error = %e, "tmux did not give a snapshot: keeping every session this sweep");
            snap.global_problem = Some(e.to_string());
            return (snap, Listing::default());
        }
    };
    warn_too_long(r.too_long_said, &listing);
    if !listing.problems.is_empty() {
        let why = listing.problems.join("; ");
        tracing::warn!(problems = %why, "tmux rows did not parse: keeping every session this sweep");
        snap.global_problem = Some(why);
    }
    match busy {
        Ok(busy) => snap.busy_ids = busy,
        Err(e) => {
            // A degraded state: the daemon says it once when it starts and once when it ends
            // (`core::degraded`), `status` and `--once` warn; not one line per sweep.
            tracing::debug!(error = %e, "activity file unreadable: keeping every session this sweep");
            snap.global_problem.get_or_insert(e.to_string());
        }
    }
    snap.sessions = listing.sessions.clone();
    snap.turns_by_file = !r.cfg.activity_files.is_empty();
    let p = &r.cfg.policy;
    if p.orphan_viewers == policy::OrphanViewers::Ignore || all {
        for s in &mut snap.sessions {
            for c in &mut s.clients {
                c.orphaned = procs::orphaned(c.pid);
            }
        }
    }
    if all
        || snap.room.is_some()
        || p.mem_high.is_some()
        || p.mem_psi.is_some()
        || p.session_mem_max.is_some()
        || r.cfg.metrics_addr.is_some()
    {
        // Sizes only of processes seen as they are: a reaper in another pid namespace than the
        // server would count strangers (or nothing) and take 0 bytes for a chat; unknown sizes
        // make the memory rules take at most one chat (and nothing is signalled anyway).
        let sees = listing.server_pid.is_none()
            || r.ownership
                .check_server_identity(listing.server_pid, listing.socket_path.as_deref())
                .is_ok();
        if sees {
            measure(&mut snap, &listing);
        }
        let w = r.watching.watch_memory(r.cfg, listing.server_pid);
        snap.host = memory::read(&w.source);
        if p.mem_psi.is_some() {
            snap.stall_pct = r.watching.stall_pct(
                crate::engine::watching::stall_now(&w),
                crate::adapters::clock::now_ms(),
            );
        }
    }
    (snap, listing)
}

/// Memory of every session's process tree (the same set a teardown would stop).
fn measure(snap: &mut Snapshot, listing: &Listing) {
    let Ok(table) = procs::table() else { return };
    let members = procs::members_of(&table, snap.sessions.iter(), listing);
    for s in &mut snap.sessions {
        let ids = members.get(&s.tmux_id).map(Vec::as_slice).unwrap_or(&[]);
        let (rss, pss) = procs::memory(ids);
        s.mem_bytes = Some(pss.unwrap_or(rss));
        s.mem_rss = Some(rss);
        s.mem_pss = pss;
    }
}

/// Look for conversation ids on the `claude` command lines of sessions that need one.
pub fn find_cids(snap: &mut Snapshot, want: &HashSet<TmuxId>) {
    if want.is_empty() {
        return;
    }
    let Ok(table) = procs::table() else { return };
    let mut children: std::collections::HashMap<i32, Vec<i32>> = std::collections::HashMap::new();
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
pub async fn observe(r: &Reaper, mode: Mode) -> Observation {
    observe_with(r, mode, None, None).await
}

/// [`observe`], deciding a request for room for a new chat with the rest (`room`), and the
/// session named `close` looked at closely, whatever its decision hinges on: its conversation id
/// sought on its command line and its agent's status file read, as `reap <id>` needs them,
/// before the one decision (that of a sweep) is made.
pub async fn observe_with(
    r: &Reaper,
    mode: Mode,
    room: Option<policy::RoomAsk>,
    close: Option<&str>,
) -> Observation {
    let now = now_ms();
    let eyes = Eyes::of(r);
    let (mut snap, listing) = snapshot(&eyes, mode == Mode::Status, room).await;
    let mut decisions = policy::decide(&snap, now, &r.cfg.policy);
    let is_close = |s: &policy::Session| close == Some(s.name.as_str());
    let want: HashSet<TmuxId> = decisions
        .iter()
        .zip(&snap.sessions)
        .filter(|(d, s)| {
            policy::needs_cmdline_cid(d, s, mode == Mode::Status)
                || (is_close(s) && !policy::valid_cid(s.cid.trim()) && s.cmdline_cid.is_none())
        })
        .map(|(d, _)| d.tmux_id)
        .collect();
    if !want.is_empty() {
        find_cids(&mut snap, &want);
        decisions = policy::decide(&snap, now, &r.cfg.policy);
    }
    // The close look reads its agent's status file whatever the decision: a turn it runs keeps
    // the session, as the teardown's re-check would.
    let mut read_close = false;
    for s in snap.sessions.iter_mut().filter(|s| is_close(s)) {
        if s.agent_turn == policy::AgentTurn::NotRead {
            s.agent_turn = crate::engine::agent_status::turn_of(s);
            read_close = true;
        }
    }
    if read_close {
        decisions = policy::decide(&snap, now, &r.cfg.policy);
    }
    // Status files are found by the pids tmux lists: only where this reaper sees the server's
    // processes (else they stay unread, and the teardown refuses to act on what it cannot see).
    let sees = || {
        r.ownership
            .check_server_identity(listing.server_pid, listing.socket_path.as_deref())
            .is_ok()
    };
    let any = decisions
        .iter()
        .zip(&snap.sessions)
        .any(|(d, s)| policy::needs_agent_turn(d, s, mode == Mode::Status));
    if any && sees() && read_agent_turns(&mut snap, &decisions, mode == Mode::Status) {
        decisions = policy::decide(&snap, now, &r.cfg.policy);
        // A chat kept busy by its status file can make a pressure rule take another one, whose
        // file is read in turn: each file at most once a sweep.
        for _ in 0..8 {
            if !read_agent_turns(&mut snap, &decisions, false) {
                break;
            }
            decisions = policy::decide(&snap, now, &r.cfg.policy);
        }
    }
    let ends = TurnEnds {
        tmux: &r.tmux,
        metrics: &r.metrics,
        write: mode != Mode::Status && !r.dry_run,
    };
    if end_interrupted_turns(&ends, &mut snap, &mut decisions, now).await {
        decisions = policy::decide(&snap, now, &r.cfg.policy);
    }
    Observation {
        snap,
        listing,
        decisions,
        now,
    }
}

/// The agents' own status files, read for the sessions whose decision hinges on one
/// ([`policy::needs_agent_turn`]: a chat about to be reaped, or in `status` one whose turns are
/// otherwise unseen). Only those: the cost is linear in the reaps. `true` when any was read.
pub fn read_agent_turns(snap: &mut Snapshot, decisions: &[Decision], for_status: bool) -> bool {
    let want: Vec<usize> = decisions
        .iter()
        .zip(&snap.sessions)
        .enumerate()
        .filter(|(_, (d, s))| policy::needs_agent_turn(d, s, for_status))
        .map(|(i, _)| i)
        .collect();
    for &i in &want {
        snap.sessions[i].agent_turn = agent_status::turn_of(&snap.sessions[i]);
    }
    !want.is_empty()
}

/// What ending the interrupted turns uses: tmux, the metrics, and whether it may write (not in
/// `status`, not in a dry run).
#[derive(Clone, Copy)]
struct TurnEnds<'a> {
    tmux: &'a Tmux,
    metrics: &'a Metrics,
    write: bool,
}

/// Turns the agent's own status file says are over (see [`agent_status`]): ended in tmux (only
/// while `@ccs_turn` is still the value listed) and in `snap`, so the decision that follows sees an
/// idle chat whose clock starts now. `status` and a dry run write nothing: the decision stays busy
/// and its reason says what the next sweep will do. `true` when `snap` changed.
async fn end_interrupted_turns(
    t: &TurnEnds<'_>,
    snap: &mut Snapshot,
    decisions: &mut [Decision],
    now: i64,
) -> bool {
    let TurnEnds {
        tmux,
        metrics,
        write,
    } = *t;
    let mut changed = false;
    for i in agent_status::candidates(snap, decisions, now) {
        let s = &snap.sessions[i];
        let seen = match agent_status::read(s) {
            Ok(Some(seen)) => seen,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(session = %s.name, error = %e, "the agent's status file is not used");
                continue;
            }
        };
        if seen.state.keeps_busy() {
            continue;
        }
        if !write {
            decisions[i].why = format!(
                "a turn is running by @ccs_turn, but the agent (pid {}) is idle by its status file: the next sweep ends the turn",
                seen.pid
            );
            continue;
        }
        let turn = s.turn.trim().to_string();
        match tmux.end_turn_if(s.tmux_id, &turn, now).await {
            Ok(true) => {
                tracing::info!(session = %s.name, pid = seen.pid, "turn ended: the agent is idle by its status file and no hook ended the turn (interrupted)");
                let s = &mut snap.sessions[i];
                s.turn.clear();
                s.idle = now.to_string();
                s.reparse();
                changed = true;
            }
            Ok(false) => {
                tracing::debug!(session = %s.name, "turn not ended: @ccs_turn changed (or a reap mark is on it)");
            }
            Err(e) => {
                metrics.tmux_errors.inc();
                tracing::warn!(session = %s.name, error = %e, "failed to end an interrupted turn");
            }
        }
    }
    changed
}
