//! The small reads of `/proc` the engine's stages make beside the process table: a process's
//! start time and state, this boot's id, a pane's working directory.

/// What `/proc/<pid>/stat` says of a process, as far as a server's identity goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcSeen {
    /// It runs (not a zombie), started at this time (clock ticks since boot).
    Running { start: u64 },
    /// A zombie, or dead (`Z`, `X`).
    Dead,
    /// No such process.
    NotFound,
    /// `/proc` could not tell (another pid namespace, a permission).
    Unknown,
}

/// The start time of process `pid` from `/proc/<pid>/stat` (clock ticks since boot), when it can
/// be read.
pub fn start_time(pid: u32) -> Option<u64> {
    procfs::process::Process::new(pid as i32)
        .and_then(|p| p.stat())
        .ok()
        .map(|s| s.starttime)
}

/// What `/proc/<pid>/stat` says of process `pid` ([`ProcSeen`]).
pub fn seen(pid: u32) -> ProcSeen {
    match procfs::process::Process::new(pid as i32).and_then(|p| p.stat()) {
        Ok(p) if p.state == 'Z' || p.state == 'X' => ProcSeen::Dead,
        Ok(p) => ProcSeen::Running { start: p.starttime },
        Err(procfs::ProcError::NotFound(_)) => ProcSeen::NotFound,
        Err(_) => ProcSeen::Unknown,
    }
}

/// `/proc/sys/kernel/random/boot_id`, read once (empty when unreadable).
pub fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// The working directory of process `pid` (`/proc/<pid>/cwd`), when it can be read and is UTF-8.
pub fn cwd(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/cwd"))
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
}
