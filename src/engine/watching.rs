//! What the daemon watches between sweeps and reports ([`Watching`]): the memory the pressure
//! rules watch, the stall a PSI trigger reported, and why the activity files could not be read.

use parking_lot::Mutex;
use std::collections::HashSet;

use crate::adapters::activity;
use crate::adapters::memory::{self, Watched};
use crate::config::Config;

/// Why the activity files give no liveness this look.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivityError {
    /// A file could not be read, or not in time, or was refused (the adapter's words).
    #[error("{0}")]
    Unread(String),
    /// Not looked at: tmux gave no listing.
    #[error("not read: tmux gave no listing")]
    NoListing,
}

/// The degraded states and the pressure the daemon keeps between sweeps (for the watcher,
/// `status`, `doctor` and `/healthz`).
#[derive(Default)]
pub struct Watching {
    /// The memory the pressure rules watch, as last resolved (for the watcher and `status`).
    watched: Mutex<Option<Watched>>,
    /// The stall a PSI trigger reported (percent, and until when it holds, Unix ms): the kernel
    /// said the tasks stalled at least that share of its window, which `some avg10` shows only
    /// seconds later.
    psi_stall: Mutex<Option<(f64, i64)>>,
    /// Why the last sweep could not read an activity file, if it could not (a degraded state:
    /// the daemon says it once; `status` and `--once` warn).
    activity_problem: Mutex<Option<String>>,
}

impl Watching {
    /// Why the last sweep could not read an activity file, if it could not.
    pub fn activity_problem(&self) -> Option<String> {
        self.activity_problem.lock().clone()
    }

    /// Read the activity files `cfg` names on a detached thread, within the tmux timeout: a file
    /// on a stalled mount must stall neither the sweep nor the shutdown (the thread is abandoned,
    /// not joined). A FIFO, a device, a directory or an oversized file is refused without
    /// blocking. Not read in time, or refused = liveness unknown.
    pub(crate) async fn read_activity(
        &self,
        cfg: &Config,
    ) -> Result<HashSet<String>, ActivityError> {
        if cfg.activity_files.is_empty() {
            return Ok(HashSet::new());
        }
        let r = activity::read_all_detached(cfg.activity_files.clone(), cfg.tmux_timeout)
            .await
            .map_err(|e| ActivityError::Unread(e.to_string()));
        *self.activity_problem.lock() = r.as_ref().err().map(ToString::to_string);
        r
    }

    /// Resolve the memory to watch (see [`memory::resolve`]) for a server of `server_pid`, and
    /// remember it; a change (a cgroup that vanished, a server that moved) is logged once.
    pub(crate) fn watch_memory(&self, cfg: &Config, server_pid: Option<u32>) -> Watched {
        let w = memory::resolve(cfg.mem_cgroup.as_deref(), server_pid);
        let mut last = self.watched.lock();
        if last.as_ref() != Some(&w) {
            if last.is_some() && server_pid.is_none() {
                // No tmux server (it went with its last session, or died: the sweep says which).
                tracing::info!(watching = %w, "the memory watched changed");
            } else if last.is_some() {
                tracing::warn!(watching = %w, "the memory watched changed");
            } else {
                tracing::info!(watching = %w, "watching memory");
            }
            // At start-up (the first sweep resolves it), and whenever it changes.
            let host = memory::read(&w.source);
            if let Some(m) = memory::percent_without_limit(cfg.policy.mem_high, &w, host) {
                tracing::warn!("{m}");
            }
            *last = Some(w.clone());
        }
        w
    }

    /// A PSI trigger fired: the stall was at least `pct` over its window, until `until_ms`.
    pub(crate) fn psi_fired(&self, pct: f64, until_ms: i64) {
        *self.psi_stall.lock() = Some((pct, until_ms));
    }

    /// The stall a sweep judges by: `some avg10`, or what a trigger reported within its window
    /// (`now_ms`) when that is more.
    pub(crate) fn stall_pct(&self, avg10: Option<f64>, now_ms: i64) -> Option<f64> {
        let fired = *self.psi_stall.lock();
        match fired {
            Some((pct, until)) if now_ms <= until => Some(avg10.map_or(pct, |a| a.max(pct))),
            _ => avg10,
        }
    }

    /// The memory watched, as last resolved.
    pub fn watched(&self) -> Option<Watched> {
        self.watched.lock().clone()
    }
}

/// The PSI file of the memory watched: the cgroup's own `memory.pressure` (on a cgroup v1 host,
/// its v2 twin's: the cgroup that holds the limit has none), else the host's.
pub(crate) fn pressure_file(w: &Watched) -> std::path::PathBuf {
    use crate::adapters::psi;
    match &w.source {
        memory::MemorySource::V2(d) => d.join("memory.pressure"),
        memory::MemorySource::V1(d) => {
            psi::twin(d).map_or(psi::HOST_PRESSURE.into(), |t| t.join("memory.pressure"))
        }
        memory::MemorySource::Meminfo => psi::HOST_PRESSURE.into(),
    }
}

/// The memory stall now (`some avg10`, %) where the memory is watched ([`pressure_file`]), else
/// of the host.
pub(crate) fn stall_now(w: &Watched) -> Option<f64> {
    use crate::adapters::psi;
    psi::read(&pressure_file(w))
        .or_else(|| psi::read(std::path::Path::new(psi::HOST_PRESSURE)))
        .and_then(|t| memory::psi_some_avg10(&t))
}
