//! The rules of the handoff between reapers and the studio, as pure functions: who owns a reap
//! mark, when a mark may be cleared as stale, whether a reap may go on to its first signal (the
//! fence), and what `turn begin` answers. The code and the model of the protocol
//! (`tests/model.rs`) both call these, so the model checks the rules the code runs.
//!
//! A mark (`@ccs_reaping` = the time it was set, and `CCS_REAP_TOKEN` in the session's
//! environment) names its owner in the token:
//! `f2_<pid>_<start>_<pidns>_<timens>_<limit ms>_<nonce>` (`f1_`: the same without the time
//! namespace, as 0.3 wrote it). A mark whose owner is alive, stopped included, is never stale,
//! whatever the clock says; one whose owner is provably gone (same pid and time namespaces, no
//! process with its pid and start time) is stale at once. A mark whose owner cannot be checked
//! from here (another pid or time namespace, or /proc could not tell) is cleared only by an
//! observer that has itself seen it unchanged for longer than the owner's limit, on its own
//! monotonic clock: no time another process wrote is ever compared with this one's clock.

use super::parse_ms;

/// The owner of a reap mark, as its token names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkOwner {
    /// The owner's pid, in its own pid namespace.
    pub pid: i32,
    /// Its start time (clock ticks since boot, /proc/PID/stat field 22, as its own time
    /// namespace shows it): a reused pid differs.
    pub start: u64,
    /// The inode of its pid namespace (`/proc/self/ns/pid`): its pid means nothing elsewhere.
    pub pidns: u64,
    /// The inode of its time namespace (`/proc/self/ns/time`): its start time means nothing in
    /// another. `None` for a token of 0.3 (`f1_`), which does not name it.
    pub timens: Option<u64>,
    /// How long an observer that cannot check the owner must see the mark unchanged before it
    /// may take it for stale.
    pub limit_ms: i64,
}

const TOKEN_TAG: &str = "f2";
const TOKEN_TAG_V1: &str = "f1";

impl MarkOwner {
    /// The token of one reap by this owner: the owner's fields, then `nonce` (unique per reap).
    /// Only `[A-Za-z0-9_]`: it goes verbatim into a tmux format and a command string.
    pub fn token(&self, nonce: &str) -> String {
        let nonce: String = nonce
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        match self.timens {
            Some(t) => format!(
                "{TOKEN_TAG}_{}_{}_{}_{t}_{}_{nonce}",
                self.pid, self.start, self.pidns, self.limit_ms
            ),
            None => format!(
                "{TOKEN_TAG_V1}_{}_{}_{}_{}_{nonce}",
                self.pid, self.start, self.pidns, self.limit_ms
            ),
        }
    }

    /// The owner a token names (`f2_`, or 0.3's `f1_`), or `None` for a token of an earlier
    /// version (or garbage): such a mark is judged by the reader's own limit, measured by the
    /// reader.
    pub fn from_token(token: &str) -> Option<MarkOwner> {
        let mut f = token.trim().split('_');
        let v2 = match f.next() {
            Some(TOKEN_TAG) => true,
            Some(TOKEN_TAG_V1) => false,
            _ => return None,
        };
        let pid: i32 = f.next()?.parse().ok().filter(|&p| p > 0)?;
        let start: u64 = f.next()?.parse().ok()?;
        let pidns: u64 = f.next()?.parse().ok()?;
        let timens: Option<u64> = if v2 {
            Some(f.next()?.parse().ok()?)
        } else {
            None
        };
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
            timens,
            limit_ms,
        })
    }
}

/// What a reader can tell of a mark's owner, from where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerSeen {
    /// Alive (running, sleeping or stopped): its mark holds.
    Alive,
    /// Gone: in our pid and time namespaces, no process with that pid and start time.
    Gone,
    /// Cannot be checked from here: another pid or time namespace, or /proc could not tell.
    Unknowable,
}

/// Where a reader runs: the inodes of its pid and time namespaces (0: could not be read, or a
/// /proc that is not its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Here {
    pub pidns: u64,
    pub timens: u64,
}

