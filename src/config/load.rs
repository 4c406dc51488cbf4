//! Where the settings come from: the settings file and the environment over it, each value
//! through its row of [`VARS`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{file, log, Config, ConfigError, Draft, Effective, Socket, ValueSource, VARS};

/// `CCS_` variables that are not settings, and never warned about: the reap token tmux sets in a
/// session's environment, the studio's own `CCS_CFG`, the npm package's `CCS_REAP_BINARY` (its
/// documented override of the binary), `CCS_REAP_AGENT` (how a command names its agent, in the
/// environment of every agent `spawn --agent` starts and so of its hooks), and the switches of the
/// project's own tests and scripts. `CCS_REAP_ENV_ALLOW` adds more.
const NOT_SETTINGS: &[&str] = &[
    crate::adapters::tmux::TOKEN_VAR,
    "CCS_CFG",
    "CCS_REAP_BINARY",
    "CCS_REAP_AGENT",
    "CCS_REAP_BIN",
    "CCS_SKIP_CGROUP_TESTS",
    "CCS_SKIP_PROMETHEUS",
    "CCS_E2E_SKIP",
    "CCS_E2E_TIMEOUT",
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
            var("USER").as_deref(),
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
    source: ValueSource,
}

impl ValueSource {
    /// `FILE:LINE` for a value from the settings file, for messages.
    fn place(&self) -> Option<String> {
        match self {
            ValueSource::File { .. } => Some(self.to_string()),
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
            let source = ValueSource::File {
                path: f.path.clone(),
                line: e.line,
            };
            (e.key.clone(), e.value.clone(), source)
        })
    });
    let from_env = vars
        .into_iter()
        .map(|(k, v)| (k, v, ValueSource::Environment));
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
                source: ValueSource::Default,
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

impl Config {
    /// Read the settings file ([`SettingsFile::load`], `--config FILE` given as `flag`) and the
    /// process environment, which wins over it.
    pub fn load(flag: Option<&Path>) -> Result<Config, ConfigError> {
        let file = SettingsFile::load(flag)?;
        Self::from_sources(std::env::vars(), file.as_ref(), default_state_dir())
    }

    /// [`Config::load`] with no `--config`.
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::load(None)
    }

    /// Parse from an explicit list of variables (tests use this; `default_dir` is the state dir
    /// when `CCS_REAP_STATE_DIR` is unset, [`default_state_dir`]'s answer).
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
        default_dir: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        Self::from_sources(vars, None, default_dir)
    }

    /// Parse from the environment `vars` over the settings file `file`.
    pub fn from_sources(
        vars: impl IntoIterator<Item = (String, String)>,
        file: Option<&SettingsFile>,
        default_dir: Option<PathBuf>,
    ) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        // Inside tmux with no socket configured: that server, for every command (its socket is
        // the first field of `TMUX`, as tmux sets it for every process under a pane).
        let inside = vars
            .iter()
            .find(|(k, _)| k == "TMUX")
            .and_then(|(_, v)| crate::core::policy::socket_of_tmux_env(v))
            .map(PathBuf::from);
        let given_vars = gather(vars, file);
        let (mut d, sources) = apply(&given_vars)?;
        let mut notes = unknown_notes(&given_vars, &d.allow);
        notes.append(&mut d.notes);
        let socket = match (d.socket_path.take(), d.socket_name.take()) {
            (Some(p), _) => Socket::Path(p),
            (None, Some(n)) if n.contains('/') => {
                return Err(ConfigError {
                    var: "CCS_TMUX_SOCKET".into(),
                    at: given(&given_vars, "CCS_TMUX_SOCKET").and_then(|g| g.source.place()),
                    value: n,
                    expected: "a socket name without '/' (use CCS_TMUX_SOCKET_PATH for a path)"
                        .into(),
                })
            }
            (None, Some(n)) => Socket::Name(n),
            (None, None) => match &inside {
                Some(p) => Socket::Path(p.clone()),
                None => Socket::Name("ccstudio".into()),
            },
        };
        let socket_from_tmux = inside.is_some()
            && !sources.iter().any(|e| {
                matches!(e.name, "CCS_TMUX_SOCKET" | "CCS_TMUX_SOCKET_PATH") && e.value.is_some()
            });
        let state_dir = match (d.state_dir.take(), default_dir) {
            (Some(dir), _) => dir,
            (None, Some(dir)) => dir,
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
            None => rust_log(&given_vars)?,
        };
        let cfg = Config {
            policy: d.policy,
            interval: Duration::from_millis(d.interval_ms),
            grace: Duration::from_millis(d.grace_ms),
            socket,
            socket_from_tmux,
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
            tombstone_max_age: Duration::from_millis(d.tombstone_max_age_ms),
            notes,
            file: file.map(|f| f.path.clone()),
            sources,
        };
        cfg.check_lease()?;
        Ok(cfg)
    }
}

/// The state dir when `CCS_REAP_STATE_DIR` is unset: `/var/lib/ccs-reap/<user>` when it is a
/// directory of this user's (the template unit's `StateDirectory=` made it, so the daemon of
/// `ccs-reap@<user>` and that user's own calls find the same one), else
/// `$XDG_STATE_HOME/ccs-reap`, else `$HOME/.local/state/ccs-reap`.
pub fn default_state_dir() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let me = rustix::process::geteuid().as_raw();
    let user = std::env::var("USER").ok();
    if let Some(dir) = instance_state_dir(user.as_deref()) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == me) {
            return Some(dir);
        }
    }
    nonempty("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .map(|base| base.join("ccs-reap"))
}

/// `/var/lib/ccs-reap/<user>` for a user name that stays inside it.
pub fn instance_state_dir(user: Option<&str>) -> Option<PathBuf> {
    user.filter(|u| file::plain_user_name(u))
        .map(|u| PathBuf::from(format!("/var/lib/ccs-reap/{u}")))
}
