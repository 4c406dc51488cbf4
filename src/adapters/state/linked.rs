//! Reading a chat's record (a journal or a tombstone) from its `<id>.json`, which may be a hard
//! link to a batch file holding the records of many chats ([`crate::core::batch`]): read as every
//! private file is, the chat's record picked by id. A [`Reader`] kept across the files of one
//! listing, going through the names in the order of their inodes ([`by_inode`]), parses each batch
//! file once, however many of its names it reads: listing the 1000 journals of a batch costs 16
//! parses, not 1000 parses of 64 records.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::private::{open_private, read_opened};
use super::{StateError, MAX_STATE_FILE_BYTES};
use crate::core::batch::{self, Keyed};

/// The entries of a directory listing in the order of their inodes (from the listing itself, no
/// extra call): the names of one batch file come together, so a [`Reader`] that goes through them
/// in this order parses each batch file once however many there are.
pub(super) fn by_inode(rd: std::fs::ReadDir) -> Vec<std::fs::DirEntry> {
    use std::os::unix::fs::DirEntryExt;
    let mut es: Vec<std::fs::DirEntry> = rd.flatten().collect();
    es.sort_by_key(DirEntryExt::ino);
    es
}

/// The most batch files a [`Reader`] keeps open at once (a `sessions/` dir collects a batch's
/// tombstones for up to 30 days).
const MAX_OPEN: usize = 64;

/// A batch file read: the file kept open, and its records (or why they do not parse).
type Parsed<T> = (File, Result<Vec<T>, LinkedError>);

/// Why a batch file's records do not parse, as [`batch::records`] says it: kept with the file,
/// for every name of it read after.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub(super) struct LinkedError(String);

/// Reads records, each batch file parsed once.
pub(super) struct Reader<T> {
    /// Each batch file read so far, by (device, inode): its records (or why they do not parse),
    /// and the file kept open, so that its inode cannot be freed and reused by another file while
    /// this reader may take it for this one.
    batches: HashMap<(u64, u64), Parsed<T>>,
    /// How many batch files it parsed.
    parses: usize,
}

impl<T: DeserializeOwned + Keyed + Clone> Reader<T> {
    pub fn new() -> Self {
        Reader {
            batches: HashMap::new(),
            parses: 0,
        }
    }

    /// The record of chat `id` at `p` (a file of one record, or a batch file's record of `id`),
    /// not validated yet. `Ok(None)` when there is no file; a file that does not parse, or whose
    /// batch has no record (or two) of `id`, is malformed.
    pub fn read(&mut self, p: &Path, id: &str) -> Result<Option<T>, StateError> {
        let Some((f, m)) = open_private(p)? else {
            return Ok(None);
        };
        let bad = |why: String| StateError::Malformed {
            path: p.to_path_buf(),
            why,
        };
        let key = (m.dev(), m.ino());
        if let Some((_, recs)) = self.batches.get(&key) {
            return match recs {
                Ok(r) => batch::pick(r, id).map(Some).map_err(bad),
                Err(e) => Err(bad(e.0.clone())),
            };
        }
        let b = read_opened(
            f.try_clone().map_err(super::io("read", p))?,
            &m,
            p,
            MAX_STATE_FILE_BYTES,
        )?;
        if !batch::is_batch(&b) {
            return serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| bad(e.to_string()));
        }
        let recs = batch::records::<T>(&b).map_err(LinkedError);
        self.parses += 1;
        let picked = match &recs {
            Ok(r) => batch::pick(r, id),
            Err(e) => Err(e.0.clone()),
        };
        // At most MAX_OPEN batch files kept (each holds a descriptor): past that, the cache starts
        // over, and a batch file read again is parsed again.
        if self.batches.len() >= MAX_OPEN {
            self.batches.clear();
        }
        self.batches.insert(key, (f, recs));
        picked.map(Some).map_err(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Journal, StateDir, Tombstone};
    use crate::core::policy::ReapReason;
    use crate::core::records::Ident;
    use std::os::unix::fs::MetadataExt;

    const N: usize = 20;

    fn tomb(i: usize) -> Tombstone {
        let mut t = Tombstone::new(&i.to_string(), 1_700_000_000_000, ReapReason::Idle);
        t.cid = Some(format!("c{i}"));
        t.cwd = Some("/w".into());
        t
    }

    fn journal(i: usize) -> Journal {
        Journal {
            id: i.to_string(),
            session: format!("ccs-{i}"),
            tmux_id: crate::core::policy::TmuxId(i as u32),
            cid: Some(format!("c{i}")),
            reason: ReapReason::Idle,
            idle_ms: Some(1),
            cwd: Some("/w".into()),
            started_at: "t".into(),
            owner: Ident {
                pid: 99_999_999,
                start: 1,
            },
            victims: vec![Ident {
                pid: 4242 + i as i32,
                start: 7,
            }],
            server_pid: Some(10),
            token: "f2_1_2_3_4_5_6x7".into(),
            armed_by_tombstone: true,
            argv: None,
            env: None,
            options: None,
            path: None,
        }
    }

