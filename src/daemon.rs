//! The daemon: one sweep every interval, under the single-instance lock of its socket, with the
//! metrics endpoint beside it; SIGTERM/SIGINT finish the sweep and every reap in flight.

use std::sync::Arc;
use std::time::Duration;

use crate::policy::Action;
use crate::reaper::Reaper;
use crate::sweep::sweep;

/// The daemon: one sweep every interval; SIGTERM/SIGINT finish the sweep and the reaps in flight,
/// then return.
/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("failed to watch {0}: {1}")]
    Signal(&'static str, std::io::Error),
    #[error("failed to listen on CCS_METRICS_ADDR={0}: {1}")]
    Listen(std::net::SocketAddr, std::io::Error),
}

pub async fn run_daemon(r: Arc<Reaper>) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| DaemonError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| DaemonError::Signal("SIGINT", e))?;
    let _metrics = match r.cfg.metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| DaemonError::Listen(addr, e))?;
            Some(crate::metrics::spawn(l, Arc::clone(&r.metrics)))
        }
        None => None,
    };
    tracing::info!(
        socket = ?r.cfg.socket, prefix = %r.cfg.prefix, idle_kill_ms = ?r.cfg.policy.idle_kill_ms,
        interval_ms = r.cfg.interval.as_millis() as u64, grace_ms = r.cfg.grace.as_millis() as u64,
        dry_run = r.dry_run, "ccs-reap started"
    );
    let mut tick = tokio::time::interval(r.cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let rep = sweep(&r, false).await;
                let reaping = rep.sessions.iter().filter(|s| s.decision.action == Action::Reap).count();
                if reaping > 0 || rep.error.is_some() {
                    tracing::info!(sessions = rep.sessions.len(), reaping, error = ?rep.error, took_ms = rep.took_ms, "sweep");
                } else {
                    tracing::debug!(sessions = rep.sessions.len(), took_ms = rep.took_ms, "sweep");
                }
            }
            _ = term.recv() => { tracing::info!("SIGTERM: stopping"); break }
            _ = int.recv() => { tracing::info!("SIGINT: stopping"); break }
        }
    }
    let n = r.inflight_count();
    if n > 0 {
        tracing::info!(reaps = n, "finishing the reaps in flight before exit");
    }
    while r.inflight_count() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::info!("ccs-reap stopped");
    Ok(())
}
