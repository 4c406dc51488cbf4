//! Which memory the pressure rules watch, and reading it cheaply.
//!
//! In this order: the cgroup `CCS_ENGINE_MEM_CGROUP` names, when readable; else the memory cgroup
//! of the tmux server (that is where the chats live, whether the reaper runs beside them or in a
//! sidecar); else the reaper's own cgroup; else `/proc/meminfo` ([`resolve`]). cgroup v2
//! (`memory.current`, `memory.max`) and v1 (`memory.usage_in_bytes`, `memory.limit_in_bytes`) are
//! both read. A read is two or three small files, cheap enough for the watcher that runs between
//! sweeps.
//!
//! The figure is the **working set**, as kubelet and `docker stats` count it: the usage minus the
//! inactive page cache (v2 `memory.current` - `inactive_file` of `memory.stat`, v1
//! `memory.usage_in_bytes` - `total_inactive_file`). The usage counts clean page cache that the
//! kernel drops before it runs short: a chat that wrote a big file would otherwise look like
//! memory pressure, and idle chats would be reaped for memory that was never short.

use std::path::{Path, PathBuf};

use crate::core::policy::HostMemory;

/// Where the memory figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemorySource {
    V2(PathBuf),
    V1(PathBuf),
    Meminfo,
}

/// The memory watched, and why that one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub source: MemorySource,
    pub why: String,
}

impl std::fmt::Display for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            MemorySource::V2(d) => write!(f, "cgroup v2 {} ({})", d.display(), self.why),
            MemorySource::V1(d) => write!(f, "cgroup v1 {} ({})", d.display(), self.why),
            MemorySource::Meminfo => write!(f, "/proc/meminfo ({})", self.why),
        }
    }
}

/// Where the cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The value of `key` in the text of a `memory.stat` file (`<key> <value>` lines).
pub fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// The key of `memory.stat` that holds the inactive page cache: v1's `total_` one counts the
/// cgroups below too, as `memory.usage_in_bytes` does.
fn inactive_file_key(s: &MemorySource) -> &'static str {
    match s {
        MemorySource::V1(_) => "total_inactive_file",
        _ => "inactive_file",
    }
}

/// The working set: the usage minus the inactive page cache (never below 0), or the usage
/// itself when `memory.stat` could not be read or lacks the key.
pub fn working_set(usage: u64, inactive_file: Option<u64>) -> u64 {
    usage.saturating_sub(inactive_file.unwrap_or(0))
}

/// A directory as a memory cgroup: v2 if it has `memory.current`, v1 if `memory.usage_in_bytes`.
pub fn cgroup_dir(dir: &Path) -> Option<MemorySource> {
    if dir.join("memory.current").is_file() {
        Some(MemorySource::V2(dir.to_path_buf()))
    } else if dir.join("memory.usage_in_bytes").is_file() {
        Some(MemorySource::V1(dir.to_path_buf()))
    } else {
        None
    }
}

/// A cgroup file system mounted here: its root as this process's cgroup namespace sees it (`/`
/// for a mount made inside the namespace, `/../<name>` for another namespace's, from
/// `/proc/<pid>/mountinfo`), where it is, and which version (v1 only with the memory controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub root: String,
    pub point: PathBuf,
    pub v2: bool,
}

/// A mountinfo field: `\040` and the like are octal escapes.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The memory cgroup mounts in the text of a `/proc/<pid>/mountinfo` file (pure), their mount
/// points under `prefix` (`/proc/<pid>/root` for another process's mounts).
pub fn cgroup_mounts(mountinfo: &str, prefix: &Path) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let mut h = head.split(' ');
            let (root, point) = (h.nth(3)?, h.next()?);
            let mut t = tail.split(' ');
            let (fstype, _source, opts) = (t.next()?, t.next()?, t.next().unwrap_or(""));
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" if opts.split(',').any(|o| o == "memory") => false,
                _ => return None,
            };
            let point = unescape_mountinfo(point);
            Some(CgroupMount {
                root: unescape_mountinfo(root),
                point: prefix.join(point.trim_start_matches('/')),
                v2,
            })
        })
        .collect()
}

