//! The chat's own pane on its agent's word (issue 49.2): a hook fired by the chat's own agent
//! knows its pane (`TMUX_PANE`), and records it as the chat's (`@ccs_pane`) where none is
//! recorded yet or the recorded one is gone. Nothing it is told is taken on trust: the pane is
//! the one tmux lists under that id (its pid from tmux, [`Session::panes`]), the hook's own
//! ancestors (read from /proc) must reach that pid through the chat's own agent
//! ([`FiredBy::Own`]: not a nested agent, not a hook run by hand or by anyone who set
//! `TMUX_PANE`), and the write itself is checked in the server ([`Tmux::record_own_pane`]).
//!
//! [`Tmux::record_own_pane`]: crate::adapters::tmux::Tmux::record_own_pane
//!
//! And the way back for a chat reaped from its own pane while its session lived on (shared,
//! `CCS_ENGINE_SHARED_SESSION=pane`, marked `@ccs_asleep`): the session is the user's now, so
//! `resume` and `spawn` refuse to start the chat in it, and say how to bring it back.

use crate::adapters::agent_proc;
use crate::adapters::state::StateDir;
use crate::adapters::tmux::{Tmux, TmuxError};
use crate::agents::FiredBy;
use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::Session;

/// Why `resume` and `spawn` must refuse (`Some`, saying what to do) when session `name` of chat
/// `id` exists but its chat was reaped from its own pane while the session lived on: a chat is
/// never started in a session holding the user's panes.
pub(crate) async fn asleep_why(
    tmux: &Tmux,
    state: &StateDir,
    id: &str,
    name: &str,
) -> Result<Option<String>, TmuxError> {
    if !tmux.asleep(name).await? {
        return Ok(None);
    }
    let tomb = state.tombstone_path(id);
    Ok(Some(format!(
        "{name} still exists but no longer holds its chat: the chat was reaped from its own pane \
         while other panes or windows kept the session (CCS_ENGINE_SHARED_SESSION=pane; its \
         conversation is kept in {}). Not starting the chat among them: close or move what is \
         left in {name} (or kill-session it), then resume {id}",
        tomb.display()
    )))
}

/// Record the hook's pane as session `s`'s chat pane, when it is the chat's agent's and differs
/// from the record (costs no tmux call where the record is already this pane). Best effort: a
/// failure is logged, never the hook's.
///
/// Which shapes are recorded (docs/rules.md, "The chat's pane, on its agent's word"): nothing
/// recorded yet; or the recorded pane gone from the server while this pane is alone in its
/// session. Never in a session asleep (its chat reaped from its pane: what is left is the
/// user's), never while a reap holds it, never over a recorded pane still in the session, nor
/// over one gone from it while other panes live there (shared: anyone's), nor over one that
/// lives on in another session (swapped or moved out: the pane here came from elsewhere). The
/// session's shape and marks are tested in the write itself ([`Tmux::record_own_pane`]); where
/// the recorded pane lives is read first, safely: a pane gone from the server never returns.
///
/// [`Tmux::record_own_pane`]: crate::adapters::tmux::Tmux::record_own_pane
pub(crate) async fn record(tmux: &Tmux, s: &Session) {
    let Some(p) = s.panes.first() else { return };
    let Some(rec) = PaneRecord::of(p) else { return };
    if p.dead || s.chat_pane.trim() == rec.value() || !s.asleep.trim().is_empty() {
        return;
    }
    if crate::agents::fired_by(&agent_proc::ancestors(64), p.pid) != FiredBy::Own {
        return;
    }
    if let Some(old) = PaneRecord::parse(&s.chat_pane) {
        match tmux.pane_on_server(&old).await {
            Ok(false) => {}
            Ok(true) => {
                tracing::debug!(
                    session = %s.name,
                    pane = %rec.value(),
                    recorded = %old.value(),
                    "the hook's pane not recorded: the recorded pane lives on (in this session, or swapped or moved into another): this pane is not the chat's"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(session = %s.name, error = %e, "failed to list the server's panes: the hook's pane not recorded");
                return;
            }
        }
    }
    match tmux.record_own_pane(s.tmux_id, &rec).await {
        Ok(true) => tracing::info!(
            session = %s.name,
            tmux_id = %s.tmux_id,
            pane = %rec.value(),
            "the chat's agent's hook recorded its pane as the chat's (@ccs_pane)"
        ),
        Ok(false) => tracing::debug!(
            session = %s.name,
            pane = %rec.value(),
            recorded = %s.chat_pane,
            "the hook's pane not recorded: another pane is recorded and still there, or gone while other panes live in the session; a reap holds the session, its chat's pane was reaped (asleep), or it is gone"
        ),
        Err(e) => tracing::warn!(
            session = %s.name,
            pane = %rec.value(),
            error = %e,
            "failed to record the chat's pane from its agent's hook"
        ),
    }
}
