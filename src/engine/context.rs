//! The shared context of the reaper: handles only. The configuration, the tmux server, the
//! state dir, the metrics and the known chats as they were; the ownership of marks and journals
//! ([`crate::engine::ownership`]), the in-flight set ([`crate::engine::inflight`]) and what the
//! daemon watches ([`crate::engine::watching`]) each in a room of its own. The jobs are
//! elsewhere, each a module of free functions over these handles: [`crate::engine::observe`]
//! looks, [`crate::engine::sweep`] decides and hands out reaps, [`crate::engine::teardown`]
//! carries them out, [`crate::engine::commands`] serves the studio, [`crate::engine::daemon`]
//! runs the loop.

use crate::core::policy::TmuxId;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::adapters::metrics::Metrics;
use crate::adapters::state::{Known, StateDir};
use crate::adapters::tmux::Tmux;
use crate::config::Config;
use crate::engine::inflight::InFlight;
use crate::engine::ownership::Ownership;
use crate::engine::watching::Watching;

/// The handles the stages share. A stage that touches only some of them takes those.
pub struct Reaper {
    pub cfg: Config,
    pub tmux: Tmux,
    pub state: StateDir,
    pub dry_run: bool,
    pub metrics: Arc<Metrics>,
    /// The record of last known conversations, as last read or written, and its writer.
    pub(crate) known: KnownChats,
    /// The sessions whose too long id was said already (once each for the life of the reaper).
    pub(crate) too_long_said: SaidOnce,
    /// The sessions whose teardown is in flight here.
    pub(crate) inflight: Arc<InFlight>,
    /// Who owns the marks and journals, as judged from here.
    pub(crate) ownership: Ownership,
    /// What the daemon watches and reports: the memory, the PSI stall, the activity files.
    pub(crate) watching: Watching,
    pub(crate) last_age_out: Mutex<Option<std::time::Instant>>,
}

impl Reaper {
    /// The handles for `cfg`, made once (a dry run persists nothing of what it observes).
    pub fn new(cfg: Config, dry_run: bool) -> Arc<Reaper> {
        let tmux = Tmux::new(cfg.socket.clone(), cfg.tmux_timeout);
        let state = StateDir::new(
            cfg.state_dir.clone(),
            &cfg.socket.studio_key(&cfg.prefix),
            &cfg.socket.label(),
            &cfg.prefix,
        )
        .with_audit_limits(cfg.audit_max_bytes, cfg.audit_keep);
        let metrics = Arc::new(Metrics::default());
        let ownership = Ownership::new(
            cfg.lease().limit_ms,
            state.clone(),
            !dry_run,
            Arc::clone(&metrics),
            socket_path(&cfg),
        );
        Arc::new(Reaper {
            cfg,
            tmux,
            state,
            dry_run,
            metrics,
            known: KnownChats::default(),
            too_long_said: SaidOnce::default(),
            inflight: Arc::new(InFlight::default()),
            ownership,
            watching: Watching::default(),
            last_age_out: Mutex::new(None),
        })
    }
}

/// The socket's path of `cfg` as the tombstones record it.
pub(crate) fn socket_path(cfg: &Config) -> String {
    cfg.socket.canonical_path().to_string_lossy().into_owned()
}

/// The handles most stages act through (a hook, a start): the settings, tmux, the state dir,
/// the metrics.
#[derive(Clone, Copy)]
pub struct Handles<'a> {
    pub cfg: &'a Config,
    pub tmux: &'a Tmux,
    pub state: &'a StateDir,
    pub metrics: &'a Metrics,
}

impl<'a> Handles<'a> {
    /// These handles out of the reaper's.
    pub fn of(r: &'a Reaper) -> Self {
        Handles {
            cfg: &r.cfg,
            tmux: &r.tmux,
            state: &r.state,
            metrics: &r.metrics,
        }
    }
}

/// The record of last known conversations (`known.json`) as last read or written (`None`: not
/// read yet, the first sweep reads the file), and the daemon's writer of it: the newest record
/// waiting to be written off the sweep's path, and the lock of its one writer.
#[derive(Default)]
pub(crate) struct KnownChats {
    last: Mutex<Option<Known>>,
    pending: Arc<Mutex<Option<Known>>>,
    writer: Arc<Mutex<()>>,
}

impl KnownChats {
    /// Change the record under its lock: `f` gets it as last read or written (else as `load`
    /// reads it) and gives back the record to keep, and what it returns.
    pub(crate) fn update<T>(
        &self,
        load: impl FnOnce() -> Known,
        f: impl FnOnce(Known) -> (Known, T),
    ) -> T {
        let mut last = self.last.lock();
        let old = match last.take() {
            Some(k) => k,
            None => load(),
        };
        let (new, out) = f(old);
        *last = Some(new);
        out
    }

    /// What `f` makes of the record as last read or written (`None`: not read yet).
    pub(crate) fn peek<T>(&self, f: impl FnOnce(Option<&Known>) -> T) -> T {
        f(self.last.lock().as_ref())
    }

    /// Write `known` into `state` on a blocking thread, off the sweep's path: under memory
    /// pressure the fsync of a file in a cgroup at its limit took 5 s, and the sweep that was to
    /// free memory waited on it. One writer at a time, and it writes the newest record waiting
    /// (a slower write never puts an older one back over a newer). The record is only needed
    /// after a tmux server died; the file stays whole (written by rename), and the runtime's end
    /// waits for the write.
    pub(crate) fn write_later(&self, state: &StateDir, known: Known) {
        *self.pending.lock() = Some(known);
        let (state, pending, writer) = (
            state.clone(),
            Arc::clone(&self.pending),
            Arc::clone(&self.writer),
        );
        tokio::task::spawn_blocking(move || {
            let _one = writer.lock();
            // None: a writer that came after this one took the newest and wrote it already.
            let newest = pending.lock().take();
            if let Some(k) = newest {
                if let Err(e) = state.write_known(&k) {
                    tracing::warn!(error = %e, "failed to write the record of last known conversations");
                }
            }
        });
    }
}

/// What was said once for the life of the reaper, by session (`$N` and name).
#[derive(Default)]
pub(crate) struct SaidOnce(Mutex<BTreeSet<(TmuxId, String)>>);

impl SaidOnce {
    /// Whether the session `(n, name)` is seen here for the first time (then it is remembered).
    pub(crate) fn first(&self, n: TmuxId, name: &str) -> bool {
        let mut said = self.0.lock();
        said.insert((n, name.to_string()))
    }
}
