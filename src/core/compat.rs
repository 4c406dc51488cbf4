//! What earlier versions wrote that this one still reads, in one place: each format of 0.1.0
//! (and of the first fenced release) that can still be met on a live server or in a state dir, the
//! rule for reading it, and the room that applies the rule. Nothing here is written any more.
//!
//! | left by an earlier version | read as | where |
//! |---|---|---|
//! | the reap token in the `@ccs_reaper` option ([`TOKEN_OPTION`]) instead of the session's environment | a token like any other: the listing takes either, and the mark, the fence's look at it, the clear and a take-over match either (and clear both) | `core::listing`, `adapters::tmux::args` |
//! | a reap mark whose token names no owner | stale once observed for longer than the reader's own limit (the lease cannot be read from it) | `core::policy::fence` (`mark_is_stale`) |
//! | tombstones and journals directly under the state dir, keyed by chat id alone ([`tombstone_path`], [`journals_dir`]) | read (and a used tombstone removed) only while the dir can only be this studio's ([`layout_is_only_ours`]) | `adapters::state` |
//! | a journal whose token names no owner | finished or released by the reader's own limit | `engine::context` (`journal_live`) |
//! | an audit line without `schema_version` | schema [`SCHEMA_UNVERSIONED`] (0.1.0's line is schema 2's without the field) | `core::records::AuditLine` (serde default) |
//! | a tombstone without `session`, `socket`, `argv` or `token` | each absent (older tombstones still resume by id) | `core::records::Tombstone` (serde defaults) |
//! | `known.json`'s server start time written as `0` for "could not be read" | unknown ([`start_or_unknown`]) | `core::known` |

use std::path::{Path, PathBuf};

/// The tmux option where 0.1.0 kept the reap token (now the session's `CCS_REAP_TOKEN`).
pub const TOKEN_OPTION: &str = "@ccs_reaper";

/// The schema version of an audit line written before lines carried one.
pub const SCHEMA_UNVERSIONED: u32 = 0;

/// Where 0.1.0 put chat `id`'s tombstone: under the state dir itself, keyed by id alone.
pub fn tombstone_path(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("sessions").join(format!("{id}.json"))
}

/// Where 0.1.0 put its teardown journals: under the state dir itself, keyed by id alone.
pub fn journals_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("reaping")
}

/// Whether 0.1.0's files in a state dir can only be this studio's: no other studio has a
/// directory there, and no lock file there is another socket's.
pub fn layout_is_only_ours(other_studio_dir: bool, other_socket_lock: bool) -> bool {
    !other_studio_dir && !other_socket_lock
}

/// Whether a file named `name` in the state dir is another socket's reaper lock than `mine`.
pub fn is_other_sockets_lock(name: &str, mine: &str) -> bool {
    name.starts_with("reaper-") && name.ends_with(".lock") && name != mine
}

/// A server start time as `known.json` recorded it: `0` (what earlier versions wrote for "could
/// not be read") is unknown, like `null` and a missing one.
pub fn start_or_unknown(start: Option<u64>) -> Option<u64> {
    start.filter(|&s| s != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_0_1_layout_and_its_rules() {
        assert_eq!(
            tombstone_path(Path::new("/st"), "7"),
            PathBuf::from("/st/sessions/7.json")
        );
        assert_eq!(journals_dir(Path::new("/st")), PathBuf::from("/st/reaping"));
        let table = [
            ((false, false), true),
            ((true, false), false),
            ((false, true), false),
            ((true, true), false),
        ];
        for ((studio, lock), want) in table {
            assert_eq!(layout_is_only_ours(studio, lock), want, "{studio} {lock}");
        }
        let mine = "reaper-s-1.lock";
        for (name, want) in [
            ("reaper-s-1.lock", false),
            ("reaper-t-2.lock", true),
            ("reaped.jsonl", false),
            ("reaper-x.lockx", false),
        ] {
            assert_eq!(is_other_sockets_lock(name, mine), want, "{name}");
        }
        assert_eq!(start_or_unknown(Some(0)), None);
        assert_eq!(start_or_unknown(None), None);
        assert_eq!(start_or_unknown(Some(42)), Some(42));
    }
}