/// The mounts assumed when there is no mountinfo to read: v2 at `/sys/fs/cgroup`, v1's memory
/// at `/sys/fs/cgroup/memory`, both showing the namespace's root.
fn default_mounts() -> Vec<CgroupMount> {
    [
        (CGROUP_ROOT.to_string(), true),
        (format!("{CGROUP_ROOT}/memory"), false),
    ]
    .into_iter()
    .map(|(p, v2)| CgroupMount {
        root: "/".into(),
        point: PathBuf::from(p),
        v2,
    })
    .collect()
}

/// Where `path` (a cgroup as a `/proc/<pid>/cgroup` line names it, relative to the reader's
/// cgroup namespace: `/../<name>` for a cgroup outside it) is under a mount showing `root`: the
/// rest of the path when it starts with the root's components and never climbs above it.
fn under_root(root: &str, path: &str) -> Option<PathBuf> {
    let parts = |s: &str| {
        s.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (r, p) = (parts(root), parts(path));
    let rest = p.strip_prefix(r.as_slice())?;
    if rest.iter().any(|c| c == "..") {
        return None;
    }
    Some(rest.iter().collect())
}

/// The memory cgroup named by the lines of a `/proc/<pid>/cgroup` file (pure: `mounts` are the
/// cgroup mounts to look in, in order; `exists` says whether a candidate directory is a memory
/// cgroup). v2's `0::<path>` first, then v1's `<n>:...memory...:<path>`. A path outside the
/// reader's cgroup namespace (`/../<name>`) is found only in a mount whose root shows it.
pub fn cgroup_from_proc(
    text: &str,
    mounts: &[CgroupMount],
    exists: impl Fn(&Path) -> Option<MemorySource>,
) -> Option<MemorySource> {
    let find = |path: &str, v2: bool| {
        mounts.iter().filter(|m| m.v2 == v2).find_map(|m| {
            let rel = under_root(&m.root, path)?;
            let d = if rel.as_os_str().is_empty() {
                m.point.clone()
            } else {
                m.point.join(rel)
            };
            match exists(&d)? {
                s @ MemorySource::V2(_) if v2 => Some(s),
                s @ MemorySource::V1(_) if !v2 => Some(s),
                _ => None,
            }
        })
    };
    let mut v1 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if ctrl.is_empty() {
            if let Some(s) = find(path, true) {
                return Some(s);
            }
        } else if ctrl.split(',').any(|c| c == "memory") {
            v1 = v1.or_else(|| find(path, false));
        }
    }
    v1
}

/// The cgroup paths of a `/proc/<pid>/cgroup` text that lie outside the reader's cgroup
/// namespace (`/../<name>`), for the message that says why they could not be read.
fn outside_namespace(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .filter(|p| p.starts_with("/.."))
        .collect()
}

/// The memory cgroup of a process: looked up in our cgroup mounts, then (for another process)
/// in its own, through `/proc/<pid>/root`. A sidecar in a private cgroup namespace sees the
/// server's cgroup as `/../<studio>`, which only the studio's own `/sys/fs/cgroup` shows. `Err`
/// says why none was found.
pub fn cgroup_of(pid: u32) -> Result<MemorySource, MemoryError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|source| MemoryError::Proc { pid, source })?;
    let ours = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| cgroup_mounts(&t, Path::new("/")))
        .unwrap_or_else(|_| default_mounts());
    let ours = if ours.is_empty() {
        default_mounts()
    } else {
        ours
    };
    if let Some(s) = cgroup_from_proc(&text, &ours, cgroup_dir) {
        return Ok(s);
    }
    // Only then the other process's mounts (a sidecar's case): one more small file.
    if pid != std::process::id() {
        if let Ok(t) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) {
            let theirs = cgroup_mounts(&t, Path::new(&format!("/proc/{pid}/root")));
            if let Some(s) = cgroup_from_proc(&text, &theirs, cgroup_dir) {
                return Ok(s);
            }
        }
    }
    let outside = outside_namespace(&text);
    Err(if outside.is_empty() {
        MemoryError::NoCgroup { pid }
    } else {
        MemoryError::Outside {
            pid,
            cgroups: outside.join(", "),
        }
    })
}

