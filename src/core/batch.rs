//! Batch files: the journals (or the tombstones) of a large batch of reaps written as a few files
//! of many records each, every chat's own `<id>.json` a hard link to the file that holds its
//! record. Each chat keeps its own path (what `turn begin` and `spawn` wait on or read, what a
//! dead reaper's batch is finished from, chat by chat, and what one chat's removal unlinks), while
//! the file system allocates one inode per batch file instead of one per chat (on ext4 the
//! allocation of an inode right after many were freed is what made a batch's files slow).
//!
//! The format: `{"batch":[<record>,<record>,...]}`, each record exactly as a file of one record
//! holds it. A reader of `<id>.json` takes the file's one record, or the batch's record whose `id`
//! is `<id>`. Pure: no I/O here (the state dir's adapter writes and links the files).

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// How every batch file begins: what tells it from a file of one record (which is a JSON object
/// whose first key is never `batch`).
pub const PREFIX: &[u8] = b"{\"batch\":[";

/// At most this many records in one batch file: a reader of one chat's record parses the whole
/// file, so a file stays small (a 1000-chat batch is 16 files).
pub const MAX_RECORDS: usize = 64;

/// At most this many bytes of records in one batch file (well under the 1 MiB a state file may
/// be); a record larger than this is alone in its batch file, 12 bytes larger than the record
/// (records are far from the 1 MiB a reader takes: a kept command line is at most 256 KiB).
pub const MAX_BYTES: usize = 256 * 1024;

/// A record that names its chat.
pub trait Keyed {
    fn key(&self) -> &str;
}

impl Keyed for crate::core::records::Journal {
    fn key(&self) -> &str {
        &self.id
    }
}

impl Keyed for crate::core::records::Tombstone {
    fn key(&self) -> &str {
        &self.id
    }
}

/// Whether a file's bytes are a batch file.
pub fn is_batch(bytes: &[u8]) -> bool {
    bytes.starts_with(PREFIX)
}

/// The text of a batch file holding `records` (each one record's JSON, as a file of one holds it).
pub fn text(records: &[&[u8]]) -> Vec<u8> {
    let len = records.iter().map(|r| r.len() + 1).sum::<usize>() + PREFIX.len() + 2;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(PREFIX);
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r);
    }
    out.extend_from_slice(b"]}");
    out
}

