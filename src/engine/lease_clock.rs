//! The observer's own clock: how long this process has itself seen a reap mark (or a journal)
//! unchanged whose owner it cannot check by identity. Such a mark is cleared only once seen for
//! longer than its owner's whole limit (a lease measured by the observer, as lock services
//! measure session timeouts): no time another process wrote is compared with this one's clock.
//!
//! The daemon keeps what it saw in memory; each sweep also writes it to `observed.json` in the
//! state dir (with the clock, the boot and the time namespace it was measured in), so that a
//! later `--once` in the same clock domain finishes the wait, and one in another starts over.
//! Whatever a sweep did not see again is forgotten: a mark that went and came back is new.

use std::collections::{HashMap, HashSet};

use crate::adapters::clock;
use crate::adapters::state::{Observed, StateDir, OBSERVED_CLOCK};

#[derive(Debug, Default)]
pub(crate) struct LeaseClock {
    /// What was seen, and when first (ms of CLOCK_BOOTTIME).
    first: HashMap<String, i64>,
    /// What this sweep has looked at.
    touched: HashSet<String>,
    loaded: bool,
    dirty: bool,
}

/// The key of a mark: the session, the mark's value and its token (unique per reap).
pub(crate) fn mark_key(id: &str, reaping: &str, token: &str) -> String {
    format!("m {id} {} {}", reaping.trim(), token.trim())
}

/// The key of a journal: its session and its token.
pub(crate) fn journal_key(id: &str, token: &str) -> String {
    format!("j {id} {}", token.trim())
}

impl LeaseClock {
    /// How long `key` has been seen, in ms of this process's own clock (0 at first sight).
    pub(crate) fn observed(&mut self, state: &StateDir, key: String) -> i64 {
        if !self.loaded {
            self.load(state);
        }
        let now = clock::boot_ms();
        let first = *self.first.entry(key.clone()).or_insert_with(|| {
            self.dirty = true;
            now
        });
        self.touched.insert(key);
        now.saturating_sub(first).max(0)
    }

    /// The sweep is over: forget what it did not see again, and write what is left if it
    /// changed (`persist`: not in a dry run).
    pub(crate) fn end_sweep(&mut self, state: &StateDir, pidns: u64, persist: bool) {
        if !self.loaded {
            // Nothing was looked at: nothing to forget or write.
            return;
        }
        let before = self.first.len();
        let touched = std::mem::take(&mut self.touched);
        self.first.retain(|k, _| touched.contains(k));
        if self.first.len() != before {
            self.dirty = true;
        }
        if !(persist && self.dirty) {
            return;
        }
        let Some((boot_id, timens)) = clock::domain() else {
            return;
        };
        let o = Observed {
            clock: OBSERVED_CLOCK.into(),
            boot_id,
            timens,
            pidns,
            seen: self.first.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        };
        match state.write_observed(&o) {
            Ok(()) => self.dirty = false,
            Err(e) => {
                tracing::warn!(error = %e, "failed to keep what this reaper observed of marks it cannot check: a later run starts its wait over");
            }
        }
    }

    /// What an earlier run saw, if it measured in our clock domain.
    fn load(&mut self, state: &StateDir) {
        self.loaded = true;
        let here = clock::domain();
        match state.read_observed() {
            Ok(Some(o)) => {
                let same = here.as_ref().is_some_and(|(b, t)| {
                    o.clock == OBSERVED_CLOCK && *b == o.boot_id && *t == o.timens
                });
                if same {
                    let now = clock::boot_ms();
                    // A reading from our future cannot be ours: dropped.
                    self.first = o.seen.into_iter().filter(|(_, v)| *v <= now).collect();
                } else {
                    tracing::debug!("observations of another clock domain (boot or time namespace): the waits start over");
                    self.dirty = true;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "observations unreadable: the waits start over");
                self.dirty = true;
            }
        }
    }
}
