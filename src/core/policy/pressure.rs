//! The pressure rules of [`super::decide`]: max-idle, bloat and memory (with its stall), each
//! over the same candidates, ranked oldest-idle first.

use super::*;

/// The sessions the pressure rules may take: those that passed rules 1-6 and are still kept,
/// idle, oldest-idle first (ties: lowest tmux id, the older session). A session that a reap in
/// flight holds (`@ccs_reaping`) is going already: never taken twice (its memory counts as
/// freed, [`memory_rule`]).
pub(super) fn eligible(snap: &Snapshot, out: &[Decision]) -> Vec<usize> {
    let mut eligible: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(i, d)| {
            d.state == State::Idle && d.action() == Action::Keep && !snap.sessions[*i].is_marked()
        })
        .map(|(i, _)| i)
        .collect();
    eligible.sort_by_key(|&i| {
        (
            std::cmp::Reverse(out[i].idle_ms.unwrap_or(0)),
            out[i].tmux_id,
        )
    });
    eligible
}

/// Idle at least the floor: only then may a pressure rule take it.
fn floor(d: &Decision, policy: &Policy) -> bool {
    d.idle_ms.unwrap_or(0) >= policy.min_idle_ms
}

/// Max-idle: at most `CCS_ENGINE_MAX_IDLE` idle sessions kept, the oldest idle go first.
pub(super) fn max_idle_rule(out: &mut [Decision], eligible: &[usize], policy: &Policy) {
    if let Some(max) = policy.max_idle {
        let excess = eligible.len().saturating_sub(max);
        for &i in eligible.iter().take(excess) {
            if floor(&out[i], policy) {
                let d = &mut out[i];
                d.state = State::Expired;
                d.ruling = Ruling::Reap(ReapReason::MaxIdle);
                d.why = format!(
                    "{} idle sessions, at most {max} kept: oldest idle goes first",
                    eligible.len()
                );
            }
        }
    }
}

/// Bloat: a session idle past the floor whose tree holds more than CCS_ENGINE_SESSION_MEM_MAX
/// goes, whatever the total: it comes back small on its next message.
pub(super) fn bloat_rule(
    snap: &Snapshot,
    out: &mut [Decision],
    eligible: &[usize],
    policy: &Policy,
) {
    if let Some(max) = policy.session_mem_max {
        for &i in eligible {
            let mem = snap.sessions[i].mem_bytes.unwrap_or(0);
            if out[i].action() == Action::Keep && floor(&out[i], policy) && mem > max {
                let d = &mut out[i];
                d.state = State::Expired;
                d.ruling = Ruling::Reap(ReapReason::Bloat);
                d.why = format!("its processes hold {mem} bytes, more than {max}");
            }
        }
    }
}

/// Memory: above the threshold (or stalled on memory past CCS_ENGINE_MEM_PSI, which takes at
/// least one), reap the oldest idle until the projection (used minus what the trees being
/// reaped hold) is below it.
pub(super) fn memory_rule(
    snap: &Snapshot,
    out: &mut [Decision],
    eligible: &[usize],
    policy: &Policy,
) {
    let stalled = matches!((policy.mem_psi, snap.stall_pct), (Some(max), Some(now)) if now >= max);
    let limit = mem_limit(policy, snap.host);
    let used = snap.host.map(|h| h.used_bytes);
    if (limit.is_some() && used.is_some()) || stalled {
        let freed: u64 = out
            .iter()
            .zip(&snap.sessions)
            .filter(|(d, s)| d.action() == Action::Reap || s.is_marked())
            .map(|(_, s)| s.mem_bytes.unwrap_or(0))
            .sum();
        let mut projected = used.unwrap_or(0).saturating_sub(freed);
        // A stall takes one, unless a reap in flight is freeing memory already (PSI lags).
        let mut must = stalled && freed == 0;
        // Sizes not known (the process table could not be read): at most one this sweep.
        let sized = eligible
            .iter()
            .all(|&i| snap.sessions[i].mem_bytes.is_some());
        let mut taken = 0;
        for &i in eligible {
            let over = matches!(limit, Some(l) if projected > l);
            if !over && !must {
                break;
            }
            if out[i].action() == Action::Reap || !floor(&out[i], policy) {
                continue;
            }
            let mem = snap.sessions[i].mem_bytes.unwrap_or(0);
            let d = &mut out[i];
            d.state = State::Expired;
            d.ruling = Ruling::Reap(ReapReason::Memory);
            d.why = match limit {
                Some(l) if over => {
                    format!("memory {projected} bytes above {l}: oldest idle goes first")
                }
                _ => format!(
                    "stalled on memory ({:.1}% of the time, limit {:.1}%): oldest idle goes first",
                    snap.stall_pct.unwrap_or(0.0),
                    policy.mem_psi.unwrap_or(0.0)
                ),
            };
            projected = projected.saturating_sub(mem);
            must = false;
            taken += 1;
            if !sized && taken >= 1 {
                break;
            }
        }
    }
}