    #[test]
    fn each_chat_reads_its_own_record_of_a_large_batch_and_goes_alone() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        let dirs = s.reap_dirs().unwrap();
        let ts: Vec<Tombstone> = (1..=N).map(tomb).collect();
        assert!(s.write_tombstones_in(&dirs, &ts).iter().all(Result::is_ok));
        // One batch file under N names.
        let m = std::fs::metadata(s.tombstone_path("1")).unwrap();
        assert_eq!(m.nlink(), N as u64);
        for t in &ts {
            assert_eq!(s.read_tombstone(&t.id).unwrap().as_ref(), Some(t));
        }
        let mut listed: Vec<Tombstone> = s.tombstones().into_iter().map(Result::unwrap).collect();
        listed.sort_by_key(|t| t.id.parse::<usize>().unwrap());
        assert_eq!(listed, ts);
        // One chat's tombstone removed, another's written anew: the others as they were.
        s.remove_tombstone("3").unwrap();
        let mut again = tomb(4);
        again.cid = Some("c4-new".into());
        s.write_tombstone(&again).unwrap();
        assert_eq!(s.read_tombstone("3").unwrap(), None);
        assert_eq!(s.read_tombstone("4").unwrap(), Some(again));
        assert_eq!(s.read_tombstone("5").unwrap().as_ref(), Some(&ts[4]));
        assert_eq!(
            std::fs::metadata(s.tombstone_path("5")).unwrap().nlink(),
            N as u64 - 2
        );

        // Journals alike: each read back under its own name, removed by that name alone.
        let js: Vec<Journal> = (1..=N).map(journal).collect();
        let refs: Vec<&Journal> = js.iter().collect();
        assert!(s.write_journals_in(&dirs, &refs).iter().all(Result::is_ok));
        let mut read: Vec<Journal> = s.journals().into_iter().map(Result::unwrap).collect();
        read.sort_by_key(|j| j.tmux_id);
        assert_eq!(read.len(), N);
        for (got, want) in read.iter().zip(&js) {
            let p = s
                .studio_dir()
                .join("reaping")
                .join(format!("{}.json", want.id));
            assert_eq!(got.path.as_deref(), Some(p.as_path()));
            let mut got = got.clone();
            got.path = None;
            assert_eq!(&got, want);
        }
        s.remove_journal(&read[0]).unwrap();
        assert_eq!(s.journals().len(), N - 1);
    }

    #[test]
    fn a_listing_in_inode_order_parses_each_batch_file_once_past_the_open_files_cap() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        let dirs = s.reap_dirs().unwrap();
        // More batch files than a reader keeps open: 70 batches of 10 chats.
        let batches = super::MAX_OPEN + 6;
        for b in 0..batches {
            let ts: Vec<Tombstone> = (b * 10 + 1..=b * 10 + 10).map(tomb).collect();
            assert!(s.write_tombstones_in(&dirs, &ts).iter().all(Result::is_ok));
        }
        let rd = std::fs::read_dir(s.studio_dir().join("sessions")).unwrap();
        let mut reader = super::Reader::<Tombstone>::new();
        let mut n = 0;
        for e in super::by_inode(rd) {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_suffix(".json").unwrap();
            let t = reader.read(&e.path(), id).unwrap().unwrap();
            assert_eq!(t.cid, Some(format!("c{id}")));
            n += 1;
        }
        assert_eq!(n, batches * 10);
        assert_eq!(reader.parses, batches, "a batch file parsed more than once");
        assert_eq!(s.tombstones().len(), batches * 10);
    }

    #[test]
    fn a_batch_file_that_does_not_hold_its_chat_is_malformed_and_never_another_chats() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        let dirs = s.reap_dirs().unwrap();
        let ts: Vec<Tombstone> = (1..=N).map(tomb).collect();
        assert!(s.write_tombstones_in(&dirs, &ts).iter().all(Result::is_ok));
        // A name linked to a batch that holds no record of its chat (as no writer of ours makes
        // it): malformed, never another chat's record.
        std::fs::hard_link(s.tombstone_path("1"), s.tombstone_path("99")).unwrap();
        let e = s.read_tombstone("99").unwrap_err().to_string();
        assert!(
            e.contains("99.json") && e.contains("no record of chat"),
            "{e}"
        );
        let listed = s.tombstones();
        assert_eq!(listed.iter().filter(|t| t.is_err()).count(), 1);
        assert_eq!(listed.iter().filter(|t| t.is_ok()).count(), N);
        // A record of the batch that fails the checks fails its own chat only.
        let mut bad = tomb(5);
        bad.cwd = Some("relative".into());
        let recs: Vec<Vec<u8>> = [tomb(4), bad]
            .iter()
            .map(|t| serde_json::to_vec(t).unwrap())
            .collect();
        let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        let p = s.studio_dir().join("sessions").join(".planted");
        std::fs::write(&p, crate::core::batch::text(&refs)).unwrap();
        for id in ["4", "5"] {
            std::fs::remove_file(s.tombstone_path(id)).unwrap();
            std::fs::hard_link(&p, s.tombstone_path(id)).unwrap();
        }
        std::fs::remove_file(&p).unwrap();
        assert_eq!(s.read_tombstone("4").unwrap().as_ref(), Some(&tomb(4)));
        assert!(s.read_tombstone("5").is_err());
    }
}
