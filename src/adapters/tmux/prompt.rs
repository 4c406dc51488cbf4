//! The prompt hook's side of the handoff: a prompt's test-and-set against a reap's fence
//! ([`Tmux::prompt_begin`]), and the id a hook learns with its idle clock
//! ([`Tmux::set_cid_now`]).

use tmux_interface::{HasSession, IfShell, SetOption};

use super::{literal, quote, session_gone, Tmux, TmuxError, FENCED_VAR, TOKEN_VAR};

/// What a prompt hook's test-and-set found ([`Tmux::prompt_begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptBegin {
    /// No reap held the chat: the turn began.
    Started,
    /// A reap held it but had not passed its fence: its mark was cleared (the reap aborts at the
    /// fence) and the turn began.
    TakenBack,
    /// A reap past its fence holds it: the prompt must be refused.
    Refused,
    /// The session, its pane or the server is gone.
    Gone,
    /// The mark changed between two steps of the call (a reap that ended): ask again.
    Unsettled,
}

impl Tmux {
    /// A prompt hook's turn (Claude Code's `UserPromptSubmit`, Gemini's `BeforeAgent`, Codex's),
    /// each step a test-and-set in the server: a turn begins where no reap holds the chat; a reap
    /// that holds it but has not passed its fence is taken back (its mark cleared: the reap aborts
    /// at its fence) and the turn begins; one past its fence refuses the prompt.
    pub async fn prompt_begin(&self, name: &str, now_ms: i64) -> Result<PromptBegin, TmuxError> {
        let target = format!("={name}:");
        let t = quote(&target);
        let step = |cond: String, then: String| {
            IfShell::new()
                .not_execute()
                .target_pane(target.clone())
                .shell_command(cond)
                .command(then)
                .build()
        };
        let alive = "#{==:#{pane_dead},0}";
        let not_fenced = format!(
            "#{{||:#{{==:#{{{FENCED_VAR}}},}},#{{!=:#{{{FENCED_VAR}}},#{{{TOKEN_VAR}}}}}}}"
        );
        let cmds = [
            HasSession::new().target_session(format!("={name}")).build(),
            step(
                format!("#{{&&:#{{==:#{{@ccs_reaping}},}},{alive}}}"),
                format!("set-option -t {t} @ccs_turn {now_ms} ; display-message -p started"),
            ),
            step(
                format!("#{{&&:#{{&&:#{{!=:#{{@ccs_reaping}},}},{alive}}},{not_fenced}}}"),
                format!(
                    "set-option -u -t {t} @ccs_reaping ; set-option -t {t} @ccs_turn {now_ms} ; display-message -p taken-back"
                ),
            ),
            step(
                format!(
                    "#{{&&:#{{!=:#{{@ccs_reaping}},}},#{{&&:#{{!=:#{{{FENCED_VAR}}},}},#{{==:#{{{FENCED_VAR}}},#{{{TOKEN_VAR}}}}}}}}}"
                ),
                "display-message -p refused".to_string(),
            ),
            step(
                "#{==:#{pane_dead},1}".to_string(),
                "display-message -p dead".to_string(),
            ),
            super::args::turns_reported_command(name),
        ];
        let out = match self.run(&cmds).await {
            Ok(out) => out,
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => {
                return Ok(PromptBegin::Gone)
            }
            Err(TmuxError::NoServer(_)) => return Ok(PromptBegin::Gone),
            Err(e) => return Err(e),
        };
        let said = |w: &str| out.lines().any(|l| l.trim() == w);
        Ok(if said("started") {
            PromptBegin::Started
        } else if said("taken-back") {
            PromptBegin::TakenBack
        } else if said("refused") {
            PromptBegin::Refused
        } else if said("dead") {
            PromptBegin::Gone
        } else {
            // A mark cleared between two steps (its reap aborted): as it went.
            PromptBegin::Unsettled
        })
    }

    /// Set `@ccs_cid` of session `name` to `cid` and start its idle clock (`@ccs_idle` = `now_ms`)
    /// in one call, the clock first: a hook that learns a chat's id (Codex's at its first prompt)
    /// never leaves a known id beside an old clock for a sweep to reap. `false` when the session
    /// is gone.
    pub async fn set_cid_now(&self, name: &str, cid: &str, now_ms: i64) -> Result<bool, TmuxError> {
        let set = |opt: &str, v: String| {
            SetOption::new()
                .target_pane(format!("={name}:"))
                .option(opt.to_string())
                .value(literal(&v))
                .build()
        };
        let cmds = [
            HasSession::new().target_session(format!("={name}")).build(),
            set("@ccs_idle", now_ms.to_string()),
            set("@ccs_cid", cid.to_string()),
            super::args::turns_reported_command(name),
        ];
        match self.run(&cmds).await {
            Ok(_) => Ok(true),
            Err(TmuxError::Failed { stderr, .. }) if session_gone(&stderr) => Ok(false),
            Err(TmuxError::NoServer(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
