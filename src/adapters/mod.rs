//! The adapters: each talks to one thing outside (tmux, /proc, cgroups, files, systemd, the clock)
//! and depends on the core only.

pub mod activity;
pub mod agent_proc;
pub mod clock;
pub mod identity;
pub mod memory;
pub mod metrics;
pub mod proc_reads;
pub mod procs;
pub mod program;
pub mod psi;
pub mod reap_hook;
pub mod state;
pub mod systemd;
pub mod tmux;
pub mod user_file;
