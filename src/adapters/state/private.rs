//! Private files: directories 0700 and files 0600 of ours whatever the umask, opened without
//! following symlinks and without blocking, read back capped.

use crate::core::capped::{self, Capped};
use std::fs::{File, OpenOptions};
use std::path::Path;

use super::{io, StateError};

pub(super) fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub(super) fn refuse(what: &'static str, path: &Path, why: String) -> StateError {
    StateError::Io {
        what,
        path: path.to_path_buf(),
        source: std::io::Error::other(why),
    }
}

/// Create `d` (and its parents) if missing; then make sure it is a directory of ours, mode 0700.
pub(super) fn private_dir(d: &Path) -> Result<(), StateError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(d)
        .map_err(io("create directory", d))?;
    let m = std::fs::symlink_metadata(d).map_err(io("stat", d))?;
    if !m.is_dir() {
        return Err(refuse("use", d, "not a directory".into()));
    }
    if m.uid() != uid() {
        // A fresh Docker volume is root's: say the fix, not just the fault.
        return Err(refuse(
            "use",
            d,
            format!(
                "owned by uid {}, not by us (uid {}): give it to us (`chown {} {}`, or for a container volume an init step that does so; docs/docker.md)",
                m.uid(),
                uid(),
                uid(),
                d.display()
            ),
        ));
    }
    if m.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
            .map_err(io("make private (0700)", d))?;
    }
    Ok(())
}

/// Check an opened file: a regular file of ours; made 0600 if it is not (a file we write).
pub(super) fn private_file(f: &File, p: &Path) -> Result<std::fs::Metadata, StateError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = ours(f, p)?;
    if m.mode() & 0o7777 != 0o600 {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io("make private (0600)", p))?;
    }
    Ok(m)
}

/// Check an opened file: a regular file of ours. Nothing is changed: a file only read (by
/// `status`, which writes nothing) keeps its mode.
fn ours(f: &File, p: &Path) -> Result<std::fs::Metadata, StateError> {
    use std::os::unix::fs::MetadataExt;
    let m = f.metadata().map_err(io("stat", p))?;
    if !m.is_file() {
        return Err(refuse("use", p, "not a regular file".into()));
    }
    if m.uid() != uid() {
        return Err(refuse(
            "use",
            p,
            format!("owned by uid {}, not by us (uid {})", m.uid(), uid()),
        ));
    }
    Ok(m)
}

pub(super) fn open_flags(o: &mut OpenOptions) -> &mut OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    o.mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
}

/// Read a file we wrote: not a symlink, a regular file of ours, at most `max` bytes. `Ok(None)`
/// when it is not there.
pub(super) fn read_private_max(p: &Path, max: u64) -> Result<Option<Vec<u8>>, StateError> {
    match open_private(p)? {
        Some((f, m)) => read_opened(f, &m, p, max).map(Some),
        None => Ok(None),
    }
}

/// Open a file we wrote for reading: not a symlink, a regular file of ours. `Ok(None)` when it
/// is not there.
pub(super) fn open_private(p: &Path) -> Result<Option<(File, std::fs::Metadata)>, StateError> {
    let f = match open_flags(OpenOptions::new().read(true)).open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("open", p)(e)),
    };
    let m = ours(&f, p)?;
    Ok(Some((f, m)))
}

/// Read a file opened by [`open_private`] whole, at most `max` bytes.
pub(super) fn read_opened(
    f: File,
    m: &std::fs::Metadata,
    p: &Path,
    max: u64,
) -> Result<Vec<u8>, StateError> {
    if m.len() > max {
        return Err(refuse(
            "read",
            p,
            format!("{} bytes, more than {max}", m.len()),
        ));
    }
    match capped::read(f, max, m.len()).map_err(io("read", p))? {
        Capped::Whole(b) => Ok(b),
        Capped::TooLarge => Err(refuse("read", p, "grew past the size limit".into())),
    }
}
