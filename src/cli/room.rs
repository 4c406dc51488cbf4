//! `ccs-reap room`: the answer (a line, or `--json`) and its exit code.

use std::process::ExitCode;
use std::sync::Arc;

use crate::cli::exit;
use crate::cli::output::{out, print_json};
use crate::core::policy::Need;
use crate::engine::context::Reaper;
use crate::engine::room::{self, RoomDone, RoomError};

/// `--need SIZE|auto`, or why not.
pub(super) fn parse_need(s: &str) -> Result<Need, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(Need::Auto);
    }
    crate::core::units::parse_mem_size(t)
        .map(Need::Bytes)
        .map_err(|e| match e {
            crate::core::units::SizeError::Ambiguous(n) => format!(
                "--need {n} is ambiguous (bytes? megabytes?): give a unit, such as {n}M, or auto"
            ),
            crate::core::units::SizeError::Garbage => {
                format!(
                    "--need {s:?} is not a size: a size such as 400M or 1G (binary units), or auto"
                )
            }
        })
}

/// Make room, and say what was done: exit 0, [`exit::NO_ROOM`] or [`exit::FAILED`].
pub(super) async fn room(
    r: &Arc<Reaper>,
    json: bool,
    need: Need,
    for_id: Option<String>,
) -> ExitCode {
    let call = room::RoomCall {
        need,
        for_id,
        skip_if_live: false,
        lock_wait: room::LOCK_WAIT,
    };
    match room::room(r, call).await {
        Ok(d) => {
            answer(json, &d, true, None);
            ExitCode::from(exit::OK)
        }
        Err(RoomError::NoRoom(d)) => {
            let why = room::left(&d.plan);
            say!("ccs-reap: no room for a new chat: {why}");
            answer(json, &d, false, Some(why));
            ExitCode::from(exit::NO_ROOM)
        }
        Err(e) => {
            say!("ccs-reap: room: {e}");
            if json {
                // Told apart: a memory limit whose usage could not be read is no room claimed.
                let result = match e {
                    RoomError::MemoryUnknown(_) => "memory-unknown",
                    _ => "failed",
                };
                print_json(&serde_json::json!({
                    "ok": false, "result": result, "error": e.to_string(), "exit": exit::FAILED,
                }));
            }
            ExitCode::from(exit::FAILED)
        }
    }
}

fn answer(json: bool, d: &RoomDone, ok: bool, why: Option<String>) {
    if json {
        print_json(&serde_json::json!({
            "ok": ok,
            "exit": if ok { exit::OK } else { exit::NO_ROOM },
            "error": why,
            "need_bytes": d.plan.need_bytes,
            "need_auto": d.plan.need_auto,
            "freed": d.freed,
            "freed_bytes": d.freed_bytes,
            "not_reaped": d.not_reaped,
            "took_ms": d.took_ms,
            "plan": d.plan,
        }));
    } else if ok {
        let names: Vec<&str> = d.freed.iter().map(|f| f.session.as_str()).collect();
        out(&format!(
            "room for a new chat of {} bytes{}: freed {} chat(s) ({} bytes){} in {} ms\n",
            d.plan.need_bytes,
            if d.plan.need_auto { " (auto)" } else { "" },
            d.freed.len(),
            d.freed_bytes,
            if names.is_empty() {
                String::new()
            } else {
                format!(": {}", names.join(", "))
            },
            d.took_ms
        ));
    }
}

/// `spawn`'s room, made once its checks passed, just before the chat starts.
pub(super) struct Before<'a> {
    pub r: &'a Reaper,
    pub id: &'a str,
}

impl crate::engine::resume::MakeRoom for Before<'_> {
    fn make(&self) -> crate::engine::resume::RoomFuture<'_> {
        Box::pin(room::before_start(self.r, self.id))
    }
}

/// `spawn` found no room (`why`): the chat was not started, [`exit::NO_ROOM`].
pub(super) fn no_room(json: bool, id: &str, why: &str) -> ExitCode {
    say!("ccs-reap: spawn {id}: not started, no room for a new chat: {why} (--no-room spawns anyway)");
    if json {
        print_json(&serde_json::json!({
            "ok": false, "session": id, "result": "no-room", "exit": exit::NO_ROOM, "error": why,
        }));
    }
    ExitCode::from(exit::NO_ROOM)
}
