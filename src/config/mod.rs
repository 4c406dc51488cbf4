//! Configuration from the settings file and the environment, read and validated once at start-up.
//!
//! One table ([`VARS`], in `table.rs`) lists every setting with its group, default, help and
//! parser; the loader (here) gathers the values from the settings file (`file.rs`) and the
//! environment, which wins, and runs each value through its row's parser, so that an error names
//! the *full* variable, the bad value and, for a file, its FILE:LINE. An empty value counts as
//! unset, as the contract says.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::Policy;

pub mod file;
pub mod log;
mod table;

pub use table::{setting, Draft, Setting, VARS};

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

/// Which tmux server to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Socket {
    /// `tmux -L <name>`
    Name(String),
    /// `tmux -S <path>`
    Path(PathBuf),
}

/// FNV-1a, 64 bits: a stable hash (std's hashers may change between releases), for names.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Socket {
    /// The socket's path: `-S` as given, `-L <name>` where tmux puts it
    /// (`$TMUX_TMPDIR` or `/tmp`, then `tmux-<uid>/<name>`).
    pub fn path(&self) -> PathBuf {
        match self {
            Socket::Path(p) => p.clone(),
            Socket::Name(n) => {
                let dir = std::env::var_os("TMUX_TMPDIR")
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| "/tmp".into());
                PathBuf::from(dir)
                    .join(format!("tmux-{}", rustix::process::getuid().as_raw()))
                    .join(n)
            }
        }
    }

    /// The socket's path with its directory made canonical where it exists (the socket itself
    /// may not exist yet), so `-L ccstudio` and `-S` of the same path are one socket.
    pub fn canonical_path(&self) -> PathBuf {
        let p = self.path();
        match (p.parent(), p.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(dir)
                .map(|d| d.join(name))
                .unwrap_or(p),
            _ => p,
        }
    }

    /// A label for the lock file: the canonical path with every character but letters, digits,
    /// `-` and `.` as `_`. Readable, not exact: [`Socket::studio_key`] adds a hash.
    pub fn label(&self) -> String {
        self.canonical_path()
            .to_string_lossy()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The name of a studio's directory in the state dir: one socket and one session prefix.
    /// `<label>-<FNV-1a 64 of the exact canonical path>@<prefix>`: two sockets whose labels
    /// collide (`/a_b` and `/a/b`) still get two directories.
    pub fn studio_key(&self, prefix: &str) -> String {
        use std::os::unix::ffi::OsStrExt;
        let path = self.canonical_path();
        format!(
            "{}-{:016x}@{prefix}",
            self.label(),
            fnv1a64(path.as_os_str().as_bytes())
        )
    }
}

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
    pub socket: Socket,
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
pub enum Source {
    Default,
    File { path: PathBuf, line: usize },
    Environment,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Environment => write!(f, "environment"),
        }
    }
}

/// One setting as it is in effect: its variable, its value as written (`None`: unset, so the
/// default), and where that came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub name: &'static str,
    pub value: Option<String>,
    pub source: Source,
}

/// The settings as text, grouped, each with its default: the end of `--help`.
pub fn vars_help() -> String {
    let mut s = String::from(
        "Configuration: the environment, over the settings file (--config FILE, else CCS_CONFIG, else \
         $XDG_CONFIG_HOME/ccs-reap/env or ~/.config/ccs-reap/env, else /etc/ccs-reap/env; KEY=value \
         lines as systemd reads them). An empty value counts as unset; durations \
         *_MS take 500ms, 90s, 30m, 1h, 2d or bare milliseconds. Reaping is off until \
         CCS_ENGINE_IDLE_KILL_MS or a memory rule is set.\n",
    );
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

/// `CCS_` variables that are not settings, and never warned about: the reap token tmux sets in a
/// session's environment, the studio's own `CCS_CFG`, and the switches of the project's own tests
/// and scripts. `CCS_REAP_ENV_ALLOW` adds more.
const NOT_SETTINGS: &[&str] = &[
    crate::tmux::TOKEN_VAR,
    "CCS_CFG",
    "CCS_REAP_BIN",
    "CCS_SKIP_CGROUP_TESTS",
    "CCS_SKIP_PROMETHEUS",
    "CCS_E2E_SKIP",
    "CCS_E2E_TIMEOUT",
    "CCS_REAP_TEST_PANIC",
    "CCS_MODEL_DEPTH",
];

/// Every setting's variable (`CCS_ENGINE_IDLE_KILL_MS`, ...), from [`VARS`].
pub fn known_vars() -> Vec<String> {
    VARS.iter().map(|v| v.name.to_string()).collect()
}

/// Whether `name` is allowed by an entry of `CCS_REAP_ENV_ALLOW` (a trailing `*`: a prefix).
fn allowed(name: &str, allow: &[String]) -> bool {
    allow.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => a == name,
    })
}

