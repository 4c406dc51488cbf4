//! `observed.json`: what a reaper has seen of reap marks and journals whose owner it cannot check
//! (another pid or time namespace), and since when on its own clock, so that a later `--once` in
//! the same clock domain can finish a wait that one run cannot (docs/teardown.md, "Identity and
//! clocks"). A file of another clock domain (another boot, another time namespace) is of no use:
//! its readings are not comparable with ours, and the wait starts over.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{private_dir, read_private_max, StateDir, StateError};

/// Never more than this many bytes are read back (about 50,000 entries).
const MAX_OBSERVED_BYTES: u64 = 4 << 20;

/// The clock every reading is on.
pub const OBSERVED_CLOCK: &str = "CLOCK_BOOTTIME";

/// What one observer has seen, in its clock domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// The clock the readings are on ([`OBSERVED_CLOCK`]).
    pub clock: String,
    /// The boot they are of (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// The time namespace they are of (its inode).
    pub timens: u64,
    /// The pid namespace of the observer (its inode; for the reader of the file).
    pub pidns: u64,
    /// What was seen (a mark: `m <session id> <mark> <token>`, a journal: `j <id> <token>`) and
    /// when first, in ms of [`OBSERVED_CLOCK`].
    pub seen: BTreeMap<String, i64>,
}

impl StateDir {
    pub fn observed_path(&self) -> PathBuf {
        self.studio_dir().join("observed.json")
    }

    /// Read the observations; `None` when there are none yet.
    pub fn read_observed(&self) -> Result<Option<Observed>, StateError> {
        let p = self.observed_path();
        let Some(b) = read_private_max(&p, MAX_OBSERVED_BYTES)? else {
            return Ok(None);
        };
        serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| StateError::Malformed {
                path: p,
                why: e.to_string(),
            })
    }

    /// Write them atomically (private).
    pub fn write_observed(&self, o: &Observed) -> Result<(), StateError> {
        let d = self.ensure(None)?;
        private_dir(&d.join("studios"))?;
        private_dir(self.studio_dir())?;
        let p = self.observed_path();
        let text = serde_json::to_vec(o).map_err(|e| StateError::Io {
            what: "encode",
            path: p,
            source: std::io::Error::other(e),
        })?;
        Self::write_atomic(self.studio_dir(), "observed.json", &text)
    }
}
