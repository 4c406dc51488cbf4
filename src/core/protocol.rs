//! The handoff protocol's steps for one reap, in the order the engine takes them
//! (docs/teardown.md). The teardown names each step it finishes by [`Phase::name`] (its DEBUG
//! `phase` lines), and the model of the protocol (`tests/model.rs`) takes its order from
//! [`Phase::next`]: one order, kept here.

/// One step of a reap, from the mark to the audit line.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum Phase {
    /// The atomic test-and-set of the reap mark, in the server.
    #[strum(serialize = "mark")]
    Mark,
    /// The re-check, on a listing taken after the mark.
    #[strum(serialize = "re-check")]
    Recheck,
    /// The victims: one scan of the process table for the batch.
    #[strum(serialize = "victims")]
    Victims,
    /// The journals, before anything outside ccs-reap sees the reap.
    #[strum(serialize = "journals")]
    Journal,
    /// The studio's before-hook, which may veto.
    #[strum(serialize = "hook")]
    Hook,
    /// The fence: the mark still exactly ours, time left in its lease.
    #[strum(serialize = "fence")]
    Fence,
    /// The tombstones, past the fence only.
    #[strum(serialize = "tombstones")]
    Tombstone,
    /// SIGTERM to every tree, one grace, SIGKILL for what is left.
    #[strum(serialize = "stop")]
    Signal,
    /// The session killed, nothing left alive, the audit line, the journal removed.
    #[strum(serialize = "audit")]
    Finish,
}

impl Phase {
    /// Every step, in order (the order of the enum).
    pub const ORDER: &'static [Phase] = <Phase as strum::VariantArray>::VARIANTS;

    /// The step after this one; `None` after the last.
    pub fn next(self) -> Option<Phase> {
        let i = Phase::ORDER.iter().position(|p| *p == self)?;
        Phase::ORDER.get(i + 1).copied()
    }

    /// The name a DEBUG `phase` line gives it.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_has_one_successor_and_the_last_none() {
        let table = [
            (Phase::Mark, Some(Phase::Recheck)),
            (Phase::Recheck, Some(Phase::Victims)),
            (Phase::Victims, Some(Phase::Journal)),
            (Phase::Journal, Some(Phase::Hook)),
            (Phase::Hook, Some(Phase::Fence)),
            (Phase::Fence, Some(Phase::Tombstone)),
            (Phase::Tombstone, Some(Phase::Signal)),
            (Phase::Signal, Some(Phase::Finish)),
            (Phase::Finish, None),
        ];
        for (p, next) in table {
            assert_eq!(p.next(), next, "{p:?}");
        }
    }

    #[test]
    fn what_the_guarantees_need_comes_first() {
        // (before, after): a journal exists before anything outside sees the reap; nothing is
        // written for the chat's next life, nor signalled, before the fence.
        let table = [
            (Phase::Mark, Phase::Recheck),
            (Phase::Recheck, Phase::Journal),
            (Phase::Victims, Phase::Signal),
            (Phase::Journal, Phase::Hook),
            (Phase::Hook, Phase::Fence),
            (Phase::Fence, Phase::Tombstone),
            (Phase::Tombstone, Phase::Signal),
        ];
        let at = |p: Phase| Phase::ORDER.iter().position(|q| *q == p);
        for (a, b) in table {
            assert!(at(a) < at(b), "{a:?} must come before {b:?}");
        }
    }

    #[test]
    fn names_are_distinct() {
        let mut names: Vec<&str> = Phase::ORDER.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Phase::ORDER.len());
    }
}
