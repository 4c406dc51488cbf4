//! The atomic write of a state file: a private temporary file (O_EXCL|O_NOFOLLOW), written and
//! fsynced, renamed over the file, then the directory fsynced; a file that is not a regular file
//! where ours goes (a directory, a FIFO, a symlink) is moved aside first, with a warning, so the
//! write succeeds. [`write_many`] does the same for a batch's files: written and fsynced in
//! parallel, renamed, and the directory fsynced once for all of them.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::private::{open_flags, private_file};
use super::{io, StateError};

/// How many files of a batch are written (and fsynced) at once: the fsyncs wait on the disk, not
/// the CPU, and a journalling file system commits concurrent ones together.
const WRITERS: usize = 16;

/// Write `text` to `d/name` atomically and durably (see the module).
pub(super) fn write(d: &Path, name: &str, text: &[u8]) -> Result<(), StateError> {
    let tmp = temp(d, name, text)?;
    put(d, name, &tmp)?;
    sync_dir(d)
}

/// Write each `(name, text)` into `d` as [`write`] does, the directory fsynced once at the end.
/// Returns each file's result, in order; the directory's fsync failing fails every file renamed.
pub(super) fn write_many(d: &Path, files: &[(String, Vec<u8>)]) -> Vec<Result<(), StateError>> {
    let mut out: Vec<Result<(), StateError>> = Vec::with_capacity(files.len());
    if files.len() <= 1 {
        out.extend(files.iter().map(|(n, t)| write(d, n, t)));
        return out;
    }
    let per = files.len().div_ceil(WRITERS);
    let temps: Vec<Result<PathBuf, StateError>> = std::thread::scope(|s| {
        let parts: Vec<_> = files
            .chunks(per)
            .map(|part| {
                s.spawn(move || part.iter().map(|(n, t)| temp(d, n, t)).collect::<Vec<_>>())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![Err(StateError::Io {
                        what: "write (a writer thread panicked) into",
                        path: d.to_path_buf(),
                        source: std::io::Error::other("panicked"),
                    })]
                })
            })
            .collect()
    });
    // A writer that panicked returned one error for its whole part: pad to one per file.
    let mut temps = temps.into_iter();
    for (n, _) in files {
        let r = match temps.next() {
            Some(Ok(tmp)) => put(d, n, &tmp),
            Some(Err(e)) => Err(e),
            None => Err(StateError::Io {
                what: "write",
                path: d.join(n),
                source: std::io::Error::other("its writer thread panicked"),
            }),
        };
        out.push(r);
    }
    if let Err(e) = sync_dir(d) {
        let why = e.to_string();
        for r in out.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(StateError::Io {
                what: "fsync",
                path: d.to_path_buf(),
                source: std::io::Error::other(why.clone()),
            });
        }
    }
    out
}

/// The temporary file for `d/name`, written and fsynced: `.<name>.<pid>.<n>`, created anew
/// (a file left there by a crash, or planted, is removed, never written through).
fn temp(d: &Path, name: &str, text: &[u8]) -> Result<PathBuf, StateError> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = d.join(format!(".{name}.{}.{n}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = open_flags(OpenOptions::new().write(true).create_new(true))
        .open(&tmp)
        .map_err(io("create", &tmp))
        .and_then(|mut f| {
            private_file(&f, &tmp)?;
            f.write_all(text).map_err(io("write", &tmp))?;
            f.sync_all().map_err(io("fsync", &tmp))
        });
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Rename the written `tmp` over `d/name`, moving aside first what is there and is not a
/// regular file.
fn put(d: &Path, name: &str, tmp: &Path) -> Result<(), StateError> {
    let p = d.join(name);
    move_aside(&p);
    let r = std::fs::rename(tmp, &p).map_err(io("rename into", &p));
    if r.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    r
}

/// A state file that is not a regular file (a directory, which no rename can replace; a FIFO or
/// a symlink, which no read of ours accepts) is renamed to `<name>.bad-<unix ms>`, with a
/// warning, so that the write that follows succeeds. Nothing there, or a regular file: nothing.
pub(super) fn move_aside(p: &Path) {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return;
    };
    if m.is_file() {
        return;
    }
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut bad = p.as_os_str().to_owned();
    bad.push(format!(".bad-{ms}"));
    let bad = PathBuf::from(bad);
    match std::fs::rename(p, &bad) {
        Ok(()) => {
            tracing::warn!(path = %p.display(), moved_to = %bad.display(), kind = kind(&m), "a state file that is not a regular file: moved aside")
        }
        Err(e) => {
            tracing::warn!(path = %p.display(), error = %e, kind = kind(&m), "a state file that is not a regular file could not be moved aside")
        }
    }
}

fn kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else {
        "device"
    }
}

/// fsync a directory: the renames into it are durable once this returns.
pub(super) fn sync_dir(d: &Path) -> Result<(), StateError> {
    File::open(d)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync", d))
}
