//! The end of every reap: how it ended from what survived, and the line written (log, file,
//! metrics). The audit line is built from that end in one place, `core::reap_end::audit_line`.

use std::time::Instant;

use crate::adapters::metrics::Metrics;
use crate::adapters::procs;
use crate::adapters::state::StateDir;
use crate::adapters::state::{AuditLine, Outcome};
use crate::core::reap_end::{Failure, ReapEnd};
use crate::engine::record::record;

/// How a reap past its signals ended, from what survived (recorded in `line`; `alive` tells):
/// `reaped` only when no victim lives and nothing failed (`failure`, an earlier step's).
pub(crate) fn verify(
    line: &mut AuditLine,
    ids: &[procs::Ident],
    failure: Option<Failure>,
    alive: impl Fn(procs::Ident) -> bool,
) -> ReapEnd {
    line.survivors = survivors(ids, alive);
    end_of(&line.survivors, failure)
}

/// The victims of `ids` still alive (`alive` tells).
pub(crate) fn survivors(ids: &[procs::Ident], alive: impl Fn(procs::Ident) -> bool) -> Vec<i32> {
    ids.iter().filter(|i| alive(**i)).map(|i| i.pid).collect()
}

/// How a reap past its signals ended: `reaped` only when nothing survived and nothing failed
/// (`failure`, an earlier step's).
pub(crate) fn end_of(survivors: &[i32], failure: Option<Failure>) -> ReapEnd {
    match failure {
        None if survivors.is_empty() => ReapEnd::Reaped,
        None => ReapEnd::Failed(Failure::Survivors(survivors.to_vec())),
        Some(f) => ReapEnd::Failed(f),
    }
}

/// Log the line, append it to the audit log, count it.
pub(crate) fn finish(
    state: &StateDir,
    metrics: &Metrics,
    line: AuditLine,
    t0: Instant,
) -> AuditLine {
    let line = logged(line, t0);
    let _ = record(state, metrics, &line);
    line
}

/// The line with its time taken, logged as its outcome says.
pub(crate) fn logged(mut line: AuditLine, t0: Instant) -> AuditLine {
    line.took_ms = t0.elapsed().as_millis() as u64;
    match line.outcome {
        Outcome::Reaped => tracing::info!(
            session = %line.session, tmux_id = %line.tmux_id, reason = %line.reason, idle_ms = line.idle_ms,
            pids = line.pids.len(), term = line.term, kill = line.kill, rss_bytes = line.rss_bytes, took_ms = line.took_ms,
            "reaped"
        ),
        Outcome::Aborted => {
            tracing::info!(session = %line.session, tmux_id = %line.tmux_id, why = line.error.as_deref(), "reap aborted")
        }
        _ => {
            tracing::error!(session = %line.session, tmux_id = %line.tmux_id, error = line.error.as_deref(), survivors = ?line.survivors, "reap failed")
        }
    }
    line
}

/// This reaper's reap took the server's last sessions and the server exited with them: the
/// record says so ([`Known::emptied`]) at once, for the sweeps and `status` that follow.
pub(crate) fn server_emptied(
    known: &crate::engine::context::KnownChats,
    state: &crate::adapters::state::StateDir,
    socket: &str,
    now: i64,
) {
    known.update(
        || state.read_known().unwrap_or_default(),
        |mut k| {
            if k.emptied.is_none() {
                k.emptied = Some(now);
                tracing::info!(socket = %socket, "the tmux server exited after its last chat was reaped: the socket is empty until the studio starts a chat (not an outage)");
                if let Err(e) = state.write_known(&k) {
                    tracing::warn!(error = %e, "failed to write the record of last known conversations");
                }
            }
            (k, ())
        },
    );
}
