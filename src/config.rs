//! Configuration from the environment, read and validated once at start-up.
//!
//! Every variable is read as a string through envy (so an unknown or oddly typed value never reaches
//! serde's own messages), then parsed here so that an error names the *full* variable and the bad
//! value. An empty value counts as unset, as the contract says; envy itself would reject it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub use crate::adapters::tmux::Socket;
use crate::core::policy::{OrphanViewers, Policy};

/// A configuration error: which variable, what value, what was expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid {var}={value:?}: {expected}")]
pub struct ConfigError {
    pub var: String,
    pub value: String,
    pub expected: String,
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
}

/// The raw strings, as envy reads them (`CCS_` prefix stripped, lowercased).
#[derive(Debug, Default, Deserialize)]
struct Raw {
    engine_idle_kill_ms: Option<String>,
    reap_interval_ms: Option<String>,
    reap_grace_ms: Option<String>,
    tmux_socket: Option<String>,
    tmux_socket_path: Option<String>,
    session_prefix: Option<String>,
    activity_files: Option<String>,
    reap_state_dir: Option<String>,
    engine_reap_without_cid: Option<String>,
    log: Option<String>,
    log_format: Option<String>,
    tmux_timeout_ms: Option<String>,
    engine_mem_high: Option<String>,
    engine_max_idle: Option<String>,
    engine_min_idle_ms: Option<String>,
    engine_mem_cgroup: Option<String>,
    engine_session_mem_max: Option<String>,
    engine_warn_ms: Option<String>,
    reap_hook: Option<String>,
    reap_hook_timeout_ms: Option<String>,
    engine_mem_psi: Option<String>,
    metrics_addr: Option<String>,
    engine_stuck_wall_ms: Option<String>,
    engine_stuck_idle_ms: Option<String>,
    engine_reap_stuck: Option<String>,
    engine_orphan_viewers: Option<String>,
    engine_viewer_max_ms: Option<String>,
    engine_reap_exited: Option<String>,
    audit_max_bytes: Option<String>,
    audit_keep: Option<String>,
}

/// Collects the field names of a struct as serde sees them, and deserializes nothing.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;
    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("only the field names are read"))
    }
    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("only the field names are read"))
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Every setting's variable (`CCS_ENGINE_IDLE_KILL_MS`, ...): the fields of [`Raw`], the one
/// list, so that a setting added there is known here too.
pub fn known_vars() -> Vec<String> {
    let mut fields: &'static [&'static str] = &[];
    let _ = Raw::deserialize(FieldNames(&mut fields));
    fields
        .iter()
        .map(|f| format!("CCS_{}", f.to_ascii_uppercase()))
        .collect()
}

/// One setting's documentation: its variable, the group it is listed under, its default and what it
/// does. [`VARS`] is the one source of `--help`'s list, the man page's ENVIRONMENT section, and (a
/// test checks it) the tables of docs/configuration.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarDoc {
    pub name: &'static str,
    pub group: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// Every setting, in the order and groups of docs/configuration.md. A test checks that these are
