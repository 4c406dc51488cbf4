//! A batch that panics: what it had done is undone or finished, once.
//!
//! [`Progress`] is what the batch has done so far that outlives it: the token of its marks, the
//! journals written, the audit lines written. [`CatchUnwind`] turns the batch's panic into an
//! error; then [`Progress::unwind`] clears the marks (checked in the server: only those still
//! carrying our token), removes the journals, and writes a `failed` line for each request whose
//! line was not written yet. Without this a reap mark whose owner is alive is never stale, and
//! `turn begin` and `spawn` would wait on a journal whose owner lives on until a restart.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::{finish, Job};
use crate::reaper::Reaper;
use crate::state::{AuditLine, Journal, Outcome};

/// What a batch has done that must be undone or finished should it panic.
#[derive(Default)]
pub(super) struct Progress {
    /// One line per request as begun (nothing done yet), in order.
    pub begun: Vec<AuditLine>,
    /// The token of the batch's marks, and the sessions it tried to mark.
    token: Option<String>,
    marked: Vec<u32>,
    /// Journals written and not removed yet.
    pub journals: Vec<Journal>,
    /// Audit lines written, in request order: the first `lines.len()` requests are done.
    lines: Vec<AuditLine>,
}

impl Progress {
    /// The batch is about to mark `ns` with `token` (some marks may be set even if that fails).
    pub fn marked(&mut self, token: &str, ns: Vec<u32>) {
        self.token = Some(token.to_string());
        self.marked = ns;
    }

    /// Finish every job (log, audit line, metrics), in order, remembering each line written.
    pub fn finish_all(&mut self, r: &Reaper, jobs: Vec<Job>, t0: Instant) -> Vec<AuditLine> {
        for j in jobs {
            let l = finish(r, j.line, t0);
            self.lines.push(l);
        }
        self.lines.clone()
    }

    /// After a panic (`why`): clear the marks, remove the journals, write the lines not written.
    /// Returns one line per request, in order.
    pub async fn unwind(self, r: &Reaper, why: &str, t0: Instant) -> Vec<AuditLine> {
        tracing::error!(
            panic = %why, sessions = self.begun.len(), written = self.lines.len(),
            "a reap batch panicked: clearing its marks and removing its journals"
        );
        for jn in &self.journals {
            if let Err(e) = r.state.remove_journal(jn) {
                tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal of a batch that panicked");
            }
        }
        if let Some(tok) = &self.token {
            if let Err(e) = r.tmux.clear_reaping_many(&self.marked, tok).await {
                r.metrics.tmux_errors.inc();
                tracing::warn!(error = %e, sessions = ?self.marked, "failed to clear the reap marks of a batch that panicked");
            }
        }
        let done = self.lines.len();
        let mut lines = self.lines;
        for mut l in self.begun.into_iter().skip(done) {
            l.outcome = Outcome::Failed;
            l.error = Some(format!("the teardown panicked: {why}"));
            lines.push(finish(r, l, t0));
        }
        lines
    }
}

/// A future whose panic is caught and returned as its message.
pub(super) struct CatchUnwind<F>(pub F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let f = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *f).poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => Poll::Ready(Err(p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into()))),
        }
    }
}

/// Test hook, honoured only by debug builds (the tests' binary): `CCS_REAP_TEST_PANIC=<phase>`
/// makes every batch panic at that phase: `journals` (journals and tombstones written, before the
/// first signal) or `audit` (once the audit lines are written). A release build ignores it.
#[cfg(debug_assertions)]
pub(super) fn test_panic(phase: &str) {
    if std::env::var("CCS_REAP_TEST_PANIC").is_ok_and(|v| v == phase) {
        panic!("CCS_REAP_TEST_PANIC={phase}");
    }
}

#[cfg(not(debug_assertions))]
pub(super) fn test_panic(_phase: &str) {}