/// Why no memory cgroup of a process was found ([`cgroup_of`]), or why the one found cannot be
/// read.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("/proc/{pid}/cgroup: {source}")]
    Proc { pid: u32, source: std::io::Error },
    #[error("no memory cgroup of pid {pid} under the cgroup mounts")]
    NoCgroup { pid: u32 },
    #[error("pid {pid}'s cgroup {cgroups} is outside this cgroup namespace and no cgroup mount here or in /proc/{pid}/root shows it: share the host's cgroup namespace (compose `cgroup: host`, `docker run --cgroupns=host`), or set CCS_ENGINE_MEM_CGROUP")]
    Outside { pid: u32, cgroups: String },
    #[error("{0:?} cannot be read")]
    Unreadable(MemorySource),
}

/// Decide what to watch: `configured` (`CCS_ENGINE_MEM_CGROUP`), else the tmux server's cgroup,
/// else ours, else `/proc/meminfo`. A source that cannot be read now is passed over.
pub fn resolve(configured: Option<&Path>, server_pid: Option<u32>) -> Watched {
    let readable = |s: &MemorySource| read(s).is_some();
    if let Some(d) = configured {
        match cgroup_dir(d) {
            Some(s) if readable(&s) => {
                return Watched {
                    source: s,
                    why: "CCS_ENGINE_MEM_CGROUP".into(),
                }
            }
            _ => {
                tracing::warn!(dir = %d.display(), "CCS_ENGINE_MEM_CGROUP cannot be read now (gone?): falling back")
            }
        }
    }
    let server = server_pid.map(|p| {
        cgroup_of(p).and_then(|s| match readable(&s) {
            true => Ok(s),
            false => Err(MemoryError::Unreadable(s)),
        })
    });
    let why_not = match server {
        Some(Ok(s)) => {
            return Watched {
                source: s,
                why: "the tmux server's cgroup".into(),
            }
        }
        Some(Err(e)) => format!("the tmux server's could not be read ({e})"),
        None => "no tmux server".into(),
    };
    if let Ok(s) = cgroup_of(std::process::id()) {
        if readable(&s) {
            return Watched {
                source: s,
                why: format!("the reaper's own cgroup: {why_not}"),
            };
        }
    }
    Watched {
        source: MemorySource::Meminfo,
        why: format!("no memory cgroup could be read: {why_not}"),
    }
}

/// The warning when `CCS_ENGINE_MEM_HIGH` is a percentage and the memory watched (`w`, read as
/// `host`) shows no limit: the memory rule can never fire. `None` otherwise (a size, a limit,
/// or memory that could not be read).
pub fn percent_without_limit(
    mem_high: Option<crate::core::policy::MemThreshold>,
    w: &Watched,
    host: Option<HostMemory>,
) -> Option<String> {
    let crate::core::policy::MemThreshold::Percent(pc) = mem_high? else {
        return None;
    };
    if host?.limit_bytes.is_some() {
        return None;
    }
    Some(format!(
        "CCS_ENGINE_MEM_HIGH={pc}% is a share of the memory limit, and {w} has none: the memory rule can never fire. Give a size (CCS_ENGINE_MEM_HIGH=10G), or point CCS_ENGINE_MEM_CGROUP at the cgroup that has the limit"
    ))
}

/// The inactive page cache of a cgroup, from its `memory.stat`.
fn inactive_file(s: &MemorySource, d: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(d.join("memory.stat")).ok()?;
    stat_value(&text, inactive_file_key(s))
}

