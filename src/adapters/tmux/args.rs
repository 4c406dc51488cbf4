//! Arguments and commands as tmux must receive them: literal where tmux would expand or split,
//! and the per-session commands of a reap (mark, clear, kill), each checked in the server.

use crate::core::compat::TOKEN_OPTION as OLD_TOKEN;
use crate::core::policy::chat_pane::PaneRecord;
use crate::core::policy::TmuxId;
use tmux_interface::{IfShell, KillSession, TmuxCommand};

/// An argument as tmux should receive it, literally: tmux reads an argument that ends in `;` as
/// the end of a command (`a;` is `a` then a new command), unless the `;` is escaped as `\;`.
pub fn literal(s: &str) -> String {
    match s.strip_suffix(';') {
        Some(head) => format!("{head}\\;"),
        None => s.to_string(),
    }
}

/// An argument that tmux format-expands (`new-session -c`): every `#` doubled, so `#{...}`,
/// `#(cmd)` and `#T` stay text, and then [`literal`].
pub fn format_literal(s: &str) -> String {
    literal(&s.replace('#', "##"))
}

pub(super) fn quote(s: &str) -> String {
    // tmux command-string quoting: single quotes, no escapes inside. Targets we quote are `$N:` or
    // `=<prefix><id>:` with a validated charset, so they never hold a quote.
    format!("'{s}'")
}

/// `$N` for a tmux session id number; `$N:` is the pane-style target `set-option` wants.
pub fn sid(n: TmuxId) -> String {
    format!("{n}")
}

/// The session environment variable that holds the token of the reap that marked the session.
/// An environment variable and not an `@` option: tmux (3.1 to 3.5) refreshes every session's
/// status cache and recalculates every window's size on *any* `set-option`, so each option write
/// costs O(sessions), while `set-environment` costs O(1). Formats read it like an option
/// (`#{CCS_REAP_TOKEN}`: a format name tmux does not know is looked up in the session's
/// environment, then the global one).
pub const TOKEN_VAR: &str = "CCS_REAP_TOKEN";

/// The session environment variable a reap sets to its token at its fence, the moment it commits
/// to signalling ([`fence_set_command`]): a prompt hook that finds the mark but not this takes the
/// chat back (the reap then aborts at the fence); one that finds both refuses the prompt. An
/// environment variable for the same reason as [`TOKEN_VAR`]: a write costs O(1).
pub const FENCED_VAR: &str = "CCS_REAP_FENCED";

/// Every command built here is an `if-shell -F -t '$N:'` that runs `command` only while `cond`
/// holds. On a session that is gone, tmux runs `if-shell` in the client's *current* session
/// instead, so the condition is always preceded by `#{==:#{session_id},$N}`: it is false anywhere
/// but in session `$N`, and the command runs only there (it also targets `$N` by itself).
fn on_session(n: TmuxId, cond: &str, command: String) -> TmuxCommand<'static> {
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(format!("#{{&&:#{{==:#{{session_id}},{}}},{cond}}}", sid(n)))
        .command(command)
        .build()
}

/// `'$N:'` and `'$N'`, quoted for a command string: the targets of `set-option` and
/// `set-environment`.
fn targets(n: TmuxId) -> (String, String) {
    (quote(&format!("{}:", sid(n))), quote(&sid(n)))
}

/// The condition that the session is the chat's pane alone: one window of one pane (the chat's
/// pane itself is told by the fence, [`crate::core::listing::fenced`]).
const ALONE: &str = "#{&&:#{==:#{session_windows},1},#{==:#{window_panes},1}}";

/// The condition that the session still holds the chat's recorded pane `r` (same `%N`, same
/// pid) in any of its windows, for a chat judged as its own pane in a shared session
/// (`CCS_ENGINE_SHARED_SESSION=pane`); with `check_viewers`, also that no client anywhere shows
/// that pane's window. One loop over the session's panes ([`of_pane`]).
///
/// tmux 3.1c gives up on a format nested about ten deep (a loop costs five of them: measured,
/// it reads a loop under six enclosing `#{...}` as empty), so every condition here puts this
/// term first, at most four deep (checked by this module's tests).
fn pane_there(r: &PaneRecord, check_viewers: bool) -> String {
    let v = r.value();
    if check_viewers {
        format!("#{{==:{},1:0}}", of_pane(&v, "1:#{window_active_clients}"))
    } else {
        format!("#{{==:{},1}}", of_pane(&v, "1"))
    }
}

