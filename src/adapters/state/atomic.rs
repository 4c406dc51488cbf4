//! The atomic write of a state file: a private temporary file (O_EXCL|O_NOFOLLOW), written and
//! fsynced, renamed over the file, then the directory fsynced; a file that is not a regular file
//! where ours goes (a directory, a FIFO, a symlink) is moved aside first, with a warning, so the
//! write succeeds. [`write_many`] does the same for a batch's files: written in parallel, made
//! durable by one `syncfs` of their file system where that is safe and cheap (one journal
//! commit, not one a file; else an fsync each), renamed, and the directory fsynced once for all
//! of them; a batch of more than [`LINK_ABOVE`] files as a few batch files
//! ([`crate::core::batch`]), each file's name a hard link to the one holding its record.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::private::{open_flags, private_file};
use super::{io, StateError};
use crate::core::batch;

/// How many files of a batch are written at once: without an fsync each, a write is CPU work.
const WRITERS: usize = 4;

/// How many files of a batch are fsynced at once where the file system is not flushed as a whole
/// ([`Flush::EachFile`]): the fsyncs wait on the disk, not the CPU, and a journalling file system
/// commits concurrent ones together.
const SYNCERS: usize = 16;

/// At most this much data dirty or under writeback, system-wide (`/proc/meminfo`), for a batch to
/// be flushed by one `syncfs`: `syncfs` writes out everything dirty on the file system, other
/// programs' data too, and a batch must not wait on a neighbour's gigabytes (an fsync waits on
/// its own file's data and the journal's commit).
const SYNCFS_MAX_DIRTY: u64 = 64 << 20;

/// Write `text` to `d/name` atomically and durably (see the module).
pub(super) fn write(d: &Path, name: &str, text: &[u8]) -> Result<(), StateError> {
    let tmp = temp(d, name, text, true)?;
    put(d, name, &tmp)?;
    sync_dir(d)
}

/// How a batch's temporary files are made durable before they are renamed into place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flush {
    /// One `syncfs` of the directory's file system: on ext4 one journal commit for the whole
    /// batch, where an fsync of each file costs a commit each (1000 journals: about 110 against
    /// 210 ms here). Only where `syncfs` reports a writeback error (Linux 5.8 and later: before,
    /// it returned 0 whatever happened), and while little is dirty ([`SYNCFS_MAX_DIRTY`]).
    FileSystem,
    /// An fsync of each file, [`SYNCERS`] at a time: where `syncfs` could hide an error, and
    /// whenever it fails (the batch written again: a file's own error is then its own, and
    /// another file's is not).
    EachFile,
    /// [`Flush::FileSystem`] whose `syncfs` fails (the tests' way into the fallback).
    #[cfg_attr(not(test), allow(dead_code))]
    FailingFileSystem,
}

/// The flush this kernel allows ([`Flush`]), found once from `uname`.
fn flush() -> Flush {
    static F: OnceLock<Flush> = OnceLock::new();
    *F.get_or_init(|| {
        let u = rustix::system::uname();
        let release = u.release().to_string_lossy();
        if syncfs_reports_errors(&release) {
            Flush::FileSystem
        } else {
            Flush::EachFile
        }
    })
}

/// Whether a Linux kernel release (`6.1.0-13-amd64`) reports writeback errors from `syncfs`:
/// 5.8 or later. A release that does not parse says no.
fn syncfs_reports_errors(release: &str) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (major, minor) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 8),
        _ => false,
    }
}

/// Write each `(name, text)` into `d` as [`write`] does, made durable by one `syncfs` where
/// [`flush`] allows it and little is dirty ([`little_dirty`]), else by an fsync each; the
/// directory fsynced once at the end. Returns each file's result, in order; the directory's fsync
/// failing fails every file renamed.
pub(super) fn write_many(d: &Path, files: &[(String, Vec<u8>)]) -> Vec<Result<(), StateError>> {
    let how = match flush() {
        Flush::FileSystem if !little_dirty() => Flush::EachFile,
        how => how,
    };
    write_many_with(d, files, how)
}

