//! Degraded states: ccs-reap runs but cannot do its job, and must say so (a metric, `/healthz`,
//! one log line when it starts and one when it ends, never one per sweep; it ends only once clear
//! for [`CLEAR_SWEEPS`] sweeps, so a flapping state is said once). Pure: the daemon feeds
//! each sweep's facts to a [`Tracker`] and acts on the [`Change`]s it returns.

use std::collections::BTreeMap;

/// How many sweeps in a row every chat must be `no-cid` before it is a degraded state (at the
/// default 30 s interval, 5 minutes): a studio just started, whose chats have not answered yet,
/// is not one; a studio whose hook never marks a cid is.
pub const NO_CID_SWEEPS: u32 = 10;

/// How many sweeps in a row a degraded state must be clear before it ends: a state that flaps
/// (an activity file on a flaky mount, a server restarting) is said once, not twice a sweep.
pub const CLEAR_SWEEPS: u32 = 3;

/// Why nothing can be reaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// A configured activity file (`CCS_ACTIVITY_FILES`) is missing or unreadable: every session
    /// is kept.
    ActivityFile,
    /// No tmux server listens at the socket.
    NoServer,
    /// Every chat has been `no-cid` for [`NO_CID_SWEEPS`] sweeps: none can be resumed, so none
    /// is reaped.
    NoCid,
}

impl Reason {
    pub const ALL: [Reason; 3] = [Reason::ActivityFile, Reason::NoServer, Reason::NoCid];

    /// The label of `ccs_reap_degraded{reason=...}`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ActivityFile => "activity-file",
            Reason::NoServer => "no-server",
            Reason::NoCid => "no-cid",
        }
    }
}

/// What one sweep saw, for the degraded states.
#[derive(Debug, Clone, Default)]
pub struct SweepSeen {
    /// Why an activity file could not be read, if one could not.
    pub activity_problem: Option<String>,
    /// Whether a tmux server answered (`None`: tmux failed otherwise; not judged here).
    pub server_up: Option<bool>,
    /// The server exited right after this reaper took its last chat (`empty`): no server is
    /// then not a degraded state.
    pub emptied: bool,
    /// The socket's path, for the message.
    pub socket: String,
    /// Chats seen, and how many of them are `no-cid` (kept for want of a conversation id).
    pub chats: usize,
    pub no_cid: usize,
    /// Whether some chat has a conversation id.
    pub any_cid: bool,
}

/// A degraded state that started (with why) or ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Started(Reason, String),
    Ended(Reason),
}

/// The degraded states across sweeps.
#[derive(Debug, Default)]
pub struct Tracker {
    active: BTreeMap<Reason, String>,
    /// Sweeps in a row in which every chat was `no-cid`.
    no_cid_run: u32,
    /// For each state still on: sweeps in a row that found it clear.
    clear_run: BTreeMap<Reason, u32>,
}

impl Tracker {
    /// One sweep's facts: the states that started or ended with it.
    pub fn sweep(&mut self, seen: &SweepSeen) -> Vec<Change> {
        let all_no_cid = seen.chats > 0 && seen.no_cid > 0 && !seen.any_cid;
        self.no_cid_run = if all_no_cid {
            self.no_cid_run.saturating_add(1)
        } else {
            0
        };
        let now: [(Reason, Option<String>); 3] = [
            (
                Reason::ActivityFile,
                seen.activity_problem
                    .as_ref()
                    .map(|e| format!("an activity file (CCS_ACTIVITY_FILES) is unreadable, every session is kept: {e}")),
            ),
            (
                Reason::NoServer,
                (seen.server_up == Some(false) && !seen.emptied).then(|| {
                    format!(
                        "no tmux server at {}: nothing is reaped until one listens there (check CCS_TMUX_SOCKET / CCS_TMUX_SOCKET_PATH, TMUX_TMPDIR, PrivateTmp=)",
                        seen.socket
                    )
                }),
            ),
            (
                Reason::NoCid,
                (self.no_cid_run >= NO_CID_SWEEPS).then(|| {
                    format!(
                        "every chat ({}) has had no conversation id for {} sweeps: none is reaped (are their agents' hooks wired? `ccs-reap doctor` says how)",
                        seen.chats, self.no_cid_run
                    )
                }),
            ),
        ];
        let mut changes = Vec::new();
        for (reason, why) in now {
            match (why, self.active.contains_key(&reason)) {
                (Some(why), false) => {
                    self.active.insert(reason, why.clone());
                    changes.push(Change::Started(reason, why));
                }
                // Still on: the first message stands (it is not said again).
                (Some(_), true) => {
                    self.clear_run.remove(&reason);
                }
                (None, true) => {
                    let run = self.clear_run.entry(reason).or_insert(0);
                    *run += 1;
                    if *run >= CLEAR_SWEEPS {
                        self.clear_run.remove(&reason);
                        self.active.remove(&reason);
                        changes.push(Change::Ended(reason));
                    }
                }
                (None, false) => {}
            }
        }
        changes
    }

