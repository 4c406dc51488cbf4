//! Commands handed to the server as a script on the client's stdin (`source-file -`), for a batch
//! larger than one invocation's argument limit (tmux takes about 16 KB of argv a client). Each
//! invocation costs the server a new client, a dozen messages and a poll of every pane for each,
//! which at 1000 sessions is 10 ms a call: 25 argv chains for 1000 reap marks cost a quarter of
//! the marking. A script carries any number of lines in one call.
//!
//! A script is parsed as a configuration file, which expands `$VAR`, `~` and `%` directives in
//! words that are not single-quoted. So every word is single-quoted (a `'` inside one written
//! `'\''`, which tmux 3.1c to 3.5a read alike), after undoing what the argv form means by a
//! trailing `\;` (a literal `;`): the server reads exactly the words the argv chain would have
//! given it, and expands nothing. Each line is its own command group: a command that fails
//! stops the rest of its line only, never the next session's.

use std::borrow::Cow;

use tmux_interface::TmuxCommand;

use super::TmuxError;

/// The lines of one `source-file -` call at most: a call's time grows with the number of
/// sessions on the server, and each call has the whole timeout of one tmux call.
pub(super) const LINES_PER_CALL: usize = 256;

/// One argv word as the server would read it from the command line: a trailing `\;` is a
/// literal `;` there (tmux's `cmd_parse_from_arguments`). `None` for a word that would end a
/// command (a bare trailing `;`): the builders never make one, and it must not be guessed at.
fn argv_meaning(word: &str) -> Option<Cow<'_, str>> {
    match word.strip_suffix(';') {
        None => Some(Cow::Borrowed(word)),
        Some(rest) => rest
            .strip_suffix('\\')
            .map(|head| Cow::Owned(format!("{head};"))),
    }
}

/// `word` single-quoted for a configuration file.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// One script line: the commands of `cmds` (one session's), `;`-separated, every word quoted.
/// A word that holds a line break or a NUL, or ends a command, cannot be passed so: an error,
/// nothing sent.
pub(super) fn line(cmds: &[TmuxCommand<'_>]) -> Result<String, TmuxError> {
    let mut out = String::new();
    for (i, c) in cmds.iter().enumerate() {
        if i > 0 {
            out.push_str(" ;");
        }
        for w in c.to_vec() {
            let bad = |why| TmuxError::BadArgument {
                what: "script word",
                value: w.to_string(),
                why,
            };
            if w.contains(['\n', '\r', '\0']) {
                return Err(bad("it holds a line break or a NUL"));
            }
            let meant = argv_meaning(&w).ok_or_else(|| bad("it ends with an unescaped `;`"))?;
            out.push(' ');
            out.push_str(&quoted(&meant));
        }
    }
    Ok(out.trim_start().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmux_interface::{DisplayMessage, IfShell};

    #[test]
    fn words_as_the_server_reads_them() {
        // (argv word, what the server reads, as quoted in a script)
        let table: &[(&str, Option<&str>)] = &[
            ("plain", Some("'plain'")),
            ("", Some("''")),
            ("$1:", Some("'$1:'")),
            ("~/x $HOME %if", Some("'~/x $HOME %if'")),
            ("#{session_id}", Some("'#{session_id}'")),
            ("a'b", Some(r"'a'\''b'")),
            ("set -t '$1:' @x 5", Some(r"'set -t '\''$1:'\'' @x 5'")),
            ("a\\;", Some("'a;'")),
            ("a;b", Some("'a;b'")),
            ("a\\b", Some(r"'a\b'")),
            ("a;", None),
            (";", None),
        ];
        for (w, want) in table {
            assert_eq!(
                argv_meaning(w).map(|m| quoted(&m)).as_deref(),
                *want,
                "{w:?}"
            );
        }
    }

    #[test]
    fn a_line_is_the_commands_joined() {
        let cmds = [
            IfShell::new()
                .not_execute()
                .target_pane("$3:")
                .shell_command("#{==:#{session_id},$3}")
                .command("display-message -p 'x'")
                .build(),
            DisplayMessage::new().print().message("ok\\;").build(),
        ];
        assert_eq!(
            line(&cmds).unwrap(),
            r"'if-shell' '-F' '-t' '$3:' '#{==:#{session_id},$3}' 'display-message -p '\''x'\''' ; 'display-message' '-p' 'ok;'"
        );
    }

    #[test]
    fn words_that_cannot_be_passed_are_refused() {
        for m in ["a\nb", "a\rb", "a\0b", "end;"] {
            let c = DisplayMessage::new().print().message(m).build();
            assert!(
                matches!(line(&[c]), Err(TmuxError::BadArgument { .. })),
                "{m:?}"
            );
        }
    }
}
