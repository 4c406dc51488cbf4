//! The process table: which processes belong to a session, who they are, how to stop them, and
//! what memory they hold.
//!
//! A session's processes are found three ways, because `kill-session` alone only closes the pty:
//! descendants of the pane pids (walked by ppid over the whole table; `task/*/children` misses
//! children of other threads), processes whose session id is a pane pid, and processes whose
//! environment carries this server's `TMUX=<socket>,<server pid>,<session number>` (MCP helpers that
//! called setsid or double-forked). Each is pinned as (pid, start time); a pidfd makes the signal
//! itself race-free. Never pid <= 1, the tmux server, or the reaper and its ancestors.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use procfs::process::Process;

use crate::core::policy::TmuxId;
use rustix::process::{Pid, PidfdFlags, Signal};

/// One row of the process table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub sid: i32,
    pub start: u64,
    pub state: char,
    pub uid: Option<u32>,
}

/// The whole table, read once.
/// The process table could not be read.
#[derive(Debug, thiserror::Error)]
#[error("failed to list /proc: {0}")]
pub struct TableError(#[from] procfs::ProcError);

pub fn table() -> Result<Vec<Proc>, TableError> {
    let all = procfs::process::all_processes()?;
    let mut out = Vec::new();
    for p in all.flatten() {
        // A process that exits while we read it is simply not in the table.
        let Ok(st) = p.stat() else { continue };
        out.push(Proc {
            pid: st.pid,
            ppid: st.ppid,
            sid: st.session,
            start: st.starttime,
            state: st.state,
            uid: p.uid().ok(),
        });
    }
    Ok(out)
}

pub use crate::core::records::Ident;

mod born_late;
mod scope;
pub use born_late::{end_late, late_members, LateReport, World};
pub(crate) use scope::env_in_pane;
pub use scope::{members_scoped, pane_only_of};

/// The pids that must never be signalled: <= 1, the tmux server, ourselves and our ancestors.
pub fn protected(table: &[Proc], server_pid: Option<u32>) -> HashSet<i32> {
    let by_pid: HashMap<i32, &Proc> = table.iter().map(|p| (p.pid, p)).collect();
    let mut set: HashSet<i32> = [0, 1].into_iter().collect();
    if let Some(s) = server_pid {
        set.insert(s as i32);
    }
    let mut cur = std::process::id() as i32;
    while cur > 1 && set.insert(cur) {
        match by_pid.get(&cur) {
            Some(p) => cur = p.ppid,
            None => break,
        }
    }
    set
}

/// The TMUX value that every process of session number `n` inherits.
pub fn tmux_env_value(socket_path: &str, server_pid: u32, n: TmuxId) -> String {
    format!("{socket_path},{server_pid},{}", n.get())
}

/// What one look over the process table goes by: the table, the `TMUX` key of this server
/// (`(socket path, server pid)`; without it no environment is read), whose environments may be
/// read (processes of our uid), and the pids never anyone's ([`protected`]).
#[derive(Debug, Clone, Copy)]
pub struct Scan<'a> {
    pub table: &'a [Proc],
    pub tmux_env: Option<(&'a str, u32)>,
    pub uid: u32,
    pub protected: &'a HashSet<i32>,
}

/// Every process of each of `sessions` (its live panes' trees, their session members, and the
/// processes of our uid carrying its `TMUX` marker), from one scan of `table`, never one of
/// another live pane of the server, nor a protected pid: what a teardown stops, and what the
/// memory figures count.
pub fn members_of<'a>(
    table: &[Proc],
    sessions: impl Iterator<Item = &'a crate::core::policy::Session>,
    listing: &crate::core::listing::Listing,
) -> HashMap<TmuxId, Vec<Ident>> {
    let prot = protected(table, listing.server_pid);
    let wanted: Vec<(TmuxId, Vec<u32>)> = sessions
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
    let scan = Scan {
        table,
        tmux_env: env,
        uid: rustix::process::getuid().as_raw(),
        protected: &prot,
    };
    let pane_of = pane_only_of(&listing.sessions);
    members_scoped(scan, &wanted, &listing.all_panes, &pane_of)
}

