//! Configuration from the settings file and the environment, read and validated once at start-up.
//!
//! One table ([`VARS`], in `table.rs`) lists every setting with its group, default, help and
//! parser; the loader (here) gathers the values from the settings file (`file.rs`) and the
//! environment, which wins, and runs each value through its row's parser, so that an error names
//! the *full* variable, the bad value and, for a file, its FILE:LINE. An empty value counts as
//! unset, as the contract says.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::policy::{Lease, Policy};

pub mod file;
mod load;
pub mod log;
mod parse;
mod show;

mod table;

pub use crate::adapters::tmux::Socket;
pub use load::{default_state_dir, known_vars, unknown_var_note, SettingsFile};
pub use parse::Draft;
pub use table::{setting, Setting, VARS};

/// The type of a row of [`VARS`], by its older name.
pub type VarDoc = Setting;

/// A configuration error: which variable, what value, what was expected, and where it was
/// written when that was the settings file (`FILE:LINE`, or the file alone when the file itself
/// is refused: then `var` is empty).
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub var: String,
    pub value: String,
    pub expected: String,
    pub at: Option<String>,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Some(at) if self.var.is_empty() => write!(f, "settings file {at}: {}", self.expected),
            Some(at) => write!(
                f,
                "{at}: invalid {}={:?}: {}",
                self.var, self.value, self.expected
            ),
            None => write!(
                f,
                "invalid {}={:?}: {}",
                self.var, self.value, self.expected
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub policy: Policy,
    pub interval: Duration,
    pub grace: Duration,
    /// The tmux server every command talks to: `CCS_TMUX_SOCKET_PATH`, else `CCS_TMUX_SOCKET`,
    /// else (run inside tmux) `TMUX`'s server, else `-L ccstudio`.
    pub socket: Socket,
    /// Whether `socket` is `TMUX`'s server (inside tmux, no socket configured).
    pub socket_from_tmux: bool,
    pub prefix: String,
    pub activity_files: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub log_filter: String,
    pub log_format: LogFormat,
    /// How long one tmux call may take before the sweep gives up on it.
    pub tmux_timeout: Duration,
    pub metrics_addr: Option<SocketAddr>,
    /// `CCS_ENGINE_MEM_CGROUP`: the memory cgroup to watch instead of the tmux server's.
    pub mem_cgroup: Option<PathBuf>,
    /// `CCS_REAP_HOOK`: a program run (never through a shell) before and after each reap.
    pub hook: Option<PathBuf>,
    pub hook_timeout: Duration,
    /// `CCS_AUDIT_MAX_BYTES`: `reaped.jsonl` is rotated before it would pass this size.
    pub audit_max_bytes: u64,
    /// `CCS_AUDIT_KEEP`: how many rotated audit files are kept (`reaped.jsonl.1` ...).
    pub audit_keep: usize,
    /// `CCS_REAP_TOMBSTONE_MAX_AGE`: a tombstone older than this is removed (aged-out).
    pub tombstone_max_age: Duration,
    /// What reading the environment found worth a warning: unknown `CCS_*` variables, a bare
    /// number of milliseconds that is probably meant as seconds. See [`Config::warnings`].
    pub notes: Vec<String>,
    /// The settings file read, if any.
    pub file: Option<PathBuf>,
    /// Every setting of [`VARS`], in its order, with its value and where it came from.
    pub sources: Vec<Effective>,
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    Default,
    File { path: PathBuf, line: usize },
    Environment,
}

impl std::fmt::Display for ValueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueSource::Default => write!(f, "default"),
            ValueSource::File { path, line } => write!(f, "{}:{line}", path.display()),
            ValueSource::Environment => write!(f, "environment"),
        }
    }
}

/// One setting as it is in effect: its variable, its value as written (`None`: unset, so the
/// default), and where that came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub name: &'static str,
    pub value: Option<String>,
    pub source: ValueSource,
}

/// What turns reaping on (`Policy::enabled`), as every message that says it is off names it.
pub const ENABLED_BY: &str = "CCS_ENGINE_IDLE_KILL_MS, CCS_ENGINE_MEM_HIGH, CCS_ENGINE_MEM_PSI, \
     CCS_ENGINE_SESSION_MEM_MAX or CCS_ENGINE_MAX_IDLE is set, or CCS_ENGINE_REAP_STUCK=1 with \
     CCS_ENGINE_STUCK_WALL_MS or CCS_ENGINE_STUCK_IDLE_MS";

