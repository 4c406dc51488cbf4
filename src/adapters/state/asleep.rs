//! The tombstones of this studio, listed: the chats that are asleep (reaped, not resumed yet),
//! for `status`. One directory listing, then each tombstone read as [`StateDir::read_tombstone`]
//! reads it (validated, private), each batch file parsed once.

use super::{StateDir, StateError, Tombstone};

impl StateDir {
    /// Every tombstone in this studio's `sessions/` dir, validated; an unreadable or invalid one
    /// is reported, not guessed at. No dir yet: none.
    pub fn tombstones(&self) -> Vec<Result<Tombstone, StateError>> {
        let Ok(rd) = std::fs::read_dir(self.studio.join("sessions")) else {
            return Vec::new();
        };
        let mut reader = super::linked::Reader::new();
        super::linked::by_inode(rd)
            .into_iter()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stem = name.strip_suffix(".json")?;
                (!stem.starts_with('.') && crate::core::policy::valid_id(stem))
                    .then(|| stem.to_string())
            })
            .filter_map(|id| self.read_tombstone_with(&mut reader, &id).transpose())
            .collect()
    }

    /// The readable ones of [`StateDir::tombstones`], and of the others how many there are and
    /// the first one's error: what `status` says in one line, however many there are.
    pub fn readable_tombstones(&self) -> (Vec<Tombstone>, Option<(usize, StateError)>) {
        let (mut good, mut bad, mut first) = (Vec::new(), 0, None);
        for t in self.tombstones() {
            match t {
                Ok(t) => good.push(t),
                Err(e) => {
                    bad += 1;
                    first.get_or_insert(e);
                }
            }
        }
        (good, first.map(|e| (bad, e)))
    }
}
