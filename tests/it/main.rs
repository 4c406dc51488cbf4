//! The integration tests, as one test binary (one build, one link): each module is what was a
//! file of its own under tests/. `cargo test --test it` runs them all, `cargo test --test it
//! <module>::` one module (`cargo test --test it teardown::`). Every module runs the real
//! `ccs-reap` binary against a private tmux server ([`common`]). The model of the handoff protocol
//! is a target of its own (`tests/model.rs`, `cargo test --test model`): it is pure, runs no tmux.
//! The agent CLIs' end-to-end modules (`claude_e2e`, `claude_resume`, `studio_e2e`, `agents_e2e`)
//! are built only with the cargo feature `e2e` (`cargo test --features e2e`, as `scripts/test`
//! runs them): they need the CLIs pinned in `tests/e2e` (`npm ci --prefix tests/e2e`).

mod common;

mod agents_cli;
#[cfg(feature = "e2e")]
mod agents_e2e;
mod audit;
mod batch_files;
#[cfg(feature = "e2e")]
mod claude_e2e;
mod claude_hook;
mod claude_plain;
#[cfg(feature = "e2e")]
mod claude_resume;
mod cli;
mod config;
mod crash;
mod documented;
mod exactly;
mod faults;
mod features;
mod fencing;
mod first_sight;
mod handoff;
mod hardening;
mod hostile_inputs;
mod hostile_paths;
mod house;
mod house_shape;
mod identity;
mod late_born;
mod memory;
mod operator;
mod ops;
mod planted_files;
mod policies;
mod pressure;
mod prometheus;
mod records;
mod room;
mod room_checks;
mod scale;
mod shared_pane;
mod sidecar;
mod snapshots;
mod spawn_cli;
mod status_plain;
#[cfg(feature = "e2e")]
mod studio_e2e;
mod sweep;
mod systemd;
mod teardown;
mod tmux_version;
mod truth;
mod user_files;
