//! The fence before a batch's first signal: its write (the commit a prompt hook reads) and its
//! read, in one call where they fit.

use std::collections::{HashMap, HashSet};

use tmux_interface::ListSessions;

use super::args::{self, fence_set_command, FENCED_VAR, TOKEN_VAR};
use super::listing;
use super::{Tmux, TmuxError};

/// What the fence saw: the sessions still exactly ours and set fenced, and those a prompt took
/// back before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    pub held: HashSet<u32>,
    pub taken_back: HashSet<u32>,
}

impl Tmux {
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
    pub async fn fence(
        &self,
        ns: &[(u32, &str, bool)],
        mark_at: i64,
        token: &str,
    ) -> Result<Fence, TmuxError> {
        if ns.is_empty() || !args::plain_token(token) {
            return Ok(Fence::default());
        }
        let checks: HashMap<u32, bool> = ns.iter().map(|&(n, _, v)| (n, v)).collect();
        let ids: Vec<u32> = ns.iter().map(|x| x.0).collect();
        let tok = token.to_string();
        // The read in the same (last) call as the writes: it prints only its own rows (a write
        // prints nothing). No server, or none of its sessions left: nothing carries the mark.
        let fmt = listing::fence_format(mark_at, token, TOKEN_VAR, FENCED_VAR);
        let out = self
            .per_session_then(
                &ids,
                |n| {
                    let v = checks.get(&n).copied().unwrap_or(true);
                    vec![fence_set_command(n, mark_at, &tok, v)]
                },
                vec![ListSessions::new().format(fmt).build()],
            )
            .await?;
        Ok(Fence {
            held: listing::fenced(&out, ns),
            taken_back: listing::taken_back(&out),
        })
    }
}