/// `what`, expanded in the context of the session's pane whose `%N:pid` is `v` (any window),
/// and nothing for every other pane: empty when no pane is `v`.
fn of_pane(v: &str, what: &str) -> String {
    format!("#{{W:#{{P:#{{?#{{==:#{{pane_id}}:#{{pane_pid}},{v}}},{what},}}}}}}")
}

/// The condition on the session's shape: the chat's pane alone ([`ALONE`]), or, for a chat
/// judged as its own pane in a shared session, that pane still recorded as the chat's (that it
/// is still there is [`pane_there`], put first by [`with_pane`]).
fn shape(pane: Option<&PaneRecord>) -> String {
    match pane {
        None => ALONE.to_string(),
        Some(r) => format!("#{{==:#{{@ccs_pane}},{}}}", r.value()),
    }
}

/// [`UNWATCHED`], or for a chat judged as its own pane in a shared session: no client attached
/// to the session (the clients showing the pane's window are [`pane_there`]'s).
fn unwatched(pane: Option<&PaneRecord>) -> String {
    match pane {
        None => UNWATCHED.to_string(),
        Some(_) => "#{==:#{session_attached},0}".to_string(),
    }
}

/// `cond`, and for a chat judged as its own pane, [`pane_there`] before it (shallow: see there).
fn with_pane(cond: String, pane: Option<&PaneRecord>, check_viewers: bool) -> String {
    match pane {
        None => cond,
        Some(r) => format!("#{{&&:{},{cond}}}", pane_there(r, check_viewers)),
    }
}

/// What the fence reads of a chat judged as its own pane, in the fence's own call, right after
/// its write ([`crate::core::listing::fenced_in`]): a row `P $N clients found window-clients`
/// (single spaces; `found` is `1`, or empty with the pane gone), printed only while session `n`
/// is still there.
pub(super) fn pane_fence_read_command(n: TmuxId, r: &PaneRecord) -> TmuxCommand<'static> {
    let v = r.value();
    let each = |what: &str| of_pane(&v, what);
    let (_, s) = targets(n);
    on_session(
        n,
        "1",
        format!(
            "display-message -p -t {s} 'P #{{session_id}} #{{session_attached}} {} {}'",
            each("1"),
            each("#{window_active_clients}")
        ),
    )
}

/// The condition that nobody watches the session: no client attached to it, and none anywhere
/// whose current window is its current window (the chat's only one), through a linked window or
/// a session group (`#{window_active_clients}`, in tmux 3.1c to 3.5a).
const UNWATCHED: &str = "#{&&:#{==:#{session_attached},0},#{==:#{window_active_clients},0}}";

/// What a reap mark checks beyond the chat's shape and no mark yet ([`mark_command`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct MarkChecks {
    /// That no turn runs.
    pub turn: bool,
    /// That no client watches the chat.
    pub viewers: bool,
}

/// The test-and-set of one session's reap mark: set `@ccs_reaping` (and `token` in
/// [`TOKEN_VAR`]) only if the session is the chat's pane alone, no reap is marked, no turn runs
/// and no client watches it (the last two can be left out). `token` is ours (alphanumeric): it
/// can be put in a format as it is.
pub(super) fn mark_command(
    n: TmuxId,
    now_ms: i64,
    token: &str,
    checks: MarkChecks,
    pane: Option<&PaneRecord>,
) -> TmuxCommand<'static> {
    let MarkChecks {
        turn: check_turn,
        viewers: check_viewers,
    } = checks;
    let mut cond = format!("#{{&&:#{{==:#{{@ccs_reaping}},}},{}}}", shape(pane));
    if check_turn {
        cond = format!("#{{&&:{cond},#{{==:#{{@ccs_turn}},}}}}");
    }
    if check_viewers {
        cond = format!("#{{&&:{cond},{}}}", unwatched(pane));
    }
    let cond = with_pane(cond, pane, check_viewers);
    let (t, s) = targets(n);
    on_session(
        n,
        &cond,
        format!(
            "set-option -t {t} @ccs_reaping {now_ms} ; set-environment -t {s} {TOKEN_VAR} {token}"
        ),
    )
}

