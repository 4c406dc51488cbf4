//! The version of what ccs-reap writes for others to read.

/// The version of the JSON schema shared by `status --json`, `--once --json`, `reap --json` and
/// the audit log's lines (docs/files.md): durations end in `_ms`, points in time are RFC 3339
/// strings ending in `_at` (or `at`), a tmux session id is the string `$N`. 2 is the first
/// versioned one; lines without the field are of 0.x before it (`tmux_id` already `$N` there,
/// `status` had numbers).
pub const SCHEMA_VERSION: u32 = 2;