/// exactly [`known_vars`] (the fields of the struct envy reads) and the rows of the docs' tables.
pub const VARS: &[VarDoc] = &[
    VarDoc {
        name: "CCS_ENGINE_IDLE_KILL_MS",
        group: "Reaping",
        default: "unset: off",
        help: "Idle time after which a session is reaped (reason idle).",
    },
    VarDoc {
        name: "CCS_ENGINE_REAP_WITHOUT_CID",
        group: "Reaping",
        default: "0",
        help: "Also reap sessions whose conversation id is unknown (their history cannot be resumed).",
    },
    VarDoc {
        name: "CCS_ENGINE_REAP_EXITED",
        group: "Reaping",
        default: "1",
        help: "Clean up sessions whose panes have all exited, on the next sweep (when reaping is enabled; spawn cleans up such a session of its own id in any case).",
    },
    VarDoc {
        name: "CCS_REAP_INTERVAL_MS",
        group: "Reaping",
        default: "30000",
        help: "Time between two sweeps of the daemon.",
    },
    VarDoc {
        name: "CCS_REAP_GRACE_MS",
        group: "Reaping",
        default: "5000",
        help: "Time between SIGTERM and SIGKILL in a teardown (it ends early when every process is gone).",
    },
    VarDoc {
        name: "CCS_TMUX_SOCKET",
        group: "The studio",
        default: "ccstudio",
        help: "The tmux server, as tmux -L <name> (its path is $TMUX_TMPDIR or /tmp, then tmux-<uid>/<name>).",
    },
    VarDoc {
        name: "CCS_TMUX_SOCKET_PATH",
        group: "The studio",
        default: "unset",
        help: "The tmux server, as tmux -S <path>.",
    },
    VarDoc {
        name: "CCS_SESSION_PREFIX",
        group: "The studio",
        default: "ccs-",
        help: "Sessions named <prefix><id> are the chats; nothing else is touched.",
    },
    VarDoc {
        name: "CCS_ACTIVITY_FILES",
        group: "The studio",
        default: "none",
        help: "The studio's liveness registries (activity-files.md).",
    },
    VarDoc {
        name: "CCS_TMUX_TIMEOUT_MS",
        group: "The studio",
        default: "10000",
        help: "How long one tmux call (or the reading of the activity files) may take; past it, the sweep keeps every session.",
    },
    VarDoc {
        name: "CCS_ENGINE_MEM_HIGH",
        group: "Memory pressure",
        default: "unset: off",
        help: "Reap idle sessions, oldest idle first, while memory used (the working set: usage less inactive page cache, docker.md) is above it (reason memory).",
    },
    VarDoc {
        name: "CCS_ENGINE_MAX_IDLE",
        group: "Memory pressure",
        default: "unset: off",
        help: "Keep at most this many idle sessions; the oldest beyond are reaped (reason max-idle).",
    },
    VarDoc {
        name: "CCS_ENGINE_MIN_IDLE_MS",
        group: "Memory pressure",
        default: "60000",
        help: "The floor: the pressure rules never take a session idle for less.",
    },
    VarDoc {
        name: "CCS_ENGINE_STUCK_WALL_MS",
        group: "Stuck turns and viewers",
        default: "unset: never",
        help: "A turn running at least this long is stuck.",
    },
    VarDoc {
        name: "CCS_ENGINE_STUCK_IDLE_MS",
        group: "Stuck turns and viewers",
        default: "unset: never",
        help: "A running turn whose session printed nothing for this long is stuck.",
    },
    VarDoc {
        name: "CCS_ENGINE_REAP_STUCK",
        group: "Stuck turns and viewers",
        default: "0",
        help: "Reap stuck sessions (reason stuck); otherwise they are only reported.",
    },
    VarDoc {
        name: "CCS_ENGINE_ORPHAN_VIEWERS",
        group: "Stuck turns and viewers",
        default: "count",
        help: "ignore: a control-mode client whose parent process is gone is no viewer.",
    },
    VarDoc {
        name: "CCS_ENGINE_VIEWER_MAX_MS",
        group: "Stuck turns and viewers",
        default: "unset: always counts",
        help: "A client attached at least this long with no input is no viewer.",
    },
    VarDoc {
        name: "CCS_REAP_STATE_DIR",
        group: "State, logs, metrics",
        default: "$XDG_STATE_HOME/ccs-reap, else $HOME/.local/state/ccs-reap",
        help: "Audit log, lock, tombstones, journals (files.md).",
    },
    VarDoc {
        name: "CCS_AUDIT_MAX_BYTES",
        group: "State, logs, metrics",
        default: "10M (10 MiB)",
        help: "reaped.jsonl is rotated before a line would take it past this (files.md).",
    },
    VarDoc {
        name: "CCS_AUDIT_KEEP",
        group: "State, logs, metrics",
        default: "5",
        help: "How many rotated audit files are kept: reaped.jsonl.1 (newest) ... reaped.jsonl.<N>.",
    },
    VarDoc {
        name: "CCS_LOG",
        group: "State, logs, metrics",
        default: "RUST_LOG if set, else info",
        help: "What is logged, on stderr.",
    },
    VarDoc {
        name: "CCS_LOG_FORMAT",
        group: "State, logs, metrics",
        default: "text",
        help: "Log line format, on stderr.",
    },
    VarDoc {
        name: "CCS_ENGINE_MEM_CGROUP",
        group: "State, logs, metrics",
        default: "unset: the tmux server's memory cgroup, else ccs-reap's own, else /proc/meminfo",
        help: "The memory the pressure rules and the watcher read.",
    },
    VarDoc {
        name: "CCS_ENGINE_MEM_PSI",
        group: "State, logs, metrics",
        default: "unset: off",
        help: "When the memory stall (PSI some avg10 of the watched cgroup, else of the host) reaches it, a sweep takes the oldest idle session past the floor, even under CCS_ENGINE_MEM_HIGH.",
    },
    VarDoc {
        name: "CCS_ENGINE_SESSION_MEM_MAX",
        group: "State, logs, metrics",
        default: "unset: off",
        help: "An idle chat past the floor whose processes hold more is reaped (reason bloat).",
    },
    VarDoc {
        name: "CCS_ENGINE_WARN_MS",
        group: "State, logs, metrics",
        default: "unset: off",
        help: "A warned audit event this long before an idle reap, once per idle period.",
    },
    VarDoc {
        name: "CCS_REAP_HOOK",
        group: "State, logs, metrics",
        default: "unset: off",
        help: "Run as <program> before / <program> after around each reap (commands.md); a before that cannot be run at reap time (deleted, no longer executable) vetoes the reap.",
    },
    VarDoc {
        name: "CCS_REAP_HOOK_TIMEOUT_MS",
        group: "State, logs, metrics",
        default: "5000",
        help: "A hook running longer is killed with its process group; the reap goes on.",
    },
    VarDoc {
        name: "CCS_METRICS_ADDR",
        group: "State, logs, metrics",
        default: "unset: off",
        help: "The daemon serves Prometheus /metrics and /healthz there (/healthz: 200 only while the last sweep read the tmux server at the socket, else 503 with the reason).",
    },
];

