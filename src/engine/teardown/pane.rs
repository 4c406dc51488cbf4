//! A chat judged as its own pane in a shared session (`CCS_ENGINE_SHARED_SESSION=pane`): its
//! reap checks and kills that pane, never the session ([`crate::core::policy::chat_pane::narrow`]).
//! The session's shape is fixed at the decision: a re-check that finds it otherwise (the user
//! closed the other panes, or the chat's pane went) aborts, nothing signalled.

use super::ports::Panes;
use super::stage::Reap;
use super::Abort;
use crate::core::policy;

/// The reaps of `reaps` that take only their chat's pane: session number to that pane.
pub(super) fn scopes(reaps: &[Reap]) -> Panes {
    reaps
        .iter()
        .filter_map(|j| j.request.session.pane_only.map(|r| (j.n(), r)))
        .collect()
}

/// Abort the reaps whose session, re-listed after the mark, is not judged as it was decided:
/// as the chat's pane alone, or as that very pane in a shared session.
pub(super) fn same_shape(reaps: &mut [Reap]) {
    for j in reaps.iter_mut() {
        let Some(fresh) = j.stage.fresh() else {
            continue;
        };
        let (was, now) = (j.request.session.pane_only, fresh.pane_only);
        if was == now {
            continue;
        }
        let why = match (was, now) {
            (Some(r), _) => format!(
                "the session is no longer shared with its chat's pane %{} alive in it: judged anew by the next sweep",
                r.id
            ),
            (None, _) => "the session became shared since the decision".to_string(),
        };
        j.abort(Abort::Changed(policy::Changed {
            state: policy::State::Shared,
            why,
        }));
    }
}
