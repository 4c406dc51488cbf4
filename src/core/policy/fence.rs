//! The rules of the handoff between reapers and the studio, as pure functions: who owns a reap
//! mark, when a mark may be cleared as stale, whether a reap may go on to its first signal (the
//! fence), and what `turn begin` answers. The code and the model of the protocol
//! (`tests/it/model.rs`) both call these, so the model checks the rules the code runs.
//!
//! A mark (`@ccs_reaping` = the time it was set, and `CCS_REAP_TOKEN` in the session's
//! environment) names its owner in the token: `f1_<pid>_<start>_<pidns>_<limit ms>_<nonce>`. A
//! mark whose owner is alive, stopped included, is never stale, whatever the clock says: only a
//! mark whose owner is gone, or cannot be checked from here (another pid namespace), is cleared,
//! and then only after the limit the owner wrote into it. The reader's own settings play no part.

use super::parse_ms;

/// The owner of a reap mark, as its token names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkOwner {
    /// The owner's pid, in its own pid namespace.
    pub pid: i32,
    /// Its start time (clock ticks since boot, /proc/PID/stat field 22): a reused pid differs.
    pub start: u64,
    /// The inode of its pid namespace (`/proc/self/ns/pid`): its pid means nothing elsewhere.
    pub pidns: u64,
    /// How long after the mark was set it may be taken for stale, should the owner be gone.
    pub limit_ms: i64,
}

const TOKEN_TAG: &str = "f1";

impl MarkOwner {
    /// The token of one reap by this owner: the owner's fields, then `nonce` (unique per reap).
    /// Only `[A-Za-z0-9_]`: it goes verbatim into a tmux format and a command string.
    pub fn token(&self, nonce: &str) -> String {
        let nonce: String = nonce
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        format!(
            "{TOKEN_TAG}_{}_{}_{}_{}_{nonce}",
            self.pid, self.start, self.pidns, self.limit_ms
        )
    }

    /// The owner a token names, or `None` for a token of an earlier version (or garbage): such
    /// a mark is judged by the reader's own limit, as earlier versions did.
    pub fn from_token(token: &str) -> Option<MarkOwner> {
        let mut f = token.trim().split('_');
        if f.next() != Some(TOKEN_TAG) {
            return None;
        }
        let pid: i32 = f.next()?.parse().ok().filter(|&p| p > 0)?;
        let start: u64 = f.next()?.parse().ok()?;
        let pidns: u64 = f.next()?.parse().ok()?;
        let limit_ms: i64 = f.next()?.parse().ok().filter(|&l| l > 0)?;
        let nonce = f.next()?;
        if nonce.is_empty()
            || !nonce.chars().all(|c| c.is_ascii_alphanumeric())
            || f.next().is_some()
        {
            return None;
        }
        Some(MarkOwner {
            pid,
            start,
            pidns,
            limit_ms,
        })
    }
}

/// What a reader can tell of a mark's owner, from where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerSeen {
    /// Alive (running, sleeping or stopped): its mark holds.
    Alive,
    /// Gone: no process with that pid and start time in our pid namespace.
    Gone,
    /// Cannot be checked from here: another pid namespace, or /proc could not tell.
    Unknowable,
}

/// Whether a `@ccs_reaping` mark may be cleared as stale at `now`.
///
/// - no mark: nothing to clear;
/// - a mark that is not a time: stale (it would block the session forever);
/// - a mark whose token names its owner: never stale while the owner is alive; else stale once
///   older than the limit the owner wrote into the token;
/// - a mark of an earlier version (no owner in its token): stale once older than
///   `reader_limit_ms`, the reader's own limit, as earlier versions judged it.
pub fn mark_is_stale(
    reaping: &str,
    owner: Option<&MarkOwner>,
    seen: OwnerSeen,
    now: i64,
    reader_limit_ms: i64,
) -> bool {
    if reaping.trim().is_empty() {
        return false;
    }
    let Some(at) = parse_ms(reaping) else {
        return true;
    };
    match owner {
        Some(_) if seen == OwnerSeen::Alive => false,
        Some(o) => now.saturating_sub(at) > o.limit_ms,
        None => now.saturating_sub(at) > reader_limit_ms,
    }
}

