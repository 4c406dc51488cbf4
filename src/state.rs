//! The state dir: the audit log (`reaped.jsonl`), tombstones (`sessions/<id>.json`) and the
//! single-instance lock (`reaper-<socket>.lock`, flock).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("failed to {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another reaper holds {0}")]
    Locked(PathBuf),
    #[error("tombstone {path} is malformed: {why}")]
    Malformed { path: PathBuf, why: String },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// One line of `reaped.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditLine {
    pub at: String,
    pub session: String,
    pub id: String,
    pub tmux_id: String,
    pub cid: Option<String>,
    pub reason: String,
    pub idle_ms: Option<u64>,
    /// `reaped`, `aborted` or `failed`.
    pub outcome: String,
    /// How the session ended: `stopped` (we reaped it), `completed` or `failed` (it exited on its
    /// own: exit status 0, or non-zero / a signal).
    pub ended: Option<String>,
    pub exit_status: Option<i32>,
    pub exit_signal: Option<i32>,
    pub term: usize,
    pub kill: usize,
    pub pids: Vec<i32>,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
    pub survivors: Vec<i32>,
    pub took_ms: u64,
    pub error: Option<String>,
}

impl AuditLine {
    /// A line for an attempt that has not got anywhere yet (outcome `aborted`).
    pub fn begin(
        at: String,
        session: &str,
        id: &str,
        tmux_id: u32,
        cid: Option<String>,
        reason: &str,
        idle_ms: Option<u64>,
    ) -> Self {
        AuditLine {
            at,
            session: session.to_string(),
            id: id.to_string(),
            tmux_id: format!("${tmux_id}"),
            cid,
            reason: reason.to_string(),
            idle_ms,
            outcome: "aborted".into(),
            ended: None,
            exit_status: None,
            exit_signal: None,
            term: 0,
            kill: 0,
            pids: Vec::new(),
            rss_bytes: 0,
            pss_bytes: None,
            survivors: Vec::new(),
            took_ms: 0,
            error: None,
        }
    }
}

/// `sessions/<id>.json`: what the next spawn needs to resume the chat.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Tombstone {
    pub id: String,
    pub cid: Option<String>,
    pub reaped_at: String,
    pub reason: String,
    pub cwd: Option<String>,
}

/// `reaping/<id>.json`: a teardown in progress, written before the first signal and removed after
/// the audit line. A reaper that dies mid-teardown leaves it, and the next sweep finishes the job
/// from it (the session itself may be gone by then: its pane process was the first to die).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Journal {
    pub id: String,
    pub session: String,
    pub tmux_id: u32,
    pub cid: Option<String>,
    pub reason: String,
    pub idle_ms: Option<u64>,
    pub cwd: Option<String>,
    pub started_at: String,
    /// The reaper doing it: (pid, start time).
    pub owner: crate::procs::Ident,
    pub victims: Vec<crate::procs::Ident>,
    /// The tmux server's pid: `$N` is only unique within one server's life.
    pub server_pid: Option<u32>,
    /// The reap's token in `@ccs_reaper`: only a session that still carries it is killed.
    pub token: String,
}

#[derive(Debug, Clone)]
pub struct StateDir {
    pub dir: PathBuf,
}

