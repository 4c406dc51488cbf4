//! "The chat" in tmux's terms: the one pane of its session `ccs-<id>`, still the pane ccs-reap
//! recorded as the chat's (`@ccs_pane` = `%<pane id>:<pane pid>`, written at first sight, `spawn`
//! or `resume`). A session that holds anything else (a pane split beside the chat, a window the
//! user opened, a window moved or linked in) is `shared`; a session whose one pane is not the
//! recorded one (swapped, moved, broken out, respawned) is `foreign`. Either is kept: a reap
//! takes the chat's own agent and nothing else (docs/rules.md, "The chat").
//!
//! Pure: the listing gives each pane's `%N`, pid, window and command.

use super::{Pane, Session, State};

/// The option that records the chat's own pane.
pub const PANE_OPTION: &str = "@ccs_pane";

/// A chat's pane as recorded: the `%N` number and the pid tmux started in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaneRecord {
    pub id: u32,
    pub pid: u32,
}

impl PaneRecord {
    /// The record of a listed pane, when its id is known.
    pub fn of(p: &Pane) -> Option<PaneRecord> {
        Some(PaneRecord {
            id: p.id?,
            pid: p.pid,
        })
    }

    /// As written into `@ccs_pane`: `%12:4567` (nothing in it that tmux expands or splits).
    pub fn value(&self) -> String {
        format!("%{}:{}", self.id, self.pid)
    }

    /// Read back from `@ccs_pane`; `None` when it is not one.
    pub fn parse(s: &str) -> Option<PaneRecord> {
        let (id, pid) = s.trim().strip_prefix('%')?.split_once(':')?;
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(id) || !digits(pid) {
            return None;
        }
        Some(PaneRecord {
            id: id.parse().ok()?,
            pid: pid.parse().ok()?,
        })
    }
}

/// What is there besides (or instead of) the chat: a state and a WHY for a chat that is kept
/// whatever its clock says, or `None` when the session is the chat's pane alone (or, not yet
/// recorded, holds one pane: judged by the other rules). A session [`asleep`] is never the chat
/// again, whatever it holds and whatever its record says: `shared`.
pub fn judge(s: &Session) -> Option<(State, String)> {
    if let Some(why) = asleep(s) {
        return Some((State::Shared, why));
    }
    let recorded = (!s.chat_pane.trim().is_empty()).then(|| PaneRecord::parse(&s.chat_pane));
    match (s.panes.as_slice(), recorded) {
        ([], _) => None,
        ([_], None) => None,
        ([p], Some(Some(r))) if PaneRecord::of(p) == Some(r) => None,
        ([p], Some(Some(r))) => Some((
            State::Foreign,
            format!(
                "the pane's process is not the chat's agent: {} runs `{}` (pid {}), the chat's was \
                 pane %{} (pid {}); was it swapped or moved?",
                pane_name(p),
                command(p),
                p.pid,
                r.id,
                r.pid
            ),
        )),
        ([_], Some(None)) => Some((
            State::Foreign,
            format!(
                "{PANE_OPTION} does not name a pane ({:?}): the chat's pane cannot be told; \
                 unset it to judge the session anew",
                s.chat_pane
            ),
        )),
        (panes, r) => {
            let chat = r.flatten();
            // The first pane that is not the chat's (by its record, else the first listed pane
            // stands for the chat).
            let other = panes
                .iter()
                .find(|p| chat.is_some_and(|c| PaneRecord::of(p) != Some(c)))
                .or_else(|| panes.get(1))
                .unwrap_or(&panes[0]);
            Some((
                State::Shared,
                format!(
                    "the session holds {} panes: {} runs `{}` (pid {}), not the chat's",
                    panes.len(),
                    pane_name(other),
                    command(other),
                    other.pid
                ),
            ))
        }
    }
}

/// Why session `s` is not its chat's any more (`Some`) when it is marked `@ccs_asleep`: its
/// chat was reaped from its own pane while the session lived on, so whatever is left, even one
/// pane, even one a record names, is the user's (killing it would kill the user's shell).
pub fn asleep(s: &Session) -> Option<String> {
    let v = s.asleep.trim();
    if v.is_empty() {
        return None;
    }
    let when = v
        .parse::<i64>()
        .ok()
        // `1`, as 49b marked it, is no time: a mark's ms are after 2001.
        .filter(|ms| *ms >= 1_000_000_000_000)
        .and_then(crate::core::time::rfc3339_checked)
        .map_or_else(
            || " (when, not recorded)".to_string(),
            |t| format!(" at {t}"),
        );
    Some(format!(
        "asleep: its chat's pane was reaped{when}; close the rest or kill-session {} (then resume {})",
        s.name, s.id
    ))
}

/// The pane to record as the chat's, at first sight: the session's one pane, when it has exactly
/// one, its id is listed and nothing is recorded yet.
pub fn to_record(s: &Session) -> Option<PaneRecord> {
    if !s.chat_pane.trim().is_empty() || s.problem.is_some() || !s.asleep.trim().is_empty() {
        return None;
    }
    match s.panes.as_slice() {
        [p] if !p.dead => PaneRecord::of(p),
        _ => None,
    }
}

