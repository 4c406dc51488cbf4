//! ccs-reap: an opt-in reaper of idle Claude Code chat sessions on a tmux server.
//!
//! Data flows one way: [`tmux`] and [`procs`] read the world into a [`policy::Snapshot`];
//! [`policy::decide`] (pure) turns it into decisions; [`reaper`] carries them out and writes the
//! audit line through [`state`].

pub mod activity;
pub mod claude_hook;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod events;
pub mod hooks;
pub mod memory;
pub mod metrics;
pub mod notify;
pub mod observe;
pub mod policy;
pub mod procs;
pub mod reap_hook;
pub mod reaper;
pub mod report;
pub mod state;
pub mod sweep;
pub mod teardown;
pub mod tmux;
pub mod tmux_version;
pub mod units;
