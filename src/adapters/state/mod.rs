//! The state dir: the audit log (`reaped.jsonl`, rotated at a size: `audit.rs`), tombstones
//! (`sessions/<id>.json`) and the single-instance lock (`reaper-<socket>.lock`, flock).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

mod asleep;
mod atomic;
mod audit;
pub mod follow;
mod linked;
use crate::core::compat;
use crate::core::known;
mod lease_file;
mod private;
mod room;
mod tombs;
use crate::core::records;

pub use audit::{
    file_id, FileId, LockKind, AUDIT_LOCK_WAIT, DEFAULT_AUDIT_KEEP, DEFAULT_AUDIT_MAX_BYTES,
    MAX_AUDIT_KEEP,
};

pub use known::*;
pub use lease_file::{Observed, OBSERVED_CLOCK};
use private::{open_flags, private_dir, private_file, read_private_max, refuse};
pub use records::*;
pub use room::RoomLock;
pub use tombs::TombLock;

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
    #[error("{path} is malformed: {why}")]
    Malformed { path: PathBuf, why: String },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The largest file read back from the state dir (a tombstone or journal): anything bigger was
/// not written by us.
pub const MAX_STATE_FILE_BYTES: u64 = 1024 * 1024;

/// The state dir, seen by one studio (one socket and one session prefix).
///
/// Layout: `reaped.jsonl` and `reaper-<socket>.lock` at the top, shared; the studio's tombstones
/// and journals in `studios/<key>/sessions/` and `studios/<key>/reaping/`, so two studios that
/// share the dir never read each other's. Every directory is made 0700 and every file 0600,
/// whatever the umask; a directory or file owned by another user is refused, files are opened
/// without following symlinks, and everything read back is validated.
#[derive(Debug, Clone)]
pub struct StateDir {
    pub dir: PathBuf,
    /// `studios/<key>`.
    studio: PathBuf,
    /// The socket's label: which `reaper-<label>.lock` is ours.
    socket_label: String,
    /// The session prefix: a journal's session must be `<prefix><id>`.
    prefix: String,
    /// Rotate `reaped.jsonl` before it would pass this many bytes.
    audit_max_bytes: u64,
    /// Keep this many rotated audit files.
    audit_keep: usize,
}

/// A studio's `reaping/` and `sessions/` directories as [`StateDir::reap_dirs`] checked them.
pub struct ReapDirs {
    reaping: PathBuf,
    sessions: PathBuf,
}

