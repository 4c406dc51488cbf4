//! The engine: the stages that observe, decide (through the core) and act (through the adapters).

pub mod agent_hook;
pub mod agent_status;
pub mod claude_hook;
pub mod commands;
pub mod context;
pub mod daemon;
pub mod doctor;
pub mod hook_common;
pub mod inflight;
pub(crate) mod lease_clock;
pub mod observe;
pub(crate) mod own_pane;
pub mod ownership;
pub(crate) mod record;
pub mod resume;
pub mod room;
pub mod sweep;
pub mod teardown;
pub mod watching;
