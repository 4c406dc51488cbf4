//! The daemon with reaping off, under systemd: it stays up and says why, where `systemctl status`
//! shows it (`STATUS=`), instead of exiting before `READY=1`, which `Type=notify` takes for a
//! failed start and `Restart=on-failure` for a reason to start again every few seconds, forever.
//! It reaps nothing, touches no tmux and no file; a settings change needs `systemctl restart`.

use std::time::Duration;

use super::DaemonError;
use crate::adapters::systemd::Notifier;
use crate::config::Config;

/// Ready at once with `STATUS=` saying that reaping is off and what turns it on, the watchdog fed
/// every interval, until SIGTERM/SIGINT/SIGHUP (then `STOPPING=1`).
pub async fn standby(cfg: &Config) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| DaemonError::Signal("SIGTERM", e))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| DaemonError::Signal("SIGINT", e))?;
    let mut hup = signal(SignalKind::hangup()).map_err(|e| DaemonError::Signal("SIGHUP", e))?;
    let mut notify = Notifier::from_env(cfg.interval, Duration::ZERO);
    let file = cfg.file.as_deref().map_or(
        "a settings file (none was found: ccs-reap config)".into(),
        |f| f.display().to_string(),
    );
    let status = format!(
        "reaping is disabled, nothing is reaped: set CCS_ENGINE_IDLE_KILL_MS or another rule in {file}, then restart this unit"
    );
    // That reaping is off was said already (a WARN line naming what turns it on).
    tracing::info!("standing by under systemd until stopped (systemctl status says why)");
    loop {
        notify.swept(&status);
        tokio::select! {
            _ = tokio::time::sleep(cfg.interval) => {}
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => break,
        }
    }
    notify.stopping();
    tracing::info!("stopping (reaping was disabled)");
    Ok(())
}
