//! An agent's own process, read from /proc and its config dir for the engine (which knows, from
//! the agent seam, what to look for): the agent below a pane (the pane's process or one of its
//! children), its start time (field 22 of `/proc/<pid>/stat`), its environment (where its config
//! dir is: `CLAUDE_CONFIG_DIR`, `HOME`), a small file it writes (its status file), read
//! bounded and never through a link or from anything but a regular file, and the files a
//! transcript pattern matches ([`glob`]: Codex and Gemini CLI name theirs by date or project).
//!
//! Only processes of this user are read: another user's `/proc/<pid>/environ` is not ours to
//! read, and a file named by another user's environment is not ours to trust.

use std::path::{Path, PathBuf};

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

/// This process's ancestors, nearest first (its parent, its grandparent, ...), each with its argv
/// (empty where it cannot be read), up to `max` of them or pid 1, whichever comes first: where a
/// hook finds the agent that fired it.
pub fn ancestors(max: usize) -> Vec<(u32, Vec<String>)> {
    let mut out = Vec::new();
    let mut pid = std::os::unix::process::parent_id();
    while pid > 1 && out.len() < max {
        let Ok(p) = Process::new(pid as i32) else {
            break;
        };
        let argv = p.cmdline().unwrap_or_default();
        let Ok(st) = p.stat() else {
            break;
        };
        out.push((pid, argv));
        pid = u32::try_from(st.ppid).unwrap_or(0);
    }
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
    #[error("{path} is {kind}, not a regular file: not read")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path} is larger than {limit} bytes: not read")]
    TooLarge { path: String, limit: u64 },
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// How [`read_planted`] takes a file another process could have put there.
#[derive(Debug, Clone, Copy)]
pub struct Planted {
    /// The most bytes read; a larger file is refused, never read to its end.
    pub cap: u64,
    /// Whether a symbolic link at the path is followed (a dotfile manager links settings files).
    pub follow: bool,
    /// Whether the file must be this user's.
    pub ours: bool,
}

/// The agent's status file: never through a link, this user's, at most [`MAX_STATUS_BYTES`].
pub const STATUS_FILE: Planted = Planted {
    cap: MAX_STATUS_BYTES,
    follow: false,
    ours: true,
};

fn kind_of(t: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType as T;
    match t {
        T::RegularFile => "a regular file",
        T::Directory => "a directory",
        T::Fifo => "a FIFO",
        T::Socket => "a socket",
        T::CharacterDevice => "a character device",
        T::BlockDevice => "a block device",
        T::Symlink => "a symbolic link",
        _ => "of an unknown kind",
    }
}

/// The one reader of a file another process could plant (an agent's status or settings file):
/// looked at before it is opened (opening a FIFO or a device can act on its own), opened
/// `O_NONBLOCK` (a FIFO swapped in meanwhile never holds the open) and judged again by `fstat`
/// on what was opened: a regular file (of this user, with `how.ours`) of at most `how.cap`
/// bytes, read at most one byte past the cap whatever its size claims. `Ok(None)` when it does
/// not exist. Never waits, never reads more than the cap.
pub fn read_planted(path: &Path, how: Planted) -> Result<Option<String>, SmallFileError> {
    use rustix::fs::{FileType, Mode, OFlags};
    let name = || path.display().to_string();
    let judge = |st: &rustix::fs::Stat| -> Result<(), SmallFileError> {
        let t = FileType::from_raw_mode(st.st_mode);
        if how.ours && st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(SmallFileError::NotOurs { path: name() });
        }
        if t != FileType::RegularFile {
            return Err(SmallFileError::NotRegular {
                path: name(),
                kind: kind_of(t),
            });
        }
        if u64::try_from(st.st_size).unwrap_or(0) > how.cap {
            return Err(SmallFileError::TooLarge {
                path: name(),
                limit: how.cap,
            });
        }
        Ok(())
    };
    let looked = if how.follow {
        rustix::fs::stat(path)
    } else {
        rustix::fs::lstat(path)
    };
    match looked {
        Ok(st) => judge(&st)?,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => {
            return Err(SmallFileError::Open {
                path: name(),
                source: e.into(),
            })
        }
    }
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if !how.follow {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
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
    judge(&st)?;
    let hint = u64::try_from(st.st_size).unwrap_or(0);
    match crate::core::capped::read(std::fs::File::from(fd), how.cap, hint) {
        Ok(crate::core::capped::Capped::Whole(buf)) => {
            Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
        }
        Ok(crate::core::capped::Capped::TooLarge) => Err(SmallFileError::TooLarge {
            path: name(),
            limit: how.cap,
        }),
        Err(e) => Err(SmallFileError::Read {
            path: name(),
            source: e,
        }),
    }
}

/// Read an agent's status file `path` whole ([`read_planted`] with [`STATUS_FILE`]): never
/// through a symlink, never a FIFO or device, this user's, at most [`MAX_STATUS_BYTES`].
/// `Ok(None)` when it does not exist.
pub fn read_small_file(path: &Path) -> Result<Option<String>, SmallFileError> {
    read_planted(path, STATUS_FILE)
}

/// The regular files a pattern matches, sorted, whose `*`s stand only within one component (a
/// `*` matches any run of characters but `/`, never a leading `.`); components without one are
/// taken as they are. An unreadable directory matches nothing.
pub fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for comp in pattern.components() {
        let part = comp.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for base in &found {
            if !part.contains('*') {
                next.push(base.join(comp.as_os_str()));
                continue;
            }
            let Ok(rd) = std::fs::read_dir(base) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.starts_with('.') && wild(&part, &name) {
                    next.push(base.join(&name));
                }
            }
        }
        found = next;
    }
    found.retain(|p| p.is_file());
    found.sort();
    found
}