/// A shared session judged as its chat's pane alone (`CCS_ENGINE_SHARED_SESSION=pane`): the
/// session with only the recorded pane in `panes` (the others set aside), marked `pane_only`.
/// `None` (judge the session whole) unless the session is sound, holds more than one pane, and
/// exactly one of them is the recorded chat's (same `%N`, same pid), alive.
pub fn narrow(s: &Session) -> Option<Session> {
    if s.problem.is_some()
        || s.panes.len() < 2
        || s.pane_only.is_some()
        || !s.asleep.trim().is_empty()
    {
        return None;
    }
    let r = PaneRecord::parse(&s.chat_pane)?;
    let mut mine = s.panes.iter().filter(|p| PaneRecord::of(p) == Some(r));
    let chat = mine.next()?;
    if mine.next().is_some() || chat.dead {
        return None;
    }
    let mut n = s.clone();
    n.panes = vec![chat.clone()];
    n.set_aside = s
        .panes
        .iter()
        .filter(|p| PaneRecord::of(p) != Some(r))
        .cloned()
        .collect();
    n.pane_only = Some(r);
    Some(n)
}

fn pane_name(p: &Pane) -> String {
    match (p.window_index, p.id) {
        (Some(w), Some(id)) => format!("window {w} (pane %{id})"),
        (None, Some(id)) => format!("pane %{id}"),
        _ => "a pane".to_string(),
    }
}

