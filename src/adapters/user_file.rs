//! Files written for the user, in the user's own directories (`claude-settings --write`): the one
//! place that reads such a file and replaces it.
//!
//! - A symlink at the path is resolved, and the file it names is written (the link is kept).
//! - What is there must be a regular file, opened with `O_NOFOLLOW|O_NONBLOCK` and checked with
//!   `fstat` before anything is read: a FIFO, a socket or a device is refused at once (never
//!   waited on); so is a file with more than one hard link (a rename would split them) and a
//!   file that cannot be written back (no owner write bit, or `access(W_OK)` refuses): each left
//!   alone, with a message that says why.
//! - The new text goes into a temporary file created `O_CREAT|O_EXCL|O_NOFOLLOW` with a random
//!   name in the target's directory (a file or link planted there is never written through), given
//!   the original's owner, group and mode (`fchown`, `fchmod` on the descriptor; a new file: mode
//!   0600, the directory's owner), fsynced, renamed over the target, and the directory fsynced.
//! - A missing directory is created 0700 and, as root, takes its parent's owner and group, so a
//!   file root writes for a user (`~/.codex/hooks.json`) is the user's, directories and all.

use crate::core::capped::{self, Capped};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Access, OFlags};

/// The largest file read back (a settings file is a few KiB).
const MAX_BYTES: u64 = 16 << 20;

/// What went wrong with a user's file, and on which path.
#[derive(Debug, thiserror::Error)]
pub enum UserFileError {
    /// A system call failed: `what` is its verb (resolve, open, stat, read, create, ...).
    #[error("failed to {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is a symlink to a file that does not exist: left alone", path.display())]
    Dangling { path: PathBuf },
    /// `kinds` lists what it may be instead, as the caller words it.
    #[error("{} is not a regular file ({kinds}): left alone", path.display())]
    NotRegular { path: PathBuf, kinds: &'static str },
    #[error(
        "{} has {links} hard links: replacing it would split them; left alone (write the file the links share by hand, or remove the other links)",
        path.display()
    )]
    HardLinks { path: PathBuf, links: u64 },
    #[error(
        "{} cannot be written back (mode {mode:04o}): left alone; make it writable to let ccs-reap change it",
        path.display()
    )]
    ReadOnly { path: PathBuf, mode: u32 },
    #[error("{} is larger than {MAX_BYTES} bytes: left alone", path.display())]
    TooLarge { path: PathBuf },
    #[error("{} is not UTF-8 ({source}): left alone", path.display())]
    NotUtf8 {
        path: PathBuf,
        source: std::string::FromUtf8Error,
    },
    #[error("{} names no {what}", path.display())]
    NoName { path: PathBuf, what: &'static str },
    #[error("failed to create a temporary file in {}", dir.display())]
    NoTemporary { dir: PathBuf },
    #[error("failed to write {}: {source}: left as it was", path.display())]
    NotWritten {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} was written, but its directory {} could not be synced: {source}",
        path.display(),
        dir.display()
    )]
    NotSynced {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// A failed system call `what` on `path`.
fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> UserFileError + 'a {
    move |source| UserFileError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A failed `rustix` call `what` on `path`.
fn errno<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(rustix::io::Errno) -> UserFileError + 'a {
    move |e| io(what, path)(std::io::Error::from(e))
}

/// A file as read: where it really is (symlinks resolved), its text, and who owns it how.
#[derive(Debug)]
pub struct UserFile {
    pub path: PathBuf,
    /// `None`: there is no file yet.
    pub text: Option<String>,
    owner: Option<(u32, u32, u32)>,
}

/// Read `file` for a later [`replace`]: `Ok` with no text when it does not exist yet.
pub fn read(file: &Path) -> Result<UserFile, UserFileError> {
    let path = match std::fs::canonicalize(file) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling symlink is not a missing file: its target would be created elsewhere.
            if std::fs::symlink_metadata(file).is_ok() {
                return Err(UserFileError::Dangling {
                    path: file.to_path_buf(),
                });
            }
            return Ok(UserFile {
                path: file.to_path_buf(),
                text: None,
                owner: None,
            });
        }
        Err(e) => return Err(io("resolve", file)(e)),
    };
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(UserFile {
                path,
                text: None,
                owner: None,
            })
        }
        Err(e) => return Err(io("open", &path)(e)),
    };
    let m = f.metadata().map_err(io("stat", &path))?;
    if !m.file_type().is_file() {
        return Err(UserFileError::NotRegular {
            path,
            kinds: "a FIFO, socket, device or directory",
        });
    }
    if m.nlink() > 1 {
        return Err(UserFileError::HardLinks {
            path,
            links: m.nlink(),
        });
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o200 == 0 || rustix::fs::access(&path, Access::WRITE_OK).is_err() {
        return Err(UserFileError::ReadOnly { path, mode });
    }
    let buf = match capped::read(f, MAX_BYTES, m.len()).map_err(io("read", &path))? {
        Capped::Whole(b) => b,
        Capped::TooLarge => return Err(UserFileError::TooLarge { path }),
    };
    let text = match String::from_utf8(buf) {
        Ok(t) => t,
        Err(source) => return Err(UserFileError::NotUtf8 { path, source }),
    };
    Ok(UserFile {
        path,
        text: Some(text),
        owner: Some((m.uid(), m.gid(), mode)),
    })
}

