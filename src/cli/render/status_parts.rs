//! The parts of the `status` table that say what is true of a look that writes nothing: the rows'
//! order (by time to reap), each row's countdown and reason as `status` can claim them, the memory
//! gauge, the notes that say how to fix a chat that can never be reaped, and the chats asleep.

use crate::core::policy::{Action, Decision, State};
use crate::core::report::{Asleep, SessionReport, SweepReport};

use super::{cut, human_bytes, human_ms, STATUS_COLUMNS};

/// How many asleep chats the table shows (the newest); `--json` lists them all.
pub const ASLEEP_SHOWN: usize = 20;

/// The fix for a Claude Code chat whose conversation id is unknown (a plain `claude` whose
/// `SessionStart` hook has not run: the hooks are not in its settings, or it started before they
/// were written). Another agent's chat is told its own ([`crate::agents::hooks_fix`]).
pub const NO_CID_FIX: &str = crate::agents::CLAUDE.hooks_fix;

/// The sessions in the order of their time to reap: those to be reaped now, then by deadline,
/// then those with no countdown (in tmux order).
pub fn by_time_to_reap(r: &SweepReport) -> Vec<&SessionReport> {
    let mut v: Vec<&SessionReport> = r.sessions.iter().collect();
    v.sort_by_key(|s| {
        let d = &s.decision;
        let deadline = countdown_runs(d).then_some(d.deadline_ms).flatten();
        (
            d.action() != Action::Reap,
            deadline.is_none(),
            deadline.unwrap_or(0),
            d.tmux_id,
        )
    });
    v
}

/// Whether an idle countdown runs for `d`: a clock that was stamped (a first sight has none until
/// a sweep starts it) and a limit.
fn countdown_runs(d: &Decision) -> bool {
    d.state == State::Idle && d.deadline_ms.is_some()
}

/// The `REAP IN` cell: `now` for a reap, the time left where a countdown runs, else `-`.
pub fn left(d: &Decision, now: i64) -> String {
    match (d.action(), d.deadline_ms) {
        (Action::Reap, _) => "now".into(),
        (_, Some(t)) if countdown_runs(d) => human_ms(t.saturating_sub(now).max(0) as u64),
        _ => "-".into(),
    }
}

/// The reason as `status` may say it: it writes nothing (no "idle clock started"), and the idle
/// age is in its own column.
pub fn why(d: &Decision, now: i64) -> String {
    let limit = || {
        d.deadline_ms
            .zip(d.idle_ms)
            .map(|(t, i)| human_ms((t - (now - i as i64)).max(0) as u64))
    };
    match d.state {
        State::New if d.why.starts_with("first sight") => "no idle clock yet".into(),
        State::New => "idle stamp garbage".into(),
        State::NoCid => "no cid: see below".into(),
        State::Unseen => "turns unseen: see below".into(),
        State::Idle => match limit() {
            Some(l) => format!("limit {l}"),
            None => "no idle limit".into(),
        },
        State::Expired => match limit() {
            Some(l) => format!("past limit {l}"),
            None => d.why.clone(),
        },
        _ => d.why.clone(),
    }
}

