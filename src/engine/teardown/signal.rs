//! Steps 6 to 9: the signals, and each chat finished as soon as its tree is gone.

use crate::core::policy::TmuxId;
use std::collections::HashSet;
use std::future::Future;

use super::finish::{end_of, survivors};
use super::ports::{ProcPort, TmuxPort};
use super::stage::{Reap, Stage};
use super::{finish, late_look, Batch, Failure};
use crate::adapters::clock::now_ms;
use crate::adapters::procs::{self, Ident};
use crate::engine::context::socket_path;

/// Above this many chats finished together, their `kill-session`s are asked only for the sessions
/// still listed: fewer chain one call anyway, and a listing would be one more.
const LIST_ABOVE: usize = 48;

/// The memory of every chat's victims (the audit line's `rss_bytes` and `pss_bytes`), read on
/// the blocking pool while the journals, the fence and the tombstones are written, and taken
/// before the first signal: a `smaps_rollup` walks its process's page tables, 13 ms for 1 GB.
/// One group's memory: RSS, and PSS where known.
type Memory = (u64, Option<u64>);

pub(super) struct MemoryRead<'a> {
    of: Vec<usize>,
    read: std::pin::Pin<Box<dyn Future<Output = Option<Vec<Memory>>> + Send + 'a>>,
}

impl<'a> MemoryRead<'a> {
    pub fn start<P: ProcPort>(procs: &'a P, reaps: &[Reap]) -> MemoryRead<'a> {
        let of: Vec<usize> = (0..reaps.len())
            .filter(|&i| reaps[i].stage.is_on())
            .collect();
        let groups: Vec<Vec<Ident>> = of.iter().map(|&i| reaps[i].stage.ids().to_vec()).collect();
        MemoryRead {
            of,
            read: Box::pin(procs.memory(groups)),
        }
    }

    /// Into the audit lines (left at 0 and unknown if the read failed).
    pub async fn into(self, reaps: &mut [Reap]) {
        if let Some(mem) = self.read.await {
            for (&i, (rss, pss)) in self.of.iter().zip(mem) {
                if let Some(f) = reaps[i].stage.facts_mut() {
                    (f.rss_bytes, f.pss_bytes) = (rss, pss);
                }
            }
        }
    }
}

/// Step 6: SIGTERM to every tree of the batch at once, then one grace for all, SIGKILL for what
/// is left ([`ProcPort::stop_many`]). A chat is finished ([`finish_wave`]) as soon as none of its
/// victims lives: one whose processes die of the SIGTERM does not wait for another's grace.
/// The chats that end while the ones before them are being finished are finished together.
pub(super) async fn stop_and_finish<T: TmuxPort, P: ProcPort>(
    b: &Batch<'_, T, P>,
    reaps: &mut [Reap],
    tok: &str,
    world: &procs::World,
) {
    let live: Vec<usize> = (0..reaps.len())
        .filter(|&i| matches!(reaps[i].stage, Stage::Fenced { .. }))
        .collect();
    if live.is_empty() {
        return;
    }
    // The victims move out of the reaps: the stop reads them while the finishing writes the
    // reaps, each now `Signalled`.
    let victims: Vec<Vec<procs::Victim>> = live.iter().map(|&i| signalled(&mut reaps[i])).collect();
    let groups: Vec<&[procs::Victim]> = victims.iter().map(Vec::as_slice).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, procs::StopReport)>();
    let stopping = b.procs.stop_many(&groups, b.h.cfg.grace, move |g, rep| {
        // Only fails once the finishing is gone, which outlives the stop (unless it panicked).
        let _ = tx.send((live[g], rep.clone()));
    });
    let finishing = async {
        // Ends when the stop has told every group (and dropped the sender).
        while let Some(first) = rx.recv().await {
            let mut done = vec![first];
            while let Ok(more) = rx.try_recv() {
                done.push(more);
            }
            finish_wave(b, reaps, &done, tok, world).await;
        }
    };
    let (_reports, ()) = tokio::join!(stopping, finishing);
}

