//! Memory pressure by event on cgroup v2: a PSI trigger on a cgroup's `memory.pressure` (the
//! kernel makes the file readable for `POLLPRI` when the tasks of the cgroup stalled on memory
//! for more than a share of a time window).
//!
//! A trigger is a line `some <stall µs> <window µs>` written to the file, and lives as long as the
//! file stays open. The kernel takes a window of 500 ms to 10 s from a writer with
//! `CAP_SYS_RESOURCE`; from any other (root in a container without that capability, as here) only
//! multiples of 2 s, checked at the 2 s clock of PSI's averages. [`trigger`] tries the 1 s window,
//! then the 2 s one. Where neither can be written (`/sys/fs/cgroup` read-only, Docker's default;
//! a kernel without PSI) the engine polls as before.
//!
//! On a hybrid host (cgroup v1 memory controller, cgroup v2 mounted beside it without
//! controllers, as systemd's "hybrid" layout and this machine have) the v1 cgroup that holds the
//! limit has no `memory.pressure`, but its v2 twin of the same path does: [`twin`] finds it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The window of a trigger written with `CAP_SYS_RESOURCE`.
pub const WINDOW_US: u64 = 1_000_000;
/// The window of a trigger written without it: the kernel takes only multiples of 2 s.
pub const UNPRIVILEGED_WINDOW_US: u64 = 2_000_000;
/// The stall (percent of the window) a trigger is set at when no `CCS_ENGINE_MEM_PSI` gives it:
/// a wake to look at the memory again, not a verdict.
pub const HINT_STALL_PCT: f64 = 15.0;
/// The host's own pressure file, where no cgroup has one.
pub const HOST_PRESSURE: &str = "/proc/pressure/memory";

/// The line that sets a trigger at `pct` percent of stall over `window_us`: the stall is kept
/// strictly inside the window, as the kernel wants (at least 1 µs, less than the window).
pub fn trigger_line(pct: f64, window_us: u64) -> String {
    let share = if pct.is_finite() { pct } else { 100.0 };
    let stall = ((share / 100.0) * window_us as f64).round() as u64;
    let stall = stall.clamp(1, window_us.saturating_sub(1).max(1));
    format!("some {stall} {window_us}")
}

/// A PSI trigger, set: `fd` turns readable for `POLLPRI` at each window with enough stall.
#[derive(Debug)]
pub struct Trigger {
    pub fd: std::os::fd::OwnedFd,
    pub file: PathBuf,
    /// The stall, in percent of the window, it fires at.
    pub pct: f64,
    pub window_us: u64,
    pub line: String,
}

/// Why a PSI trigger could not be set.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error("failed to open {} for a PSI trigger: {source}", file.display())]
    Open {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to set a PSI trigger on {}: {}", file.display(), refused(tries))]
    Refused {
        file: PathBuf,
        /// Each line tried, and the kernel's answer to it.
        tries: Vec<(String, std::io::Error)>,
    },
}