/// `s` broken into lines of at most [`STATUS_COLUMNS`], at spaces, the lines after the first
/// indented by two.
pub fn wrap(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for w in s.split(' ') {
        let indent = if out.is_empty() { 0 } else { 2 };
        if !line.is_empty()
            && indent + line.chars().count() + 1 + w.chars().count() > STATUS_COLUMNS
        {
            out.push(std::mem::take(&mut line));
        }
        if line.is_empty() {
            line = format!("{}{w}", " ".repeat(if out.is_empty() { 0 } else { 2 }));
        } else {
            line.push(' ');
            line.push_str(w);
        }
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

/// The agents the live chats run (`-`: not told by its start command), each once, sorted.
pub fn agents(r: &SweepReport) -> Vec<&'static str> {
    let mut a: Vec<&'static str> = r.sessions.iter().map(|s| s.agent.unwrap_or("-")).collect();
    a.sort_unstable();
    a.dedup();
    a
}

/// The notes under the table: why a chat has no countdown and how to fix it.
pub fn notes(r: &SweepReport) -> Vec<String> {
    let no_cid: Vec<&SessionReport> = by_time_to_reap(r)
        .into_iter()
        .filter(|s| s.decision.state == State::NoCid)
        .collect();
    let unseen: Vec<&str> = by_time_to_reap(r)
        .into_iter()
        .filter(|s| s.decision.state == State::Unseen)
        .map(|s| s.decision.name.as_str())
        .collect();
    let mut out = Vec::new();
    out.extend(
        crate::engine::doctor::no_cid_notes(&no_cid)
            .iter()
            .flat_map(|n| wrap(n)),
    );
    for (cid, names) in crate::core::report::shared_conversations(r) {
        out.extend(wrap(&format!(
            "two live agents hold conversation {cid} ({}): each writes into the same transcript; stop all but one (ccs-reap doctor says the same)",
            names.join(", ")
        )));
    }
    if !unseen.is_empty() {
        out.extend(wrap(&format!(
            "unseen ({}): never reaped, as a turn may be running: nothing reports their turns (no hook, no status file of their agent, no activity file). Fix: {}",
            unseen.join(", "),
            crate::core::policy::UNSEEN_FIX
        )));
    }
    out
}

/// A bar of `width` cells: `#` used, `|` at the threshold, `.` the rest of the limit.
fn bar(used: u64, threshold: Option<u64>, limit: u64, width: usize) -> String {
    let cell = |b: u64| ((b as f64 / limit.max(1) as f64) * width as f64).round() as usize;
    let filled = cell(used).min(width);
    let mark = threshold.map(|t| cell(t).min(width.saturating_sub(1)));
    (0..width)
        .map(|i| match mark {
            Some(m) if i == m => '|',
            _ if i < filled => '#',
            _ => '.',
        })
        .collect()
}

/// The memory gauge: used, the threshold and the limit; and, when a pressure rule is over its
/// threshold with nothing to take (no idle chat past the floor), a line that says so.
pub fn gauge(r: &SweepReport) -> Vec<String> {
    let Some(h) = r.host else {
        return Vec::new();
    };
    let g = r.gauge;
    let used = human_bytes(h.used_bytes);
    let threshold = g.mem_threshold_bytes.map_or_else(
        || "no threshold".to_string(),
        |t| format!("threshold {}", human_bytes(t)),
    );
    let mut out = vec![match h.limit_bytes {
        Some(l) => format!(
            "memory [{}] used {used}, {threshold}, limit {}",
            bar(h.used_bytes, g.mem_threshold_bytes, l, 20),
            human_bytes(l)
        ),
        None => format!("memory used {used}, {threshold}, no limit"),
    }];
    // (A report made by hand, as the snapshots' are, has no figure.)
    out.extend((g.new_chat_bytes > 0).then(|| {
        format!(
            "room for a new chat: needs {}{}; live {}{}",
            human_bytes(g.new_chat_bytes),
            g.room_bytes
                .map_or_else(String::new, |b| format!(", room {}", human_bytes(b))),
            g.live_chats,
            g.max_live.map_or_else(String::new, |m| format!(" of {m}"))
        )
    }));
    let taken = |why: crate::core::policy::ReapReason| {
        r.sessions
            .iter()
            .any(|s| s.decision.reap_reason() == Some(why))
    };
    let mem_over = g.mem_threshold_bytes.is_some_and(|t| h.used_bytes >= t);
    let stall_over = g
        .stall_pct
        .zip(g.stall_threshold_pct)
        .is_some_and(|(p, t)| p >= t);
    if (mem_over || stall_over) && !taken(crate::core::policy::ReapReason::Memory) {
        let what = match (mem_over, g.stall_pct) {
            (true, _) => "over its threshold (CCS_ENGINE_MEM_HIGH)".to_string(),
            (false, Some(p)) => format!("stalled {p:.1}% (CCS_ENGINE_MEM_PSI)"),
            (false, None) => "over its threshold".to_string(),
        };
        out.extend(wrap(&format!(
            "memory is {what} with nothing to take: no idle chat past CCS_ENGINE_MIN_IDLE_MS"
        )));
    }
    out
}

/// The chats asleep, after the live ones: the newest [`ASLEEP_SHOWN`] (all with `wide`), each with
/// when and why it was reaped, its cid and the command that brings it back; then the count of
/// the rest.
pub fn asleep(r: &SweepReport, now: i64, wide: bool) -> Vec<String> {
    if r.asleep.is_empty() {
        return Vec::new();
    }
    let ago = |a: &Asleep| {
        chrono::DateTime::parse_from_rfc3339(&a.reaped_at).map_or_else(
            |_| a.reaped_at.clone(),
            |t| {
                format!(
                    "{} ago",
                    human_ms(now.saturating_sub(t.timestamp_millis()).max(0) as u64)
                )
            },
        )
    };
    let shown = if wide { r.asleep.len() } else { ASLEEP_SHOWN };
    let mut out = Vec::new();
    let mut line = |cells: [&str; 6]| {
        let l = if wide {
            format!(
                "{:<20} {:<6} {:<14} {:<11} {:<36}  {}",
                cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
            )
        } else {
            // 14+1+6+1+10+1+8+1+9+2 = 53: the command gets the rest.
            format!(
                "{:<14} {:<6} {:<10} {:<8} {:<9}  {}",
                cut(cells[0], 14),
                cut(cells[1], 6),
                cut(cells[2], 10),
                cut(cells[3], 8),
                cut(cells[4], 9),
                cells[5]
            )
        };
        out.push(cut(
            l.trim_end(),
            if wide { usize::MAX } else { STATUS_COLUMNS },
        ));
    };
    line(["ASLEEP", "STATE", "REAPED", "WHY", "CID", "BRING BACK"]);
    for a in r.asleep.iter().take(shown) {
        line([
            &a.session,
            a.state,
            &ago(a),
            a.reason.as_str(),
            a.cid.as_deref().unwrap_or("-"),
            &a.command,
        ]);
    }
    if r.asleep.len() > shown {
        out.push(format!(
            "... and {} more asleep (status --json or --wide lists all)",
            r.asleep.len() - shown
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_marks_use_and_threshold() {
        let table = [
            (0, None, 100, 10, ".........."),
            (50, None, 100, 10, "#####....."),
            (50, Some(80), 100, 10, "#####...|."),
            (90, Some(80), 100, 10, "########|."),
            (100, Some(80), 100, 10, "########|#"),
            (200, Some(100), 100, 10, "#########|"),
        ];
        for (used, t, limit, w, want) in table {
            assert_eq!(bar(used, t, limit, w), want, "{used} {t:?}");
        }
    }

    #[test]
    fn wrapped_lines_fit() {
        let long = "word ".repeat(40);
        let lines = wrap(long.trim());
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.chars().count() <= STATUS_COLUMNS));
        assert!(lines[1].starts_with("  word"));
    }
}
