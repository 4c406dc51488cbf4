//! What a reaped chat's tombstone keeps of its command line: the agent's argv without its own id
//! flags, and the agent's name. Pure: the process table's reads are handed in.

use super::{of_argv, pane_words};

/// The command line a reaped chat's tombstone keeps: what `spawn` ran it with (`@ccs_argv`),
/// else its pane process's (`sh -c '<cmd>'` is `<cmd>`), without its own id flags (by the
/// descriptor of the agent it runs); `None` when neither starts an agent. `cmdline` reads a
/// process's command line and `children` its children's pids, only as far as needed.
pub fn kept_argv(
    option: Option<&Vec<String>>,
    pane_pids: &[u32],
    cmdline: impl Fn(u32) -> Option<Vec<String>>,
    children: impl Fn(u32) -> Vec<u32>,
) -> Option<Vec<String>> {
    let bare = |a: &[String]| (of_argv(a)?.bare_argv)(a).ok();
    if let Some(a) = option.and_then(|a| bare(a)) {
        return Some(a);
    }
    let words_of = |pid: u32| {
        let words = pane_words(&cmdline(pid)?);
        bare(&words)
    };
    // The pane's own process (`exec claude ...`, or `sh -c '<words>'` that splits plainly); else
    // the agent it started (a studio's `sh -c` string with quoting in it: the agent's own argv,
    // as the kernel holds it, needs no shell to read).
    pane_pids.iter().find_map(|&pid| words_of(pid)).or_else(|| {
        pane_pids
            .iter()
            .flat_map(|&pid| children(pid))
            .find_map(words_of)
    })
}

/// The name of the agent a kept command line runs, for the tombstone.
pub fn agent_name(argv: Option<&[String]>) -> Option<String> {
    of_argv(argv?).map(|a| a.name.to_string())
}
