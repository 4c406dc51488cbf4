//! The exit codes, as the contract gives them (docs/commands.md), shared by the binary and the
//! tests.

/// Done (also: no tmux server at the socket, warned).
pub const OK: u8 = 0;
/// A reap failed or was refused, tmux could not be read, or an input was bad.
pub const FAILED: u8 = 1;
/// The configuration is refused, or the tmux is older than the minimum.
pub const CONFIG: u8 = 2;
/// Another reaper holds this socket's lock (the daemon).
pub const LOCKED: u8 = 3;
/// `turn`, `pin`: the session is gone or was reaped; respawn it.
pub const RESPAWN: u8 = 4;
/// `room`, `spawn`: no room for a new chat, only chats that may not be taken are left.
pub const NO_ROOM: u8 = 5;
/// `claude-hook`: the prompt is blocked (Claude Code's own code for "block, show stderr").
pub const BLOCKED: u8 = 2;
