//! Tombstones as a set: which ones have aged past a limit (by their file's modification time,
//! which the kernel sets: no clock of another process is read); and the lock under which
//! `forget` and a failed `spawn` change one, so that neither undoes the other.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::private::{open_flags, private_file};
use super::{io, StateDir, StateError};
use crate::core::records::Tombstone;

/// The studio's tombstone lock, held until dropped.
pub struct TombLock(#[allow(dead_code)] File);

impl StateDir {
    /// Take the studio's tombstone lock (`<studio>/tombstones.lock`, flock, exclusive): `forget`
    /// and a failed `spawn`'s mark each read and change a tombstone under it, one after the
    /// other. Held for one read and one write. `None` when the studio has no tombstone
    /// directory yet (then there is no tombstone to change, and nothing is created).
    pub fn lock_tombstones(&self) -> Result<Option<TombLock>, StateError> {
        if !self.studio.join("sessions").is_dir() {
            return Ok(None);
        }
        self.ensure(Some("sessions"))?;
        let p = self.studio.join("tombstones.lock");
        let f = open_flags(OpenOptions::new().create(true).truncate(false).write(true))
            .open(&p)
            .map_err(io("open", &p))?;
        private_file(&f, &p)?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).map_err(|e| {
            StateError::Io {
                what: "lock",
                path: p.clone(),
                source: e.into(),
            }
        })?;
        Ok(Some(TombLock(f)))
    }

    /// Write `t` only while chat `t.id`'s tombstone is still `was` (`None`: still none), under
    /// the tombstone lock: `Ok(false)`, nothing written, when another command changed or removed
    /// it since (a `forget` stays forgotten).
    pub fn write_tombstone_if(
        &self,
        was: Option<&Tombstone>,
        t: &Tombstone,
    ) -> Result<bool, StateError> {
        let _lock = self.lock_tombstones()?;
        let now = self.read_tombstone(&t.id).ok().flatten();
        if now.as_ref() != was {
            return Ok(false);
        }
        self.write_tombstone(t)?;
        Ok(true)
    }

    /// The ids of this studio's tombstones whose file was last written more than `max_age` ago
    /// (one read of the directory), with their paths. A name that is not `<valid id>.json` is
    /// not ours and is left alone.
    pub fn aged_tombstones(&self, max_age: Duration) -> Vec<(String, PathBuf)> {
        let dir = self.studio.join("sessions");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let now = SystemTime::now();
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_suffix(".json")?.to_string();
                if !crate::core::policy::valid_id(&id) {
                    return None;
                }
                let meta = e.metadata().ok()?;
                let age = now.duration_since(meta.modified().ok()?).ok()?;
                (meta.is_file() && age > max_age).then(|| (id, e.path()))
            })
            .collect()
    }
}
