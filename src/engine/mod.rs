//! The engine: the stages that observe, decide (through the core) and act (through the adapters).

pub mod agent_hook;
pub mod agent_spawn;
pub mod claude_hook;
pub mod commands;
pub mod context;
pub mod daemon;
pub mod observe;
pub mod sweep;
pub mod teardown;
