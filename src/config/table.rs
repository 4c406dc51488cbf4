//! The one table of settings: each row names a variable, its group, its default, one line of
//! help, and the parser that reads its value into a [`Draft`]. The parser, `--help`, the man
//! page, `ccs-reap config`, the docs check and the "did you mean" hint all read [`VARS`].

use std::path::PathBuf;

use crate::core::policy::{OrphanViewers, SharedSession, UnseenTurns};
use crate::core::units;

use super::parse::{
    audit_keep, env_allow, flag, hook, list, mem_cgroup, mem_psi, ms, ms_or_off, size_err, whole,
    Draft,
};
use super::LogFormat;

/// What one setting's parser gets wrong: what was expected instead (the variable and the value
/// are added by the caller).
pub type Expected = String;

/// One setting: its variable, the group it is listed under, its default, what it does, and how
/// its value is read.
#[derive(Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    pub group: &'static str,
    pub default: &'static str,
    pub help: &'static str,
    /// Reads a non-blank value into the draft; `Err` says what was expected.
    pub parse: fn(&mut Draft, &str) -> Result<(), Expected>,
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setting")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

const REAPING: &str = "Reaping";
const STUDIO: &str = "The studio";
const MEMORY: &str = "Memory pressure";
const STUCK: &str = "Stuck turns and viewers";
const STATE: &str = "State, logs, metrics";
const FILE: &str = "The settings file";