/// Whether at most [`SYNCFS_MAX_DIRTY`] is dirty or under writeback now; not when
/// `/proc/meminfo` cannot say.
fn little_dirty() -> bool {
    <procfs::Meminfo as procfs::Current>::current()
        .map(|m| m.dirty.saturating_add(m.writeback) <= SYNCFS_MAX_DIRTY)
        .unwrap_or(false)
}

/// [`write_many`] with the given flush (the tests run each).
fn write_many_with(
    d: &Path,
    files: &[(String, Vec<u8>)],
    how: Flush,
) -> Vec<Result<(), StateError>> {
    if files.len() > LINK_ABOVE {
        return write_linked(d, files, how);
    }
    write_each(d, files, how)
}

/// Each of `files` a file of its own: written, made durable as `how` says, renamed into place;
/// the directory fsynced once.
fn write_each(d: &Path, files: &[(String, Vec<u8>)], how: Flush) -> Vec<Result<(), StateError>> {
    let mut out: Vec<Result<(), StateError>> = Vec::with_capacity(files.len());
    if files.len() <= 1 {
        out.extend(files.iter().map(|(n, t)| write(d, n, t)));
        return out;
    }
    let temps = durable_temps(d, files, how);
    for ((n, _), r) in files.iter().zip(temps) {
        out.push(r.and_then(|tmp| put(d, n, &tmp)));
    }
    synced(d, out)
}

/// Above this many files, a batch is written as batch files ([`write_linked`]); at most this many
/// are a file each, as every version of ccs-reap reads them.
pub(super) const LINK_ABOVE: usize = 8;

/// `files` (each one record's JSON) as a few batch files ([`batch`]: at most [`batch::MAX_RECORDS`]
/// records and [`batch::MAX_BYTES`] bytes each), each written to a temporary file and made durable
/// as `how` says, then every name `d/<name>` a hard link to the file holding its record (a name
/// already there is replaced atomically: a link under a temporary name, renamed over it), the
/// temporary names removed, and the directory fsynced once. One inode for 64 records: the
/// allocation of 1000 inodes right after many were freed is what made a batch's files slow (ext4).
/// A batch file that cannot be written fails each of its names. A name that cannot be linked (a
/// file system without hard links) stops the linking: it and every name after it are written as
/// files of their own record, together ([`write_each`]), with one warning.
fn write_linked(d: &Path, files: &[(String, Vec<u8>)], how: Flush) -> Vec<Result<(), StateError>> {
    let sizes: Vec<usize> = files.iter().map(|(_, t)| t.len()).collect();
    let ranges = batch::chunks(&sizes);
    let texts: Vec<(String, Vec<u8>)> = ranges
        .iter()
        .map(|r| {
            let recs: Vec<&[u8]> = files[r.clone()].iter().map(|(_, t)| t.as_slice()).collect();
            ("batch".to_string(), batch::text(&recs))
        })
        .collect();
    let temps = durable_temps(d, &texts, how);
    let mut out: Vec<Option<Result<(), StateError>>> = Vec::with_capacity(files.len());
    // The names not linked (a file system without hard links: after the first failure, no more
    // tries), written afterwards as files of their own record, together.
    let mut unlinked: Vec<usize> = Vec::new();
    for (r, tmp) in ranges.into_iter().zip(temps) {
        match tmp {
            Ok(src) => {
                for i in r {
                    if !unlinked.is_empty() {
                        unlinked.push(i);
                        out.push(None);
                        continue;
                    }
                    match link_into(d, &files[i].0, &src) {
                        Ok(()) => out.push(Some(Ok(()))),
                        Err(e) => {
                            tracing::warn!(dir = %d.display(), error = %e, "a batch file could not be linked: the batch's records are written as files of their own");
                            unlinked.push(i);
                            out.push(None);
                        }
                    }
                }
                let _ = std::fs::remove_file(&src);
            }
            Err(e) => {
                let why = e.to_string();
                out.extend(files[r].iter().map(|(n, _)| {
                    Some(Err(StateError::Io {
                        what: "write the batch file of",
                        path: d.join(n),
                        source: std::io::Error::other(why.clone()),
                    }))
                }));
            }
        }
    }
    if !unlinked.is_empty() {
        let rest: Vec<(String, Vec<u8>)> = unlinked.iter().map(|&i| files[i].clone()).collect();
        for (i, r) in unlinked.into_iter().zip(write_each(d, &rest, how)) {
            out[i] = Some(r);
        }
    }
    let out = out
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(refuse_io(d, "not written"))))
        .collect();
    synced(d, out)
}

