//! What the way back looks at before it starts a chat: where the agent keeps the conversation
//! (its transcript), and whether a live agent holds it already.

use std::path::Path;

use crate::adapters::agent_proc;
use crate::adapters::tmux::Tmux;
use crate::adapters::tmux::TmuxError;
use crate::agents::{Agent, Transcript};
use crate::config::Config;

/// Whether the transcript of `cid` is where the agent keeps it: `None` when that cannot be told
/// (no HOME, an unreadable directory or file), and the agent is left to say. A pattern
/// ([`Agent::transcript_glob`]) is there when it matches a file; an agent that judges its files
/// ([`Agent::transcript_kind`]: Gemini CLI writes one at launch) has each one read (never
/// written): the conversation's file is resumable, or unused (nothing was said in it).
pub(super) fn transcript(
    agent: &Agent,
    env: &[(String, String)],
    cwd: &Path,
    cid: &str,
) -> Option<Transcript> {
    let canon = std::fs::canonicalize(cwd).ok()?;
    let p = (agent.transcript_path)(env, &canon, cid)
        .map_err(|e| tracing::warn!(cid, error = %e, "cannot tell where the transcript is"))
        .ok()?;
    if agent.transcript_glob {
        let found = agent_proc::glob(&p);
        if found.is_empty() {
            tracing::info!(cid, pattern = %p.display(), "no transcript");
            return Some(Transcript::Missing);
        }
        let Some(kind) = agent.transcript_kind else {
            return Some(Transcript::Resumable);
        };
        // At most 16 files (the pattern holds 8 characters of the id: two are already rare),
        // each read up to 64 MiB; a larger or unreadable one is taken as resumable.
        let mut best = Transcript::Missing;
        for f in found.iter().take(16) {
            match agent_proc::read_bounded(f, 64 << 20) {
                Ok(text) => match kind(&text, cid) {
                    Transcript::Resumable => return Some(Transcript::Resumable),
                    Transcript::Unused => best = Transcript::Unused,
                    Transcript::Missing => {}
                },
                Err(e) => {
                    tracing::warn!(cid, path = %f.display(), error = %e, "cannot read a transcript");
                    return None;
                }
            }
        }
        if best == Transcript::Unused {
            tracing::info!(cid, pattern = %p.display(), "the transcript holds no message {} resumes", agent.display);
        }
        return Some(best);
    }
    match std::fs::metadata(&p) {
        Ok(m) if m.is_file() => Some(Transcript::Resumable),
        Ok(_) => Some(Transcript::Missing),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(cid, path = %p.display(), "no transcript");
            Some(Transcript::Missing)
        }
        Err(e) => {
            tracing::warn!(cid, path = %p.display(), error = %e, "cannot read the transcript's place");
            None
        }
    }
}

/// Another session of this server whose live pane holds conversation `cid` (its `@ccs_cid`, or
/// the command its pane was started with): its name and pane pid. One listing.
pub(super) async fn held_elsewhere(
    cfg: &Config,
    tmux: &Tmux,
    name: &str,
    cid: &str,
) -> Result<Option<(String, u32)>, TmuxError> {
    let l = tmux
        .list(&cfg.prefix, crate::adapters::procs::exit_collected)
        .await?;
    Ok(l.sessions.iter().filter(|o| o.name != name).find_map(|o| {
        let live = o.panes.iter().find(|p| !p.dead)?;
        let holds = o.cid.trim() == cid
            || o.panes.iter().any(|p| {
                crate::core::policy::cid_from_argv(&[&p.start_command]).as_deref() == Some(cid)
            });
        holds.then(|| (o.name.clone(), live.pid))
    }))
}
