//! The studio's `CCS_REAP_HOOK` around a batch: `before` may veto each reap, `after` is told.

use super::stage::Reap;
use super::{Abort, Finished};
use crate::config::Config;

/// `<hook> before` for every reap still on, with its decision as JSON on stdin, all at once. One
/// that exits non-zero vetoes its reap (aborted, naming the hook), and so does one that cannot be
/// run at all (deleted, no longer executable): a configured veto fails closed. One that times out
/// is killed and the reap goes on.
pub(super) async fn before_hooks(cfg: &Config, hook: &std::path::Path, jobs: &mut [Reap]) {
    let live: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].stage.is_on()).collect();
    if live.is_empty() {
        return;
    }
    let inputs: Vec<Vec<u8>> = live
        .iter()
        .map(|&i| serde_json::to_vec(&jobs[i].request.decision).unwrap_or_default())
        .collect();
    let ran = crate::adapters::reap_hook::run_all(hook, "before", &inputs, cfg.hook_timeout).await;
    for (&i, ran) in live.iter().zip(ran) {
        let j = &mut jobs[i];
        match ran {
            crate::adapters::reap_hook::Ran::Ok => {}
            crate::adapters::reap_hook::Ran::Refused(st) => {
                j.abort(Abort::Vetoed {
                    hook: hook.display().to_string(),
                    status: st.to_string(),
                });
            }
            crate::adapters::reap_hook::Ran::TimedOut => tracing::warn!(
                session = %j.request.decision.name, hook = %hook.display(),
                "the hook ran past CCS_REAP_HOOK_TIMEOUT_MS and was killed: the reap goes on"
            ),
            // A veto that is configured fails closed: a hook deleted or no longer executable
            // since the start could have said no.
            crate::adapters::reap_hook::Ran::Broken(e) => {
                tracing::warn!(
                    session = %j.request.decision.name, error = %e, "the hook could not be run: the reap is vetoed"
                );
                j.abort(Abort::VetoUnrunnable {
                    hook: hook.display().to_string(),
                    error: e.to_string(),
                });
            }
        }
    }
}

/// `<hook> after` for every audit line of the batch; what it does changes nothing.
pub(super) async fn after_hooks(cfg: &Config, hook: &std::path::Path, ends: &[Finished]) {
    let inputs: Vec<Vec<u8>> = ends
        .iter()
        .map(|f| serde_json::to_vec(&f.line).unwrap_or_default())
        .collect();
    let ran = crate::adapters::reap_hook::run_all(hook, "after", &inputs, cfg.hook_timeout).await;
    for (l, ran) in ends.iter().map(|f| &f.line).zip(ran) {
        if !matches!(ran, crate::adapters::reap_hook::Ran::Ok) {
            tracing::warn!(session = %l.session, hook = %hook.display(), result = ?ran, "the after hook failed (nothing changes)");
        }
    }
}
