//! One path for every audit line, whoever writes it (a reap, a warning, a chat lost with its
//! server, a failed resume, a forgotten or aged-out tombstone): appended to the audit log and
//! counted in the metrics, here and nowhere else. A line that cannot be appended is logged as an
//! error naming its session and outcome, and the caller goes on (or, for a command the user ran,
//! fails with it). Each outcome's own log line stays where its story is told: the teardown's
//! `reaped` / `reap aborted` / `reap failed` (teardown/finish.rs), the sweep's `warned`, and so on.
//! The `--once` output and the after-hook get the teardown's lines from what it returns.

use crate::adapters::metrics::Metrics;
use crate::adapters::state::{AuditLine, StateDir, StateError};

/// Append `line` to the audit log and count it.
pub(crate) fn record(
    state: &StateDir,
    metrics: &Metrics,
    line: &AuditLine,
) -> Result<(), StateError> {
    record_many(state, metrics, &[line])
}

/// [`record`] for many lines at once (a wave of a batch): each counted, all appended under one
/// taking of the audit lock ([`StateDir::append_audit_many`]). A failure is logged for each line.
pub(crate) fn record_many(
    state: &StateDir,
    metrics: &Metrics,
    lines: &[&AuditLine],
) -> Result<(), StateError> {
    for l in lines {
        metrics.record_reap(l);
    }
    let written = state.append_audit_many(lines);
    if let Err(e) = &written {
        for l in lines {
            tracing::error!(
                error = %e,
                session = %l.session,
                outcome = l.outcome.as_str(),
                "failed to append the audit line"
            );
        }
    }
    written
}
