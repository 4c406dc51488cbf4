//! One reap as a stage machine: [`Reap`] is a request, its audit line as begun, and the
//! [`Stage`] it is at, each stage carrying what it holds (and, from the re-check on, the
//! [`Facts`] its line is built from when it ends). What a reap gives back when it goes no
//! further (its mark, its journal) is [`Stage::held`], written once: the release of the reaps
//! stopped before their first signal, and the unwinding of a batch that panicked, both read it.
//!
//! The batch's `Vec<Reap>` is owned by [`super::reap_with`], outside the panic boundary: whatever
//! the batch did before it panicked is in its stages.

use crate::core::policy::TmuxId;
use std::sync::Arc;
use std::time::Instant;

use super::{logged, LineSink, Request};
use crate::adapters::metrics::Metrics;
use crate::adapters::procs::{Ident, Victim};
use crate::adapters::state::{AuditLine, Ended, Journal, StateDir};
use crate::core::policy::Session;
use crate::core::reap_end::{audit_line, Abort, Failure, Finished, ReapEnd};
use crate::core::records::Tombstone;
use crate::engine::record::record_many;

/// The token of a batch's marks, shared by its reaps.
pub(crate) type Token = Arc<str>;

/// One reap of a batch.
pub(crate) struct Reap {
    pub request: Request,
    /// Its audit line as begun, from the decision; the line as written is built from it, the
    /// facts its stage gathered and its end ([`Reap::end`]), once.
    pub line: AuditLine,
    pub stage: Stage,
}

/// What a reap learned on its way, for its audit line: carried by its stage from the re-check
/// on, and read once, when the line is built ([`Facts::onto`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    /// The chat's cid as the re-check found it (a studio may have set `@ccs_cid` since the
    /// sweep).
    pub cid: Option<String>,
    /// How the session ended, and the exited pane's status (the cleanup of exited panes).
    pub ended: Option<Ended>,
    pub exit_status: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Every member of its tree, the late ones too.
    pub pids: Vec<i32>,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
    pub term: usize,
    pub kill: usize,
    pub survivors: Vec<i32>,
}

impl Facts {
    /// The begun `line` with these facts.
    pub fn onto(self, line: &AuditLine) -> AuditLine {
        AuditLine {
            cid: self.cid.or_else(|| line.cid.clone()),
            ended: self.ended,
            exit_status: self.exit_status,
            exit_signal: self.exit_signal,
            pids: self.pids,
            rss_bytes: self.rss_bytes,
            pss_bytes: self.pss_bytes,
            term: self.term,
            kill: self.kill,
            survivors: self.survivors,
            ..line.clone()
        }
    }
}

/// Where a reap is, and what it holds there.
pub(crate) enum Stage {
    /// Nothing done yet.
    Asked,
    /// The test-and-set was asked for with `token` (it may or may not hold the mark).
    Marked { token: Token },
    /// The mark is ours and the re-check passed on `fresh`; its victims (`ids`, every member;
    /// `victims`, those pinned), once collected.
    Checked {
        token: Token,
        fresh: Box<Session>,
        ids: Vec<Ident>,
        victims: Vec<Victim>,
        facts: Facts,
    },
    /// Its journal is written.
    Journaled {
        token: Token,
        fresh: Box<Session>,
        ids: Vec<Ident>,
        victims: Vec<Victim>,
        journal: Box<Journal>,
        facts: Facts,
    },
    /// Past the fence, its tombstone written: the next step is its first signal.
    Fenced {
        token: Token,
        ids: Vec<Ident>,
        victims: Vec<Victim>,
        journal: Box<Journal>,
        tombstone: Box<Tombstone>,
        facts: Facts,
    },
    /// Its tree was sent its first signal: never given back half torn down. `failure`: a step
    /// past the signals that failed (`kill-session`).
    Signalled {
        ids: Vec<Ident>,
        journal: Box<Journal>,
        failure: Option<Failure>,
        facts: Facts,
    },
    /// Over before its first signal, still holding `held` until the release gives it back.
    Stopped {
        end: ReapEnd,
        held: Held,
        facts: Facts,
    },
    /// Over: its line written (never twice), and whether it went to the sink.
    Ended { finished: Finished, delivered: bool },
}

/// What a reap holds that is given back if it goes no further: its mark, its journal.
#[derive(Default)]
pub(crate) struct Held {
    pub token: Option<Token>,
    pub journal: Option<Box<Journal>>,
}

impl Held {
    pub fn is_empty(&self) -> bool {
        self.token.is_none() && self.journal.is_none()
    }
}

impl Stage {
    /// What this stage holds that must be given back should the reap stop here (an abort, a
    /// failure, a panic). A signalled reap gives back nothing: its mark and journal stay for
    /// the next sweep to finish the teardown.
    pub fn held(&self) -> Held {
        match self {
            Stage::Asked | Stage::Signalled { .. } | Stage::Ended { .. } => Held::default(),
            Stage::Marked { token } | Stage::Checked { token, .. } => Held {
                token: Some(token.clone()),
                journal: None,
            },
            Stage::Journaled { token, journal, .. } | Stage::Fenced { token, journal, .. } => {
                Held {
                    token: Some(token.clone()),
                    journal: Some(journal.clone()),
                }
            }
            Stage::Stopped { held, .. } => Held {
                token: held.token.clone(),
                journal: held.journal.clone(),
            },
        }
    }

    /// Whether the reap is still going (not stopped, not ended).
    pub fn is_on(&self) -> bool {
        !matches!(self, Stage::Stopped { .. } | Stage::Ended { .. })
    }