/// The condition that a session holds a reap mark and carries our reap token: both, since the
/// token alone proves nothing (a format falls back to the global environment, which anyone with
/// the socket, or the environment the server started in, may fill; and a mark cleared by hand
/// may leave the token behind). The token is looked for where earlier versions kept it too
/// (`@ccs_reaper`), so a teardown one of them left is finished.
fn ours(token: &str) -> String {
    format!(
        "#{{&&:#{{!=:#{{@ccs_reaping}},}},#{{||:#{{==:#{{{TOKEN_VAR}}},{token}}},#{{==:#{{{OLD_TOKEN}}},{token}}}}}}}"
    )
}

/// Clear our mark of session `n` (only while it carries `token`).
pub(super) fn clear_command(n: TmuxId, token: &str) -> TmuxCommand<'static> {
    let (t, s) = targets(n);
    on_session(
        n,
        &ours(token),
        format!(
            "set-option -u -t {t} @ccs_reaping ; set-environment -u -t {s} {TOKEN_VAR} ; set-environment -u -t {s} {FENCED_VAR}"
        ),
    )
}

/// The fence's write, one session: only while the session still carries exactly our mark
/// (`@ccs_reaping` = `mark_at` and our `token`), is still the chat's one pane and, where the reap
/// asked for none, has no viewer (its own clients, or any through a link or a group),
/// set [`FENCED_VAR`] to our token. From then on a prompt hook refuses prompts instead of taking
/// the chat back; before it, a prompt hook that clears the mark makes this a no-op, and the
/// fence's read ([`crate::core::listing::fence_format`]) aborts the reap.
pub(super) fn fence_set_command(
    n: TmuxId,
    mark_at: i64,
    token: &str,
    check_viewers: bool,
    pane: Option<&PaneRecord>,
) -> TmuxCommand<'static> {
    let mut cond = format!(
        "#{{&&:#{{&&:#{{==:#{{@ccs_reaping}},{mark_at}}},#{{==:#{{{TOKEN_VAR}}},{token}}}}},{}}}",
        shape(pane)
    );
    if check_viewers {
        cond = format!("#{{&&:{cond},{}}}", unwatched(pane));
    }
    let cond = with_pane(cond, pane, check_viewers);
    let (_, s) = targets(n);
    on_session(
        n,
        &cond,
        format!("set-environment -t {s} {FENCED_VAR} {token}"),
    )
}

/// Whether `token` can be put in a format and a command string as it is.
pub(super) fn plain_token(token: &str) -> bool {
    !token.is_empty() && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The condition that the mark is still the one a reader saw: `@ccs_reaping` still `value`, and
/// (when the reader saw one) still `token`. A value that a format cannot hold verbatim (not
/// alphanumeric: garbage, never a mark of ours) is matched by "not a time", which a fresh mark
/// always is.
fn same_mark(value: &str, token: &str) -> String {
    let value_cond = if !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric()) {
        format!("#{{==:#{{@ccs_reaping}},{value}}}")
    } else {
        "#{==:#{m/r:^[0-9]+$,#{@ccs_reaping}},0}".to_string()
    };
    if plain_token(token) {
        format!(
            "#{{&&:{value_cond},#{{||:#{{==:#{{{TOKEN_VAR}}},{token}}},#{{==:#{{{OLD_TOKEN}}},{token}}}}}}}"
        )
    } else {
        value_cond
    }
}

/// Clear a stale mark of session `n` whatever its owner, but only while the mark is still the one
/// judged stale: `@ccs_reaping` still `value` and the token still `token` (so a fresh mark set
/// since, or one taken over by a live reaper, is left alone).
pub(super) fn clear_stale_command(n: TmuxId, value: &str, token: &str) -> TmuxCommand<'static> {
    let (t, s) = targets(n);
    on_session(
        n,
        &same_mark(value, token),
        format!(
            "set-option -u -t {t} @ccs_reaping ; set-environment -u -t {s} {TOKEN_VAR} ; set-environment -u -t {s} {FENCED_VAR} ; set-option -q -u -t {t} {OLD_TOKEN}"
        ),
    )
}