    /// The states on now, with why.
    pub fn active(&self) -> &BTreeMap<Reason, String> {
        &self.active
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(activity: bool, up: Option<bool>, chats: usize, no_cid: usize) -> SweepSeen {
        SweepSeen {
            activity_problem: activity.then(|| "/x: No such file".into()),
            server_up: up,
            emptied: false,
            socket: "/s".into(),
            chats,
            no_cid,
            any_cid: no_cid < chats && chats > 0,
        }
    }

    #[test]
    fn each_state_is_said_once_when_it_starts_and_once_when_it_ends() {
        let mut t = Tracker::default();
        // (what the sweep saw, the changes it makes)
        let table: Vec<(SweepSeen, Vec<Reason>, Vec<Reason>)> = vec![
            (seen(false, Some(true), 2, 0), vec![], vec![]),
            (
                seen(true, Some(true), 2, 0),
                vec![Reason::ActivityFile],
                vec![],
            ),
            (seen(true, Some(true), 2, 0), vec![], vec![]),
            (
                seen(true, Some(false), 0, 0),
                vec![Reason::NoServer],
                vec![],
            ),
            // Clear: they end only after CLEAR_SWEEPS (3) clear sweeps in a row.
            (seen(false, Some(true), 2, 0), vec![], vec![]),
            // A flap: on again is not said again, and restarts the clear run.
            (seen(true, Some(false), 0, 0), vec![], vec![]),
            (seen(false, Some(true), 2, 0), vec![], vec![]),
            (seen(false, Some(true), 2, 0), vec![], vec![]),
            (
                seen(false, Some(true), 2, 0),
                vec![],
                vec![Reason::ActivityFile, Reason::NoServer],
            ),
            // tmux failed otherwise: not "no server".
            (seen(false, None, 0, 0), vec![], vec![]),
        ];
        for (i, (s, started, ended)) in table.into_iter().enumerate() {
            let c = t.sweep(&s);
            let st: Vec<Reason> = c
                .iter()
                .filter_map(|c| match c {
                    Change::Started(r, _) => Some(*r),
                    _ => None,
                })
                .collect();
            let en: Vec<Reason> = c
                .iter()
                .filter_map(|c| match c {
                    Change::Ended(r) => Some(*r),
                    _ => None,
                })
                .collect();
            assert_eq!((st, en), (started, ended), "row {i}");
        }
        assert!(t.active().is_empty());
    }

    #[test]
    fn no_cid_is_degraded_after_n_sweeps_in_a_row_only() {
        let mut t = Tracker::default();
        for _ in 1..NO_CID_SWEEPS {
            assert!(t.sweep(&seen(false, Some(true), 3, 3)).is_empty());
        }
        // One chat with a cid breaks the run.
        assert!(t.sweep(&seen(false, Some(true), 3, 1)).is_empty());
        for _ in 1..NO_CID_SWEEPS {
            assert!(t.sweep(&seen(false, Some(true), 3, 3)).is_empty());
        }
        let c = t.sweep(&seen(false, Some(true), 3, 3));
        assert!(
            matches!(&c[..], [Change::Started(Reason::NoCid, why)] if why.contains("doctor")),
            "{c:?}"
        );
        assert!(t.sweep(&seen(false, Some(true), 3, 3)).is_empty());
        // No chat at all: not a no-cid studio (once clear for CLEAR_SWEEPS sweeps).
        for _ in 1..CLEAR_SWEEPS {
            assert!(t.sweep(&seen(false, Some(true), 0, 0)).is_empty());
        }
        assert_eq!(
            t.sweep(&seen(false, Some(true), 0, 0)),
            vec![Change::Ended(Reason::NoCid)]
        );
    }
}