/// Read the memory in use (the working set: see the module's doc) and its limit. `None` when the
/// source cannot be read (a cgroup that vanished, say).
pub fn read(s: &MemorySource) -> Option<HostMemory> {
    match s {
        MemorySource::V2(d) => {
            let usage = read_u64(&d.join("memory.current"))?;
            let used = working_set(usage, inactive_file(s, d));
            // "max" = no limit.
            let limit = read_u64(&d.join("memory.max"));
            Some(HostMemory {
                used_bytes: used,
                limit_bytes: limit,
            })
        }
        MemorySource::V1(d) => {
            let usage = read_u64(&d.join("memory.usage_in_bytes"))?;
            let used = working_set(usage, inactive_file(s, d));
            // v1 says "no limit" with a huge number.
            let limit = read_u64(&d.join("memory.limit_in_bytes")).filter(|&l| l < (1 << 60));
            Some(HostMemory {
                used_bytes: used,
                limit_bytes: limit,
            })
        }
        // MemAvailable already leaves out what the kernel can reclaim.
        MemorySource::Meminfo => {
            let mi = <procfs::Meminfo as procfs::Current>::current().ok()?;
            Some(HostMemory {
                used_bytes: mi
                    .mem_total
                    .saturating_sub(mi.mem_available.unwrap_or(mi.mem_free)),
                limit_bytes: Some(mi.mem_total),
            })
        }
    }
}

/// The files that hold the usage and the page cache (none for `/proc/meminfo`).
fn used_files(s: &MemorySource) -> Option<(PathBuf, PathBuf)> {
    match s {
        MemorySource::V2(d) => Some((d.join("memory.current"), d.join("memory.stat"))),
        MemorySource::V1(d) => Some((d.join("memory.usage_in_bytes"), d.join("memory.stat"))),
        MemorySource::Meminfo => None,
    }
}

/// One look of the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    /// What the kernel charges (`memory.current`, `memory.usage_in_bytes`): what v1's
    /// notification is about.
    pub usage: u64,
    /// The usage less the inactive page cache: what the threshold is about.
    pub working_set: u64,
}

/// The whole of a small file, read from its start with `pread`.
fn pread_all(f: &std::fs::File, buf: &mut Vec<u8>) -> Option<()> {
    use std::os::unix::fs::FileExt;
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        match f.read_at(&mut chunk, buf.len() as u64) {
            Ok(0) => return (!buf.is_empty()).then_some(()),
            // A short read is the end (a cgroup file is generated whole at offset 0): one read
            // a poll, not two.
            Ok(n) if n < chunk.len() => {
                buf.extend_from_slice(&chunk[..n]);
                return Some(());
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return None,
        }
        // memory.stat is a few KiB: anything far bigger is not it.
        if buf.len() > 1 << 20 {
            return None;
        }
    }
}

/// The memory in use, for the watcher: the usage and `memory.stat` are kept open and read again
/// from their start each time (`pread`), reopened when that fails (a cgroup that went and came
/// back). Without a readable `memory.stat` the working set is the usage, as [`read`] takes it.
#[derive(Default)]
pub struct UsedReader {
    open: Option<(MemorySource, std::fs::File, Option<std::fs::File>)>,
    buf: Vec<u8>,
}

impl UsedReader {
    pub fn read(&mut self, s: &MemorySource) -> Option<Used> {
        let Some((usage_path, stat_path)) = used_files(s) else {
            return read(s).map(|h| Used {
                usage: h.used_bytes,
                working_set: h.used_bytes,
            });
        };
        if self.open.as_ref().is_none_or(|(src, _, _)| src != s) {
            self.open = std::fs::File::open(&usage_path)
                .ok()
                .map(|u| (s.clone(), u, std::fs::File::open(&stat_path).ok()));
        }
        let (_, u, st) = self.open.as_ref()?;
        let usage = pread_all(u, &mut self.buf)
            .and_then(|()| std::str::from_utf8(&self.buf).ok()?.trim().parse().ok());
        let Some(usage) = usage else {
            self.open = None;
            return None;
        };
        let inactive = st.as_ref().and_then(|st| {
            pread_all(st, &mut self.buf)?;
            stat_value(std::str::from_utf8(&self.buf).ok()?, inactive_file_key(s))
        });
        if inactive.is_none() {
            // The usage this once (never a guess below it); both files opened afresh next time.
            self.open = None;
        }
        Some(Used {
            usage,
            working_set: working_set(usage, inactive),
        })
    }
}

