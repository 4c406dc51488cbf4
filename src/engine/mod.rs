//! The engine: the stages that observe, decide (through the core) and act (through the adapters).

pub mod agent_hook;
pub mod agent_status;
pub mod claude_hook;
pub mod commands;
pub mod context;
pub mod daemon;
pub mod doctor;
pub mod inflight;
pub mod observe;
pub(crate) mod observer;
pub(crate) mod own_pane;
pub mod ownership;
pub(crate) mod record;
pub mod sweep;
pub mod teardown;
pub mod watching;
pub mod wayback;
