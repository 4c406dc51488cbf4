//! `doctor`'s checks of what a reap itself needs, beside the studio's wiring: this reaper sees
//! the tmux server's processes (its pid namespace), the state dir takes a reap's files, and each
//! claude-hook's binary is there and of this version. Each fails exactly where a reap would.

use std::path::Path;
use std::time::Duration;

use crate::adapters::program;
use crate::adapters::state::StateDir;
use crate::core::doctor::{hook_commands, program as program_of, same_version, Check, Verdict};

/// How long a hook's binary may take to say its version.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// `sight`: a server answered, and this reaper sees its processes as they are (else every reap
/// fails: nothing is signalled, no memory measured). `blind` is why it does not.
pub(super) fn sight_check(server_up: Option<bool>, blind: Option<&str>) -> Option<Check> {
    if server_up != Some(true) {
        return None;
    }
    Some(match blind {
        None => Check::new(
            "sight",
            Verdict::Ok,
            "this reaper sees the tmux server's processes",
        ),
        Some(why) => Check::new(
            "sight",
            Verdict::Problem,
            format!(
                "this reaper cannot see the tmux server's processes, so every reap fails: {why} (run it in the server's pid namespace: pid: \"service:<studio>\" in compose)"
            ),
        ),
    })
}

/// `state`: the state dir takes a reap's tombstone, journal and audit line (the check a reap
/// makes before its first signal: the studio's directories, made private as a reap would, and a
/// probe file, removed at once).
pub(super) fn state_check(state: &StateDir) -> Check {
    match state.check_writable() {
        Ok(()) => Check::new(
            "state",
            Verdict::Ok,
            format!("the state dir {} takes a reap's files", state.dir.display()),
        ),
        Err(e) => Check::new(
            "state",
            Verdict::Problem,
            format!("every reap fails: the state dir cannot take its files: {e}"),
        ),
    }
}

/// `hook-binary`: each claude-hook command of `settings` (read from `path`) runs a binary that
/// is there and says this version; one gone (an upgrade under pnpm, an uninstall) or of another
/// version is a problem: its chats never get their conversation id.
/// A binary already checked (`seen`, from another file) is not checked again.
pub(super) async fn hook_binary_checks(
    path: &Path,
    settings: &serde_json::Value,
    seen: &mut Vec<String>,
) -> Vec<Check> {
    let mut out = Vec::new();
    for c in hook_commands(settings) {
        let Some(prog) = program_of(&c) else { continue };
        if seen.contains(&prog) {
            continue;
        }
        seen.push(prog.clone());
        let Some(bin) = program::resolve(&prog) else {
            // A bare name is found through the PATH the hook gets, which may not be this one.
            out.push(if prog.contains('/') {
                Check::new(
                    "hook-binary",
                    Verdict::Problem,
                    format!(
                        "the claude-hook in {} runs {prog}, which is not an executable file here: its chats get no conversation id (run ccs-reap claude-settings --write {} again)",
                        path.display(),
                        path.display()
                    ),
                )
            } else {
                Check::new(
                    "hook-binary",
                    Verdict::Note,
                    format!(
                        "the claude-hook in {} runs {prog} by name, not found on this PATH (the hook's may differ); ccs-reap claude-settings --write {} names the binary by its path",
                        path.display(),
                        path.display()
                    ),
                )
            });
            continue;
        };
        let want = env!("CARGO_PKG_VERSION");
        out.push(match program::version(&bin, VERSION_TIMEOUT).await {
            Ok(v) if same_version(&v, want) => Check::new(
                "hook-binary",
                Verdict::Ok,
                format!("the claude-hook runs {} ({v})", bin.display()),
            ),
            Ok(v) => Check::new(
                "hook-binary",
                Verdict::Problem,
                format!(
                    "the claude-hook in {} runs {}, which says {v:?}, not ccs-reap {want} (run ccs-reap claude-settings --write {} again)",
                    path.display(),
                    bin.display(),
                    path.display()
                ),
            ),
            Err(e) => Check::new(
                "hook-binary",
                Verdict::Problem,
                format!("the claude-hook in {}: {e}", path.display()),
            ),
        });
    }
    out
}

/// Every settings file Claude Code reads, in its order of precedence from the lowest: the user's
/// (`$CLAUDE_CONFIG_DIR/settings.json`, else `~/.claude/settings.json`), then the project's and
/// the local one of this directory (`.claude/settings.json`, `.claude/settings.local.json`: run
/// `doctor` in the project). Those that exist, and the user's whether it exists or not.
pub(super) fn claude_settings_files() -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = super::claude_settings_path().into_iter().collect();
    if let Ok(cwd) = std::env::current_dir() {
        for f in ["settings.json", "settings.local.json"] {
            let p = cwd.join(".claude").join(f);
            if p.is_file() && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// [`hook_binary_checks`] of each settings file Claude Code reads that is there and JSON (the
/// `hook` check says what is wrong with one otherwise).
pub(super) async fn hook_binaries() -> Vec<Check> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for path in claude_settings_files() {
        if let Ok(v) = super::read_json(&path) {
            out.extend(hook_binary_checks(&path, &v, &mut seen).await);
        }
    }
    out
}