/// A file's text, read only, up to `max` bytes, as [`read_planted`] reads (never a FIFO or a
/// device, never through a link, never past the cap): a larger file, or none, is an error.
pub fn read_bounded(p: &Path, max: u64) -> std::io::Result<String> {
    let how = Planted {
        cap: max,
        follow: false,
        ours: false,
    };
    match read_planted(p, how) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is gone", p.display()),
        )),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Whether `name` matches `pat`, whose `*` matches any run of characters.
fn wild(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pat == name;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
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
            Err(SmallFileError::NotRegular { kind: "a FIFO", .. })
        ));
        std::fs::write(&f, vec![b' '; MAX_STATUS_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read_small_file(&f),
            Err(SmallFileError::TooLarge { .. })
        ));
        // A huge (sparse) file is refused by its size, never read.
        let big = d.join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let how = Planted {
            cap: 1 << 20,
            follow: true,
            ours: false,
        };
        assert!(matches!(
            read_planted(&big, how),
            Err(SmallFileError::TooLarge { limit: 1048576, .. })
        ));
        // Followed when asked: a link to a file is read, a link to a FIFO is not opened.
        std::os::unix::fs::symlink(&fifo, d.join("lf")).unwrap();
        assert!(matches!(
            read_planted(&d.join("lf"), how),
            Err(SmallFileError::NotRegular { kind: "a FIFO", .. })
        ));
        std::fs::write(&f, "x").unwrap();
        assert_eq!(
            read_planted(&d.join("l"), how).unwrap().as_deref(),
            Some("x")
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let me = std::process::id();
        let p = read(me).unwrap();
        assert_eq!(start_time(me), Some(p.start));
        assert!(environ(me).unwrap().iter().any(|(k, _)| k == "PATH"));
    }
    #[test]
    fn wildcards() {
        for (p, n, ok) in [
            (
                "rollout-*-abc.jsonl",
                "rollout-2026-12-01T10-00-00-abc.jsonl",
                true,
            ),
            ("rollout-*-abc.jsonl", "rollout-abc.jsonl", false),
            ("*", "x", true),
            (
                "session-*-1234abcd.jsonl",
                "session-2026-12-01T10-00-1234abcd.jsonl",
                true,
            ),
            (
                "session-*-1234abcd.jsonl",
                "session-x-1234abce.jsonl",
                false,
            ),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
        ] {
            assert_eq!(wild(p, n), ok, "{p} {n}");
        }
    }

    #[test]
    fn glob_finds_a_dated_transcript() {
        let d = tempfile::tempdir().unwrap();
        let f = d
            .path()
            .join("sessions/2026/12/01/rollout-2026-12-01T10-00-00-cid1.jsonl");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, "{}").unwrap();
        let pat = d.path().join("sessions/*/*/*/rollout-*-cid1.jsonl");
        assert_eq!(glob(&pat), vec![f]);
        assert!(glob(&d.path().join("sessions/*/*/*/rollout-*-cid2.jsonl")).is_empty());
        assert!(glob(&d.path().join("nowhere/*/x")).is_empty());
    }
}
