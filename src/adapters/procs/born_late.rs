//! Nothing born late survives: after a chat's tree is stopped and its session killed, the process
//! table is read again for what the chat started after its victims were collected (during the
//! `before` hook, or during the grace from a parent that ignored SIGTERM and forked setsid'd
//! children that ignore SIGTERM and SIGHUP): every process carrying the chat's `TMUX` marker, in
//! the session of one of its victims, or a child of one still alive, and their descendants. Each
//! is pinned (pid and start time, pidfd) and sent SIGKILL (its chat's grace is over). A few rounds,
//! each one scan of the table for the whole wave of chats, never one per chat; whatever the last
//! look still finds is a survivor.

use crate::core::policy::TmuxId;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::{alive, pin, protected, signal, table, tmux_env_value, Ident, Proc, Scan, TableError};

/// How many times a wave kills what it found born late before its last look: a chat that keeps
/// forking faster than that is reported with its survivors.
const ROUNDS: usize = 3;

/// How long a round waits for its SIGKILLs to land.
const LAND: Duration = Duration::from_secs(2);

/// What a teardown saw of the server when it collected its victims: where the late look finds
/// the chats' `TMUX` markers, and the live panes of every session (never a chat's to take).
#[derive(Debug, Clone, Default)]
pub struct World {
    pub socket_path: Option<String>,
    pub server_pid: Option<u32>,
    /// Every live pane on the server at the victims' scan: (session number, pane pid).
    pub all_panes: Vec<(TmuxId, u32)>,
    /// The chats judged as their own pane in a shared session: session number to its pane's
    /// `%N` ([`super::pane_only_of`]).
    pub pane_of: HashMap<TmuxId, u32>,
}

impl World {
    pub fn of(l: &crate::core::listing::Listing) -> World {
        World {
            socket_path: l.socket_path.clone(),
            server_pid: l.server_pid,
            all_panes: l.all_panes.clone(),
            pane_of: super::pane_only_of(&l.sessions),
        }
    }
}

/// What the late look did for one chat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LateReport {
    /// Every process found born late, signalled or not.
    pub found: Vec<Ident>,
    /// How many of them were sent SIGKILL.
    pub kill: usize,
}

/// The processes born late of each chat of `chats` (session number, its victims), from one scan
/// of the table: see the module's comment. Never a protected pid, a zombie, a victim itself (what
/// the stop reports), or a process of a live pane of a session not in `chats` (`others`, as the
/// victims' scan listed them). Pure over the scan's table except for environ reads, only of
/// processes of its uid, and only with a `tmux_env` key.
///
/// Each exclusion above is one guard of one pass over the table, in the order the module's
/// comment argues them ([`Wave::set_aside`], then [`Wave::takable`]): each relies on the ones
/// before it.
pub fn late_members(
    scan: Scan<'_>,
    chats: &[(TmuxId, &[Ident])],
    others: &[(TmuxId, u32)],
) -> HashMap<TmuxId, Vec<Ident>> {
    late_members_scoped(scan, chats, others, &HashMap::new())
}

/// [`late_members`], where a process found by the `TMUX` marker of a chat of `pane_of` (judged
/// as its own pane in a shared session) is that chat's only with its `TMUX_PANE`
/// ([`super::env_in_pane`]).
pub fn late_members_scoped(
    scan: Scan<'_>,
    chats: &[(TmuxId, &[Ident])],
    others: &[(TmuxId, u32)],
    pane_of: &HashMap<TmuxId, u32>,
) -> HashMap<TmuxId, Vec<Ident>> {
    let mut w = Wave::of(scan, chats);
    w.set_aside(chats, others);
    let needles = needles_of(scan, chats);
    let mut seeds: Vec<(i32, TmuxId)> = Vec::new();
    for p in scan.table {
        if !w.takable(p) {
            continue;
        }
        // In a victim's session, or the child of a victim that still lives.
        let by_tree = w.still_victim(p.sid).or_else(|| {
            w.still_victim(p.ppid)
                .filter(|_| w.by_pid.contains_key(&p.ppid))
        });
        let n = by_tree.or_else(|| {
            if needles.is_empty() || p.uid != Some(scan.uid) {
                return None;
            }
            let env = std::fs::read(format!("/proc/{}/environ", p.pid)).ok()?;
            super::tmux_entry_of(&env, &needles).filter(|&n| super::env_in_pane(&env, n, pane_of))
        });
        if let Some(n) = n {
            w.take(p, n, &mut seeds);
        }
    }
    w.take_descendants(seeds);
    w.out
}

