//! The clocks: this process's reading of the time, in ms since the epoch (what marks and records
//! say, for people), and its own monotonic clock (what every wait that matters is measured on).

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// This process's CLOCK_BOOTTIME in ms: monotonic, counting suspend, the same for every process
/// of one boot and one time namespace (see [`domain`]). Never compared with a time another
/// process wrote.
pub fn boot_ms() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
}

/// The domain [`boot_ms`] counts in: the boot (`/proc/sys/kernel/random/boot_id`) and the time
/// namespace (its inode); `None` when either cannot be read. Two readings compare only within
/// one domain.
pub fn domain() -> Option<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot = boot.trim();
    if boot.is_empty() {
        return None;
    }
    let ns = std::fs::metadata("/proc/self/ns/time").ok()?.ino();
    Some((boot.to_string(), ns))
}
