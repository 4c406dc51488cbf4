//! Step 8 of a wave: the late look ([`procs::end_late`]), its finds merged into each chat's
//! victims, so that the check that nothing survived ([`super::verify`]) covers them, and the
//! audit line counts them (`pids`, `kill`).

use super::{procs, Failure, Job};

/// End what the chats of the wave `done` started after their victims were collected. An
/// unreadable process table fails every chat of the wave (nothing born late can be told gone).
pub(super) async fn end_late(
    jobs: &mut [Job],
    done: &[(usize, procs::StopReport)],
    world: &procs::World,
) {
    let chats: Vec<(u32, Vec<procs::Ident>)> = done
        .iter()
        .map(|(i, _)| (jobs[*i].n(), jobs[*i].ids.clone()))
        .collect();
    match procs::end_late(&chats, world).await {
        Ok(reports) => {
            for (i, _) in done {
                let j = &mut jobs[*i];
                let Some(rep) = reports.get(&j.n()) else {
                    continue;
                };
                if !rep.found.is_empty() {
                    tracing::warn!(
                        session = %j.req.decision.name,
                        pids = ?rep.found.iter().map(|i| i.pid).collect::<Vec<_>>(),
                        kill = rep.kill,
                        "processes born after the victims' scan"
                    );
                }
                j.line.kill += rep.kill;
                for id in &rep.found {
                    j.line.pids.push(id.pid);
                    j.ids.push(*id);
                }
            }
        }
        Err(e) => {
            for (i, _) in done {
                let j = &mut jobs[*i];
                if j.failure.is_none() {
                    j.failure = Some(Failure::ProcessTable(format!(
                        "the look for processes born late: {e}"
                    )));
                }
            }
        }
    }
}
