//! The rules around a reap in flight: which sessions need a command-line cid, when a reap mark
//! is stale or holds the session, and the re-check on data taken after the mark.

use std::fmt;

use super::{valid_cid, Decision, Policy, ReapReason, Session, State};

/// The re-check's refusal: the session changed since the reap was decided; it is now `state`,
/// for the decision's reason `why`.
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    pub state: State,
    pub why: String,
}

impl fmt::Display for Changed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the session changed: now {} ({})",
            self.state.as_str(),
            self.why
        )
    }
}

/// Whether a session's conversation id must be looked for on the `claude` command lines (a
/// read of /proc): its `@ccs_cid` is not a valid cid, and the decision hinges on one (it is kept
/// for want of one, or is to be reaped with it), or a `status` shows every cid.
pub fn needs_cmdline_cid(d: &Decision, s: &Session, for_status: bool) -> bool {
    !valid_cid(s.cid.trim())
        && (for_status || matches!(d.state, State::NoCid | State::Stuck | State::Exited))
}

/// Whether a fresh decision (taken after the reap mark was set) still allows the reap that
/// `reason` started: the re-check of every reap, on data newer than the mark. `decided_idle_ms`
/// is the idle age the reap was decided on; `force` (`reap --force`) skips the check.
pub fn still_reapable(
    fresh: &Decision,
    decided_idle_ms: Option<u64>,
    reason: ReapReason,
    force: bool,
    p: &Policy,
) -> Result<(), Changed> {
    if force {
        return Ok(());
    }
    let ok = match reason {
        ReapReason::Idle => fresh.reap_reason() == Some(ReapReason::Idle),
        // The pressure rules chose it for how long it had been idle: its clock must not have
        // restarted since (a short turn in between), and it must still be past the floor.
        ReapReason::Memory
        | ReapReason::MaxIdle
        | ReapReason::Bloat
        | ReapReason::Room
        | ReapReason::MaxLive => {
            matches!(fresh.state, State::Idle | State::Expired)
                && fresh.idle_ms >= decided_idle_ms
                && fresh.idle_ms.unwrap_or(0) >= p.min_idle_ms
        }
        ReapReason::Stuck => fresh.reap_reason() == Some(ReapReason::Stuck),
        ReapReason::Exited => fresh.reap_reason() == Some(ReapReason::Exited),
        // Never the reason of a reap: a live session is never taken for lost.
        ReapReason::ServerDied => false,
        ReapReason::Manual => {
            !matches!(
                fresh.state,
                State::Unknown
                    | State::Busy
                    | State::Stuck
                    | State::Viewed
                    | State::NoCid
                    | State::Unseen
                    | State::Pinned
            ) && (fresh.cid.is_some() || p.reap_without_cid)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Changed {
            state: fresh.state,
            why: fresh.why.clone(),
        })
    }
}