/// Whether a mark holds the session (another reap's, not stale): not ours to start on.
pub fn mark_holds(
    reaping: &str,
    owner: Option<&MarkOwner>,
    seen: OwnerSeen,
    now: i64,
    reader_limit_ms: i64,
) -> bool {
    parse_ms(reaping).is_some() && !mark_is_stale(reaping, owner, seen, now, reader_limit_ms)
}

/// Whether a reap journal's teardown is to be taken as still under way by its owner: yes while the
/// owner is alive; no once it is gone; when it cannot be checked from here (another pid namespace),
/// yes until the journal is older than the limit its owner wrote (`age_ms` since it was begun).
/// A journal under way is never finished or released by another reaper, and its chat's mark is
/// not cleared.
pub fn journal_owner_live(seen: OwnerSeen, age_ms: i64, limit_ms: i64) -> bool {
    match seen {
        OwnerSeen::Alive => true,
        OwnerSeen::Gone => false,
        OwnerSeen::Unknowable => age_ms <= limit_ms,
    }
}

/// Why the fence stopped a reap before its first signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceFail {
    /// The session no longer carries our mark and token (cleared, taken over, or gone), was
    /// renamed since the re-check, or a viewer has attached since the mark.
    MarkLost,
    /// Our mark is still there, but so old that a reader that cannot see us (another pid
    /// namespace) may clear it before the teardown ends: the lease ran out.
    LeaseExpired,
}

impl FenceFail {
    pub fn as_str(self) -> &'static str {
        match self {
            FenceFail::MarkLost => {
                "the session no longer carries this reap's mark under its name, or a viewer attached"
            }
            FenceFail::LeaseExpired => {
                "this reap's mark is too old to finish the teardown under it"
            }
        }
    }
}

/// The fence, right before the first signal: the server says whether the session still carries
/// our mark and token (`held`, read in one guarded tmux call), and the mark set at `mark_at` with
/// our `limit_ms` must still have `rest_ms` to run (the grace and the calls that follow) before a
/// reader elsewhere may take it for stale.
pub fn fence(
    held: bool,
    mark_at: i64,
    now: i64,
    limit_ms: i64,
    rest_ms: i64,
) -> Result<(), FenceFail> {
    if !held {
        return Err(FenceFail::MarkLost);
    }
    if now.saturating_sub(mark_at).saturating_add(rest_ms) > limit_ms {
        return Err(FenceFail::LeaseExpired);
    }
    Ok(())
}

/// What the server answered to `turn begin`'s one guarded call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnSeen {
    /// No mark, a live pane: the turn is marked.
    Started,
    /// A reap mark is on the session: nothing was written.
    Marked,
    /// The session is gone, or its pane exited.
    Gone,
}

/// `turn begin`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// Exit 0: the turn runs on a live chat that no reap holds.
    Go,
    /// Exit 4: the chat is gone (or was reaped, its teardown over): respawn it.
    Respawn,
    /// Ask again a moment later: a reap holds the chat, or its teardown still runs.
    Wait,
    /// Exit 1: the deadline passed with the chat still held.
    TimedOut,
}