/// Group the process table by session: for each wanted (session number, pane pids), every
/// process that belongs to it. `others` lists every live pane of the server, of any session
/// (`(session number, pane pid)`): their trees are claimed first, so a process that belongs to a
/// live pane of another session is never a member of a wanted one, whatever its environment says
/// (a window moved from `ccs-1` to another session still carries `TMUX=...,<ccs-1's number>`).
/// Pure over the scan's table except for environ reads, which only look at processes of its uid,
/// and only when it has a `tmux_env` key.
pub fn members(
    scan: Scan<'_>,
    wanted: &[(TmuxId, Vec<u32>)],
    others: &[(TmuxId, u32)],
) -> HashMap<TmuxId, Vec<Ident>> {
    members_scoped(scan, wanted, others, &HashMap::new())
}

/// The claims of one pass over the process table: which session each process went to, first
/// come first served, never a protected pid.
struct Claims<'t> {
    protected: &'t HashSet<i32>,
    children: &'t HashMap<i32, Vec<&'t Proc>>,
    owner: HashMap<i32, TmuxId>,
    out: HashMap<TmuxId, Vec<Ident>>,
}

impl<'t> Claims<'t> {
    /// Claim `p` for session `n`: `false` when it is protected or already someone's.
    fn claim(&mut self, p: &Proc, n: TmuxId) -> bool {
        if self.protected.contains(&p.pid) || self.owner.contains_key(&p.pid) {
            return false;
        }
        self.owner.insert(p.pid, n);
        self.out.entry(n).or_default().push(Ident {
            pid: p.pid,
            start: p.start,
        });
        true
    }

    /// Claim for `n` the descendants of the pids of `stack` (each claimed one's in turn).
    fn claim_descendants(&mut self, mut stack: Vec<i32>, n: TmuxId) {
        let children = self.children;
        while let Some(pid) = stack.pop() {
            for c in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if self.claim(c, n) {
                    stack.push(c.pid);
                }
            }
        }
    }
}

/// One pass over the process table whose claims depend on each other's order: the pane trees of
/// `sessions` first, then the members of their process sessions, then the processes carrying
/// the `TMUX` marker of one of `env_for` ([`claim_by_env`]).
fn claim_all(
    scan: Scan<'_>,
    sessions: &[(TmuxId, Vec<u32>)],
    env_for: &[(TmuxId, Vec<u32>)],
    pane_of: &HashMap<TmuxId, u32>,
) -> HashMap<TmuxId, Vec<Ident>> {
    let table = scan.table;
    let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p);
    }
    let by_pid: HashMap<i32, &Proc> = table.iter().map(|p| (p.pid, p)).collect();
    let mut claims = Claims {
        protected: scan.protected,
        children: &children,
        owner: HashMap::new(),
        out: HashMap::new(),
    };
    // Pane pids, their descendants, and members of their sessions (setsid children of the pane
    // keep their sid only if they did not call setsid themselves; those are found by environ).
    // A pane process is a child of the tmux server: a pid listed for a pane that is anything else
    // (a dead pane's pid, waited for by tmux and reused since) belongs to a stranger.
    let server = scan.tmux_env.map(|(_, s)| s as i32);
    let mut leaders: HashMap<i32, TmuxId> = HashMap::new();
    for (n, panes) in sessions {
        let mut stack: Vec<i32> = Vec::new();
        for &pp in panes {
            let pp = pp as i32;
            let Some(p) = by_pid.get(&pp) else { continue };
            if server.is_some_and(|s| p.ppid != s) {
                continue;
            }
            leaders.insert(pp, *n);
            if claims.claim(p, *n) {
                stack.push(pp);
            }
        }
        claims.claim_descendants(stack, *n);
    }
    for p in table {
        if let Some(&n) = leaders.get(&p.sid) {
            if claims.claim(p, n) {
                // Its descendants too.
                claims.claim_descendants(vec![p.pid], n);
            }
        }
    }
    if let Some(key) = scan.tmux_env {
        claim_by_env(&mut claims, scan, key, env_for, pane_of);
    }
    claims.out
}

/// The processes of the scan's uid, claimed by no one yet, whose environment carries the `TMUX`
/// marker (`key`: socket path, server pid) of a session of `env_for` (and, for a chat judged as
/// its own pane, its `TMUX_PANE`: [`env_in_pane`]).
fn claim_by_env(
    claims: &mut Claims<'_>,
    scan: Scan<'_>,
    (socket, server): (&str, u32),
    env_for: &[(TmuxId, Vec<u32>)],
    pane_of: &HashMap<TmuxId, u32>,
) {
    let needles: HashMap<Vec<u8>, TmuxId> = env_for
        .iter()
        .map(|(n, _)| {
            (
                format!("TMUX={}", tmux_env_value(socket, server, *n)).into_bytes(),
                *n,
            )
        })
        .collect();
    for p in scan.table {
        if p.uid != Some(scan.uid)
            || claims.owner.contains_key(&p.pid)
            || scan.protected.contains(&p.pid)
            || p.state == 'Z'
        {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{}/environ", p.pid)) else {
            continue;
        };
        if let Some(n) = tmux_entry_of(&env, &needles) {
            if env_in_pane(&env, n, pane_of) {
                claims.claim(p, n);
            }
        }
    }
}

