//! `ccs-reap events`: every audit line as it is appended to `reaped.jsonl`, on stdout, one JSON
//! object a line, following the log across rotations.
//!
//! The follower keeps the current file open and reads what is new every [`POLL`]. When the path
//! `reaped.jsonl` names another file (or none), the log was rotated: under the shared audit lock
//! (no writer appends or rotates meanwhile) it reads the old file to its end, finds where the old
//! file went (`reaped.jsonl.<k>`, by device and inode: it is held open, so its inode cannot be
//! reused), and reads `.<k-1>` ... `.1` (files created and rotated between two polls), then
//! the new `reaped.jsonl`. Each line is printed once, whole, in the order of the files; a last line
//! without its newline is held until the newline comes. Only a reader that falls more than
//! `CCS_AUDIT_KEEP` rotations behind (or a log removed by hand) can miss lines, and it says so on
//! stderr.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::adapters::state::{file_id, FileId, LockKind, StateDir, StateError, MAX_AUDIT_KEEP};

/// How often the log is read.
pub const POLL: Duration = Duration::from_millis(100);

/// The longest line passed on: anything longer was not written by a reaper (and would otherwise
/// be held in memory whole), and is dropped up to its newline, with a warning.
pub const MAX_LINE: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("{0}")]
    State(#[from] StateError),
    #[error("failed to watch {0}: {1}")]
    Signal(&'static str, std::io::Error),
    #[error("failed to write to stdout: {0}")]
    Write(std::io::Error),
}

/// One audit file being read.
struct Reading {
    file: File,
    id: FileId,
    /// Where it was when opened (for messages; it may have been renamed since).
    path: PathBuf,
}

/// Reads the audit log from a point on, across rotations. [`Follower::poll`] collects what is
/// new.
pub struct Follower<'a> {
    state: &'a StateDir,
    cur: Reading,
    /// The start of a line whose newline has not come yet.
    partial: Vec<u8>,
    /// Drop everything up to the next newline (the tail of a line begun before we started, or of
    /// one too long to keep).
    skipping: bool,
}

fn read_err(p: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        what: "read",
        path: p.to_path_buf(),
        source,
    }
}

/// The shared audit lock, or none (with a warning) when it cannot be had: reading on without it
/// is still right unless a rotation happens at that very moment.
fn shared_lock(state: &StateDir) -> Option<File> {
    match state.lock_audit(LockKind::Shared) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(error = %e, "following the audit log without its lock");
            None
        }
    }
}

fn open(state: &StateDir, p: &Path) -> Result<Option<Reading>, StateError> {
    let Some(file) = state.open_audit_for_reading(p)? else {
        return Ok(None);
    };
    let m = file.metadata().map_err(|source| StateError::Io {
        what: "stat",
        path: p.to_path_buf(),
        source,
    })?;
    Ok(Some(Reading {
        file,
        id: file_id(&m),
        path: p.to_path_buf(),
    }))
}