/// A random hex word for a temporary file's name.
fn random_word() -> String {
    let mut b = [0u8; 8];
    let ok = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if ok.is_err() {
        // No /dev/urandom: the clock and the pid (O_EXCL still refuses anything planted).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        b = (t ^ (u64::from(std::process::id()) << 32)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Replace `f` (as [`read`] found it) with `bytes`: see the module's comment.
pub fn replace(f: &UserFile, bytes: &[u8]) -> Result<(), UserFileError> {
    let target = &f.path;
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // A project's `.claude/` (or a user's `~/.codex/`) may not exist yet.
    create_dirs(dir)?;
    let owner = match f.owner {
        Some(o) => o,
        None => new_owner(dir, 0o600)?,
    };
    put(dir, target, owner, bytes)
}

/// Create `dir` and every missing directory above it, each 0700 and, as root, given its parent's
/// owner and group (a user's `~/.codex/` made by root is the user's, or the user's agent could not
/// read its own hooks). Each is made with `mkdirat` in the descriptor of its parent and opened
/// `O_NOFOLLOW` before its owner is set on that descriptor: a link swapped in for a new directory
/// is never followed, and a directory that someone else made meanwhile is left as it is.
fn create_dirs(dir: &Path) -> Result<(), UserFileError> {
    use rustix::fs::{Mode, OFlags};
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut cur = dir;
    loop {
        if cur.as_os_str().is_empty() {
            cur = Path::new(".");
            break;
        }
        match std::fs::symlink_metadata(cur) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(cur);
                cur = cur.parent().unwrap_or(Path::new(""));
            }
            Err(e) => return Err(io("look at", cur)(e)),
        }
    }
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut parent = rustix::fs::open(cur, dir_flags, Mode::empty()).map_err(errno("open", cur))?;
    let root = rustix::process::geteuid().is_root();
    for p in missing.into_iter().rev() {
        let name = p.file_name().ok_or_else(|| UserFileError::NoName {
            path: p.to_path_buf(),
            what: "directory",
        })?;
        let made = match rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => return Err(errno("create", p)(e)),
        };
        let child = rustix::fs::openat(&parent, name, dir_flags | OFlags::NOFOLLOW, Mode::empty())
            .map_err(errno("open", p))?;
        if made && root {
            let up = rustix::fs::fstat(&parent).map_err(errno("stat", p))?;
            rustix::fs::fchown(
                &child,
                Some(rustix::fs::Uid::from_raw(up.st_uid)),
                Some(rustix::fs::Gid::from_raw(up.st_gid)),
            )
            .map_err(errno("give its parent's owner to", p))?;
        }
        parent = child;
    }
    Ok(())
}

/// Who a new file in `dir` belongs to, with `mode`: as root, the directory's owner (never root's
/// in a user's directory); else this user.
fn new_owner(dir: &Path, mode: u32) -> Result<(u32, u32, u32), UserFileError> {
    if rustix::process::geteuid().is_root() {
        let d = std::fs::metadata(dir).map_err(io("stat", dir))?;
        Ok((d.uid(), d.gid(), mode))
    } else {
        Ok((
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
            mode,
        ))
    }
}

/// Write `bytes` as the file `name` in `dir`, replacing what the name holds without ever writing
/// through it: a symbolic link there is replaced by the file (what it leads to is left alone,
/// dangling or not); a regular file keeps its owner, group and mode; a new file gets `mode` and,
/// as root, the directory's owner. Anything else there (a directory, a FIFO, a device) is left
/// alone with an error. For files whose every byte is ours (the man pages).
pub fn write_in(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<(), UserFileError> {
    let target = dir.join(name);
    let owner = match std::fs::symlink_metadata(&target) {
        Ok(m) if m.file_type().is_file() => (m.uid(), m.gid(), m.mode() & 0o7777),
        Ok(m) if m.file_type().is_symlink() => new_owner(dir, mode)?,
        Ok(_) => {
            return Err(UserFileError::NotRegular {
                path: target,
                kinds: "a directory, FIFO, socket or device",
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => new_owner(dir, mode)?,
        Err(e) => return Err(io("stat", &target)(e)),
    };
    put(dir, &target, owner, bytes)
}

/// `bytes` into a temporary file created `O_EXCL|O_NOFOLLOW` in `dir`, given `owner`'s uid, gid
/// and mode, fsynced, renamed over `target`, the directory fsynced.
fn put(
    dir: &Path,
    target: &Path,
    owner: (u32, u32, u32),
    bytes: &[u8],
) -> Result<(), UserFileError> {
    let base = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| UserFileError::NoName {
            path: target.to_path_buf(),
            what: "file",
        })?;
    let mut created = None;
    for _ in 0..8 {
        let tmp = dir.join(format!(".{base}.ccs-reap.{}", random_word()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags((OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32)
            .open(&tmp)
        {
            Ok(fd) => {
                created = Some((tmp, fd));
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("create", &tmp)(e)),
        }
    }
    let (tmp, mut fd) = created.ok_or_else(|| UserFileError::NoTemporary {
        dir: dir.to_path_buf(),
    })?;
    let write = |fd: &mut File| -> std::io::Result<()> {
        let (uid, gid, mode) = owner;
        let me = fd.metadata()?;
        if (me.uid(), me.gid()) != (uid, gid) {
            rustix::fs::fchown(
                &*fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )?;
        }
        rustix::fs::fchmod(&*fd, rustix::fs::Mode::from_raw_mode(mode))?;
        fd.write_all(bytes)?;
        fd.sync_all()?;
        std::fs::rename(&tmp, target)
    };
    write(&mut fd).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        UserFileError::NotWritten {
            path: target.to_path_buf(),
            source,
        }
    })?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| UserFileError::NotSynced {
            path: target.to_path_buf(),
            dir: dir.to_path_buf(),
            source,
        })
}
