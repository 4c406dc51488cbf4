//! ccs-reap: an opt-in reaper of idle Claude Code chat sessions on a tmux server.
//!
//! Six rooms, and imports run one way only, down this list (`tests/it/house.rs` reads `src/`
//! and fails on an import against the direction, a circle between the modules of the core, the
//! adapters or the engine, I/O or a clock read named in the core, or a file over 500 lines of
//! code):
//!
//! - [`cli`] imports anything below; `main.rs` calls [`cli::main`] and nothing else.
//! - [`engine`] imports [`config`], [`adapters`], [`agents`] and [`core`].
//! - [`config`] imports [`adapters`] and [`core`].
//! - [`adapters`]: each imports the [`core`] and itself only, never another adapter; what one
//!   needs of another is passed in by the engine (a value or a function).
//! - [`agents`] imports the [`core`] only, and is pure as the core is.
//! - [`core`] imports nothing outside itself: no I/O, no clock read, runs nothing.
//!
//! A sweep: [`engine::observe`] reads the world through [`adapters::tmux`] and
//! [`adapters::procs`] into a [`core::policy::Snapshot`]; [`core::policy::decide`] (pure) turns it
//! into decisions; [`engine::sweep`] hands the reaps to [`engine::teardown`], which re-checks,
//! fences, signals and writes the audit line, the tombstone and the journal through
//! [`adapters::state`].
//!
//! The map, one line per module, from the top of the house down (drawn, with a reap's path, in
//! docs/architecture.md, from docs/architecture.dot):
//!
//! - [`cli`]: the command line: [`cli::main`] (parse, set up, run, exit code), `args` (clap's
//!   definition), `man` (man page and completions), `logging`, `output` (stdout, JSON, answers),
//!   `claude` (`claude-hook`, `claude-settings`), `agents` (`hook --agent`, `hook-settings`),
//!   [`cli::render`] (what people read: the `status`
//!   table, the `--once` lines), [`cli::exit`] (the exit codes, shared with the tests).
//! - [`engine`]: the stages.
//!   - [`engine::daemon`]: the loop, its signals, the batches it owns, the metrics endpoint, the
//!     memory watcher between sweeps (`daemon::watch`; `daemon::wake`: what wakes it besides its
//!     clock).
//!   - [`engine::sweep`]: one sweep, as named steps (collect exits, recover, clear stale marks,
//!     stamp, warn, choose, start the batch, report); `sweep::lost`: chats lost with their server.
//!   - [`engine::commands`]: the studio's commands (`turn`, `spawn`, `pin`, `reap <id>`) and their
//!     error type.
//!   - [`engine::claude_hook`]: Claude Code's own hooks (`claude-hook`, `claude-settings`).
//!   - [`engine::agent_hook`]: any agent's hook by its descriptor (`hook --agent`), and its own
//!     hook settings (`hook-settings`).
//!   - [`engine::observe`]: the world as one `Observation` (tmux, activity files, /proc where
//!     needed).
//!   - [`engine::teardown`]: a batch of reaps, from the mark to the audit line, as one stage
//!     machine (`stage`: each reap's stage and what it gives back; `recheck`: the re-check on
//!     fresh data; `write`: journal and tombstone; `fence`; `signal`; `unwind`: a panic), through
//!     two ports (`ports`: tmux, the process table; a recording stand-in in its tests), and a
//!     dead reaper's recovery.
//!   - [`engine::resume`]: the way back: `spawn` (the resume planned by the chat's own agent,
//!     verified), `resume`, `forget`, tombstones aging out.
//!   - `engine::record`: the one path of every audit line (the audit log, the metrics).
//!   - [`engine::agent_status`]: an agent's own status file (Claude Code's), for turns that end
//!     without a hook.
//!   - [`engine::context`]: the handles the stages share (config, tmux handle, state dir, metrics,
//!     known chats, and the three below), no logic of its own.
//!   - [`engine::ownership`]: who owns a reap mark or a journal, judged from here (this
//!     process's identity, its live tokens, the observer of marks it cannot check, blindness).
//!   - [`engine::inflight`]: the sessions whose teardown is in flight here, and the guard that
//!     takes a batch out of the set.
//!   - [`engine::watching`]: what the daemon watches and reports (the memory watched, the PSI
//!     stall, the activity files' problem).
//! - [`config`]: the settings, from one table (`config::table`), read from the settings file and
//!   the environment (`config::load`, `config::file`), checked once; `config::show` prints them.
//! - [`adapters`]: one each for what is outside.
//!   - [`adapters::tmux`]: the only module that runs tmux (the socket, the listing, literal
//!     arguments, the version check).
//!   - [`adapters::procs`]: the process table: membership of a session, pinning, signals, memory.
//!   - [`adapters::memory`]: which memory the pressure rules watch (a cgroup or the host), read.
//!   - [`adapters::psi`]: memory pressure by event: a PSI trigger on `memory.pressure`, a v1
//!     cgroup's v2 twin.
//!   - [`adapters::state`]: the state dir: audit log (and its follower, `events`), tombstones,
//!     journals, known chats, the lock.
//!   - [`adapters::activity`]: the studio's liveness registries (`CCS_ACTIVITY_FILES`).
//!   - [`adapters::reap_hook`]: runs `CCS_REAP_HOOK` (`before` may veto, `after` is told).
//!   - [`adapters::systemd`]: systemd's service notifications (`READY=1`, `WATCHDOG=1`,
//!     `STOPPING=1`).
//!   - [`adapters::metrics`]: Prometheus metrics, and (`metrics::http`) `/metrics` and `/healthz`.
//!   - [`adapters::clock`]: this process's clock.
//! - [`agents`]: one descriptor per agent CLI (pure, over the core): Claude Code
//!   ([`agents::claude`]), Codex CLI ([`agents::codex`]), Gemini CLI ([`agents::gemini`]): how
//!   its id is learned, its hook events, how it resumes, where its transcripts and status files
//!   live (docs/agents.md).
//! - [`core`]: data and decisions.
//!   - [`core::policy`]: `decide`, the re-check, the fence of reap marks and their `Lease`, ids
//!     and cids, the world as data (`Session`, `Snapshot`, `Decision`).
//!   - [`core::protocol`]: a reap's steps in their one order (`Phase`), which the teardown and
//!     the model of the handoff both follow.
//!   - [`core::listing`]: tmux's listing as data (`Listing`), parsed from its text.
//!   - [`core::records`]: what is written down: `AuditLine`, `Tombstone`, `Journal`, a process's
//!     `Ident`.
//!   - [`core::reap_end`]: how a reap ends (`ReapEnd`, `Abort`, `Failure`) and the audit line
//!     built from that end.
//!   - [`core::known`]: the last known conversation of each chat, and the plan for those lost with
//!     their server.
//!   - [`core::report`]: what a sweep saw and did (`status`, `--once`), and its JSON.
//!   - [`core::schema`]: the version of the JSON that others read.
//!   - [`core::units`]: durations and memory sizes, parsed.
//!   - [`core::time`]: time stamps, formatted.
//!   - [`core::batch`]: batch files (a large batch's journals or tombstones, each chat's
//!     `<id>.json` a hard link to the file holding its record): their format and chunks.
//!   - [`core::capped`]: the one bounded read (settings, activity, state and user files, stdin).
//!   - [`core::compat`]: what earlier versions wrote that is still read, and how.

pub mod adapters;
pub mod agents;
pub mod cli;
pub mod config;
pub mod core;
pub mod engine;