impl<'a> Follower<'a> {
    /// Start at the end of `reaped.jsonl` (only new lines), or at its start with `from_start`.
    /// Makes the state dir and an empty log when there are none yet, so there is a file to follow.
    pub fn start(state: &'a StateDir, from_start: bool) -> Result<Follower<'a>, StateError> {
        let lock = shared_lock(state);
        state.create_audit()?;
        let p = state.audit_path();
        let mut cur = open(state, &p)?.ok_or_else(|| StateError::Io {
            what: "open",
            path: p.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        let mut skipping = false;
        if !from_start {
            let len = cur.file.seek(SeekFrom::End(0)).map_err(read_err(&p))?;
            if len > 0 {
                // Under the lock the log ends with a newline; without it (or after a crash) a
                // line may be half there: its tail is not ours to print.
                use std::os::unix::fs::FileExt;
                let mut last = [0u8; 1];
                cur.file
                    .read_exact_at(&mut last, len - 1)
                    .map_err(read_err(&p))?;
                skipping = last[0] != b'\n';
            }
        }
        drop(lock);
        Ok(Follower {
            state,
            cur,
            partial: Vec::new(),
            skipping,
        })
    }

    /// Append to `out` every complete line appended since the last call, each with its newline.
    pub fn poll(&mut self, out: &mut Vec<u8>) -> Result<(), StateError> {
        self.drain(None, out)?;
        let p = self.state.audit_path();
        match std::fs::symlink_metadata(&p) {
            Ok(m) if file_id(&m) == self.cur.id => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StateError::Io {
                    what: "stat",
                    path: p,
                    source,
                })
            }
        }
        // Rotated (or removed). Under the lock no line is half-written and no rename half-done.
        let lock = shared_lock(self.state);
        self.drain(None, out)?;
        self.end_of_file();
        let mut rotated = Vec::new();
        for n in 1..=MAX_AUDIT_KEEP + 1 {
            match std::fs::symlink_metadata(self.state.rotated_audit_path(n)) {
                Ok(m) => rotated.push(file_id(&m)),
                Err(_) => break,
            }
        }
        // rotated[k - 1] is reaped.jsonl.<k>.
        let newer = match rotated.iter().position(|id| *id == self.cur.id) {
            Some(i) => i,
            None => {
                tracing::warn!(
                    path = %self.cur.path.display(),
                    "the audit file being followed was removed, or rotated out of the last files \
                     kept (CCS_AUDIT_KEEP), before it could be followed: events in between may be \
                     missing; going on with {}",
                    p.display()
                );
                0
            }
        };
        let mut between = Vec::new();
        for n in (1..=newer).rev() {
            if let Some(r) = open(self.state, &self.state.rotated_audit_path(n))? {
                between.push(r);
            }
        }
        self.state.create_audit()?;
        let next = open(self.state, &p)?.ok_or_else(|| StateError::Io {
            what: "open",
            path: p.clone(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        drop(lock);
        for mut r in between {
            self.drain(Some(&mut r), out)?;
            self.end_of_file();
        }
        self.cur = next;
        self.drain(None, out)
    }

    /// Read `r` (the current file when `None`) to its end, passing each complete line to `out`.
    fn drain(&mut self, r: Option<&mut Reading>, out: &mut Vec<u8>) -> Result<(), StateError> {
        let r = match r {
            Some(r) => r,
            None => &mut self.cur,
        };
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = match r.file.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_err(&r.path)(e)),
            };
            let mut rest = &buf[..n];
            while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                let (head, tail) = rest.split_at(nl);
                rest = &tail[1..];
                if std::mem::take(&mut self.skipping) {
                    self.partial.clear();
                    continue;
                }
                if self.partial.is_empty() {
                    emit(head, &r.path, out);
                } else {
                    self.partial.extend_from_slice(head);
                    emit(&self.partial, &r.path, out);
                    self.partial.clear();
                }
            }
            if !self.skipping {
                self.partial.extend_from_slice(rest);
                if self.partial.len() > MAX_LINE {
                    tracing::warn!(path = %r.path.display(), "an audit line longer than {MAX_LINE} bytes: dropped");
                    self.partial.clear();
                    self.skipping = true;
                }
            }
        }
    }

    /// A file is done (it was rotated): a line it left without a newline never gets one.
    fn end_of_file(&mut self) {
        if !self.partial.is_empty() {
            tracing::warn!(
                path = %self.cur.path.display(),
                bytes = self.partial.len(),
                "an audit file ended in the middle of a line: that part line is dropped"
            );
            self.partial.clear();
        }
        self.skipping = false;
    }
}

/// Pass one line on if it is a JSON object; anything else is not an audit line.
fn emit(line: &[u8], path: &Path, out: &mut Vec<u8>) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(line) {
        Ok(_) => {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "a line of the audit log that is not a JSON object: skipped")
        }
    }
}