static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl StateDir {
    /// The state dir `dir` as seen by the studio `studio_key` (see
    /// [`crate::config::Socket::studio_key`]), whose lock label is `socket_label`.
    pub fn new(
        dir: impl Into<PathBuf>,
        studio_key: &str,
        socket_label: &str,
        prefix: &str,
    ) -> Self {
        let dir = dir.into();
        StateDir {
            studio: dir.join("studios").join(studio_key),
            dir,
            socket_label: socket_label.to_string(),
            prefix: prefix.to_string(),
            audit_max_bytes: DEFAULT_AUDIT_MAX_BYTES,
            audit_keep: DEFAULT_AUDIT_KEEP,
        }
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.join("reaped.jsonl")
    }

    /// This studio's directory (`studios/<key>`).
    pub fn studio_dir(&self) -> &Path {
        &self.studio
    }

    pub fn tombstone_path(&self, id: &str) -> PathBuf {
        self.studio.join("sessions").join(format!("{id}.json"))
    }

    /// Where 0.1.0 put tombstones, keyed by chat id alone ([`compat`]).
    fn legacy_tombstone_path(&self, id: &str) -> PathBuf {
        compat::tombstone_path(&self.dir, id)
    }

    /// The state dir (private), and `sub` of the studio's directory when given.
    fn ensure(&self, sub: Option<&str>) -> Result<PathBuf, StateError> {
        private_dir(&self.dir)?;
        let Some(sub) = sub else {
            return Ok(self.dir.clone());
        };
        private_dir(&self.dir.join("studios"))?;
        private_dir(&self.studio)?;
        let d = self.studio.join(sub);
        private_dir(&d)?;
        Ok(d)
    }

    fn open_audit(&self) -> Result<File, StateError> {
        let p = self.audit_path();
        let f = open_flags(OpenOptions::new().create(true).append(true))
            .open(&p)
            .map_err(io("open", &p))?;
        // A log that is a symlink (refused by the open), a device (/dev/full) or a fifo opens
        // and then fails or blocks on every write: only a regular file of ours will do.
        private_file(&f, &p).map_err(|e| match e {
            StateError::Io { path, source, .. } => StateError::Io {
                what: "append to",
                path,
                source,
            },
            e => e,
        })?;
        Ok(f)
    }

    /// Check, before a reap, that the audit log and the studio's directories can be written: a
    /// reap whose audit line or tombstone cannot be written is not attempted.
    pub fn check_writable(&self) -> Result<(), StateError> {
        self.ensure(Some("sessions"))?;
        self.ensure(Some("reaping"))?;
        self.open_audit()?;
        self.open_audit_lock()?;
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = self
            .studio
            .join(format!(".probe-{}-{n}", std::process::id()));
        let r = open_flags(OpenOptions::new().write(true).create_new(true))
            .open(&probe)
            .and_then(|mut f| f.write_all(&[0u8; 4096]).and_then(|_| f.sync_all()));
        let _ = std::fs::remove_file(&probe);
        r.map_err(io("write", &probe))
    }

    /// Append one line (one `write` call on an O_APPEND file, so concurrent writers never
    /// interleave), rotating the log first when the line would take it past its size limit.
    pub fn append_audit(&self, line: &AuditLine) -> Result<(), StateError> {
        self.append_audit_many(&[line])
    }

    /// Append `lines`, in order, under one taking of the audit lock ([`StateDir::append_audit`]
    /// for each, at the cost of about one).
    pub fn append_audit_many(&self, lines: &[&AuditLine]) -> Result<(), StateError> {
        // A line that cannot be encoded is said and left out; the others go in.
        let texts: Vec<String> = lines
            .iter()
            .filter_map(|l| match serde_json::to_string(l) {
                Ok(mut t) => {
                    t.push('\n');
                    Some(t)
                }
                Err(e) => {
                    tracing::error!(error = %e, session = %l.session, "failed to encode an audit line");
                    None
                }
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.append_audit_texts(&refs)
    }

    /// Write `value` as JSON to `<studio>/<sub>/<id>.json` atomically (a private temp file, then
    /// rename). `id` is a valid id: the path stays inside the studio's directory.
    fn write_json(&self, sub: &str, id: &str, value: &impl Serialize) -> Result<(), StateError> {
        if !crate::core::policy::valid_id(id) {
            return Err(refuse(
                "write",
                &self.studio.join(sub),
                format!("invalid id {id:?}"),
            ));
        }
        let d = self.ensure(Some(sub))?;
        Self::write_json_in(&d, id, value)
    }

    /// [`StateDir::write_json`] into `d`, a directory already checked by [`StateDir::ensure`].
    fn write_json_in(d: &Path, id: &str, value: &impl Serialize) -> Result<(), StateError> {
        if !crate::core::policy::valid_id(id) {
            return Err(refuse("write", d, format!("invalid id {id:?}")));
        }
        let p = d.join(format!("{id}.json"));
        let text = serde_json::to_vec_pretty(value).map_err(|e| StateError::Io {
            what: "encode",
            path: p.clone(),
            source: std::io::Error::other(e),
        })?;
        Self::write_atomic(d, &format!("{id}.json"), &text)
    }

    /// Write `text` to `d/name` atomically and durably ([`atomic::write`]).
    fn write_atomic(d: &Path, name: &str, text: &[u8]) -> Result<(), StateError> {
        atomic::write(d, name, text)
    }

    /// Write many `<id>.json` files into `d` ([`atomic::write_many`]: in parallel, made durable
    /// together, the directory fsynced once). Each result in order.
    fn write_json_many<'a, T: Serialize + 'a>(
        d: &Path,
        items: impl Iterator<Item = (&'a str, &'a T)>,
    ) -> Vec<Result<(), StateError>> {
        let mut out: Vec<Option<Result<(), StateError>>> = Vec::new();
        let mut files = Vec::new();
        let mut at = Vec::new();
        for (id, v) in items {
            let p = d.join(format!("{id}.json"));
            if !crate::core::policy::valid_id(id) {
                out.push(Some(Err(refuse("write", d, format!("invalid id {id:?}")))));
                continue;
            }
            match serde_json::to_vec_pretty(v) {
                Ok(text) => {
                    at.push(out.len());
                    out.push(None);
                    files.push((format!("{id}.json"), text));
                }
                Err(e) => out.push(Some(Err(StateError::Io {
                    what: "encode",
                    path: p,
                    source: std::io::Error::other(e),
                }))),
            }
        }
        for (i, r) in at.into_iter().zip(atomic::write_many(d, &files)) {
            out[i] = Some(r);
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(refuse("write", d, "not written".into()))))
            .collect()
    }

    /// Remove a file; one that is not there is fine.
    fn remove(p: &Path) -> Result<(), StateError> {
        match std::fs::remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StateError::Io {
                what: "remove",
                path: p.to_path_buf(),
                source: e,
            }),
        }
    }

    /// Write a tombstone atomically.
    pub fn write_tombstone(&self, t: &Tombstone) -> Result<(), StateError> {
        self.write_json("sessions", &t.id, t)
    }

    /// Chat `id`'s tombstone at `p` through `reader` (its own file, or its record in a batch
    /// file), validated.
    fn tombstone_at(
        reader: &mut linked::Reader<Tombstone>,
        p: &Path,
        id: &str,
    ) -> Result<Option<Tombstone>, StateError> {
        let Some(t) = reader.read(p, id)? else {
            return Ok(None);
        };
        t.validate(id).map_err(|why| StateError::Malformed {
            path: p.to_path_buf(),
            why,
        })?;
        Ok(Some(t))
    }

    /// Whether the 0.1.0 layout's files can only be this studio's ([`compat::layout_is_only_ours`]):
    /// no other studio has a directory here, and every lock file in the dir is this socket's.
    fn legacy_is_ours(&self) -> bool {
        let mine = self.studio.file_name();
        let others = std::fs::read_dir(self.dir.join("studios"))
            .map(|rd| {
                rd.flatten()
                    .any(|e| Some(e.file_name().as_os_str()) != mine)
            })
            .unwrap_or(false);
        let my_lock = format!("reaper-{}.lock", self.socket_label);
        let other_locks = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.flatten().any(|e| {
                    compat::is_other_sockets_lock(&e.file_name().to_string_lossy(), &my_lock)
                })
            })
            .unwrap_or(false);
        compat::layout_is_only_ours(others, other_locks)
    }

    /// Read chat `id`'s tombstone, validated. `Ok(None)` when there is none. A tombstone written
    /// by 0.1.0 (keyed by id alone) is read only while it can only be this studio's.
    pub fn read_tombstone(&self, id: &str) -> Result<Option<Tombstone>, StateError> {
        self.read_tombstone_with(&mut linked::Reader::new(), id)
    }

    /// [`StateDir::read_tombstone`] through `reader`, which a listing of many keeps (each batch
    /// file parsed once).
    fn read_tombstone_with(
        &self,
        reader: &mut linked::Reader<Tombstone>,
        id: &str,
    ) -> Result<Option<Tombstone>, StateError> {
        if !crate::core::policy::valid_id(id) {
            return Ok(None);
        }
        if let Some(t) = Self::tombstone_at(reader, &self.tombstone_path(id), id)? {
            return Ok(Some(t));
        }
        let legacy = self.legacy_tombstone_path(id);
        if !legacy.exists() {
            return Ok(None);
        }
        if !self.legacy_is_ours() {
            tracing::warn!(path = %legacy.display(), "a tombstone of ccs-reap 0.1.0 in a state dir that several studios share: ignored, since it cannot be told whose it is");
            return Ok(None);
        }
        Self::tombstone_at(reader, &legacy, id)
    }

    /// A respawned chat's tombstone is used: remove it (the audit log keeps the history), and
    /// the 0.1.0 one that may have stood in for it.
    pub fn remove_tombstone(&self, id: &str) -> Result<(), StateError> {
        if !crate::core::policy::valid_id(id) {
            return Ok(());
        }
        Self::remove(&self.tombstone_path(id))?;
        if self.legacy_is_ours() {
            Self::remove(&self.legacy_tombstone_path(id))?;
        }
        Ok(())
    }

    /// `known.json`: the last known conversation of each chat (see [`Known`]).
    pub fn known_path(&self) -> PathBuf {
        self.studio.join("known.json")
    }

    /// Read the studio's record of last known conversations, validated. Empty when there is none.
    pub fn read_known(&self) -> Result<Known, StateError> {
        let p = self.known_path();
        let Some(b) = read_private_max(&p, MAX_KNOWN_BYTES)? else {
            return Ok(Known::default());
        };
        let bad = |why: String| StateError::Malformed {
            path: p.clone(),
            why,
        };
        let k: Known = serde_json::from_slice(&b).map_err(|e| bad(e.to_string()))?;
        k.validate(&self.prefix).map_err(bad)?;
        Ok(k)
    }

    /// Write the record atomically (private, one line of JSON).
    pub fn write_known(&self, k: &Known) -> Result<(), StateError> {
        let d = self.ensure(None)?;
        private_dir(&d.join("studios"))?;
        private_dir(&self.studio)?;
        let p = self.known_path();
        let text = serde_json::to_vec(k).map_err(|e| StateError::Io {
            what: "encode",
            path: p.clone(),
            source: std::io::Error::other(e),
        })?;
        Self::write_atomic(&self.studio, "known.json", &text)
    }

    pub fn write_journal(&self, j: &Journal) -> Result<(), StateError> {
        self.write_json("reaping", &j.id, j)
    }

    /// The directories a batch of reaps writes its journals and tombstones to, checked (ours,
    /// private, not a symlink) once for the whole batch rather than once a file.
    pub fn reap_dirs(&self) -> Result<ReapDirs, StateError> {
        Ok(ReapDirs {
            reaping: self.ensure(Some("reaping"))?,
            sessions: self.ensure(Some("sessions"))?,
        })
    }

    /// [`StateDir::write_journal`] into the checked `dirs`.
    pub fn write_journal_in(&self, dirs: &ReapDirs, j: &Journal) -> Result<(), StateError> {
        Self::write_json_in(&dirs.reaping, &j.id, j)
    }

    /// [`StateDir::write_tombstone`] into the checked `dirs`.
    pub fn write_tombstone_in(&self, dirs: &ReapDirs, t: &Tombstone) -> Result<(), StateError> {
        Self::write_json_in(&dirs.sessions, &t.id, t)
    }

    /// A batch's journals into the checked `dirs`, in parallel, each durable (the files flushed, the directory
    /// fsynced) before this returns. Each result in order.
    pub fn write_journals_in(
        &self,
        dirs: &ReapDirs,
        js: &[&Journal],
    ) -> Vec<Result<(), StateError>> {
        Self::write_json_many(&dirs.reaping, js.iter().map(|j| (j.id.as_str(), *j)))
    }

    /// A batch's tombstones into the checked `dirs`, as [`StateDir::write_journals_in`].
    pub fn write_tombstones_in(
        &self,
        dirs: &ReapDirs,
        ts: &[Tombstone],
    ) -> Vec<Result<(), StateError>> {
        Self::write_json_many(&dirs.sessions, ts.iter().map(|t| (t.id.as_str(), t)))
    }

    /// Remove a journal: the file it was read from (never a path made from its contents).
    pub fn remove_journal(&self, j: &Journal) -> Result<(), StateError> {
        match &j.path {
            Some(p) => Self::remove(p),
            None if crate::core::policy::valid_id(&j.id) => {
                Self::remove(&self.studio.join("reaping").join(format!("{}.json", j.id)))
            }
            None => Ok(()),
        }
    }

    /// Every journal of this studio (and those a 0.1.0 reaper left in `reaping/`), validated.
    /// Unreadable or invalid ones are reported, not guessed at, and never acted on.
    pub fn journals(&self) -> Vec<Result<Journal, StateError>> {
        let mut out = Vec::new();
        // 0.1.0's journals (keyed by id alone) only while the dir can only be this studio's.
        let mut dirs = vec![self.studio.join("reaping")];
        if self.legacy_is_ours() {
            dirs.push(compat::journals_dir(&self.dir));
        }
        let mut reader = linked::Reader::new();
        for d in dirs {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in linked::by_inode(rd) {
                let p = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(stem) = name.strip_suffix(".json") else {
                    continue;
                };
                if stem.starts_with('.') {
                    continue;
                }
                out.push(self.read_journal(&mut reader, &p, stem));
            }
        }
        out
    }

    fn read_journal(
        &self,
        reader: &mut linked::Reader<Journal>,
        p: &Path,
        stem: &str,
    ) -> Result<Journal, StateError> {
        let bad = |why: String| StateError::Malformed {
            path: p.to_path_buf(),
            why,
        };
        let mut j = reader
            .read(p, stem)?
            .ok_or_else(|| bad("vanished".into()))?;
        j.validate(stem, &self.prefix).map_err(bad)?;
        j.path = Some(p.to_path_buf());
        Ok(j)
    }

    pub fn lock(&self, socket_label: &str) -> Result<File, StateError> {
        self.ensure(None)?;
        let p = self.dir.join(format!("reaper-{socket_label}.lock"));
        let f = open_flags(OpenOptions::new().create(true).truncate(false).write(true))
            .open(&p)
            .map_err(io("open", &p))?;
        private_file(&f, &p)?;
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

    /// The pid the holder of a lock file wrote into it (in the holder's pid namespace), if it
    /// wrote one: what exit 3 names. Reads at most 32 bytes.
    pub fn lock_holder(path: &Path) -> Option<u32> {
        use std::io::Read;
        let f = open_flags(OpenOptions::new().read(true)).open(path).ok()?;
        let mut buf = String::new();
        f.take(32).read_to_string(&mut buf).ok()?;
        buf.trim().parse().ok().filter(|&p| p > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::{ReapReason, TmuxId};

    #[test]
    fn tombstone_round_trip_and_removal() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path().join("st"), "k", "sock", "ccs-");
        assert_eq!(s.read_tombstone("1").unwrap(), None);
        let t = Tombstone {
            id: "1".into(),
            cid: Some("c".into()),
            reaped_at: "now".into(),
            reason: ReapReason::Idle,
            cwd: Some("/w".into()),
            session: None,
            socket: None,
            token: None,
            agent: None,
            argv: None,
            start_failed: None,
            env: None,
            options: None,
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
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        let held = s.lock("sock").unwrap();
        match s.lock("sock") {
            Err(StateError::Locked(p)) => {
                assert_eq!(StateDir::lock_holder(&p), Some(std::process::id()))
            }
            other => panic!("not locked: {other:?}"),
        }
        assert!(s.lock("other").is_ok());
        drop(held);
        assert!(s.lock("sock").is_ok());
    }

    #[test]
    fn audit_lines_append() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        s.check_writable().unwrap();
        let mut l = AuditLine {
            schema_version: crate::core::schema::SCHEMA_VERSION,
            at: "t".into(),
            session: "ccs-1".into(),
            id: "1".into(),
            tmux_id: TmuxId(1),
            cid: None,
            reason: ReapReason::Idle,
            idle_ms: Some(5),
            outcome: Outcome::Reaped,
            ended: Some(Ended::Stopped),
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
            reap_at: None,
        };
        s.append_audit(&l).unwrap();
        l.outcome = Outcome::Aborted;
        s.append_audit(&l).unwrap();
        let text = std::fs::read_to_string(s.audit_path()).unwrap();
        let lines: Vec<AuditLine> = text
            .lines()
            .map(|x| serde_json::from_str(x).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].outcome, Outcome::Aborted);
    }

    fn tomb(id: &str, cid: &str) -> Tombstone {
        Tombstone {
            id: id.into(),
            cid: Some(cid.into()),
            reaped_at: "now".into(),
            reason: ReapReason::Idle,
            cwd: Some("/w".into()),
            session: None,
            socket: None,
            token: None,
            agent: None,
            argv: None,
            start_failed: None,
            env: None,
            options: None,
        }
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn everything_written_is_private_whatever_the_umask() {
        let d = tempfile::tempdir().unwrap();
        let old = rustix::process::umask(rustix::fs::Mode::empty());
        let s = StateDir::new(d.path().join("st"), "k", "sock", "ccs-");
        s.check_writable().unwrap();
        s.write_tombstone(&tomb("1", "c")).unwrap();
        let l = s.lock("sock").unwrap();
        rustix::process::umask(old);
        drop(l);
        for dir in [
            s.dir.clone(),
            s.dir.join("studios"),
            s.studio_dir().to_path_buf(),
            s.studio_dir().join("sessions"),
            s.studio_dir().join("reaping"),
        ] {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
        for f in [
            s.audit_path(),
            s.tombstone_path("1"),
            s.dir.join("reaper-sock.lock"),
        ] {
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
        // A dir of ours left loose (by 0.1.0, or a umask) is tightened.
        std::fs::set_permissions(&s.dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        s.check_writable().unwrap();
        assert_eq!(mode(&s.dir), 0o700);
    }

    #[test]
    fn a_state_dir_of_another_user_is_refused() {
        // As root, a dir given away to nobody; otherwise a dir root owns.
        let d = tempfile::tempdir().unwrap();
        let dir = if rustix::process::geteuid().is_root() {
            let p = d.path().join("theirs");
            std::fs::create_dir(&p).unwrap();
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
            p
        } else {
            PathBuf::from("/usr")
        };
        let s = StateDir::new(&dir, "k", "sock", "ccs-");
        let e = s.check_writable().unwrap_err().to_string();
        assert!(
            e.contains("not by us") && e.contains(&*dir.to_string_lossy()),
            "{e}"
        );
        assert!(s.write_tombstone(&tomb("1", "c")).is_err());
    }

    #[test]
    fn tombstones_read_back_are_validated() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        s.write_tombstone(&tomb("1", "c")).unwrap();
        let p = s.tombstone_path("1");
        let bad = [
            (
                r#"{"id":"1","cid":"--dangerously-skip-permissions","reaped_at":"t","reason":"idle","cwd":null}"#,
                "cid",
            ),
            (
                r#"{"id":"2","cid":"c","reaped_at":"t","reason":"idle","cwd":null}"#,
                "id",
            ),
            (
                r#"{"id":"1","cid":"c","reaped_at":"t","reason":"idle","cwd":"rel/dir"}"#,
                "cwd",
            ),
        ];
        for (text, what) in bad {
            std::fs::write(&p, text).unwrap();
            let e = s.read_tombstone("1").unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("1.json"), "{what}: {e}");
        }
        // A symlink (to a file we could otherwise read) is not followed.
        let target = d.path().join("elsewhere.json");
        std::fs::write(&target, serde_json::to_vec(&tomb("1", "c")).unwrap()).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&target, &p).unwrap();
        assert!(s.read_tombstone("1").is_err());
        // A FIFO is refused at once, never waited on.
        std::fs::remove_file(&p).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(s.read_tombstone("1").is_err());
        // Too big.
        std::fs::remove_file(&p).unwrap();
        let f = File::create(&p).unwrap();
        f.set_len(MAX_STATE_FILE_BYTES + 1).unwrap();
        assert!(s
            .read_tombstone("1")
            .unwrap_err()
            .to_string()
            .contains("bytes"));
        // Ids that would leave the dir are never read or written.
        assert_eq!(s.read_tombstone("../1").unwrap(), None);
        assert!(s.write_tombstone(&tomb("../../x", "c")).is_err());
    }

    #[test]
    fn a_legacy_tombstone_is_read_only_while_it_can_only_be_ours() {
        let d = tempfile::tempdir().unwrap();
        let a = StateDir::new(d.path(), "a-studio", "sock-a", "ccs-");
        std::fs::create_dir_all(d.path().join("sessions")).unwrap();
        let legacy = d.path().join("sessions").join("1.json");
        std::fs::write(&legacy, serde_json::to_vec(&tomb("1", "old")).unwrap()).unwrap();
        // Alone in the dir (or with our own lock): it is ours.
        std::fs::write(d.path().join("reaper-sock-a.lock"), "").unwrap();
        assert_eq!(
            a.read_tombstone("1").unwrap().unwrap().cid.as_deref(),
            Some("old")
        );
        // A tombstone of the new layout wins over it.
        a.write_tombstone(&tomb("1", "new")).unwrap();
        assert_eq!(
            a.read_tombstone("1").unwrap().unwrap().cid.as_deref(),
            Some("new")
        );
        std::fs::remove_file(a.tombstone_path("1")).unwrap();
        // Another studio has a directory here: whose it is cannot be told.
        let b = StateDir::new(d.path(), "b-studio", "sock-b", "ccs-");
        b.write_tombstone(&tomb("9", "b9")).unwrap();
        assert_eq!(a.read_tombstone("1").unwrap(), None);
        assert_eq!(b.read_tombstone("1").unwrap(), None);
        // The studios never read each other's.
        assert_eq!(a.read_tombstone("9").unwrap(), None);
        assert_eq!(
            b.read_tombstone("9").unwrap().unwrap().cid.as_deref(),
            Some("b9")
        );
        std::fs::remove_dir_all(d.path().join("studios").join("b-studio")).unwrap();
        assert!(a.read_tombstone("1").unwrap().is_some());
        // Another socket's lock: shared too.
        std::fs::write(d.path().join("reaper-sock-b.lock"), "").unwrap();
        assert_eq!(a.read_tombstone("1").unwrap(), None);
    }

    #[test]
    fn journals_read_back_are_validated() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path(), "k", "sock", "ccs-");
        let good = serde_json::json!({
            "id": "1", "session": "ccs-1", "tmux_id": 3, "cid": "c1", "reason": "idle",
            "idle_ms": 1, "cwd": "/w", "started_at": "t",
            "owner": {"pid": 99_999_999, "start": 1}, "victims": [{"pid": 4242, "start": 7}],
            "server_pid": 10, "token": "r1x0x0"
        });
        let dir = s.studio_dir().join("reaping");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("1.json"), good.to_string()).unwrap();
        let js = s.journals();
        assert_eq!(js.len(), 1);
        let j = js[0].as_ref().unwrap();
        assert_eq!(j.path.as_deref(), Some(dir.join("1.json").as_path()));
        let cases: &[(&str, serde_json::Value)] = &[
            ("id", serde_json::json!("../../../etc/x")),
            ("id", serde_json::json!("2")),
            ("session", serde_json::json!("other-1")),
            ("token", serde_json::json!("x},#{kill-server}")),
            ("reason", serde_json::json!("because")),
            ("cid", serde_json::json!("-r")),
            ("cwd", serde_json::json!("relative")),
            ("victims", serde_json::json!([{"pid": 1, "start": 1}])),
        ];
        for (field, value) in cases {
            let mut j = good.clone();
            j[*field] = value.clone();
            std::fs::write(dir.join("1.json"), j.to_string()).unwrap();
            let js = s.journals();
            assert!(js[0].is_err(), "{field}={value} was accepted");
        }
        // Removal goes by the file read, never by a path made from the contents.
        std::fs::write(dir.join("1.json"), good.to_string()).unwrap();
        let j = s.journals().remove(0).unwrap();
        s.remove_journal(&j).unwrap();
        assert!(!dir.join("1.json").exists());
    }

    #[test]
    fn audit_lines_are_byte_compatible_with_0_1_0() {
        // The same line as 0.1.0 wrote it, from the typed fields, with the schema's version last.
        let mut l = AuditLine::begin(
            "2026-01-01T00:00:00.000Z".into(),
            "ccs-7",
            "7",
            TmuxId(12),
            Some("c7".into()),
            ReapReason::MaxIdle,
            Some(5),
        );
        l.outcome = Outcome::Failed;
        l.ended = Some(Ended::Completed);
        l.exit_status = Some(0);
        l.pids = vec![10, 11];
        l.survivors = vec![11];
        l.error = Some("processes survived: [11]".into());
        let want = r#"{"at":"2026-01-01T00:00:00.000Z","session":"ccs-7","id":"7","tmux_id":"$12","cid":"c7","reason":"max-idle","idle_ms":5,"outcome":"failed","ended":"completed","exit_status":0,"exit_signal":null,"term":0,"kill":0,"pids":[10,11],"rss_bytes":0,"pss_bytes":null,"survivors":[11],"took_ms":0,"error":"processes survived: [11]"}"#;
        let versioned = format!(
            "{},\"schema_version\":{}}}",
            want.trim_end_matches('}'),
            crate::core::schema::SCHEMA_VERSION
        );
        assert_eq!(serde_json::to_string(&l).unwrap(), versioned);
        let back: AuditLine = serde_json::from_str(&versioned).unwrap();
        assert_eq!(back, l);
        // A 0.1.0 line still reads, as schema 0.
        let old: AuditLine = serde_json::from_str(want).unwrap();
        assert_eq!(old.schema_version, 0);
        assert_eq!(
            AuditLine {
                schema_version: l.schema_version,
                ..old
            },
            l
        );
        for (o, text) in [
            (Outcome::Reaped, "\"reaped\""),
            (Outcome::Aborted, "\"aborted\""),
            (Outcome::Failed, "\"failed\""),
        ] {
            assert_eq!(serde_json::to_string(&o).unwrap(), text);
        }
        for (e, text) in [
            (Ended::Stopped, "\"stopped\""),
            (Ended::Completed, "\"completed\""),
            (Ended::Failed, "\"failed\""),
        ] {
            assert_eq!(serde_json::to_string(&e).unwrap(), text);
        }
        for r in ReapReason::ALL {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
    }
}