/// The settings as text, grouped, each with its default: the end of `--help`.
pub fn vars_help() -> String {
    let mut s = String::from(
        "Configuration: environment variables only (an empty value counts as unset; durations \
         *_MS take 500ms, 90s, 30m, 1h, 2d or bare milliseconds). Reaping is off until \
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
/// session's environment, and the switches of the project's own tests and scripts.
const NOT_SETTINGS: &[&str] = &[
    crate::adapters::tmux::TOKEN_VAR,
    "CCS_REAP_BIN",
    "CCS_SKIP_CGROUP_TESTS",
    "CCS_SKIP_PROMETHEUS",
    "CCS_E2E_SKIP",
    "CCS_E2E_TIMEOUT",
    "CCS_REAP_TEST_PANIC",
    "CCS_MODEL_DEPTH",
];

/// Levenshtein distance, on bytes (variable names are ASCII).
fn distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The warning for a `CCS_` variable that is no setting, naming the closest one; `None` for a
/// setting (or one of [`NOT_SETTINGS`]).
pub fn unknown_var_note(name: &str, known: &[String]) -> Option<String> {
    if known.iter().any(|k| k == name) || NOT_SETTINGS.contains(&name) {
        return None;
    }
    let (d, closest) = known
        .iter()
        .map(|k| (distance(name, k), k))
        .min_by_key(|(d, _)| *d)?;
    Some(if d * 3 <= name.len() {
        format!("{name} is not a ccs-reap setting and is ignored: did you mean {closest}?")
    } else {
        format!("{name} is not a ccs-reap setting and is ignored (the closest is {closest})")
    })
}

fn err(var: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError {
        var: format!("CCS_{var}"),
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

fn ms(var: &str, v: &Option<String>, min: u64) -> Result<Option<u64>, ConfigError> {
    Ok(duration(var, v, min)?.map(|d| d.ms))
}

/// A duration variable (`CCS_*_MS`): see [`crate::core::units::parse_duration`].
fn duration(
    var: &str,
    v: &Option<String>,
    min: u64,
) -> Result<Option<crate::core::units::Millis>, ConfigError> {
    use crate::core::units::{parse_duration, DURATION_HINT};
    let Some(s) = v else { return Ok(None) };
    match parse_duration(s) {
        Some(d) if d.ms > crate::core::policy::MAX_MS => {
            Err(err(var, s, &format!("{DURATION_HINT}; at most 100 years")))
        }
        Some(d) if d.ms >= min => Ok(Some(d)),
        Some(_) => Err(err(var, s, &format!("{DURATION_HINT}; at least {min} ms"))),
        None => Err(err(var, s, DURATION_HINT)),
    }
}

fn flag(var: &str, v: &Option<String>) -> Result<Option<bool>, ConfigError> {
    let Some(s) = v else { return Ok(None) };
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(Some(true)),
        "0" | "false" | "no" | "off" => Ok(Some(false)),
        _ => Err(err(var, s, "1 or 0 (also true/false, yes/no, on/off)")),
    }
}

/// A memory size variable refused: garbage, or a bare number too small to be meant as bytes.
fn size_err(
    var: &str,
    value: &str,
    e: crate::core::units::SizeError,
    expected: &str,
) -> ConfigError {
    match e {
        crate::core::units::SizeError::Garbage => err(var, value, expected),
        crate::core::units::SizeError::Ambiguous(n) => err(
            var,
            value,
            &crate::core::units::size_hint(n, var == "ENGINE_MEM_HIGH"),
        ),
    }
}

impl Config {
    /// Read the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_vars(std::env::vars(), default_state_base())
    }

    /// Parse from an explicit list of variables (tests use this; `state_base` is the default
    /// state-dir parent when `CCS_REAP_STATE_DIR` is unset).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
        state_base: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(k, v)| (k.starts_with("CCS_") || k == "RUST_LOG") && !v.trim().is_empty())
            .collect();
        let known = known_vars();
        let mut notes: Vec<String> = vars
            .iter()
            .filter(|(k, _)| k.starts_with("CCS_"))
            .filter_map(|(k, _)| unknown_var_note(k, &known))
            .collect();
        let rust_log = vars
            .iter()
            .find(|(k, _)| k == "RUST_LOG")
            .map(|(_, v)| v.clone());
        let vars = vars.into_iter().filter(|(k, _)| k.starts_with("CCS_"));
        let raw: Raw = envy::prefixed("CCS_")
            .from_iter(vars)
            .map_err(|e| ConfigError {
                var: "CCS_*".into(),
                value: String::new(),
                expected: e.to_string(),
            })?;

        let idle_kill = duration("ENGINE_IDLE_KILL_MS", &raw.engine_idle_kill_ms, 0)?;
        let idle_kill_ms = idle_kill.map(|d| d.ms).filter(|&n| n > 0);
        // A bare number is milliseconds, as it always was: one that is short for an idle limit
        // was probably meant as seconds. Said, not guessed.
        for (var, v) in [
            ("ENGINE_IDLE_KILL_MS", &raw.engine_idle_kill_ms),
            ("ENGINE_WARN_MS", &raw.engine_warn_ms),
            ("ENGINE_STUCK_WALL_MS", &raw.engine_stuck_wall_ms),
            ("ENGINE_VIEWER_MAX_MS", &raw.engine_viewer_max_ms),
        ] {
            if let Some(s) = v {
                if let Some(d) = crate::core::units::parse_duration(s).filter(|d| d.bare) {
                    if (1..60_000).contains(&d.ms) {
                        notes.push(format!(
                            "CCS_{var}={} is {} ms (a bare number is milliseconds): write {}s if you meant seconds",
                            s.trim(),
                            d.ms,
                            d.ms
                        ));
                    }
                }
            }
        }
        let interval = ms("REAP_INTERVAL_MS", &raw.reap_interval_ms, 10)?.unwrap_or(30_000);
        let grace = ms("REAP_GRACE_MS", &raw.reap_grace_ms, 0)?.unwrap_or(5_000);
        let tmux_timeout = ms("TMUX_TIMEOUT_MS", &raw.tmux_timeout_ms, 100)?.unwrap_or(10_000);

        let socket = match (&raw.tmux_socket_path, &raw.tmux_socket) {
            (Some(p), _) => Socket::Path(PathBuf::from(p)),
            (None, Some(n)) if n.contains('/') => {
                return Err(err(
                    "TMUX_SOCKET",
                    n,
                    "a socket name without '/' (use CCS_TMUX_SOCKET_PATH for a path)",
                ))
            }
            (None, Some(n)) => Socket::Name(n.clone()),
            (None, None) => Socket::Name("ccstudio".into()),
        };

        let prefix = raw.session_prefix.clone().unwrap_or_else(|| "ccs-".into());
        if !crate::core::policy::valid_id(&prefix)
            || prefix.len() > crate::core::policy::MAX_PREFIX_LEN
        {
            return Err(err(
                "SESSION_PREFIX",
                &prefix,
                "a non-empty prefix of letters, digits, '_' and '-', at most 64 bytes",
            ));
        }

        let activity_files = raw
            .activity_files
            .as_deref()
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default();

        let state_dir = match (&raw.reap_state_dir, state_base) {
            (Some(d), _) => PathBuf::from(d),
            (None, Some(base)) => base.join("ccs-reap"),
            (None, None) => {
                return Err(err(
                    "REAP_STATE_DIR",
                    "",
                    "a directory (neither XDG_STATE_HOME nor HOME is set)",
                ))
            }
        };

        let reap_without_cid =
            flag("ENGINE_REAP_WITHOUT_CID", &raw.engine_reap_without_cid)?.unwrap_or(false);

        // CCS_LOG, else RUST_LOG (the convention of Rust programs), else info.
        let (log_var, log_filter) = match (&raw.log, rust_log) {
            (Some(l), _) => ("CCS_LOG", l.clone()),
            (None, Some(l)) => ("RUST_LOG", l),
            (None, None) => ("CCS_LOG", "info".into()),
        };
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&log_filter) {
            return Err(ConfigError {
                var: log_var.into(),
                value: log_filter,
                expected: format!("a log filter such as info or ccs_reap=debug ({e})"),
            });
        }
        let log_format = match raw.log_format.as_deref().map(str::trim) {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(o) => return Err(err("LOG_FORMAT", o, "text or json")),
        };

        let mem_high = match &raw.engine_mem_high {
            None => None,
            Some(s) => Some(crate::core::units::parse_mem_threshold(s).map_err(|e| {
                size_err(
                    "ENGINE_MEM_HIGH",
                    s,
                    e,
                    "a size such as 800M, 12G (binary units), or a percentage such as 85%",
                )
            })?),
        };
        let max_idle = match &raw.engine_max_idle {
            None => None,
            Some(s) => Some(
                s.trim()
                    .parse::<usize>()
                    .map_err(|_| err("ENGINE_MAX_IDLE", s, "a whole number of sessions"))?,
            ),
        };
        let min_idle_ms = ms("ENGINE_MIN_IDLE_MS", &raw.engine_min_idle_ms, 0)?.unwrap_or(60_000);
        let mem_cgroup = match &raw.engine_mem_cgroup {
            None => None,
            Some(s) => {
                let d = PathBuf::from(s.trim());
                match crate::adapters::memory::cgroup_dir(&d) {
                    Some(src) if crate::adapters::memory::read(&src).is_some() => Some(d),
                    _ => {
                        return Err(err(
                            "ENGINE_MEM_CGROUP",
                            s,
                            "a readable memory cgroup directory (with memory.current, or memory.usage_in_bytes)",
                        ))
                    }
                }
            }
        };
        let session_mem_max = match &raw.engine_session_mem_max {
            None => None,
            Some(s) => Some(crate::core::units::parse_mem_size(s).map_err(|e| {
                size_err(
                    "ENGINE_SESSION_MEM_MAX",
                    s,
                    e,
                    "a size such as 1500M or 2G (binary units; the memory of one session's processes)",
                )
            })?),
        };
        let warn_ms = ms("ENGINE_WARN_MS", &raw.engine_warn_ms, 0)?.filter(|&n| n > 0);
        let hook = match &raw.reap_hook {
            None => None,
            Some(s) => {
                use std::os::unix::fs::PermissionsExt;
                let p = PathBuf::from(s.trim());
                let ok = p.is_absolute()
                    && std::fs::metadata(&p)
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
                if !ok {
                    return Err(err(
                        "REAP_HOOK",
                        s,
                        "the absolute path of an executable file (it is run directly, never through a shell)",
                    ));
                }
                Some(p)
            }
        };
        let hook_timeout =
            ms("REAP_HOOK_TIMEOUT_MS", &raw.reap_hook_timeout_ms, 1)?.unwrap_or(5_000);
        let mem_psi = match &raw.engine_mem_psi {
            None => None,
            Some(s) => Some(
                s.trim()
                    .trim_end_matches('%')
                    .parse::<f64>()
                    .ok()
                    .filter(|p| *p > 0.0 && *p <= 100.0)
                    .ok_or_else(|| {
                        err(
                            "ENGINE_MEM_PSI",
                            s,
                            "a share of time stalled on memory (PSI some avg10), above 0 and at most 100, such as 10",
                        )
                    })?,
            ),
        };
        let metrics_addr = match &raw.metrics_addr {
            None => None,
            Some(s) => Some(
                s.trim()
                    .parse::<SocketAddr>()
                    .map_err(|_| err("METRICS_ADDR", s, "an address such as 127.0.0.1:9464"))?,
            ),
        };

        let stuck_wall_ms =
            ms("ENGINE_STUCK_WALL_MS", &raw.engine_stuck_wall_ms, 0)?.filter(|&n| n > 0);
        let stuck_idle_ms =
            ms("ENGINE_STUCK_IDLE_MS", &raw.engine_stuck_idle_ms, 0)?.filter(|&n| n > 0);
        let reap_stuck = flag("ENGINE_REAP_STUCK", &raw.engine_reap_stuck)?.unwrap_or(false);
        let orphan_viewers = match raw.engine_orphan_viewers.as_deref().map(str::trim) {
            None | Some("count") => OrphanViewers::Count,
            Some("ignore") => OrphanViewers::Ignore,
            Some(o) => return Err(err("ENGINE_ORPHAN_VIEWERS", o, "count or ignore")),
        };
        let viewer_max_ms =
            ms("ENGINE_VIEWER_MAX_MS", &raw.engine_viewer_max_ms, 0)?.filter(|&n| n > 0);
        let reap_exited = flag("ENGINE_REAP_EXITED", &raw.engine_reap_exited)?.unwrap_or(true);

        let audit_max_bytes = match &raw.audit_max_bytes {
            None => crate::adapters::state::DEFAULT_AUDIT_MAX_BYTES,
            Some(s) => crate::core::units::parse_size(s).ok_or_else(|| {
                err(
                    "AUDIT_MAX_BYTES",
                    s,
                    "a size above 0 such as 10M, 512K, 1G or 1048576",
                )
            })?,
        };
        let audit_keep = match &raw.audit_keep {
            None => crate::adapters::state::DEFAULT_AUDIT_KEEP,
            Some(s) => s
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=crate::adapters::state::MAX_AUDIT_KEEP).contains(n))
                .ok_or_else(|| {
                    err(
                        "AUDIT_KEEP",
                        s,
                        &format!(
                            "a whole number of rotated files, from 1 to {}",
                            crate::adapters::state::MAX_AUDIT_KEEP
                        ),
                    )
                })?,
        };

        Ok(Config {
            policy: Policy {
                idle_kill_ms,
                reap_without_cid,
                mem_high,
                mem_psi,
                session_mem_max,
                warn_ms,
                max_idle,
                min_idle_ms,
                stuck_wall_ms,
                stuck_idle_ms,
                reap_stuck,
                orphan_viewers,
                viewer_max_ms,
                reap_exited,
            },
            interval: Duration::from_millis(interval),
            grace: Duration::from_millis(grace),
            socket,
            prefix,
            activity_files,
            state_dir,
            log_filter,
            log_format,
            tmux_timeout: Duration::from_millis(tmux_timeout),
            metrics_addr,
            mem_cgroup,
            hook,
            hook_timeout: Duration::from_millis(hook_timeout),
            audit_max_bytes,
            audit_keep,
            notes,
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
    use crate::core::policy::MemThreshold;
    use std::path::Path;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_vars(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            Some(PathBuf::from("/st")),
        )
    }

    /// The documented settings are exactly the ones read: one added to `Raw` without its
    /// documentation (or the reverse) fails here.
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

    /// The one list of settings is `Raw`'s fields; each is documented.
    #[test]
    fn known_variables_are_the_settings_and_each_is_documented() {
        let known = known_vars();
        assert_eq!(known.len(), 30, "{known:?}");
        assert!(known.iter().any(|k| k == "CCS_ENGINE_IDLE_KILL_MS"));
        assert!(known.iter().any(|k| k == "CCS_AUDIT_KEEP"));
        let docs = include_str!("../docs/configuration.md");
        for k in &known {
            assert!(
                docs.contains(&format!("`{k}`")),
                "{k} is not in docs/configuration.md"
            );
        }
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", "abc"), 0);
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
