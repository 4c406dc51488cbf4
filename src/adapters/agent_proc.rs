//! An agent's own process, read from /proc and its config dir for the engine (which knows, from
//! the agent seam, what to look for): the agent below a pane (the pane's process or one of its
//! children), its start time (field 22 of `/proc/<pid>/stat`), its environment (where its config
//! dir is: `CLAUDE_CONFIG_DIR`, `HOME`), and a small file it writes (its status file), read
//! bounded and never through a link or from anything but a regular file.
//!
//! Only processes of this user are read: another user's `/proc/<pid>/environ` is not ours to
//! read, and a file named by another user's environment is not ours to trust.

use std::io::Read;
use std::path::Path;

use procfs::process::Process;

/// The largest status file read: Claude Code 2.1.332 writes about 400 bytes.
pub const MAX_STATUS_BYTES: u64 = 64 * 1024;

/// One process as the engine checks it: its argv, its start time and its uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProc {
    pub pid: u32,
    pub argv: Vec<String>,
    /// Field 22 of `/proc/<pid>/stat`, in clock ticks since boot.
    pub start: u64,
    pub uid: u32,
}

/// `pid` as an [`AgentProc`], if it lives and is readable.
pub fn read(pid: u32) -> Option<AgentProc> {
    let p = Process::new(i32::try_from(pid).ok()?).ok()?;
    let st = p.stat().ok()?;
    Some(AgentProc {
        pid,
        argv: p.cmdline().ok()?,
        start: st.starttime,
        uid: p.uid().ok()?,
    })
}

/// The pane process `pid` and its children (every thread's), in that order: where an agent
/// started in a pane runs (the pane's own process, or the child of the `sh -c` tmux ran). Only
/// this user's processes.
pub fn pane_and_children(pid: u32) -> Vec<AgentProc> {
    let me = rustix::process::geteuid().as_raw();
    let Some(first) = read(pid) else {
        return Vec::new();
    };
    let mut out = vec![first];
    if let Ok(p) = Process::new(pid as i32) {
        if let Ok(tasks) = p.tasks() {
            for t in tasks.flatten() {
                for c in t.children().unwrap_or_default() {
                    if let Some(a) = read(c) {
                        out.push(a);
                    }
                }
            }
        }
    }
    out.retain(|a| a.uid == me);
    out
}

/// The start time of `pid` now (field 22 of `/proc/<pid>/stat`), if it lives.
pub fn start_time(pid: u32) -> Option<u64> {
    let p = Process::new(i32::try_from(pid).ok()?).ok()?;
    p.stat().ok().map(|s| s.starttime)
}

/// The environment of `pid` as `NAME=value` pairs (values not UTF-8 are left out), if it is
/// this user's and readable.
pub fn environ(pid: u32) -> Option<Vec<(String, String)>> {
    let p = Process::new(i32::try_from(pid).ok()?).ok()?;
    if p.uid().ok()? != rustix::process::geteuid().as_raw() {
        return None;
    }
    let env = p.environ().ok()?;
    Some(
        env.into_iter()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    )
}

/// Why a small file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SmallFileError {
    #[error("failed to open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a regular file of this user")]
    NotOurs { path: String },
    #[error("{path} is larger than {MAX_STATUS_BYTES} bytes")]
    TooLarge { path: String },
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// Read `path` whole: never through a symlink (`O_NOFOLLOW`), never a FIFO or device (opened
/// non-blocking, then required to be a regular file of this user), at most
/// [`MAX_STATUS_BYTES`]. `Ok(None)` when it does not exist.
pub fn read_small_file(path: &Path) -> Result<Option<String>, SmallFileError> {
    use rustix::fs::{Mode, OFlags};
    let name = || path.display().to_string();
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => {
            return Err(SmallFileError::Open {
                path: name(),
                source: e.into(),
            })
        }
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| SmallFileError::Read {
        path: name(),
        source: e.into(),
    })?;
    let regular =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
    if !regular || st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(SmallFileError::NotOurs { path: name() });
    }
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_STATUS_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| SmallFileError::Read {
            path: name(),
            source: e,
        })?;
    if buf.len() as u64 > MAX_STATUS_BYTES {
        return Err(SmallFileError::TooLarge { path: name() });
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_file_is_read_and_a_link_a_fifo_and_a_big_one_are_not() {
        let d = std::env::temp_dir().join(format!("ccs-agent-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("s.json");
        std::fs::write(&f, "{}").unwrap();
        assert_eq!(read_small_file(&f).unwrap().as_deref(), Some("{}"));
        assert!(read_small_file(&d.join("none")).unwrap().is_none());
        std::os::unix::fs::symlink(&f, d.join("l")).unwrap();
        assert!(read_small_file(&d.join("l")).is_err());
        let fifo = d.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            read_small_file(&fifo),
            Err(SmallFileError::NotOurs { .. })
        ));
        std::fs::write(&f, vec![b' '; MAX_STATUS_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read_small_file(&f),
            Err(SmallFileError::TooLarge { .. })
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let me = std::process::id();
        let p = read(me).unwrap();
        assert_eq!(start_time(me), Some(p.start));
        assert!(environ(me).unwrap().iter().any(|(k, _)| k == "PATH"));
    }
}