/// The settings as text, grouped, each with its default: the end of `--help`.
pub fn vars_help() -> String {
    let mut s = String::from(
        "Configuration: the environment, over the settings file (--config FILE, else CCS_CONFIG, else \
         $XDG_CONFIG_HOME/ccs-reap/env or ~/.config/ccs-reap/env, else /etc/ccs-reap/$USER.env, else \
         /etc/ccs-reap/env; KEY=value \
         lines as systemd reads them). An empty value counts as unset; durations \
         *_MS take 500ms, 90s, 30m, 1h, 2d or bare milliseconds. Reaping is off until ",
    );
    s.push_str(ENABLED_BY);
    s.push_str(".\n");
    let mut group = "";
    for v in VARS {
        if v.group != group {
            group = v.group;
            s.push_str(&format!("\n{group}:\n"));
        }
        s.push_str(&format!(
            "  {} [default: {}]\n      {}\n",
            v.name, v.default, v.help
        ));
    }
    s
}

/// The leeway a reap needs between its mark and its fence: the marks, the re-check's listing, the
/// scan of the process table and the journals of a batch. A lease leaving less can never pass.
pub const MIN_FENCE_SPARE_MS: i64 = 500;

impl Config {
    fn hook_ms(&self) -> i64 {
        if self.hook.is_some() {
            self.hook_timeout.as_millis() as i64
        } else {
            0
        }
    }

    /// The lease of this reaper's marks, from the grace, the tmux timeout and the hook's timeout.
    pub fn lease(&self) -> Lease {
        Lease::of(
            self.grace.as_millis() as i64,
            self.tmux_timeout.as_millis() as i64,
            self.hook_ms(),
        )
    }

    /// A lease that leaves a reap less than [`MIN_FENCE_SPARE_MS`] between its mark and its
    /// fence can never pass: every reap would be fenced off as "mark too old". Refused, with the
    /// arithmetic.
    fn check_lease(&self) -> Result<(), ConfigError> {
        let (g, t, h) = (
            self.grace.as_millis() as i64,
            self.tmux_timeout.as_millis() as i64,
            self.hook_ms(),
        );
        let lease = self.lease();
        let (limit, rest, spare) = (lease.limit_ms, lease.rest_ms, lease.spare_ms());
        if spare >= MIN_FENCE_SPARE_MS {
            return Ok(());
        }
        let hook = if h > 0 {
            format!(" + {h} (CCS_REAP_HOOK_TIMEOUT_MS)")
        } else {
            String::new()
        };
        let min_grace = (MIN_FENCE_SPARE_MS - t - h + 1) / 2;
        let min_tmux = MIN_FENCE_SPARE_MS - 2 * g - h;
        Err(ConfigError {
            var: "CCS_REAP_GRACE_MS".into(),
            value: g.to_string(),
            expected: format!(
                "with CCS_TMUX_TIMEOUT_MS={t} a reap could never pass its fence: its mark is good for 3×{g} + 3×{t}{hook} + 2000 = {limit} ms, \
                 and after the fence it needs {g} + 2×{t} + 2000 = {rest} ms, which leaves {spare} ms from the mark to the fence, \
                 under the {MIN_FENCE_SPARE_MS} ms that marking, re-checking, scanning the processes and writing the journals take: \
                 every reap would be fenced off as \"mark too old\"; set CCS_REAP_GRACE_MS to at least {min_grace} or CCS_TMUX_TIMEOUT_MS to at least {min_tmux}"
            ),
            at: None,
        })
    }

