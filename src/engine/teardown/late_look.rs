//! Step 8 of a wave: the late look ([`ProcPort::end_late`]), its finds merged into each chat's
//! victims, so that the check that nothing survived ([`super::verify`]) covers them, and the
//! audit line counts them (`pids`, `kill`).

use super::ports::ProcPort;
use super::stage::{Reap, Stage};
use super::Failure;
use crate::adapters::procs;
use crate::core::policy::TmuxId;

/// End what the chats of the wave `done` started after their victims were collected. An
/// unreadable process table fails every chat of the wave (nothing born late can be told gone).
pub(super) async fn end_late(
    ports: &impl ProcPort,
    reaps: &mut [Reap],
    done: &[(usize, procs::StopReport)],
    world: &procs::World,
) {
    let chats: Vec<(TmuxId, Vec<procs::Ident>)> = done
        .iter()
        .map(|(i, _)| (reaps[*i].n(), reaps[*i].stage.ids().to_vec()))
        .collect();
    let found = ports.end_late(&chats, world).await;
    for (i, _) in done {
        let j = &mut reaps[*i];
        let n = j.n();
        let Stage::Signalled {
            ids,
            failure,
            facts,
            ..
        } = &mut j.stage
        else {
            continue;
        };
        let reports = match &found {
            Ok(reports) => reports,
            Err(e) => {
                if failure.is_none() {
                    *failure = Some(Failure::ProcessTable(format!(
                        "the look for processes born late: {e}"
                    )));
                }
                continue;
            }
        };
        let Some(rep) = reports.get(&n) else {
            continue;
        };
        if !rep.found.is_empty() {
            tracing::warn!(
                session = %j.request.decision.name,
                pids = ?rep.found.iter().map(|i| i.pid).collect::<Vec<_>>(),
                kill = rep.kill,
                "processes born after the victims' scan"
            );
        }
        facts.kill += rep.kill;
        for id in &rep.found {
            facts.pids.push(id.pid);
            ids.push(*id);
        }
    }
}
