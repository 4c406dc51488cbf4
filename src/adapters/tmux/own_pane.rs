//! The chat's own pane (issue 49): recorded on its agent's word (the hook, run below the pane it
//! names, is checked against the process table by its caller and against tmux here), and a
//! session whose chat was reaped from its pane while the session lived on (`@ccs_asleep`).

use super::args::record_own_pane_command;
use super::{Tmux, TmuxError};
use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::TmuxId;

impl Tmux {
    /// Record `pane` as the chat's own pane of session `n` (`@ccs_pane`), in one guarded call:
    /// only while no reap holds the session, the pane is still in it with that pid, and no pane
    /// is recorded or the recorded one is no longer there ([`record_own_pane_command`]). `true`
    /// when it was written; a session gone is `false`.
    pub async fn record_own_pane(&self, n: TmuxId, pane: &PaneRecord) -> Result<bool, TmuxError> {
        let out = self.gone_is_ok(self.run(&[record_own_pane_command(n, pane)]).await)?;
        Ok(out.lines().any(|l| l.trim() == "recorded"))
    }

    /// Whether the pane `pane` (same `%N`, same pid) is anywhere on the server, in any session:
    /// one listing of every pane. A server gone is `false`. Once `false` it stays so: tmux never
    /// gives a `%N` twice.
    pub async fn pane_on_server(&self, pane: &PaneRecord) -> Result<bool, TmuxError> {
        let mut c = tmux_interface::TmuxCommand::with_name("list-panes");
        c.push_param("-a")
            .push_param("-F")
            .push_param("#{pane_id}:#{pane_pid}");
        let out = self.gone_is_ok(self.run(&[c]).await)?;
        let v = pane.value();
        Ok(out.lines().any(|l| l.trim() == v))
    }

    /// Whether session `=name`'s chat was reaped from its own pane while the session lived on
    /// ([`super::ASLEEP_OPTION`] set). A session gone is `false`.
    pub async fn asleep(&self, name: &str) -> Result<bool, TmuxError> {
        let mut c = tmux_interface::TmuxCommand::with_name("show-options");
        c.push_param("-q")
            .push_param("-v")
            .push_param("-t")
            .push_param(format!("={name}:"))
            .push_param(super::ASLEEP_OPTION);
        let out = self.gone_is_ok(self.run(&[c]).await)?;
        Ok(!out.trim().is_empty())
    }
}