/// The warning for a `CCS_` variable that is no setting, naming the closest one (by
/// Levenshtein distance); `None` for a setting (or one of [`NOT_SETTINGS`]).
pub fn unknown_var_note(name: &str, known: &[String]) -> Option<String> {
    unknown_note(name, known, &[])
}

fn unknown_note(name: &str, known: &[String], allow: &[String]) -> Option<String> {
    if known.iter().any(|k| k == name) || NOT_SETTINGS.contains(&name) || allowed(name, allow) {
        return None;
    }
    let (d, closest) = known
        .iter()
        .map(|k| (strsim::levenshtein(name, k), k))
        .min_by_key(|(d, _)| *d)?;
    Some(if d * 3 <= name.len() {
        format!("{name} is not a ccs-reap setting and is ignored: did you mean {closest}?")
    } else {
        format!("{name} is not a ccs-reap setting and is ignored (the closest is {closest})")
    })
}

/// The settings file as read: its path and its assignments.
#[derive(Debug, Clone, Default)]
pub struct SettingsFile {
    pub path: PathBuf,
    pub entries: Vec<file::Entry>,
}

impl SettingsFile {
    /// Find and read the settings file ([`file::locate`]); `None` when there is none. A file
    /// named by `--config` or `CCS_CONFIG` must exist; any file found must pass [`file::read`].
    pub fn load(flag: Option<&Path>) -> Result<Option<SettingsFile>, ConfigError> {
        let var = |k: &str| std::env::var(k).ok();
        let Some((path, named)) = file::locate(
            flag,
            var("CCS_CONFIG").as_deref(),
            var("XDG_CONFIG_HOME").as_deref(),
            var("HOME").as_deref(),
        ) else {
            return Ok(None);
        };
        let refused = |why: String| ConfigError {
            var: String::new(),
            value: String::new(),
            expected: format!("refused: {why}"),
            at: Some(path.display().to_string()),
        };
        if !named && std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let text = file::read(&path).map_err(refused)?;
        let entries = file::parse(&text).map_err(|(line, why)| ConfigError {
            var: String::new(),
            value: String::new(),
            expected: why,
            at: Some(format!("{}:{line}", path.display())),
        })?;
        Ok(Some(SettingsFile { path, entries }))
    }
}

/// One value given for a variable, and where it was given.
struct Given {
    name: String,
    value: String,
    source: Source,
}

impl Source {
    /// `FILE:LINE` for a value from the settings file, for messages.
    fn place(&self) -> Option<String> {
        match self {
            Source::File { .. } => Some(self.to_string()),
            _ => None,
        }
    }
}

/// The values of ccs-reap's variables (`CCS_*`, `RUST_LOG`): the file's first, the environment's
/// over them; a blank value is unset (and unsets what the file gave).
fn gather(
    vars: impl IntoIterator<Item = (String, String)>,
    file: Option<&SettingsFile>,
) -> Vec<Given> {
    let ours = |k: &str| k.starts_with("CCS_") || k == "RUST_LOG";
    let from_file = file.into_iter().flat_map(|f| {
        f.entries.iter().map(|e| {
            let source = Source::File {
                path: f.path.clone(),
                line: e.line,
            };
            (e.key.clone(), e.value.clone(), source)
        })
    });
    let from_env = vars.into_iter().map(|(k, v)| (k, v, Source::Environment));
    let mut given: Vec<Given> = Vec::new();
    for (name, value, source) in from_file.chain(from_env) {
        if !ours(&name) {
            continue;
        }
        given.retain(|g| g.name != name);
        if !value.trim().is_empty() {
            given.push(Given {
                name,
                value,
                source,
            });
        }
    }
    given
}

fn given<'a>(given: &'a [Given], name: &str) -> Option<&'a Given> {
    given.iter().find(|g| g.name == name)
}

/// Each row of [`VARS`] whose variable is given, through its parser, in the table's order; and
/// every setting's value and source.
fn apply(g: &[Given]) -> Result<(Draft, Vec<Effective>), ConfigError> {
    let mut d = Draft::default();
    let mut sources = Vec::with_capacity(VARS.len());
    for s in VARS {
        let Some(v) = given(g, s.name) else {
            sources.push(Effective {
                name: s.name,
                value: None,
                source: Source::Default,
            });
            continue;
        };
        (s.parse)(&mut d, &v.value).map_err(|expected| ConfigError {
            var: s.name.into(),
            value: v.value.clone(),
            expected,
            at: v.source.place(),
        })?;
        sources.push(Effective {
            name: s.name,
            value: Some(v.value.clone()),
            source: v.source.clone(),
        });
    }
    Ok((d, sources))
}