/// The program the pane was started with (its start command's first word, without the quotes
/// tmux puts around the command), or tmux's default shell when it was started with none.
fn command(p: &Pane) -> &str {
    p.start_command
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
        .find(|w| !w.is_empty())
        .unwrap_or("the default shell")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pane(id: u32, pid: u32, window: u32, cmd: &str) -> Pane {
        Pane {
            pid,
            dead: false,
            dead_status: None,
            dead_signal: None,
            exit_unreported: false,
            start_command: cmd.into(),
            id: Some(id),
            window: Some(window + 100),
            window_index: Some(window),
        }
    }

    fn sess(rec: &str, panes: Vec<Pane>) -> Session {
        Session {
            tmux_id: crate::core::policy::TmuxId(1),
            name: "ccs-1".into(),
            id: "1".into(),
            chat_pane: rec.into(),
            panes,
            ..Session::default()
        }
    }

    #[test]
    fn a_record_reads_back_as_written_and_nothing_else() {
        let r = PaneRecord { id: 12, pid: 4567 };
        assert_eq!(r.value(), "%12:4567");
        // (value, parsed)
        let table: &[(&str, Option<PaneRecord>)] = &[
            ("%12:4567", Some(r)),
            (" %12:4567 ", Some(r)),
            ("12:4567", None),
            ("%12", None),
            ("%:4567", None),
            ("%12:", None),
            ("%1x:4567", None),
            ("%+1:4567", None),
            ("%12:4567:1", None),
            ("%99999999999:1", None),
            ("", None),
        ];
        for (v, want) in table {
            assert_eq!(PaneRecord::parse(v), *want, "{v:?}");
        }
    }

    #[test]
    fn only_the_chats_own_pane_alone_is_the_chat() {
        let chat = || pane(3, 300, 0, "claude");
        // (recorded, panes, state kept with, a word of the WHY)
        type Row = (&'static str, Vec<Pane>, Option<State>, &'static str);
        let table: Vec<Row> = vec![
            // Alone: recorded or not yet (first sight is judged by the other rules).
            ("%3:300", vec![chat()], None, ""),
            ("", vec![chat()], None, ""),
            ("", vec![], None, ""),
            // A pane split beside the chat, or a window opened in its session.
            (
                "%3:300",
                vec![chat(), pane(4, 400, 0, "bash")],
                Some(State::Shared),
                "window 0 (pane %4) runs `bash` (pid 400)",
            ),
            (
                "%3:300",
                vec![pane(4, 400, 1, "sleep"), chat()],
                Some(State::Shared),
                "window 1 (pane %4) runs `sleep` (pid 400)",
            ),
            // Not recorded yet, and shared already: the second pane is named.
            (
                "",
                vec![chat(), pane(4, 400, 1, "sleep")],
                Some(State::Shared),
                "window 1 (pane %4)",
            ),
            // Swapped or moved in: another pane, or the same pane respawned (another pid).
            (
                "%3:300",
                vec![pane(4, 400, 0, "bash")],
                Some(State::Foreign),
                "swapped or moved",
            ),
            (
                "%3:300",
                vec![pane(3, 301, 0, "bash")],
                Some(State::Foreign),
                "pid 301",
            ),
            // A record that is not one: the chat's pane cannot be told.
            (
                "garbage",
                vec![chat()],
                Some(State::Foreign),
                "does not name",
            ),
            // As tmux lists a start command (quoted), or none (the default shell).
            (
                "%3:300",
                vec![chat(), pane(4, 400, 1, "\"sleep 100\"")],
                Some(State::Shared),
                "runs `sleep` (pid 400)",
            ),
            (
                "%3:300",
                vec![chat(), pane(4, 400, 1, "")],
                Some(State::Shared),
                "runs `the default shell`",
            ),
        ];
        for (rec, panes, want, word) in table {
            let s = sess(rec, panes.clone());
            let got = judge(&s);
            assert_eq!(got.as_ref().map(|g| g.0), want, "{rec:?} {panes:?}");
            if let Some((_, why)) = got {
                assert!(why.contains(word), "{why}");
            }
        }
    }

    /// A session asleep (its chat reaped from its pane) is never the chat again, whatever it
    /// holds and whatever its record says: shared, saying when and what to do.
    #[test]
    fn an_asleep_session_is_never_the_chat() {
        let chat = || pane(3, 300, 0, "claude");
        // (asleep, panes, record, a word of the WHY)
        let table: &[(&str, Vec<Pane>, &str, &str)] = &[
            (
                "1700000000000",
                vec![chat()],
                "%3:300",
                " at 2023-11-14T22:13:20.000Z; ",
            ),
            (
                "1700000000000",
                vec![chat()],
                "",
                "kill-session ccs-1 (then resume 1)",
            ),
            (
                "1",
                vec![pane(4, 400, 0, "sh"), chat()],
                "%9:9",
                "(when, not recorded)",
            ),
            ("garbage", vec![chat()], "%3:300", "(when, not recorded)"),
            ("-5", vec![chat()], "%3:300", "(when, not recorded)"),
        ];
        for (at, panes, rec, word) in table {
            let mut s = sess(rec, panes.clone());
            s.asleep = (*at).into();
            let (state, why) = judge(&s).expect("kept");
            assert_eq!(state, State::Shared, "{at:?}");
            assert!(
                why.starts_with("asleep: its chat's pane was reaped"),
                "{why}"
            );
            assert!(why.contains(word), "{why}");
        }
        // Unset (or blank) is not asleep.
        let mut s = sess("%3:300", vec![chat()]);
        s.asleep = "  ".into();
        assert_eq!(judge(&s), None);
    }

    #[test]
    fn a_shared_session_narrows_to_the_recorded_pane_only_when_it_is_there_alive() {
        let chat = || pane(3, 300, 0, "claude");
        let other = || pane(4, 400, 1, "bash");
        let n = narrow(&sess("%3:300", vec![other(), chat()])).expect("narrowed");
        assert_eq!(n.panes, vec![chat()]);
        assert_eq!(n.set_aside, vec![other()]);
        assert_eq!(n.pane_only, Some(PaneRecord { id: 3, pid: 300 }));
        // Judged whole: alone, nothing recorded, a record that is not one, the recorded pane
        // gone or respawned, dead, or the session's rows not trusted.
        assert!(narrow(&sess("%3:300", vec![chat()])).is_none());
        assert!(narrow(&sess("", vec![chat(), other()])).is_none());
        assert!(narrow(&sess("junk", vec![chat(), other()])).is_none());
        assert!(narrow(&sess("%3:301", vec![chat(), other()])).is_none());
        assert!(narrow(&sess("%5:300", vec![chat(), other()])).is_none());
        let mut dead = sess("%3:300", vec![chat(), other()]);
        dead.panes[0].dead = true;
        assert!(narrow(&dead).is_none());
        let mut odd = sess("%3:300", vec![chat(), other()]);
        odd.problem = Some("x".into());
        assert!(narrow(&odd).is_none());
        let mut asleep = sess("%3:300", vec![chat(), other()]);
        asleep.asleep = "1700000000000".into();
        assert!(narrow(&asleep).is_none());
        // Once narrowed, judged as the chat's pane alone.
        assert_eq!(judge(&n), None);
        assert!(narrow(&n).is_none());
    }

    #[test]
    fn the_pane_is_recorded_once_and_only_when_alone_and_alive() {
        let one = sess("", vec![pane(3, 300, 0, "claude")]);
        assert_eq!(to_record(&one), Some(PaneRecord { id: 3, pid: 300 }));
        let recorded = sess("%3:300", vec![pane(3, 300, 0, "claude")]);
        assert_eq!(to_record(&recorded), None);
        let two = sess("", vec![pane(3, 300, 0, "claude"), pane(4, 4, 1, "sh")]);
        assert_eq!(to_record(&two), None);
        let mut dead = one.clone();
        dead.panes[0].dead = true;
        assert_eq!(to_record(&dead), None);
        let mut no_id = one.clone();
        no_id.panes[0].id = None;
        assert_eq!(to_record(&no_id), None);
        let mut asleep = one.clone();
        asleep.asleep = "1".into();
        assert_eq!(to_record(&asleep), None);
        let mut odd = one;
        odd.problem = Some("x".into());
        assert_eq!(to_record(&odd), None);
    }
}