/// What the reader's /proc shows at the owner's pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtPid {
    /// No process there (or only a zombie).
    Missing,
    /// A live process, its start time as the reader reads it, and its time namespace (`None`:
    /// could not be read).
    Present { start: u64, timens: Option<u64> },
    /// /proc could not tell.
    Unreadable,
}

/// What a reader `here` can tell of owner `o` by identity, `at_pid` reading its /proc at the
/// owner's pid (called only when the answer depends on it). A start time is only comparable
/// within one time namespace (a time namespace shifts the boot time /proc counts from), a pid
/// only within one pid namespace.
pub fn owner_seen(o: &MarkOwner, here: Here, at_pid: impl FnOnce() -> AtPid) -> OwnerSeen {
    if here.pidns == 0 || here.timens == 0 || o.pidns != here.pidns {
        return OwnerSeen::Unknowable;
    }
    if o.timens.is_some_and(|t| t != here.timens) {
        return OwnerSeen::Unknowable;
    }
    match at_pid() {
        AtPid::Missing => OwnerSeen::Gone,
        AtPid::Unreadable | AtPid::Present { timens: None, .. } => OwnerSeen::Unknowable,
        AtPid::Present {
            start,
            timens: Some(t),
        } => {
            if t != here.timens {
                // A process in another time namespace: the owner only if the token does not say
                // where the owner lives (0.3's), and then its start cannot be compared.
                if o.timens.is_some() {
                    OwnerSeen::Gone
                } else {
                    OwnerSeen::Unknowable
                }
            } else if start == o.start {
                OwnerSeen::Alive
            } else {
                OwnerSeen::Gone
            }
        }
    }
}

/// Whether a `@ccs_reaping` mark may be cleared as stale.
///
/// - no mark: nothing to clear;
/// - a mark that is not a time: stale (it would block the session forever);
/// - a mark whose token names its owner: never stale while the owner is alive; stale at once
///   when it is provably gone; else (it cannot be checked from here) stale only once this
///   reader has itself seen the mark unchanged (`observed_ms`, on its own monotonic clock;
///   `None`: not measured) for longer than the limit the owner wrote into the token;
/// - a mark of an earlier version (no owner in its token): stale once observed for longer than
///   `reader_limit_ms`, the reader's own limit.
pub fn mark_is_stale(
    reaping: &str,
    owner: Option<&MarkOwner>,
    seen: OwnerSeen,
    observed_ms: Option<i64>,
    reader_limit_ms: i64,
) -> bool {
    if reaping.trim().is_empty() {
        return false;
    }
    if parse_ms(reaping).is_none() {
        return true;
    }
    let observed_past = |limit: i64| observed_ms.is_some_and(|o| o > limit);
    match owner {
        Some(_) if seen == OwnerSeen::Alive => false,
        Some(_) if seen == OwnerSeen::Gone => true,
        Some(o) => observed_past(o.limit_ms),
        None => observed_past(reader_limit_ms),
    }
}

/// Whether a mark holds the session (another reap's, not stale): not ours to start on.
pub fn mark_holds(
    reaping: &str,
    owner: Option<&MarkOwner>,
    seen: OwnerSeen,
    observed_ms: Option<i64>,
    reader_limit_ms: i64,
) -> bool {
    parse_ms(reaping).is_some()
        && !mark_is_stale(reaping, owner, seen, observed_ms, reader_limit_ms)
}

