//! What goes to stdout and how an outcome becomes an exit code: one writer that remembers a closed
//! or failed stdout, JSON, and the answers of `pin`, `turn` and the commands.

use super::*;

/// What became of the writes to stdout: 0 all written, [`OUT_CLOSED`] its reader went away,
/// [`OUT_FAILED`] a write failed otherwise (reported once on stderr).
pub(super) static OUT: AtomicU8 = AtomicU8::new(0);
pub(super) const OUT_CLOSED: u8 = 1;
pub(super) const OUT_FAILED: u8 = 2;

/// Write `text` to stdout, never panicking (as `print!` does on a failed write). A closed pipe
/// (`status | head -1`) stops the output quietly, as shell tools do; another failure (`> /dev/full`)
/// is said once on stderr and makes the exit code 1 (see [`exit_code`]). After either, nothing
/// more is written.
pub(super) fn out(text: &str) {
    out_bytes(text.as_bytes());
}

/// [`out`] for bytes; what became of the writes so far (0, [`OUT_CLOSED`] or [`OUT_FAILED`]).
pub(super) fn out_bytes(bytes: &[u8]) -> u8 {
    use std::io::Write;
    let was = OUT.load(Ordering::Relaxed);
    if was != 0 {
        return was;
    }
    let mut o = std::io::stdout().lock();
    match o.write_all(bytes).and_then(|()| o.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            OUT.store(OUT_CLOSED, Ordering::Relaxed);
        }
        Err(e) => {
            OUT.store(OUT_FAILED, Ordering::Relaxed);
            say!("ccs-reap: failed to write to stdout: {e}");
        }
    }
    OUT.load(Ordering::Relaxed)
}

/// `events`' stdout: the same writer as every other command's ([`out_bytes`]), and a look,
/// without writing, at whether its reader is gone.
pub(super) struct Stdout;

impl crate::adapters::state::follow::Sink for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match out_bytes(bytes) {
            0 => Ok(()),
            OUT_CLOSED => Err(std::io::ErrorKind::BrokenPipe.into()),
            _ => Err(std::io::Error::other("stdout could not be written")),
        }
    }

    fn closed(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let fd = std::io::stdout();
        let mut fds = [PollFd::new(&fd, PollFlags::empty())];
        match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
            Ok(_) => fds[0]
                .revents()
                .intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL),
            Err(_) => false,
        }
    }
}

/// The exit code, once the output is written: 1 when stdout could not be written (but closed).
pub(super) fn exit_code(code: ExitCode) -> ExitCode {
    if OUT.load(Ordering::Relaxed) == OUT_FAILED {
        ExitCode::from(exit::FAILED)
    } else {
        code
    }
}

/// `status` and `--once` found no tmux server at the socket: not an error (a studio may not be
/// up yet; the exit code stays), but never silent: a wrong socket looks like a quiet studio.
pub(super) fn warn_no_server(rep: &crate::core::report::SweepReport) {
    if rep.tmux_server_up == Some(false) && rep.tmux_server_empty {
        say!(
            "ccs-reap: the tmux server at {} exited after its last chat was reaped (empty): nothing to sweep until the studio starts a chat",
            rep.socket_path
        );
    } else if rep.tmux_server_up == Some(false) {
        say!(
            "ccs-reap: warning: no tmux server at {}: nothing to sweep (check CCS_TMUX_SOCKET / CCS_TMUX_SOCKET_PATH and TMUX_TMPDIR; a PrivateTmp= unit sees its own /tmp)",
            rep.socket_path
        );
    }
}

/// `status` and `--once` could not read an activity file: every session is kept, said once, here
/// on stderr. Returns the report as stdout shows it: without its `liveness unknown` line when
/// that line would say this very error again.
pub(super) fn warn_activity(
    r: &Reaper,
    rep: &crate::core::report::SweepReport,
) -> crate::core::report::SweepReport {
    let mut shown = rep.clone();
    if let Some(e) = r.watching.activity_problem() {
        if rep.error.as_deref() == Some(e.as_str()) {
            shown.error = None;
        }
        say!("ccs-reap: warning: an activity file (CCS_ACTIVITY_FILES) is unreadable, every session is kept: {e}");
    }
    shown
}

pub(super) fn print_json<T: serde::Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => out(&format!("{s}\n")),
        Err(e) => say!("ccs-reap: failed to encode JSON: {e}"),
    }
}

pub(super) fn command_error(json: bool, e: CommandError) -> ExitCode {
    say!("ccs-reap: {e}");
    if json {
        print_json(&serde_json::json!({ "ok": false, "error": e.to_string() }));
    }
    ExitCode::from(exit::FAILED)
}

/// The answer of `pin` and `unpin`.
pub(super) fn pin_answer(
    json: bool,
    id: &str,
    r: Result<bool, CommandError>,
    done: &str,
) -> ExitCode {
    match r {
        Ok(true) => hook_answer(json, id, done, 0, None),
        Ok(false) => hook_answer(
            json,
            id,
            "gone",
            exit::RESPAWN,
            Some(format!("session {id} is gone")),
        ),
        Err(e) => command_error(json, e),
    }
}

/// The answer of `turn` and `spawn`: with `--json`, one JSON object on stdout, as every command.
pub(super) fn hook_answer(
    json: bool,
    session: &str,
    result: &str,
    code: u8,
    message: Option<String>,
) -> ExitCode {
    if let Some(m) = &message {
        say!("ccs-reap: {m}");
    }
    if json {
        print_json(&serde_json::json!({
            "ok": code == 0,
            "session": session,
            "result": result,
            "exit": code,
        }));
    }
    ExitCode::from(code)
}