/// The session number whose `TMUX=` entry the environment `env` (as `/proc/<pid>/environ` has
/// it) carries, among `needles` (each chat's whole entry, to its number): one split of the
/// environment and a lookup per `TMUX=` entry, whatever the number of chats in the batch.
pub(crate) fn tmux_entry_of(env: &[u8], needles: &HashMap<Vec<u8>, TmuxId>) -> Option<TmuxId> {
    env.split(|&b| b == 0)
        .filter(|kv| kv.starts_with(b"TMUX="))
        .find_map(|kv| needles.get(kv).copied())
}

/// Whether process `pid`'s environment holds one of `needles` (`TMUX=...` entries).
fn environ_has(pid: i32, needles: &[Vec<u8>]) -> bool {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) => env
            .split(|&b| b == 0)
            .any(|kv| needles.iter().any(|n| kv == n.as_slice())),
        Err(_) => false,
    }
}

/// The victims of a journal left by a dead reaper, re-checked against the live system before any
/// signal: whatever the file says, a pid is kept only if it is still the same process (start
/// time), of our uid, not protected, not in `exclude` (processes of live panes of other
/// sessions), and it, or an ancestor, carries one of `needles` in its environment: the
/// `TMUX=<socket>,<server pid>,<session number>` that tmux gave the session the journal names.
/// Returns (kept, refused with why).
pub fn journal_victims(
    scan: Scan<'_>,
    ids: &[Ident],
    needles: &[Vec<u8>],
    exclude: &HashSet<i32>,
) -> (Vec<Ident>, Vec<(Ident, &'static str)>) {
    let Scan {
        table,
        uid,
        protected,
        ..
    } = scan;
    let by_pid: HashMap<i32, &Proc> = table.iter().map(|p| (p.pid, p)).collect();
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for &id in ids {
        let why = match by_pid.get(&id.pid) {
            None => Some("gone"),
            Some(p) if p.start != id.start => Some("another process has its pid now"),
            Some(_) if id.pid <= 1 || protected.contains(&id.pid) => Some("protected"),
            Some(p) if p.uid != Some(uid) => Some("not ours (another uid)"),
            Some(_) if exclude.contains(&id.pid) => Some("belongs to another session"),
            Some(p) => {
                // Up the ppid chain (bounded): the victim itself or an ancestor must carry it.
                let mut cur = Some(*p);
                let mut marked = false;
                for _ in 0..64 {
                    let Some(c) = cur else { break };
                    if c.pid <= 1 || protected.contains(&c.pid) {
                        break;
                    }
                    if environ_has(c.pid, needles) {
                        marked = true;
                        break;
                    }
                    cur = by_pid.get(&c.ppid).copied();
                }
                (!marked).then_some("carries no TMUX marker of the journal's session")
            }
        };
        match why {
            None => kept.push(id),
            Some(w) => refused.push((id, w)),
        }
    }
    (kept, refused)
}

/// Whether `id` still names the same, living process (a zombie is gone). `None` when /proc
/// could not tell (out of file descriptors, say): not the same as gone.
pub fn living(id: Ident) -> Option<bool> {
    match Process::new(id.pid).and_then(|p| p.stat()) {
        Ok(st) => Some(st.starttime == id.start && st.state != 'Z' && st.state != 'X'),
        Err(procfs::ProcError::NotFound(_)) => Some(false),
        Err(_) => None,
    }
}

/// Whether `id` may still be alive: what /proc cannot tell counts as alive, so a teardown never
/// reports a survivor it could not see as gone.
pub fn alive(id: Ident) -> bool {
    living(id) != Some(false)
}

/// Whether some process `pid` runs (a zombie does not), whoever it is.
pub fn running(pid: u32) -> bool {
    Process::new(pid as i32)
        .and_then(|p| p.stat())
        .is_ok_and(|st| st.state != 'Z' && st.state != 'X')
}

/// This process's own identity.
pub fn myself() -> Ident {
    // Read once (a batch's journals each name their owner); a read that failed is tried again.
    static ME: std::sync::OnceLock<Ident> = std::sync::OnceLock::new();
    if let Some(me) = ME.get() {
        return *me;
    }
    let pid = std::process::id() as i32;
    match Process::myself().and_then(|p| p.stat()) {
        Ok(s) => *ME.get_or_init(|| Ident {
            pid,
            start: s.starttime,
        }),
        Err(_) => Ident { pid, start: 0 },
    }
}

/// A victim pinned for signalling.
#[derive(Debug)]
pub struct Victim {
    pub id: Ident,
    fd: Option<OwnedFd>,
}

impl Victim {
    /// A victim with no pidfd, for a stand-in process table that signals nothing.
    #[cfg(test)]
    pub(crate) fn unpinned(id: Ident) -> Victim {
        Victim { id, fd: None }
    }
}

/// Pin each identity: open a pidfd and check the start time again after opening, so the pidfd is
/// known to refer to the process we collected. A pid whose start time changed is dropped.
pub fn pin(ids: &[Ident]) -> Vec<Victim> {
    let mut out = Vec::new();
    for &id in ids {
        let Some(pid) = Pid::from_raw(id.pid) else {
            continue;
        };
        if id.pid <= 1 {
            continue;
        }
        let fd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
        // Known to be the same process after the pidfd was opened; one /proc cannot tell about
        // is not pinned (never signalled), and a teardown reports it as a survivor.
        if living(id) == Some(true) {
            out.push(Victim { id, fd });
        }
    }
    out
}

/// Send `sig` to a pinned victim. `false` if it was gone (or not the same process any more).
pub fn signal(v: &Victim, sig: Signal) -> bool {
    if v.id.pid <= 1 {
        return false;
    }
    match &v.fd {
        Some(fd) => rustix::process::pidfd_send_signal(fd, sig).is_ok(),
        None => {
            // No pidfd (an old kernel, or out of descriptors): re-check identity right before
            // the signal, and signal only what is known to be the same process.
            if living(v.id) != Some(true) {
                return false;
            }
            match Pid::from_raw(v.id.pid) {
                Some(pid) => rustix::process::kill_process(pid, sig).is_ok(),
                None => false,
            }
        }
    }
}

/// What a stop did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StopReport {
    pub term: usize,
    pub kill: usize,
    pub survivors: Vec<i32>,
    pub took: Duration,
}

