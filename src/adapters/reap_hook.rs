//! `CCS_REAP_HOOK`: a program run before and after each reap, directly (never through a shell),
//! with JSON on its stdin. `<program> before` runs before the first signal and vetoes the reap by
//! exiting non-zero; `<program> after` gets the audit line once the reap is done, and what it does
//! changes nothing. A hook that runs past `CCS_REAP_HOOK_TIMEOUT_MS` is killed with every process
//! of its process group (each hook runs in a new group, so what it started goes with it; a child
//! that left the group on purpose, with `setsid`, is its own business). A `before` that timed out
//! does not veto. Many hooks of one batch run at once, under one deadline.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// How one hook run ended.
#[derive(Debug)]
pub enum Ran {
    Ok,
    /// It exited non-zero (or was killed by a signal).
    Refused(ExitStatus),
    /// Killed at the deadline.
    TimedOut,
    /// It could not be started, or its stdin not written.
    Broken(String),
}

/// A hook's process group (its id is the hook's pid), killed by [`Group::kill`] or when this is
/// dropped while armed: at the deadline, or when the task running the hooks is dropped (the daemon
/// on its way out). It is disarmed once the hook is reaped, since from then on its pid may belong
/// to someone else.
struct Group(Option<rustix::process::Pid>);

impl Group {
    fn of(child: &tokio::process::Child) -> Self {
        Group(
            child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32)),
        )
    }

    fn disarm(&mut self) {
        self.0 = None;
    }

    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A hook running. The fields drop in this order: the group is killed while the child, dropped
/// after it (and killed then, `kill_on_drop`), is still unreaped and holds its pid.
struct Running {
    group: Group,
    child: tokio::process::Child,
    feed: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Run `<program> <stage>` once per input, all at once, each fed its JSON on stdin; one result
/// per input, in order, within `timeout` from now.
pub async fn run_all(
    program: &Path,
    stage: &str,
    inputs: &[Vec<u8>],
    timeout: Duration,
) -> Vec<Ran> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut running = Vec::with_capacity(inputs.len());
    for input in inputs {
        let child = tokio::process::Command::new(program)
            .arg(stage)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        running.push(match child {
            Ok(mut child) => {
                // Feed it in the background: a hook that does not read must not hold us up.
                let stdin = child.stdin.take();
                let data = input.clone();
                let feed = tokio::spawn(async move {
                    if let Some(mut s) = stdin {
                        s.write_all(&data).await?;
                        s.shutdown().await?;
                    }
                    Ok::<(), std::io::Error>(())
                });
                Ok(Running {
                    group: Group::of(&child),
                    child,
                    feed,
                })
            }
            Err(e) => Err(format!("failed to run {} {stage}: {e}", program.display())),
        });
    }
    let mut out = Vec::with_capacity(running.len());
    for r in running {
        out.push(match r {
            Err(e) => Ran::Broken(e),
            Ok(mut run) => match tokio::time::timeout_at(deadline, run.child.wait()).await {
                Ok(Ok(st)) => {
                    run.group.disarm();
                    // A hook may exit without reading its stdin (a child of it may hold the
                    // pipe): that is its business, and never ours to wait on past the deadline.
                    if tokio::time::timeout_at(deadline, &mut run.feed)
                        .await
                        .is_err()
                    {
                        run.feed.abort();
                        tracing::debug!("a hook's stdin was not read to its end");
                    }
                    if st.success() {
                        Ran::Ok
                    } else {
                        Ran::Refused(st)
                    }
                }
                Ok(Err(e)) => Ran::Broken(format!("failed to wait for {}: {e}", program.display())),
                Err(_) => {
                    // The group first, while the hook is unreaped, then the hook itself.
                    run.group.kill();
                    let _ = run.child.kill().await;
                    run.feed.abort();
                    Ran::TimedOut
                }
            },
        });
    }
    out
}
