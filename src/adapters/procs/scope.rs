//! The chats judged as their own pane in a shared session (`CCS_ENGINE_SHARED_SESSION=pane`,
//! issue 49): every pane of a session carries the same `TMUX` marker, so their members are told
//! by their pane, and the session's other panes (the user's) are nobody's to take.

use crate::core::policy::TmuxId;
use std::collections::{HashMap, HashSet};

use super::{claim_all, Ident, Scan};

/// The chats judged as their own pane in a shared session (`CCS_ENGINE_SHARED_SESSION=pane`):
/// session number to the `%N` of the chat's pane. Every pane of a session carries the same
/// `TMUX` marker, so for these a process found by its environment must carry the chat's own
/// `TMUX_PANE` too.
pub fn pane_only_of(sessions: &[crate::core::policy::Session]) -> HashMap<TmuxId, u32> {
    sessions
        .iter()
        .filter_map(|s| s.pane_only.map(|r| (s.tmux_id, r.id)))
        .collect()
}

/// A key no session number takes (tmux's `$N` count from 0 and are never reused): the panes of
/// a wanted session that are not among its wanted panes (the user's, set aside in a shared
/// session judged as its chat's pane) are claimed under it, so no one takes them.
const SET_ASIDE: TmuxId = TmuxId(u32::MAX);

/// Whether the environment `env` of a process found by the `TMUX` marker of session `n` is the
/// chat's: for a chat judged as its own pane (`pane_of`), it must carry `TMUX_PANE=%<its pane>`.
pub(crate) fn env_in_pane(env: &[u8], n: TmuxId, pane_of: &HashMap<TmuxId, u32>) -> bool {
    let Some(id) = pane_of.get(&n) else {
        return true;
    };
    let want = format!("TMUX_PANE=%{id}");
    env.split(|&b| b == 0).any(|kv| kv == want.as_bytes())
}

/// [`super::members`], where the sessions of `pane_of` are chats judged as their own pane in a shared
/// session: their other panes are nobody's to take, and a process found by the session's `TMUX`
/// marker is theirs only with the chat's `TMUX_PANE` ([`env_in_pane`]).
pub fn members_scoped(
    scan: Scan<'_>,
    wanted: &[(TmuxId, Vec<u32>)],
    others: &[(TmuxId, u32)],
    pane_of: &HashMap<TmuxId, u32>,
) -> HashMap<TmuxId, Vec<Ident>> {
    let want: HashSet<TmuxId> = wanted.iter().map(|(n, _)| *n).collect();
    // The other sessions' panes first: a pane moved into another session is the other's. The
    // very panes of a wanted session are its own, wherever else they show (its window linked
    // into another session, or a session grouped with it, lists the same pane there): a reap
    // takes only a session that is its chat's pane alone, so that pane is the chat's.
    let own: HashSet<u32> = wanted.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let mut extra: HashMap<TmuxId, Vec<u32>> = HashMap::new();
    for &(n, pid) in others {
        if own.contains(&pid) {
            continue;
        }
        // A live pane of a wanted session that is not among its wanted panes is set aside (a
        // session judged as its chat's pane alone): nobody's, as another session's is.
        let key = if want.contains(&n) { SET_ASIDE } else { n };
        extra.entry(key).or_default().push(pid);
    }
    let mut all: Vec<(TmuxId, Vec<u32>)> = extra.into_iter().collect();
    all.extend(wanted.iter().cloned());
    let mut out = claim_all(scan, &all, wanted, pane_of);
    out.retain(|n, _| want.contains(n));
    out
}
