//! The audit log, `reaped.jsonl`: appended to by every reaper that uses the state dir (each studio,
//! each socket, possibly separate processes and containers), and rotated at a size.
//!
//! The protocol every writer follows, under an exclusive `flock` on `reaped.jsonl.lock`:
//! open `reaped.jsonl` (O_APPEND); if the line would take it past the size limit (and it is not
//! empty), rotate (`.N-1` → `.N`, ..., `.1` → `.2`, then `reaped.jsonl` → `.1`) and open the new
//! one; then one `write` of the whole line. So a line is never split and never lost, a file holds
//! at most the limit (or one line, when a single line is bigger), and a reader that holds the lock
//! (shared) sees the files at rest: nothing half-written, no rename half-done.
//!
//! A writer that cannot take the lock while the log stands still for [`AUDIT_LOCK_WAIT`] (a holder
//! stopped by SIGSTOP or a frozen container), or within [`AUDIT_LOCK_MAX_WAIT`] at all, or cannot
//! open the lock file, still appends its line, unlocked and without rotating: a line is worth more
//! than the size bound. While other writers append (the lock is busy, not stuck) it waits on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::private::{open_flags, private_dir, private_file};
use super::{io, StateDir, StateError};

/// `CCS_AUDIT_MAX_BYTES`' default: 10 MiB.
pub const DEFAULT_AUDIT_MAX_BYTES: u64 = 10 << 20;
/// `CCS_AUDIT_KEEP`'s default: `reaped.jsonl.1` ... `reaped.jsonl.5`.
pub const DEFAULT_AUDIT_KEEP: usize = 5;
/// The most rotated files `CCS_AUDIT_KEEP` may ask for (a rotation renames each of them).
pub const MAX_AUDIT_KEEP: usize = 1000;
/// How long a writer waits for the audit lock while the log does not change (its holder is
/// stuck) before it appends without it.
pub const AUDIT_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How long a writer waits for the audit lock at most, however busy the other writers keep it.
pub const AUDIT_LOCK_MAX_WAIT: Duration = Duration::from_secs(30);

/// Which `flock` to take on the audit lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A writer: check the size, rotate, append.
    Exclusive,
    /// A reader (`ccs-reap events`): see the files at rest.
    Shared,
}

/// The `(st_dev, st_ino)` of a file: what tells one file from another across renames.
pub type FileId = (u64, u64);

