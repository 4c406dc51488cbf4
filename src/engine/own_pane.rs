//! The chat's own pane (issue 49): the way back for a chat reaped from its own pane while its session lived on (shared,
//! `CCS_ENGINE_SHARED_SESSION=pane`, marked `@ccs_asleep`): the session is the user's now, so
//! `resume` and `spawn` refuse to start the chat in it, and say how to bring it back.

use crate::engine::commands::CommandError;
use crate::engine::context::Reaper;

/// `Err` (refused, saying why and what to do) when session `name` of chat `id` exists but its
/// chat was reaped from its own pane while the session lived on: `resume` and `spawn` never
/// start a chat in a session holding the user's panes.
pub(crate) async fn refuse_if_asleep(r: &Reaper, id: &str, name: &str) -> Result<(), CommandError> {
    if !r.tmux.asleep(name).await? {
        return Ok(());
    }
    let tomb = r.state.tombstone_path(id);
    Err(CommandError::Refused(format!(
        "{name} still exists but no longer holds its chat: the chat was reaped from its own pane \
         while other panes or windows kept the session (CCS_ENGINE_SHARED_SESSION=pane; its \
         conversation is kept in {}). Not starting the chat among them: close or move what is \
         left in {name} (or kill-session it), then resume {id}",
        tomb.display()
    )))
}