/// Where `events` writes what it follows: the cli's one stdout writer ([`crate::cli`]), which
/// knows a closed or failed stdout.
pub trait Sink {
    /// Write `bytes` whole; an `Err` of kind `BrokenPipe` means the reader went away.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Whether the reader is gone, found without writing (so an `events` with nothing to print
    /// does not outlive its reader).
    fn closed(&self) -> bool;
}

/// Follow the audit log into `sink` (stdout) until SIGTERM or SIGINT, or until it closes (all
/// `Ok`).
pub async fn run(
    state: &StateDir,
    from_start: bool,
    sink: &mut impl Sink,
) -> Result<(), EventsError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| EventsError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| EventsError::Signal("SIGINT", e))?;
    let mut follower = Follower::start(state, from_start)?;
    tracing::debug!(path = %state.audit_path().display(), from_start, "following the audit log");
    let mut out = Vec::new();
    loop {
        follower.poll(&mut out)?;
        if !out.is_empty() {
            match sink.write(&out) {
                Ok(()) => out.clear(),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(EventsError::Write(e)),
            }
        }
        if sink.closed() {
            tracing::debug!("stdout closed: stopping");
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(n: usize) -> String {
        format!("{}\n", serde_json::json!({"n": n, "pad": "x".repeat(40)}))
    }

    fn ns(out: &[u8]) -> Vec<u64> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }

    fn append_raw(s: &StateDir, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(s.audit_path())
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn follows_across_rotations_even_several_between_two_polls() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-").with_audit_limits(300, 20);
        for n in 0..3 {
            s.append_audit_text(&line(n)).unwrap();
        }
        let mut f = Follower::start(&s, false).unwrap();
        let mut out = Vec::new();
        let mut next = 3;
        // 1, then 10 lines between polls: up to several rotations each time.
        for batch in [1, 10, 1, 0, 25, 3] {
            for _ in 0..batch {
                s.append_audit_text(&line(next)).unwrap();
                next += 1;
            }
            f.poll(&mut out).unwrap();
        }
        assert!(s.rotated_audit_path(5).exists(), "no rotations to follow");
        assert_eq!(ns(&out), (3..next as u64).collect::<Vec<_>>());
    }

    #[test]
    fn from_start_prints_what_the_file_holds_first() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        for n in 0..3 {
            s.append_audit_text(&line(n)).unwrap();
        }
        let mut f = Follower::start(&s, true).unwrap();
        let mut out = Vec::new();
        f.poll(&mut out).unwrap();
        s.append_audit_text(&line(3)).unwrap();
        f.poll(&mut out).unwrap();
        assert_eq!(ns(&out), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_part_line_waits_for_its_newline_and_garbage_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        // Before the start: a line whose tail comes later is not ours.
        s.create_audit().unwrap();
        append_raw(&s, br#"{"n": 100, "#);
        let mut f = Follower::start(&s, false).unwrap();
        let mut out = Vec::new();
        append_raw(&s, b"\"rest\": 1}\n{\"n\": 1,");
        f.poll(&mut out).unwrap();
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        append_raw(&s, b" \"x\": 2}\nnot json\n\n[1]\n");
        f.poll(&mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), "{\"n\": 1, \"x\": 2}\n");
    }

    #[test]
    fn a_file_rotated_out_before_it_is_read_is_reported_and_left() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-").with_audit_limits(100, 1);
        let mut f = Follower::start(&s, false).unwrap();
        let mut out = Vec::new();
        for n in 0..5 {
            s.append_audit_text(&line(n)).unwrap();
        }
        f.poll(&mut out).unwrap();
        // Lines 1..=3 went with the files rotated away: the follower goes on with the newest.
        assert_eq!(ns(&out), vec![0, 4]);
        s.append_audit_text(&line(5)).unwrap();
        f.poll(&mut out).unwrap();
        assert_eq!(ns(&out), vec![0, 4, 5]);
    }
}
