//! The draft the table's parsers fill in, and the readers of the kinds of values they share
//! (durations, flags, sizes, lists).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::core::policy::Policy;
use crate::core::units::{self, DURATION_HINT};

use super::table::Expected;
use super::LogFormat;

/// The settings as the parsers fill them in, before what depends on several of them (the socket,
/// the state dir, the log filter) is settled by [`super::Config::from_sources`].
#[derive(Debug, Clone)]
pub struct Draft {
    pub policy: Policy,
    pub interval_ms: u64,
    pub grace_ms: u64,
    pub tmux_timeout_ms: u64,
    pub socket_name: Option<String>,
    pub socket_path: Option<PathBuf>,
    pub prefix: String,
    pub activity_files: Vec<PathBuf>,
    pub state_dir: Option<PathBuf>,
    /// `CCS_LOG`, its level names made tracing's.
    pub log: Option<String>,
    pub log_format: LogFormat,
    pub metrics_addr: Option<SocketAddr>,
    pub mem_cgroup: Option<PathBuf>,
    pub hook: Option<PathBuf>,
    pub hook_timeout_ms: u64,
    pub audit_max_bytes: u64,
    pub audit_keep: usize,
    pub tombstone_max_age_ms: u64,
    /// `CCS_CONFIG` (read before the table, by the loader; kept for `config`).
    pub config_file: Option<PathBuf>,
    /// `CCS_REAP_ENV_ALLOW`: more `CCS_*` names that are not settings and draw no warning.
    pub allow: Vec<String>,
    /// Warnings the parsers found (a bare number of milliseconds probably meant as seconds).
    pub notes: Vec<String>,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            policy: Policy::default(),
            interval_ms: 30_000,
            grace_ms: 5_000,
            tmux_timeout_ms: 10_000,
            socket_name: None,
            socket_path: None,
            prefix: "ccs-".into(),
            activity_files: Vec::new(),
            state_dir: None,
            log: None,
            log_format: LogFormat::Text,
            metrics_addr: None,
            mem_cgroup: None,
            hook: None,
            hook_timeout_ms: 5_000,
            audit_max_bytes: crate::adapters::state::DEFAULT_AUDIT_MAX_BYTES,
            audit_keep: crate::adapters::state::DEFAULT_AUDIT_KEEP,
            tombstone_max_age_ms: 30 * 24 * 3_600_000,
            config_file: None,
            allow: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// A duration (`CCS_*_MS`, see [`units::parse_duration`]) of at least `min` ms.
pub fn duration(s: &str, min: u64) -> Result<units::Millis, Expected> {
    match units::parse_duration(s) {
        Some(d) if d.ms > crate::core::policy::MAX_MS => {
            Err(format!("{DURATION_HINT}; at most 100 years"))
        }
        Some(d) if d.ms >= min => Ok(d),
        Some(_) => Err(format!("{DURATION_HINT}; at least {min} ms")),
        None => Err(DURATION_HINT.into()),
    }
}

pub(super) fn ms(s: &str, min: u64) -> Result<u64, Expected> {
    duration(s, min).map(|d| d.ms)
}

/// A duration where `0` means unset; a bare number under a minute is said to be milliseconds.
pub(super) fn ms_or_off(d: &mut Draft, name: &str, s: &str) -> Result<Option<u64>, Expected> {
    let m = duration(s, 0)?;
    if m.bare && (1..60_000).contains(&m.ms) {
        d.notes.push(format!(
            "{name}={} is {} ms (a bare number is milliseconds): write {}s if you meant seconds",
            s.trim(),
            m.ms,
            m.ms
        ));
    }
    Ok(Some(m.ms).filter(|&n| n > 0))
}

pub(super) fn flag(s: &str) -> Result<bool, Expected> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("1 or 0 (also true/false, yes/no, on/off)".into()),
    }
}

pub(super) fn size_err(e: units::SizeError, percent_allowed: bool, expected: &str) -> Expected {
    match e {
        units::SizeError::Garbage => expected.into(),
        units::SizeError::Ambiguous(n) => units::size_hint(n, percent_allowed),
    }
}

pub(super) fn whole<T: std::str::FromStr>(s: &str, expected: &str) -> Result<T, Expected> {
    s.trim().parse::<T>().map_err(|_| expected.into())
}

pub(super) fn mem_cgroup(d: &mut Draft, s: &str) -> Result<(), Expected> {
    let dir = PathBuf::from(s.trim());
    match crate::adapters::memory::cgroup_dir(&dir) {
        Some(src) if crate::adapters::memory::read(&src).is_some() => {
            d.mem_cgroup = Some(dir);
            Ok(())
        }
        _ => Err(
            "a readable memory cgroup directory (with memory.current, or memory.usage_in_bytes)"
                .into(),
        ),
    }
}

pub(super) fn hook(d: &mut Draft, s: &str) -> Result<(), Expected> {
    use std::os::unix::fs::PermissionsExt;
    let p = PathBuf::from(s.trim());
    let ok = p.is_absolute()
        && std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if !ok {
        return Err(
            "the absolute path of an executable file (it is run directly, never through a shell)"
                .into(),
        );
    }
    d.hook = Some(p);
    Ok(())
}

pub(super) fn mem_psi(d: &mut Draft, s: &str) -> Result<(), Expected> {
    let p = s
        .trim()
        .trim_end_matches('%')
        .parse::<f64>()
        .ok()
        .filter(|p| *p > 0.0 && *p <= 100.0)
        .ok_or("a share of time stalled on memory (PSI some avg10), above 0 and at most 100, such as 10")?;
    d.policy.mem_psi = Some(p);
    Ok(())
}

pub(super) fn audit_keep(d: &mut Draft, s: &str) -> Result<(), Expected> {
    let max = crate::adapters::state::MAX_AUDIT_KEEP;
    d.audit_keep = s
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("a whole number of rotated files, from 1 to {max}"))?;
    Ok(())
}

pub(super) fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

pub(super) fn env_allow(d: &mut Draft, s: &str) -> Result<(), Expected> {
    let names = list(s);
    let ok = |n: &String| {
        n.starts_with("CCS_")
            && n.trim_end_matches('*')
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    if let Some(bad) = names.iter().find(|n| !ok(n)) {
        return Err(format!(
            "comma-separated CCS_* variable names (a trailing * for a prefix), such as CCS_STUDIO_*; {bad:?} is not one"
        ));
    }
    d.allow = names;
    Ok(())
}