/// The lines the kernel refused, as the error says them.
fn refused(tries: &[(String, std::io::Error)]) -> String {
    tries
        .iter()
        .map(|(line, e)| format!("{line:?}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Set a trigger at `pct` percent on `file` (a `memory.pressure` or `/proc/pressure/memory`):
/// the 1 s window first, else the unprivileged 2 s one. The error names the file and the
/// kernel's answer to each.
pub fn trigger(file: &Path, pct: f64) -> Result<Trigger, TriggerError> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(file)
        .map_err(|source| TriggerError::Open {
            file: file.to_path_buf(),
            source,
        })?;
    let mut tries = Vec::new();
    for window_us in [WINDOW_US, UNPRIVILEGED_WINDOW_US] {
        let line = trigger_line(pct, window_us);
        // A refused line leaves no trigger behind: the next one may be written on the same file.
        match f.write_all(line.as_bytes()) {
            Ok(()) => {
                return Ok(Trigger {
                    fd: f.into(),
                    file: file.to_path_buf(),
                    pct,
                    window_us,
                    line,
                })
            }
            Err(e) => tries.push((line, e)),
        }
    }
    Err(TriggerError::Refused {
        file: file.to_path_buf(),
        tries,
    })
}

/// The mount point of the cgroup v2 hierarchy in a `/proc/self/mountinfo` text (the fifth field
/// of the line whose file system, after ` - `, is `cgroup2`).
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (head, tail) = l.split_once(" - ")?;
        (tail.split_whitespace().next()? == "cgroup2")
            .then(|| head.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// The v2 twin of a v1 memory cgroup `v1_dir` (under `v1_root`, `/sys/fs/cgroup/memory`): the
/// directory of the same path under the v2 mount `v2_root`, when it has a `memory.pressure`.
/// A path that climbs (`..`) is no twin.
pub fn twin_of(v1_dir: &Path, v1_root: &Path, v2_root: &Path) -> Option<PathBuf> {
    let rel = v1_dir.strip_prefix(v1_root).ok()?;
    if rel
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return None;
    }
    let d = v2_root.join(rel);
    d.join("memory.pressure").is_file().then_some(d)
}

/// The v2 twin of a v1 memory cgroup, on this host (see [`twin_of`]).
pub fn twin(v1_dir: &Path) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    twin_of(
        v1_dir,
        Path::new("/sys/fs/cgroup/memory"),
        &cgroup2_mount(&mounts)?,
    )
}

/// The text of a PSI file (`None` when it cannot be read).
pub fn read(file: &Path) -> Option<String> {
    std::fs::read_to_string(file).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_lines() {
        let table: &[(f64, u64, &str)] = &[
            (15.0, WINDOW_US, "some 150000 1000000"),
            (15.0, UNPRIVILEGED_WINDOW_US, "some 300000 2000000"),
            (12.5, WINDOW_US, "some 125000 1000000"),
            (0.0, WINDOW_US, "some 1 1000000"),
            (100.0, WINDOW_US, "some 999999 1000000"),
            (250.0, UNPRIVILEGED_WINDOW_US, "some 1999999 2000000"),
            (f64::NAN, WINDOW_US, "some 999999 1000000"),
        ];
        for (pct, w, want) in table {
            assert_eq!(trigger_line(*pct, *w), *want, "{pct}% of {w}");
        }
    }

    #[test]
    fn the_cgroup2_mount_and_the_twin() {
        let hybrid = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:11 - cgroup cgroup rw,memory\n\
                      34 25 0:30 / /sys/fs/cgroup/unified rw,relatime shared:15 - cgroup2 cgroup2 rw\n";
        let unified = "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let table: &[(&str, Option<&str>)] = &[
            (hybrid, Some("/sys/fs/cgroup/unified")),
            (unified, Some("/sys/fs/cgroup")),
            (
                "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw\n",
                None,
            ),
            ("garbage\n", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(cgroup2_mount(text), want.map(PathBuf::from), "{text:?}");
        }
        let v2 = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(v2.path().join("a/b")).unwrap();
        std::fs::write(v2.path().join("a/b/memory.pressure"), "").unwrap();
        std::fs::create_dir_all(v2.path().join("c")).unwrap();
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let twin = |d: &str| twin_of(Path::new(d), v1, v2.path());
        assert_eq!(
            twin("/sys/fs/cgroup/memory/a/b"),
            Some(v2.path().join("a/b"))
        );
        // No memory.pressure there, no such directory, not under the v1 root, climbing.
        assert_eq!(twin("/sys/fs/cgroup/memory/c"), None);
        assert_eq!(twin("/sys/fs/cgroup/memory/x"), None);
        assert_eq!(twin("/elsewhere/a/b"), None);
        assert_eq!(twin("/sys/fs/cgroup/memory/c/../a/b"), None);
    }

    #[test]
    fn a_trigger_on_a_file_that_is_not_there_says_where() {
        let e = trigger(Path::new("/nonexistent/memory.pressure"), 10.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("failed to open /nonexistent/memory.pressure for a PSI trigger: "),
            "{e}"
        );
        let refused = TriggerError::Refused {
            file: PathBuf::from("/sys/fs/cgroup/a/memory.pressure"),
            tries: vec![
                (
                    trigger_line(10.0, WINDOW_US),
                    std::io::Error::from_raw_os_error(22),
                ),
                (
                    trigger_line(10.0, UNPRIVILEGED_WINDOW_US),
                    std::io::Error::from_raw_os_error(30),
                ),
            ],
        };
        assert_eq!(
            refused.to_string(),
            format!(
                "failed to set a PSI trigger on /sys/fs/cgroup/a/memory.pressure: \"some 100000 1000000\": {}; \"some 200000 2000000\": {}",
                std::io::Error::from_raw_os_error(22),
                std::io::Error::from_raw_os_error(30)
            )
        );
    }
}
