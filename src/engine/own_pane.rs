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
use crate::adapters::tmux::TmuxError;
use crate::agents::FiredBy;
use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::Session;
use crate::engine::context::Reaper;

/// Why `resume` and `spawn` must refuse (`Some`, saying what to do) when session `name` of chat
/// `id` exists but its chat was reaped from its own pane while the session lived on: a chat is
/// never started in a session holding the user's panes.
pub(crate) async fn asleep_why(
    r: &Reaper,
    id: &str,
    name: &str,
) -> Result<Option<String>, TmuxError> {
    if !r.tmux.asleep(name).await? {
        return Ok(None);
    }
    let tomb = r.state.tombstone_path(id);
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
pub(crate) async fn record(r: &Reaper, s: &Session) {
    let Some(p) = s.panes.first() else { return };
    let Some(rec) = PaneRecord::of(p) else { return };
    if p.dead || s.chat_pane.trim() == rec.value() {
        return;
    }
    if crate::agents::fired_by(&agent_proc::ancestors(64), p.pid) != FiredBy::Own {
        return;
    }
    match r.tmux.record_own_pane(s.tmux_id, &rec).await {
        Ok(true) => tracing::info!(
            session = %s.name,
            tmux_id = %format!("${}", s.tmux_id),
            pane = %rec.value(),
            "the chat's agent's hook recorded its pane as the chat's (@ccs_pane)"
        ),
        Ok(false) => tracing::debug!(
            session = %s.name,
            pane = %rec.value(),
            recorded = %s.chat_pane,
            "the hook's pane not recorded: another pane is recorded and still there, a reap holds the session, or it is gone"
        ),
        Err(e) => tracing::warn!(
            session = %s.name,
            pane = %rec.value(),
            error = %e,
            "failed to record the chat's pane from its agent's hook"
        ),
    }
}