/// End a turn that the agent's own status file says is over: clear `@ccs_turn` and start the
/// idle clock at `now_ms`, only while `@ccs_turn` is still exactly `seen` (digits, checked by the
/// caller) and no reap mark is on the session: a prompt submitted since then (a new value) keeps
/// its turn.
pub(super) fn end_turn_if_command(n: TmuxId, seen: &str, now_ms: i64) -> TmuxCommand<'static> {
    let (t, _) = targets(n);
    on_session(
        n,
        &format!("#{{&&:#{{==:#{{@ccs_turn}},{seen}}},#{{==:#{{@ccs_reaping}},}}}}"),
        format!("set-option -t {t} @ccs_idle {now_ms} ; set-option -u -t {t} @ccs_turn ; display-message -p ended"),
    )
}

/// Take over the mark of a reaper that died mid-teardown, only while it is still exactly its
/// (`value` and `token`): our time and our token replace them, so no other reader takes the mark
/// for stale while we finish the teardown.
pub(super) fn takeover_command(
    n: TmuxId,
    value: &str,
    token: &str,
    now_ms: i64,
    new_token: &str,
) -> TmuxCommand<'static> {
    let (t, s) = targets(n);
    on_session(
        n,
        &same_mark(value, token),
        format!(
            "set-option -t {t} @ccs_reaping {now_ms} ; set-environment -t {s} {TOKEN_VAR} {new_token} ; set-option -q -u -t {t} {OLD_TOKEN}"
        ),
    )
}

/// The fence of one session taken over from a dead reaper: prints `fenced-<n>` only while the
/// session carries exactly our new mark, `@ccs_reaping` = `mark_at` and our `token` in its
/// environment. (A batch's fence is one listing: [`crate::core::listing::fence_format`].)
pub(super) fn fence_command(n: TmuxId, mark_at: i64, token: &str) -> TmuxCommand<'static> {
    let cond =
        format!("#{{&&:#{{==:#{{@ccs_reaping}},{mark_at}}},#{{==:#{{{TOKEN_VAR}}},{token}}}}}");
    let (_, s) = targets(n);
    on_session(
        n,
        &cond,
        format!(
            "set-environment -t {s} {FENCED_VAR} {token} ; display-message -p {FENCED}{}",
            n.get()
        ),
    )
}

/// Set option `opt` (an `@` option of ours) of session `n` to `value` only while it is unset.
pub(super) fn set_if_unset_command(n: TmuxId, opt: &str, value: i64) -> TmuxCommand<'static> {
    let (t, _) = targets(n);
    on_session(
        n,
        &format!("#{{==:#{{{opt}}},}}"),
        format!("set-option -t {t} {opt} {value}"),
    )
}

/// What the way back keeps of session `n`: a line `ENV $N` that says whose, its kept command
/// line (`ARGV <@ccs_argv>`), its own environment (`NAME=value`), then its options (`@name
/// value`); only while it is still session `n` (a session gone prints nothing, and the chain goes
/// on).
pub(super) fn kept_command(n: TmuxId) -> TmuxCommand<'static> {
    let (t, s) = targets(n);
    on_session(
        n,
        "1",
        format!(
            "display-message -p -t {s} 'ENV #{{session_id}}' ; display-message -p -t {s} 'ARGV #{{@ccs_argv}}' ; show-environment -t {s} ; show-options -t {t}"
        ),
    )
}

/// Record `pane` as the chat's own pane of session `n` (`@ccs_pane`), only while nothing is
/// recorded yet and the session's current pane is still that pane, alone in the session: a pane
/// swapped in or added since the listing is never taken for the chat's.
pub(super) fn record_pane_command(n: TmuxId, pane: &PaneRecord) -> TmuxCommand<'static> {
    let (t, _) = targets(n);
    let opt = crate::core::policy::chat_pane::PANE_OPTION;
    on_session(
        n,
        &format!(
            "#{{&&:#{{==:#{{{opt}}},}},#{{&&:#{{==:#{{pane_id}}:#{{pane_pid}},{}}},{ALONE}}}}}",
            pane.value()
        ),
        format!("set-option -t {t} {opt} {}", quote(&pane.value())),
    )
}

