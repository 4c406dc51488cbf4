//! Tombstones as a set: which ones have aged past a limit (by their file's modification time,
//! which the kernel sets: no clock of another process is read).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::StateDir;

impl StateDir {
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
