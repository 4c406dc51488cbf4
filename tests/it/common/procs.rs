//! Processes, read from `/proc`, and the pid files the tests and the fake claude write.

use std::path::Path;

pub use rustix::process::Signal;

/// What the tests read of `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    pub ppid: i32,
    /// Start time, in clock ticks since boot.
    pub start: u64,
}

/// `/proc/<pid>/stat`, or `None` when there is no such process.
pub fn stat(pid: i32) -> Option<Stat> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command, which is in parentheses and may hold anything.
    let f: Vec<&str> = st.rsplit(')').next()?.split_whitespace().collect();
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

/// Whether a pid is a living process (a zombie is not).
pub fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

/// Every pid in `/proc`.
pub fn all_processes() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A process's command line, its words joined by spaces ("" once it is gone).
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// Whether a process's environment holds `needle` (e.g. `TMUX=`, or the fixture's temp dir).
pub fn environ_has(pid: i32, needle: &str) -> bool {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    env.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Living processes, this test's own left out, whose command line contains every one of `needles`.
pub fn procs_with(needles: &[&str]) -> Vec<i32> {
    let me = std::process::id() as i32;
    all_processes()
        .into_iter()
        .filter(|&pid| pid != me && alive(pid))
        .filter(|&pid| {
            let c = cmdline(pid);
            needles.iter().all(|n| c.contains(n))
        })
        .collect()
}

/// Send `sig` to `pid`; a pid below 1 is never signalled.
pub fn signal(pid: i32, sig: Signal) -> rustix::io::Result<()> {
    match rustix::process::Pid::from_raw(pid) {
        Some(p) => rustix::process::kill_process(p, sig),
        None => Err(rustix::io::Errno::SRCH),
    }
}

/// The lines of a pid file, in order: `kind pid` as a fake claude writes them
/// (`FAKE_CLAUDE_PIDS`), or a bare pid (kind ""). A line without a pid is skipped; a missing file
/// is empty.
pub fn pid_file(p: &Path) -> Vec<(String, i32)> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut words: Vec<&str> = l.split_whitespace().collect();
            let pid = words.pop()?.parse().ok()?;
            Some((words.join(" "), pid))
        })
        .collect()
}

/// The pids of a pid file, in order.
pub fn pids_in(p: &Path) -> Vec<i32> {
    pid_file(p).into_iter().map(|(_, pid)| pid).collect()
}

/// Wait up to `secs` for a pid file to hold a whole line (written up to its newline); its first
/// pid.
pub fn wait_pid(p: &Path, secs: f64) -> Option<i32> {
    let mut pid = None;
    super::wait_until(secs, || {
        pid = std::fs::read_to_string(p)
            .ok()
            .filter(|t| t.ends_with('\n'))
            .and_then(|t| t.lines().next()?.trim().parse().ok());
        pid.is_some()
    });
    pid
}
