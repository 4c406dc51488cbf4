//! A batch that panics: what it had done is undone or finished, once.
//!
//! The batch runs under `futures`' `catch_unwind` ([`super::reap_to`]), its reaps owned outside
//! it; after a panic each reap's stage says what it holds ([`Stage::held`]): the marks are
//! cleared (checked in the server: only those still carrying our token), the journals removed,
//! and a `failed` line written for each reap whose line was not written yet. Without this a reap
//! mark whose owner is alive is never stale, and `turn begin` and `spawn` would wait on a journal
//! whose owner lives on until a restart.

use super::ports::TmuxPort;
use super::stage::{Facts, Held, Lines, Reap, Stage, Token};
use crate::adapters::metrics::Metrics;
use crate::adapters::state::StateDir;
use crate::core::policy::TmuxId;
use crate::core::reap_end::{Failure, ReapEnd};

/// The message of a caught panic.
pub(super) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// After a panic (`why`): give back what each reap holds (its journal removed, its mark
/// cleared), then write the lines not written yet, `failed`.
pub(super) async fn unwind(
    tmux: &impl TmuxPort,
    lines: &Lines<'_>,
    metrics: &Metrics,
    reaps: &mut [Reap],
    why: &str,
) {
    tracing::error!(
        panic = %why, sessions = reaps.len(),
        written = reaps.iter().filter(|r| r.finished().is_some()).count(),
        "a reap batch panicked: clearing its marks and removing its journals"
    );
    // A chat already signalled is never released half torn down: its journal and its mark
    // stay, and since this batch's token is no longer live here, the next sweep takes them for
    // a gone reaper's and finishes the teardown (SIGKILL, kill-session).
    for r in reaps
        .iter()
        .filter(|r| matches!(r.stage, Stage::Signalled { .. }))
    {
        tracing::warn!(session = %r.request.decision.name, "a chat signalled by a batch that panicked: left for the next sweep to finish");
    }
    let (clear, token) = give_back(lines.state, reaps, why);
    if let Some(tok) = token {
        if let Err(e) = tmux.clear_reaping_many(&clear, &tok).await {
            metrics.tmux_errors.inc();
            tracing::warn!(error = %e, sessions = ?clear, "failed to clear the reap marks of a batch that panicked");
        }
    }
    // Every reap is stopped or ended now: the lines not written yet are, `failed`; a line
    // already written stays as it is (a reap ends once), and any not delivered yet is.
    let all = (0..reaps.len())
        .map(|i| (i, ReapEnd::Failed(Failure::Panicked(why.to_string()))))
        .collect();
    lines.end(reaps, all);
}

/// Stop every reap not ended yet, `failed` by the panic `why`, giving back what it holds: its
/// journal removed here, its mark returned to the caller to clear in one call (the sessions and
/// the batch's token). A signalled reap gives back nothing ([`Stage::held`]).
fn give_back(state: &StateDir, reaps: &mut [Reap], why: &str) -> (Vec<TmuxId>, Option<Token>) {
    let mut clear = Vec::new();
    let mut token = None;
    for r in reaps.iter_mut() {
        if matches!(r.stage, Stage::Ended { .. }) {
            continue;
        }
        let held = r.stage.held();
        if let Some(jn) = &held.journal {
            if let Err(e) = state.remove_journal(jn) {
                tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal of a batch that panicked");
            }
        }
        if let Some(t) = held.token {
            clear.push(r.n());
            token = Some(t);
        }
        // Its line as begun: what the batch gathered before it panicked is not told.
        r.stage = Stage::Stopped {
            end: ReapEnd::Failed(Failure::Panicked(why.to_string())),
            held: Held::default(),
            facts: Facts::default(),
        };
    }
    (clear, token)
}
