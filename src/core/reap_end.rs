//! How a reap ends, typed: [`ReapEnd`] (reaped, aborted with an [`Abort`], failed with a
//! [`Failure`]). The audit line's `outcome` and `error` are built from it in one place,
//! [`audit_line`]; each reason's text is the `error` the audit line has always
//! carried.

use std::fmt;

use crate::core::policy::{Changed, FenceFail};
use crate::core::records::{AuditLine, Outcome};

/// One reap, over: how it ended, and its audit line as written (built from `end` by
/// [`audit_line`]).
#[derive(Debug, Clone)]
pub struct Finished {
    pub end: ReapEnd,
    pub line: AuditLine,
}

/// How one reap ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ReapEnd {
    /// The whole tree is gone and the session with it.
    Reaped,
    /// Stopped before its first signal: nothing of the chat's was touched.
    Aborted(Abort),
    /// Something could not be done, or survived.
    Failed(Failure),
}

impl ReapEnd {
    /// The audit line's outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            ReapEnd::Reaped => Outcome::Reaped,
            ReapEnd::Aborted(_) => Outcome::Aborted,
            ReapEnd::Failed(_) => Outcome::Failed,
        }
    }

    /// The audit line's `error`: the reason's text (none for a reap that went through).
    pub fn error(&self) -> Option<String> {
        match self {
            ReapEnd::Reaped => None,
            ReapEnd::Aborted(a) => a.text(),
            ReapEnd::Failed(f) => Some(f.to_string()),
        }
    }
}

/// Why a reap was aborted before its first signal.
#[derive(Debug, Clone, PartialEq)]
pub enum Abort {
    /// The guarded tmux call of the fence failed.
    FenceUnchecked(String),
    /// The fence stopped it.
    FencedOff(FenceFail),
    /// The fresh listing or the activity files could not be read for the re-check.
    LivenessUnknown(String),
    /// The tmux server is not the one the session was listed on.
    ServerRestarted,
    /// The fresh listing no longer shows the session under a name of ours.
    GoneOrRenamed,
    /// The test-and-set left no mark of ours on it.
    NotHeld,
    /// Same `$N`, another name.
    Renamed,
    /// The pure decision gave nothing for the fresh session.
    NoFreshDecision,
    /// The re-check: the session changed since the decision.
    Changed(Changed),
    /// The `before` hook said no.
    Vetoed { hook: String, status: String },
    /// The `before` hook could not be run: a configured veto fails closed.
    VetoUnrunnable { hook: String, error: String },
    /// A prompt hook took the chat back before the fence (its mark cleared): the prompt goes on.
    PromptArrived,
    /// A dead reaper's reap that had not reached its first signal: released.
    Released,
    /// A request the batch never reached (not expected): the line as it began, no error.
    NotReached,
}

impl Abort {
    fn text(&self) -> Option<String> {
        Some(match self {
            Abort::FenceUnchecked(e) => format!("the fence could not be checked: {e}"),
            Abort::FencedOff(why) => format!("fenced off: {}", why.as_str()),
            Abort::LivenessUnknown(e) => format!("liveness unknown on re-check: {e}"),
            Abort::ServerRestarted => {
                "the tmux server was restarted since the session was listed".into()
            }
            Abort::GoneOrRenamed => "the session is gone or was renamed".into(),
            Abort::NotHeld => {
                "the session became busy or viewed, is no longer the chat's pane alone, or another reap holds it"
                    .into()
            }
            Abort::Renamed => "the session was renamed".into(),
            Abort::NoFreshDecision => "no fresh decision".into(),
            Abort::Changed(c) => c.to_string(),
            Abort::Vetoed { hook, status } => format!("vetoed by the hook {hook} before ({status})"),
            Abort::VetoUnrunnable { hook, error } => format!(
                "vetoed: the hook {hook} before could not be run ({error}); a configured veto fails closed"
            ),
            Abort::PromptArrived => {
                "a prompt arrived before the fence: the chat was taken back, nothing signalled"
                    .into()
            }
            Abort::Released => {
                "released: the reaper that began it stopped before its first signal".into()
            }
            Abort::NotReached => return None,
        })
    }
}

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_deref().unwrap_or_default())
    }
}

/// Why a reap failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Nothing attempted: the audit line and the tombstone could not be written.
    StateDirUnwritable(String),
    /// The test-and-set could not be run.
    Mark(String),
    /// Nothing attempted: a journal or a tombstone could not be written.
    NotAttempted(String),
    /// The process table could not be read.
    ProcessTable(String),
    /// The trees were stopped, but `kill-session` failed.
    KillSession(String),
    /// Processes of the tree lived on.
    Survivors(Vec<i32>),
    /// The batch panicked before this reap's line was written.
    Panicked(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::StateDirUnwritable(e) => {
                write!(f, "not attempted: the state dir cannot be written: {e}")
            }
            Failure::Mark(e) => write!(f, "failed to mark the session: {e}"),
            Failure::NotAttempted(e) => write!(f, "not attempted: {e}"),
            Failure::ProcessTable(e) => f.write_str(e),
            Failure::KillSession(e) => write!(f, "failed to kill the session: {e}"),
            Failure::Survivors(pids) => write!(f, "processes survived: {pids:?}"),
            Failure::Panicked(why) => write!(f, "the teardown panicked: {why}"),
        }
    }
}

/// The audit line of a reap that ended so: `facts` (what was found and done: pids, signals,
/// memory, survivors) with the outcome and the error of `end`.
pub fn audit_line(mut facts: AuditLine, end: &ReapEnd) -> AuditLine {
    facts.outcome = end.outcome();
    facts.error = end.error();
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_end_gives_the_outcome_and_the_error_the_audit_line_always_had() {
        let table: &[(ReapEnd, Outcome, Option<&str>)] = &[
            (ReapEnd::Reaped, Outcome::Reaped, None),
            (
                ReapEnd::Aborted(Abort::GoneOrRenamed),
                Outcome::Aborted,
                Some("the session is gone or was renamed"),
            ),
            (
                ReapEnd::Aborted(Abort::FencedOff(FenceFail::LeaseExpired)),
                Outcome::Aborted,
                Some("fenced off: this reap's mark is too old to finish the teardown under it"),
            ),
            (
                ReapEnd::Aborted(Abort::Vetoed {
                    hook: "/h".into(),
                    status: "exit status: 3".into(),
                }),
                Outcome::Aborted,
                Some("vetoed by the hook /h before (exit status: 3)"),
            ),
            (ReapEnd::Aborted(Abort::NotReached), Outcome::Aborted, None),
            (
                ReapEnd::Failed(Failure::Survivors(vec![7, 8])),
                Outcome::Failed,
                Some("processes survived: [7, 8]"),
            ),
            (
                ReapEnd::Failed(Failure::NotAttempted("disk full".into())),
                Outcome::Failed,
                Some("not attempted: disk full"),
            ),
        ];
        for (end, outcome, error) in table {
            assert_eq!(end.outcome(), *outcome, "{end:?}");
            assert_eq!(end.error().as_deref(), *error, "{end:?}");
        }
    }
}