    /// The session as listed after the mark, once the re-check passed (until the fence).
    pub fn fresh(&self) -> Option<&Session> {
        match self {
            Stage::Checked { fresh, .. } | Stage::Journaled { fresh, .. } => Some(&**fresh),
            _ => None,
        }
    }

    /// What it learned so far, from the re-check on.
    pub fn facts(&self) -> Option<&Facts> {
        match self {
            Stage::Checked { facts, .. }
            | Stage::Journaled { facts, .. }
            | Stage::Fenced { facts, .. }
            | Stage::Signalled { facts, .. }
            | Stage::Stopped { facts, .. } => Some(facts),
            _ => None,
        }
    }

    /// What it learned so far, to add to.
    pub fn facts_mut(&mut self) -> Option<&mut Facts> {
        match self {
            Stage::Checked { facts, .. }
            | Stage::Journaled { facts, .. }
            | Stage::Fenced { facts, .. }
            | Stage::Signalled { facts, .. }
            | Stage::Stopped { facts, .. } => Some(facts),
            _ => None,
        }
    }

    /// What it learned, taken (nothing, before the re-check).
    pub fn take_facts(&mut self) -> Facts {
        self.facts_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every member of its tree, once collected.
    pub fn ids(&self) -> &[Ident] {
        match self {
            Stage::Checked { ids, .. }
            | Stage::Journaled { ids, .. }
            | Stage::Fenced { ids, .. }
            | Stage::Signalled { ids, .. } => ids,
            _ => &[],
        }
    }
}

impl Reap {
    pub fn asked(request: Request, line: AuditLine) -> Reap {
        Reap {
            request,
            line,
            stage: Stage::Asked,
        }
    }

    /// The session number.
    pub fn n(&self) -> TmuxId {
        self.request.decision.tmux_id
    }

    /// The reap stops here, before its first signal, holding what its stage held.
    pub fn stop(&mut self, end: ReapEnd) {
        if !self.stage.is_on() {
            return;
        }
        let held = self.stage.held();
        let facts = self.stage.take_facts();
        self.stage = Stage::Stopped { end, held, facts };
    }

    pub fn abort(&mut self, why: Abort) {
        self.stop(ReapEnd::Aborted(why));
    }

    pub fn fail(&mut self, why: Failure) {
        self.stop(ReapEnd::Failed(why));
    }

    /// The reap ends with `end`: its line is built from the facts and the end. Returns the line
    /// if this wrote it (a reap already ended keeps its line) and the journal left to remove.
    fn end(&mut self, end: ReapEnd, t0: Instant) -> (Option<AuditLine>, Option<Box<Journal>>) {
        let journal = match &mut self.stage {
            Stage::Ended { .. } => return (None, None),
            Stage::Signalled { journal, .. } => Some(journal.clone()),
            Stage::Stopped { held, .. } => held.journal.take(),
            // Not reached in order (every reap still on is stopped or signalled before the
            // lines are written): what it holds of the state dir goes with it.
            other => other.held().journal,
        };
        let facts = self.stage.take_facts();
        let line = logged(audit_line(facts.onto(&self.line), &end), t0);
        self.stage = Stage::Ended {
            finished: Finished {
                end,
                line: line.clone(),
            },
            delivered: false,
        };
        (Some(line), journal)
    }

    /// How it ended and its line, once ended.
    pub fn finished(&self) -> Option<&Finished> {
        match &self.stage {
            Stage::Ended { finished, .. } => Some(finished),
            _ => None,
        }
    }
}

/// Where the lines of a batch go: the audit log (state dir, metrics) and the sink.
pub(crate) struct Lines<'a> {
    pub state: &'a StateDir,
    pub metrics: &'a Metrics,
    pub sink: Option<LineSink<'a>>,
    pub t0: Instant,
}

impl Lines<'_> {
    /// End the reaps `done` (index, end), in order: the lines not written yet built and written
    /// (appended together; a line is never written twice), then each journal removed (what
    /// `turn begin` and `spawn` wait for), then each line delivered.
    pub fn end(&self, reaps: &mut [Reap], done: Vec<(usize, ReapEnd)>) {
        let mut fresh: Vec<AuditLine> = Vec::new();
        let mut journals: Vec<Box<Journal>> = Vec::new();
        for (i, end) in &done {
            let (line, journal) = reaps[*i].end(end.clone(), self.t0);
            fresh.extend(line);
            journals.extend(journal);
        }
        let lines: Vec<&AuditLine> = fresh.iter().collect();
        let _ = record_many(self.state, self.metrics, &lines);
        for jn in &journals {
            if let Err(e) = self.state.remove_journal(jn) {
                tracing::warn!(error = %e, session = %jn.session, "failed to remove the reap journal");
            }
        }
        for (i, _) in &done {
            self.deliver(&mut reaps[*i]);
        }
    }

    fn deliver(&self, reap: &mut Reap) {
        if let (
            Some(sink),
            Stage::Ended {
                finished,
                delivered,
            },
        ) = (self.sink, &mut reap.stage)
        {
            if !*delivered {
                *delivered = true;
                sink(&finished.line);
            }
        }
    }

    /// End every reap not ended yet, in order (a stopped one as it stopped, any other as not
    /// reached).
    pub fn end_all(&self, reaps: &mut [Reap]) {
        let done = reaps
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match &r.stage {
                Stage::Ended { .. } => None,
                Stage::Stopped { end, .. } => Some((i, end.clone())),
                _ => Some((i, ReapEnd::Aborted(Abort::NotReached))),
            })
            .collect();
        self.end(reaps, done);
    }
}