/// How many names this thread has linked (the tests' count).
#[cfg(test)]
fn count_links() -> usize {
    tests::LINKED.with(|n| {
        n.set(n.get() + 1);
        n.get() - 1
    })
}

/// An error for a file of a batch that was not written (a case the code above never leaves).
fn refuse_io(d: &Path, why: &str) -> StateError {
    StateError::Io {
        what: "write into",
        path: d.to_path_buf(),
        source: std::io::Error::other(why.to_string()),
    }
}

/// Name `d/name` a hard link to `src` (a batch file in `d`): moved aside first what is there and
/// is not a regular file; a regular file there (an earlier reap's record) replaced atomically, by a
/// link under a temporary name renamed over it, so a reader finds the old record or the new one,
/// never none.
fn link_into(d: &Path, name: &str, src: &Path) -> Result<(), StateError> {
    let p = d.join(name);
    #[cfg(test)]
    if tests::NO_LINKS_AFTER.with(|n| n.get().is_some_and(|k| k <= count_links())) {
        return Err(refuse_io(
            &p,
            "a file system without hard links (the tests' way in)",
        ));
    }
    move_aside(&p);
    match std::fs::hard_link(src, &p) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("link", &p)(e)),
    }
    let tmp = temp_path(d, name);
    let _ = std::fs::remove_file(&tmp);
    std::fs::hard_link(src, &tmp).map_err(io("link", &tmp))?;
    put(d, name, &tmp)
}

/// The directory fsynced once for a batch: its failing fails every file renamed or linked.
fn synced(d: &Path, mut out: Vec<Result<(), StateError>>) -> Vec<Result<(), StateError>> {
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

/// The temporary files of `files`, written in parallel and made durable: by one `syncfs` where
/// `how` allows (written again, each fsynced, where it fails), else an fsync each.
fn durable_temps(
    d: &Path,
    files: &[(String, Vec<u8>)],
    how: Flush,
) -> Vec<Result<PathBuf, StateError>> {
    match how {
        Flush::EachFile => in_parallel(files, SYNCERS, d, |(n, t)| temp(d, n, t, true)),
        Flush::FileSystem | Flush::FailingFileSystem => {
            let temps = in_parallel(files, WRITERS, d, |(n, t)| temp(d, n, t, false));
            match syncfs(d, how) {
                Ok(()) => temps,
                Err(e) => {
                    // Some writeback of that file system failed, perhaps not ours: written
                    // again, each file fsynced, so a file's own error is its own.
                    tracing::warn!(dir = %d.display(), error = %e, "syncfs failed: the batch is written again, each file fsynced");
                    for t in temps.iter().flatten() {
                        let _ = std::fs::remove_file(t);
                    }
                    in_parallel(files, SYNCERS, d, |(n, t)| temp(d, n, t, true))
                }
            }
        }
    }
}

/// `f` of each item, `threads` at a time, each result in order. A thread that panics yields an
/// error for each of its items.
fn in_parallel<I: Sync, T: Send, F>(
    items: &[I],
    threads: usize,
    d: &Path,
    f: F,
) -> Vec<Result<T, StateError>>
where
    F: Fn(&I) -> Result<T, StateError> + Sync,
{
    let per = items.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(per)
            .map(|part| {
                (
                    part.len(),
                    s.spawn(move || part.iter().map(f).collect::<Vec<_>>()),
                )
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|(len, h)| {
                h.join().unwrap_or_else(|_| {
                    (0..len)
                        .map(|_| {
                            Err(StateError::Io {
                                what: "write (a writer thread panicked) into",
                                path: d.to_path_buf(),
                                source: std::io::Error::other("panicked"),
                            })
                        })
                        .collect()
                })
            })
            .collect()
    })
}