    /// Warnings worth one log line at start-up (settings that are valid but probably wrong).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.notes.clone();
        if let Some(ms) = self.policy.stuck_idle_ms {
            if ms < 180_000 {
                w.push(format!(
                    "CCS_ENGINE_STUCK_IDLE_MS={ms} is below 3 minutes: an automatic context compaction in Claude Code is 100-140 s of silence, so healthy turns may be judged stuck"
                ));
            }
        }
        if self.policy.reap_stuck
            && self.policy.stuck_wall_ms.is_none()
            && self.policy.stuck_idle_ms.is_none()
        {
            w.push("CCS_ENGINE_REAP_STUCK=1 has no effect without CCS_ENGINE_STUCK_WALL_MS or CCS_ENGINE_STUCK_IDLE_MS".into());
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::{MemThreshold, OrphanViewers, SharedSession};
    use std::path::Path;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            Some(PathBuf::from("/st/ccs-reap")),
        )
    }

    /// Each setting is in the table once, with its help and default.
    #[test]
    fn every_setting_read_is_documented_once() {
        let mut documented: Vec<String> = VARS.iter().map(|v| v.name.to_string()).collect();
        let n = documented.len();
        documented.sort();
        documented.dedup();
        assert_eq!(documented.len(), n, "a variable is documented twice");
        let mut read = known_vars();
        read.sort();
        assert_eq!(documented, read);
        assert!(VARS
            .iter()
            .all(|v| !v.help.is_empty() && !v.default.is_empty()));
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.policy.idle_kill_ms, None);
        assert!(!c.policy.enabled());
        assert_eq!(c.interval, Duration::from_millis(30_000));
        assert_eq!(c.grace, Duration::from_millis(5_000));
        assert_eq!(c.socket, Socket::Name("ccstudio".into()));
        assert_eq!(c.prefix, "ccs-");
        assert!(c.activity_files.is_empty());
        assert_eq!(c.state_dir, PathBuf::from("/st/ccs-reap"));
        assert!(!c.policy.reap_without_cid);
        assert_eq!(c.log_filter, "info");
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.policy.min_idle_ms, 60_000);
        assert_eq!(c.policy.orphan_viewers, OrphanViewers::Count);
        assert!(c.policy.reap_exited);
        assert_eq!(c.metrics_addr, None);
        assert_eq!(c.audit_max_bytes, 10 << 20);
        assert_eq!(c.audit_keep, 5);
    }

    /// Each variable: a good value and what it becomes.
    #[test]
    fn good_values() {
        type Check = fn(&Config) -> bool;
        let table: &[(&str, &str, Check)] = &[
            ("CCS_ENGINE_IDLE_KILL_MS", "1800000", |c| {
                c.policy.idle_kill_ms == Some(1_800_000)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "0", |c| {
                c.policy.idle_kill_ms.is_none() && !c.policy.enabled()
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "", |c| {
                c.policy.idle_kill_ms.is_none()
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", " 5000 ", |c| {
                c.policy.idle_kill_ms == Some(5000)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "500ms", |c| {
                c.policy.idle_kill_ms == Some(500)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "90s", |c| {
                c.policy.idle_kill_ms == Some(90_000)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "30m", |c| {
                c.policy.idle_kill_ms == Some(1_800_000)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "1h", |c| {
                c.policy.idle_kill_ms == Some(3_600_000)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "2d", |c| {
                c.policy.idle_kill_ms == Some(172_800_000)
            }),
            ("CCS_ENGINE_IDLE_KILL_MS", "0s", |c| {
                c.policy.idle_kill_ms.is_none()
            }),
            ("CCS_REAP_INTERVAL_MS", "30s", |c| {
                c.interval == Duration::from_secs(30)
            }),
            ("CCS_REAP_GRACE_MS", "5s", |c| {
                c.grace == Duration::from_secs(5)
            }),
            ("CCS_TMUX_TIMEOUT_MS", "10s", |c| {
                c.tmux_timeout == Duration::from_secs(10)
            }),
            ("CCS_REAP_HOOK_TIMEOUT_MS", "2s", |c| {
                c.hook_timeout == Duration::from_secs(2)
            }),
            ("CCS_ENGINE_MIN_IDLE_MS", "1m", |c| {
                c.policy.min_idle_ms == 60_000
            }),
            ("CCS_ENGINE_WARN_MS", "5m", |c| {
                c.policy.warn_ms == Some(300_000)
            }),
            ("CCS_ENGINE_STUCK_WALL_MS", "2h", |c| {
                c.policy.stuck_wall_ms == Some(7_200_000)
            }),
            ("CCS_ENGINE_STUCK_IDLE_MS", "10m", |c| {
                c.policy.stuck_idle_ms == Some(600_000)
            }),
            ("CCS_ENGINE_VIEWER_MAX_MS", "1d", |c| {
                c.policy.viewer_max_ms == Some(86_400_000)
            }),
            ("CCS_ENGINE_MEM_HIGH", "512M", |c| {
                c.policy.mem_high == Some(MemThreshold::Bytes(512 << 20))
            }),
            ("CCS_ENGINE_MEM_HIGH", "2G", |c| {
                c.policy.mem_high == Some(MemThreshold::Bytes(2 << 30))
            }),
            ("CCS_ENGINE_MEM_HIGH", "1048576", |c| {
                c.policy.mem_high == Some(MemThreshold::Bytes(1 << 20))
            }),
            ("CCS_ENGINE_MEM_HIGH", "1K", |c| {
                c.policy.mem_high == Some(MemThreshold::Bytes(1024))
            }),
            ("RUST_LOG", "ccs_reap=trace", |c| {
                c.log_filter == "ccs_reap=trace"
            }),
            ("CCS_REAP_INTERVAL_MS", "250", |c| {
                c.interval == Duration::from_millis(250)
            }),
            ("CCS_REAP_INTERVAL_MS", "", |c| {
                c.interval == Duration::from_millis(30_000)
            }),
            ("CCS_REAP_GRACE_MS", "0", |c| c.grace == Duration::ZERO),
            ("CCS_TMUX_SOCKET", "other", |c| {
                c.socket == Socket::Name("other".into())
            }),
            ("CCS_TMUX_SOCKET_PATH", "/tmp/x/s", |c| {
                c.socket == Socket::Path("/tmp/x/s".into())
            }),
            ("CCS_SESSION_PREFIX", "chat-", |c| c.prefix == "chat-"),
            ("CCS_ACTIVITY_FILES", "/a.json, /b.json,", |c| {
                c.activity_files == vec![PathBuf::from("/a.json"), PathBuf::from("/b.json")]
            }),
            ("CCS_REAP_STATE_DIR", "/var/lib/r", |c| {
                c.state_dir == Path::new("/var/lib/r")
            }),
            ("CCS_ENGINE_REAP_WITHOUT_CID", "1", |c| {
                c.policy.reap_without_cid
            }),
            ("CCS_ENGINE_REAP_WITHOUT_CID", "off", |c| {
                !c.policy.reap_without_cid
            }),
            ("CCS_LOG", "ccs_reap=debug,warn", |c| {
                c.log_filter == "ccs_reap=debug,warn"
            }),
            ("CCS_LOG_FORMAT", "json", |c| {
                c.log_format == LogFormat::Json
            }),
            ("CCS_TMUX_TIMEOUT_MS", "2000", |c| {
                c.tmux_timeout == Duration::from_millis(2000)
            }),
            ("CCS_ENGINE_MEM_HIGH", "12G", |c| {
                c.policy.mem_high == Some(MemThreshold::Bytes(12 << 30)) && c.policy.enabled()
            }),
            ("CCS_ENGINE_MEM_HIGH", "85%", |c| {
                c.policy.mem_high == Some(MemThreshold::Percent(85.0))
            }),
            ("CCS_ENGINE_SESSION_MEM_MAX", "1500M", |c| {
                c.policy.session_mem_max == Some(1500 << 20) && c.policy.enabled()
            }),
            ("CCS_ENGINE_WARN_MS", "60000", |c| {
                c.policy.warn_ms == Some(60_000)
            }),
            ("CCS_REAP_HOOK", "/bin/true", |c| {
                c.hook.as_deref() == Some(Path::new("/bin/true"))
                    && c.hook_timeout == Duration::from_millis(5000)
            }),
            ("CCS_ENGINE_MEM_PSI", "12.5", |c| {
                c.policy.mem_psi == Some(12.5) && c.policy.enabled()
            }),
            ("CCS_ENGINE_MAX_IDLE", "4", |c| {
                c.policy.max_idle == Some(4) && c.policy.enabled()
            }),
            ("CCS_ENGINE_MIN_IDLE_MS", "0", |c| c.policy.min_idle_ms == 0),
            ("CCS_METRICS_ADDR", "127.0.0.1:9464", |c| {
                c.metrics_addr == Some("127.0.0.1:9464".parse().unwrap())
            }),
            ("CCS_ENGINE_STUCK_WALL_MS", "3600000", |c| {
                c.policy.stuck_wall_ms == Some(3_600_000)
            }),
            ("CCS_ENGINE_STUCK_IDLE_MS", "600000", |c| {
                c.policy.stuck_idle_ms == Some(600_000)
            }),
            ("CCS_ENGINE_REAP_STUCK", "yes", |c| c.policy.reap_stuck),
            ("CCS_ENGINE_ORPHAN_VIEWERS", "ignore", |c| {
                c.policy.orphan_viewers == OrphanViewers::Ignore
            }),
            ("CCS_ENGINE_VIEWER_MAX_MS", "86400000", |c| {
                c.policy.viewer_max_ms == Some(86_400_000)
            }),
            ("CCS_ENGINE_REAP_EXITED", "0", |c| !c.policy.reap_exited),
            ("CCS_ENGINE_SHARED_SESSION", " pane ", |c| {
                c.policy.shared_session == SharedSession::Pane
            }),
            ("CCS_ENGINE_SHARED_SESSION", "keep", |c| {
                c.policy.shared_session == SharedSession::Keep
            }),
            ("CCS_AUDIT_MAX_BYTES", "2000", |c| c.audit_max_bytes == 2000),
            ("CCS_AUDIT_MAX_BYTES", " 1M ", |c| {
                c.audit_max_bytes == 1 << 20
            }),
            ("CCS_AUDIT_MAX_BYTES", "512KiB", |c| {
                c.audit_max_bytes == 512 << 10
            }),
            ("CCS_AUDIT_MAX_BYTES", "", |c| c.audit_max_bytes == 10 << 20),
            ("CCS_AUDIT_KEEP", "1", |c| c.audit_keep == 1),
            ("CCS_AUDIT_KEEP", " 20 ", |c| c.audit_keep == 20),
            ("CCS_AUDIT_KEEP", "1000", |c| c.audit_keep == 1000),
            ("CCS_AUDIT_KEEP", "", |c| c.audit_keep == 5),
        ];
        for (var, val, check) in table {
            let c = cfg(&[(var, val)]).unwrap_or_else(|e| panic!("{var}={val:?}: {e}"));
            assert!(check(&c), "{var}={val:?} gave {c:?}");
        }
    }

    /// Each variable: garbage is an error that names the full variable and the value.
    #[test]
    fn garbage_is_named() {
        let table: &[(&str, &str)] = &[
            ("CCS_ENGINE_IDLE_KILL_MS", "soon"),
            ("CCS_ENGINE_IDLE_KILL_MS", "-5"),
            ("CCS_ENGINE_IDLE_KILL_MS", "1.5"),
            ("CCS_REAP_INTERVAL_MS", "0"),
            ("CCS_REAP_GRACE_MS", "five"),
            ("CCS_TMUX_SOCKET", "a/b"),
            ("CCS_SESSION_PREFIX", "a:b"),
            ("CCS_ENGINE_REAP_WITHOUT_CID", "maybe"),
            ("CCS_LOG", "info,=[x"),
            ("CCS_LOG_FORMAT", "xml"),
            ("CCS_TMUX_TIMEOUT_MS", "10"),
            ("CCS_ENGINE_MEM_HIGH", "lots"),
            ("CCS_ENGINE_MEM_HIGH", "120%"),
            ("CCS_ENGINE_MEM_HIGH", "12X"),
            ("CCS_ENGINE_MAX_IDLE", "-1"),
            ("CCS_ENGINE_MEM_CGROUP", "/nonexistent/cgroup"),
            ("CCS_ENGINE_MEM_CGROUP", "/tmp"),
            ("CCS_ENGINE_MEM_PSI", "0"),
            ("CCS_ENGINE_MEM_PSI", "101"),
            ("CCS_ENGINE_MEM_PSI", "lots"),
            ("CCS_ENGINE_IDLE_KILL_MS", "18446744073709551615"),
            ("CCS_ENGINE_STUCK_WALL_MS", "9223372036854775807"),
            ("CCS_ENGINE_SESSION_MEM_MAX", "50%"),
            ("CCS_ENGINE_SESSION_MEM_MAX", "big"),
            ("CCS_ENGINE_WARN_MS", "soon"),
            ("CCS_REAP_HOOK", "notify-studio"),
            ("CCS_REAP_HOOK", "/nonexistent/hook"),
            ("CCS_REAP_HOOK", "/proc/version"),
            ("CCS_REAP_HOOK_TIMEOUT_MS", "0"),
            ("CCS_ENGINE_MIN_IDLE_MS", "1.5m"),
            ("CCS_ENGINE_IDLE_KILL_MS", "30M"),
            ("CCS_ENGINE_IDLE_KILL_MS", "1h30m"),
            ("CCS_ENGINE_IDLE_KILL_MS", "30 minutes"),
            ("CCS_ENGINE_IDLE_KILL_MS", "101y"),
            ("CCS_ENGINE_IDLE_KILL_MS", "36600d"),
            ("CCS_REAP_INTERVAL_MS", "5ms"),
            ("CCS_ENGINE_MEM_HIGH", "85"),
            ("CCS_ENGINE_MEM_HIGH", "1"),
            ("CCS_ENGINE_MEM_HIGH", "1048575"),
            ("CCS_ENGINE_SESSION_MEM_MAX", "1500"),
            ("RUST_LOG", "info,=[x"),
            ("CCS_METRICS_ADDR", "localhost"),
            ("CCS_ENGINE_STUCK_WALL_MS", "x"),
            ("CCS_ENGINE_STUCK_IDLE_MS", "x"),
            ("CCS_ENGINE_REAP_STUCK", "2"),
            ("CCS_ENGINE_ORPHAN_VIEWERS", "drop"),
            ("CCS_ENGINE_VIEWER_MAX_MS", "forever"),
            ("CCS_ENGINE_REAP_EXITED", "sometimes"),
            ("CCS_ENGINE_SHARED_SESSION", "session"),
            ("CCS_ENGINE_SHARED_SESSION", "Pane"),
            ("CCS_AUDIT_MAX_BYTES", "0"),
            ("CCS_AUDIT_MAX_BYTES", "0K"),
            ("CCS_AUDIT_MAX_BYTES", "lots"),
            ("CCS_AUDIT_MAX_BYTES", "10%"),
            ("CCS_AUDIT_MAX_BYTES", "-1"),
            ("CCS_AUDIT_MAX_BYTES", "1.5M"),
            ("CCS_AUDIT_MAX_BYTES", "99999999999999T"),
            ("CCS_AUDIT_KEEP", "0"),
            ("CCS_AUDIT_KEEP", "-1"),
            ("CCS_AUDIT_KEEP", "five"),
            ("CCS_AUDIT_KEEP", "1001"),
        ];
        for (var, val) in table {
            let e = cfg(&[(var, val)])
                .err()
                .unwrap_or_else(|| panic!("{var}={val:?} was accepted"));
            assert_eq!(e.var, *var);
            assert_eq!(e.value, *val);
            let msg = e.to_string();
            assert!(msg.contains(var) && msg.contains(val), "{msg}");
        }
    }

    #[test]
    fn socket_path_wins() {
        let c = cfg(&[("CCS_TMUX_SOCKET", "a"), ("CCS_TMUX_SOCKET_PATH", "/s")]).unwrap();
        assert_eq!(c.socket, Socket::Path("/s".into()));
        // The path wins, so a name with '/' beside it is unused, not refused (as before).
        let c = cfg(&[("CCS_TMUX_SOCKET", "a/b"), ("CCS_TMUX_SOCKET_PATH", "/s")]).unwrap();
        assert_eq!(c.socket, Socket::Path("/s".into()));
        assert_eq!(c.socket.label(), "_s");
        let by_name = Socket::Name("ccstudio".into());
        assert!(by_name.path().ends_with(format!(
            "tmux-{}/ccstudio",
            rustix::process::getuid().as_raw()
        )));
        assert_eq!(Socket::Path(by_name.path()).label(), by_name.label());
    }

    #[test]
    fn other_variables_are_ignored_and_unknown_ccs_ones_named_with_the_closest() {
        let c = cfg(&[("CCS_SOMETHING_ELSE", "x"), ("PATH", "/bin")]).unwrap();
        assert!(!c.policy.enabled());
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("CCS_SOMETHING_ELSE is not a ccs-reap setting and is ignored"),
            "{w:?}"
        );

        let c = cfg(&[("CCS_ENGINE_IDLE_KIL_MS", "1000")]).unwrap();
        assert!(!c.policy.enabled());
        assert_eq!(
            c.warnings(),
            vec!["CCS_ENGINE_IDLE_KIL_MS is not a ccs-reap setting and is ignored: did you mean CCS_ENGINE_IDLE_KILL_MS?".to_string()]
        );
        let table: &[(&str, Option<&str>)] = &[
            ("CCS_ENGINE_IDLE_KILL_MS", None),
            ("CCS_REAP_TOKEN", None),
            ("CCS_SKIP_CGROUP_TESTS", None),
            ("CCS_E2E_TIMEOUT", None),
            ("CCS_IDLE_KILL_MS", Some("CCS_ENGINE_IDLE_KILL_MS")),
            (
                "CCS_ENGINE_MEMHIGH",
                Some("did you mean CCS_ENGINE_MEM_HIGH?"),
            ),
            (
                "CCS_TMUX_SOCKET_PTH",
                Some("did you mean CCS_TMUX_SOCKET_PATH?"),
            ),
            (
                "CCS_REAP_INTERVAL",
                Some("did you mean CCS_REAP_INTERVAL_MS?"),
            ),
            ("CCS_LOGS", Some("did you mean CCS_LOG?")),
        ];
        let known = known_vars();
        for (name, want) in table {
            let got = unknown_var_note(name, &known);
            match want {
                None => assert_eq!(got, None, "{name}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{name}: {got:?}"
                ),
            }
        }
        // Empty counts as unset: no setting, and no warning either way.
        assert!(cfg(&[("CCS_ENGINE_IDLE_KIL_MS", "")])
            .unwrap()
            .warnings()
            .is_empty());
    }

    /// The one list of settings is the table; each is documented.
    #[test]
    fn known_variables_are_the_settings_and_each_is_documented() {
        let known = known_vars();
        assert_eq!(known.len(), 35, "{known:?}");
        assert!(known.iter().any(|k| k == "CCS_ENGINE_IDLE_KILL_MS"));
        assert!(known.iter().any(|k| k == "CCS_AUDIT_KEEP"));
        let docs = include_str!("../../docs/configuration.md");
        for k in &known {
            assert!(
                docs.contains(&format!("`{k}`")),
                "{k} is not in docs/configuration.md"
            );
        }
    }

    #[test]
    fn a_short_bare_idle_limit_is_warned_about_never_guessed() {
        let c = cfg(&[("CCS_ENGINE_IDLE_KILL_MS", "1800")]).unwrap();
        assert_eq!(c.policy.idle_kill_ms, Some(1800));
        let w = c.warnings();
        assert!(
            w.iter()
                .any(|w| w.contains("CCS_ENGINE_IDLE_KILL_MS=1800 is 1800 ms")
                    && w.contains("1800s")),
            "{w:?}"
        );
        for quiet in ["1800s", "1800000", "0"] {
            let c = cfg(&[("CCS_ENGINE_IDLE_KILL_MS", quiet)]).unwrap();
            assert!(c.warnings().is_empty(), "{quiet}: {:?}", c.warnings());
        }
    }

    #[test]
    fn a_bare_small_memory_size_is_refused_with_a_hint() {
        let e = cfg(&[("CCS_ENGINE_MEM_HIGH", "85")]).unwrap_err();
        assert_eq!(e.var, "CCS_ENGINE_MEM_HIGH");
        assert!(
            e.to_string().contains("85 is 85 bytes; did you mean 85%"),
            "{e}"
        );
        let e = cfg(&[("CCS_ENGINE_SESSION_MEM_MAX", "1500")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("1500 is 1500 bytes; did you mean 1500M?"),
            "{e}"
        );
    }

    #[test]
    fn rust_log_is_honoured_when_ccs_log_is_unset() {
        let c = cfg(&[("RUST_LOG", "debug")]).unwrap();
        assert_eq!(c.log_filter, "debug");
        let c = cfg(&[("RUST_LOG", "debug"), ("CCS_LOG", "warn")]).unwrap();
        assert_eq!(c.log_filter, "warn");
        let c = cfg(&[("RUST_LOG", "")]).unwrap();
        assert_eq!(c.log_filter, "info");
        let e = cfg(&[("RUST_LOG", "info,=[x")]).unwrap_err();
        assert_eq!(e.var, "RUST_LOG");
    }

    #[test]
    fn state_dir_needs_a_base() {
        let e = Config::from_vars(Vec::new(), None).unwrap_err();
        assert_eq!(e.var, "CCS_REAP_STATE_DIR");
    }

    /// The settings file under the environment: each value's source, the environment winning
    /// (a blank one unsetting the file's), a bad value named with its FILE:LINE.
    #[test]
    fn the_file_under_the_environment() {
        let file = |text: &str| SettingsFile {
            path: "/etc/ccs-reap/env".into(),
            entries: file::parse(text).unwrap(),
        };
        let f = file("CCS_REAP_GRACE_MS=1s\nCCS_AUDIT_KEEP=7\nCCS_LOG=warning\nPATH=/x\n");
        type Check = fn(&Config) -> bool;
        let table: &[(&[(&str, &str)], Check)] = &[
            (&[], |c| {
                c.grace == Duration::from_secs(1) && c.audit_keep == 7 && c.log_filter == "warn"
            }),
            (&[("CCS_REAP_GRACE_MS", "2s")], |c| {
                c.grace == Duration::from_secs(2)
            }),
            (&[("CCS_AUDIT_KEEP", " ")], |c| c.audit_keep == 5),
            (&[("RUST_LOG", "debug")], |c| c.log_filter == "warn"),
        ];
        for (env, check) in table {
            let c = Config::from_sources(
                env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
                Some(&f),
                Some("/st/ccs-reap".into()),
            )
            .unwrap();
            assert!(check(&c), "{env:?}: {c:?}");
        }
        let c = Config::from_sources(
            [("CCS_REAP_GRACE_MS".to_string(), "2s".to_string())],
            Some(&f),
            Some("/st/ccs-reap".into()),
        )
        .unwrap();
        let src = |n: &str| {
            c.sources
                .iter()
                .find(|e| e.name == n)
                .unwrap()
                .source
                .clone()
        };
        assert_eq!(src("CCS_REAP_GRACE_MS"), ValueSource::Environment);
        assert_eq!(src("CCS_AUDIT_KEEP").to_string(), "/etc/ccs-reap/env:2");
        assert_eq!(src("CCS_REAP_INTERVAL_MS"), ValueSource::Default);
        assert_eq!(c.file.as_deref(), Some(Path::new("/etc/ccs-reap/env")));

        let bad = file("\nCCS_AUDIT_KEEP=0\nCCS_ENGINE_IDLE_KIL_MS=1\n");
        let e =
            Config::from_sources(Vec::new(), Some(&bad), Some("/st/ccs-reap".into())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/ccs-reap/env:2: invalid CCS_AUDIT_KEEP=\"0\": a whole number of rotated files, from 1 to 1000"
        );
        let unknown = file("CCS_ENGINE_IDLE_KIL_MS=1\nCCS_CFG=x\n");
        let c =
            Config::from_sources(Vec::new(), Some(&unknown), Some("/st/ccs-reap".into())).unwrap();
        assert_eq!(
            c.warnings(),
            vec!["/etc/ccs-reap/env:1: CCS_ENGINE_IDLE_KIL_MS is not a ccs-reap setting and is ignored: did you mean CCS_ENGINE_IDLE_KILL_MS?".to_string()]
        );
    }

    /// A lease with less than the floor between mark and fence is refused, with the numbers.
    #[test]
    fn a_lease_that_can_never_pass_is_refused() {
        let table: &[(&str, &str, Option<&str>, Option<&str>)] = &[
            ("0", "300", None, Some("leaves 300 ms")),
            ("0", "100", None, Some("3×0 + 3×100 + 2000 = 2300 ms")),
            ("100", "300", None, None),
            ("0", "500", None, None),
            ("0", "10000", None, None),
            ("200", "500", None, None),
            ("0", "300", Some("200"), None),
            (
                "0",
                "100",
                Some("100"),
                Some("+ 100 (CCS_REAP_HOOK_TIMEOUT_MS)"),
            ),
        ];
        for (grace, tmux, hook, want) in table {
            let mut vars = vec![
                ("CCS_REAP_GRACE_MS", *grace),
                ("CCS_TMUX_TIMEOUT_MS", *tmux),
            ];
            if let Some(h) = hook {
                vars.push(("CCS_REAP_HOOK", "/bin/true"));
                vars.push(("CCS_REAP_HOOK_TIMEOUT_MS", h));
            }
            let got = cfg(&vars);
            match want {
                None => assert!(got.is_ok(), "{vars:?}: {got:?}"),
                Some(w) => {
                    let e = got.unwrap_err();
                    assert_eq!(e.var, "CCS_REAP_GRACE_MS");
                    assert!(e.to_string().contains(w), "{vars:?}: {e}");
                    assert!(e.to_string().contains("mark too old"), "{e}");
                }
            }
        }
        let c = cfg(&[]).unwrap();
        assert_eq!(c.lease().spare_ms(), 20_000);
    }

    /// The rules the start line names: each active one with its threshold as written.
    #[test]
    fn the_rules_in_effect() {
        let table: &[(&[(&str, &str)], &str)] = &[
            (&[], "none (reaping is disabled)"),
            (&[("CCS_ENGINE_IDLE_KILL_MS", "0")], "none (reaping is disabled)"),
            (&[("CCS_ENGINE_IDLE_KILL_MS", "30m")], "idle CCS_ENGINE_IDLE_KILL_MS=30m"),
            (
                &[("CCS_ENGINE_MEM_HIGH", " 2G "), ("CCS_ENGINE_MAX_IDLE", "4")],
                "memory CCS_ENGINE_MEM_HIGH=2G, max-idle CCS_ENGINE_MAX_IDLE=4, floor CCS_ENGINE_MIN_IDLE_MS=60000",
            ),
            (
                &[("CCS_ENGINE_REAP_STUCK", "1"), ("CCS_ENGINE_STUCK_WALL_MS", "2h")],
                "stuck CCS_ENGINE_STUCK_WALL_MS=2h",
            ),
            (&[("CCS_ENGINE_STUCK_WALL_MS", "2h")], "none (reaping is disabled)"),
        ];
        for (vars, want) in table {
            assert_eq!(cfg(vars).unwrap().rules(), *want, "{vars:?}");
        }
    }
}