/// How records of these sizes (in bytes, in order) go into batch files: consecutive ranges of at
/// most [`MAX_RECORDS`] records and [`MAX_BYTES`] bytes (a record larger than that alone).
pub fn chunks(sizes: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, &s) in sizes.iter().enumerate() {
        let full = i - start >= MAX_RECORDS || (i > start && bytes + s > MAX_BYTES);
        if full {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += s;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch<T> {
    batch: Vec<T>,
}

/// The records of a batch file (`bytes` begins with [`PREFIX`]).
pub fn records<T: DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>, String> {
    serde_json::from_slice::<Batch<T>>(bytes)
        .map(|b| b.batch)
        .map_err(|e| e.to_string())
}

/// The record of chat `id` among a batch file's `records`: exactly one must name it.
pub fn pick<T: Keyed + Clone>(records: &[T], id: &str) -> Result<T, String> {
    let mut of_id = records.iter().filter(|r| r.key() == id);
    match (of_id.next(), of_id.next()) {
        (Some(r), None) => Ok(r.clone()),
        (None, _) => Err(format!("its batch holds no record of chat {id:?}")),
        (Some(_), Some(_)) => Err(format!("its batch holds two records of chat {id:?}")),
    }
}

/// The record of chat `id` in a file's `bytes`: its one record, or its batch's record of `id`.
/// (The record itself is validated by its reader, as a file of one record is.)
pub fn read<T: DeserializeOwned + Keyed + Clone>(bytes: &[u8], id: &str) -> Result<T, String> {
    if is_batch(bytes) {
        pick(&records::<T>(bytes)?, id)
    } else {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::ReapReason;
    use crate::core::records::Tombstone;

    fn tomb(id: &str) -> Tombstone {
        let mut t = Tombstone::new(id, 1_700_000_000_000, ReapReason::Idle);
        t.cid = Some(format!("c{id}"));
        t
    }

    fn json(t: &Tombstone) -> Vec<u8> {
        serde_json::to_vec_pretty(t).unwrap()
    }

    #[test]
    fn a_batch_file_gives_each_chat_its_own_record() {
        let ts: Vec<Tombstone> = ["1", "2", "a-b"].iter().map(|i| tomb(i)).collect();
        let texts: Vec<Vec<u8>> = ts.iter().map(json).collect();
        let refs: Vec<&[u8]> = texts.iter().map(Vec::as_slice).collect();
        let file = text(&refs);
        assert!(is_batch(&file));
        for t in &ts {
            assert_eq!(&read::<Tombstone>(&file, &t.id).unwrap(), t);
        }
        // A file of one record is read as it always was, and is no batch.
        assert!(!is_batch(&texts[0]));
        assert_eq!(read::<Tombstone>(&texts[0], "1").unwrap(), ts[0]);
    }

    #[test]
    fn what_a_batch_file_cannot_answer_is_said() {
        let one = json(&tomb("1"));
        let twice = text(&[&one, &one]);
        for (bytes, id, want) in [
            (text(&[&one]), "2", "holds no record of chat \"2\""),
            (twice, "1", "holds two records of chat \"1\""),
            (
                b"{\"batch\":[{\"id\":\"1\"}]}".to_vec(),
                "1",
                "missing field",
            ),
            (
                b"{\"batch\":[], \"more\": 1}".to_vec(),
                "1",
                "unknown field",
            ),
            (b"{\"batch\":[".to_vec(), "1", "EOF"),
        ] {
            let got = read::<Tombstone>(&bytes, id).unwrap_err();
            assert!(got.contains(want), "{want:?} not in {got:?}");
        }
    }

    #[test]
    fn chunks_hold_at_most_their_count_and_bytes_in_order() {
        let big = MAX_BYTES + 1;
        // Each chunk as (start, end).
        let spans = |sizes: &[usize]| -> Vec<(usize, usize)> {
            chunks(sizes)
                .into_iter()
                .map(|r| (r.start, r.end))
                .collect()
        };
        for (sizes, want) in [
            (vec![], vec![]),
            (vec![10; 3], vec![(0, 3)]),
            (vec![10; 64], vec![(0, 64)]),
            (vec![10; 65], vec![(0, 64), (64, 65)]),
            (vec![10; 130], vec![(0, 64), (64, 128), (128, 130)]),
            // Bytes: a record that would take a file past MAX_BYTES starts the next.
            (vec![MAX_BYTES / 2, MAX_BYTES / 2, 1], vec![(0, 2), (2, 3)]),
            (vec![MAX_BYTES / 2, MAX_BYTES / 2 + 1], vec![(0, 1), (1, 2)]),
            // A record larger than MAX_BYTES is alone.
            (vec![1, big, 1], vec![(0, 1), (1, 2), (2, 3)]),
            (vec![big], vec![(0, 1)]),
        ] {
            assert_eq!(spans(&sizes), want, "{sizes:?}");
        }
        // Every record is in exactly one chunk, whatever the sizes.
        let sizes: Vec<usize> = (0..1000).map(|i| (i * 7919) % 20_000).collect();
        let c = chunks(&sizes);
        let covered: Vec<usize> = c.iter().flat_map(|r| r.clone()).collect();
        assert_eq!(covered, (0..1000).collect::<Vec<_>>());
        assert!(c.iter().all(|r| r.len() <= MAX_RECORDS));
        assert!(c
            .iter()
            .all(|r| r.len() == 1 || sizes[r.clone()].iter().sum::<usize>() <= MAX_BYTES));
    }
}
