//! The chat's own pane (issue 49): a session whose chat was reaped from its pane while the
//! session lived on (`@ccs_asleep`).

use super::{Tmux, TmuxError};

impl Tmux {
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