/// The warnings for the `CCS_*` names given that are no setting, each with its FILE:LINE when
/// the settings file has it.
fn unknown_notes(g: &[Given], allow: &[String]) -> Vec<String> {
    let known = known_vars();
    g.iter()
        .filter(|v| v.name.starts_with("CCS_"))
        .filter_map(|v| {
            let n = unknown_note(&v.name, &known, allow)?;
            Some(match v.source.place() {
                Some(at) => format!("{at}: {n}"),
                None => n,
            })
        })
        .collect()
}

/// Without `CCS_LOG`: `RUST_LOG` (the convention of Rust programs), else `info`, with its level
/// names made tracing's ([`log::normalize`]).
fn rust_log(g: &[Given]) -> Result<String, ConfigError> {
    let Some(v) = given(g, "RUST_LOG") else {
        return Ok("info".into());
    };
    log::normalize(&v.value).map_err(|expected| ConfigError {
        var: v.name.clone(),
        value: v.value.clone(),
        expected,
        at: v.source.place(),
    })
}

/// The leeway a reap needs between its mark and its fence: the marks, the re-check's listing, the
/// scan of the process table and the journals of a batch. A lease leaving less can never pass.
pub const MIN_FENCE_SPARE_MS: i64 = 500;

impl Config {
    /// Read the settings file ([`SettingsFile::load`], `--config FILE` given as `flag`) and the
    /// process environment, which wins over it.
    pub fn load(flag: Option<&Path>) -> Result<Config, ConfigError> {
        let file = SettingsFile::load(flag)?;
        Self::from_sources(std::env::vars(), file.as_ref(), default_state_base())
    }

