//! A batch that panics: what it had done is undone or finished, once.
//!
//! [`Progress`] is what the batch has done so far that outlives it: the token of its marks, the
//! journals written, the audit lines written and delivered, each by request. [`CatchUnwind`]
//! turns the batch's panic into an error; then [`Progress::unwind`] clears the marks (checked in
//! the server: only those still carrying our token), removes the journals, and writes a `failed`
//! line for each request whose line was not written yet. Without this a reap mark whose owner is
//! alive is never stale, and `turn begin` and `spawn` would wait on a journal whose owner lives on
//! until a restart.
//!
//! The chats of a batch end in any order (each as soon as its tree is gone: see
//! [`Progress::complete_many`]), so what was done is kept per request, not as a prefix.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use super::{logged, Job, Sink};
use crate::adapters::metrics::Metrics;
use crate::adapters::state::StateDir;
use crate::adapters::state::{AuditLine, Journal};
use crate::adapters::tmux::Tmux;
use crate::core::reap_end::{audit_line, Abort, Failure, Finished, ReapEnd};
use crate::engine::record::record_many;

/// What a batch has done that must be undone or finished should it panic.
pub(super) struct Progress<'s> {
    /// One line per request as begun (nothing done yet), in order.
    begun: Vec<AuditLine>,
    /// The token of the batch's marks, and the sessions it tried to mark.
    token: Option<String>,
    marked: Vec<u32>,
    /// Per request: its journal, while it is written and not removed yet.
    journals: Vec<Option<Journal>>,
    /// Per request: whether its tree was sent its first signal.
    signalled: Vec<bool>,
    /// Per request: how it ended and its audit line, once written (never twice).
    lines: Vec<Option<Finished>>,
    /// Per request: whether its line went to `sink`.
    delivered: Vec<bool>,
    /// Where each line goes once written and its journal removed (`--once` prints it).
    sink: Option<Sink<'s>>,
}

impl<'s> Progress<'s> {
    pub fn new(sink: Option<Sink<'s>>) -> Self {
        Progress {
            begun: Vec::new(),
            token: None,
            marked: Vec::new(),
            journals: Vec::new(),
            signalled: Vec::new(),
            lines: Vec::new(),
            delivered: Vec::new(),
            sink,
        }
    }

    /// The batch's requests, as begun.
    pub fn begin(&mut self, begun: Vec<AuditLine>) {
        let n = begun.len();
        self.begun = begun;
        self.journals = vec![None; n];
        self.signalled = vec![false; n];
        self.lines = vec![None; n];
        self.delivered = vec![false; n];
    }

    /// The batch is about to mark `ns` with `token` (some marks may be set even if that fails).
    pub fn marked(&mut self, token: &str, ns: Vec<u32>) {
        self.token = Some(token.to_string());
        self.marked = ns;
    }

    /// Request `i`'s journal is written.
    pub fn journal_written(&mut self, i: usize, jn: Journal) {
        self.journals[i] = Some(jn);
    }

    /// Request `i`'s tree is sent its first signal.
    pub fn signalled(&mut self, i: usize) {
        self.signalled[i] = true;
    }

    /// Request `i`'s journal was removed (its reap did not go on).
    pub fn journal_removed(&mut self, i: usize) {
        self.journals[i] = None;
    }

    /// Requests over (`(i, line, end)`: how each ended, with the facts of its line), in order:
    /// the audit lines not written yet built and written (log, audit file, metrics: appended
    /// together, under one taking of the audit lock; a line is never written twice), then each
    /// journal removed (what `turn begin` and `spawn` wait for), then each line delivered.
    pub fn complete_many(
        &mut self,
        state: &StateDir,
        metrics: &Metrics,
        done: Vec<(usize, AuditLine, ReapEnd)>,
        t0: Instant,
    ) {
        // Each line kept as written before the append, so that a panic from here on never has a
        // second, contradicting line written for it.
        let mut fresh: Vec<usize> = Vec::new();
        for (i, line, end) in done.iter().cloned() {
            if self.lines[i].is_none() {
                let line = logged(audit_line(line, &end), t0);
                self.lines[i] = Some(Finished { end, line });
                fresh.push(i);
            }
        }
        let lines: Vec<&AuditLine> = fresh
            .iter()
            .filter_map(|&i| self.lines[i].as_ref().map(|f| &f.line))
            .collect();
        let _ = record_many(state, metrics, &lines);
        for (i, ..) in &done {
            if let Some(jn) = self.journals[*i].take() {
                if let Err(e) = state.remove_journal(&jn) {
                    tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal");
                }
            }
        }
        for (i, ..) in &done {
            self.deliver(*i);
        }
    }

