//! What people read: the `status` table, the `--once` lines, a reap's line, the summary.

use crate::core::policy::{Action, ReapReason};
use crate::core::records::{AuditLine, Outcome};
use crate::core::report::{Summary, SweepReport};

mod status_parts;
pub use status_parts::{ASLEEP_SHOWN, NO_CID_FIX};

/// `1.2 GiB`, `512 MiB`, `64 KiB`, `12 B`.
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// `850ms`, `12.3s`, `5m03s`, `2h04m`.
pub fn human_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// `s` cut to `w` characters, the last one an ellipsis when anything was cut.
pub fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut c: String = s.chars().take(w.saturating_sub(1)).collect();
    c.push('…');
    c
}

/// The width `status` fits by default: a terminal's 80 columns.
pub const STATUS_COLUMNS: usize = 80;

/// One session's cells, as `status` shows them.
struct Row {
    name: String,
    tmux: String,
    state: &'static str,
    idle: String,
    left: String,
    viewers: String,
    turn: String,
    cid: String,
    agent: &'static str,
    rss: String,
    pss: String,
    why: String,
}

/// The report's time (Unix ms).
fn now_of(r: &SweepReport) -> i64 {
    chrono::DateTime::parse_from_rfc3339(&r.at)
        .map(|t| t.timestamp_millis())
        .unwrap_or(0)
}