pub fn file_id(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

impl StateDir {
    /// Limit the audit log to `max_bytes` a file (at least 1) and `keep` rotated files
    /// (`reaped.jsonl.1` ... `.<keep>`, at least 1, at most [`MAX_AUDIT_KEEP`]).
    pub fn with_audit_limits(mut self, max_bytes: u64, keep: usize) -> Self {
        self.audit_max_bytes = max_bytes.max(1);
        self.audit_keep = keep.clamp(1, MAX_AUDIT_KEEP);
        self
    }

    pub fn audit_limits(&self) -> (u64, usize) {
        (self.audit_max_bytes, self.audit_keep)
    }

    /// `reaped.jsonl.<n>`: the n-th most recent rotated audit file.
    pub fn rotated_audit_path(&self, n: usize) -> PathBuf {
        self.dir.join(format!("reaped.jsonl.{n}"))
    }

    pub fn audit_lock_path(&self) -> PathBuf {
        self.dir.join("reaped.jsonl.lock")
    }

    /// Open (creating) the audit lock file: a private regular file of ours, never a symlink.
    pub(super) fn open_audit_lock(&self) -> Result<File, StateError> {
        let p = self.audit_lock_path();
        let f = open_flags(OpenOptions::new().create(true).truncate(false).write(true))
            .open(&p)
            .map_err(io("open", &p))?;
        private_file(&f, &p)?;
        Ok(f)
    }

    /// Take the audit lock. Held until the file is dropped. Waits while it is busy: given up on
    /// once the log (`reaped.jsonl`: its file, its length) has not changed for [`AUDIT_LOCK_WAIT`]
    /// (the holder is stuck, not busy appending), or after [`AUDIT_LOCK_MAX_WAIT`] in all. A lock
    /// handed from one live writer to another is not a stuck one: on a loaded machine a writer
    /// may wait longer than [`AUDIT_LOCK_WAIT`] behind others that keep taking it.
    pub fn lock_audit(&self, kind: LockKind) -> Result<File, StateError> {
        use rustix::fs::{flock, FlockOperation};
        private_dir(&self.dir)?;
        let f = self.open_audit_lock()?;
        let p = self.audit_lock_path();
        let op = match kind {
            LockKind::Exclusive => FlockOperation::NonBlockingLockExclusive,
            LockKind::Shared => FlockOperation::NonBlockingLockShared,
        };
        let t0 = Instant::now();
        let mut deadline = t0 + AUDIT_LOCK_WAIT;
        let mut log = self.audit_progress();
        let mut pause = Duration::from_micros(200);
        loop {
            match flock(&f, op) {
                Ok(()) => return Ok(f),
                Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(StateError::Io {
                        what: "lock",
                        path: p,
                        source: e.into(),
                    })
                }
            }
            let now = Instant::now();
            if now >= deadline {
                let busy = self.audit_progress();
                let waited = now.duration_since(t0);
                if busy == log || waited >= AUDIT_LOCK_MAX_WAIT {
                    let why = if waited >= AUDIT_LOCK_MAX_WAIT {
                        format!(
                            "held by other processes for more than {} ms in all",
                            AUDIT_LOCK_MAX_WAIT.as_millis()
                        )
                    } else {
                        format!(
                            "held by another process for more than {} ms, the log unchanged",
                            AUDIT_LOCK_WAIT.as_millis()
                        )
                    };
                    return Err(StateError::Io {
                        what: "lock",
                        path: p,
                        source: std::io::Error::new(std::io::ErrorKind::TimedOut, why),
                    });
                }
                // Others appended meanwhile: the lock is busy, not stuck.
                log = busy;
                deadline = (now + AUDIT_LOCK_WAIT).min(t0 + AUDIT_LOCK_MAX_WAIT);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }

    /// What tells that writers are appending: `reaped.jsonl`'s identity and length (`None`
    /// when it is not there, as for a moment during a rotation).
    fn audit_progress(&self) -> Option<(FileId, u64)> {
        let m = std::fs::symlink_metadata(self.audit_path()).ok()?;
        Some((file_id(&m), m.len()))
    }

    /// Rotate: drop `.<keep>`, shift `.<n>` to `.<n+1>`, move `reaped.jsonl` to `.1`, and remove
    /// any `.<n>` beyond `keep` left by an earlier, larger `CCS_AUDIT_KEEP`. Under the exclusive
    /// lock only. Renames move names, never follow symlinks, and keep each file's mode (0600).
    fn rotate_audit(&self) -> Result<(), StateError> {
        let rename = |from: &Path, to: &Path| match std::fs::rename(from, to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StateError::Io {
                what: "rotate the audit log: rename",
                path: from.to_path_buf(),
                source: e,
            }),
        };
        let keep = self.audit_keep;
        for n in (1..keep).rev() {
            rename(&self.rotated_audit_path(n), &self.rotated_audit_path(n + 1))?;
        }
        rename(&self.audit_path(), &self.rotated_audit_path(1))?;
        for n in keep + 1..=MAX_AUDIT_KEEP + 1 {
            let p = self.rotated_audit_path(n);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => {
                    return Err(StateError::Io {
                        what: "rotate the audit log: remove",
                        path: p,
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }

    /// Append `text` (one whole line, ending in a newline) to the audit log, under the protocol
    /// (the tests' way to write lines of their own shape).
    #[cfg(test)]
    pub(crate) fn append_audit_text(&self, text: &str) -> Result<(), StateError> {
        self.append_audit_texts(&[text])
    }

    /// Append `texts` (whole lines, each ending in a newline, in order) to the audit log under
    /// one taking of the lock: as few `write` calls on the O_APPEND file as the size limit allows
    /// (the log rotated first whenever the next line would take it past the limit, as for one
    /// line), so a batch's lines cost one lock, one open and a write or two, not those of each
    /// line. A `write` of several whole lines is one append: no other writer's line lands inside.
    pub(crate) fn append_audit_texts(&self, texts: &[&str]) -> Result<(), StateError> {
        if texts.is_empty() {
            return Ok(());
        }
        self.ensure(None)?;
        let p = self.audit_path();
        let lock = match self.lock_audit(LockKind::Exclusive) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "appending the audit line without the audit lock, and without rotating");
                None
            }
        };
        let mut f = self.open_audit()?;
        let mut len = f.metadata().map_err(io("stat", &p))?.len();
        let mut pending = String::new();
        for text in texts {
            let over = |n: u64| n > 0 && n.saturating_add(text.len() as u64) > self.audit_max_bytes;
            if lock.is_some() && over(len + pending.len() as u64) {
                if !pending.is_empty() {
                    f.write_all(pending.as_bytes())
                        .map_err(io("append to", &p))?;
                    len += pending.len() as u64;
                    pending.clear();
                }
                if over(len) {
                    drop(f);
                    if let Err(e) = self.rotate_audit() {
                        tracing::warn!(error = %e, "failed to rotate the audit log: appending to it as it is");
                    }
                    f = self.open_audit()?;
                    len = f.metadata().map_err(io("stat", &p))?.len();
                }
            }
            pending.push_str(text);
        }
        f.write_all(pending.as_bytes()).map_err(io("append to", &p))
    }

    /// Open an audit file (`reaped.jsonl` or a rotated one) for reading: a private regular file of
    /// ours, never through a symlink. `Ok(None)` when it is not there.
    pub fn open_audit_for_reading(&self, p: &Path) -> Result<Option<File>, StateError> {
        let f = match open_flags(OpenOptions::new().read(true)).open(p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", p)(e)),
        };
        private_file(&f, p)?;
        Ok(Some(f))
    }

    /// Make sure the state dir and `reaped.jsonl` exist (an empty log, 0600), as a reader about to
    /// follow it needs.
    pub fn create_audit(&self) -> Result<(), StateError> {
        self.ensure(None)?;
        self.open_audit().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(tag: &str, n: usize, pad: usize) -> String {
        format!(
            "{}\n",
            serde_json::json!({"tag": tag, "n": n, "pad": "x".repeat(pad)})
        )
    }

    /// Every line of every audit file, oldest file first, each as (file, line).
    fn all_lines(s: &StateDir) -> Vec<(PathBuf, String)> {
        let mut files: Vec<PathBuf> = (1..=MAX_AUDIT_KEEP + 1)
            .map(|n| s.rotated_audit_path(n))
            .take_while(|p| p.exists())
            .collect();
        files.reverse();
        files.push(s.audit_path());
        let mut out = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "{}: ends mid-line",
                f.display()
            );
            for l in text.lines() {
                out.push((f.clone(), l.to_string()));
            }
        }
        out
    }

    /// The `n` of every line of every audit file, oldest first.
    fn numbers(s: &StateDir) -> Vec<u64> {
        all_lines(s)
            .iter()
            .map(|(_, l)| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn rotates_at_the_size_keeping_so_many_files() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path().join("st"), "k", "sock", "ccs-").with_audit_limits(500, 2);
        for n in 0..40 {
            s.append_audit_text(&line("a", n, 60)).unwrap();
        }
        assert!(s.rotated_audit_path(2).exists());
        assert!(!s.rotated_audit_path(3).exists());
        // The newest lines are kept, in order, none split.
        let ns = numbers(&s);
        assert_eq!(*ns.last().unwrap(), 39);
        assert!(ns.windows(2).all(|w| w[1] == w[0] + 1), "{ns:?}");
        for p in [
            s.audit_path(),
            s.rotated_audit_path(1),
            s.rotated_audit_path(2),
        ] {
            let len = std::fs::metadata(&p).unwrap().len();
            assert!(len <= 500, "{}: {len} bytes", p.display());
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        let lock = std::fs::metadata(s.audit_lock_path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(lock.permissions().mode() & 0o7777, 0o600);
    }

    #[test]
    fn lines_appended_together_rotate_as_lines_appended_one_by_one() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path().join("st"), "k", "sock", "ccs-").with_audit_limits(500, 3);
        s.append_audit_text(&line("a", 0, 60)).unwrap();
        let texts: Vec<String> = (1..25).map(|n| line("a", n, 60)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        s.append_audit_texts(&refs).unwrap();
        // Rotated along the way (more than 500 bytes in all), every file within the limit, the
        // newest lines kept whole and in order.
        assert!(s.rotated_audit_path(3).exists());
        let ns = numbers(&s);
        assert_eq!(*ns.last().unwrap(), 24);
        assert!(ns.windows(2).all(|w| w[1] == w[0] + 1), "{ns:?}");
        for n in 1..=3 {
            for p in [s.audit_path(), s.rotated_audit_path(n)] {
                let len = std::fs::metadata(&p).unwrap().len();
                assert!(len <= 500, "{}: {len} bytes", p.display());
            }
        }
        // Nothing to append: nothing written, not even an empty log.
        let d2 = tempfile::tempdir().unwrap();
        let e = StateDir::new(d2.path().join("st"), "k", "sock", "ccs-");
        e.append_audit_texts(&[]).unwrap();
        assert!(!e.audit_path().exists());
    }

    #[test]
    fn a_line_bigger_than_the_limit_gets_a_file_of_its_own() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-").with_audit_limits(100, 3);
        s.append_audit_text(&line("small", 0, 1)).unwrap();
        s.append_audit_text(&line("big", 1, 300)).unwrap();
        s.append_audit_text(&line("small", 2, 1)).unwrap();
        let lines = all_lines(&s);
        let files: Vec<&Path> = lines.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            files,
            vec![
                s.rotated_audit_path(2).as_path(),
                s.rotated_audit_path(1).as_path(),
                s.audit_path().as_path()
            ]
        );
    }

    #[test]
    fn a_smaller_keep_removes_the_files_beyond_it() {
        let d = tempfile::tempdir().unwrap();
        let big = StateDir::new(d.path(), "k", "sock", "ccs-").with_audit_limits(100, 5);
        for n in 0..12 {
            big.append_audit_text(&line("a", n, 60)).unwrap();
        }
        assert!(big.rotated_audit_path(5).exists());
        let small = big.clone().with_audit_limits(100, 2);
        small.append_audit_text(&line("a", 12, 60)).unwrap();
        assert!(small.rotated_audit_path(2).exists());
        for n in 3..=5 {
            assert!(!small.rotated_audit_path(n).exists(), "{n}");
        }
    }

    /// Threads with their own open file descriptions contend for the flock as processes do
    /// (tests/it/audit.rs does it with processes): no line lost, none split, across many rotations.
    #[test]
    fn concurrent_writers_lose_no_line() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-").with_audit_limits(1000, 1000);
        std::thread::scope(|sc| {
            for t in 0..4 {
                let s = s.clone();
                sc.spawn(move || {
                    for n in 0..100 {
                        s.append_audit_text(&line(&format!("t{t}"), n, 50)).unwrap();
                    }
                });
            }
        });
        let lines = all_lines(&s);
        assert_eq!(lines.len(), 400);
        for t in 0..4 {
            let tag = format!("t{t}");
            let ns: Vec<u64> = lines
                .iter()
                .map(|(_, l)| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .filter(|v| v["tag"] == tag.as_str())
                .map(|v| v["n"].as_u64().unwrap())
                .collect();
            assert_eq!(ns, (0..100).collect::<Vec<u64>>(), "{tag}");
        }
    }

    #[test]
    fn a_planted_lock_is_refused_and_the_line_still_lands() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-").with_audit_limits(10, 2);
        std::os::unix::fs::symlink("/etc/passwd", s.audit_lock_path()).unwrap();
        assert!(s.lock_audit(LockKind::Exclusive).is_err());
        assert!(s.check_writable().is_err());
        s.append_audit_text(&line("a", 0, 1)).unwrap();
        s.append_audit_text(&line("a", 1, 1)).unwrap();
        // Unlocked: appended, never rotated.
        assert_eq!(all_lines(&s).len(), 2);
        assert!(!s.rotated_audit_path(1).exists());
    }

    #[test]
    fn a_held_lock_is_waited_for_then_given_up_on() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        let shared = s.lock_audit(LockKind::Shared).unwrap();
        let shared2 = s.lock_audit(LockKind::Shared).unwrap();
        let t0 = Instant::now();
        let e = s.lock_audit(LockKind::Exclusive).unwrap_err().to_string();
        assert!(t0.elapsed() >= AUDIT_LOCK_WAIT, "{e}");
        assert!(e.contains("reaped.jsonl.lock"), "{e}");
        drop((shared, shared2));
        assert!(s.lock_audit(LockKind::Exclusive).is_ok());
    }

    /// A lock held past [`AUDIT_LOCK_WAIT`] by a holder that keeps appending (live writers
    /// handing it on, on a loaded machine) is busy, not stuck: waited for, then taken.
    #[test]
    fn a_busy_lock_is_waited_for_past_the_stuck_limit() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        s.create_audit().unwrap();
        let held = s.lock_audit(LockKind::Exclusive).unwrap();
        let hold = AUDIT_LOCK_WAIT + Duration::from_millis(1500);
        let log = s.audit_path();
        let busy = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut f = OpenOptions::new().append(true).open(&log).unwrap();
            while t0.elapsed() < hold {
                f.write_all(b"{}\n").unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(held);
        });
        let t0 = Instant::now();
        let got = s.lock_audit(LockKind::Exclusive);
        let waited = t0.elapsed();
        busy.join().unwrap();
        assert!(got.is_ok(), "gave up on a busy lock: {:?}", got.err());
        assert!(
            waited >= AUDIT_LOCK_WAIT,
            "{waited:?}: the lock was not held"
        );
    }
}