impl StateDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StateDir { dir: dir.into() }
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.join("reaped.jsonl")
    }

    pub fn tombstone_path(&self, id: &str) -> PathBuf {
        self.dir.join("sessions").join(format!("{id}.json"))
    }

    fn ensure(&self, sub: Option<&str>) -> Result<PathBuf, StateError> {
        let d = match sub {
            Some(s) => self.dir.join(s),
            None => self.dir.clone(),
        };
        std::fs::create_dir_all(&d).map_err(io("create directory", &d))?;
        Ok(d)
    }

    /// Check, before a reap, that the audit log can be written: a reap whose audit line cannot
    /// be written is not attempted.
    pub fn check_writable(&self) -> Result<(), StateError> {
        self.ensure(Some("sessions"))?;
        let p = self.audit_path();
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(io("open", &p))?;
        // The probe below tests the state dir, not the audit log: a log that is a symlink to a
        // device (/dev/full) or a fifo opens fine and then fails or blocks on every write.
        let meta = f.metadata().map_err(io("stat", &p))?;
        if !meta.is_file() {
            return Err(StateError::Io {
                what: "append to",
                path: p,
                source: std::io::Error::other("not a regular file"),
            });
        }
        let probe = self.dir.join(format!(".probe-{}", std::process::id()));
        let r = File::create(&probe)
            .and_then(|mut f| f.write_all(&[0u8; 4096]).and_then(|_| f.sync_all()));
        let _ = std::fs::remove_file(&probe);
        r.map_err(io("write", &probe))
    }

    /// Append one line (one `write` call on an O_APPEND file, so concurrent writers never interleave).
    pub fn append_audit(&self, line: &AuditLine) -> Result<(), StateError> {
        self.ensure(None)?;
        let p = self.audit_path();
        let mut text = serde_json::to_string(line).map_err(|e| StateError::Io {
            what: "encode an audit line for",
            path: p.clone(),
            source: std::io::Error::other(e),
        })?;
        text.push('\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(io("open", &p))?;
        f.write_all(text.as_bytes()).map_err(io("append to", &p))
    }

    /// Write `value` as JSON to `<sub>/<id>.json` atomically (temp file, then rename).
    fn write_json(&self, sub: &str, id: &str, value: &impl Serialize) -> Result<(), StateError> {
        let d = self.ensure(Some(sub))?;
        let p = d.join(format!("{id}.json"));
        let tmp = d.join(format!(".{id}.json.{}", std::process::id()));
        let text = serde_json::to_vec_pretty(value).map_err(|e| StateError::Io {
            what: "encode",
            path: p.clone(),
            source: std::io::Error::other(e),
        })?;
        let written = std::fs::write(&tmp, text)
            .map_err(io("write", &tmp))
            .and_then(|()| std::fs::rename(&tmp, &p).map_err(io("rename into", &p)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Remove a file; one that is not there is fine.
    fn remove(p: PathBuf) -> Result<(), StateError> {
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StateError::Io {
                what: "remove",
                path: p,
                source: e,
            }),
        }
    }

    /// Write a tombstone atomically.
    pub fn write_tombstone(&self, t: &Tombstone) -> Result<(), StateError> {
        self.write_json("sessions", &t.id, t)
    }

    /// Read a tombstone. `Ok(None)` when there is none.
    pub fn read_tombstone(&self, id: &str) -> Result<Option<Tombstone>, StateError> {
        let p = self.tombstone_path(id);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| StateError::Malformed {
                    path: p,
                    why: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StateError::Io {
                what: "read",
                path: p,
                source: e,
            }),
        }
    }

    /// A respawned chat's tombstone is used: remove it (the audit log keeps the history).
    pub fn remove_tombstone(&self, id: &str) -> Result<(), StateError> {
        Self::remove(self.tombstone_path(id))
    }

    pub fn write_journal(&self, j: &Journal) -> Result<(), StateError> {
        self.write_json("reaping", &j.id, j)
    }

    pub fn remove_journal(&self, id: &str) -> Result<(), StateError> {
        Self::remove(self.dir.join("reaping").join(format!("{id}.json")))
    }

    /// Every journal left in the state dir. Unreadable ones are reported, not guessed at.
    pub fn journals(&self) -> Vec<Result<Journal, StateError>> {
        let d = self.dir.join("reaping");
        let Ok(rd) = std::fs::read_dir(&d) else {
            return Vec::new();
        };
        rd.flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "json")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .map(|p| {
                let b = std::fs::read(&p).map_err(io("read", &p))?;
                serde_json::from_slice(&b).map_err(|e| StateError::Malformed {
                    path: p.clone(),
                    why: e.to_string(),
                })
            })
            .collect()
    }

    /// Take the single-instance lock for a socket. Held until the returned file is dropped.
    pub fn lock(&self, socket_label: &str) -> Result<File, StateError> {
        self.ensure(None)?;
        let p = self.dir.join(format!("reaper-{socket_label}.lock"));
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(io("open", &p))?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                let _ = f.set_len(0);
                let _ = (&f).write_all(format!("{}\n", std::process::id()).as_bytes());
                Ok(f)
            }
            Err(rustix::io::Errno::WOULDBLOCK) => Err(StateError::Locked(p)),
            Err(e) => Err(StateError::Io {
                what: "lock",
                path: p,
                source: e.into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstone_round_trip_and_removal() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path().join("st"));
        assert_eq!(s.read_tombstone("1").unwrap(), None);
        let t = Tombstone {
            id: "1".into(),
            cid: Some("c".into()),
            reaped_at: "now".into(),
            reason: "idle".into(),
            cwd: Some("/w".into()),
        };
        s.write_tombstone(&t).unwrap();
        assert_eq!(s.read_tombstone("1").unwrap(), Some(t));
        s.remove_tombstone("1").unwrap();
        assert_eq!(s.read_tombstone("1").unwrap(), None);
        std::fs::write(s.tombstone_path("2"), "{").unwrap();
        assert!(s
            .read_tombstone("2")
            .unwrap_err()
            .to_string()
            .contains("2.json"));
    }

    #[test]
    fn lock_is_exclusive() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path());
        let held = s.lock("sock").unwrap();
        assert!(matches!(s.lock("sock"), Err(StateError::Locked(_))));
        assert!(s.lock("other").is_ok());
        drop(held);
        assert!(s.lock("sock").is_ok());
    }

    #[test]
    fn audit_lines_append() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path());
        s.check_writable().unwrap();
        let mut l = AuditLine {
            at: "t".into(),
            session: "ccs-1".into(),
            id: "1".into(),
            tmux_id: "$1".into(),
            cid: None,
            reason: "idle".into(),
            idle_ms: Some(5),
            outcome: "reaped".into(),
            ended: Some("stopped".into()),
            exit_status: None,
            exit_signal: None,
            term: 1,
            kill: 0,
            pids: vec![5],
            rss_bytes: 10,
            pss_bytes: None,
            survivors: vec![],
            took_ms: 1,
            error: None,
        };
        s.append_audit(&l).unwrap();
        l.outcome = "aborted".into();
        s.append_audit(&l).unwrap();
        let text = std::fs::read_to_string(s.audit_path()).unwrap();
        let lines: Vec<AuditLine> = text
            .lines()
            .map(|x| serde_json::from_str(x).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].outcome, "aborted");
    }
}