/// From `Fenced` to `Signalled`: its pinned victims handed to the stop.
fn signalled(j: &mut Reap) -> Vec<procs::Victim> {
    match std::mem::replace(&mut j.stage, Stage::Asked) {
        Stage::Fenced {
            ids,
            victims,
            journal,
            tombstone,
            facts,
            ..
        } => {
            tracing::debug!(session = %journal.session, cid = ?tombstone.cid, "the first signal, past the fence");
            j.stage = Stage::Signalled {
                ids,
                journal,
                failure: None,
                facts,
            };
            victims
        }
        other => {
            j.stage = other;
            Vec::new()
        }
    }
}

/// Steps 7 to 9: finish the chats whose trees are gone (`done`: reap and stop report), together:
/// their `kill-session`s, each only while the session carries our token, chained; the late look
/// (what the chats started after their victims were collected, ended: one scan of the process
/// table for the whole wave, [`late_look::end_late`]); the check that nothing survived; then, per
/// chat, its audit line, its journal removed (what `turn begin` and `spawn` wait for) and its
/// line delivered.
async fn finish_wave<T: TmuxPort, P: ProcPort>(
    b: &Batch<'_, T, P>,
    reaps: &mut [Reap],
    done: &[(usize, procs::StopReport)],
    tok: &str,
    world: &procs::World,
) {
    let r = &b.h;
    for (i, rep) in done {
        if let Some(f) = reaps[*i].stage.facts_mut() {
            (f.term, f.kill) = (rep.term, rep.kill);
        }
    }
    // 7. A session usually goes with its pane's claude: asking for one that is gone is a no-op
    // (the command is checked in the server); only a large wave lists first, to ask for fewer.
    let mut targets: Vec<TmuxId> = done.iter().map(|(i, _)| reaps[*i].n()).collect();
    if targets.len() > LIST_ABOVE {
        if let Ok(l) = b.tmux.list(&r.cfg.prefix).await {
            let present: HashSet<TmuxId> = l.sessions.iter().map(|s| s.tmux_id).collect();
            targets.retain(|n| present.contains(n));
        }
    }
    tracing::debug!(
        chats = done.len(),
        present = targets.len(),
        "teardown: kill-session for the sessions still there"
    );
    let mut left = None;
    let scopes = super::pane::scopes(reaps);
    match b.tmux.kill_sessions_left(&targets, tok, &scopes).await {
        Ok(n) => left = n,
        Err(e) => {
            r.metrics.tmux_errors.inc();
            for (i, _) in done {
                let n = reaps[*i].n();
                if let Stage::Signalled { failure, .. } = &mut reaps[*i].stage {
                    if targets.contains(&n) {
                        *failure = Some(Failure::KillSession(e.to_string()));
                    }
                }
            }
        }
    }
    // 8. Nothing may survive: not even what was born after the victims' scan.
    late_look::end_late(b.procs, reaps, done, world).await;
    // A server whose last sessions these were exits with them (tmux's `exit-empty`): the
    // socket is then `empty`, not an outage (read in the kills' own call).
    if !targets.is_empty() && left == Some(0) {
        finish::server_emptied(r.known, r.state, &socket_path(r.cfg), now_ms());
    }
    // 9. The audit lines (appended together), the journals, the lines delivered.
    let mut ended = Vec::with_capacity(done.len());
    for (i, _) in done {
        let j = &mut reaps[*i];
        let Stage::Signalled {
            ids,
            failure,
            facts,
            ..
        } = &mut j.stage
        else {
            continue;
        };
        facts.survivors = survivors(ids, |id| b.procs.alive(id));
        let end = end_of(&facts.survivors, failure.take());
        ended.push((*i, end));
    }
    b.lines.end(reaps, ended);
    tracing::debug!(
        chats = done.len(),
        ms = b.lines.t0.elapsed().as_millis() as u64,
        "teardown: chats finished as their trees went"
    );
}