/// Record `pane` as the chat's own pane of session `n` on the word of the chat's agent's hook
/// (which runs below that pane): only while no reap holds the session, its chat was not reaped
/// from its pane ([`ASLEEP_OPTION`] unset: what is left is the user's), the pane is still in it
/// (same `%N`, same pid), and either nothing is recorded yet, or the recorded pane is no longer
/// in the session (gone, or never one) and the session is one pane alone: a record gone while
/// other panes live is a shared or swapped shape, whose panes may be anyone's. (That the
/// recorded pane lives nowhere else on the server is the caller's to read first: once gone from
/// the server, a pane never comes back.) Prints `recorded` when it wrote.
pub(super) fn record_own_pane_command(n: TmuxId, pane: &PaneRecord) -> TmuxCommand<'static> {
    let (t, _) = targets(n);
    let opt = crate::core::policy::chat_pane::PANE_OPTION;
    let v = pane.value();
    // Nothing recorded, or the recorded pane not in the session: no pane matches the record
    // (an empty record matches none). Both loops shallow (see [`pane_there`]); the terms after
    // them loop over nothing.
    let gone = format!("#{{==:{},}}", of_pane(&format!("#{{{opt}}}"), "1"));
    let there = pane_there(pane, false);
    let shape = format!("#{{||:#{{==:#{{{opt}}},}},{ALONE}}}");
    let free = format!("#{{&&:#{{==:#{{@ccs_reaping}},}},#{{==:#{{{ASLEEP_OPTION}}},}}}}");
    on_session(
        n,
        &format!("#{{&&:{there},#{{&&:{gone},#{{&&:{shape},{free}}}}}}}"),
        format!(
            "set-option -t {t} {opt} {} ; display-message -p recorded",
            quote(&v)
        ),
    )
}

/// Mark session `name` (`=<prefix><id>`, checked by the caller) as one whose turns something
/// reports (`@ccs_turns`): a `turn` command, an agent's hook. Written once (only while unset):
/// every `set-option` costs tmux a refresh of every session. Prints nothing.
pub(super) fn turns_reported_command(name: &str) -> TmuxCommand<'static> {
    let target = format!("={name}:");
    IfShell::new()
        .not_execute()
        .target_pane(target.clone())
        .shell_command("#{==:#{@ccs_turns},}")
        .command(format!("set-option -t {} @ccs_turns 1", quote(&target)))
        .build()
}

/// What [`fence_command`] prints for a session that passed.
pub(super) const FENCED: &str = "fenced-";

/// `kill-session -t $N`, only while the session carries our reap token (so never a session of a
/// newer server that reuses `$N`) and holds nothing but one pane (the chat's, stopped by then): a
/// pane or a window someone put in it since the fence keeps the session, and all in it but the
/// chat's pane.
///
/// For a chat judged as its own pane in a shared session (`pane`), `kill-pane` of exactly that
/// pane (`%N`) instead, only while the session carries our reap token and still holds that very
/// pane (same `%N` and pid) recorded as the chat's (a pane that closed with its process is gone
/// already); then, while the token is still ours, the session is marked [`ASLEEP_OPTION`] (`1`
/// first, then the reap's mark time, its ms, so a failing `-F` still leaves it marked) and our
/// mark cleared: the session's other panes and windows, and the session, stay.
pub(super) fn kill_scoped_command(
    n: TmuxId,
    token: &str,
    pane: Option<&PaneRecord>,
) -> Vec<TmuxCommand<'static>> {
    if let Some(r) = pane {
        let (t, s) = targets(n);
        let kill = format!("kill-pane -t {}", quote(&format!("%{}", r.id)));
        return vec![
            on_session(
                n,
                &with_pane(
                    format!("#{{&&:{},{}}}", shape(pane), ours(token)),
                    pane,
                    false,
                ),
                kill,
            ),
            on_session(
                n,
                &ours(token),
                format!(
                    "set-option -t {t} {ASLEEP_OPTION} 1 ; set-option -F -t {t} {ASLEEP_OPTION} '#{{?#{{@ccs_reaping}},#{{@ccs_reaping}},1}}' ; set-option -u -t {t} @ccs_reaping ; set-environment -u -t {s} {TOKEN_VAR} ; set-environment -u -t {s} {FENCED_VAR}"
                ),
            ),
        ];
    }
    let kill = KillSession::new()
        .target_session(quote(&sid(n)))
        .build()
        .to_vec()
        .join(" ");
    vec![on_session(
        n,
        &format!("#{{&&:{},{ALONE}}}", ours(token)),
        kill,
    )]
}