/// Whether a reap journal's teardown is to be taken as still under way by its owner: yes while the
/// owner is alive; no once it is provably gone; when it cannot be checked from here (another pid
/// or time namespace), yes until this reader has itself seen the journal (unchanged) for longer
/// than the limit its owner wrote (`observed_ms` on the reader's own monotonic clock; `None`:
/// not measured, so under way). A journal under way is never finished or released by another
/// reaper, and its chat's mark is not cleared.
pub fn journal_owner_live(seen: OwnerSeen, observed_ms: Option<i64>, limit_ms: i64) -> bool {
    match seen {
        OwnerSeen::Alive => true,
        OwnerSeen::Gone => false,
        OwnerSeen::Unknowable => observed_ms.is_none_or(|o| o <= limit_ms),
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

/// A reap mark's lease, one type for every use of it: how long a mark holds (`limit_ms`, written
/// into its token for readers who cannot see its owner: past it, a mark is stale), and how long a
/// teardown may still take once past its fence (`rest_ms`: the grace, the kills landing, the tmux
/// calls that follow). Made from the timing settings by [`Lease::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub limit_ms: i64,
    pub rest_ms: i64,
}

impl Lease {
    /// A live teardown takes at most three graces (SIGTERM, SIGKILL, the late-born sweep), three
    /// tmux calls, the before-hook and two seconds for the kills to land: the limit. After the
    /// fence it needs one grace, two tmux calls and the same two seconds: the rest.
    pub fn of(grace_ms: i64, tmux_timeout_ms: i64, hook_ms: i64) -> Lease {
        Lease {
            limit_ms: grace_ms * 3 + tmux_timeout_ms * 3 + hook_ms + 2000,
            rest_ms: grace_ms + 2 * tmux_timeout_ms + 2000,
        }
    }

    /// The time a reap has between its mark and its fence.
    pub fn spare_ms(&self) -> i64 {
        self.limit_ms - self.rest_ms
    }

    /// [`fence`] under this lease.
    pub fn fence(&self, held: bool, elapsed_ms: i64) -> Result<(), FenceFail> {
        fence(held, elapsed_ms, self.limit_ms, self.rest_ms)
    }

    /// How long `turn begin` and `spawn` wait for a reap in flight: past the point where its mark
    /// counts as stale, one more sweep (`interval_ms`) for the daemon to clear it, and 5 s.
    pub fn wait_ms(&self, interval_ms: i64) -> i64 {
        self.limit_ms + interval_ms + 5000
    }
}

/// The fence, right before the first signal: the server says whether the session still carries
/// our mark and token (`held`, read in one guarded tmux call), and the mark, set `elapsed_ms` ago
/// by our own monotonic clock (read before the mark was set), with our `limit_ms` must still have
/// `rest_ms` to run (the grace and the calls that follow) before an observer elsewhere may have
/// seen it for the whole limit.
pub fn fence(held: bool, elapsed_ms: i64, limit_ms: i64, rest_ms: i64) -> Result<(), FenceFail> {
    if !held {
        return Err(FenceFail::MarkLost);
    }
    if elapsed_ms.saturating_add(rest_ms) > limit_ms {
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
        timens: Some(4026531834),
        limit_ms: 30_000,
    };

    #[test]
    fn a_lease_from_the_timing_settings() {
        // (grace, tmux timeout, hook) -> (limit, rest, spare, wait with a 5 s interval)
        let table = [
            ((5000, 5000, 0), (32_000, 17_000, 15_000, 42_000)),
            ((5000, 5000, 10_000), (42_000, 17_000, 25_000, 52_000)),
            ((500, 1000, 0), (6_500, 4_500, 2_000, 16_500)),
            ((0, 0, 0), (2_000, 2_000, 0, 12_000)),
        ];
        for ((g, t, h), (limit, rest, spare, wait)) in table {
            let l = Lease::of(g, t, h);
            assert_eq!(
                (l.limit_ms, l.rest_ms, l.spare_ms(), l.wait_ms(5000)),
                (limit, rest, spare, wait),
                "grace {g}, tmux {t}, hook {h}"
            );
        }
    }

    #[test]
    fn a_lease_fences_off_a_lost_mark_and_one_too_old_to_finish_under() {
        let l = Lease {
            limit_ms: 10_000,
            rest_ms: 4_000,
        };
        let table = [
            (true, 0, Ok(())),
            (true, 6_000, Ok(())),
            (true, 6_001, Err(FenceFail::LeaseExpired)),
            (false, 0, Err(FenceFail::MarkLost)),
            (false, 9_000, Err(FenceFail::MarkLost)),
        ];
        for (held, elapsed, want) in table {
            assert_eq!(l.fence(held, elapsed), want, "held {held}, {elapsed} ms");
        }
    }

    #[test]
    fn tokens_name_their_owner() {
        let t = OWNER.token("7x1234");
        assert_eq!(t, "f2_4242_987654_4026531836_4026531834_30000_7x1234");
        assert!(t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        assert_eq!(MarkOwner::from_token(&t), Some(OWNER));
        // A nonce never smuggles a separator or a format character in.
        let odd = OWNER.token("a_b}#{c");
        assert_eq!(MarkOwner::from_token(&odd), Some(OWNER));
        // 0.3's tokens are still read: no time namespace in them.
        let v1 = MarkOwner::from_token("f1_4242_987654_4026531836_30000_n").unwrap();
        assert_eq!(v1.timens, None);
        assert_eq!((v1.pid, v1.start, v1.limit_ms), (4242, 987654, 30_000));
        assert_eq!(
            MarkOwner {
                timens: None,
                ..OWNER
            }
            .token("n"),
            "f1_4242_987654_4026531836_30000_n"
        );
        // (token, owner found)
        let table: &[(&str, bool)] = &[
            ("", false),
            ("r4242x0x123", false), // 0.2's token: no owner
            ("f1_4242_987654_4026531836_30000_n", true),
            ("f1_4242_987654_4026531836_30000_", false),
            ("f1_4242_987654_4026531836_0_n", false),
            ("f1_-1_987654_4026531836_30000_n", false),
            ("f1_4242_987654_4026531836_30000_n_extra", false),
            ("f2_4242_987654_4026531836_7_30000_n", true),
            ("f2_4242_987654_4026531836_30000_n", false), // f2 without its time namespace
            ("f2_4242_987654_4026531836_x_30000_n", false),
            ("f2_4242_987654_4026531836_7_30000_n_extra", false),
            ("f3_4242_987654_4026531836_7_30000_n", false),
            ("f1_4242_x_4026531836_30000_n", false),
            ("f1_4242_987654_4026531836_99999999999999999999_n", false),
        ];
        for (t, some) in table {
            assert_eq!(MarkOwner::from_token(t).is_some(), *some, "{t:?}");
        }
    }

    #[test]
    fn an_owner_is_known_by_identity_only_in_its_own_pid_and_time_namespaces() {
        use AtPid::*;
        use OwnerSeen::*;
        let here = Here {
            pidns: OWNER.pidns,
            timens: 4026531834,
        };
        let v1 = MarkOwner {
            timens: None,
            ..OWNER
        };
        let me = Some(here.timens);
        let live = Present {
            start: OWNER.start,
            timens: me,
        };
        // (owner, here, what /proc shows at its pid, seen)
        let table: &[(MarkOwner, Here, AtPid, OwnerSeen)] = &[
            (OWNER, here, live, Alive),
            (OWNER, here, Missing, Gone),
            (
                OWNER,
                here,
                Present {
                    start: 1,
                    timens: me,
                },
                Gone,
            ),
            (OWNER, here, Unreadable, Unknowable),
            (
                OWNER,
                here,
                Present {
                    start: OWNER.start,
                    timens: None,
                },
                Unknowable,
            ),
            // A process at the pid, in another time namespace: not the owner (its token says
            // where the owner lives).
            (
                OWNER,
                here,
                Present {
                    start: OWNER.start,
                    timens: Some(5),
                },
                Gone,
            ),
            // The owner in another time namespace, or another pid namespace: its start or its
            // pid means nothing here, whatever /proc shows.
            (OWNER, Here { timens: 5, ..here }, live, Unknowable),
            (OWNER, Here { timens: 5, ..here }, Missing, Unknowable),
            (OWNER, Here { pidns: 5, ..here }, Missing, Unknowable),
            // A /proc that is not ours, or namespaces that could not be read.
            (OWNER, Here { pidns: 0, ..here }, live, Unknowable),
            (OWNER, Here { timens: 0, ..here }, live, Unknowable),
            // 0.3's token: the process's own time namespace decides.
            (v1, here, live, Alive),
            (v1, here, Missing, Gone),
            (
                v1,
                here,
                Present {
                    start: 1,
                    timens: me,
                },
                Gone,
            ),
            (
                v1,
                here,
                Present {
                    start: 1,
                    timens: Some(5),
                },
                Unknowable,
            ),
            (
                v1,
                here,
                Present {
                    start: OWNER.start,
                    timens: Some(5),
                },
                Unknowable,
            ),
        ];
        for (o, h, at, want) in table {
            assert_eq!(owner_seen(o, *h, || *at), *want, "{o:?} {h:?} {at:?}");
        }
    }

    #[test]
    fn a_mark_is_stale_only_when_its_owner_cannot_act() {
        use OwnerSeen::*;
        let o = Some(&OWNER);
        // (mark, owner, seen, observed for, reader's own limit, stale)
        type Row<'a> = (
            &'a str,
            Option<&'a MarkOwner>,
            OwnerSeen,
            Option<i64>,
            i64,
            bool,
        );
        let table: &[Row] = &[
            ("", o, Gone, None, 1, false),
            ("  ", None, Gone, Some(99), 1, false),
            ("garbage", o, Alive, None, 1, true),
            // A live owner, stopped or slow: never stale, however long observed.
            ("1", o, Alive, Some(i64::MAX), 1, false),
            // Provably gone: at once, observed or not.
            ("1", o, Gone, None, 1, true),
            // Not checkable: only once observed past the owner's limit, never by its age.
            ("1", o, Unknowable, None, 1, false),
            ("1", o, Unknowable, Some(30_000), 1, false), // exactly: not yet
            ("1", o, Unknowable, Some(30_001), 1_000_000, true),
            ("1", o, Unknowable, Some(29_999), 1, false),
            // An earlier version's mark: the reader's limit, observed by the reader.
            ("1", None, Alive, Some(5_001), 5_000, true),
            ("1", None, Alive, Some(5_000), 5_000, false),
            ("1", None, Alive, None, 5_000, false),
        ];
        for (mark, owner, seen, obs, lim, stale) in table {
            assert_eq!(
                mark_is_stale(mark, *owner, *seen, *obs, *lim),
                *stale,
                "{mark:?} {owner:?} {seen:?} {obs:?} {lim}"
            );
            let holds = !mark.trim().is_empty() && mark.parse::<i64>().is_ok() && !*stale;
            assert_eq!(
                mark_holds(mark, *owner, *seen, *obs, *lim),
                holds,
                "{mark:?}"
            );
        }
    }

    #[test]
    fn the_fence_lets_a_reap_signal_only_under_its_own_live_lease() {
        // (held, elapsed since the mark on our own clock, limit, rest, result)
        type Row = (bool, i64, i64, i64, Result<(), FenceFail>);
        let table: &[Row] = &[
            (true, 0, 30_000, 10_000, Ok(())),
            (false, 0, 30_000, 10_000, Err(FenceFail::MarkLost)),
            (true, 20_000, 30_000, 10_000, Ok(())),
            (true, 20_001, 30_000, 10_000, Err(FenceFail::LeaseExpired)),
            (false, 98_000, 30_000, 10_000, Err(FenceFail::MarkLost)),
        ];
        for (held, el, lim, rest, want) in table {
            assert_eq!(fence(*held, *el, *lim, *rest), *want);
        }
    }

    #[test]
    fn a_journal_is_under_way_while_its_owner_may_still_act() {
        use OwnerSeen::*;
        // (seen, observed for, limit, live)
        let table = [
            (Alive, Some(1_000_000), 10, true),
            (Gone, None, 10, false),
            (Unknowable, None, 10, true),
            (Unknowable, Some(10), 10, true),
            (Unknowable, Some(11), 10, false),
        ];
        for (seen, age, limit, live) in table {
            assert_eq!(
                journal_owner_live(seen, age, limit),
                live,
                "{seen:?} {age:?} {limit}"
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
