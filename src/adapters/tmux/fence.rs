//! The marks of a batch (the test-and-set) and the fence before its first signal: its write
//! (the commit a prompt hook reads) and its read, in one call where they fit. Each checks the
//! chat's shape: its pane alone, or, judged as its own pane in a shared session, that pane.

use std::collections::{HashMap, HashSet};

use tmux_interface::ListSessions;

use super::args::{
    self, fence_set_command, mark_command, pane_fence_read_command, MarkChecks, FENCED_VAR,
    TOKEN_VAR,
};
use super::listing;
use super::{Tmux, TmuxError};
use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::TmuxId;

/// What the fence saw: the sessions still exactly ours and set fenced, and those a prompt took
/// back before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    pub held: HashSet<TmuxId>,
    pub taken_back: HashSet<TmuxId>,
}

impl Tmux {
    /// The atomic test-and-set of the reap marks ([`mark_command`]) for many sessions at once, in
    /// as few tmux calls as the argv budget allows: `(n, check_turn, check_viewers)`. Which ones
    /// we hold is read from the next listing (those that carry `token`): the re-check lists the
    /// server anyway, and a read-back here would cost one more tmux command per session.
    ///
    /// The sessions of `panes` are chats judged as their own pane in a shared session: their
    /// mark checks that pane still there and recorded, not the session alone.
    pub async fn mark_reaping(
        &self,
        items: &[(TmuxId, bool, bool)],
        now_ms: i64,
        token: &str,
        panes: &HashMap<TmuxId, PaneRecord>,
    ) -> Result<(), TmuxError> {
        let checks: HashMap<TmuxId, (bool, bool)> =
            items.iter().map(|&(n, t, v)| (n, (t, v))).collect();
        let ns: Vec<TmuxId> = items.iter().map(|x| x.0).collect();
        let token_s = token.to_string();
        self.per_session(&ns, |n| {
            let (turn, viewers) = checks.get(&n).copied().unwrap_or((true, true));
            let checks = MarkChecks { turn, viewers };
            vec![mark_command(n, now_ms, &token_s, checks, panes.get(&n))]
        })
        .await
        .map(|_| ())
    }

    /// The fence before a batch's first signal: which of `ns` (`(n, name, check_viewers)`) still
    /// carry exactly our mark (`@ccs_reaping` = `mark_at` and our `token`) under the name the reap
    /// was decided for (a name a format cannot hold as it is never passes), with no client attached
    /// where the mark asked for none ([`listing::fenced`]). One `list-sessions` for the whole batch,
    /// whatever its size: the server prints a row only for the sessions that carry the mark, at
    /// one instant. A session gone, taken or now watched is simply not in the set.
    ///
    /// Before the read, the fence's write ([`fence_set_command`]), batched as the marks are: each
    /// session still exactly ours is set fenced in the server, so a prompt hook from then on refuses
    /// its prompt; one that took the chat back before (its mark cleared) is listed as such, in
    /// [`Fence::taken_back`].
    ///
    /// The sessions of `panes` are chats judged as their own pane in a shared session: their
    /// write and read check that pane (still there, recorded, its window unwatched) instead of
    /// the session alone ([`listing::fenced_in`]).
    pub async fn fence(
        &self,
        ns: &[(TmuxId, &str, bool)],
        mark_at: i64,
        token: &str,
        panes: &HashMap<TmuxId, PaneRecord>,
    ) -> Result<Fence, TmuxError> {
        if ns.is_empty() || !args::plain_token(token) {
            return Ok(Fence::default());
        }
        let checks: HashMap<TmuxId, bool> = ns.iter().map(|&(n, _, v)| (n, v)).collect();
        let ids: Vec<TmuxId> = ns.iter().map(|x| x.0).collect();
        let tok = token.to_string();
        // The read in the same (last) call as the writes: it prints only its own rows (a write
        // prints nothing). No server, or none of its sessions left: nothing carries the mark.
        let fmt = listing::fence_format(mark_at, token, TOKEN_VAR, FENCED_VAR);
        // A chat judged as its own pane is read at the same instant (its `P` row).
        let mut reads: Vec<_> = ids
            .iter()
            .filter_map(|n| panes.get(n).map(|r| pane_fence_read_command(*n, r)))
            .collect();
        reads.push(ListSessions::new().format(fmt).build());
        let out = self
            .per_session_then(
                &ids,
                |n| {
                    let v = checks.get(&n).copied().unwrap_or(true);
                    vec![fence_set_command(n, mark_at, &tok, v, panes.get(&n))]
                },
                reads,
            )
            .await?;
        Ok(Fence {
            held: listing::fenced_in(&out, ns, panes),
            taken_back: listing::taken_back(&out),
        })
    }
}
