//! Arguments and commands as tmux must receive them: literal where tmux would expand or split,
//! and the per-session commands of a reap (mark, clear, kill), each checked in the server.

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
pub fn sid(n: u32) -> String {
    format!("${n}")
}

/// Every command built here targets `$N:` with `if-shell -t`, which on a session that is gone runs
/// in the client's current session instead: each is always preceded by `has-session -t $N`, whose
/// failure stops the chain.
///
/// The test-and-set of one session's reap mark: set `@ccs_reaping` (and `token` in `@ccs_reaper`)
/// only if no reap is marked, no turn runs and no client is attached (each term can be left out).
/// `token` is ours (alphanumeric): it can be put in a format as it is.
pub(super) fn mark_command(
    n: u32,
    now_ms: i64,
    token: &str,
    check_turn: bool,
    check_viewers: bool,
) -> TmuxCommand<'static> {
    let mut cond = "#{==:#{@ccs_reaping},}".to_string();
    if check_turn {
        cond = format!("#{{&&:{cond},#{{==:#{{@ccs_turn}},}}}}");
    }
    if check_viewers {
        cond = format!("#{{&&:{cond},#{{==:#{{session_attached}},0}}}}");
    }
    let t = quote(&format!("{}:", sid(n)));
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(cond)
        .command(format!(
            "set-option -t {t} @ccs_reaping {now_ms} ; set-option -t {t} @ccs_reaper {token}"
        ))
        .build()
}

/// Clear our mark of session `n` (only while it carries `token`).
pub(super) fn clear_command(n: u32, token: &str) -> TmuxCommand<'static> {
    let t = quote(&format!("{}:", sid(n)));
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(format!("#{{==:#{{@ccs_reaper}},{token}}}"))
        .command(format!(
            "set-option -u -t {t} @ccs_reaping ; set-option -u -t {t} @ccs_reaper"
        ))
        .build()
}

/// `kill-session -t $N`, only while the session carries our reap token in `@ccs_reaper` (so
/// never a session of a newer server that reuses `$N`).
pub(super) fn kill_command(n: u32, token: &str) -> TmuxCommand<'static> {
    IfShell::new()
        .not_execute()
        .target_pane(format!("{}:", sid(n)))
        .shell_command(format!("#{{==:#{{@ccs_reaper}},{token}}}"))
        .command(
            KillSession::new()
                .target_session(quote(&sid(n)))
                .build()
                .to_vec()
                .join(" "),
        )
        .build()
}

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
}