/// The cooperative stop: SIGTERM all, poll until all are gone or `grace` passes (returning as soon
/// as they are gone), SIGKILL what is left, then wait briefly for the kills to land.
pub async fn stop(victims: &[Victim], grace: Duration) -> StopReport {
    stop_many(&[victims], grace, |_, _| {}).await.remove(0)
}

/// Wait until every victim of `left` is gone (those still alive stay in it), or `deadline`.
/// Looks at once, then after 1, 2, 4 ms and so on up to `every`: a polite process is gone within
/// a millisecond or two of its signal, and a reap should not wait a whole period for it. After
/// each look, `looked` is told what is still alive.
async fn wait_gone(
    left: &mut Vec<(usize, &Victim)>,
    deadline: Instant,
    every: Duration,
    looked: &mut impl FnMut(&[(usize, &Victim)]),
) {
    let mut pause = Duration::from_millis(1);
    loop {
        left.retain(|(_, v)| alive(v.id));
        looked(left);
        let now = Instant::now();
        if left.is_empty() || now >= deadline {
            return;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(every);
    }
}

/// The groups of a [`stop_many`], each told once, as soon as it is over.
struct Groups<F> {
    reports: Vec<StopReport>,
    over: Vec<bool>,
    t0: Instant,
    done: F,
}

impl<F: FnMut(usize, &StopReport)> Groups<F> {
    /// Every group not told yet that has no victim in `left` is over: tell it.
    fn settle(&mut self, left: &[(usize, &Victim)]) {
        let mut waiting = vec![false; self.over.len()];
        for (g, _) in left {
            waiting[*g] = true;
        }
        for (g, w) in waiting.into_iter().enumerate() {
            if !w && !self.over[g] {
                self.over[g] = true;
                self.reports[g].took = self.t0.elapsed();
                (self.done)(g, &self.reports[g]);
            }
        }
    }
}

/// [`stop`] for many groups at once (one per session of a batch), with one grace for all: the
/// groups are signalled together and polled together, and each gets its own report. Each poll
/// looks only at the victims still alive at the last one.
///
/// Each group is over on its own: `done(g, report)` is called once per group, as soon as none of
/// its victims lives: right after the SIGTERM for a group whose processes die of it, while the
/// groups with survivors are still waited for; after the grace, the SIGKILL and the wait for the
/// kills only for a group that needed them (its survivors, if any, in its report). Returns every
/// group's report, in order.
pub async fn stop_many(
    groups: &[&[Victim]],
    grace: Duration,
    done: impl FnMut(usize, &StopReport),
) -> Vec<StopReport> {
    let t0 = Instant::now();
    let mut g = Groups {
        reports: vec![StopReport::default(); groups.len()],
        over: vec![false; groups.len()],
        t0,
        done,
    };
    // (group, victim) of every victim, each signalled: the first look keeps those still alive.
    let mut left: Vec<(usize, &Victim)> = Vec::new();
    // Every SIGTERM first, in one tight loop (a pinned victim is signalled through its pidfd, which
    // names that very process or fails; one without is re-checked by `signal`; `term` counts the
    // signals sent, one to a zombie not reaped yet included), and only then the first look: the trees die together, and tmux destroys their sessions in a few turns of its
    // event loop rather than one a death (each turn polls every pane of the server).
    for (i, vs) in groups.iter().enumerate() {
        for v in vs.iter() {
            if signal(v, Signal::TERM) {
                g.reports[i].term += 1;
            }
            left.push((i, v));
        }
    }
    let mut looked = |l: &[(usize, &Victim)]| g.settle(l);
    wait_gone(
        &mut left,
        t0 + grace,
        Duration::from_millis(20),
        &mut looked,
    )
    .await;
    for (i, v) in &left {
        if alive(v.id) && signal(v, Signal::KILL) {
            g.reports[*i].kill += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut looked = |l: &[(usize, &Victim)]| g.settle(l);
    wait_gone(&mut left, deadline, Duration::from_millis(10), &mut looked).await;
    // What is left survived: its groups are over too, with their survivors.
    for (i, v) in &left {
        g.reports[*i].survivors.push(v.id.pid);
    }
    g.settle(&[]);
    g.reports
}

/// Memory of a set of processes: (rss, pss). PSS is `None` if any smaps_rollup was unreadable.
pub fn memory(ids: &[Ident]) -> (u64, Option<u64>) {
    let page = procfs::page_size();
    let mut rss = 0;
    let mut pss = Some(0u64);
    for id in ids {
        let Ok(p) = Process::new(id.pid) else {
            continue;
        };
        if let Ok(m) = p.statm() {
            rss += m.resident * page;
        }
        let one = p.smaps_rollup().ok().and_then(|r| {
            r.memory_map_rollup
                .iter()
                .next()
                .and_then(|m| m.extension.map.get("Pss").copied())
        });
        pss = match (pss, one) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    (rss, pss)
}

/// [`memory`] of each group, read on two threads for a large batch: a `smaps_rollup` walks the
/// page tables of its process (13 ms for 1 GB on this kind of machine).
pub fn memory_many(groups: &[Vec<Ident>]) -> Vec<(u64, Option<u64>)> {
    if groups.len() < 16 {
        return groups.iter().map(|g| memory(g)).collect();
    }
    let (a, b) = groups.split_at(groups.len() / 2);
    std::thread::scope(|s| {
        let other = std::thread::Builder::new()
            .name("memory".into())
            .spawn_scoped(s, || b.iter().map(|g| memory(g)).collect::<Vec<_>>());
        let mut all: Vec<_> = a.iter().map(|g| memory(g)).collect();
        match other.map(|t| t.join()) {
            Ok(Ok(rest)) => all.extend(rest),
            // No second thread to be had: this one reads the rest.
            Err(_) => all.extend(b.iter().map(|g| memory(g))),
            // A read that panicked: that half unknown, never the reap held up.
            Ok(Err(_)) => all.extend(b.iter().map(|_| (0, None))),
        }
        all
    })
}

/// Whether a client process looks orphaned: its parent is pid 1, or a known init/subreaper.
pub fn orphaned(pid: u32) -> Option<bool> {
    let st = Process::new(pid as i32).and_then(|p| p.stat()).ok()?;
    if st.ppid <= 1 {
        return Some(true);
    }
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", st.ppid)).ok()?;
    const REAPERS: &[&str] = &[
        "systemd",
        "init",
        "tini",
        "dumb-init",
        "docker-init",
        "s6-svscan",
        "runsv",
        "catatonit",
    ];
    Some(REAPERS.contains(&comm.trim()))
}

/// Whether the process `server` has collected the exit of its child `pid`: no process `pid` is
/// its child any more, zombie or running. `None` when `server` cannot be seen (another pid
/// namespace): then nothing can be told.
pub fn exit_collected(server: u32, pid: u32) -> Option<bool> {
    Process::new(server as i32).and_then(|p| p.stat()).ok()?;
    match Process::new(pid as i32).and_then(|p| p.stat()) {
        Ok(st) => Some(st.ppid != server as i32),
        Err(_) => Some(true),
    }
}

/// A process's start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot), if it runs.
pub fn start_time(pid: u32) -> Option<u64> {
    Process::new(pid as i32)
        .and_then(|p| p.stat())
        .ok()
        .filter(|st| st.state != 'Z' && st.state != 'X')
        .map(|st| st.starttime)
}

/// The direct children of `pid` (`/proc/<pid>/task/<pid>/children`: no scan of the table).
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The argv of a process, if readable.
pub fn cmdline(pid: i32) -> Option<Vec<String>> {
    Process::new(pid).and_then(|p| p.cmdline()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scan of the table `t` (shared with the late look's tests).
    pub(super) fn sc<'a>(
        t: &'a [Proc],
        tmux_env: Option<(&'a str, u32)>,
        uid: u32,
        protected: &'a HashSet<i32>,
    ) -> Scan<'a> {
        Scan {
            table: t,
            tmux_env,
            uid,
            protected,
        }
    }

    #[test]
    fn memory_many_keeps_each_group_in_its_place() {
        // 40 groups (two threads): ours alone in every third one, nobody (a pid that cannot be)
        // in the others; each answer where its group was.
        let me = myself();
        let nobody = Ident {
            pid: i32::MAX,
            start: 1,
        };
        let groups: Vec<Vec<Ident>> = (0..40)
            .map(|i| if i % 3 == 0 { vec![me] } else { vec![nobody] })
            .collect();
        let got = memory_many(&groups);
        assert_eq!(got.len(), 40);
        for (i, (rss, _)) in got.iter().enumerate() {
            assert_eq!(*rss > 0, i % 3 == 0, "group {i}: {rss}");
        }
        assert_eq!(memory_many(&groups[..3]).len(), 3);
    }

    fn p(pid: i32, ppid: i32, sid: i32) -> Proc {
        Proc {
            pid,
            ppid,
            sid,
            start: pid as u64 * 10,
            state: 'S',
            uid: Some(0),
        }
    }

    #[test]
    fn the_tmux_entry_names_its_chat_by_one_lookup() {
        let needles: HashMap<Vec<u8>, TmuxId> = [1u32, 2, 30]
            .iter()
            .map(|&n| (format!("TMUX=/s,9,{n}").into_bytes(), TmuxId(n)))
            .collect();
        let rows: &[(&[u8], Option<TmuxId>)] = &[
            (b"A=1\0TMUX=/s,9,2\0B=2\0", Some(TmuxId(2))),
            (b"TMUX=/s,9,30", Some(TmuxId(30))),
            (b"A=1\0TMUX=/s,8,2\0", None),
            (b"TMUX=/s,9,2x\0", None),
            (b"TMUX_PANE=%1\0XTMUX=/s,9,1\0", None),
            (b"", None),
            (b"TMUX=/other,9,1\0TMUX=/s,9,1\0", Some(TmuxId(1))),
        ];
        for (env, want) in rows {
            assert_eq!(
                tmux_entry_of(env, &needles),
                *want,
                "{}",
                String::from_utf8_lossy(env)
            );
        }
    }

    #[test]
    fn members_by_tree_and_sid() {
        // 100 pane (sid 100) -> 101 -> 102; 103 has sid 100 but ppid 1 (double fork);
        // 200 pane of session 2 -> 201; 300 unrelated; 1 init.
        let t = vec![
            p(1, 0, 1),
            p(100, 50, 100),
            p(101, 100, 100),
            p(102, 101, 100),
            p(103, 1, 100),
            p(104, 103, 104),
            p(200, 50, 200),
            p(201, 200, 200),
            p(300, 1, 300),
        ];
        let prot: HashSet<i32> = [0, 1, 50].into_iter().collect();
        let m = members(
            sc(&t, None, 0, &prot),
            &[(TmuxId(1), vec![100]), (TmuxId(2), vec![200])],
            &[],
        );
        let mut one: Vec<i32> = m[&TmuxId(1)].iter().map(|i| i.pid).collect();
        one.sort();
        assert_eq!(one, vec![100, 101, 102, 103, 104]);
        let mut two: Vec<i32> = m[&TmuxId(2)].iter().map(|i| i.pid).collect();
        two.sort();
        assert_eq!(two, vec![200, 201]);
        assert_eq!(m[&TmuxId(1)][0].start, 1000);
    }

    #[test]
    fn a_pane_pid_that_is_not_the_servers_child_is_a_stranger() {
        // Server 50; pane 100 is its child; "pane" 200 is a reused pid (ppid 1) with a child and
        // a process in its session: none of them is taken.
        let t = vec![
            p(50, 1, 50),
            p(100, 50, 100),
            p(101, 100, 100),
            p(200, 1, 200),
            p(201, 200, 200),
            p(202, 1, 200),
        ];
        let prot: HashSet<i32> = [0, 1, 50].into_iter().collect();
        let m = members(
            sc(&t, Some(("/nonexistent/s", 50)), u32::MAX, &prot),
            &[(TmuxId(1), vec![100]), (TmuxId(2), vec![200])],
            &[],
        );
        let one: Vec<i32> = m[&TmuxId(1)].iter().map(|i| i.pid).collect();
        assert_eq!(one.len(), 2);
        assert!(!m.contains_key(&TmuxId(2)), "{m:?}");
    }

    #[test]
    fn processes_of_another_sessions_pane_are_never_members() {
        // Server 50. Session 1's pane 100 -> 101. Pane 300 belongs to session 7 (a window moved
        // there from session 1: its processes still carry session 1's TMUX marker) -> 301, and
        // 302 has 300's sid. Whatever their environment says, none of 300-302 is session 1's.
        let t = vec![
            p(50, 1, 50),
            p(100, 50, 100),
            p(101, 100, 100),
            p(300, 50, 300),
            p(301, 300, 300),
            p(302, 1, 300),
        ];
        let prot: HashSet<i32> = [0, 1, 50].into_iter().collect();
        let m = members(
            sc(&t, None, 0, &prot),
            &[(TmuxId(1), vec![100])],
            &[(TmuxId(1), 100), (TmuxId(7), 300)],
        );
        let mut one: Vec<i32> = m[&TmuxId(1)].iter().map(|i| i.pid).collect();
        one.sort();
        assert_eq!(one, vec![100, 101]);
        assert!(
            !m.contains_key(&TmuxId(7)),
            "only wanted sessions are returned"
        );
        // Without the other pane listed, 302 (same sid as a pane we do not know) is nobody's,
        // and 300's tree is not ours either: only the wanted tree.
        let m = members(sc(&t, None, 0, &prot), &[(TmuxId(1), vec![100])], &[]);
        assert_eq!(m[&TmuxId(1)].len(), 2);
        // Session 1's own pane, listed under session 8 as well (its window linked there, or a
        // session grouped with it), stays session 1's.
        let m = members(
            sc(&t, None, 0, &prot),
            &[(TmuxId(1), vec![100])],
            &[(TmuxId(1), 100), (TmuxId(8), 100), (TmuxId(7), 300)],
        );
        let mut one: Vec<i32> = m[&TmuxId(1)].iter().map(|i| i.pid).collect();
        one.sort();
        assert_eq!(one, vec![100, 101]);
    }

    #[test]
    fn protected_pids_are_never_members() {
        let me = std::process::id() as i32;
        let t = vec![p(100, 1, 100), p(me, 100, 100)];
        let prot = protected(&t, Some(100));
        assert!(prot.contains(&me) && prot.contains(&100) && prot.contains(&1));
        let m = members(sc(&t, None, 0, &prot), &[(TmuxId(1), vec![100])], &[]);
        assert!(!m.contains_key(&TmuxId(1)));
    }

    #[test]
    fn reused_pid_is_not_alive_and_not_pinned() {
        let me = std::process::id() as i32;
        let real = Process::myself().unwrap().stat().unwrap().starttime;
        assert!(alive(Ident {
            pid: me,
            start: real
        }));
        let impostor = Ident {
            pid: me,
            start: real + 1,
        };
        assert!(!alive(impostor));
        assert!(pin(&[impostor]).is_empty());
        assert!(pin(&[Ident { pid: 1, start: 0 }]).is_empty());
    }

    #[test]
    fn signal_never_reaches_a_reused_pid() {
        // A child we own, pinned with the wrong start time: pin drops it, nothing is signalled.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let start = Process::new(pid).unwrap().stat().unwrap().starttime;
        assert!(pin(&[Ident {
            pid,
            start: start + 7
        }])
        .is_empty());
        // And a victim whose pidfd was opened stays tied to its own process.
        let v = pin(&[Ident { pid, start }]);
        assert_eq!(v.len(), 1);
        assert!(signal(&v[0], Signal::KILL));
        child.wait().unwrap();
        assert!(!alive(v[0].id));
        assert!(
            !signal(&v[0], Signal::TERM),
            "a reaped process cannot be signalled through its pidfd"
        );
    }

    #[test]
    fn an_exit_is_collected_once_the_parent_has_reaped_it() {
        // This test process plays the tmux server; its child, the pane's process.
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(exit_collected(me, pid), Some(false), "running");
        rustix::process::kill_process(Pid::from_raw(pid as i32).unwrap(), Signal::KILL).unwrap();
        let zombie = || Process::new(pid as i32).unwrap().stat().unwrap().state == 'Z';
        let t0 = Instant::now();
        while !zombie() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(zombie());
        assert_eq!(
            exit_collected(me, pid),
            Some(false),
            "a zombie not reaped yet"
        );
        child.wait().unwrap();
        assert_eq!(exit_collected(me, pid), Some(true), "reaped");
        // A server that cannot be seen tells nothing.
        assert_eq!(exit_collected(0x3fff_fff0, pid), None);
    }

    /// A child of this test, pinned once `ready` holds for it (polled with a deadline).
    fn pinned_child(cmd: &str, ready: impl Fn(i32) -> bool) -> (std::process::Child, Victim) {
        let child = std::process::Command::new("sh")
            .args(["-c", cmd])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let t0 = Instant::now();
        while !ready(pid) {
            assert!(t0.elapsed() < Duration::from_secs(5), "{cmd}: not ready");
            std::thread::sleep(Duration::from_millis(5));
        }
        let start = Process::new(pid).unwrap().stat().unwrap().starttime;
        let mut v = pin(&[Ident { pid, start }]);
        assert_eq!(v.len(), 1);
        (child, v.remove(0))
    }

    #[tokio::test]
    async fn each_group_is_over_as_soon_as_its_tree_is_gone() {
        let is_sleep =
            |pid: i32| cmdline(pid).is_some_and(|c| c.first().is_some_and(|a| a == "sleep"));
        // The trap is set before the exec: once `sleep` runs, it ignores SIGTERM.
        let (mut stubborn, sv) = pinned_child("trap '' TERM; exec sleep 30", is_sleep);
        let (mut polite, pv) = pinned_child("exec sleep 30", is_sleep);
        let t0 = Instant::now();
        let mut told: Vec<(usize, Duration, StopReport)> = Vec::new();
        let reports = stop_many(
            &[std::slice::from_ref(&sv), std::slice::from_ref(&pv), &[]],
            Duration::from_millis(1500),
            |g, r| told.push((g, t0.elapsed(), r.clone())),
        )
        .await;
        stubborn.wait().unwrap();
        polite.wait().unwrap();
        let order: Vec<usize> = told.iter().map(|t| t.0).collect();
        assert_eq!(order.len(), 3, "each group told once: {told:?}");
        // The empty group and the polite one first, long before the grace; the stubborn last.
        assert_eq!(order[2], 0, "{told:?}");
        for (g, at, r) in &told[..2] {
            assert!(
                *at < Duration::from_millis(1000),
                "group {g} told at {at:?}"
            );
            assert_eq!(r.kill, 0);
        }
        let (_, at, r) = &told[2];
        assert!(*at >= Duration::from_millis(1500), "{at:?}");
        assert_eq!((r.term, r.kill, r.survivors.len()), (1, 1, 0), "{r:?}");
        assert_eq!(reports[0], *r);
        assert_eq!((reports[1].term, reports[1].kill), (1, 0));
        assert_eq!(reports[2], told.iter().find(|t| t.0 == 2).unwrap().2);
    }

    #[test]
    fn tmux_env_format() {
        assert_eq!(tmux_env_value("/tmp/s", 42, TmuxId(3)), "/tmp/s,42,3");
    }
}