    fn deliver(&mut self, i: usize) {
        if self.delivered[i] {
            return;
        }
        if let (Some(sink), Some(f)) = (self.sink, &self.lines[i]) {
            self.delivered[i] = true;
            sink(&f.line);
        }
    }

    /// Complete every job not over yet, in order. Returns every request's end and line, in
    /// order.
    pub fn finish_all(
        &mut self,
        state: &StateDir,
        metrics: &Metrics,
        jobs: Vec<Job>,
        t0: Instant,
    ) -> Vec<Finished> {
        let done = jobs
            .into_iter()
            .enumerate()
            .map(|(i, j)| {
                let end = j.end.unwrap_or(ReapEnd::Aborted(Abort::NotReached));
                (i, j.line, end)
            })
            .collect();
        self.complete_many(state, metrics, done, t0);
        self.lines.iter().flatten().cloned().collect()
    }

    /// After a panic (`why`): clear the marks, remove the journals, write the lines not written.
    /// Returns one line per request, in order.
    pub async fn unwind(
        mut self,
        tmux: &Tmux,
        state: &StateDir,
        metrics: &Metrics,
        why: &str,
        t0: Instant,
    ) -> Vec<Finished> {
        tracing::error!(
            panic = %why, sessions = self.begun.len(),
            written = self.lines.iter().flatten().count(),
            "a reap batch panicked: clearing its marks and removing its journals"
        );
        // A chat already signalled is never released half torn down: its journal and its mark
        // stay, and since this batch's token is no longer live here, the next sweep takes them
        // for a gone reaper's and finishes the teardown (SIGKILL, kill-session). The others are
        // released: journal removed, mark cleared.
        let mut kept: Vec<u32> = Vec::new();
        for (i, slot) in self.journals.iter_mut().enumerate() {
            let Some(jn) = slot.take() else {
                continue;
            };
            if self.signalled.get(i).copied().unwrap_or(false) {
                tracing::warn!(session = %jn.session, "a chat signalled by a batch that panicked: left for the next sweep to finish");
                kept.push(jn.tmux_id);
                continue;
            }
            if let Err(e) = state.remove_journal(&jn) {
                tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal of a batch that panicked");
            }
        }
        let clear: Vec<u32> = self
            .marked
            .iter()
            .copied()
            .filter(|n| !kept.contains(n))
            .collect();
        if let Some(tok) = &self.token {
            if let Err(e) = tmux.clear_reaping_many(&clear, tok).await {
                metrics.tmux_errors.inc();
                tracing::warn!(error = %e, sessions = ?self.marked, "failed to clear the reap marks of a batch that panicked");
            }
        }
        // A line already written stays as it is (`complete_many` writes none twice).
        let failed: Vec<(usize, AuditLine, ReapEnd)> = std::mem::take(&mut self.begun)
            .into_iter()
            .enumerate()
            .map(|(i, l)| (i, l, ReapEnd::Failed(Failure::Panicked(why.to_string()))))
            .collect();
        self.complete_many(state, metrics, failed, t0);
        self.lines.into_iter().flatten().collect()
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
/// first signal), `finished` (once the first chats whose trees went are finished, while others may
/// still be in their grace) or `audit` (once the audit lines are written). A release build ignores
/// it.
#[cfg(debug_assertions)]
pub(super) fn test_panic(phase: &str) {
    if std::env::var("CCS_REAP_TEST_PANIC").is_ok_and(|v| v == phase) {
        panic!("CCS_REAP_TEST_PANIC={phase}");
    }
}

#[cfg(not(debug_assertions))]
pub(super) fn test_panic(_phase: &str) {}