/// `turn begin`: `seen` from the server; `teardown_running` whether a live reaper's journal for
/// the chat is still there (its tree may still be dying); `past_deadline` whether the documented
/// wait is over. Never `Go` unless the server itself marked the turn with no reap mark on.
pub fn handoff(seen: TurnSeen, teardown_running: bool, past_deadline: bool) -> Handoff {
    match seen {
        TurnSeen::Started => Handoff::Go,
        TurnSeen::Gone if !teardown_running => Handoff::Respawn,
        TurnSeen::Gone | TurnSeen::Marked if past_deadline => Handoff::TimedOut,
        TurnSeen::Gone | TurnSeen::Marked => Handoff::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: MarkOwner = MarkOwner {
        pid: 4242,
        start: 987654,
        pidns: 4026531836,
        limit_ms: 30_000,
    };

    #[test]
    fn tokens_name_their_owner() {
        let t = OWNER.token("7x1234");
        assert_eq!(t, "f1_4242_987654_4026531836_30000_7x1234");
        assert!(t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        assert_eq!(MarkOwner::from_token(&t), Some(OWNER));
        // A nonce never smuggles a separator or a format character in.
        let odd = OWNER.token("a_b}#{c");
        assert_eq!(MarkOwner::from_token(&odd), Some(OWNER));
        // (token, owner found)
        let table: &[(&str, bool)] = &[
            ("", false),
            ("r4242x0x123", false), // 0.2's token: no owner
            ("f1_4242_987654_4026531836_30000_n", true),
            ("f1_4242_987654_4026531836_30000_", false),
            ("f1_4242_987654_4026531836_0_n", false),
            ("f1_-1_987654_4026531836_30000_n", false),
            ("f1_4242_987654_4026531836_30000_n_extra", false),
            ("f2_4242_987654_4026531836_30000_n", false),
            ("f1_4242_x_4026531836_30000_n", false),
            ("f1_4242_987654_4026531836_99999999999999999999_n", false),
        ];
        for (t, some) in table {
            assert_eq!(MarkOwner::from_token(t).is_some(), *some, "{t:?}");
        }
    }

    #[test]
    fn a_mark_is_stale_only_when_its_owner_cannot_act() {
        use OwnerSeen::*;
        const NOW: i64 = 1_000_000;
        let o = Some(&OWNER);
        // (mark, owner, seen, reader's own limit, stale)
        let table: &[(&str, Option<&MarkOwner>, OwnerSeen, i64, bool)] = &[
            ("", o, Gone, 1, false),
            ("  ", None, Gone, 1, false),
            ("garbage", o, Alive, 1, true),
            // A live owner, stopped or slow: never stale, however old.
            ("1", o, Alive, 1, false),
            // Gone, or not checkable: the owner's limit, not the reader's.
            ("970000", o, Gone, 1, false), // 30 s exactly: not yet
            ("969999", o, Gone, 1, true),  // past the owner's 30 s
            ("969999", o, Unknowable, 1_000_000, true),
            ("990000", o, Unknowable, 1, false),
            // An earlier version's mark: the reader's limit.
            ("990000", None, Alive, 5_000, true),
            ("990000", None, Alive, 10_000, false),
        ];
        for (mark, owner, seen, lim, stale) in table {
            assert_eq!(
                mark_is_stale(mark, *owner, *seen, NOW, *lim),
                *stale,
                "{mark:?} {owner:?} {seen:?} {lim}"
            );
            let holds = !mark.trim().is_empty() && mark.parse::<i64>().is_ok() && !*stale;
            assert_eq!(
                mark_holds(mark, *owner, *seen, NOW, *lim),
                holds,
                "{mark:?}"
            );
        }
    }

    #[test]
    fn the_fence_lets_a_reap_signal_only_under_its_own_live_lease() {
        // (held, mark at, now, limit, rest, result)
        type Row = (bool, i64, i64, i64, i64, Result<(), FenceFail>);
        let table: &[Row] = &[
            (true, 1000, 1000, 30_000, 10_000, Ok(())),
            (false, 1000, 1000, 30_000, 10_000, Err(FenceFail::MarkLost)),
            (true, 1000, 21_000, 30_000, 10_000, Ok(())),
            (
                true,
                1000,
                21_001,
                30_000,
                10_000,
                Err(FenceFail::LeaseExpired),
            ),
            (
                false,
                1000,
                99_000,
                30_000,
                10_000,
                Err(FenceFail::MarkLost),
            ),
        ];
        for (held, at, now, lim, rest, want) in table {
            assert_eq!(fence(*held, *at, *now, *lim, *rest), *want);
        }
    }

    #[test]
    fn a_journal_is_under_way_while_its_owner_may_still_act() {
        use OwnerSeen::*;
        // (seen, age, limit, live)
        let table = [
            (Alive, 1_000_000, 10, true),
            (Gone, 0, 10, false),
            (Unknowable, 10, 10, true),
            (Unknowable, 11, 10, false),
        ];
        for (seen, age, limit, live) in table {
            assert_eq!(
                journal_owner_live(seen, age, limit),
                live,
                "{seen:?} {age} {limit}"
            );
        }
    }

    #[test]
    fn turn_begin_never_goes_while_a_mark_is_held() {
        use Handoff::*;
        use TurnSeen::*;
        // (seen, teardown running, past deadline, answer)
        let table = [
            (Started, false, false, Go),
            (Started, true, true, Go),
            (Marked, false, false, Wait),
            (Marked, true, false, Wait),
            (Marked, false, true, TimedOut),
            (Gone, false, false, Respawn),
            (Gone, false, true, Respawn),
            (Gone, true, false, Wait),
            (Gone, true, true, TimedOut),
        ];
        for (seen, running, past, want) in table {
            assert_eq!(
                handoff(seen, running, past),
                want,
                "{seen:?} {running} {past}"
            );
        }
    }
}