/// Each chat's whole `TMUX=` entry, to its number; none without the scan's `tmux_env` key.
fn needles_of(scan: Scan<'_>, chats: &[(TmuxId, &[Ident])]) -> HashMap<Vec<u8>, TmuxId> {
    match scan.tmux_env {
        Some((socket, server)) => chats
            .iter()
            .map(|(n, _)| {
                let v = tmux_env_value(socket, server, *n);
                (format!("TMUX={v}").into_bytes(), *n)
            })
            .collect(),
        None => HashMap::new(),
    }
}

/// One late look over the table for a wave of chats: the table indexed, the chats' victims, and
/// what each process went to so far (`None`: nobody's, set aside).
struct Wave<'t> {
    scan: Scan<'t>,
    by_pid: HashMap<i32, &'t Proc>,
    children: HashMap<i32, Vec<&'t Proc>>,
    victims: HashSet<Ident>,
    /// A victim's pid to its chat and its start time.
    victim_of: HashMap<i32, (TmuxId, u64)>,
    owner: HashMap<i32, Option<TmuxId>>,
    out: HashMap<TmuxId, Vec<Ident>>,
}

impl<'t> Wave<'t> {
    fn of(scan: Scan<'t>, chats: &[(TmuxId, &[Ident])]) -> Self {
        let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
        for p in scan.table {
            children.entry(p.ppid).or_default().push(p);
        }
        Wave {
            scan,
            by_pid: scan.table.iter().map(|p| (p.pid, p)).collect(),
            children,
            victims: chats.iter().flat_map(|c| c.1.iter().copied()).collect(),
            victim_of: chats
                .iter()
                .flat_map(|(n, ids)| ids.iter().map(move |i| (i.pid, (*n, i.start))))
                .collect(),
            owner: HashMap::new(),
            out: HashMap::new(),
        }
    }

    fn is_victim(&self, p: &Proc) -> bool {
        self.victims.contains(&Ident {
            pid: p.pid,
            start: p.start,
        })
    }

    /// Set aside, as nobody's, the live panes of other sessions (`others`) and their trees: a
    /// chat's own pane (a victim), listed under another session too (its window linked there, a
    /// grouped session), stays the chat's. So is any other live child of the tmux server: a pane
    /// (or a job) started since the victims' scan, one someone added to the chat's session
    /// meanwhile, is theirs, never the chat's (issue 49), and so is its tree.
    fn set_aside(&mut self, chats: &[(TmuxId, &[Ident])], others: &[(TmuxId, u32)]) {
        let ours: HashSet<TmuxId> = chats.iter().map(|c| c.0).collect();
        let server = self.scan.tmux_env.map(|(_, s)| s as i32);
        let mut stack: Vec<i32> = Vec::new();
        for &(n, pp) in others {
            let pp = pp as i32;
            let Some(p) = self.by_pid.get(&pp) else {
                continue;
            };
            if ours.contains(&n) || self.is_victim(p) || server.is_some_and(|s| p.ppid != s) {
                continue;
            }
            if self.owner.insert(pp, None).is_none() {
                stack.push(pp);
            }
        }
        if let Some(srv) = server {
            for p in self.scan.table.iter().filter(|p| p.ppid == srv) {
                if !self.is_victim(p) && self.owner.insert(p.pid, None).is_none() {
                    stack.push(p.pid);
                }
            }
        }
        while let Some(pid) = stack.pop() {
            for c in self.children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if self.owner.insert(c.pid, None).is_none() {
                    stack.push(c.pid);
                }
            }
        }
    }

    /// Whether `p` may be taken: no pid <= 1, zombie, protected pid, victim, or process already
    /// someone's (or set aside).
    fn takable(&self, p: &Proc) -> bool {
        p.pid > 1
            && p.state != 'Z'
            && p.state != 'X'
            && !self.scan.protected.contains(&p.pid)
            && !self.owner.contains_key(&p.pid)
            && !self.is_victim(p)
    }

    /// The chat whose victim `pid` still means: a victim's pid means that victim only while no
    /// other process has it, so a session id or a parent pid equal to it is the victim's when the
    /// pid is free or still the victim.
    fn still_victim(&self, pid: i32) -> Option<TmuxId> {
        let &(n, start) = self.victim_of.get(&pid)?;
        match self.by_pid.get(&pid) {
            None => Some(n),
            Some(p) if p.start == start => Some(n),
            Some(_) => None,
        }
    }

    /// Take the descendants of what was taken (`seeds`: pid, chat), whatever their environment
    /// says.
    fn take_descendants(&mut self, mut seeds: Vec<(i32, TmuxId)>) {
        while let Some((pid, n)) = seeds.pop() {
            for c in self.children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if self.takable(c) {
                    self.owner.insert(c.pid, Some(n));
                    seeds.push((c.pid, n));
                    self.out.entry(n).or_default().push(Ident {
                        pid: c.pid,
                        start: c.start,
                    });
                }
            }
        }
    }

    /// Take `p` for chat `n`, and look at its children next (`seeds`).
    fn take(&mut self, p: &Proc, n: TmuxId, seeds: &mut Vec<(i32, TmuxId)>) {
        self.owner.insert(p.pid, Some(n));
        seeds.push((p.pid, n));
        self.out.entry(n).or_default().push(Ident {
            pid: p.pid,
            start: p.start,
        });
    }
}