/// Set on a session whose chat was reaped from its own pane while the session lived on (shared,
/// `CCS_ENGINE_SHARED_SESSION=pane`): what is left is not the chat. `turn begin` then answers
/// "respawn it", and `resume`/`spawn` refuse while the session exists.
pub const ASLEEP_OPTION: &str = "@ccs_asleep";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_arguments() {
        // (argument, as passed, as passed where tmux expands formats)
        let table: &[(&str, &str, &str)] = &[
            ("plain", "plain", "plain"),
            ("a;", "a\\;", "a\\;"),
            (";", "\\;", "\\;"),
            ("a\\;", "a\\\\;", "a\\\\;"),
            ("a;b", "a;b", "a;b"),
            ("C#Tools", "C#Tools", "C##Tools"),
            ("#{session_name}", "#{session_name}", "##{session_name}"),
            ("#(touch x);", "#(touch x)\\;", "##(touch x)\\;"),
            ("tab\there\nnl", "tab\there\nnl", "tab\there\nnl"),
        ];
        for (arg, lit, fmt) in table {
            assert_eq!(literal(arg), *lit, "{arg:?}");
            assert_eq!(format_literal(arg), *fmt, "{arg:?}");
        }
    }

    const BOTH: MarkChecks = MarkChecks {
        turn: true,
        viewers: true,
    };

    #[test]
    fn the_mark_and_the_kill_need_the_chat_alone_and_the_mark_every_viewer_gone() {
        let m = |turn, viewers| {
            let checks = MarkChecks { turn, viewers };
            mark_command(TmuxId(3), 1, "tok", checks, None)
                .to_vec()
                .join(" ")
        };
        for (t, v) in [(true, true), (true, false), (false, true), (false, false)] {
            let c = m(t, v);
            assert!(c.contains(ALONE), "{c}");
            assert_eq!(c.contains("#{window_active_clients}"), v, "{c}");
            assert_eq!(c.contains("#{session_attached}"), v, "{c}");
            assert_eq!(c.contains("#{@ccs_turn}"), t, "{c}");
        }
        let k = kill_scoped_command(TmuxId(3), "tok", None)[0]
            .to_vec()
            .join(" ");
        assert!(k.contains(ALONE) && k.contains("kill-session"), "{k}");
    }

    /// Every `#{` closed once, and no `}` closing nothing: a condition tmux reads as written.
    fn balanced(f: &str) -> bool {
        let mut depth = 0i32;
        let b = f.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'#' && b.get(i + 1) == Some(&b'{') {
                depth += 1;
                i += 2;
                continue;
            }
            if b[i] == b'}' {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            i += 1;
        }
        depth == 0
    }

    /// How many `#{...}` enclose byte `at` of `f`.
    fn depth_at(f: &str, at: usize) -> usize {
        let mut depth = 0usize;
        let b = f.as_bytes();
        let mut i = 0;
        while i < at {
            if b[i] == b'#' && b.get(i + 1) == Some(&b'{') {
                depth += 1;
                i += 2;
                continue;
            }
            if b[i] == b'}' {
                depth = depth.saturating_sub(1);
            }
            i += 1;
        }
        depth
    }

    #[test]
    fn every_condition_of_a_pane_reap_is_balanced() {
        let r = PaneRecord { id: 7, pid: 70 };
        let conds = [
            pane_there(&r, true),
            pane_there(&r, false),
            unwatched(Some(&r)),
            shape(None),
            unwatched(None),
            of_pane("%7:70", "1"),
        ];
        for c in &conds {
            assert!(balanced(c), "{c}");
        }
        assert_eq!(
            pane_there(&r, false),
            "#{==:#{W:#{P:#{?#{==:#{pane_id}:#{pane_pid},%7:70},1,}}},1}"
        );
        let cmds = [
            mark_command(TmuxId(3), 1, "tok", BOTH, Some(&r)),
            fence_set_command(TmuxId(3), 1, "tok", true, Some(&r)),
            pane_fence_read_command(TmuxId(3), &r),
            record_own_pane_command(TmuxId(3), &r),
        ];
        for c in cmds
            .iter()
            .chain(kill_scoped_command(TmuxId(3), "tok", Some(&r)).iter())
        {
            for a in c.to_vec() {
                assert!(balanced(&a), "{a}");
                // tmux 3.1c reads a loop under six enclosing `#{...}` as empty (measured):
                // each loop here sits under at most four.
                for (i, _) in a.match_indices("#{W:") {
                    assert!(depth_at(&a, i) <= 4, "{} deep: {a}", depth_at(&a, i));
                }
            }
        }
    }

    #[test]
    fn a_chat_judged_as_its_pane_is_checked_and_killed_as_that_pane_only() {
        let r = PaneRecord { id: 7, pid: 70 };
        let m = mark_command(TmuxId(3), 1, "tok", BOTH, Some(&r))
            .to_vec()
            .join(" ");
        assert!(!m.contains(ALONE), "{m}");
        assert!(m.contains("#{==:#{@ccs_pane},%7:70}"), "{m}");
        assert!(
            m.contains("#{pane_id}:#{pane_pid},%7:70},1:#{window_active_clients},"),
            "{m}"
        );
        assert!(m.contains("#{window_active_clients}"), "{m}");
        let f = fence_set_command(TmuxId(3), 1, "tok", true, Some(&r))
            .to_vec()
            .join(" ");
        assert!(!f.contains(ALONE) && f.contains("%7:70"), "{f}");
        let k: Vec<String> = kill_scoped_command(TmuxId(3), "tok", Some(&r))
            .iter()
            .map(|c| c.to_vec().join(" "))
            .collect();
        assert!(k[0].contains("kill-pane -t '%7'"), "{k:?}");
        assert!(
            !k[0].contains("kill-session") && k[0].contains("%7:70"),
            "{k:?}"
        );
        assert!(k[0].contains("#{==:#{session_id},$3}"), "{k:?}");
        assert!(
            k[1].contains("@ccs_asleep 1") && k[1].contains("-u -t '$3:' @ccs_reaping"),
            "{k:?}"
        );
        // Asleep at the reap's mark time (its ms), `1` where the mark is not there to read.
        assert!(
            k[1].contains("set-option -F -t '$3:' @ccs_asleep '#{?#{@ccs_reaping},#{@ccs_reaping},1}' ; set-option -u"),
            "{k:?}"
        );
    }

    /// The agent's hook records its pane only in the server's own test: no reap holds the
    /// session, it is not asleep (what is left is the user's), and nothing is recorded, or the
    /// session is one pane alone.
    #[test]
    fn the_own_pane_record_is_refused_asleep_held_or_shared_in_the_same_call() {
        let r = PaneRecord { id: 7, pid: 70 };
        let c = record_own_pane_command(TmuxId(3), &r).to_vec().join(" ");
        for term in [
            "#{==:#{@ccs_asleep},}",
            "#{==:#{@ccs_reaping},}",
            &format!("#{{||:#{{==:#{{@ccs_pane}},}},{ALONE}}}"),
            "#{pane_id}:#{pane_pid},%7:70},1,}",
            "#{==:#{session_id},$3}",
        ] {
            assert!(c.contains(term), "{term} in {c}");
        }
        assert!(
            c.contains("set-option -t '$3:' @ccs_pane '%7:70' ; display-message -p recorded"),
            "{c}"
        );
    }
}
