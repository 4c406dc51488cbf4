//! What people read: the `status` table, the `--once` summary, and human units.

use crate::policy::{Action, ReapReason, State};

use serde::Serialize;

use crate::policy::{Decision, HostMemory};
use crate::state::AuditLine;

/// What one sweep saw and did.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub at: String,
    pub dry_run: bool,
    pub enabled: bool,
    /// A problem that kept every session (tmux failed, an activity file unreadable).
    pub error: Option<String>,
    /// The tmux socket swept (`-S` as given, `-L` where tmux puts it).
    pub socket_path: String,
    /// Whether a tmux server answered there: `false` none listens (a wrong socket, a
    /// `PrivateTmp=`, another `TMUX_TMPDIR`), `null` unknown (tmux failed: see `error`).
    pub tmux_server_up: Option<bool>,
    pub sessions: Vec<SessionReport>,
    pub host: Option<HostMemory>,
    /// Which memory `host` is, and why that one.
    pub watching: Option<String>,
    pub total_rss_bytes: u64,
    pub total_pss_bytes: Option<u64>,
    /// The reaps this sweep carried out (with `--once`; the daemon logs them as they finish).
    pub reaps: Vec<AuditLine>,
    pub took_ms: u64,
}

impl SweepReport {
    /// Why this sweep did not read a tmux server, if it did not: what `/healthz` and systemd's
    /// `STATUS=` say, and the warning of `--once` and `status`.
    pub fn server_problem(&self) -> Option<String> {
        match self.tmux_server_up {
            Some(true) => None,
            Some(false) => Some(format!("no tmux server at {}", self.socket_path)),
            None => Some(format!(
                "tmux at {} was not read: {}",
                self.socket_path,
                self.error.as_deref().unwrap_or("unknown error")
            )),
        }
    }
}

/// One session in a report (`status`, `--once --json`).
#[derive(Debug, Clone, Serialize)]
pub struct SessionReport {
    #[serde(flatten)]
    pub decision: Decision,
    pub tmux_target: String,
    pub turn: Option<String>,
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub viewer_list: Vec<ViewerReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ViewerReport {
    pub pid: u32,
    pub control_mode: bool,
    pub attached_ms: u64,
    pub idle_ms: u64,
    pub orphaned: Option<bool>,
}

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

/// The `status` table.
pub fn render_status(r: &SweepReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let now = chrono::DateTime::parse_from_rfc3339(&r.at)
        .map(|t| t.timestamp_millis())
        .unwrap_or(0);
    let _ = writeln!(
        o,
        "{:<20} {:<5} {:<8} {:>8} {:>9} {:<8} {:<9} {:<38} {:>9} {:>9}  WHY",
        "SESSION", "TMUX", "STATE", "IDLE FOR", "REAPED IN", "VIEWERS", "TURN", "CID", "RSS", "PSS"
    );
    for s in &r.sessions {
        let d = &s.decision;
        let idle = d.idle_ms.map(human_ms).unwrap_or_else(|| "-".into());
        let left = match (d.action, d.deadline_ms) {
            (Action::Reap, _) => "now".to_string(),
            (_, Some(t)) if matches!(d.state, State::Idle | State::New) => {
                human_ms(t.saturating_sub(now).max(0) as u64)
            }
            _ => "-".into(),
        };
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
        let turn = d
            .turn_since_ms
            .map(|t| human_ms(now.saturating_sub(t).max(0) as u64))
            .unwrap_or_else(|| "-".into());
        let mem = |b: Option<u64>| b.map(human_bytes).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            o,
            "{:<20} {:<5} {:<8} {:>8} {:>9} {:<8} {:<9} {:<38} {:>9} {:>9}  {}",
            d.name,
            s.tmux_target,
            d.state.as_str(),
            idle,
            left,
            viewers,
            turn,
            d.cid.as_deref().unwrap_or("-"),
            mem(s.rss_bytes),
            mem(s.pss_bytes),
            d.why
        );
    }
    let _ = writeln!(
        o,
        "{} session(s); total RSS {}, PSS {}",
        r.sessions.len(),
        human_bytes(r.total_rss_bytes),
        r.total_pss_bytes
            .map(human_bytes)
            .unwrap_or_else(|| "-".into())
    );
    if let Some(h) = r.host {
        let limit = h
            .limit_bytes
            .map(human_bytes)
            .unwrap_or_else(|| "no limit".into());
        let _ = writeln!(
            o,
            "memory used {} of {limit} (working set: page cache the kernel can drop is not counted)",
            human_bytes(h.used_bytes)
        );
        if let Some(w) = &r.watching {
            let _ = writeln!(o, "watching {w}");
        }
    }
    if !r.enabled {
        let _ = writeln!(
            o,
            "reaping is disabled (CCS_ENGINE_IDLE_KILL_MS unset or 0)"
        );
    }
    if let Some(e) = &r.error {
        let _ = writeln!(o, "liveness unknown, every session kept: {e}");
    }
    o
}

/// What `--once` prints without `--json`.
pub fn render_sweep(r: &SweepReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if r.dry_run {
        for s in r
            .sessions
            .iter()
            .filter(|s| s.decision.action == Action::Reap)
        {
            let reason = s.decision.reap_reason.map_or("?", ReapReason::as_str);
            let _ = writeln!(
                o,
                "would reap {} ({}): {reason}: {}",
                s.decision.name, s.tmux_target, s.decision.why
            );
        }
    }
    for l in &r.reaps {
        let _ = writeln!(
            o,
            "{} {} ({}): {}, {} processes (term {}, kill {}), {} freed, {} ms{}",
            l.outcome,
            l.session,
            l.tmux_id,
            l.reason,
            l.pids.len(),
            l.term,
            l.kill,
            human_bytes(l.pss_bytes.unwrap_or(l.rss_bytes)),
            l.took_ms,
            l.error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    let kept = r
        .sessions
        .iter()
        .filter(|s| s.decision.action == Action::Keep)
        .count();
    let _ = writeln!(
        o,
        "{} session(s), {} kept, {} reaped{}",
        r.sessions.len(),
        kept,
        r.reaps
            .iter()
            .filter(|l| l.outcome == crate::state::Outcome::Reaped)
            .count(),
        if r.dry_run { " (dry run)" } else { "" }
    );
    if let Some(e) = &r.error {
        let _ = writeln!(o, "liveness unknown, every session kept: {e}");
    }
    o
}