/// Look again, and end what was born late, for a wave of chats (session number, its victims):
/// at most [`ROUNDS`] rounds of (one scan, SIGKILL to what it found, a wait for the kills to land),
/// then, if the last round still found any, one last scan whose finds are reported unsignalled.
/// Every chat of `chats` gets a report; an unreadable table is an error (nothing can be told).
pub async fn end_late(
    chats: &[(TmuxId, Vec<Ident>)],
    world: &World,
) -> Result<HashMap<TmuxId, LateReport>, TableError> {
    let mut reports: HashMap<TmuxId, LateReport> =
        chats.iter().map(|c| (c.0, LateReport::default())).collect();
    if chats.is_empty() {
        return Ok(reports);
    }
    let views: Vec<(TmuxId, &[Ident])> = chats.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let env = match (&world.socket_path, world.server_pid) {
        (Some(sp), Some(pid)) => Some((sp.as_str(), pid)),
        _ => None,
    };
    let uid = rustix::process::getuid().as_raw();
    for round in 0..=ROUNDS {
        let t = table()?;
        let prot = protected(&t, world.server_pid);
        let scan = Scan {
            table: &t,
            tmux_env: env,
            uid,
            protected: &prot,
        };
        let found = late_members_scoped(scan, &views, &world.all_panes, &world.pane_of);
        if found.is_empty() {
            break;
        }
        let mut pinned = Vec::new();
        for (n, ids) in &found {
            let rep = reports.entry(*n).or_default();
            for id in ids {
                if !rep.found.contains(id) {
                    rep.found.push(*id);
                }
            }
            if round < ROUNDS {
                pinned.push((*n, pin(ids)));
            }
        }
        if round == ROUNDS {
            break;
        }
        for (n, vs) in &pinned {
            for v in vs {
                if signal(v, Signal::KILL) {
                    reports.entry(*n).or_default().kill += 1;
                }
            }
        }
        let deadline = Instant::now() + LAND;
        let mut pause = Duration::from_millis(1);
        while pinned.iter().any(|(_, vs)| vs.iter().any(|v| alive(v.id))) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        tracing::warn!(
            processes = found.values().map(Vec::len).sum::<usize>(),
            chats = found.len(),
            round,
            "processes born after the victims' scan: sent SIGKILL"
        );
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::adapters::procs::tests::sc;

    fn p(pid: i32, ppid: i32, sid: i32, start: u64) -> Proc {
        Proc {
            pid,
            ppid,
            sid,
            start,
            state: 'S',
            uid: Some(0),
        }
    }

    fn pids(m: &HashMap<TmuxId, Vec<Ident>>, n: TmuxId) -> Vec<i32> {
        let mut v: Vec<i32> = m.get(&n).into_iter().flatten().map(|i| i.pid).collect();
        v.sort();
        v
    }

    #[test]
    fn what_a_chat_started_late_is_found_by_session_and_by_parent() {
        // Server 50. Chat 1's victims: pane 100 (dead now) and 101 (a survivor, same start).
        // Late: 110 (sid 100, ppid 1), its child 111 (setsid: sid 111), 120 (child of the
        // surviving 101), 130 (sid 130, ppid 1: nothing ties it to the chat). Chat 7's live pane
        // 300 and its child 301 (in sid 100? no: its own sid) are never taken. Pid 200 reuses
        // the pid of chat 1's dead victim 200 (another start): neither it nor its session is
        // the chat's.
        let v1 = [
            Ident {
                pid: 100,
                start: 1000,
            },
            Ident {
                pid: 101,
                start: 1010,
            },
            Ident {
                pid: 200,
                start: 2000,
            },
        ];
        let t = vec![
            p(1, 0, 1, 1),
            p(50, 1, 50, 500),
            p(101, 1, 100, 1010),
            p(110, 1, 100, 1100),
            p(111, 110, 111, 1110),
            p(120, 101, 120, 1200),
            p(130, 1, 130, 1300),
            p(200, 1, 200, 9999),
            p(201, 200, 200, 2010),
            p(300, 50, 300, 3000),
            p(301, 300, 100, 3010),
        ];
        let prot: HashSet<i32> = [0, 1, 50].into_iter().collect();
        let m = late_members(
            sc(&t, Some(("/nonexistent/s", 50)), u32::MAX, &prot),
            &[(TmuxId(1), &v1)],
            &[(TmuxId(7), 300)],
        );
        assert_eq!(pids(&m, TmuxId(1)), vec![110, 111, 120], "{m:?}");
        // Without the other pane listed, 301 (in the dead victim's session) is taken, and 300
        // is not (nothing ties it to the chat).
        let m = late_members(sc(&t, None, 0, &prot), &[(TmuxId(1), &v1)], &[]);
        assert_eq!(pids(&m, TmuxId(1)), vec![110, 111, 120, 301], "{m:?}");
        // A chat with no victims and no marker key finds nothing.
        let m = late_members(sc(&t, None, 0, &prot), &[(TmuxId(2), &[])], &[]);
        assert!(m.is_empty(), "{m:?}");
    }

    #[test]
    fn a_chats_own_pane_listed_under_another_session_stays_the_chats() {
        // Server 50. Chat 1's pane 100 (a victim, still alive) is also listed under session 8
        // (its window linked there, or a grouped session); 105 was born under it late.
        let v1 = [Ident {
            pid: 100,
            start: 1000,
        }];
        let t = vec![
            p(50, 1, 50, 500),
            p(100, 50, 100, 1000),
            p(105, 100, 105, 1050),
        ];
        let prot: HashSet<i32> = [0, 1, 50].into_iter().collect();
        let env = Some(("/nonexistent/s", 50));
        let m = late_members(
            sc(&t, env, u32::MAX, &prot),
            &[(TmuxId(1), &v1)],
            &[(TmuxId(1), 100), (TmuxId(8), 100)],
        );
        assert_eq!(pids(&m, TmuxId(1)), vec![105], "{m:?}");
        // A pane started since the victims' scan (a child of the server, in no listing), even
        // in a victim's process session, is not the chat's: neither it nor its tree.
        let t3 = vec![
            p(50, 1, 50, 500),
            p(100, 50, 100, 1000),
            p(400, 50, 400, 4000),
            p(401, 400, 100, 4010),
        ];
        let m = late_members(
            sc(&t3, env, u32::MAX, &prot),
            &[(TmuxId(1), &v1)],
            &[(TmuxId(1), 100)],
        );
        assert!(pids(&m, TmuxId(1)).is_empty(), "{m:?}");
        // Another session's own pane (not a victim) keeps its tree.
        let t2 = vec![
            p(50, 1, 50, 500),
            p(300, 50, 300, 3000),
            p(305, 300, 100, 3050),
        ];
        let m = late_members(
            sc(&t2, env, u32::MAX, &prot),
            &[(TmuxId(1), &v1)],
            &[(TmuxId(8), 300)],
        );
        assert!(pids(&m, TmuxId(1)).is_empty(), "{m:?}");
    }
}