fn rows(r: &SweepReport) -> Vec<Row> {
    let now = now_of(r);
    let mem = |b: Option<u64>| b.map(human_bytes).unwrap_or_else(|| "-".into());
    status_parts::by_time_to_reap(r)
        .into_iter()
        .map(|s| {
            let d = &s.decision;
            let left = status_parts::left(d, now);
            let viewers = if s.viewer_list.is_empty() {
                "0".to_string()
            } else {
                s.viewer_list
                    .iter()
                    .map(|v| {
                        let kind = if v.control_mode { "ctl" } else { "tty" };
                        let orphan = if v.orphaned == Some(true) { "!" } else { "" };
                        format!("{kind}{orphan}")
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            };
            Row {
                name: d.name.clone(),
                tmux: s.tmux_target.clone(),
                state: d.state.as_str(),
                // A first sight has no clock until a sweep starts it.
                idle: d
                    .idle_ms
                    .filter(|_| d.state != crate::core::policy::State::New)
                    .map(human_ms)
                    .unwrap_or_else(|| "-".into()),
                left,
                viewers,
                turn: d
                    .turn_since_ms
                    .map(|t| human_ms(now.saturating_sub(t).max(0) as u64))
                    .unwrap_or_else(|| "-".into()),
                cid: d.cid.clone().unwrap_or_else(|| "-".into()),
                agent: s.agent.unwrap_or("-"),
                rss: mem(s.rss_bytes),
                pss: mem(s.pss_bytes.or(s.rss_bytes)),
                why: status_parts::why(d, now),
            }
        })
        .collect()
}

/// The `status` table: by default within [`STATUS_COLUMNS`] (session, state, idle age, time
/// left, viewers, cid, memory (PSS, else RSS) and why; long values cut with `…`); `wide`: every
/// column (the tmux id, the turn's age, RSS and PSS apart), nothing cut.
pub fn render_status(r: &SweepReport, wide: bool) -> String {
    let mut o = String::new();
    let rows = rows(r);
    if wide {
        wide_table(&mut o, &rows);
    } else {
        narrow_table(&mut o, r, &rows);
    }
    status_footer(&mut o, r, wide);
    o
}

/// The `status --wide` table: every column, nothing cut.
fn wide_table(o: &mut String, rows: &[Row]) {
    use std::fmt::Write;
    let name_w = rows
        .iter()
        .map(|x| x.name.chars().count())
        .fold(20, usize::max);
    let cid_w = rows
        .iter()
        .map(|x| x.cid.chars().count())
        .fold(20, usize::max);
    let _ = writeln!(
        o,
        "{:<name_w$} {:<5} {:<7} {:>8} {:>9} {:<8} {:<9} {:<6} {:<cid_w$} {:>9} {:>9}  WHY",
        "SESSION",
        "TMUX",
        "STATE",
        "IDLE FOR",
        "REAPED IN",
        "VIEWERS",
        "TURN",
        "AGENT",
        "CID",
        "RSS",
        "PSS"
    );
    for x in rows {
        let _ = writeln!(
            o,
            "{:<name_w$} {:<5} {:<7} {:>8} {:>9} {:<8} {:<9} {:<6} {:<cid_w$} {:>9} {:>9}  {}",
            x.name,
            x.tmux,
            x.state,
            x.idle,
            x.left,
            x.viewers,
            x.turn,
            x.agent,
            x.cid,
            x.rss,
            x.pss,
            x.why
        );
    }
}

/// The `status` table within [`STATUS_COLUMNS`]: long values cut with `…`.
fn narrow_table(o: &mut String, r: &SweepReport, rows: &[Row]) {
    use std::fmt::Write;
    // 14+1+7+1+6+1+7+1+4+1+9+1+8+2 = 63: WHY gets the rest of the 80 columns. The agent
    // has a column (and SESSION 7 columns less) only when the chats run different ones;
    // else the totals line names it.
    let mixed = status_parts::agents(r).len() > 1;
    let name_w = if mixed { 12 } else { 14 };
    let line = |o: &mut String, cells: [&str; 9]| {
        let agent = if mixed {
            format!("{:<6} ", cut(cells[5], 6))
        } else {
            String::new()
        };
        let l = format!(
            "{:<name_w$} {:<7} {:>6} {:>7} {:<4} {agent}{:<9} {:>8}  {}",
            cut(cells[0], name_w),
            cut(cells[1], 7),
            cut(cells[2], 6),
            cut(cells[3], 7),
            cut(cells[4], 4),
            cut(cells[6], 9),
            cut(cells[7], 8),
            cells[8]
        );
        let _ = writeln!(o, "{}", cut(l.trim_end(), STATUS_COLUMNS));
    };
    line(
        o,
        [
            "SESSION", "STATE", "IDLE", "REAP IN", "VIEW", "AGENT", "CID", "MEM", "WHY",
        ],
    );
    for x in rows {
        line(
            o,
            [
                &x.name, x.state, &x.idle, &x.left, &x.viewers, x.agent, &x.cid, &x.pss, &x.why,
            ],
        );
    }
}

/// What `status` says under its table: the chats asleep, the totals, the chats lost with their
/// server, the memory gauge, what it watches, notes, and why nothing may be reaped.
fn status_footer(o: &mut String, r: &SweepReport, wide: bool) {
    use std::fmt::Write;
    for l in status_parts::asleep(r, now_of(r), wide) {
        let _ = writeln!(o, "{l}");
    }
    let asleep = if r.asleep.is_empty() {
        String::new()
    } else {
        format!(", {} asleep", r.asleep.len())
    };
    // Every chat runs the same agent: said here, once (else the AGENT column says it per chat).
    let agent = match status_parts::agents(r).as_slice() {
        [one] => format!(" ({one})"),
        _ => String::new(),
    };
    let _ = writeln!(
        o,
        "{} session(s){agent}{asleep}; total RSS {}, PSS {}",
        r.sessions.len(),
        human_bytes(r.total_rss_bytes),
        r.total_pss_bytes
            .map(human_bytes)
            .unwrap_or_else(|| "-".into())
    );
    // The lines under the table fit the 80 columns too, wrapped (never cut: they say what to do).
    let footer = |o: &mut String, text: &str| {
        for l in status_parts::wrap(text) {
            let _ = writeln!(o, "{l}");
        }
    };
    for c in &r.lost {
        footer(
            o,
            &format!(
                "{} lost with its tmux server (pid {}): tombstoned (server-died); spawn resumes conversation {}",
                c.session, c.server.pid, c.cid
            ),
        );
    }
    for l in status_parts::gauge(r) {
        let _ = writeln!(o, "{l}");
    }
    if let (Some(_), Some(w)) = (r.host, &r.watching) {
        let w = format!("watching {w}");
        let _ = writeln!(o, "{}", if wide { w } else { cut(&w, STATUS_COLUMNS) });
    }
    for l in status_parts::notes(r) {
        let _ = writeln!(o, "{l}");
    }
    if !r.enabled {
        footer(
            o,
            &format!(
                "reaping is disabled: it is off until {}",
                crate::config::ENABLED_BY
            ),
        );
    }
    if let Some(e) = &r.error {
        footer(o, &format!("liveness unknown, every session kept: {e}"));
    }
}

/// What `--once` prints without `--json`: [`render_reap`] for each reap, then
/// [`render_sweep_end`]. (`--once` prints each reap's line as it ends, the rest at the end.)
pub fn render_sweep(r: &SweepReport) -> String {
    let mut o: String = r.reaps.iter().map(render_reap).collect();
    o.push_str(&render_sweep_end(r));
    o
}

/// "1 process", "3 processes".
pub fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

/// One reap's line, as `--once` prints it when the reap is over.
pub fn render_reap(l: &AuditLine) -> String {
    format!(
        "{} {} ({}): {}, {} (term {}, kill {}), {}, {} ms{}\n",
        l.outcome,
        l.session,
        l.tmux_id,
        l.reason,
        processes(l.pids.len()),
        l.term,
        l.kill,
        freed(l),
        l.took_ms,
        l.error
            .as_ref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    )
}

/// What `--once` prints once the sweep is over, after the reaps' lines: what a dry run would
/// reap, the summary, and why liveness was unknown.
pub fn render_sweep_end(r: &SweepReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if r.dry_run {
        for s in r
            .sessions
            .iter()
            .filter(|s| s.decision.action() == Action::Reap)
        {
            let reason = s.decision.reap_reason().map_or("?", ReapReason::as_str);
            let _ = writeln!(
                o,
                "would reap {} ({}): {reason}: {}",
                s.decision.name, s.tmux_target, s.decision.why
            );
        }
    }
    let _ = writeln!(o, "{}", summary_line(&r.summary, r.dry_run));
    if let Some(e) = &r.error {
        let _ = writeln!(o, "liveness unknown, every session kept: {e}");
    }
    o
}

/// The memory a reap freed, as the `--once` line says it: only a reap that ended `reaped` freed
/// what its processes held; one never attempted (aborted, vetoed, not attempted) freed nothing,
/// and one that failed after its signals freed an unknown part.
pub fn freed(l: &AuditLine) -> String {
    let held = human_bytes(l.pss_bytes.unwrap_or(l.rss_bytes));
    match l.outcome {
        Outcome::Reaped => format!("{held} freed"),
        _ if l.term == 0 && l.kill == 0 => "nothing freed".into(),
        _ => format!("{held} held before the signals, not all freed"),
    }
}

/// The `--once` summary: `<seen> session(s), <kept> kept, <reaped> reaped`, then each other count
/// that is not zero, so that the counts add up to the sessions seen.
pub fn summary_line(s: &Summary, dry_run: bool) -> String {
    let mut o = format!(
        "{} session(s), {} kept, {} reaped",
        s.seen, s.kept, s.reaped
    );
    for (n, what) in [
        (s.held, "held by another reaper"),
        (s.aborted, "aborted"),
        (s.failed, "failed"),
        (s.would_reap, "would be reaped"),
        (s.started, "being reaped"),
    ] {
        if n > 0 {
            o.push_str(&format!(", {n} {what}"));
        }
    }
    if dry_run {
        o.push_str(" (dry run)");
    }
    if s.recovered > 0 {
        o.push_str(&format!(
            "; {} teardown(s) of a dead reaper finished",
            s.recovered
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(outcome: Outcome, term: usize, kill: usize) -> AuditLine {
        let mut l = AuditLine::begin(
            "2026-01-01T00:00:00Z".into(),
            "ccs-1",
            "1",
            crate::core::policy::TmuxId(1),
            None,
            ReapReason::Idle,
            None,
        );
        l.outcome = outcome;
        l.term = term;
        l.kill = kill;
        l.rss_bytes = 300 * 1024 * 1024;
        l
    }

    #[test]
    fn only_a_reap_that_ended_reaped_freed_memory() {
        let table = [
            (line(Outcome::Reaped, 4, 0), "300 MiB freed"),
            // Never attempted: vetoed, aborted on re-check, not attempted.
            (line(Outcome::Aborted, 0, 0), "nothing freed"),
            (line(Outcome::Failed, 0, 0), "nothing freed"),
            // Failed after its signals: some of it may be freed.
            (
                line(Outcome::Failed, 4, 1),
                "300 MiB held before the signals, not all freed",
            ),
        ];
        for (l, want) in table {
            assert_eq!(freed(&l), want, "{:?}", l.outcome);
        }
    }

    #[test]
    fn the_summary_line_names_every_count_that_is_not_zero() {
        let table = [
            (Summary::default(), false, "0 session(s), 0 kept, 0 reaped"),
            (
                Summary {
                    seen: 3,
                    kept: 3,
                    ..Summary::default()
                },
                true,
                "3 session(s), 3 kept, 0 reaped (dry run)",
            ),
            (
                Summary {
                    seen: 5,
                    kept: 1,
                    reaped: 1,
                    held: 1,
                    aborted: 1,
                    failed: 1,
                    recovered: 2,
                    ..Summary::default()
                },
                false,
                "5 session(s), 1 kept, 1 reaped, 1 held by another reaper, 1 aborted, 1 failed; 2 teardown(s) of a dead reaper finished",
            ),
            (
                Summary {
                    seen: 2,
                    kept: 1,
                    would_reap: 1,
                    ..Summary::default()
                },
                true,
                "2 session(s), 1 kept, 0 reaped, 1 would be reaped (dry run)",
            ),
        ];
        for (s, dry_run, want) in table {
            assert_eq!(summary_line(&s, dry_run), want);
        }
    }
}