    /// [`Config::load`] with no `--config`.
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::load(None)
    }

    /// Parse from an explicit list of variables (tests use this; `state_base` is the default
    /// state-dir parent when `CCS_REAP_STATE_DIR` is unset).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
        state_base: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        Self::from_sources(vars, None, state_base)
    }

    /// Parse from the environment `vars` over the settings file `file`.
    pub fn from_sources(
        vars: impl IntoIterator<Item = (String, String)>,
        file: Option<&SettingsFile>,
        state_base: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        let given = gather(vars, file);
        let (mut d, sources) = apply(&given)?;
        let mut notes = unknown_notes(&given, &d.allow);
        notes.append(&mut d.notes);
        let socket = match (d.socket_path.take(), d.socket_name.take()) {
            (Some(p), _) => Socket::Path(p),
            (None, Some(n)) => Socket::Name(n),
            (None, None) => Socket::Name("ccstudio".into()),
        };
        let state_dir = match (d.state_dir.take(), state_base) {
            (Some(dir), _) => dir,
            (None, Some(base)) => base.join("ccs-reap"),
            (None, None) => {
                return Err(ConfigError {
                    var: "CCS_REAP_STATE_DIR".into(),
                    value: String::new(),
                    expected: "a directory (neither XDG_STATE_HOME nor HOME is set)".into(),
                    at: None,
                })
            }
        };
        let log_filter = match d.log.take() {
            Some(l) => l,
            None => rust_log(&given)?,
        };
        let cfg = Config {
            policy: d.policy,
            interval: Duration::from_millis(d.interval_ms),
            grace: Duration::from_millis(d.grace_ms),
            socket,
            prefix: d.prefix,
            activity_files: d.activity_files,
            state_dir,
            log_filter,
            log_format: d.log_format,
            tmux_timeout: Duration::from_millis(d.tmux_timeout_ms),
            metrics_addr: d.metrics_addr,
            mem_cgroup: d.mem_cgroup,
            hook: d.hook,
            hook_timeout: Duration::from_millis(d.hook_timeout_ms),
            audit_max_bytes: d.audit_max_bytes,
            audit_keep: d.audit_keep,
            notes,
            file: file.map(|f| f.path.clone()),
            sources,
        };
        cfg.check_lease()?;
        Ok(cfg)
    }

    fn hook_ms(&self) -> i64 {
        if self.hook.is_some() {
            self.hook_timeout.as_millis() as i64
        } else {
            0
        }
    }

    /// A `@ccs_reaping` mark older than this was left by a reaper that died mid-teardown: the
    /// next sweep clears it and decides the session afresh. A live teardown takes at most the
    /// grace, two seconds for the kills to land, and a few tmux calls (3×grace + 3×tmux timeout +
    /// the hook's timeout + 2000 ms).
    pub fn lease_limit_ms(&self) -> i64 {
        (self.grace.as_millis() as i64) * 3
            + (self.tmux_timeout.as_millis() as i64) * 3
            + self.hook_ms()
            + 2000
    }

    /// How long a teardown may still take once past the fence: the grace, the kills landing, and
    /// the tmux calls that follow (grace + 2×tmux timeout + 2000 ms).
    pub fn lease_rest_ms(&self) -> i64 {
        (self.grace.as_millis() as i64) + 2 * (self.tmux_timeout.as_millis() as i64) + 2000
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
        let (limit, rest) = (self.lease_limit_ms(), self.lease_rest_ms());
        let spare = limit - rest;
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

    /// The rules in effect, each with its threshold as written: the daemon's start line.
    pub fn rules(&self) -> String {
        let p = &self.policy;
        let raw = |name: &str| {
            self.sources
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
                .unwrap_or_else(|| {
                    setting(name)
                        .map(|s| s.default.to_string())
                        .unwrap_or_default()
                })
        };
        let mut r: Vec<String> = Vec::new();
        let mut rule = |on: bool, label: &str, name: &str| {
            if on {
                r.push(format!("{label} {name}={}", raw(name).trim()));
            }
        };
        rule(p.idle_kill_ms.is_some(), "idle", "CCS_ENGINE_IDLE_KILL_MS");
        rule(p.mem_high.is_some(), "memory", "CCS_ENGINE_MEM_HIGH");
        rule(p.mem_psi.is_some(), "stall", "CCS_ENGINE_MEM_PSI");
        rule(
            p.session_mem_max.is_some(),
            "bloat",
            "CCS_ENGINE_SESSION_MEM_MAX",
        );
        rule(p.max_idle.is_some(), "max-idle", "CCS_ENGINE_MAX_IDLE");
        let pressure = p.mem_high.is_some()
            || p.mem_psi.is_some()
            || p.session_mem_max.is_some()
            || p.max_idle.is_some();
        rule(pressure, "floor", "CCS_ENGINE_MIN_IDLE_MS");
        let stuck = p.reap_stuck && (p.stuck_wall_ms.is_some() || p.stuck_idle_ms.is_some());
        rule(
            stuck && p.stuck_wall_ms.is_some(),
            "stuck",
            "CCS_ENGINE_STUCK_WALL_MS",
        );
        rule(
            stuck && p.stuck_idle_ms.is_some(),
            "stuck",
            "CCS_ENGINE_STUCK_IDLE_MS",
        );
        rule(p.warn_ms.is_some(), "warned", "CCS_ENGINE_WARN_MS");
        rule(p.reap_without_cid, "no-cid", "CCS_ENGINE_REAP_WITHOUT_CID");
        if r.is_empty() {
            "none (reaping is disabled)".into()
        } else {
            r.join(", ")
        }
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

    /// `ccs-reap config`: every setting, `NAME=value` where it is set (a line a settings file
    /// takes), `# NAME` with its default where not, each with its source.
    pub fn render(&self) -> String {
        let mut s = match &self.file {
            Some(f) => format!("# settings file: {}\n", f.display()),
            None => "# settings file: none\n".to_string(),
        };
        s.push_str(&format!("# rules: {}\n", self.rules()));
        for e in &self.sources {
            let line = match &e.value {
                Some(v) => format!("{}={}", e.name, quote(v)),
                None => format!(
                    "# {} (default: {})",
                    e.name,
                    setting(e.name).map(|s| s.default).unwrap_or("")
                ),
            };
            s.push_str(&format!("{line:<48} # {}\n", e.source));
        }
        s
    }

    /// `ccs-reap config --json`.
    pub fn to_json(&self) -> serde_json::Value {
        let settings: Vec<serde_json::Value> = self
            .sources
            .iter()
            .map(|e| {
                let (source, path, line) = match &e.source {
                    Source::Default => ("default", None, None),
                    Source::Environment => ("environment", None, None),
                    Source::File { path, line } => ("file", Some(path.clone()), Some(*line)),
                };
                serde_json::json!({
                    "name": e.name,
                    "value": e.value,
                    "default": setting(e.name).map(|s| s.default),
                    "source": source,
                    "file": path,
                    "line": line,
                })
            })
            .collect();
        serde_json::json!({
            "ok": true,
            "file": self.file,
            "settings": settings,
            "rules": self.rules(),
            "warnings": self.warnings(),
        })
    }
}

/// A value as a settings-file line takes it back: bare when it is plain, else in single quotes.
fn quote(v: &str) -> String {
    let plain = v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/.,:-_%@+=[]".contains(&b));
    if plain || v.contains('\'') {
        v.to_string()
    } else {
        format!("'{v}'")
    }
}

/// `$XDG_STATE_HOME`, else `$HOME/.local/state`.
pub fn default_state_base() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    nonempty("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".local/state")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{MemThreshold, OrphanViewers};
    use std::path::Path;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            Some(PathBuf::from("/st")),
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
        assert_eq!(known.len(), 32, "{known:?}");
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
}
