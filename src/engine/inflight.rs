//! The sessions whose teardown is in flight in this process ([`InFlight`]), and the guard that
//! takes a batch's sessions out of the set on every path ([`Held`]).

use crate::core::policy::TmuxId;
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashSet;
use std::sync::Arc;

/// The set of sessions (tmux ids) whose reap this process has started and not finished: a
/// session in it is neither started again nor recovered as a dead reaper's.
#[derive(Default)]
pub struct InFlight {
    set: Mutex<HashSet<TmuxId>>,
}

/// Sessions whose reap is in flight, taken out of the set when this drops (on every path).
pub(crate) struct Held {
    set: Arc<InFlight>,
    ns: Vec<TmuxId>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut set = self.set.lock();
        for n in &self.ns {
            set.remove(n);
        }
    }
}

impl InFlight {
    /// The set itself, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashSet<TmuxId>> {
        self.set.lock()
    }

    /// Put `n` in the set: false if it was there (another reap of ours has it).
    pub(crate) fn insert(&self, n: TmuxId) -> bool {
        self.lock().insert(n)
    }

    /// Take `n` out of the set.
    pub(crate) fn remove(&self, n: TmuxId) {
        self.lock().remove(&n);
    }

    /// Whether a reap of `n` is in flight here.
    pub(crate) fn contains(&self, n: TmuxId) -> bool {
        self.lock().contains(&n)
    }

    /// How many reaps are in flight.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }

    /// A guard that takes `ns` (already in the set) out of it when it drops.
    pub(crate) fn hold(self: &Arc<Self>, ns: Vec<TmuxId>) -> Held {
        Held {
            set: Arc::clone(self),
            ns,
        }
    }
}