/// One `syncfs` of the file system that holds `d` (a [`Flush::FailingFileSystem`] fails).
fn syncfs(d: &Path, how: Flush) -> std::io::Result<()> {
    if how == Flush::FailingFileSystem {
        return Err(std::io::Error::other("a failure the tests asked for"));
    }
    let f = File::open(d)?;
    rustix::fs::syncfs(&f)?;
    Ok(())
}

/// The temporary file for `d/name`, written (and fsynced when `sync`): `.<name>.<pid>.<n>`,
/// created anew (a file left there by a crash, or planted, is removed, never written through).
fn temp(d: &Path, name: &str, text: &[u8], sync: bool) -> Result<PathBuf, StateError> {
    let tmp = temp_path(d, name);
    let _ = std::fs::remove_file(&tmp);
    let written = open_flags(OpenOptions::new().write(true).create_new(true))
        .open(&tmp)
        .map_err(io("create", &tmp))
        .and_then(|mut f| {
            private_file(&f, &tmp)?;
            f.write_all(text).map_err(io("write", &tmp))?;
            if sync {
                f.sync_all().map_err(io("fsync", &tmp))?;
            }
            Ok(())
        });
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// A temporary name for `d/name`, unique in this process: `.<name>.<pid>.<n>`.
fn temp_path(d: &Path, name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    d.join(format!(".{name}.{}.{n}", std::process::id()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn syncfs_is_trusted_only_where_it_reports_writeback_errors() {
        for (release, want) in [
            ("6.18.44-fc-v1045", true),
            ("5.8.0", true),
            ("5.10.0-28-amd64", true),
            ("10.0", true),
            ("5.7.19", false),
            ("4.19.0-18-amd64", false),
            ("3.10.0-1160.el7.x86_64", false),
            ("5", false),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(syncfs_reports_errors(release), want, "{release:?}");
        }
    }

    fn dir() -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("ccs-atomic-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    /// An old version of `3.json`, and a FIFO where `7.json` goes.
    fn plant(d: &Path) {
        std::fs::write(d.join("3.json"), b"old").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("7.json"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    /// No temporary file is left in `d`, and the FIFO [`plant`] made is moved aside, once.
    fn no_temporaries_and_the_fifo_aside(d: &Path, how: Flush) {
        no_temporaries(d);
        let names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let aside = names.iter().filter(|n| n.starts_with("7.json.bad-"));
        assert_eq!(aside.count(), 1, "{how:?}: the FIFO moved aside: {names:?}");
    }

    #[test]
    fn a_batch_is_written_whole_and_private_whichever_the_flush() {
        for how in [Flush::FileSystem, Flush::EachFile, Flush::FailingFileSystem] {
            let d = dir();
            let files: Vec<(String, Vec<u8>)> = (0..40)
                .map(|i| (format!("{i}.json"), format!("{{\"n\":{i}}}").into_bytes()))
                .collect();
            // An old version of one file is replaced, a FIFO where another goes is moved aside.
            plant(&d);
            let out = write_each(&d, &files, how);
            assert_eq!(out.len(), files.len(), "{how:?}");
            for ((name, text), r) in files.iter().zip(&out) {
                assert!(r.is_ok(), "{how:?} {name}: {r:?}");
                let p = d.join(name);
                assert_eq!(&std::fs::read(&p).unwrap(), text, "{how:?} {name}");
                let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{how:?} {name}");
            }
            no_temporaries_and_the_fifo_aside(&d, how);
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn a_large_batch_is_a_few_files_linked_by_name_whichever_the_flush() {
        use std::os::unix::fs::MetadataExt;
        for how in [Flush::FileSystem, Flush::EachFile, Flush::FailingFileSystem] {
            let d = dir();
            let n = 2 * batch::MAX_RECORDS + 3;
            let files: Vec<(String, Vec<u8>)> = (0..n)
                .map(|i| {
                    (
                        format!("{i}.json"),
                        format!("{{\"id\":\"{i}\"}}").into_bytes(),
                    )
                })
                .collect();
            assert!(files.len() > LINK_ABOVE);
            // An earlier record of one name is replaced, a FIFO where another goes is moved
            // aside, a symlink where a third goes is replaced, never written through.
            plant(&d);
            std::fs::write(d.join("target"), b"not ours to write").unwrap();
            std::os::unix::fs::symlink(d.join("target"), d.join("5.json")).unwrap();
            let out = write_many_with(&d, &files, how);
            assert_eq!(out.len(), files.len(), "{how:?}");
            let mut inodes = std::collections::HashSet::new();
            for ((name, text), r) in files.iter().zip(&out) {
                assert!(r.is_ok(), "{how:?} {name}: {r:?}");
                let p = d.join(name);
                let m = std::fs::symlink_metadata(&p).unwrap();
                assert!(m.is_file(), "{how:?} {name}");
                assert_eq!(m.mode() & 0o777, 0o600, "{how:?} {name}");
                let got = std::fs::read(&p).unwrap();
                assert!(batch::is_batch(&got), "{how:?} {name}");
                let want = String::from_utf8(text.clone()).unwrap();
                assert!(
                    String::from_utf8(got).unwrap().contains(&want),
                    "{how:?} {name}: its batch lacks its record"
                );
                inodes.insert(m.ino());
            }
            // Three batch files for 131 names, each linked once per record it holds.
            assert_eq!(inodes.len(), 3, "{how:?}");
            let nlink = std::fs::metadata(d.join("0.json")).unwrap().nlink();
            assert_eq!(nlink, batch::MAX_RECORDS as u64, "{how:?}");
            assert_eq!(
                std::fs::read(d.join("target")).unwrap(),
                b"not ours to write"
            );
            no_temporaries_and_the_fifo_aside(&d, how);
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    thread_local! {
        /// Names linked by this thread so far, and after how many links fail (a file system
        /// without hard links).
        pub(super) static LINKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        pub(super) static NO_LINKS_AFTER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    }

    #[test]
    fn where_names_cannot_be_linked_the_rest_are_files_of_their_own() {
        let d = dir();
        let n = batch::MAX_RECORDS + 20;
        let files: Vec<(String, Vec<u8>)> = (0..n)
            .map(|i| {
                (
                    format!("{i}.json"),
                    format!("{{\"id\":\"{i}\"}}").into_bytes(),
                )
            })
            .collect();
        LINKED.with(|l| l.set(0));
        NO_LINKS_AFTER.with(|k| k.set(Some(10)));
        let out = write_linked(&d, &files, Flush::EachFile);
        NO_LINKS_AFTER.with(|k| k.set(None));
        assert!(out.iter().all(Result::is_ok), "{out:?}");
        for (i, (name, text)) in files.iter().enumerate() {
            let got = std::fs::read(d.join(name)).unwrap();
            if i < 10 {
                assert!(
                    batch::is_batch(&got),
                    "{name} was linked before the failure"
                );
            } else {
                assert_eq!(&got, text, "{name} is a file of its own record");
            }
        }
        // One failed try: the names after it were never tried.
        assert_eq!(LINKED.with(|l| l.get()), 11);
        no_temporaries(&d);
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn no_temporaries(d: &Path) {
        let names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with('.')),
            "temporaries left: {names:?}"
        );
    }

    #[test]
    fn a_batch_file_that_cannot_be_written_fails_each_of_its_names() {
        // Its directory is gone: no batch file can be created, and each name says so.
        let d = dir();
        std::fs::remove_dir_all(&d).unwrap();
        let files: Vec<(String, Vec<u8>)> = (0..20)
            .map(|i| (format!("{i}.json"), b"{}".to_vec()))
            .collect();
        let out = write_linked(&d, &files, Flush::EachFile);
        assert_eq!(out.len(), 20);
        for (r, (name, _)) in out.iter().zip(&files) {
            let e = r.as_ref().unwrap_err().to_string();
            assert!(e.contains(name.as_str()) && e.contains("batch file"), "{e}");
        }
        assert!(!d.exists());
    }
}