/// Every setting, in the order and groups of docs/configuration.md. A test checks that these are
/// the rows of the docs' tables; `--help`, the man page and `config` print them in this order.
pub const VARS: &[Setting] = &[
    Setting {
        name: "CCS_CONFIG",
        group: FILE,
        default: "$XDG_CONFIG_HOME/ccs-reap/env (else ~/.config/ccs-reap/env), else /etc/ccs-reap/$USER.env, else /etc/ccs-reap/env: the first that exists",
        help: "The settings file (KEY=value lines, as systemd's EnvironmentFile=); the environment wins over it; --config FILE wins over this.",
        parse: |d, s| {
            d.config_file = Some(PathBuf::from(s.trim()));
            Ok(())
        },
    },
    Setting {
        name: "CCS_REAP_ENV_ALLOW",
        group: FILE,
        default: "none (CCS_CFG is always allowed)",
        help: "Comma-separated CCS_* names (a trailing * for a prefix) that are not ccs-reap settings and draw no warning: the studio's own variables.",
        parse: env_allow,
    },
    Setting {
        name: "CCS_ENGINE_IDLE_KILL_MS",
        group: REAPING,
        default: "unset: off",
        help: "Idle time after which a session is reaped (reason idle).",
        parse: |d, s| {
            d.policy.idle_kill_ms = ms_or_off(d, "CCS_ENGINE_IDLE_KILL_MS", s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_REAP_WITHOUT_CID",
        group: REAPING,
        default: "0",
        help: "Also reap sessions whose conversation id is unknown (their history cannot be resumed).",
        parse: |d, s| {
            d.policy.reap_without_cid = flag(s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_UNSEEN_TURNS",
        group: REAPING,
        default: "keep",
        help: "A chat whose turns nothing reports (no @ccs_cid from a hook, the studio or spawn; no status file of its agent; no activity file): keep (state unseen), or output: idle since its pane's last output.",
        parse: |d, s| {
            d.policy.unseen_turns = match s.trim() {
                "keep" => UnseenTurns::Keep,
                "output" => UnseenTurns::Output,
                _ => return Err("keep or output".into()),
            };
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_SHARED_SESSION",
        group: REAPING,
        default: "keep",
        help: "A chat whose session holds more than its own recorded pane (a pane or window the user added): keep (state shared), or pane: judge and reap only the chat's pane (its process tree, then kill-pane of exactly that pane); the session and the rest stay, so has-session still finds it.",
        parse: |d, s| {
            d.policy.shared_session = match s.trim() {
                "keep" => SharedSession::Keep,
                "pane" => SharedSession::Pane,
                _ => return Err("keep or pane".into()),
            };
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_REAP_EXITED",
        group: REAPING,
        default: "1",
        help: "Clean up sessions whose panes have all exited, on the next sweep (when reaping is enabled; spawn cleans up such a session of its own id in any case).",
        parse: |d, s| {
            d.policy.reap_exited = flag(s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_REAP_INTERVAL_MS",
        group: REAPING,
        default: "30000",
        help: "Time between two sweeps of the daemon.",
        parse: |d, s| {
            d.interval_ms = ms(s, 10)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_REAP_GRACE_MS",
        group: REAPING,
        default: "5000",
        help: "Time between SIGTERM and SIGKILL in a teardown (it ends early when every process is gone).",
        parse: |d, s| {
            d.grace_ms = ms(s, 0)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_TMUX_SOCKET",
        group: STUDIO,
        default: "ccstudio",
        help: "The tmux server, as tmux -L <name> (its path is $TMUX_TMPDIR or /tmp, then tmux-<uid>/<name>).",
        // Checked once the path is known: CCS_TMUX_SOCKET_PATH wins, and then this is unused.
        parse: |d, s| {
            d.socket_name = Some(s.into());
            Ok(())
        },
    },
    Setting {
        name: "CCS_TMUX_SOCKET_PATH",
        group: STUDIO,
        default: "unset",
        help: "The tmux server, as tmux -S <path>.",
        parse: |d, s| {
            d.socket_path = Some(absolute(s)?);
            Ok(())
        },
    },
    Setting {
        name: "CCS_SESSION_PREFIX",
        group: STUDIO,
        default: "ccs-",
        help: "Sessions named <prefix><id> are the chats; nothing else is touched.",
        parse: |d, s| {
            if !crate::core::policy::valid_id(s) || s.len() > crate::core::policy::MAX_PREFIX_LEN {
                return Err("a non-empty prefix of letters, digits, '_' and '-', at most 64 bytes".into());
            }
            d.prefix = s.into();
            Ok(())
        },
    },
    Setting {
        name: "CCS_ACTIVITY_FILES",
        group: STUDIO,
        default: "none",
        help: "The studio's liveness registries (activity-files.md).",
        parse: |d, s| {
            d.activity_files = list(s).into_iter().map(PathBuf::from).collect();
            Ok(())
        },
    },
    Setting {
        name: "CCS_TMUX_TIMEOUT_MS",
        group: STUDIO,
        default: "10000",
        help: "How long one tmux call (or the reading of the activity files) may take; past it, the sweep keeps every session.",
        parse: |d, s| {
            d.tmux_timeout_ms = ms(s, 100)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_MEM_HIGH",
        group: MEMORY,
        default: "unset: off",
        help: "Reap idle sessions, oldest idle first, while memory used (the working set: usage less inactive page cache, docker.md) is above it (reason memory).",
        parse: |d, s| {
            let t = units::parse_mem_threshold(s).map_err(|e| {
                size_err(e, true, "a size such as 800M, 12G (binary units), or a percentage such as 85%")
            })?;
            d.policy.mem_high = Some(t);
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_MAX_IDLE",
        group: MEMORY,
        default: "unset: off",
        help: "Keep at most this many idle sessions; the oldest beyond are reaped (reason max-idle).",
        parse: |d, s| {
            d.policy.max_idle = Some(whole(s, "a whole number of sessions")?);
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_MIN_IDLE_MS",
        group: MEMORY,
        default: "60000",
        help: "The floor: the pressure rules never take a session idle for less.",
        parse: |d, s| {
            d.policy.min_idle_ms = ms(s, 0)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_STUCK_WALL_MS",
        group: STUCK,
        default: "unset: never",
        help: "A turn running at least this long is stuck.",
        parse: |d, s| {
            d.policy.stuck_wall_ms = ms_or_off(d, "CCS_ENGINE_STUCK_WALL_MS", s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_STUCK_IDLE_MS",
        group: STUCK,
        default: "unset: never",
        help: "A running turn whose session printed nothing for this long is stuck.",
        parse: |d, s| {
            d.policy.stuck_idle_ms = Some(ms(s, 0)?).filter(|&n| n > 0);
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_REAP_STUCK",
        group: STUCK,
        default: "0",
        help: "Reap stuck sessions (reason stuck); otherwise they are only reported.",
        parse: |d, s| {
            d.policy.reap_stuck = flag(s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_ORPHAN_VIEWERS",
        group: STUCK,
        default: "count",
        help: "ignore: a control-mode client whose parent process is gone is no viewer.",
        parse: |d, s| {
            d.policy.orphan_viewers = match s.trim() {
                "count" => OrphanViewers::Count,
                "ignore" => OrphanViewers::Ignore,
                _ => return Err("count or ignore".into()),
            };
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_VIEWER_MAX_MS",
        group: STUCK,
        default: "unset: always counts",
        help: "A client attached at least this long with no input is no viewer.",
        parse: |d, s| {
            d.policy.viewer_max_ms = ms_or_off(d, "CCS_ENGINE_VIEWER_MAX_MS", s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_REAP_STATE_DIR",
        group: STATE,
        default: "/var/lib/ccs-reap/$USER if it is a directory of this user's (the system unit's), else $XDG_STATE_HOME/ccs-reap, else $HOME/.local/state/ccs-reap",
        help: "Audit log, lock, tombstones, journals (files.md).",
        parse: |d, s| {
            d.state_dir = Some(absolute(s)?);
            Ok(())
        },
    },
    Setting {
        name: "CCS_AUDIT_MAX_BYTES",
        group: STATE,
        default: "10M (10 MiB)",
        help: "reaped.jsonl is rotated before a line would take it past this (files.md).",
        parse: |d, s| {
            d.audit_max_bytes = units::parse_size(s)
                .ok_or("a size above 0 such as 10M, 512K, 1G or 1048576")?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_AUDIT_KEEP",
        group: STATE,
        default: "5",
        help: "How many rotated audit files are kept: reaped.jsonl.1 (newest) ... reaped.jsonl.<N>.",
        parse: audit_keep,
    },
    Setting {
        name: "CCS_REAP_TOMBSTONE_MAX_AGE",
        group: STATE,
        default: "30d",
        help: "A tombstone not used for this long (reckoned from its file's time) is removed, with an audit line (aged-out); checked at start and once an hour.",
        parse: |d, s| {
            d.tombstone_max_age_ms = ms(s, 60_000)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_LOG",
        group: STATE,
        default: "RUST_LOG if set, else info",
        help: "What is logged, on stderr: a level (journalctl's names too: warning, err, notice, crit) or a RUST_LOG filter.",
        parse: |d, s| {
            d.log = Some(super::log::normalize(s)?);
            Ok(())
        },
    },
    Setting {
        name: "CCS_LOG_FORMAT",
        group: STATE,
        default: "text",
        help: "Log line format, on stderr.",
        parse: |d, s| {
            d.log_format = match s.trim() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => return Err("text or json".into()),
            };
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_MEM_CGROUP",
        group: STATE,
        default: "unset: the tmux server's memory cgroup, else ccs-reap's own, else /proc/meminfo",
        help: "The memory the pressure rules and the watcher read.",
        parse: mem_cgroup,
    },
    Setting {
        name: "CCS_ENGINE_MEM_PSI",
        group: STATE,
        default: "unset: off",
        help: "When the memory stall (PSI some avg10 of the watched cgroup, else of the host) reaches it, a sweep takes the oldest idle session past the floor, even under CCS_ENGINE_MEM_HIGH.",
        parse: mem_psi,
    },
    Setting {
        name: "CCS_ENGINE_SESSION_MEM_MAX",
        group: STATE,
        default: "unset: off",
        help: "An idle chat past the floor whose processes hold more is reaped (reason bloat).",
        parse: |d, s| {
            let b = units::parse_mem_size(s).map_err(|e| {
                size_err(e, false, "a size such as 1500M or 2G (binary units; the memory of one session's processes)")
            })?;
            d.policy.session_mem_max = Some(b);
            Ok(())
        },
    },
    Setting {
        name: "CCS_ENGINE_WARN_MS",
        group: STATE,
        default: "unset: off",
        help: "A warned audit event this long before an idle reap, once per idle period.",
        parse: |d, s| {
            d.policy.warn_ms = ms_or_off(d, "CCS_ENGINE_WARN_MS", s)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_REAP_HOOK",
        group: STATE,
        default: "unset: off",
        help: "Run as <program> before / <program> after around each reap (commands.md); a before that cannot be run at reap time (deleted, no longer executable) vetoes the reap.",
        parse: hook,
    },
    Setting {
        name: "CCS_REAP_HOOK_TIMEOUT_MS",
        group: STATE,
        default: "5000",
        help: "A hook running longer is killed with its process group; the reap goes on.",
        parse: |d, s| {
            d.hook_timeout_ms = ms(s, 1)?;
            Ok(())
        },
    },
    Setting {
        name: "CCS_METRICS_ADDR",
        group: STATE,
        default: "unset: off",
        help: "The daemon serves Prometheus /metrics and /healthz there (/healthz: 200 only while the last sweep read the tmux server at the socket, else 503 with the reason).",
        parse: |d, s| {
            d.metrics_addr = Some(whole(s, "an address such as 127.0.0.1:9464")?);
            Ok(())
        },
    },
];

/// The row of a variable.
pub fn setting(name: &str) -> Option<&'static Setting> {
    VARS.iter().find(|s| s.name == name)
}

/// A path setting: absolute only. A relative one would name another place for every caller
/// whose working directory differs (the daemon, cron, the hooks in each chat's directory).
fn absolute(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err("an absolute path (a relative one would mean another place for each caller's working directory: the daemon, cron, the hooks)".into())
    }
}
