//! A chat judged as its own pane in a shared session (`CCS_ENGINE_SHARED_SESSION=pane`): its
//! reap checks and kills that pane, never the session ([`crate::core::policy::chat_pane::narrow`]).
//! The session's shape is fixed at the decision: a re-check that finds it otherwise (the user
//! closed the other panes, or the chat's pane went) aborts, nothing signalled.

use std::collections::HashMap;

use super::{Abort, Job};
use crate::core::policy::{self, chat_pane::PaneRecord};

/// The reaps of `jobs` that take only their chat's pane: session number to that pane.
pub(super) fn scopes(jobs: &[Job]) -> HashMap<u32, PaneRecord> {
    jobs.iter()
        .filter_map(|j| j.req.session.pane_only.map(|r| (j.n(), r)))
        .collect()
}

/// Abort the reaps whose session, re-listed after the mark, is not judged as it was decided:
/// as the chat's pane alone, or as that very pane in a shared session.
pub(super) fn same_shape(jobs: &mut [Job], unmark: &mut Vec<u32>) {
    for j in jobs.iter_mut().filter(|j| !j.over) {
        let Some(fresh) = j.fresh.as_ref() else {
            continue;
        };
        let (was, now) = (j.req.session.pane_only, fresh.pane_only);
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
        unmark.push(j.n());
        j.abort(Abort::Changed(policy::Changed {
            state: policy::State::Shared,
            why,
        }));
    }
}
