//! The steps between the journals and the first signal: the agents' status files once more, the
//! fence, the lease, and the release of the reaps that stopped before their first signal.

use super::ports::TmuxPort;
use super::stage::{Reap, Stage};
use super::{Abort, Batch};
use crate::adapters::state::StateDir;
use crate::config::Config;
use crate::core::policy;
use crate::core::policy::TmuxId;

/// The mark of a batch: its value (Unix ms, for people and the guarded tmux calls), its token,
/// and when it was set by this process's own monotonic clock (read before the test-and-set), on
/// which alone its lease is measured.
#[derive(Clone, Copy)]
pub(super) struct Mark<'a> {
    pub at: i64,
    pub tok: &'a str,
    pub boot_ms: i64,
}

impl Mark<'_> {
    fn elapsed(&self) -> i64 {
        crate::adapters::clock::boot_ms().saturating_sub(self.boot_ms)
    }
}

/// The fence ([`policy::fence`]): one guarded tmux call tells which marks of the batch are still
/// exactly ours on sessions still called what the reap was decided for (and which chats no
/// viewer has attached to since the mark, where the mark asked for none); a reap whose mark
/// changed, went, or ran out of time, or whose chat is now watched, is aborted, nothing
/// signalled.
pub(super) async fn fence(
    b: &Batch<'_, impl TmuxPort, impl super::ports::ProcPort>,
    reaps: &mut [Reap],
    mark: Mark<'_>,
) {
    let ns: Vec<(TmuxId, &str, bool)> = reaps
        .iter()
        .filter(|j| j.stage.is_on())
        .map(|j| {
            let d = &j.request.decision;
            (
                j.n(),
                d.name.as_str(),
                !j.request.force && !d.override_viewers,
            )
        })
        .collect();
    if ns.is_empty() {
        return;
    }
    let scopes = super::pane::scopes(reaps);
    let fence = match b.tmux.fence(&ns, mark.at, mark.tok, &scopes).await {
        Ok(f) => f,
        Err(e) => {
            b.h.metrics.tmux_errors.inc();
            for j in reaps.iter_mut().filter(|j| j.stage.is_on()) {
                j.abort(Abort::FenceUnchecked(e.to_string()));
            }
            return;
        }
    };
    let (elapsed, lease) = (mark.elapsed(), b.h.cfg.lease());
    for j in reaps.iter_mut().filter(|j| j.stage.is_on()) {
        if fence.taken_back.contains(&j.n()) {
            tracing::info!(session = %j.request.decision.name, tmux_id = %j.n(), "a prompt arrived before the fence: the chat was taken back, nothing signalled");
            j.abort(Abort::PromptArrived);
            continue;
        }
        let held = fence.held.contains(&j.n());
        if let Err(why) = lease.fence(held, elapsed) {
            tracing::warn!(session = %j.request.decision.name, tmux_id = %j.n(), why = why.as_str(), "fenced off: nothing signalled");
            j.abort(Abort::FencedOff(why));
        }
    }
}

/// The reaps still on whose agent's status file (read again, where the re-check read it) now
/// says a turn runs: aborted before the fence, nothing signalled. One small file a reap.
pub(super) fn busy_by_agent_now(reaps: &mut [Reap]) {
    for j in reaps.iter_mut() {
        let Some(s) = j.stage.fresh() else {
            continue;
        };
        if s.agent_turn == policy::AgentTurn::NotRead {
            continue;
        }
        let now = crate::engine::agent_status::turn_of(s);
        if let Some(why) = policy::busy_by_agent(&now) {
            j.abort(Abort::Changed(policy::Changed {
                state: policy::State::Busy,
                why,
            }));
        }
    }
}

/// The reaps still on whose lease (the fence, the mark as held) has too little left to finish
/// under: aborted, nothing signalled.
pub(super) fn lease_ran_out(cfg: &Config, reaps: &mut [Reap], mark: Mark<'_>) {
    let (elapsed, lease) = (mark.elapsed(), cfg.lease());
    for j in reaps.iter_mut().filter(|j| j.stage.is_on()) {
        if let Err(why) = lease.fence(true, elapsed) {
            tracing::warn!(session = %j.request.decision.name, why = why.as_str(), "fenced off right before the first signal: nothing signalled");
            j.abort(Abort::FencedOff(why));
        }
    }
}

/// Give back what the reaps stopped before their first signal still hold (vetoed, fenced off,
/// refused by the re-check, a journal or tombstone that could not be written): their journals
/// removed, then their marks cleared in one call (checked in the server: a no-op on a mark not
/// ours). The chats live on.
pub(super) async fn release(tmux: &impl TmuxPort, state: &StateDir, reaps: &mut [Reap], tok: &str) {
    let mut clear: Vec<TmuxId> = Vec::new();
    for j in reaps.iter_mut() {
        let n = j.n();
        let Stage::Stopped { held, .. } = &mut j.stage else {
            continue;
        };
        if held.is_empty() {
            continue;
        }
        if let Some(jn) = held.journal.take() {
            if let Err(e) = state.remove_journal(&jn) {
                tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal");
            }
        }
        if held.token.take().is_some() {
            clear.push(n);
        }
    }
    if clear.is_empty() {
        return;
    }
    if let Err(e) = tmux.clear_reaping_many(&clear, tok).await {
        tracing::warn!(error = %e, "failed to clear reap marks");
    }
}

/// Every reap still on is past the fence once its tombstone is written: from `Journaled` to
/// `Fenced`.
pub(super) fn fenced(j: &mut Reap, tombstone: crate::core::records::Tombstone) {
    let stage = std::mem::replace(&mut j.stage, Stage::Asked);
    j.stage = match stage {
        Stage::Journaled {
            token,
            ids,
            victims,
            journal,
            facts,
            ..
        } => Stage::Fenced {
            token,
            ids,
            victims,
            journal,
            tombstone: Box::new(tombstone),
            facts,
        },
        other => other,
    };
}
