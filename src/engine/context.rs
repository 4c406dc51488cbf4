//! The shared context of the reaper: handles only. The configuration, the tmux server, the
//! state dir, the metrics and the known chats as they were; the ownership of marks and journals
//! ([`crate::engine::ownership`]), the in-flight set ([`crate::engine::inflight`]) and what the
//! daemon watches ([`crate::engine::watching`]) each in a room of its own. The jobs are
//! elsewhere, each a module of free functions over these handles: [`crate::engine::observe`]
//! looks, [`crate::engine::sweep`] decides and hands out reaps, [`crate::engine::teardown`]
//! carries them out, [`crate::engine::commands`] serves the studio, [`crate::engine::daemon`]
//! runs the loop.

use std::sync::{Arc, Mutex};

use crate::adapters::metrics::Metrics;
use crate::adapters::state::StateDir;
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
    /// The record of last known conversations as last read or written (`None`: not read yet,
    /// the first sweep reads the file).
    pub(crate) known: Mutex<Option<crate::adapters::state::Known>>,
    /// The daemon's record of last known conversations waiting to be written, the newest only
    /// (`crate::engine::sweep` writes it off the sweep's path), and the lock of its one writer.
    pub(crate) known_pending: Arc<Mutex<Option<crate::adapters::state::Known>>>,
    pub(crate) known_writer: Arc<Mutex<()>>,
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
        );
        Arc::new(Reaper {
            cfg,
            tmux,
            state,
            dry_run,
            metrics,
            known: Mutex::new(None),
            known_pending: Arc::default(),
            known_writer: Arc::default(),
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
