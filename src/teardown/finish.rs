//! The end of every reap: the outcome from what survived, and the audit line (log, file, metrics).

use std::time::Instant;

use crate::context::Reaper;
use crate::procs;
use crate::state::{AuditLine, Outcome};

/// The outcome from what survived: `reaped` only when no victim lives and nothing failed.
pub(crate) fn verify(line: &mut AuditLine, ids: &[procs::Ident]) {
    line.survivors = ids
        .iter()
        .filter(|i| procs::alive(**i))
        .map(|i| i.pid)
        .collect();
    if line.survivors.is_empty() && line.outcome != Outcome::Failed {
        line.outcome = Outcome::Reaped;
    } else if !line.survivors.is_empty() {
        line.outcome = Outcome::Failed;
        line.error
            .get_or_insert_with(|| format!("processes survived: {:?}", line.survivors));
    }
}

/// Log the line, append it to the audit log, count it.
pub(crate) fn finish(r: &Reaper, mut line: AuditLine, t0: Instant) -> AuditLine {
    line.took_ms = t0.elapsed().as_millis() as u64;
    match line.outcome {
        Outcome::Reaped => tracing::info!(
            session = %line.session, tmux_id = %line.tmux_id, reason = %line.reason, idle_ms = ?line.idle_ms,
            pids = line.pids.len(), term = line.term, kill = line.kill, rss_bytes = line.rss_bytes, took_ms = line.took_ms,
            "reaped"
        ),
        Outcome::Aborted => {
            tracing::info!(session = %line.session, tmux_id = %line.tmux_id, why = ?line.error, "reap aborted")
        }
        _ => {
            tracing::error!(session = %line.session, tmux_id = %line.tmux_id, error = ?line.error, survivors = ?line.survivors, "reap failed")
        }
    }
    if let Err(e) = r.state.append_audit(&line) {
        tracing::error!(error = %e, session = %line.session, "failed to append the audit line");
    }
    r.metrics.record_reap(&line);
    line
}
