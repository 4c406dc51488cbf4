//! The room lock and the reservations of `room` (`<studio>/room.lock`, `<studio>/room.json`):
//! `room` calls for several new chats, from any process, take the lock one after the other, and
//! each counts the room the earlier ones made and still hold.

use std::fs::{File, OpenOptions};
use std::time::{Duration, Instant};

use super::private::{open_flags, private_dir, private_file, read_private_max};
use super::{io, StateDir, StateError};
use crate::core::policy::Reservation;

/// The room lock, held until dropped.
pub struct RoomLock(#[allow(dead_code)] File);

/// More than this many reservations is not a file of ours.
const MAX_ROOM_BYTES: u64 = 1 << 20;

impl StateDir {
    /// Take the studio's room lock (flock, exclusive), waiting at most `wait`: `Ok(None)` when
    /// another `room` held it all that time.
    pub fn lock_room(&self, wait: Duration) -> Result<Option<RoomLock>, StateError> {
        self.ensure(None)?;
        private_dir(&self.dir.join("studios"))?;
        private_dir(&self.studio)?;
        let p = self.studio.join("room.lock");
        let f = open_flags(OpenOptions::new().create(true).truncate(false).write(true))
            .open(&p)
            .map_err(io("open", &p))?;
        private_file(&f, &p)?;
        let deadline = Instant::now() + wait;
        loop {
            use rustix::fs::{flock, FlockOperation};
            match flock(&f, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Some(RoomLock(f))),
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    return Err(StateError::Io {
                        what: "lock",
                        path: p,
                        source: e.into(),
                    })
                }
            }
        }
    }

    /// The reservations written by earlier `room` calls (none when there is no file).
    pub fn read_room(&self) -> Result<Vec<Reservation>, StateError> {
        let p = self.studio.join("room.json");
        let Some(b) = read_private_max(&p, MAX_ROOM_BYTES)? else {
            return Ok(Vec::new());
        };
        serde_json::from_slice(&b).map_err(|e| StateError::Malformed {
            path: p,
            why: e.to_string(),
        })
    }

    /// Write the reservations atomically (private, one line of JSON).
    pub fn write_room(&self, held: &[Reservation]) -> Result<(), StateError> {
        let p = self.studio.join("room.json");
        let text = serde_json::to_vec(held).map_err(|e| StateError::Io {
            what: "encode",
            path: p.clone(),
            source: std::io::Error::other(e),
        })?;
        Self::write_atomic(&self.studio, "room.json", &text)
    }
}
