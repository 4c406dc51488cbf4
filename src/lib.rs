//! ccs-reap: an opt-in reaper of idle Claude Code chat sessions on a tmux server.
//!
//! Data flows one way: [`tmux`] and [`procs`] read the world into a [`policy::Snapshot`];
//! [`policy::decide`] (pure) turns it into decisions; [`sweep`] hands the reaps to [`teardown`],
//! which carries them out and writes the audit line through [`state`].
//!
//! The map, one line per module, from the top of the house down:
//!
//! - [`daemon`]: the loop, its signals, the batches it owns, the metrics endpoint.
//! - [`sweep`]: one sweep, as named steps (collect exits, recover, clear stale marks, stamp, warn,
//!   choose, start the batch, report).
//! - [`commands`]: the studio's commands (`turn`, `spawn`, `pin`, `reap <id>`) and their error type.
//! - [`claude_hook`]: Claude Code's own hooks (`claude-hook`, `claude-settings`).
//! - [`observe`]: the world as one `Observation` (tmux, activity files, /proc where needed).
//! - [`teardown`]: a batch of reaps, from the mark to the audit line, and a dead reaper's recovery.
//! - [`reap_hook`]: runs `CCS_REAP_HOOK` (`before` may veto, `after` is told).
//! - [`policy`]: the pure core: `decide`, the re-check, the fence of reap marks, ids and cids.
//! - [`context`]: the context the stages share (config, tmux handle, state dir, metrics, reaps in flight).
//! - [`tmux`]: the only module that runs tmux (listing, literal arguments, the version check).
//! - [`procs`]: the process table: membership of a session, pinning, signals, memory.
//! - [`state`]: the state dir: audit log (and its follower, `events`), tombstones, journals, lock.
//! - [`activity`]: the studio's liveness registries (`CCS_ACTIVITY_FILES`).
//! - [`memory`]: which memory the pressure rules watch, and reading it.
//! - [`report`]: what people and `--json` read (`status`, the `--once` summary).
//! - [`metrics`]: Prometheus metrics and `/healthz`.
//! - [`systemd`]: systemd's service notifications (`READY=1`, `WATCHDOG=1`, `STOPPING=1`).
//! - [`exit`]: the exit codes, shared by the binary and the tests.
//! - [`config`]: the settings, from the environment, checked once.
//! - [`units`]: durations and memory sizes, parsed.
//! - [`clock`]: time stamps.

pub mod activity;
pub mod agents;
pub mod claude_hook;
pub mod clock;
pub mod commands;
pub mod config;
pub mod context;
pub mod daemon;
pub mod exit;
pub mod memory;
pub mod metrics;
pub mod observe;
pub mod policy;
pub mod procs;
pub mod reap_hook;
pub mod report;
pub mod state;
pub mod sweep;
pub mod systemd;
pub mod teardown;
pub mod tmux;
pub mod units;