/// A kernel notification, on cgroup v1, when the usage crosses `bytes` (either way). The usage is
/// a superset of the working set the threshold is about: the watcher wakes on it, then decides
/// on the working set, and polls while the usage stays above (no crossing would be notified):
/// an eventfd registered through `cgroup.event_control`, readable at each crossing. The watcher
/// then sleeps instead of polling. `None` where the source offers none (v2, `/proc/meminfo`).
pub struct Threshold {
    pub fd: std::os::fd::OwnedFd,
    /// Kept open while the notification is registered.
    _usage: std::fs::File,
}

pub fn threshold(s: &MemorySource, bytes: u64) -> Option<Threshold> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let MemorySource::V1(d) = s else { return None };
    let fd = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .ok()?;
    let usage = std::fs::File::open(d.join("memory.usage_in_bytes")).ok()?;
    let mut ctl = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("cgroup.event_control"))
        .ok()?;
    ctl.write_all(format!("{} {} {bytes}", fd.as_raw_fd(), usage.as_raw_fd()).as_bytes())
        .ok()?;
    Some(Threshold { fd, _usage: usage })
}

/// The `some avg10` of a PSI file's text (`some avg10=1.23 avg60=...`).
pub fn psi_some_avg10(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// Memory pressure stall (`some avg10`, %) of the watched cgroup (v2 `memory.pressure`), else
/// of the host (`/proc/pressure/memory`).
pub fn pressure(s: &MemorySource) -> Option<f64> {
    let cg = match s {
        MemorySource::V2(d) => std::fs::read_to_string(d.join("memory.pressure")).ok(),
        _ => None,
    };
    let text = cg.or_else(|| std::fs::read_to_string("/proc/pressure/memory").ok())?;
    psi_some_avg10(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_cgroup_of_a_process() {
        let v1 = |d: &Path| Some(MemorySource::V1(d.to_path_buf()));
        let v2 = |d: &Path| Some(MemorySource::V2(d.to_path_buf()));
        let none = |_: &Path| None;
        let p = |s: &str| PathBuf::from(s);
        let m = default_mounts();
        assert_eq!(
            cgroup_from_proc("4:memory:/docker/abc\n3:cpu:/x\n", &m, v1),
            Some(MemorySource::V1(p("/sys/fs/cgroup/memory/docker/abc")))
        );
        assert_eq!(
            cgroup_from_proc("5:cpuacct,memory:/\n", &m, v1),
            Some(MemorySource::V1(p("/sys/fs/cgroup/memory")))
        );
        assert_eq!(
            cgroup_from_proc("0::/system.slice/studio.service\n", &m, v2),
            Some(MemorySource::V2(p(
                "/sys/fs/cgroup/system.slice/studio.service"
            )))
        );
        assert_eq!(cgroup_from_proc("0::/x\n4:memory:/y\n", &m, none), None);
        assert_eq!(cgroup_from_proc("garbage\n\n", &m, v1), None);
        // Outside our cgroup namespace: never read as a path above our own mount.
        assert_eq!(cgroup_from_proc("0::/../studio\n", &m, v2), None);
        assert_eq!(cgroup_from_proc("4:memory:/../studio\n", &m, v1), None);
    }

    /// A sidecar in a private cgroup namespace: the server's cgroup reads `/../<studio>`, found
    /// through the studio's own mount (its root shows as `/../<studio>` too), or through a mount
    /// of the host's hierarchy.
    #[test]
    fn a_cgroup_outside_our_namespace_is_found_through_a_mount_that_shows_it() {
        let v2 = |d: &Path| Some(MemorySource::V2(d.to_path_buf()));
        let v1 = |d: &Path| Some(MemorySource::V1(d.to_path_buf()));
        let mount = |root: &str, point: &str, v2: bool| CgroupMount {
            root: root.into(),
            point: PathBuf::from(point),
            v2,
        };
        let ours = mount("/", "/sys/fs/cgroup", true);
        let theirs = mount("/../studio", "/proc/7/root/sys/fs/cgroup", true);
        let table: &[(&str, Vec<CgroupMount>, Option<&str>)] = &[
            (
                "0::/../studio\n",
                vec![ours.clone(), theirs.clone()],
                Some("/proc/7/root/sys/fs/cgroup"),
            ),
            (
                "0::/../studio/sub\n",
                vec![ours.clone(), theirs.clone()],
                Some("/proc/7/root/sys/fs/cgroup/sub"),
            ),
            ("0::/../other\n", vec![ours.clone(), theirs.clone()], None),
            ("0::/../studio\n", vec![ours.clone()], None),
            (
                "0::/../../studio\n",
                vec![ours.clone(), theirs.clone()],
                None,
            ),
            (
                "0::/mine\n",
                vec![ours.clone(), theirs.clone()],
                Some("/sys/fs/cgroup/mine"),
            ),
            // The host's hierarchy mounted read-only at /host-cgroup, its root one level up.
            (
                "0::/../studio\n",
                vec![ours.clone(), mount("/..", "/host-cgroup", true)],
                Some("/host-cgroup/studio"),
            ),
            // A v1 mount answers no v2 line.
            (
                "0::/../studio\n",
                vec![mount("/../studio", "/x", false)],
                None,
            ),
        ];
        for (text, mounts, want) in table {
            let want = want.map(|w| MemorySource::V2(PathBuf::from(w)));
            assert_eq!(
                cgroup_from_proc(text, mounts, v2),
                want,
                "{text:?} in {mounts:?}"
            );
        }
        assert_eq!(
            cgroup_from_proc(
                "4:memory:/../studio\n",
                &[mount("/../studio", "/m", false)],
                v1
            ),
            Some(MemorySource::V1(PathBuf::from("/m")))
        );
        assert_eq!(outside_namespace("0::/../a\n4:memory:/b\n"), vec!["/../a"]);
    }

    #[test]
    fn cgroup_mounts_from_mountinfo() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    36 31 0:32 /../.. /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    37 31 0:33 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                    40 23 0:35 /../studio /sys/fs/cgroup\\040x rw shared:9 - cgroup2 cgroup2 rw,nsdelegate\n\
                    bad line\n";
        let got = cgroup_mounts(text, Path::new("/proc/9/root"));
        assert_eq!(
            got,
            vec![
                CgroupMount {
                    root: "/../..".into(),
                    point: PathBuf::from("/proc/9/root/sys/fs/cgroup/memory"),
                    v2: false
                },
                CgroupMount {
                    root: "/../studio".into(),
                    point: PathBuf::from("/proc/9/root/sys/fs/cgroup x"),
                    v2: true
                },
            ]
        );
        assert_eq!(
            cgroup_mounts(text, Path::new("/"))[0].point,
            PathBuf::from("/sys/fs/cgroup/memory")
        );
    }

    #[test]
    fn psi_lines() {
        let t = "some avg10=12.50 avg60=3.00 avg300=1.00 total=1\nfull avg10=1.00 avg60=0 avg300=0 total=0\n";
        assert_eq!(psi_some_avg10(t), Some(12.5));
        assert_eq!(psi_some_avg10("full avg10=1.00\n"), None);
        assert_eq!(psi_some_avg10("some avg10=x\n"), None);
    }

    #[test]
    fn stat_values_and_the_working_set() {
        let v1 = "cache 430080000\nrss 0\ninactive_file 1\ntotal_inactive_file 428924928\n";
        let v2 = "anon 100\nfile 4000\nactive_file 1000\ninactive_file 3000\n";
        let table: &[(&str, &str, Option<u64>)] = &[
            (v1, "total_inactive_file", Some(428_924_928)),
            (v1, "inactive_file", Some(1)),
            (v2, "inactive_file", Some(3000)),
            (v2, "file", Some(4000)),
            (v2, "active", None),
            (v2, "total_inactive_file", None),
            ("inactive_file x\n", "inactive_file", None),
            ("", "inactive_file", None),
        ];
        for (text, key, want) in table {
            assert_eq!(stat_value(text, key), *want, "{key} in {text:?}");
        }
        assert_eq!(working_set(5000, Some(3000)), 2000);
        assert_eq!(working_set(5000, None), 5000);
        // The two files are read one after the other: never below zero.
        assert_eq!(working_set(1000, Some(3000)), 0);
        assert_eq!(
            inactive_file_key(&MemorySource::V1(PathBuf::new())),
            "total_inactive_file"
        );
        assert_eq!(
            inactive_file_key(&MemorySource::V2(PathBuf::new())),
            "inactive_file"
        );
    }

    #[test]
    fn a_percentage_without_a_limit_is_a_rule_that_cannot_fire() {
        use crate::core::policy::MemThreshold;
        let w = Watched {
            source: MemorySource::V1(PathBuf::from("/sys/fs/cgroup/memory/x")),
            why: "CCS_ENGINE_MEM_CGROUP".into(),
        };
        let host = |limit| {
            Some(HostMemory {
                used_bytes: 1,
                limit_bytes: limit,
            })
        };
        let pc = Some(MemThreshold::Percent(85.0));
        let msg = percent_without_limit(pc, &w, host(None)).unwrap();
        assert!(msg.starts_with("CCS_ENGINE_MEM_HIGH=85% is a share of the memory limit, and cgroup v1 /sys/fs/cgroup/memory/x (CCS_ENGINE_MEM_CGROUP) has none: the memory rule can never fire"), "{msg}");
        assert_eq!(percent_without_limit(pc, &w, host(Some(1 << 30))), None);
        assert_eq!(percent_without_limit(pc, &w, None), None);
        let size = Some(MemThreshold::Bytes(1 << 30));
        assert_eq!(percent_without_limit(size, &w, host(None)), None);
        assert_eq!(percent_without_limit(None, &w, host(None)), None);
    }

    /// The watcher's reader and `read` agree on the working set of a cgroup directory, and follow
    /// its files as they change.
    #[test]
    fn the_watchers_reader_gives_the_working_set() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let write = |current: u64, inactive: u64| {
            std::fs::write(d.join("memory.current"), format!("{current}\n")).unwrap();
            std::fs::write(
                d.join("memory.stat"),
                format!("anon 5\nfile 9\nactive_file 2\ninactive_file {inactive}\n"),
            )
            .unwrap();
        };
        write(10_000, 4_000);
        std::fs::write(d.join("memory.max"), "max\n").unwrap();
        let src = cgroup_dir(d).unwrap();
        assert_eq!(src, MemorySource::V2(d.to_path_buf()));
        let mut r = UsedReader::default();
        assert_eq!(
            r.read(&src),
            Some(Used {
                usage: 10_000,
                working_set: 6_000
            })
        );
        let h = read(&src).unwrap();
        assert_eq!((h.used_bytes, h.limit_bytes), (6_000, None));
        // Rewritten in place: read again from the start.
        write(20_000, 1_000);
        assert_eq!(r.read(&src).map(|u| u.working_set), Some(19_000));
        // No memory.stat: the usage, not a guess, from both.
        std::fs::remove_file(d.join("memory.stat")).unwrap();
        let mut fresh = UsedReader::default();
        assert_eq!(fresh.read(&src).map(|u| u.working_set), Some(20_000));
        assert_eq!(read(&src).map(|h| h.used_bytes), Some(20_000));
        // It comes back: the next read opens it again.
        write(30_000, 10_000);
        assert_eq!(fresh.read(&src).map(|u| u.working_set), Some(20_000));
        // No usage file: nothing.
        std::fs::remove_file(d.join("memory.current")).unwrap();
        assert_eq!(UsedReader::default().read(&src), None);
    }

    #[test]
    fn meminfo_is_always_there() {
        let m = read(&MemorySource::Meminfo).unwrap();
        assert!(m.used_bytes > 0 && m.limit_bytes.unwrap() >= m.used_bytes);
        assert!(read(&MemorySource::V1(PathBuf::from("/nonexistent"))).is_none());
    }
}
